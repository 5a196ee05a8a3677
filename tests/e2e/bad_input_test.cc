// Bad input caught where it starts, through the built tools:
//   * a checkpoint with a NaN or Inf weight stops `llmc compile` with the tensor and the index
//     (it used to compile, and every logit came out NaN);
//   * `llmrt run` that reaches the context limit says so on stderr (it used to stop silently).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

  // A prompt longer than the context is an error, not a silent stop.
  CommandResult long_prompt = RunCommand(ToolPath("llmrt") + " run " + plan +
                                         " --temp 0 -n 5 --ctx 3 -p \"Once upon a time\"");
  EXPECT_EQ(long_prompt.exit_code, 1);
  EXPECT_THAT(long_prompt.error, HasSubstr("exceed the context of 3 tokens"));
}

}  // namespace
}  // namespace llmc::testing
