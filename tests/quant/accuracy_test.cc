// Accuracy of quantized plans against the f32 plan of the same checkpoint, on the runtime:
// stories260K and every transformers fixture, on a held-out story (tests/quant/data). Bounds
// from issue 5: mean per-token KL(f32 || quantized) <= 0.01 for int8, <= 0.05 for int4 g32;
// activation-aware (AWQ) no worse than round-to-nearest. The mixture-of-experts fixtures have
// bounds of their own (measured, ~15% above): a perturbation that moves a router logit across
// its k-th neighbour sends the token to another expert, a larger change than any dense layer
// makes, so their KL is 1.1-4x the dense fixtures'.
#include "tests/quant/accuracy.h"

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/cpu/amx_emulation_test_env.h"
#include "runtime/plan/plan_reader.h"
#include "tests/e2e/test_util.h"

namespace llmc::quant_testing {
namespace {

using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;

constexpr int kGreedyTokens = 256;

struct Models {
  std::string dir;
  std::string name;
};

std::vector<std::string> ModelDirs() {
  std::vector<std::string> dirs = {"tests/data/stories260K"};
  for (const auto& entry : std::filesystem::directory_iterator(SourcePath("tests/fixtures"))) {
    // Pre-quantized checkpoints (GPTQ/AWQ) are prequantized_test.cc's.
    if (std::filesystem::exists(entry.path() / "reference.json") &&
        ReadFile((entry.path() / "config.json").string()).find("quantization_config") ==
            std::string::npos) {
      dirs.push_back("tests/fixtures/" + entry.path().filename().string());
    }
  }
  std::sort(dirs.begin() + 1, dirs.end());
  return dirs;
}

// int4 with groups of 32 (issue 5's accuracy format), round-to-nearest unless a test sets more.
QuantizeOptions Int4G32(bool asymmetric) {
  QuantizeOptions int4;
  int4.bits = 4;
  int4.group_size = 32;
  int4.asymmetric = asymmetric;
  return int4;
}

class QuantAccuracyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = SourcePath(GetParam());
    scratch_ = MakeScratchDir(std::filesystem::path(GetParam()).filename().string());
    float_plan_ = scratch_ + "/f32.plan";
    ASSERT_TRUE(CompilePlan(dir_, float_plan_, std::nullopt).ok());
    absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> opened =
        llmrt::plan::Plan::Open(float_plan_);
    ASSERT_TRUE(opened.ok()) << opened.status();
    moe_ = (*opened)->meta().config().moe().num_experts() > 0;
    trained_ = GetParam() == "tests/data/stories260K";
    absl::StatusOr<std::vector<int32_t>> tokens =
        Tokenize(float_plan_, ReadFile(SourcePath("tests/quant/data/heldout_story.txt")));
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    text_ = *tokens;
    absl::StatusOr<std::vector<float>> logits = TeacherForcedLogits(float_plan_, text_, &vocab_);
    ASSERT_TRUE(logits.ok()) << logits.status();
    reference_ = *logits;
    std::printf("%-40s %-24s ppl %.3f\n", GetParam().c_str(), "f32",
                Perplexity(reference_, text_, vocab_));
    // The story's first sentence as the greedy prompt.
    prompt_size_ = 16;
    prompt_and_greedy_.assign(text_.begin(), text_.begin() + prompt_size_);
    absl::StatusOr<std::vector<int32_t>> greedy =
        GreedyTokens(float_plan_, prompt_and_greedy_, kGreedyTokens);
    ASSERT_TRUE(greedy.ok()) << greedy.status();
    prompt_and_greedy_.insert(prompt_and_greedy_.end(), greedy->begin(), greedy->end());
  }

  AccuracyRow MeasureQuantized(const QuantizeOptions& quantize, const std::string& label) {
    const std::string plan = scratch_ + "/" + label + ".plan";
    absl::Status compiled = CompilePlan(dir_, plan, quantize);
    EXPECT_TRUE(compiled.ok()) << compiled;
    absl::StatusOr<AccuracyRow> row =
        Measure(label, plan, text_, reference_, prompt_and_greedy_, prompt_size_);
    EXPECT_TRUE(row.ok()) << row.status();
    if (!row.ok()) return {};
    std::printf("%-40s %-24s KL %.5f (weights alone %.5f)  ppl %.3f  top1 %.3f  %llu bytes\n",
                GetParam().c_str(), label.c_str(), row->mean_kl, row->weight_only_kl,
                row->perplexity, row->top1, static_cast<unsigned long long>(row->plan_bytes));
    return *row;
  }

