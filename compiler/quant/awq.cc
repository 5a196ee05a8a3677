#include "compiler/quant/awq.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/quant/gptq.h"

namespace llmc::quant {
namespace {

// Floor of mean|x| before the power: channels that are always ~0 would get scales ~0 and blow
// up their weights.
constexpr float kMinMeanMagnitude = 1e-4f;

}  // namespace

Activations Subsample(const Activations& all, int64_t keep) {
  if (all.num_rows <= keep) return all;
  Activations kept;
  kept.width = all.width;
  kept.num_rows = keep;
  kept.rows.resize(keep * all.width);
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t source = i * all.num_rows / keep;
    std::copy_n(all.rows.begin() + source * all.width, all.width,
                kept.rows.begin() + i * all.width);
  }
  return kept;
}

absl::StatusOr<AwqScales> SearchScales(absl::Span<const float> weights, int64_t rows, int64_t cols,
                                       const Activations& all_activations,
                                       const QuantFormat& format,
                                       absl::Span<const int32_t> tie_groups) {
  const Activations activations = Subsample(all_activations, kAwqSearchRows);
  if (activations.width != cols || activations.num_rows == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AWQ: calibration rows have width %d, the weights %d columns", activations.width, cols));
  }
  if (!tie_groups.empty() && static_cast<int64_t>(tie_groups.size()) != cols) {
    return absl::InvalidArgumentError("AWQ: tie_groups must have one entry per column");
  }
  // mean |x| per channel, averaged within tie groups.
  std::vector<double> mean(cols, 0.0);
  for (int64_t t = 0; t < activations.num_rows; ++t) {
    for (int64_t k = 0; k < cols; ++k) mean[k] += std::fabs(activations.rows[t * cols + k]);
  }
  if (!tie_groups.empty()) {
    std::map<int32_t, std::pair<double, int>> groups;
    for (int64_t k = 0; k < cols; ++k) {
      groups[tie_groups[k]].first += mean[k];
      groups[tie_groups[k]].second += 1;
    }
    for (int64_t k = 0; k < cols; ++k) {
      const auto& [sum, count] = groups[tie_groups[k]];
      mean[k] = sum / count;
    }
  }
  for (double& value : mean) {
    value = std::max<double>(value / activations.num_rows, kMinMeanMagnitude);
  }

  // mean over rows of |W| relative to its group's maximum, per input channel: AutoAWQ's
  // "duo scaling", which also favours channels whose weights are small within their group.
  std::vector<double> weight_mean(cols, 0.0);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t g = 0; g < cols; g += format.group_size) {
      float magnitude = 0;
      for (int64_t k = g; k < g + format.group_size; ++k) {
        magnitude = std::max(magnitude, std::fabs(weights[n * cols + k]));
      }
      if (magnitude == 0) continue;
      for (int64_t k = g; k < g + format.group_size; ++k) {
        weight_mean[k] += std::fabs(weights[n * cols + k]) / magnitude;
      }
    }
  }
  for (double& value : weight_mean) {
    value = std::max<double>(value / rows, kMinMeanMagnitude);
  }

  AwqScales best;
  std::vector<float> scaled(rows * cols), unscaled(rows * cols), scales(cols);
  // Point -1 is s = 1 (plain RTN); then s = mean|x|^alpha / weight_mean^(1 - alpha).
  for (int point = -1; point < kAlphaGridPoints; ++point) {
    const double alpha = point < 0 ? 0.0 : static_cast<double>(point) / (kAlphaGridPoints - 1);
    double low = INFINITY, high = 0;
    for (int64_t k = 0; k < cols; ++k) {
      scales[k] = point < 0 ? 1.0f
                            : static_cast<float>(std::pow(mean[k], alpha) /
                                                 std::pow(weight_mean[k], 1.0 - alpha));
      low = std::min<double>(low, scales[k]);
      high = std::max<double>(high, scales[k]);
    }
    const double normaliser = std::sqrt(low * high);
    for (float& scale : scales) scale = static_cast<float>(scale / normaliser);
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t k = 0; k < cols; ++k) scaled[n * cols + k] = weights[n * cols + k] * scales[k];
    }
    absl::StatusOr<QuantizedMatrix> quantized = QuantizeMatrix(scaled, rows, cols, format);
    if (!quantized.ok()) return quantized.status();
    const std::vector<float> restored = DequantizeMatrix(*quantized);
    for (int64_t n = 0; n < rows; ++n) {
      for (int64_t k = 0; k < cols; ++k) {
        unscaled[n * cols + k] = restored[n * cols + k] / scales[k];
      }
    }
    const double loss = LinearOutputError(weights, unscaled, rows, cols, activations);
    if (point < 0) best.rtn_loss = loss;
    if (point < 0 || loss < best.loss) {
      best.loss = loss;
      best.alpha = alpha;
      best.scales = scales;
    }
  }
  return best;
}

}  // namespace llmc::quant
