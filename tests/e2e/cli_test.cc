// End-to-end tests through the command-line tools, as a user runs them: llmc compile, then
// llmrt run / inspect. Covers the real trained model and every bad-input path the tools must
// turn into a clear error (non-zero exit, message naming what is wrong, no output file).
#include <cstdint>
#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/plan_format.h"
#include "tests/e2e/test_util.h"

namespace llmc::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const char kStoriesDir[] = "tests/data/stories260K";

// tests/data/stories260K/README.md: greedy float32 output for "Once upon a time".
const char kStoriesExpected[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball.";

std::string CompileStories(const std::string& dtype) {
  std::string dir = MakeScratchDir("stories-" + dtype);
  std::string plan = dir + "/stories.plan";
  CommandResult result = RunCommand(ToolPath("llmc") + " compile " + SourcePath(kStoriesDir) +
                                    " -o " + plan + " --dtype " + dtype + " --quiet");
  EXPECT_EQ(result.exit_code, 0) << result.error;
  return plan;
}

TEST(StoriesTest, GreedyOutputMatchesReadme) {
  std::string plan = CompileStories("f32");
  CommandResult run =
      RunCommand(ToolPath("llmrt") + " run " + plan + " --temp 0 -n 40 -p \"Once upon a time\"");
  ASSERT_EQ(run.exit_code, 0) << run.error;
  // The tool may end the stream with a newline; the text itself must match exactly.
  std::string text = run.output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  EXPECT_EQ(text, kStoriesExpected);
}

TEST(StoriesTest, ReducedPrecisionPlansGiveTheSameStory) {
  for (const char* dtype : {"f16", "bf16"}) {
    std::string plan = CompileStories(dtype);
    CommandResult run =
        RunCommand(ToolPath("llmrt") + " run " + plan + " --temp 0 -n 40 -p \"Once upon a time\"");
    ASSERT_EQ(run.exit_code, 0) << dtype << ": " << run.error;
    std::string text = run.output;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    EXPECT_EQ(text, kStoriesExpected) << dtype;
  }
}

TEST(StoriesTest, InspectShowsConfigTensorsAndProgram) {
  std::string plan = CompileStories("f16");
  CommandResult inspect = RunCommand(ToolPath("llmrt") + " inspect " + plan + " --verify");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.error;
  EXPECT_THAT(inspect.output, HasSubstr("LlamaForCausalLM"));
  EXPECT_THAT(inspect.output, HasSubstr("model.embed_tokens.weight"));
  EXPECT_THAT(inspect.output, HasSubstr("ATTENTION"));
}

TEST(StoriesTest, DumpIrWritesEveryStage) {
  std::string dir = MakeScratchDir("dump");
  CommandResult result = RunCommand(ToolPath("llmc") + " compile " + SourcePath(kStoriesDir) +
                                    " -o " + dir + "/p.plan --quiet --dump-ir=" + dir + "/ir");
  ASSERT_EQ(result.exit_code, 0) << result.error;
  CommandResult listing = RunCommand("ls " + dir + "/ir");
  EXPECT_THAT(listing.output, HasSubstr("import"));
  EXPECT_THAT(listing.output, HasSubstr("fuse-qkv"));
  EXPECT_THAT(listing.output, HasSubstr("plan-memory"));
}

// ---- Chat: the plan's template, multi-turn, the KV cache kept across turns. ----

TEST(ChatTest, SecondTurnPrefillsOnlyTheNewText) {
  std::string dir = MakeScratchDir("chat");
  std::string plan = dir + "/chat.plan";
  CommandResult compiled =
      RunCommand(ToolPath("llmc") + " compile " + SourcePath(kStoriesDir) + " -o " + plan +
                 " --quiet --chat-template " + SourcePath("tests/data/chatml_test.jinja"));
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
  WriteFile(dir + "/input", "Once upon a time\nThe dog ran\n/exit\n");
  CommandResult chat =
      RunCommand(ToolPath("llmrt") + " chat " + plan + " --temp 0 -n 12 < " + dir + "/input");
  ASSERT_EQ(chat.exit_code, 0) << chat.error;
  EXPECT_THAT(chat.error, HasSubstr("turn 1: prefilled"));
  EXPECT_THAT(chat.error, HasSubstr("(0 reused from the cache)"));
  // Turn 2 reuses all of turn 1 (prompt and reply) and prefills only the new user message.
  size_t turn2 = chat.error.find("turn 2: prefilled ");
  ASSERT_NE(turn2, std::string::npos) << chat.error;
  int prefilled = std::stoi(chat.error.substr(turn2 + strlen("turn 2: prefilled ")));
  size_t reused_at = chat.error.find("(", turn2);
  int reused = std::stoi(chat.error.substr(reused_at + 1));
  EXPECT_GT(reused, prefilled) << chat.error;
  EXPECT_FALSE(chat.output.empty());
}

TEST(ChatTest, TemplateThatCannotRenderStopsTheCompile) {
  std::string dir = MakeScratchDir("badtemplate");
  WriteFile(dir + "/bad.jinja",
            "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}");
  CommandResult compiled =
      RunCommand(ToolPath("llmc") + " compile " + SourcePath(kStoriesDir) + " -o " + dir +
                 "/p.plan --quiet --chat-template " + dir + "/bad.jinja");
  EXPECT_EQ(compiled.exit_code, 1);
  EXPECT_THAT(compiled.error, HasSubstr("bad.jinja"));
  EXPECT_THAT(compiled.error, HasSubstr("no_such_filter"));
  EXPECT_FALSE(FileExists(dir + "/p.plan"));
}

TEST(ChatTest, PlanWithoutTemplateIsAClearError) {
  std::string plan = CompileStories("f32");
  CommandResult chat = RunCommand("echo hi | " + ToolPath("llmrt") + " chat " + plan);
  EXPECT_EQ(chat.exit_code, 1);
  EXPECT_THAT(chat.error, HasSubstr("no chat template"));
}

// Templates as transformers loads them: chat_template.jinja wins over tokenizer_config.json's,
// additional_chat_templates/NAME.jinja are named templates, and `llmrt render` picks "tool_use"
// when the request has tools (or the one --template names). The tool_use template iterates
// `tools`, so it renders only with them: the compile-time check must accept it.
TEST(ChatTest, NamedTemplatesCompileAndRenderByName) {
  std::string dir = MakeScratchDir("named_templates");
  ASSERT_EQ(RunCommand("rm -rf " + dir + "/model && cp -r " + SourcePath(kStoriesDir) + " " + dir +
                       "/model")
                .exit_code,
            0);
  WriteFile(dir + "/model/chat_template.jinja",
            "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  ASSERT_EQ(RunCommand("mkdir -p " + dir + "/model/additional_chat_templates").exit_code, 0);
  WriteFile(dir + "/model/additional_chat_templates/tool_use.jinja",
            "{% for t in tools %}<tool>{{ t.function.name }}</tool>{% endfor %}"
            "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  CommandResult compiled =
      RunCommand(ToolPath("llmc") + " compile " + dir + "/model -o " + dir + "/p.plan --quiet");
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
  WriteFile(dir + "/plain.json", R"([{"role": "user", "content": "hi"}])");
  WriteFile(dir + "/tools.json",
            R"({"messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "f"}}]})");
  const std::string render = ToolPath("llmrt") + " render " + dir + "/p.plan ";
  CommandResult plain = RunCommand(render + dir + "/plain.json");
  ASSERT_EQ(plain.exit_code, 0) << plain.error;
  EXPECT_EQ(plain.output, "[user]hi");
  CommandResult tools = RunCommand(render + dir + "/tools.json");
  ASSERT_EQ(tools.exit_code, 0) << tools.error;
  EXPECT_EQ(tools.output, "<tool>f</tool>[user]hi");
  CommandResult named = RunCommand(render + dir + "/tools.json --template default");
  ASSERT_EQ(named.exit_code, 0) << named.error;
  EXPECT_EQ(named.output, "[user]hi");
  CommandResult unknown = RunCommand(render + dir + "/plain.json --template rag");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.error,
              HasSubstr("no chat template named \"rag\"; it has: default, tool_use"));

  // As transformers' apply_chat_template: "tools": null is no tools, a None-valued message key
  // is left out ("content": null beside calls: nothing, not "None"), an empty conversation is
  // an error. The flag, not the file, sets add_generation_prompt; nesting is bounded (20,000
  // levels used to overflow the stack).
  WriteFile(dir + "/null_tools.json",
            R"({"messages": [{"role": "user", "content": "hi"}], "tools": null})");
  CommandResult null_tools = RunCommand(render + dir + "/null_tools.json");
  EXPECT_EQ(null_tools.output, "[user]hi") << null_tools.error;
  WriteFile(dir + "/null_content.json",
            R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": null,
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {}}}]}])");
  CommandResult null_content = RunCommand(render + dir + "/null_content.json");
  EXPECT_EQ(null_content.output, "[user]hi[assistant]") << null_content.error;
  WriteFile(dir + "/empty.json", "[]");
  CommandResult empty = RunCommand(render + dir + "/empty.json");
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_THAT(empty.error, HasSubstr("Cannot apply chat template to an empty conversation"));
  WriteFile(dir + "/flag.json",
            R"({"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
  CommandResult flag = RunCommand(render + dir + "/flag.json");
  EXPECT_EQ(flag.exit_code, 1);
  EXPECT_THAT(flag.error, HasSubstr("is the --add-generation-prompt flag"));
  WriteFile(dir + "/deep.json", R"({"messages": [{"role": "user", "content": "q"}], "x": )" +
                                    std::string(20000, '[') + std::string(20000, ']') + "}");
  CommandResult deep = RunCommand(render + dir + "/deep.json");
  EXPECT_EQ(deep.exit_code, 1);
  EXPECT_THAT(deep.error, HasSubstr("nests JSON deeper than 64 levels"));
}

