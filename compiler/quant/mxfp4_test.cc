#include "compiler/quant/mxfp4.h"

#include <cmath>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/quant/quantize.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/mxfp4.h"

namespace llmc::quant {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBlock = 32;

struct ReferenceBlock {
  std::string name;
  std::vector<float> values;
  int exponent = 0;
  std::vector<int> codes;
};

// torchao's MXFP4 (FLOOR = the OCP v1.0 scale rule) of corner-case blocks, written by
// testdata/make_mxfp4_reference.py.
std::vector<ReferenceBlock> LoadReference() {
  std::ifstream file(LLMC_QUANT_TESTDATA_DIR "/mxfp4_reference.json");
  const nlohmann::json json = nlohmann::json::parse(file);
  std::vector<ReferenceBlock> blocks;
  for (const nlohmann::json& block : json.at("blocks")) {
    blocks.push_back({block.at("name"), block.at("values").get<std::vector<float>>(),
                      block.at("exponent").get<int>(), block.at("codes").get<std::vector<int>>()});
  }
  return blocks;
}

TEST(Mxfp4Test, OcpCandidateEqualsTorchaoElementForElement) {
  const std::vector<ReferenceBlock> blocks = LoadReference();
  ASSERT_GE(blocks.size(), 30u);
  for (const ReferenceBlock& block : blocks) {
    SCOPED_TRACE(block.name);
    ASSERT_EQ(block.values.size(), static_cast<size_t>(kBlock));
    float amax = 0.0f;
    for (float value : block.values) amax = std::max(amax, std::fabs(value));
    const uint8_t exponent = Mxfp4OcpExponent(amax);
    // An all-zero block's scale multiplies only zeros: torchao writes exponent byte 0, we write
    // 127 (2^0, moe-design.md §6); the codes must agree.
    if (amax != 0.0f) EXPECT_EQ(exponent, block.exponent);
    // For exponent byte 0 torchao divides by 2^-126 (it clamps its f32 scale to the smallest
    // normal) though the byte decodes as 2^-127; we divide by what a reader multiplies by. Its
    // codes there are ours for half the values.
    std::vector<float> values = block.values;
    if (exponent == 0) {
      for (float& value : values) value *= 0.5f;
    }
    uint8_t codes[kBlock];
    QuantizeMxfp4Block(values.data(), kBlock, exponent, codes);
    for (int64_t i = 0; i < kBlock; ++i) {
      EXPECT_EQ(codes[i], block.codes[i]) << "element " << i << " value " << block.values[i];
    }
  }
}

// The exponent QuantizeMxfp4 keeps never does worse than the OCP one, and the codes it writes
// decode to the values the error was computed on.
TEST(Mxfp4Test, ChosenExponentNeverWorseThanOcp) {
  std::vector<float> weights;
  for (const ReferenceBlock& block : LoadReference()) {
    weights.insert(weights.end(), block.values.begin(), block.values.end());
  }
  std::mt19937 generator(7);
  std::student_t_distribution<float> heavy(3.0f);  // outliers: blocks whose amax ratio is in (6, 8)
  for (int i = 0; i < 64 * kBlock; ++i) weights.push_back(heavy(generator) * 0.02f);
  const int64_t rows = static_cast<int64_t>(weights.size()) / (2 * kBlock), cols = 2 * kBlock;
  absl::StatusOr<QuantizedMatrix> matrix = QuantizeMxfp4(weights, rows, cols);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  EXPECT_EQ(matrix->format.ToString(), "mxfp4 g32");
  EXPECT_TRUE(matrix->scales.empty());
  ASSERT_EQ(matrix->exponents.size(), static_cast<size_t>(rows * 2));
  const std::vector<float> decoded = DequantizeMatrix(*matrix);
  int improved = 0;
  for (int64_t block = 0; block < rows * 2; ++block) {
    const float* values = weights.data() + block * kBlock;
    float amax = 0.0f;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(values[i]));
    uint8_t codes[kBlock];
    const double ocp = QuantizeMxfp4Block(values, kBlock, Mxfp4OcpExponent(amax), codes);
    double chosen = 0.0;
    for (int64_t i = 0; i < kBlock; ++i) {
      const double difference = values[i] - static_cast<double>(decoded[block * kBlock + i]);
      chosen += difference * difference;
    }
    EXPECT_LE(chosen, ocp) << "block " << block;
    const uint8_t exponent = matrix->exponents[block];
    EXPECT_TRUE(exponent == Mxfp4OcpExponent(amax) || exponent == Mxfp4OcpExponent(amax) + 1);
    if (chosen < ocp) ++improved;
  }
  // The heavy-tailed rows have blocks the OCP exponent clips (amax / scale in (6, 8)).
  EXPECT_GT(improved, 0);
}

TEST(Mxfp4Test, DequantizeIsE2M1TimesPowerOfTwo) {
  std::vector<float> weights(kBlock, 0.0f);
  weights[0] = 6.0f * 0.125f;  // amax 0.75: OCP exponent floor(log2 0.75) - 2 = -3
  weights[1] = -0.5f * 0.125f;
  weights[2] = 0.0625f * 0.125f;  // below half the smallest step: 0
  absl::StatusOr<QuantizedMatrix> matrix = QuantizeMxfp4(weights, 1, kBlock);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  EXPECT_EQ(matrix->exponents[0], 127 - 3);
  EXPECT_EQ(matrix->Code(0, 0), 7);
  EXPECT_EQ(matrix->Code(0, 1), 9);
  const std::vector<float> decoded = DequantizeMatrix(*matrix);
  EXPECT_EQ(decoded[0], 0.75f);
  EXPECT_EQ(decoded[1], -0.0625f);
  EXPECT_EQ(decoded[2], 0.0f);
}

TEST(Mxfp4Test, FormatAndInputErrorsNamed) {
  QuantFormat format = QuantFormat::Mxfp4();
  EXPECT_TRUE(CheckFormat(format, 64, "w").ok());
  format.group_size = 64;
  EXPECT_THAT(CheckFormat(format, 64, "w").message(), HasSubstr("group size 32"));
  format = QuantFormat::Mxfp4();
  format.asymmetric = true;
  EXPECT_THAT(CheckFormat(format, 64, "w").message(), HasSubstr("asymmetric"));
  EXPECT_THAT(CheckFormat(QuantFormat::Mxfp4(), 48, "w").message(), HasSubstr("found 48"));
  std::vector<float> weights(2 * kBlock, 1.0f);
  weights[kBlock + 5] = NAN;
  EXPECT_THAT(QuantizeMxfp4(weights, 2, kBlock).status().message(), HasSubstr("[1, 5]"));
  // QuantizeMatrix hands MXFP4 formats to QuantizeMxfp4.
  weights[kBlock + 5] = 2.0f;
  absl::StatusOr<QuantizedMatrix> via = QuantizeMatrix(weights, 2, kBlock, QuantFormat::Mxfp4());
  ASSERT_TRUE(via.ok()) << via.status();
  EXPECT_TRUE(via->format.mxfp4());
  EXPECT_EQ(DequantizeMatrix(*via)[kBlock + 5], 2.0f);
}

}  // namespace
}  // namespace llmc::quant