  // Regression guards of int8 and int4 g32 round-to-nearest (the tests below say what each is).
  // MoE fixtures: int8 measured 0.011-0.042, int4 0.49-1.10 (mixtral_moe).
  double Int8Bound() const { return moe_ ? 0.05 : 0.01; }
  double Int4Bound() const { return trained_ ? 0.073 : moe_ ? 1.27 : 0.68; }

  std::string dir_, scratch_, float_plan_;
  bool moe_ = false, trained_ = false;
  std::vector<int32_t> text_, prompt_and_greedy_;
  std::vector<float> reference_;
  int64_t vocab_ = 0;
  size_t prompt_size_ = 0;
};

// --quant mxfp4: E2M1 codes with a power-of-two scale per 32 columns (compiler/quant/mxfp4.h)
// on every matmul but the router, the experts included. Its grid (0, 0.5, 1, 1.5, 2, 3, 4, 6)
// and power-of-two scales lose more than int4 g32's 16 levels with an f16 scale chosen by the
// clipping search: measured 1.3-2.1x int4 g32 RTN's KL (stories260K 0.127 vs 0.061; dense
// fixtures 0.16-0.92, MoE fixtures 0.74-1.43). Guards ~15% above both.
TEST_P(QuantAccuracyTest, Mxfp4Kl) {
  const AccuracyRow int4 = MeasureQuantized(Int4G32(/*asymmetric=*/false), "int4-g32");
  QuantizeOptions mxfp4;
  mxfp4.bits = 4;
  mxfp4.mxfp4 = true;
  const AccuracyRow row = MeasureQuantized(mxfp4, "mxfp4");
  EXPECT_LE(row.mean_kl, 2.4 * int4.mean_kl);
  EXPECT_LE(row.mean_kl, trained_ ? 0.146 : moe_ ? 1.65 : 1.06);
  if (trained_) EXPECT_GE(row.top1, 0.8);
}

TEST_P(QuantAccuracyTest, Int8KlBelowOneHundredth) {
  QuantizeOptions int8;
  int8.bits = 8;
  const AccuracyRow row = MeasureQuantized(int8, "int8");
  EXPECT_LE(row.mean_kl, Int8Bound());
  // Random-init fixtures have near-tied greedy choices; stories260K measures 0.988, the MoE
  // fixtures 0.816-0.918.
  EXPECT_GE(row.top1, moe_ ? 0.8 : 0.85);
}

// int4 g32 round-to-nearest (no calibration). Issue 5's KL <= 0.05 is met with calibration
// (ErrorFeedbackInt4G32); plain RTN measures (docs/quantization.md) stories260K 0.061
// (symmetric) / 0.064 (asymmetric). The weights alone give 0.060 / 0.064 (exact mode),
// the same as this quantizer simulated in transformers, so the int8 activations add ~1%; the
// random-init fixtures 0.40-0.58, where plain absmax RTN of the same weights evaluated in
// transformers gives 0.66 (llama_mha), so their sensitivity, not the quantizer, sets the
// level. These bounds are regression guards at ~15% above the measured values (a wrong scale,
// zero point or packing gives KL >> 1).
TEST_P(QuantAccuracyTest, Int4G32Kl) {
  const bool trained = trained_;
  const double bound = Int4Bound();
  QuantizeOptions int4 = Int4G32(/*asymmetric=*/false);
  const AccuracyRow symmetric = MeasureQuantized(int4, "int4-g32");
  EXPECT_LE(symmetric.mean_kl, bound);
  int4.asymmetric = true;
  const AccuracyRow asymmetric = MeasureQuantized(int4, "int4-g32-asym");
  EXPECT_LE(asymmetric.mean_kl, bound);
  // And int4 is measurably worse than int8 but still a language model on the trained one.
  if (trained) {
    EXPECT_GE(symmetric.top1, 0.8);
  }
}

