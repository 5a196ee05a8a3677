// Numerics against HuggingFace transformers: every fixture in tests/fixtures/ (tiny random
// checkpoints saved by transformers' save_pretrained, with transformers' float32 logits, made
// by tests/fixtures/make_fixtures.py) is compiled by llmc and run by llmrt.
//
//   f32 plan:        logits at every prompt position and at each of the 7 teacher-forced decode
//                    steps within 1e-4 of transformers', and the same 8 greedy tokens;
//   f16/bf16 plans:  the same 8 greedy tokens, logits within what rounding the weights alone
//                    moves them (measured by the fixture script, recorded in reference.json); on
//                    CPUs whose kernels also round the bf16 matmul activations (AVX512-BF16),
//                    within what transformers' own bf16 forward moves them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/pipeline/compile.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/engine/model.h"
#include "tests/e2e/test_util.h"
#include "tests/fixtures/fixture_list.h"

namespace llmc::testing {
namespace {

namespace fs = std::filesystem;
namespace plan = llmrt::plan;

// The bar for an f32 plan: transformers' float32 forward, max-abs-diff per logit.
constexpr float kF32Tolerance = 1e-4f;

struct Reference {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  int64_t num_positions = 0;
  int64_t vocab_size = 0;
  double max_diff_f16_weights = 0;
  double max_diff_bf16_weights = 0;
  double max_diff_bf16_forward = 0;
  std::vector<float> logits;  // [num_positions, vocab_size]
};

Reference LoadReference(const std::string& dir) {
  nlohmann::json json = nlohmann::json::parse(ReadFile(dir + "/reference.json"));
  Reference ref;
  ref.prompt_ids = json.at("prompt_ids").get<std::vector<int32_t>>();
  ref.greedy_ids = json.at("greedy_ids").get<std::vector<int32_t>>();
  ref.num_positions = json.at("num_positions").get<int64_t>();
  ref.vocab_size = json.at("vocab_size").get<int64_t>();
  ref.max_diff_f16_weights = json.at("max_abs_logit_diff_f16_weights").get<double>();
  ref.max_diff_bf16_weights = json.at("max_abs_logit_diff_bf16_weights").get<double>();
  ref.max_diff_bf16_forward = json.at("max_abs_logit_diff_bf16_forward").get<double>();
  std::string bytes = ReadFile(dir + "/reference_logits.bin");
  ref.logits.resize(bytes.size() / sizeof(float));
  std::memcpy(ref.logits.data(), bytes.data(), ref.logits.size() * sizeof(float));
  return ref;
}

std::vector<std::string> ListFixtures() {
  return fixtures::TransformersFixtureNames(SourcePath(""));
}

int32_t Argmax(const float* row, int64_t size) {
  return static_cast<int32_t>(std::max_element(row, row + size) - row);
}

// Largest |ours - theirs| over one row; reports the first position where it is exceeded.
float MaxAbsDiff(const float* ours, const float* theirs, int64_t size) {
  float worst = 0;
  for (int64_t i = 0; i < size; ++i) worst = std::max(worst, std::fabs(ours[i] - theirs[i]));
  return worst;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = SourcePath("tests/fixtures/" + GetParam());
    ref_ = LoadReference(dir_);
    ASSERT_EQ(ref_.logits.size(), static_cast<size_t>(ref_.num_positions * ref_.vocab_size));
    ASSERT_EQ(ref_.num_positions,
              static_cast<int64_t>(ref_.prompt_ids.size() + ref_.greedy_ids.size() - 1));
  }

