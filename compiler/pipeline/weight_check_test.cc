#include "compiler/pipeline/weight_check.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmc {
namespace {

namespace plan = llmrt::plan;
using ::testing::HasSubstr;

// A tensor over `bytes`, offset by one byte as safetensors data may be (unaligned reads).
struct Holder {
  std::vector<uint8_t> bytes;
  TensorInfo Info(const std::string& name, plan::DType dtype, std::vector<int64_t> shape) const {
    TensorInfo info;
    info.name = name;
    info.file = "model.safetensors";
    info.dtype = dtype;
    info.shape = std::move(shape);
    info.data = bytes.data() + 1;
    info.size_bytes = bytes.size() - 1;
    return info;
  }
};

Holder F32Tensor(std::vector<float> values) {
  Holder holder;
  holder.bytes.resize(1 + values.size() * 4);
  std::memcpy(holder.bytes.data() + 1, values.data(), values.size() * 4);
  return holder;
}

Holder U16Tensor(std::vector<uint16_t> values) {
  Holder holder;
  holder.bytes.resize(1 + values.size() * 2);
  std::memcpy(holder.bytes.data() + 1, values.data(), values.size() * 2);
  return holder;
}

TEST(WeightCheckTest, FiniteWeightsPass) {
  // Largest finite, smallest subnormal, zeros of both signs: all finite.
  Holder f32 = F32Tensor({std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(), 0.0f, -0.0f});
  Holder f16 = U16Tensor({0x7BFF, 0xFBFF, 0x0001, 0x8000});
  Holder bf16 = U16Tensor({0x7F7F, 0xFF7F, 0x0001});
  Holder codes = U16Tensor({0xFFFF, 0x7FFF});  // I32 codes: any bits are fine
  std::map<std::string, TensorInfo> tensors = {
      {"a", f32.Info("a", plan::F32, {5})},
      {"b", f16.Info("b", plan::F16, {2, 2})},
      {"c", bf16.Info("c", plan::BF16, {3})},
      {"d", codes.Info("d", plan::I32, {1})},
  };
  EXPECT_TRUE(CheckWeightsFinite("dir", tensors).ok());
}

TEST(WeightCheckTest, NanNamesTensorMultiIndexAndCount) {
  // 3 x 1500 spans several scan blocks; the first bad value is in the second block.
  std::vector<float> values(3 * 1500, 0.5f);
  values[1 * 1500 + 700] = std::nanf("");
  values[2 * 1500 + 3] = INFINITY;
  Holder holder = F32Tensor(values);
  std::map<std::string, TensorInfo> tensors = {
      {"model.layers.1.mlp.up_proj.weight",
       holder.Info("model.layers.1.mlp.up_proj.weight", plan::F32, {3, 1500})}};
  absl::Status status = CheckWeightsFinite("/models/m", tensors);
  ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("/models/m/model.safetensors"));
  EXPECT_THAT(status.message(), HasSubstr("model.layers.1.mlp.up_proj.weight"));
  EXPECT_THAT(status.message(), HasSubstr("holds NaN at index [1, 700] (flat index 2200)"));
  EXPECT_THAT(status.message(), HasSubstr("2 of its 4500 values"));
}

TEST(WeightCheckTest, InfInHalfAndBfloat16) {
  Holder f16 = U16Tensor({0x3C00, 0xFC00});   // 1, -Inf
  Holder bf16 = U16Tensor({0x3F80, 0x7F80});  // 1, +Inf
  Holder bf16_nan = U16Tensor({0x7FC1});
  EXPECT_THAT(CheckWeightsFinite("d", {{"h", f16.Info("h", plan::F16, {2})}}).message(),
              HasSubstr("holds -Inf at index [1]"));
  EXPECT_THAT(CheckWeightsFinite("d", {{"b", bf16.Info("b", plan::BF16, {1, 2})}}).message(),
              HasSubstr("holds +Inf at index [0, 1]"));
  EXPECT_THAT(CheckWeightsFinite("d", {{"n", bf16_nan.Info("n", plan::BF16, {1})}}).message(),
              HasSubstr("holds NaN"));
}

}  // namespace
}  // namespace llmc