// AWQ end to end: on the trained model it must not be worse than round-to-nearest, for either
// scheme (issue 5); measured stories260K KL 0.0544 vs RTN 0.0607 (symmetric), 0.0548 vs 0.0640
// (asymmetric), bound ~15% above. That it lowers the per-linear error it optimises on held-out
// text is awq_test.cc's check. The random-init fixtures have no salient channels for it to
// find (0.38-0.57, about RTN's level): only the int4 bound there.
TEST_P(QuantAccuracyTest, AwqNoWorseThanRoundToNearest) {
  const bool trained = trained_;
  if (moe_) {
    // Refused (moe-design.md §14): its scales would be folded into the norm that also feeds the
    // router and the experts.
    QuantizeOptions int4 = Int4G32(/*asymmetric=*/false);
    int4.awq = true;
    const absl::Status status = CompilePlan(dir_, scratch_ + "/awq.plan", int4);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("--awq: "), std::string::npos) << status;
    EXPECT_NE(status.message().find("mixture of experts"), std::string::npos) << status;
    return;
  }
  for (const bool asymmetric : {false, true}) {
    QuantizeOptions int4 = Int4G32(asymmetric);
    const std::string suffix = asymmetric ? "-asym" : "";
    int4.awq = true;
    const AccuracyRow awq = MeasureQuantized(int4, "int4-g32" + suffix + "-awq");
    EXPECT_LE(awq.mean_kl, trained ? 0.063 : 0.68);
    if (trained) {
      int4.awq = false;
      const AccuracyRow rtn = MeasureQuantized(int4, "int4-g32" + suffix);
      EXPECT_LE(awq.mean_kl, rtn.mean_kl);
    }
  }
}

// GPTQ-style error feedback (compiler/quant/gptq.h), alone (--gptq) and after AWQ's scaling
// (--awq --gptq), int4 g32: issue 5's KL <= 0.05 on the trained model, for both schemes, and
// no worse than round-to-nearest. Measured on stories260K (docs/quantization.md): symmetric
// RTN 0.0607, GPTQ 0.0453, AWQ + GPTQ 0.0434; asymmetric 0.0640, 0.0427, 0.0408. On the random
// fixtures, whose absolute KL is set by their initializer range rather than by the quantizer
// (docs/quantization.md, "The fixtures"), both are 3-28% below RTN (every fixture, both
// schemes): checked, with RTN's regression guard.
TEST_P(QuantAccuracyTest, ErrorFeedbackInt4G32) {
  const bool trained = trained_;
  for (const bool asymmetric : {false, true}) {
    QuantizeOptions int4 = Int4G32(asymmetric);
    const std::string suffix = asymmetric ? "-asym" : "";
    const AccuracyRow rtn = MeasureQuantized(int4, "int4-g32" + suffix);
    int4.gptq = true;
    const AccuracyRow gptq = MeasureQuantized(int4, "int4-g32" + suffix + "-gptq");
    if (moe_) {
      // GPTQ on the dense matmuls, the experts round-to-nearest (PlanMeta says so); --awq is
      // refused (AwqNoWorseThanRoundToNearest). Measured 11-29% below RTN.
      EXPECT_LE(gptq.mean_kl, rtn.mean_kl);
      EXPECT_LE(gptq.mean_kl, Int4Bound());
      absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> plan =
          llmrt::plan::Plan::Open(scratch_ + "/int4-g32" + suffix + "-gptq.plan");
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_NE((*plan)->meta().quantization().find(" gptq (experts rtn)"), std::string::npos)
          << (*plan)->meta().quantization();
      continue;
    }
    int4.awq = true;
    const AccuracyRow awq_gptq = MeasureQuantized(int4, "int4-g32" + suffix + "-awq-gptq");
    EXPECT_LE(gptq.mean_kl, rtn.mean_kl);
    EXPECT_LE(awq_gptq.mean_kl, rtn.mean_kl);
    if (trained) {
      EXPECT_LE(gptq.mean_kl, 0.05);
      EXPECT_LE(awq_gptq.mean_kl, 0.05);
      EXPECT_GE(gptq.top1, 0.85);
    } else {
      EXPECT_LE(gptq.mean_kl, 0.68);
      EXPECT_LE(awq_gptq.mean_kl, 0.68);
    }
  }
}