// ---- Bad checkpoints: llmc must fail with a precise message and leave no plan behind. ----

struct BrokenCheckpoint {
  std::string dir;
  std::string plan;
};

BrokenCheckpoint CopyStories(const std::string& name) {
  BrokenCheckpoint broken;
  broken.dir = MakeScratchDir(name);
  CopyDir(SourcePath(kStoriesDir), broken.dir);
  broken.plan = broken.dir + "/out.plan";
  return broken;
}

CommandResult CompileBroken(const BrokenCheckpoint& broken) {
  return RunCommand(ToolPath("llmc") + " compile " + broken.dir + " -o " + broken.plan +
                    " --quiet");
}

TEST(BadCheckpointTest, TruncatedSafetensors) {
  BrokenCheckpoint broken = CopyStories("truncated");
  std::string weights = ReadFile(broken.dir + "/model.safetensors");
  WriteFile(broken.dir + "/model.safetensors", weights.substr(0, weights.size() / 2));
  CommandResult result = CompileBroken(broken);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("model.safetensors"));
  EXPECT_THAT(result.error, HasSubstr("tensor"));
  EXPECT_FALSE(FileExists(broken.plan));
}

TEST(BadCheckpointTest, ShapeMismatchNamesTensorAndBothShapes) {
  BrokenCheckpoint broken = CopyStories("shape");
  // config.json says hidden_size 64; claim 60 so every [*, 64] tensor disagrees, and keep the
  // heads consistent (head_dim is explicit).
  std::string config = ReadFile(broken.dir + "/config.json");
  size_t at = config.find("\"intermediate_size\": 172");
  ASSERT_NE(at, std::string::npos);
  config.replace(at, strlen("\"intermediate_size\": 172"), "\"intermediate_size\": 170");
  WriteFile(broken.dir + "/config.json", config);
  CommandResult result = CompileBroken(broken);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("mlp"));
  EXPECT_THAT(result.error, HasSubstr("172"));
  EXPECT_THAT(result.error, HasSubstr("170"));
  EXPECT_FALSE(FileExists(broken.plan));
}

