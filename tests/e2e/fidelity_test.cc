// `llmrt eval` and `llmrt perplexity` through the built tools, as a user runs them:
//
//   eval:        the logits of a token file equal transformers' (the fixture's
//                reference_logits.bin) within 1e-4, also when the file is longer than one append;
//   perplexity:  equals transformers' on tests/fixtures/perplexity/text.txt within 1e-4 relative
//                (reference made by tests/fixtures/make_perplexity_reference.py), for a random
//                fixture and the trained stories260K model, at two window lengths;
//   --kl-base:   a plan against its own saved logits gives KL 0 and agreement 1; int8 against
//                f32 gives a small KL > 0;
//   bad input:   bad token ids, missing files, a --kl-base from other windows, text or vocabulary:
//                exit 1, a message naming the file and what differs, no output file left.
#include "tools/llmrt/fidelity.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/test_util.h"

namespace llmc::testing {
namespace {

using ::testing::HasSubstr;

// The bar for an f32 plan against transformers' float32 forward.
constexpr double kLogitTolerance = 1e-4;
constexpr double kPerplexityRelativeTolerance = 1e-4;

const char kTextPath[] = "tests/fixtures/perplexity/text.txt";
const char kReferencePath[] = "tests/fixtures/perplexity/perplexity.json";

// Compiles `model_dir` (relative to the source tree) with the built llmc; `flags` e.g.
// "--dtype f32 --quant int8".
std::string CompilePlan(const std::string& model_dir, const std::string& flags) {
  const std::string plan = MakeScratchDir("plan") + "/model.plan";
  CommandResult result = RunCommand(ToolPath("llmc") + " compile " + SourcePath(model_dir) +
                                    " -o " + plan + " --quiet " + flags);
  EXPECT_EQ(result.exit_code, 0) << result.error;
  return plan;
}

std::string Llmrt(const std::string& arguments) { return ToolPath("llmrt") + " " + arguments; }

// The number after "`label`: " in the tool's output; NaN when absent.
double Field(const std::string& output, const std::string& label) {
  const size_t at = output.find(label + ": ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(output.substr(at + label.size() + 2));
}

// The standard error after "perplexity: X +/- ".
double PerplexityError(const std::string& output) {
  const size_t at = output.find("perplexity: ");
  const size_t plus_minus = output.find("+/- ", at);
  if (at == std::string::npos || plus_minus == std::string::npos) return std::nan("");
  return std::stod(output.substr(plus_minus + 4));
}

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

std::string JoinIds(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t index = 0; index < ids.size(); ++index) {
    // Mixed separators: the format is "whitespace", not "spaces".
    text += std::to_string(ids[index]) + (index % 7 == 6 ? "\n" : index % 3 == 2 ? "\t" : " ");
  }
  return text;
}

// ---- perplexity vs transformers ----

// The parameter: a key of perplexity.json's "models".
class PerplexityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PerplexityTest, MatchesTransformers) {
  const nlohmann::json reference =
      nlohmann::json::parse(ReadFile(SourcePath(kReferencePath))).at("models").at(GetParam());
  const std::string plan = CompilePlan(reference.at("directory"), "--dtype f32");

  // The same token ids as transformers' tokenizer, or the perplexities would not compare.
  CommandResult tokens =
      RunCommand(Llmrt("tokenize " + plan + " - --special --ids-only < " + SourcePath(kTextPath)));
  ASSERT_EQ(tokens.exit_code, 0) << tokens.error;
  std::vector<int32_t> expected_ids = reference.at("text_tokens").get<std::vector<int32_t>>();
  std::string expected_line;
  for (int32_t id : expected_ids)
    expected_line += (expected_line.empty() ? "" : " ") + std::to_string(id);
  EXPECT_EQ(tokens.output, expected_line + "\n");