// --lm-head-quant int8 (the lm_head's own format, round-to-nearest per output channel) on
// every model; a tied one (stories260K, llama_gqa_tied) is measured through its untied twin
// (WriteUntiedCopy: the same float logits, so the f32 reference of SetUp holds). The bounds
// are the int8 and int4 ones above; that an int8 lm_head adds little to an int4 plan is
// checked against the float-head plan measured here (stories260K: docs/quantization.md).
TEST_P(QuantAccuracyTest, LmHeadInt8) {
  absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> float_plan =
      llmrt::plan::Plan::Open(float_plan_);
  ASSERT_TRUE(float_plan.ok()) << float_plan.status();
  if ((*float_plan)->meta().config().tie_word_embeddings()) {
    const std::string untied = scratch_ + "/untied";
    const absl::Status written = WriteUntiedCopy(dir_, untied);
    ASSERT_TRUE(written.ok()) << written;
    dir_ = untied;
  }
  const bool trained = trained_;
  QuantizeOptions int8;
  int8.bits = 8;
  const AccuracyRow int8_float_head = MeasureQuantized(int8, "int8-untied");
  int8.lm_head_bits = 8;
  const AccuracyRow int8_head = MeasureQuantized(int8, "int8-lm-head-int8");
  EXPECT_LE(int8_head.mean_kl, Int8Bound());
  QuantizeOptions int4 = Int4G32(/*asymmetric=*/false);
  const AccuracyRow int4_float_head = MeasureQuantized(int4, "int4-g32-untied");
  int4.lm_head_bits = 8;
  const AccuracyRow int4_head = MeasureQuantized(int4, "int4-g32-lm-head-int8");
  EXPECT_LE(int4_head.mean_kl, Int4Bound());
  // int8 codes of an f32 [vocab, hidden] lm_head: a quarter of its bytes, plus a scale a row.
  EXPECT_LT(int8_head.plan_bytes, int8_float_head.plan_bytes);
  EXPECT_LT(int4_head.plan_bytes, int4_float_head.plan_bytes);
  // What the int8 lm_head adds: measured +0.00035 (stories260K's int8 plan), at most +0.0005
  // elsewhere (-0.0003 to +0.0005 on int4 plans); a wrong scale or code gives KL >> 1.
  EXPECT_LE(int8_head.mean_kl - int8_float_head.mean_kl, 0.001);
  EXPECT_LE(int4_head.mean_kl - int4_float_head.mean_kl, 0.002);
  // For the docs: an int4 lm_head (the body's format) in the same plan.
  int4.lm_head_bits = 4;
  const AccuracyRow int4_int4_head = MeasureQuantized(int4, "int4-g32-lm-head-int4");
  EXPECT_LE(int4_int4_head.mean_kl, trained ? 0.095 : Int4Bound());
}

