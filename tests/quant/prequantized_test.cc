// GPTQ and AWQ int4 checkpoints (tests/fixtures/llama_gptq*, llama_awq; written by
// make_fixtures.py's reference quantizer) and the MXFP4 gpt-oss checkpoint (gpt_oss_mxfp4)
// imported without requantizing: the plan's codes dequantize exactly to the reference's
// dequantized weights (transformers' own dequantizing load for MXFP4), and the runtime's logits
// match the dequantized f32 model's (transformers) logits.
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

// MXFP4 decodes exactly in f32 and the rest of the model stays f32, so the exact mode computes
// transformers' dequantized model up to summation order: moe-design.md's f32 bar.
constexpr float kMxfp4ExactLogitTolerance = 1e-4f;
// With int8 activations (the default kernels) against the same reference; see the measurement
// where it is checked.
constexpr double kMxfp4Int8ActivationKl = 0.001;

// An MXFP4 expert tensor of the plan ([E, N, K]: gate_up = the I gate rows then the I up rows
// of each expert, down = [H, I]) against transformers' dequantized params ([E, K, N'], used as
// x @ W, gate and up interleaved by column): element for element, exactly.
void ExpectExpertsEqualReference(const plan::Tensor& tensor, const std::vector<float>& weights,
                                 const SafetensorsFile& reference) {
  const std::string& name = tensor.name();
  const SafetensorsTensor* expected = reference.Find(name);
  ASSERT_NE(expected, nullptr) << name;
  ASSERT_EQ(expected->dtype, plan::F32);
  ASSERT_EQ(expected->shape.size(), 3u);
  const int64_t experts = tensor.shape(0), rows = tensor.shape(1), cols = tensor.shape(2);
  ASSERT_EQ(expected->shape, (std::vector<int64_t>{experts, cols, rows})) << name;
  const bool interleaved = name.find("gate_up_proj") != std::string::npos;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = 0; r < rows; ++r) {
      // gate_up: plan row r < I is the gate's r-th (column 2r), row I + r the up's (2r + 1).
      const int64_t column = interleaved ? (r < rows / 2 ? 2 * r : 2 * (r - rows / 2) + 1) : r;
      for (int64_t k = 0; k < cols; ++k) {
        float value;
        std::memcpy(&value, expected->data + 4 * ((e * cols + k) * rows + column), 4);
        ASSERT_EQ(weights[(e * rows + r) * cols + k], value)
            << name << " expert " << e << " row " << r << " column " << k;
      }
    }
  }
}

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

  const bool mxfp4 = method == "mxfp4";
  int quantized = 0, permuted = 0;
  for (int index = 0; index < meta.tensors_size(); ++index) {
    const plan::Tensor& tensor = meta.tensors(index);
    if (tensor.dtype() != (mxfp4 ? plan::FP4_E2M1 : plan::I4)) continue;
    ++quantized;
    EXPECT_EQ(tensor.quantization().method(), method);
    permuted += tensor.quantization().has_input_permutation();
    const std::vector<float> weights = DequantizePlanTensor(**opened, index);
    if (mxfp4) {
      ExpectExpertsEqualReference(tensor, weights, **reference);
      continue;
    }
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
  // 2 layers x (qkv, o, gate_up, down); MXFP4: the experts' gate_up and down only.
  EXPECT_EQ(quantized, mxfp4 ? 2 * 2 : 2 * 4);
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
    EXPECT_LE(max_difference, exact ? (mxfp4 ? kMxfp4ExactLogitTolerance : kExactLogitTolerance)
                                    : kInt8ActivationLogitTolerance);
    EXPECT_EQ(Top1Agreement(*logits, tokens, vocab_size, prompt_size - 1), 1.0);
    if (mxfp4 && !exact) {
      // W4A8 on the experts only: measured 0.00006 nats (max |logit diff| 0.12).
      const double kl = MeanKl(expected, *logits, vocab_size);
      std::printf("%s, int8 activations: mean KL = %.6f\n", GetParam().c_str(), kl);
      EXPECT_LE(kl, kMxfp4Int8ActivationKl);
    }
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