  for (const nlohmann::json& window : reference.at("windows")) {
    const int ctx = window.at("ctx");
    CommandResult run = RunCommand(Llmrt("perplexity " + plan + " " + SourcePath(kTextPath) +
                                         " --ctx " + std::to_string(ctx)));
    ASSERT_EQ(run.exit_code, 0) << run.error;
    const double expected = window.at("perplexity");
    const double ours = Field(run.output, "perplexity");
    EXPECT_NEAR(ours, expected, kPerplexityRelativeTolerance * expected)
        << GetParam() << " ctx " << ctx << "\n"
        << run.output;
    const double expected_error = window.at("standard_error");
    EXPECT_NEAR(PerplexityError(run.output), expected_error,
                kPerplexityRelativeTolerance * expected_error)
        << run.output;
    EXPECT_EQ(Field(run.output, "tokens scored"), window.at("tokens_scored").get<double>());
    std::printf("%s ctx %d: perplexity ours %.6f, transformers %.6f (relative %.2g)\n",
                GetParam().c_str(), ctx, ours, expected, std::fabs(ours - expected) / expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PerplexityTest, ::testing::Values("llama_mha", "stories260K"));

// ---- eval vs transformers' logits ----

struct Reference {
  std::vector<int32_t> ids;  // prompt_ids + greedy_ids[:-1]: what reference_logits.bin ran on
  int64_t vocab_size = 0;
  std::vector<float> logits;
};

Reference LoadFixture(const std::string& name) {
  const std::string dir = SourcePath("tests/fixtures/" + name);
  const nlohmann::json json = nlohmann::json::parse(ReadFile(dir + "/reference.json"));
  Reference reference;
  reference.ids = json.at("prompt_ids").get<std::vector<int32_t>>();
  std::vector<int32_t> greedy = json.at("greedy_ids").get<std::vector<int32_t>>();
  reference.ids.insert(reference.ids.end(), greedy.begin(), greedy.end() - 1);
  reference.vocab_size = json.at("vocab_size");
  reference.logits = ReadFloats(dir + "/reference_logits.bin");
  return reference;
}

TEST(EvalTest, LogitsMatchTransformers) {
  for (const char* fixture : {"llama_mha", "qwen2_bias", "mistral_sliding"}) {
    const Reference reference = LoadFixture(fixture);
    const std::string plan = CompilePlan(std::string("tests/fixtures/") + fixture, "--dtype f32");
    const std::string dir = MakeScratchDir("eval");
    WriteFile(dir + "/tokens.txt", JoinIds(reference.ids));
    CommandResult run = RunCommand(Llmrt("eval " + plan + " --tokens " + dir +
                                         "/tokens.txt --logits-out " + dir + "/logits.bin"));
    ASSERT_EQ(run.exit_code, 0) << run.error;
    const std::vector<float> logits = ReadFloats(dir + "/logits.bin");
    ASSERT_EQ(logits.size(), reference.logits.size()) << fixture;
    double worst = 0;
    for (size_t index = 0; index < logits.size(); ++index) {
      worst =
          std::max(worst, static_cast<double>(std::fabs(logits[index] - reference.logits[index])));
    }
    EXPECT_LE(worst, kLogitTolerance) << fixture;
    std::printf("%s: eval logits max |ours - transformers| %.3g over %zu x %lld\n", fixture, worst,
                reference.ids.size(), static_cast<long long>(reference.vocab_size));
  }
}

// Longer than one append (256 tokens): the rows of a long file equal those of its prefix run
// alone, so chunking neither drops nor shifts rows.
TEST(EvalTest, LongFileIsChunkedWithoutShiftingRows) {
  const Reference reference = LoadFixture("llama_mha");
  const std::string plan = CompilePlan("tests/fixtures/llama_mha", "--dtype f32");
  const std::string dir = MakeScratchDir("eval-long");
  std::vector<int32_t> ids = reference.ids;
  for (int index = 0; ids.size() < 300; ++index) ids.push_back(3 + (index * 37) % 509);
  WriteFile(dir + "/long.txt", JoinIds(ids));
  CommandResult run = RunCommand(
      Llmrt("eval " + plan + " --tokens " + dir + "/long.txt --logits-out " + dir + "/long.bin"));
  ASSERT_EQ(run.exit_code, 0) << run.error;
  const std::vector<float> logits = ReadFloats(dir + "/long.bin");
  ASSERT_EQ(logits.size(), ids.size() * reference.vocab_size);
  for (size_t index = 0; index < reference.logits.size(); ++index) {
    ASSERT_NEAR(logits[index], reference.logits[index], kLogitTolerance) << "logit " << index;
  }
}

// ---- KL against saved logits ----

class KlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    f32_plan_ = CompilePlan("tests/fixtures/llama_mha", "--dtype f32");
    dir_ = MakeScratchDir("kl");
    base_ = dir_ + "/base.logits";
    CommandResult saved = RunCommand(
        Llmrt("perplexity " + f32_plan_ + " " + Text() + " --ctx 128 --save-logits " + base_));
    ASSERT_EQ(saved.exit_code, 0) << saved.error;
    ASSERT_TRUE(FileExists(base_));
  }
  static std::string Text() { return SourcePath(kTextPath); }