TEST(BadCheckpointTest, UnknownArchitecture) {
  BrokenCheckpoint broken = CopyStories("arch");
  std::string config = ReadFile(broken.dir + "/config.json");
  size_t at = config.find("LlamaForCausalLM");
  config.replace(at, strlen("LlamaForCausalLM"), "GPTBigCodeForCausalLM");
  WriteFile(broken.dir + "/config.json", config);
  CommandResult result = CompileBroken(broken);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("config.json"));
  EXPECT_THAT(result.error, HasSubstr("GPTBigCodeForCausalLM"));
  EXPECT_THAT(result.error, HasSubstr("LlamaForCausalLM"));
  EXPECT_FALSE(FileExists(broken.plan));
}

TEST(BadCheckpointTest, BadJson) {
  BrokenCheckpoint broken = CopyStories("json");
  WriteFile(broken.dir + "/config.json", "{\"architectures\": [\"LlamaForCausalLM\"],\n  \"x\": }");
  CommandResult result = CompileBroken(broken);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("config.json"));
  EXPECT_THAT(result.error, HasSubstr("line 2"));
  EXPECT_FALSE(FileExists(broken.plan));
}

TEST(BadCheckpointTest, MissingDirectory) {
  CommandResult result = RunCommand(ToolPath("llmc") + " compile /nonexistent/model -o " +
                                    MakeScratchDir("missing") + "/p.plan --quiet");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("/nonexistent/model"));
}

