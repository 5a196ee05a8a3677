// GPTQ and AWQ int4 checkpoints (tests/fixtures/llama_gptq*, llama_awq; written by
// make_fixtures.py's reference quantizer) imported without requantizing: the plan's codes
// dequantize exactly to the reference's dequantized weights, and the runtime's logits match
// the dequantized f32 model's (transformers) logits.
#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/importer/safetensors.h"
#include "compiler/quant/quantize.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/model.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "tests/e2e/test_util.h"
#include "tests/fixtures/fixture_list.h"
#include "tests/quant/accuracy.h"

namespace llmc::quant_testing {
namespace {

namespace plan = llmrt::plan;
using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;

// The weights are compared exactly below. With activations kept in f32 (the exact mode,
// runtime/backend/cpu/quant_matmul_exact.h) the runtime computes the dequantized model, so its
// logits must match transformers' logits of the dequantized f32 model within f32 summation
// noise: issue 5's 1e-3 (measured ~1e-5 on logits up to 8).
constexpr float kExactLogitTolerance = 1e-3f;
// The default int8-activation kernels (quant_matmul.h, W4A8) differ more: ~0.4% per activation,
// amplified by these random-init fixtures (initializer_range 0.25, where even int8 weights give
// KL ~0.008); measured 0.34-0.47. That bound still catches a wrong code, zero point, scale or
// permutation (each moves logits by several units), and every greedy token must still agree.
constexpr float kInt8ActivationLogitTolerance = 0.6f;

class PrequantizedTest : public ::testing::TestWithParam<std::string> {
 protected:
  // What make_fixtures.py wrote about the checkpoint: its quantization_config, prompt, greedy.
  const nlohmann::json& quant_reference() {
    if (reference_.is_null()) {
      reference_ = nlohmann::json::parse(
          ReadFile(SourcePath("tests/fixtures/" + GetParam() + "/quant_reference.json")));
    }
    return reference_;
  }

 private:
  nlohmann::json reference_;
};

TEST_P(PrequantizedTest, CodesDequantizeExactlyAndLogitsMatchReference) {
  const std::string dir = SourcePath("tests/fixtures/" + GetParam());
  const std::string plan_path = MakeScratchDir(GetParam()) + "/plan";
  ASSERT_TRUE(CompilePlan(dir, plan_path, std::nullopt).ok());

  absl::StatusOr<std::unique_ptr<plan::Plan>> opened = plan::Plan::Open(plan_path, {});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta& meta = (*opened)->meta();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> reference =
      SafetensorsFile::Open(dir + "/reference_dequantized.safetensors");
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::string method = quant_reference()["quantization"]["quant_method"];
  EXPECT_NE(meta.quantization().find(method), std::string::npos) << meta.quantization();

  int quantized = 0, permuted = 0;
  for (int index = 0; index < meta.tensors_size(); ++index) {
    const plan::Tensor& tensor = meta.tensors(index);
    if (tensor.dtype() != plan::I4) continue;
    ++quantized;
    EXPECT_EQ(tensor.quantization().method(), method);
    permuted += tensor.quantization().has_input_permutation();
    const std::vector<float> weights = DequantizePlanTensor(**opened, index);
    // The reference rows of each fused part, in order.
    const std::string& name = tensor.name();
    std::vector<std::string> parts;
    const size_t stem = name.rfind('.', name.size() - strlen(".weight") - 1);
    const std::string prefix = name.substr(0, stem + 1);
    if (name.find("qkv_proj") != std::string::npos) {
      parts = {prefix + "q_proj.weight", prefix + "k_proj.weight", prefix + "v_proj.weight"};
    } else if (name.find("gate_up_proj") != std::string::npos) {
      parts = {prefix + "gate_proj.weight", prefix + "up_proj.weight"};
    } else {
      parts = {name};
    }
    size_t offset = 0;
    for (const std::string& part : parts) {
      const SafetensorsTensor* expected = (*reference)->Find(part);
      ASSERT_NE(expected, nullptr) << part;
      const size_t count = expected->size_bytes / 4;
      for (size_t i = 0; i < count; ++i) {
        float value;
        std::memcpy(&value, expected->data + 4 * i, 4);
        ASSERT_EQ(weights[offset + i], value) << part << " element " << i;
      }
      offset += count;
    }
    EXPECT_EQ(offset, weights.size()) << name;
  }
  EXPECT_EQ(quantized, 2 * 4);  // 2 layers x (qkv, o, gate_up, down)
  if (quant_reference()["quantization"].value("desc_act", false)) {
    EXPECT_EQ(permuted, quantized);
  } else {
    EXPECT_EQ(permuted, 0);
  }

  // Logits of prompt + greedy[:-1] against the dequantized model in transformers.
  const nlohmann::json& ref = quant_reference();
  std::vector<int32_t> tokens = ref["prompt_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> greedy = ref["greedy_ids"].get<std::vector<int32_t>>();
  const size_t prompt_size = tokens.size();
  tokens.insert(tokens.end(), greedy.begin(), greedy.end() - 1);
  const std::string logits_bytes = ReadFile(dir + "/reference_logits.bin");
  std::vector<float> expected(logits_bytes.size() / 4);
  std::memcpy(expected.data(), logits_bytes.data(), logits_bytes.size());
  for (const auto activations :
       {llmrt::QuantizedActivations::kF32, llmrt::QuantizedActivations::kInt8}) {
    const bool exact = activations == llmrt::QuantizedActivations::kF32;
    int64_t vocab_size = 0;
    absl::StatusOr<std::vector<float>> logits =
        TeacherForcedLogits(plan_path, tokens, &vocab_size, activations);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->size(), expected.size());
    float max_difference = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      max_difference = std::max(max_difference, std::fabs((*logits)[i] - expected[i]));
    }
    std::printf("%s, %s activations: max |logit - dequantized reference| = %.6f\n",
                GetParam().c_str(), exact ? "f32" : "int8", max_difference);
    EXPECT_LE(max_difference, exact ? kExactLogitTolerance : kInt8ActivationLogitTolerance);
    EXPECT_EQ(Top1Agreement(*logits, tokens, vocab_size, prompt_size - 1), 1.0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, PrequantizedTest,
    ::testing::ValuesIn(llmc::fixtures::PrequantizedFixtureNames(SourcePath(""))),
    [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(PrequantizedCliTest, QuantOnAQuantizedCheckpointIsOneLineError) {
  QuantizeOptions int8;
  absl::Status status = CompilePlan(SourcePath("tests/fixtures/llama_gptq"),
                                    MakeScratchDir("requant") + "/plan", int8);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("already quantized"), std::string::npos) << status;
}

}  // namespace
}  // namespace llmc::quant_testing
