#include "compiler/quant/prequantized.h"

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
              HasSubstr("quant_method is \"bitsandbytes\"; supported: gptq, awq"));
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

}  // namespace
}  // namespace llmc::quant
