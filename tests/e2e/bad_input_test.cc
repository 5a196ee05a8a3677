// Bad input caught where it starts, through the built tools:
//   * a checkpoint with a NaN or Inf weight stops `llmc compile` with the tensor and the index
//     (it used to compile, and every logit came out NaN);
//   * `llmrt run` that reaches the context limit says so on stderr (it used to stop silently);
//   * outputs only ever replace regular files; configs and tokenizers beyond the plan format's
//     bounds stop the compile; inspect --verify and run check the same; run samples as the
//     plan's generation_config says.
#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/plan_format.h"
#include "runtime/plan/proto/plan.pb.h"
#include "tests/e2e/test_util.h"

namespace llmc::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Copies the fixture `fixture` and overwrites element `flat_index` of `tensor` (f32) with
// `value`, found through the safetensors header (u64 header size, JSON, then data at
// data_offsets). Returns the copy's directory.
std::string CopyWithPoisonedWeight(const std::string& fixture, const std::string& tensor,
                                   int64_t flat_index, float value) {
  const std::string dir = MakeScratchDir("poisoned-" + fixture);
  CopyDir(SourcePath("tests/fixtures/" + fixture), dir);
  const std::string path = dir + "/model.safetensors";
  std::string bytes = ReadFile(path);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), sizeof(header_size));
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size));
  const nlohmann::json& entry = header.at(tensor);
  EXPECT_EQ(entry.at("dtype"), "F32");
  const uint64_t begin = entry.at("data_offsets")[0];
  std::memcpy(&bytes[8 + header_size + begin + 4 * flat_index], &value, sizeof(value));
  WriteFile(path, bytes);
  return dir;
}

TEST(NonFiniteWeightTest, NanStopsTheCompileNamingTensorAndIndex) {
  // up_proj is [172, 64]: flat 1000 = row 15, column 40.
  const std::string dir =
      CopyWithPoisonedWeight("llama_mha", "model.layers.1.mlp.up_proj.weight", 1000, std::nanf(""));
  const std::string plan = dir + "/out.plan";
  CommandResult result =
      RunCommand(ToolPath("llmc") + " compile " + dir + " -o " + plan + " --quiet");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr(dir + "/model.safetensors"));
  EXPECT_THAT(result.error, HasSubstr("model.layers.1.mlp.up_proj.weight"));
  EXPECT_THAT(result.error, HasSubstr("NaN at index [15, 40] (flat index 1000)"));
  EXPECT_FALSE(FileExists(plan));
}

TEST(NonFiniteWeightTest, InfInANormAndUnderQuantization) {
  // A 1-D tensor, and a --quant compile (the check runs before any rewriting).
  const std::string dir = CopyWithPoisonedWeight("llama_mha", "model.norm.weight", 63,
                                                 -std::numeric_limits<float>::infinity());
  const std::string plan = dir + "/out.plan";
  CommandResult result =
      RunCommand(ToolPath("llmc") + " compile " + dir + " -o " + plan + " --quiet --quant int8");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("model.norm.weight"));
  EXPECT_THAT(result.error, HasSubstr("-Inf at index [63]"));
  EXPECT_FALSE(FileExists(plan));
}

std::string CompileStories() {
  const std::string plan = MakeScratchDir("stories") + "/stories.plan";
  CommandResult result =
      RunCommand(ToolPath("llmc") + " compile " + SourcePath("tests/data/stories260K") + " -o " +
                 plan + " --quiet --dtype f32");
  EXPECT_EQ(result.exit_code, 0) << result.error;
  return plan;
}

TEST(ContextLimitTest, RunSaysItStoppedAtTheLimit) {
  const std::string plan = CompileStories();
  // "Once upon a time" is 5 tokens with BOS; 40 new tokens would need 45.
  CommandResult run = RunCommand(ToolPath("llmrt") + " run " + plan +
                                 " --temp 0 -n 40 --ctx 20 -p \"Once upon a time\"");
  EXPECT_EQ(run.exit_code, 0) << run.error;
  EXPECT_THAT(
      run.error,
      HasSubstr("llmrt: stopped at the context limit (20 tokens) after 16 generated tokens"));
  EXPECT_FALSE(run.output.empty());

  // The plan's own limit: stories260K's max_position_embeddings is 512.
  CommandResult plan_limit =
      RunCommand(ToolPath("llmrt") + " run " + plan + " --temp 0 -n 600 -p \"Once upon a time\"");
  EXPECT_EQ(plan_limit.exit_code, 0) << plan_limit.error;
  EXPECT_THAT(plan_limit.error, HasSubstr("stopped at the context limit (512 tokens)"));

  // Within the limit: no message.
  CommandResult short_run = RunCommand(ToolPath("llmrt") + " run " + plan +
                                       " --temp 0 -n 5 --ctx 20 -p \"Once upon a time\"");
  EXPECT_EQ(short_run.exit_code, 0) << short_run.error;
  EXPECT_THAT(short_run.error, Not(HasSubstr("context limit")));

  // A prompt longer than the context is an error, not a silent stop, and nothing is echoed.
  CommandResult long_prompt = RunCommand(ToolPath("llmrt") + " run " + plan +
                                         " --temp 0 -n 5 --ctx 3 -p \"Once upon a time\"");
  EXPECT_EQ(long_prompt.exit_code, 1);
  EXPECT_THAT(long_prompt.error, HasSubstr("the prompt is 5 tokens; the context holds 3"));
  EXPECT_EQ(long_prompt.output, "");
}

