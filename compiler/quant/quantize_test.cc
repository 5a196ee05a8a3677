#include "compiler/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/dtype.h"

namespace llmc::quant {
namespace {

using ::testing::HasSubstr;

std::vector<float> Gaussian(int64_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

double SquaredError(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
  return sum;
}

// Plain absmax round-to-nearest written from plan.proto's formulas, independent of the
// quantizer: the clipping search must never do worse than this.
std::vector<float> AbsmaxReference(const std::vector<float>& w, int64_t rows, int64_t cols,
                                   const QuantFormat& format) {
  std::vector<float> out(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < cols; g += format.group_size) {
      float low = 0, high = 0, magnitude = 0;
      for (int64_t c = g; c < g + format.group_size; ++c) {
        low = std::min(low, w[r * cols + c]);
        high = std::max(high, w[r * cols + c]);
        magnitude = std::max(magnitude, std::fabs(w[r * cols + c]));
      }
      float scale =
          format.asymmetric ? (high - low) / 15 : magnitude / (format.bits == 8 ? 127 : 7);
      scale = llmrt::plan::F16ToF32(llmrt::plan::F32ToF16(scale));
      const float zero = format.asymmetric ? std::nearbyint(-low / scale) : 0;
      const float lo = format.bits == 8 ? -127 : format.asymmetric ? 0 : -8;
      const float hi = format.bits == 8 ? 127 : format.asymmetric ? 15 : 7;
      for (int64_t c = g; c < g + format.group_size; ++c) {
        const float level = std::clamp(std::nearbyint(w[r * cols + c] / scale) + zero, lo, hi);
        out[r * cols + c] = (level - zero) * scale;
      }
    }
  }
  return out;
}

TEST(QuantizeTest, ErrorIsWithinHalfAStepAndNoWorseThanAbsmax) {
  const int64_t rows = 8, cols = 128;
  const std::vector<float> weights = Gaussian(rows * cols, 1);
  for (QuantFormat format :
       {QuantFormat{8, cols, false}, QuantFormat{8, 32, false}, QuantFormat{4, 32, false},
        QuantFormat{4, 64, true}, QuantFormat{4, 128, true}}) {
    SCOPED_TRACE(format.ToString());
    absl::StatusOr<QuantizedMatrix> matrix = QuantizeMatrix(weights, rows, cols, format);
    ASSERT_TRUE(matrix.ok()) << matrix.status();
    const std::vector<float> restored = DequantizeMatrix(*matrix);
    const double error = SquaredError(weights, restored);
    const double absmax_error = SquaredError(weights, AbsmaxReference(weights, rows, cols, format));
    EXPECT_LE(error, absmax_error * (1 + 1e-9));
    // Relative RMS error: int8 ~0.5%, int4 ~8% of the weights' RMS on Gaussian weights.
    double energy = 0;
    for (float w : weights) energy += w * static_cast<double>(w);
    EXPECT_LT(std::sqrt(error / energy), format.bits == 8 ? 0.01 : 0.12);
  }
}

TEST(QuantizeTest, Int4PackingFollowsThePlanLayout) {
  // One row of 64 columns with distinct codes: a ramp that hits each of the 16 levels.
  const int64_t cols = 64;
  std::vector<float> weights(cols);
  for (int64_t c = 0; c < cols; ++c) weights[c] = static_cast<float>(c % 16) - 8.0f;
  absl::StatusOr<QuantizedMatrix> matrix = QuantizeMatrix(weights, 1, cols, {4, 32, false});
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  ASSERT_EQ(matrix->codes.size(), 32u);
  // Scale 1 (-8 is the signed maximum: Q4_0's choice is exact), so code = value + 8 = c % 16.
  EXPECT_EQ(llmrt::plan::F16ToF32(matrix->scales[0]), 1.0f);
  // LANE_CHUNKS (plan.proto): 2 runs make one short chunk of 4 slices of 8 bytes; byte 4j + i
  // of slice v holds columns 8v + i (low nibble) and 8v + 4 + i (high) of run j.
  for (int64_t slice = 0; slice < 4; ++slice) {
    for (int64_t run = 0; run < 2; ++run) {
      for (int64_t i = 0; i < 4; ++i) {
        const uint8_t byte = matrix->codes[slice * 8 + run * 4 + i];
        EXPECT_EQ(byte & 0x0f, (run * 32 + slice * 8 + i) % 16);
        EXPECT_EQ(byte >> 4, (run * 32 + slice * 8 + 4 + i) % 16);
      }
    }
  }
  EXPECT_EQ(DequantizeMatrix(*matrix), weights);
}

TEST(QuantizeTest, AsymmetricZeroPointsAndInt8Codes) {
  // All-positive group: asymmetric puts the zero point at code 0 and uses all 16 levels.
  std::vector<float> weights(32);
  for (int i = 0; i < 32; ++i) weights[i] = static_cast<float>(i % 16) * 0.5f;
  absl::StatusOr<QuantizedMatrix> asym = QuantizeMatrix(weights, 1, 32, {4, 32, true});
  ASSERT_TRUE(asym.ok());
  EXPECT_EQ(asym->zero_points[0], 0);
  EXPECT_EQ(DequantizeMatrix(*asym), weights);

  std::vector<float> int8_weights = {1.27f, -0.635f, 0.0f, 0.01f};
  absl::StatusOr<QuantizedMatrix> int8 = QuantizeMatrix(int8_weights, 1, 4, {8, 4, false});
  ASSERT_TRUE(int8.ok());
  EXPECT_EQ(int8->Code(0, 0), 127);
  EXPECT_EQ(int8->Code(0, 1), std::nearbyint(-0.635f / llmrt::plan::F16ToF32(int8->scales[0])));
  EXPECT_EQ(int8->Code(0, 2), 0);
}

TEST(QuantizeTest, ZeroGroupsAndPermutation) {
  std::vector<float> weights(64, 0.0f);
  weights[40] = 1.0f;
  absl::StatusOr<QuantizedMatrix> matrix = QuantizeMatrix(weights, 1, 64, {4, 32, true});
  ASSERT_TRUE(matrix.ok());
  const std::vector<float> restored = DequantizeMatrix(*matrix);
  for (int c = 0; c < 64; ++c) EXPECT_NEAR(restored[c], weights[c], 1e-3) << c;  // f16 scale
  // A permutation moves stored columns back to their original place.
  matrix->input_permutation.resize(64);
  for (int c = 0; c < 64; ++c) matrix->input_permutation[c] = 63 - c;
  const std::vector<float> permuted = DequantizeMatrix(*matrix);
  EXPECT_NEAR(permuted[63 - 40], 1.0f, 1e-3);
  EXPECT_EQ(permuted[40], 0.0f);
}

// Large matrices are split across threads (rows x cols >= 2^17 here): every row must come out
// exactly as it does when quantized alone (one row: one thread).
TEST(QuantizeTest, ThreadedRowsEqualRowsQuantizedAlone) {
  const int64_t rows = 67, cols = 2048;
  const std::vector<float> weights = Gaussian(rows * cols, 7);
  for (QuantFormat format : {QuantFormat{8, cols, false}, QuantFormat{4, 32, true}}) {
    SCOPED_TRACE(format.ToString());
    absl::StatusOr<QuantizedMatrix> whole = QuantizeMatrix(weights, rows, cols, format);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const int64_t row_bytes = format.bits == 8 ? cols : cols / 2;
    const int64_t groups = cols / format.group_size;
    for (int64_t r = 0; r < rows; ++r) {
      absl::StatusOr<QuantizedMatrix> alone =
          QuantizeMatrix(absl::MakeConstSpan(weights).subspan(r * cols, cols), 1, cols, format);
      ASSERT_TRUE(alone.ok());
      ASSERT_TRUE(std::equal(alone->codes.begin(), alone->codes.end(),
                             whole->codes.begin() + r * row_bytes))
          << "row " << r;
      ASSERT_TRUE(std::equal(alone->scales.begin(), alone->scales.end(),
                             whole->scales.begin() + r * groups))
          << "row " << r;
    }
  }
}

TEST(QuantizeTest, FormatErrorsNameTheProblem) {
  EXPECT_THAT(CheckFormat({4, 32, false}, 172, "layers.0.mlp.down_proj").message(),
              HasSubstr("does not divide the 172 input columns"));
  EXPECT_THAT(CheckFormat({8, 16, false}, 64, "w").message(), HasSubstr("multiples of 32"));
  EXPECT_THAT(CheckFormat({8, 64, true}, 64, "w").message(), HasSubstr("int4 only"));
  EXPECT_THAT(CheckFormat({3, 32, false}, 64, "w").message(), HasSubstr("bits must be 8 or 4"));
  EXPECT_TRUE(CheckFormat({8, 172, false}, 172, "w").ok());  // per channel: any width
  EXPECT_FALSE(QuantizeMatrix(std::vector<float>(10), 1, 64, {8, 64, false}).ok());
}

}  // namespace
}  // namespace llmc::quant
