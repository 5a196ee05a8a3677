#include "compiler/quant/prequantized.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmc::quant {
namespace {

using ::testing::HasSubstr;

// One GPTQ linear "l" with N = 8 outputs, K = 32 inputs, group 32, codes c(k, n) = (k + n) % 16,
// every zero point 8 (stored as 7: v1), scales 1.0 (f16 0x3C00), held in memory.
class PrequantizedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One directory per test: ctest runs the tests of this fixture in parallel processes.
    dir_ = ::testing::TempDir() + "/prequantized_test_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
    WriteConfig(R"({"quantization_config": {"quant_method": "gptq", "bits": 4,
                    "group_size": 32, "desc_act": false, "sym": true}})");
    qweight_.assign(4 * 8, 0);
    for (int k = 0; k < 32; ++k) {
      for (int n = 0; n < 8; ++n) qweight_[(k / 8) * 8 + n] |= ((k + n) % 16) << (4 * (k % 8));
    }
    qzeros_.assign(1, 0);
    for (int n = 0; n < 8; ++n) qzeros_[0] |= 7 << (4 * n);
    scales_.assign(8, 0x3C00);
    Add("l.qweight", llmrt::plan::I32, {4, 8}, qweight_.data(), qweight_.size() * 4);
    Add("l.qzeros", llmrt::plan::I32, {1, 1}, qzeros_.data(), 4);
    Add("l.scales", llmrt::plan::F16, {1, 8}, scales_.data(), 16);
  }
  void WriteConfig(const std::string& json) { std::ofstream(dir_ + "/config.json") << json; }
  void Add(const std::string& name, llmrt::plan::DType dtype, std::vector<int64_t> shape,
           const void* data, uint64_t bytes) {
    TensorInfo& info = tensors_[name];
    info.name = name;
    info.file = "model.safetensors";
    info.dtype = dtype;
    info.shape = std::move(shape);
    info.data = static_cast<const uint8_t*>(data);
    info.size_bytes = bytes;
  }
  std::string dir_;
  std::vector<uint32_t> qweight_, qzeros_;
  std::vector<uint16_t> scales_;
  std::map<std::string, TensorInfo> tensors_;
};

TEST_F(PrequantizedTest, RepacksGptqWithoutDequantizing) {
  absl::StatusOr<PrequantizedCheckpoint> imported = ImportPrequantized(dir_, tensors_);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->method, "gptq");
  EXPECT_FALSE(imported->format.asymmetric);  // every zero point is 8 (stored 7, v1 format)
  ASSERT_TRUE(imported->matrices.count("l.weight"));
  EXPECT_EQ(imported->tensors.count("l.qweight"), 0u);
  EXPECT_EQ(imported->tensors.at("l.weight").shape, (std::vector<int64_t>{8, 32}));
  const QuantizedMatrix& matrix = imported->matrices.at("l.weight");
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 32; ++k) EXPECT_EQ(matrix.Code(n, k), (k + n) % 16) << n << ", " << k;
  }
  EXPECT_TRUE(matrix.input_permutation.empty());
}

TEST_F(PrequantizedTest, ErrorsNameTheFieldOrTensor) {
  WriteConfig(R"({"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 32}})");
  EXPECT_THAT(ImportPrequantized(dir_, tensors_).status().message(),
              HasSubstr("quantization_config.bits is 8; only 4-bit checkpoints are supported"));
  WriteConfig(R"({"quantization_config": {"quant_method": "bitsandbytes", "bits": 4}})");
  EXPECT_THAT(ImportPrequantized(dir_, tensors_).status().message(),
              HasSubstr("quant_method is \"bitsandbytes\"; supported: gptq, awq, mxfp4"));
  WriteConfig(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32}})");
  std::map<std::string, TensorInfo> missing = tensors_;
  missing.erase("l.scales");
  EXPECT_THAT(ImportPrequantized(dir_, missing).status().message(),
              HasSubstr("missing tensor l.scales"));
  std::map<std::string, TensorInfo> wrong = tensors_;
  wrong["l.qzeros"].shape = {2, 1};
  EXPECT_THAT(ImportPrequantized(dir_, wrong).status().message(),
              HasSubstr("tensor l.qzeros has shape [2, 1], expected [1, 1]"));
  // Group size 16 cannot be stored (the plan's I4 blocks are 32 columns).
  WriteConfig(R"({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 16}})");
  std::map<std::string, TensorInfo> small_groups = tensors_;
  std::vector<uint16_t> two_scales(16, 0x3C00);
  std::vector<uint32_t> two_zeros(2, 0x77777777);
  small_groups["l.scales"].shape = {2, 8};
  small_groups["l.scales"].data = reinterpret_cast<const uint8_t*>(two_scales.data());
  small_groups["l.qzeros"].shape = {2, 1};
  small_groups["l.qzeros"].data = reinterpret_cast<const uint8_t*>(two_zeros.data());
  EXPECT_THAT(ImportPrequantized(dir_, small_groups).status().message(),
              HasSubstr("tensor l.qweight: int4 g16 asymmetric needs input columns (32) and group "
                        "size (16) that are multiples of 32"));
}