  std::unique_ptr<llmrt::engine::Model> CompileAndLoad(plan::DType dtype) {
    CompileOptions options;
    options.model_dir = dir_;
    options.output_path = MakeScratchDir(GetParam()) + "/plan.bin";
    options.weight_dtype = dtype;
    absl::Status compiled = Compile(options, nullptr);
    EXPECT_TRUE(compiled.ok()) << compiled;
    if (!compiled.ok()) return nullptr;
    llmrt::engine::ModelOptions model_options;
    model_options.verify = true;
    // Smaller than the prompt, so prefill runs in several chunks, as long prompts do.
    model_options.max_tokens_per_step = 16;
    // The references round only the weights (transformers keeps f32 activations and KV), so
    // the cache stays f32 whatever the plan's default; reduced-precision caches have their own
    // tolerance tests in runtime/backend/cpu.
    model_options.kv_cache_dtype = plan::F32;
    auto model = llmrt::engine::Model::Load(options.output_path, model_options);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  // Prefill with logits at every position, then one teacher-forced token per step. Checks the
  // logits of every position against transformers within `tolerance` and that the argmax of
  // each position that predicts a greedy token is that token.
  void CheckAgainstReference(llmrt::engine::Model& model, float tolerance) {
    const int64_t vocab = ref_.vocab_size;
    ASSERT_EQ(model.vocab_size(), vocab);
    auto session = model.NewSession();
    absl::StatusOr<std::vector<float>> prefill = session->Append(ref_.prompt_ids, true);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    const int64_t prompt_size = static_cast<int64_t>(ref_.prompt_ids.size());
    ASSERT_EQ(prefill->size(), static_cast<size_t>(prompt_size * vocab));
    for (int64_t position = 0; position < prompt_size; ++position) {
      float diff = MaxAbsDiff(prefill->data() + position * vocab,
                              ref_.logits.data() + position * vocab, vocab);
      EXPECT_LE(diff, tolerance) << "prompt position " << position;
    }
    std::vector<float> last(prefill->end() - vocab, prefill->end());
    for (size_t step = 0; step < ref_.greedy_ids.size(); ++step) {
      EXPECT_EQ(Argmax(last.data(), vocab), ref_.greedy_ids[step]) << "greedy step " << step;
      if (step + 1 == ref_.greedy_ids.size()) break;
      absl::StatusOr<std::vector<float>> decoded = session->Append({ref_.greedy_ids[step]}, false);
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      last = *std::move(decoded);
      const int64_t position = prompt_size + static_cast<int64_t>(step);
      float diff = MaxAbsDiff(last.data(), ref_.logits.data() + position * vocab, vocab);
      EXPECT_LE(diff, tolerance) << "decode position " << position;
    }
  }

  std::string dir_;
  Reference ref_;
};

TEST_P(FixtureTest, F32PlanMatchesTransformers) {
  auto model = CompileAndLoad(plan::F32);
  ASSERT_NE(model, nullptr);
  CheckAgainstReference(*model, kF32Tolerance);
}

TEST_P(FixtureTest, F16PlanGivesTheSameGreedyTokens) {
  auto model = CompileAndLoad(plan::F16);
  ASSERT_NE(model, nullptr);
  // Rounding the weights to f16 moves transformers' own logits by max_diff_f16_weights; allow
  // twice that (our rounding and theirs are both RNE, but accumulation order differs) plus the
  // f32 tolerance.
  CheckAgainstReference(*model, 2 * ref_.max_diff_f16_weights + kF32Tolerance);
}

TEST_P(FixtureTest, Bf16PlanGivesTheSameGreedyTokens) {
  auto model = CompileAndLoad(plan::BF16);
  ASSERT_NE(model, nullptr);
  // Below the AVX512-BF16 tier a bf16 plan computes in f32 from the rounded weights, so it owes
  // what rounding only the weights moves transformers' logits. At that tier the matmuls run on
  // vdpbf16ps and round their activations to bf16 too (RNE, as transformers' bf16 forward and
  // llama.cpp's BF16 path do): the contract is then transformers' own bf16 forward, which
  // moves the f32 logits by max_diff_bf16_forward (llama_sharded_bf16: weights-only 0, forward
  // 0.29). Twice that, as for the weights. The greedy tokens stay exact either way.
  // The model is loaded, so the tier (LLMRT_CPU_TARGET) is selected.
  const bool rounds_activations = llmrt::cpu::ActiveCpuExtensions().avx512_bf16;
  const double reference_diff =
      rounds_activations ? ref_.max_diff_bf16_forward : ref_.max_diff_bf16_weights;
  CheckAgainstReference(*model, 2 * reference_diff + kF32Tolerance);
}

TEST_P(FixtureTest, BatchedSequencesMatchRunningAlone) {
  auto model = CompileAndLoad(plan::F32);
  ASSERT_NE(model, nullptr);
  const int64_t vocab = ref_.vocab_size;
  // Three sequences of different lengths share every step: the whole prompt, a prefix of it and
  // the prompt reversed. Each must give the same logits as when it runs alone.
  std::vector<std::vector<int32_t>> prompts = {
      ref_.prompt_ids, std::vector<int32_t>(ref_.prompt_ids.begin(), ref_.prompt_ids.begin() + 7),
      std::vector<int32_t>(ref_.prompt_ids.rbegin(), ref_.prompt_ids.rend())};
  std::vector<std::vector<float>> alone;
  for (const auto& prompt : prompts) {
    auto session = model->NewSession();
    auto logits = session->Append(prompt, true);
    ASSERT_TRUE(logits.ok()) << logits.status();
    alone.push_back(*std::move(logits));
  }
  std::vector<std::unique_ptr<llmrt::engine::Session>> sessions;
  std::vector<llmrt::engine::AppendRequest> requests(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    sessions.push_back(model->NewSession());
    requests[i].session = sessions.back().get();
    requests[i].tokens = prompts[i];
    requests[i].all_logits = true;
  }
  ASSERT_TRUE(model->AppendBatch(absl::MakeSpan(requests)).ok());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(requests[i].logits.size(), alone[i].size());
    EXPECT_LE(MaxAbsDiff(requests[i].logits.data(), alone[i].data(),
                         static_cast<int64_t>(alone[i].size())),
              1e-5f)
        << "sequence " << i;
  }
  // The f32 reference still holds for the full prompt computed in a batch.
  for (int64_t position = 0; position < static_cast<int64_t>(ref_.prompt_ids.size()); ++position) {
    EXPECT_LE(MaxAbsDiff(requests[0].logits.data() + position * vocab,
                         ref_.logits.data() + position * vocab, vocab),
              kF32Tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(Transformers, FixtureTest, ::testing::ValuesIn(ListFixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace llmc::testing
