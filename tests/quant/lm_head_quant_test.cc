// `llmc compile --lm-head-quant int8|int4`: the lm_head's own quantization format, through the
// built tools. The flag's parsing and errors, the plan it writes (the lm_head's encoding next
// to the body's, PlanMeta.quantization, what `llmrt inspect` shows) and that calibration
// (--awq) leaves the lm_head round-to-nearest. That the plan computes its dequantized model is
// QuantExactModeTest's check, its accuracy QuantAccuracyTest.LmHeadInt8's (accuracy_test.cc).
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/plan_reader.h"
#include "tests/e2e/test_util.h"
#include "tests/quant/accuracy.h"

namespace llmc::quant_testing {
namespace {

namespace plan = llmrt::plan;
using ::llmc::testing::CommandResult;
using ::llmc::testing::FileExists;
using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::RunCommand;
using ::llmc::testing::SourcePath;
using ::llmc::testing::ToolPath;
using ::llmc::testing::WriteFile;
using ::testing::HasSubstr;

// An untied fixture (hidden 64, vocab 512) and the tied, trained stories260K.
constexpr char kUntied[] = "tests/fixtures/llama_mha";
constexpr char kTied[] = "tests/data/stories260K";

CommandResult Llmc(const std::string& model, const std::string& plan_path,
                   const std::string& flags) {
  return RunCommand(ToolPath("llmc") + " compile " + SourcePath(model) + " -o " + plan_path +
                    " --quiet " + flags);
}

TEST(LmHeadQuantCliTest, RejectsBadInput) {
  const std::string plan_path = MakeScratchDir("lm-head-cli") + "/out.plan";
  struct Case {
    const char* model;
    const char* flags;
    int exit_code;  // 2: usage error, 1: compile error
    const char* message;
  };
  const Case cases[] = {
      {kUntied, "--lm-head-quant int8", 2, "--lm-head-quant needs --quant int8|int4"},
      {kUntied, "--quant int4 --lm-head-quant int2", 2,
       "--lm-head-quant: expected int8 or int4, found \"int2\""},
      {kUntied, "--quant int4 --lm-head-quant=f16", 2,
       "--lm-head-quant: expected int8 or int4, found \"f16\""},
      {kUntied, "--quant int4 --lm-head-quant", 2, "--lm-head-quant needs int8 or int4"},
      // The boolean flag it replaced is gone.
      {kUntied, "--quant int4 --quantize-lm-head", 2, "unknown option --quantize-lm-head"},
      // int4's groups must divide the lm_head's width (hidden_size 64 here).
      {kUntied, "--quant int8 --group-size 128 --lm-head-quant int4", 1,
       "hidden_size 64, the lm_head's width; expected a multiple of the group size 128"},
  };
  for (const Case& c : cases) {
    const CommandResult result = Llmc(c.model, plan_path, c.flags);
    EXPECT_EQ(result.exit_code, c.exit_code) << c.flags << "\n" << result.error;
    EXPECT_THAT(result.error, HasSubstr(c.message)) << c.flags;
    EXPECT_FALSE(FileExists(plan_path)) << c.flags;
  }
}

struct Expected {
  const char* name;  // the test's name suffix
  const char* flags;
  plan::DType head_dtype;
  int head_group_size;  // 0: one scale per row (group_size == the lm_head's width)
  plan::Quantization::Scheme head_scheme;
  plan::DType body_dtype;
  const char* quantization;  // PlanMeta.quantization
  const char* inspect;       // the lm_head's encoding in `llmrt inspect`
};

void PrintTo(const Expected& expected, std::ostream* out) { *out << expected.flags; }

class LmHeadQuantPlanTest : public ::testing::TestWithParam<Expected> {};

// The lm_head has the encoding the flag asks for, independently of the body's; the plan runs.
TEST_P(LmHeadQuantPlanTest, LmHeadHasItsOwnEncoding) {
  const Expected& expected = GetParam();
  const std::string plan_path = MakeScratchDir("lm-head-plan") + "/out.plan";
  const CommandResult compiled = Llmc(kUntied, plan_path, expected.flags);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
  absl::StatusOr<std::unique_ptr<plan::Plan>> opened = plan::Plan::Open(plan_path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta& meta = (*opened)->meta();
  EXPECT_EQ(meta.quantization(), expected.quantization);

  int logits_ops = 0, matmul_ops = 0;
  std::string head_name;
  for (const plan::Op& op : meta.program().ops()) {
    if (op.kind() != plan::LOGITS && op.kind() != plan::MATMUL) continue;
    ASSERT_GE(op.weights_size(), 1);
    const plan::Tensor& weight = meta.tensors(op.weights(0));
    const plan::Quantization& q = weight.quantization();
    if (op.kind() == plan::MATMUL) {
      // down_proj (172 inputs) stays float in int4 plans.
      if (weight.dtype() == plan::F32) continue;
      ++matmul_ops;
      EXPECT_EQ(weight.dtype(), expected.body_dtype) << weight.name();
      continue;
    }
    ++logits_ops;
    head_name = weight.name();
    ASSERT_EQ(weight.dtype(), expected.head_dtype) << weight.name();
    ASSERT_EQ(weight.shape_size(), 2);
    const int64_t rows = weight.shape(0), cols = weight.shape(1);
    EXPECT_EQ(rows, 512);
    EXPECT_EQ(cols, 64);
    const int64_t group = expected.head_group_size == 0 ? cols : expected.head_group_size;
    EXPECT_EQ(q.bits(), expected.head_dtype == plan::I8 ? 8 : 4);
    EXPECT_EQ(q.group_size(), group);
    EXPECT_EQ(q.scheme(), expected.head_scheme);
    // Round-to-nearest whatever the body's method: calibration records no lm_head inputs.
    EXPECT_EQ(q.method(), "rtn");
    ASSERT_TRUE(q.has_scales());
    const plan::Tensor& scales = meta.tensors(q.scales());
    EXPECT_EQ(scales.dtype(), plan::F16);
    ASSERT_EQ(scales.shape_size(), 2);
    EXPECT_EQ(scales.shape(0), rows);
    EXPECT_EQ(scales.shape(1), cols / group);
    EXPECT_EQ(q.has_zero_points(), expected.head_scheme == plan::Quantization::ASYMMETRIC);
  }
  EXPECT_EQ(logits_ops, 1);
  EXPECT_GT(matmul_ops, 0);

  const CommandResult inspect = RunCommand(ToolPath("llmrt") + " inspect " + plan_path);
  ASSERT_EQ(inspect.exit_code, 0) << inspect.error;
  EXPECT_THAT(inspect.output, HasSubstr(expected.inspect)) << inspect.output;
  EXPECT_THAT(inspect.output, HasSubstr(head_name));

  const CommandResult run = RunCommand(ToolPath("llmrt") + " run " + plan_path +
                                       " -p \"Once upon a time\" -n 8 --temp 0");
  EXPECT_EQ(run.exit_code, 0) << run.error;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, LmHeadQuantPlanTest,
    ::testing::Values(
        // The like-for-like of llama.cpp's Q4_0 files: int8 codes, one f16 scale per row,
        // (64 + 2) / 64 bytes per weight.
        Expected{"Int4PlanInt8Head", "--quant int4 --lm-head-quant int8", plan::I8, 0,
                 plan::Quantization::SYMMETRIC, plan::I4, "int4 g32 symmetric rtn, lm_head int8",
                 "bytes  i8 per-row sym (f16 scales) rtn 1.031 B/weight"},
        // int8 even in an asymmetric AWQ plan, and still rtn.
        Expected{"AsymmetricAwqInt4PlanInt8Head",
                 "--quant int4 --scheme asymmetric --awq --lm-head-quant=int8", plan::I8, 0,
                 plan::Quantization::SYMMETRIC, plan::I4, "int4 g32 asymmetric awq, lm_head int8",
                 "bytes  i8 per-row sym (f16 scales) rtn 1.031 B/weight"},
        // int4 in an int8 per-channel plan: groups of 32 (0.5 + 2 / 32 bytes per weight).
        Expected{"Int8PlanInt4Head", "--quant int8 --lm-head-quant int4", plan::I4, 32,
                 plan::Quantization::SYMMETRIC, plan::I8,
                 "int8 per-channel symmetric rtn, lm_head int4",
                 "bytes, LANE_CHUNKS  i4 g32 sym (f16 scales) rtn 0.5625 B/weight"},
        // int4 takes the plan's group size and scheme.
        Expected{"Int4G64AsymmetricPlanInt4Head",
                 "--quant int4 --group-size 64 --scheme asymmetric --lm-head-quant int4", plan::I4,
                 64, plan::Quantization::ASYMMETRIC, plan::I4,
                 "int4 g64 asymmetric rtn, lm_head int4",
                 "bytes, LANE_CHUNKS  i4 per-row asym (f16 scales, u8 zeros) rtn 0.5469 B/weight"}),
    [](const ::testing::TestParamInfo<Expected>& info) { return std::string(info.param.name); });

// A tied lm_head: the embed keeps the float table and the logits read a quantized copy of it,
// "model.embed_tokens.weight[0:vocab]". Its logits are those of the untied twin (lm_head.weight
// = the table) compiled with the same flags, to the bit: the same matrix quantized the same way.
TEST(TiedLmHeadQuantTest, LogitsReadAQuantizedCopyAndMatchTheUntiedTwin) {
  const std::string dir = MakeScratchDir("lm-head-tied");
  const std::string untied = dir + "/untied";
  ASSERT_TRUE(WriteUntiedCopy(SourcePath(kTied), untied).ok());
  const std::string flags = "--quant int4 --lm-head-quant int8";
  const std::string tied_plan = dir + "/tied.plan", untied_plan = dir + "/untied.plan";
  CommandResult compiled = Llmc(kTied, tied_plan, flags);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
  compiled = RunCommand(ToolPath("llmc") + " compile " + untied + " -o " + untied_plan +
                        " --quiet " + flags);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;

  absl::StatusOr<std::unique_ptr<plan::Plan>> opened = plan::Plan::Open(tied_plan);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta& meta = (*opened)->meta();
  int checked = 0;
  for (const plan::Op& op : meta.program().ops()) {
    if (op.kind() != plan::EMBED && op.kind() != plan::LOGITS) continue;
    const plan::Tensor& table = meta.tensors(op.weights(0));
    ASSERT_EQ(table.shape_size(), 2);
    if (op.kind() == plan::EMBED) {
      EXPECT_EQ(table.name(), "model.embed_tokens.weight");
      EXPECT_EQ(table.dtype(), plan::F32);
    } else {
      EXPECT_EQ(table.name(),
                "model.embed_tokens.weight[0:" + std::to_string(table.shape(0)) + "]");
      EXPECT_EQ(table.dtype(), plan::I8);
      EXPECT_EQ(table.quantization().group_size(), table.shape(1));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);

  const std::string tokens = dir + "/tokens.txt";
  WriteFile(tokens, "1 403 407 261 378 298 284 429 470 2 9 300 33 0 511");
  std::string logits[2];
  const std::string plans[2] = {tied_plan, untied_plan};
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir + "/logits" + std::to_string(i) + ".bin";
    const CommandResult eval = RunCommand(ToolPath("llmrt") + " eval " + plans[i] + " --tokens " +
                                          tokens + " --logits-out " + out + " --threads 1");
    ASSERT_EQ(eval.exit_code, 0) << eval.error;
    logits[i] = ReadFile(out);
  }
  EXPECT_EQ(logits[0].size(), 15u * 512u * sizeof(float));
  EXPECT_TRUE(logits[0] == logits[1]) << "tied and untied int8 lm_heads give different logits";
}

}  // namespace
}  // namespace llmc::quant_testing