// gpt-oss's MXFP4 layout as transformers' integrations/mxfp4.py reads it: expert projection P
// ([E, in, out] as a parameter) stored as P_blocks U8 [E, out, in / 32, 16] and P_scales U8
// [E, out, in / 32]; byte j of a block holds column 2j (low nibble) and 2j + 1 (high nibble).
// Here 2 experts of down_proj with out = 4, in = 64 (two blocks per row), in memory.
class Mxfp4ImportTest : public PrequantizedTest {
 protected:
  static constexpr int64_t kExperts = 2, kOut = 4, kIn = 64, kGroups = kIn / 32;
  static constexpr char kName[] = "model.layers.0.mlp.experts.down_proj";
  void SetUp() override {
    PrequantizedTest::SetUp();
    tensors_.clear();
    WriteConfig(R"({"quantization_config": {"quant_method": "mxfp4",
                    "modules_to_not_convert": ["model.layers.*.self_attn",
                                               "model.layers.*.mlp.router", "lm_head"]}})");
    blocks_.resize(kExperts * kOut * kGroups * 16);
    for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i] = static_cast<uint8_t>(i * 37 + 11);
    scales_u8_.resize(kExperts * kOut * kGroups);
    for (size_t i = 0; i < scales_u8_.size(); ++i) scales_u8_[i] = static_cast<uint8_t>(120 + i);
    AddPair(kName, {kExperts, kOut, kGroups, 16}, {kExperts, kOut, kGroups});
    bias_.assign(kExperts * kOut, 0.5f);
    Add(std::string(kName) + "_bias", llmrt::plan::F32, {kExperts, kOut}, bias_.data(),
        bias_.size() * 4);
  }
  void AddPair(const std::string& stem, std::vector<int64_t> blocks_shape,
               std::vector<int64_t> scales_shape) {
    Add(stem + "_blocks", llmrt::plan::U8, std::move(blocks_shape), blocks_.data(), blocks_.size());
    Add(stem + "_scales", llmrt::plan::U8, std::move(scales_shape), scales_u8_.data(),
        scales_u8_.size());
  }
  std::string ImportError() {
    return std::string(ImportPrequantized(dir_, tensors_).status().message());
  }
  // The value transformers decodes for (expert, out row, in column).
  float Reference(int64_t e, int64_t row, int64_t column) const {
    static constexpr float kE2M1[16] = {0,    0.5,  1,  1.5,  2,  3,  4,  6,
                                        -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
    const int64_t group = (e * kOut + row) * kGroups + column / 32;
    const uint8_t byte = blocks_[group * 16 + column % 32 / 2];
    const int code = column % 2 == 0 ? byte & 15 : byte >> 4;
    return std::ldexp(kE2M1[code], scales_u8_[group] - 127);
  }
  std::vector<uint8_t> blocks_, scales_u8_;
  std::vector<float> bias_;
};