// Outputs are renamed onto the name given: never onto something that is not a regular file
// (as root, `-o /dev/null` used to replace the device node with a plan), never onto one of the
// checkpoint's own files, and through a symbolic link onto its target.
TEST(OutputPathTest, OnlyRegularFilesAreReplaced) {
  const std::string dir = MakeScratchDir("output-paths");
  const std::string stories = SourcePath("tests/data/stories260K");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(RunCommand("mkfifo " + fifo).exit_code, 0);
  CommandResult to_fifo =
      RunCommand(ToolPath("llmc") + " compile " + stories + " -o " + fifo + " --quiet");
  EXPECT_EQ(to_fifo.exit_code, 1);
  EXPECT_THAT(to_fifo.error, HasSubstr("is a FIFO, not a regular file"));
  EXPECT_EQ(RunCommand("test -p " + fifo).exit_code, 0) << "the FIFO was replaced";
  // Reading one is refused too, at once rather than waiting for a writer.
  CommandResult inspect_fifo = RunCommand("timeout 20 " + ToolPath("llmrt") + " inspect " + fifo);
  EXPECT_EQ(inspect_fifo.exit_code, 1);
  EXPECT_THAT(inspect_fifo.error, HasSubstr("not a regular file"));

  const std::string model = dir + "/model";
  CopyDir(stories, model);
  const std::string weights = ReadFile(model + "/model.safetensors");
  CommandResult over_input = RunCommand(ToolPath("llmc") + " compile " + model + " -o " + model +
                                        "/model.safetensors --quiet");
  EXPECT_EQ(over_input.exit_code, 1);
  EXPECT_THAT(over_input.error, HasSubstr("one of the files the plan is compiled from"));
  EXPECT_EQ(ReadFile(model + "/model.safetensors"), weights);

  ASSERT_EQ(RunCommand("ln -s target.plan " + dir + "/link.plan").exit_code, 0);
  CommandResult through_link =
      RunCommand(ToolPath("llmc") + " compile " + stories + " -o " + dir + "/link.plan --quiet");
  EXPECT_EQ(through_link.exit_code, 1) << "a link to a missing file";
  WriteFile(dir + "/target.plan", "old");
  through_link =
      RunCommand(ToolPath("llmc") + " compile " + stories + " -o " + dir + "/link.plan --quiet");
  EXPECT_EQ(through_link.exit_code, 0) << through_link.error;
  EXPECT_EQ(RunCommand("test -L " + dir + "/link.plan").exit_code, 0) << "the link was replaced";
  EXPECT_GT(ReadFile(dir + "/target.plan").size(), 1000u);
}

// A checkpoint whose config or tokenizer the runtime could not run stops the compile, named,
// instead of becoming a plan that `llmrt` refuses (or a compile that runs for minutes).
TEST(CheckpointBoundsTest, ConfigAndTokenizerAgreeWithThePlanFormat) {
  const std::string stories = SourcePath("tests/data/stories260K");
  auto compile_with = [&](const std::string& name, const std::string& file,
                          const std::function<void(nlohmann::json&)>& edit,
                          const std::string& flags = "") {
    const std::string dir = MakeScratchDir(name);
    CopyDir(stories, dir);
    nlohmann::json json = nlohmann::json::parse(ReadFile(dir + "/" + file));
    edit(json);
    WriteFile(dir + "/" + file, json.dump());
    return RunCommand("timeout 120 " + ToolPath("llmc") + " compile " + dir + " -o " + dir +
                      "/out.plan --quiet " + flags);
  };
  CommandResult layers = compile_with("layers", "config.json", [](nlohmann::json& config) {
    config["num_hidden_layers"] = 1000000;
  });
  EXPECT_EQ(layers.exit_code, 1);
  EXPECT_THAT(layers.error, HasSubstr("num_hidden_layers"));
  EXPECT_THAT(layers.error, HasSubstr("fewer than 65536"));

  CommandResult beyond_vocab =
      compile_with("beyond-vocab", "tokenizer.json", [](nlohmann::json& tokenizer) {
        tokenizer["added_tokens"].push_back({{"id", 512},
                                             {"content", "<x>"},
                                             {"special", false},
                                             {"single_word", false},
                                             {"lstrip", false},
                                             {"rstrip", false},
                                             {"normalized", false}});
      });
  EXPECT_EQ(beyond_vocab.exit_code, 1);
  EXPECT_THAT(beyond_vocab.error, HasSubstr("config.json's vocab_size is 512"));

  CommandResult keep_float = compile_with(
      "keep-float", "config.json", [](nlohmann::json&) {}, "--quant int4 --keep-float zzzz");
  EXPECT_EQ(keep_float.exit_code, 1);
  EXPECT_THAT(keep_float.error, HasSubstr("--keep-float: 'zzzz' is in no weight's name"));
}

