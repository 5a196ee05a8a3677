#include "compiler/quant/awq.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/quant/gptq.h"
#include "runtime/engine/model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmc::quant {
namespace {

// Calibration tokens: at most kMaxCalibrationRows in all, run in windows of at most this many
// (and at most the model's context), each in a fresh session: the built-in text is 1,065
// tokens with stories260K's tokenizer, whose context is 512.
constexpr int64_t kCalibrationWindow = 512;
// Floor of mean|x| before the power: channels that are always ~0 would get scales ~0 and blow
// up their weights.
constexpr float kMinMeanMagnitude = 1e-4f;

// Rows [0, num_rows) subsampled evenly down to `keep` rows.
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

}  // namespace

absl::StatusOr<std::map<std::string, Activations>> CollectActivations(
    const std::string& float_plan_path, const std::string& text) {
  std::map<std::string, Activations> collected;
  std::vector<std::string> op_weight_names;
  llmrt::engine::ModelOptions options;
  options.backend = llmrt::engine::BackendChoice::kCpu;
  options.max_tokens_per_step = static_cast<int32_t>(kCalibrationWindow);
  options.kv_cache_tokens = kCalibrationWindow;
  options.matmul_observer = [&](int32_t op_index, const float* input, int64_t num_rows,
                                int64_t width) {
    if (op_index < 0 || op_index >= static_cast<int32_t>(op_weight_names.size())) return;
    Activations& activations = collected[op_weight_names[op_index]];
    activations.width = width;
    activations.rows.insert(activations.rows.end(), input, input + num_rows * width);
    activations.num_rows += num_rows;
  };
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model =
      llmrt::engine::Model::Load(float_plan_path, options);
  if (!model.ok()) return model.status();
  const llmrt::plan::PlanMeta& meta = (*model)->meta();
  for (const llmrt::plan::Op& op : meta.program().ops()) {
    op_weight_names.push_back(op.weights_size() > 0 ? meta.tensors(op.weights(0)).name() : "");
  }
  absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer =
      llmrt::Tokenizer::Create(meta.tokenizer());
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<int32_t> tokens = (*tokenizer)->Encode(text);
  if (static_cast<int64_t>(tokens.size()) > kMaxCalibrationRows) {
    tokens.resize(kMaxCalibrationRows);
  }
  if (tokens.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AWQ calibration: the text gives %d tokens; at least 2 are needed", tokens.size()));
  }
  const int64_t window = std::min<int64_t>(kCalibrationWindow, (*model)->max_context());
  size_t begin = 0;
  while (begin < tokens.size()) {
    // Later windows start with BOS, as every sequence the model saw in training.
    std::vector<int32_t> chunk;
    if (begin > 0 && (*tokenizer)->bos_id() >= 0) chunk.push_back((*tokenizer)->bos_id());
    const size_t end = std::min(tokens.size(), begin + window - chunk.size());
    chunk.insert(chunk.end(), tokens.begin() + begin, tokens.begin() + end);
    absl::StatusOr<std::vector<float>> logits = (*model)->NewSession()->Append(chunk, false);
    if (!logits.ok()) return logits.status();
    begin = end;
  }
  for (auto& [name, activations] : collected) {
    activations = Subsample(activations, kMaxCalibrationRows);
  }
  return collected;
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