  std::string f32_plan_;
  std::string dir_;
  std::string base_;
};

TEST_F(KlTest, PlanAgainstItselfIsZeroWithFullAgreement) {
  // No --ctx: taken from the base file.
  CommandResult run =
      RunCommand(Llmrt("perplexity " + f32_plan_ + " " + Text() + " --kl-base " + base_));
  ASSERT_EQ(run.exit_code, 0) << run.error;
  EXPECT_EQ(Field(run.output, "mean KL(base||this)"), 0.0) << run.output;
  EXPECT_EQ(Field(run.output, "max KL(base||this)"), 0.0) << run.output;
  EXPECT_EQ(Field(run.output, "top-1 agreement"), 1.0) << run.output;
  EXPECT_EQ(Field(run.output, "perplexity"), Field(run.output, "base perplexity"));
}

TEST_F(KlTest, Int8AgainstF32IsSmallButNotZero) {
  const std::string int8_plan = CompilePlan("tests/fixtures/llama_mha", "--dtype f32 --quant int8");
  CommandResult run =
      RunCommand(Llmrt("perplexity " + int8_plan + " " + Text() + " --ctx 128 --kl-base " + base_));
  ASSERT_EQ(run.exit_code, 0) << run.error;
  const double mean_kl = Field(run.output, "mean KL(base||this)");
  // docs/quantization.md: int8 per-channel stays near 0.01 mean KL on these fixtures.
  EXPECT_GT(mean_kl, 0.0) << run.output;
  EXPECT_LT(mean_kl, 0.05) << run.output;
  EXPECT_GE(Field(run.output, "max KL(base||this)"), mean_kl);
  EXPECT_GT(Field(run.output, "top-1 agreement"), 0.8) << run.output;
  std::printf("llama_mha int8 vs f32: %s", run.output.c_str());
}

TEST_F(KlTest, MismatchedBaseIsAClearError) {
  const std::string plan_and_text = "perplexity " + f32_plan_ + " " + Text();
  // Other windows.
  CommandResult ctx = RunCommand(Llmrt(plan_and_text + " --ctx 64 --kl-base " + base_));
  EXPECT_EQ(ctx.exit_code, 1);
  EXPECT_THAT(ctx.error, HasSubstr(base_));
  EXPECT_THAT(ctx.error, HasSubstr("saved with --ctx 128, this run uses --ctx 64"));

  // Another text: the same length in tokens but one word changed.
  std::string text = ReadFile(Text());
  text.replace(text.find("red boat"), 8, "big boat");
  WriteFile(dir_ + "/other.txt", text);
  CommandResult other =
      RunCommand(Llmrt("perplexity " + f32_plan_ + " " + dir_ + "/other.txt --kl-base " + base_));
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.error, HasSubstr("a different text or tokenizer"));
  EXPECT_THAT(other.error, HasSubstr("other.txt"));

  // Another vocabulary: a well-formed file from a 256-token model.
  llmrt::fidelity::SavedLogitsHeader header;
  header.vocab_size = 256;
  header.ctx = 128;
  header.first_scored = 64;
  header.num_windows = 1;
  header.num_text_tokens = 200;
  auto writer = llmrt::fidelity::SavedLogitsWriter::Create(dir_ + "/small.logits", header,
                                                           std::vector<int32_t>(128, 1));
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<float> rows(header.rows_per_window() * header.vocab_size, 0.0f);
  ASSERT_TRUE((*writer)->AddWindow(rows.data()).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  CommandResult vocab = RunCommand(Llmrt(plan_and_text + " --kl-base " + dir_ + "/small.logits"));
  EXPECT_EQ(vocab.exit_code, 1);
  EXPECT_THAT(vocab.error, HasSubstr("vocabulary of 256, this plan has 512"));

  // Not a saved-logits file, and a truncated one.
  CommandResult plan_file = RunCommand(Llmrt(plan_and_text + " --kl-base " + f32_plan_));
  EXPECT_EQ(plan_file.exit_code, 1);
  EXPECT_THAT(plan_file.error, HasSubstr("not a saved-logits file"));
  const std::string bytes = ReadFile(base_);
  WriteFile(dir_ + "/cut.logits", bytes.substr(0, bytes.size() - 4));
  CommandResult cut = RunCommand(Llmrt(plan_and_text + " --kl-base " + dir_ + "/cut.logits"));
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_THAT(cut.error, HasSubstr("truncated"));

  CommandResult missing = RunCommand(Llmrt(plan_and_text + " --kl-base " + dir_ + "/nope"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.error, HasSubstr(dir_ + "/nope"));
}

// ---- bad input ----

class BadEvalInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = CompilePlan("tests/fixtures/llama_mha", "--dtype f32");
    dir_ = MakeScratchDir("bad-eval");
  }

  // Runs eval on a token file holding `contents`; the output must never appear.
  CommandResult EvalTokens(const std::string& contents) {
    WriteFile(dir_ + "/tokens.txt", contents);
    CommandResult result = RunCommand(Llmrt("eval " + plan_ + " --tokens " + dir_ +
                                            "/tokens.txt --logits-out " + dir_ + "/out.bin"));
    EXPECT_FALSE(FileExists(dir_ + "/out.bin"));
    return result;
  }

