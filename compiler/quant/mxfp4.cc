#include "compiler/quant/mxfp4.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"

namespace llmc::quant {
namespace {

constexpr int kZeroExponent = 127;  // 2^0: the exponent of an all-zero block
constexpr int kMaxExponent = 254;   // 255 is NaN
// log2 of the largest E2M1 magnitude's power of two (6 = 1.5 * 2^2): the OCP rule's "- 2".
constexpr int kE2M1MaxPow2 = 2;

// Midpoints between consecutive E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
constexpr float kMidpoints[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

}  // namespace

uint8_t Mxfp4OcpExponent(float amax) {
  if (amax == 0.0f) return kZeroExponent;
  // ilogb is floor(log2 |x|) exactly, denormals included (no libm rounding of log2).
  const int exponent = std::ilogb(amax) - kE2M1MaxPow2 + 127;
  return static_cast<uint8_t>(std::clamp(exponent, 0, kMaxExponent));
}

int E2M1Code(float ratio) {
  const float magnitude = std::fabs(ratio);
  int code = 0;
  // Magnitude code i + 1 wins over i above the midpoint, and at it when i + 1 is even (its
  // mantissa bit, bit 0, is clear): round half to even mantissa.
  for (int i = 0; i < 7; ++i) {
    if (magnitude > kMidpoints[i] || (magnitude == kMidpoints[i] && (i + 1) % 2 == 0)) code = i + 1;
  }
  return std::signbit(ratio) ? code | 8 : code;
}

double QuantizeMxfp4Block(const float* values, int64_t count, uint8_t exponent, uint8_t* codes) {
  const float scale = llmrt::plan::E8M0ToF32(exponent);
  const float inverse = llmrt::plan::E8M0ToF32(static_cast<uint8_t>(2 * 127 - exponent));
  double error = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    // Times 2^(127 - e), itself an E8M0 value: exact (a power of two) unless the ratio
    // underflows, and a ratio that small rounds to 0 either way.
    codes[i] = static_cast<uint8_t>(E2M1Code(values[i] * inverse));
    // The value as a reader decodes it, in f32: near the top of the range the e + 1 candidate can
    // decode to infinity (4 * 2^126), an infinite error.
    const float decoded = llmrt::plan::kE2M1Values[codes[i]] * scale;
    const double difference = static_cast<double>(values[i]) - static_cast<double>(decoded);
    error += difference * difference;
  }
  return error;
}

absl::StatusOr<QuantizedMatrix> QuantizeMxfp4(absl::Span<const float> weights, int64_t rows,
                                              int64_t cols) {
  const QuantFormat format = QuantFormat::Mxfp4();
  if (absl::Status status = CheckFormat(format, cols, "quantize"); !status.ok()) return status;
  if (static_cast<int64_t>(weights.size()) != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantize: %d weights for a [%d, %d] matrix", weights.size(), rows, cols));
  }
  constexpr int64_t kBlock = llmrt::plan::kMxfp4Block;
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (!std::isfinite(weights[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("quantize: weight [%d, %d] is %f; MXFP4 needs finite weights", i / cols,
                          i % cols, weights[i]));
    }
  }
  QuantizedMatrix matrix;
  matrix.format = format;
  matrix.rows = rows;
  matrix.cols = cols;
  matrix.codes.resize(rows * cols / 2);
  matrix.exponents.resize(rows * cols / kBlock);
  // Rows are independent: contiguous chunks of them per thread, each writing only its rows.
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> row_codes(cols);
    uint8_t candidate[kBlock];
    for (int64_t row = begin; row < end; ++row) {
      const float* values = weights.data() + row * cols;
      for (int64_t block = 0; block < cols / kBlock; ++block) {
        const float* block_values = values + block * kBlock;
        float amax = 0.0f;
        for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(block_values[i]));
        uint8_t exponent = Mxfp4OcpExponent(amax);
        uint8_t* codes = row_codes.data() + block * kBlock;
        const double error = QuantizeMxfp4Block(block_values, kBlock, exponent, codes);
        if (amax != 0.0f && exponent < kMaxExponent &&
            QuantizeMxfp4Block(block_values, kBlock, exponent + 1, candidate) < error) {
          exponent += 1;
          std::copy_n(candidate, kBlock, codes);
        }
        matrix.exponents[row * (cols / kBlock) + block] = exponent;
      }
      llmrt::plan::PackInt4Row(row_codes.data(), cols, matrix.codes.data() + row * cols / 2);
    }
  };
  ForRowChunks(rows, cols, quantize_rows);
  return matrix;
}

}  // namespace llmc::quant