TEST(BadCheckpointTest, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCommand(ToolPath("llmc") + " compile").exit_code, 2);
  EXPECT_EQ(RunCommand(ToolPath("llmc") + " compile x -o y --dtype f8").exit_code, 2);
  EXPECT_EQ(RunCommand(ToolPath("llmc") + " frobnicate").exit_code, 2);
}

// ---- Corrupted plans: llmrt must refuse them with a precise message, never crash. ----

class BadPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = CompileStories("f32");
    bytes_ = ReadFile(plan_);
    ASSERT_GE(bytes_.size(), llmrt::plan::kHeaderSize);
    std::memcpy(&header_, bytes_.data(), sizeof(header_));
  }

  CommandResult RunOn(const std::string& bytes, const std::string& extra_flags = "") {
    std::string path = MakeScratchDir("badplan") + "/bad.plan";
    WriteFile(path, bytes);
    return RunCommand(ToolPath("llmrt") + " run " + path + " -n 4 -p \"Once\" " + extra_flags);
  }

  std::string plan_;
  std::string bytes_;
  llmrt::plan::PlanHeader header_{};
};

TEST_F(BadPlanTest, FlippedMetaByte) {
  std::string bytes = bytes_;
  bytes[header_.meta_offset + header_.meta_size / 2] ^= 0x40;
  CommandResult result = RunOn(bytes);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("checksum"));
}

TEST_F(BadPlanTest, TruncatedBlob) {
  // Cut the file inside the data section: the blobs (and the meta after them) are gone.
  std::string bytes = bytes_.substr(0, header_.data_offset + 1000);
  CommandResult result = RunOn(bytes);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("bad.plan"));
  EXPECT_THAT(result.error, Not(HasSubstr("Segmentation")));
}

TEST_F(BadPlanTest, FlippedBlobByteCaughtByVerify) {
  std::string bytes = bytes_;
  bytes[header_.data_offset + 100] ^= 0x01;
  CommandResult result = RunOn(bytes, "--verify");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("checksum"));
}

TEST_F(BadPlanTest, WrongMajorVersion) {
  std::string bytes = bytes_;
  uint16_t major = llmrt::plan::kPlanMajorVersion + 1;
  std::memcpy(&bytes[8], &major, sizeof(major));
  CommandResult result = RunOn(bytes);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr(std::to_string(major) + "."));
  EXPECT_THAT(result.error, HasSubstr(std::to_string(llmrt::plan::kPlanMajorVersion)));
}

TEST_F(BadPlanTest, NotAPlan) {
  CommandResult result = RunOn("this is not a plan file at all, just some text");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.error, HasSubstr("bad.plan"));
}

}  // namespace
}  // namespace llmc::testing