// The exact mode (f32 activations, runtime/backend/cpu/quant_matmul_exact.h) computes the
// dequantized model: for every quantization mode of stories260K, its logits equal those of the
// plan's dequantized f32 twin (built in memory from the plan's codes by plan.proto's formulas)
// within 1e-3, while the default int8 activations differ measurably (the check has teeth).
// The --lm-head-quant modes run on the untied llama_mha fixture (stories260K is tied): the
// quantized lm_head's logits GEMV meets its dequantized twin too; the MoE modes on qwen3_moe
// and gpt_oss (expert weights [E, N, K]).
TEST(QuantExactModeTest, EveryModeEqualsItsDequantizedPlan) {
  const std::string scratch = MakeScratchDir("exact-mode");
  struct Mode {
    const char* label;
    int bits;
    int64_t group_size;  // 0: the default (int8 per channel, int4 32)
    bool asymmetric;
    bool awq;
    bool gptq;
    int lm_head_bits = 0;
    const char* model = "tests/data/stories260K";
    bool mxfp4 = false;
  };
  constexpr char kUntied[] = "tests/fixtures/llama_mha";
  // Expert matmuls (quantized [E, N, K] tensors) and the imported experts of gpt_oss_mxfp4's
  // sibling: every routed row must meet the dequantized twin too.
  constexpr char kMoe[] = "tests/fixtures/qwen3_moe";
  constexpr char kGptOss[] = "tests/fixtures/gpt_oss";
  const Mode modes[] = {{"int8", 8, 0, false, false, false},
                        {"int8-g32", 8, 32, false, false, false},
                        {"int4-g32", 4, 32, false, false, false},
                        {"int4-g32-asym", 4, 32, true, false, false},
                        {"int4-g64", 4, 64, false, false, false},
                        {"int4-g32-awq", 4, 32, false, true, false},
                        {"int4-g32-asym-awq", 4, 32, true, true, false},
                        {"int8-gptq", 8, 0, false, false, true},
                        {"int4-g32-gptq", 4, 32, false, false, true},
                        {"int4-g32-asym-awq-gptq", 4, 32, true, true, true},
                        {"int4-g32-head-int8", 4, 32, false, false, false, 8, kUntied},
                        {"int4-g32-asym-head-int4", 4, 32, true, false, false, 4, kUntied},
                        {"int8-head-int4", 8, 0, false, false, false, 4, kUntied},
                        {"int4-g32-awq-head-int8", 4, 32, false, true, false, 8, kUntied},
                        {"mxfp4", 4, 0, false, false, false, 0, "tests/data/stories260K", true},
                        {"moe-int8", 8, 0, false, false, false, 0, kMoe},
                        {"moe-int4-g32-asym", 4, 32, true, false, false, 0, kMoe},
                        {"moe-mxfp4", 4, 0, false, false, false, 0, kMoe, true},
                        {"gpt-oss-mxfp4", 4, 0, false, false, false, 0, kGptOss, true}};
  for (const Mode& mode : modes) {
    const std::string dir = SourcePath(mode.model);
    QuantizeOptions quantize;
    quantize.bits = mode.bits;
    if (mode.group_size > 0) quantize.group_size = mode.group_size;
    quantize.asymmetric = mode.asymmetric;
    quantize.awq = mode.awq;
    quantize.gptq = mode.gptq;
    quantize.lm_head_bits = mode.lm_head_bits;
    quantize.mxfp4 = mode.mxfp4;
    const std::string plan = scratch + "/" + mode.label + ".plan";
    ASSERT_TRUE(CompilePlan(dir, plan, quantize).ok()) << mode.label;
    absl::StatusOr<std::vector<int32_t>> text =
        Tokenize(plan, ReadFile(SourcePath("tests/quant/data/heldout_story.txt")));
    ASSERT_TRUE(text.ok()) << text.status();
    const std::vector<int32_t>& tokens = *text;
    int64_t vocab = 0;
    absl::StatusOr<std::vector<float>> expected =
        DequantizedTeacherForcedLogits(plan, tokens, &vocab);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<std::vector<float>> exact =
        TeacherForcedLogits(plan, tokens, &vocab, llmrt::QuantizedActivations::kF32);
    ASSERT_TRUE(exact.ok()) << exact.status();
    absl::StatusOr<std::vector<float>> int8 =
        TeacherForcedLogits(plan, tokens, &vocab, llmrt::QuantizedActivations::kInt8);
    ASSERT_TRUE(int8.ok()) << int8.status();
    ASSERT_EQ(exact->size(), expected->size());
    float exact_difference = 0, int8_difference = 0;
    for (size_t i = 0; i < expected->size(); ++i) {
      exact_difference = std::max(exact_difference, std::fabs((*exact)[i] - (*expected)[i]));
      int8_difference = std::max(int8_difference, std::fabs((*int8)[i] - (*expected)[i]));
    }
    std::printf("%-20s max |logit - dequantized plan|: f32 activations %.2e, int8 %.2e\n",
                mode.label, exact_difference, int8_difference);
    EXPECT_LE(exact_difference, 1e-3f) << mode.label;
    EXPECT_GT(int8_difference, 1e-2f) << mode.label;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, QuantAccuracyTest, ::testing::ValuesIn(ModelDirs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return std::filesystem::path(info.param).filename().string();
                         });

}  // namespace
}  // namespace llmc::quant_testing