  std::string plan_;
  std::string dir_;
};

TEST_F(BadEvalInputTest, TokenOutsideTheVocabulary) {
  CommandResult result = EvalTokens("1 5 7\n9 512 3\n");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("tokens.txt: token 4 (line 2) is 512, outside the plan's "
                                      "vocabulary [0, 512)"));
  EXPECT_EQ(EvalTokens("1 -3").exit_code, 1);
}

TEST_F(BadEvalInputTest, NotAnInteger) {
  CommandResult result = EvalTokens("1 2 3.5");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("tokens.txt: token 2 (line 1) is \"3.5\""));
}

TEST_F(BadEvalInputTest, EmptyFile) {
  CommandResult result = EvalTokens(" \n\t\n");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("tokens.txt: no token ids"));
}

TEST_F(BadEvalInputTest, LongerThanTheContext) {
  // llama_mha's max_position_embeddings is 512.
  CommandResult result = EvalTokens(JoinIds(std::vector<int32_t>(513, 5)));
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("513 tokens, more than the plan's context of 512"));
}

TEST_F(BadEvalInputTest, MissingFilesAndFlags) {
  CommandResult missing = RunCommand(Llmrt("eval " + plan_ + " --tokens " + dir_ +
                                           "/absent.txt --logits-out " + dir_ + "/out.bin"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.error, HasSubstr(dir_ + "/absent.txt: cannot open"));
  EXPECT_FALSE(FileExists(dir_ + "/out.bin"));

  WriteFile(dir_ + "/ok.txt", "1 2 3");
  CommandResult unwritable = RunCommand(Llmrt("eval " + plan_ + " --tokens " + dir_ +
                                              "/ok.txt --logits-out " + dir_ + "/no/dir/out.bin"));
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_THAT(unwritable.error, HasSubstr(dir_ + "/no/dir/out.bin"));

  EXPECT_EQ(RunCommand(Llmrt("eval " + plan_ + " --tokens " + dir_ + "/ok.txt")).exit_code, 2);
  EXPECT_EQ(RunCommand(Llmrt("eval --tokens x --logits-out y")).exit_code, 2);
  CommandResult no_plan = RunCommand(Llmrt("eval " + dir_ + "/none.plan --tokens " + dir_ +
                                           "/ok.txt --logits-out " + dir_ + "/out.bin"));
  EXPECT_EQ(no_plan.exit_code, 1);
  EXPECT_THAT(no_plan.error, HasSubstr("none.plan"));
}

TEST_F(BadEvalInputTest, PerplexityBadInputs) {
  CommandResult missing = RunCommand(Llmrt("perplexity " + plan_ + " " + dir_ + "/absent.txt"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.error, HasSubstr(dir_ + "/absent.txt: cannot open the text file"));

  WriteFile(dir_ + "/short.txt", "Once upon a time.");
  CommandResult too_short = RunCommand(Llmrt("perplexity " + plan_ + " " + dir_ + "/short.txt"));
  EXPECT_EQ(too_short.exit_code, 1);
  EXPECT_THAT(too_short.error, HasSubstr("fewer than one window of --ctx 512 tokens"));

  CommandResult too_long =
      RunCommand(Llmrt("perplexity " + plan_ + " " + SourcePath(kTextPath) + " --ctx 1024"));
  EXPECT_EQ(too_long.exit_code, 1);
  EXPECT_THAT(too_long.error, HasSubstr("--ctx 1024 is more than the plan's context of 512"));

  EXPECT_EQ(
      RunCommand(Llmrt("perplexity " + plan_ + " " + SourcePath(kTextPath) + " --ctx 2")).exit_code,
      2);
  EXPECT_EQ(RunCommand(Llmrt("perplexity " + plan_)).exit_code, 2);

  // An unwritable --save-logits fails before any window runs and leaves nothing.
  CommandResult unwritable = RunCommand(Llmrt("perplexity " + plan_ + " " + SourcePath(kTextPath) +
                                              " --ctx 64 --save-logits " + dir_ + "/no/x.logits"));
  EXPECT_EQ(unwritable.exit_code, 1);
  EXPECT_THAT(unwritable.error, HasSubstr(dir_ + "/no/x.logits"));
}

TEST(FidelityHelpTest, HelpSaysWhatIsScored) {
  CommandResult help = RunCommand(Llmrt("perplexity --help"));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("SECOND"));
  EXPECT_THAT(help.output, HasSubstr("llama-perplexity"));
  EXPECT_EQ(RunCommand(Llmrt("eval --help")).exit_code, 0);
}

}  // namespace
}  // namespace llmc::testing