// `llmrt inspect --verify` loads the plan as `llmrt run` does: a program the runtime refuses
// is refused there too, not reported as verified.
TEST(InspectVerifyTest, ChecksWhatRunChecks) {
  const std::string plan = CompileStories();
  CommandResult verified = RunCommand(ToolPath("llmrt") + " inspect " + plan + " --verify");
  EXPECT_EQ(verified.exit_code, 0) << verified.error;
  EXPECT_THAT(verified.output, HasSubstr("verified: blob checksums, program, tokenizer"));

  // The same plan with one op reading a value that does not exist, the meta's checksum fixed:
  // it opens (inspect without --verify prints it), and run and inspect --verify refuse it alike.
  std::string bytes = ReadFile(plan);
  llmrt::plan::PlanHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  llmrt::plan::PlanMeta meta;
  ASSERT_TRUE(meta.ParseFromString(bytes.substr(header.meta_offset, header.meta_size)));
  ASSERT_GT(meta.program().ops_size(), 1);
  ASSERT_GT(meta.program().ops(1).inputs_size(), 0);
  meta.mutable_program()->mutable_ops(1)->set_inputs(0, 9999);
  const std::string meta_bytes = meta.SerializeAsString();
  bytes.resize(header.meta_offset);
  bytes += meta_bytes;
  bytes.resize((bytes.size() + llmrt::plan::kFilePadding - 1) / llmrt::plan::kFilePadding *
                   llmrt::plan::kFilePadding,
               '\0');
  header.meta_size = meta_bytes.size();
  header.file_size = bytes.size();
  header.meta_checksum = XXH64(meta_bytes.data(), meta_bytes.size(), 0);
  std::memcpy(bytes.data(), &header, sizeof(header));
  const std::string broken = MakeScratchDir("broken-program") + "/broken.plan";
  WriteFile(broken, bytes);
  EXPECT_EQ(RunCommand(ToolPath("llmrt") + " inspect " + broken).exit_code, 0);
  const CommandResult run = RunCommand(ToolPath("llmrt") + " run " + broken + " -n 2 -p Once");
  const CommandResult verify = RunCommand(ToolPath("llmrt") + " inspect " + broken + " --verify");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(verify.exit_code, 1);
  EXPECT_THAT(verify.error, HasSubstr("9999"));
  EXPECT_EQ(verify.error, run.error);
}

// The plan's generation_config.json samples alike in `llmrt run` and the server: its
// repetition_penalty included (run used to ignore it), and --repetition-penalty overrides it.
TEST(GenerationConfigTest, RunAppliesTheRepetitionPenalty) {
  const std::string dir = MakeScratchDir("repetition");
  CopyDir(SourcePath("tests/data/stories260K"), dir);
  const std::string compile = ToolPath("llmc") + " compile " + dir + " --quiet -o ";
  ASSERT_EQ(RunCommand(compile + dir + "/plain.plan").exit_code, 0);
  WriteFile(dir + "/generation_config.json",
            R"({"bos_token_id": 1, "eos_token_id": 2, "repetition_penalty": 3.0})");
  ASSERT_EQ(RunCommand(compile + dir + "/penalized.plan").exit_code, 0);
  const std::string run = ToolPath("llmrt") + " run " + dir + "/penalized.plan -n 40 -p Once";
  const CommandResult penalized = RunCommand(run);
  const CommandResult plain = RunCommand(run + " --repetition-penalty 1");
  const CommandResult reference =
      RunCommand(ToolPath("llmrt") + " run " + dir + "/plain.plan -n 40 -p Once");
  ASSERT_EQ(penalized.exit_code, 0) << penalized.error;
  EXPECT_EQ(plain.output, reference.output);
  EXPECT_NE(penalized.output, plain.output);
}

}  // namespace
}  // namespace llmc::testing