TEST_F(Mxfp4ImportTest, PlaceholderAndExpertViewsDecodeAsTransformers) {
  absl::StatusOr<PrequantizedCheckpoint> imported = ImportPrequantized(dir_, tensors_);
  ASSERT_TRUE(imported.ok()) << imported.status();
  EXPECT_EQ(imported->method, "mxfp4");
  EXPECT_TRUE(imported->format.mxfp4());
  const TensorInfo& placeholder = imported->tensors.at(kName);
  EXPECT_EQ(placeholder.shape, (std::vector<int64_t>{kExperts, kIn, kOut}));
  EXPECT_EQ(placeholder.data, nullptr);
  EXPECT_FALSE(imported->tensors.count(std::string(kName) + "_blocks"));
  EXPECT_TRUE(imported->tensors.count(std::string(kName) + "_bias"));
  // Expert 1, rows 1 and 3 (rows=1::2): what a transposed, strided view asks for.
  absl::StatusOr<QuantizedMatrix> matrix =
      Mxfp4ExpertMatrix(imported->mxfp4.at(kName), "view", 1, 1, 2);
  ASSERT_TRUE(matrix.ok()) << matrix.status();
  ASSERT_EQ(matrix->rows, 2);
  ASSERT_EQ(matrix->cols, kIn);
  const std::vector<float> decoded = DequantizeMatrix(*matrix);
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t c = 0; c < kIn; ++c) {
      ASSERT_EQ(decoded[r * kIn + c], Reference(1, 1 + 2 * r, c)) << r << ", " << c;
    }
  }
  EXPECT_THAT(
      std::string(Mxfp4ExpertMatrix(imported->mxfp4.at(kName), "view", 2, 0, 1).status().message()),
      HasSubstr("no expert 2"));
}

TEST_F(Mxfp4ImportTest, BrokenCheckpointsNamedWhatIsWrong) {
  std::map<std::string, TensorInfo> good = tensors_;
  tensors_.erase(std::string(kName) + "_scales");
  EXPECT_THAT(ImportError(), HasSubstr("tensor " + std::string(kName) + "_blocks has no " +
                                       std::string(kName) + "_scales"));
  tensors_ = good;
  tensors_[std::string(kName) + "_scales"].shape = {kExperts, kOut, 3};
  EXPECT_THAT(ImportError(), HasSubstr("_scales has shape [2, 4, 3], expected [2, 4, 2]"));
  tensors_ = good;
  tensors_[std::string(kName) + "_blocks"].shape = {kExperts, kOut, kGroups, 8};
  EXPECT_THAT(ImportError(), HasSubstr("must be U8 [experts, rows, cols / 32, 16]"));
  tensors_ = good;
  scales_u8_[(1 * kOut + 2) * kGroups + 1] = 255;
  EXPECT_THAT(ImportError(), HasSubstr("_scales [1, 2, 1] is 255"));
  scales_u8_[(1 * kOut + 2) * kGroups + 1] = 127;
  // A float expert projection in an MXFP4 checkpoint would stay unquantized.
  Add("model.layers.1.mlp.experts.gate_up_proj", llmrt::plan::F32, {kExperts, kIn, kOut},
      bias_.data(), 0);
  EXPECT_THAT(ImportError(), HasSubstr("tensor model.layers.1.mlp.experts.gate_up_proj is stored "
                                       "as F32 in an MXFP4 checkpoint"));
  tensors_ = good;
  AddPair("model.layers.0.self_attn.q_proj", {kExperts, kOut, kGroups, 16},
          {kExperts, kOut, kGroups});
  EXPECT_THAT(ImportError(), HasSubstr("q_proj_blocks is MXFP4 outside a mixture of experts"));
  tensors_ = good;
  // transformers' should_convert_module: a prefix up to a module boundary (regex) or a suffix.
  for (const char* pattern : {"model.layers.*.mlp", "experts", "model.layers.0"}) {
    WriteConfig(std::string(R"({"quantization_config": {"quant_method": "mxfp4",
                    "modules_to_not_convert": [")") +
                pattern + R"("]}})");
    EXPECT_THAT(ImportError(), HasSubstr(std::string("modules_to_not_convert entry \"") + pattern +
                                         "\" matches model.layers.0.mlp.experts"));
  }
  for (const char* pattern : {"model.layers.1", "mlp.router", "model.layers.0.mlp.exp"}) {
    WriteConfig(std::string(R"({"quantization_config": {"quant_method": "mxfp4",
                    "modules_to_not_convert": [")") +
                pattern + R"("]}})");
    EXPECT_TRUE(ImportPrequantized(dir_, tensors_).ok()) << pattern;
  }
}

}  // namespace
}  // namespace llmc::quant
