// The C API (runtime/include/llmrt/llmrt.h) on the real stories260K model, compiled at build time
// by this tree's llmc (tests/capi/CMakeLists.txt). References: the greedy story and prompt ids in
// tests/data/stories260K/README.md (llama2.c's output), and `llmrt run --temp 0`.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "runtime/plan/plan_reader.h"
#include "tests/capi/capi_c_test.h"
#include "tests/e2e/test_util.h"

namespace {

using ::llmc::testing::CommandResult;
using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::RunCommand;
using ::llmc::testing::ToolPath;
using ::llmc::testing::WriteFile;
using ::testing::HasSubstr;

// tests/data/stories260K/README.md: "Once upon a time" with BOS, and the first 40 greedy ids.
const std::vector<int32_t> kPromptIds = {1, 403, 407, 261, 378};
const std::vector<int32_t> kGreedyIds = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                         426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
                                         411, 322, 265, 282, 295, 433, 426, 385, 328, 432,
                                         358, 394, 261, 370, 432, 352, 266, 268, 388, 426};
const char kGreedyText[] =
    ", there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball.";

// Owns a status so a failing assertion does not leak it; prints as "CODE: message".
struct Status {
  explicit Status(llmrt_status_t* status) : status(status) {}
  ~Status() { llmrt_status_free(status); }
  bool ok() const { return status == nullptr; }
  llmrt_status_code code() const { return llmrt_status_get_code(status); }
  std::string message() const { return llmrt_status_get_message(status); }
  llmrt_status_t* status;
};
std::ostream& operator<<(std::ostream& out, const Status& status) {
  return out << llmrt_status_code_name(status.code()) << ": " << status.message();
}

struct PlanDeleter {
  void operator()(llmrt_plan_t* plan) const { llmrt_plan_close(plan); }
};
struct SessionDeleter {
  void operator()(llmrt_session_t* session) const { llmrt_session_free(session); }
};
struct EngineDeleter {
  void operator()(llmrt_engine_t* engine) const { llmrt_engine_free(engine); }
};
using PlanPtr = std::unique_ptr<llmrt_plan_t, PlanDeleter>;
using SessionPtr = std::unique_ptr<llmrt_session_t, SessionDeleter>;
using EnginePtr = std::unique_ptr<llmrt_engine_t, EngineDeleter>;

PlanPtr OpenPlan(const char* path) {
  llmrt_plan_t* plan = nullptr;
  Status status(llmrt_plan_open(path, nullptr, &plan));
  EXPECT_TRUE(status.ok()) << status;
  return PlanPtr(plan);
}

SessionPtr NewSession(llmrt_plan_t* plan, int64_t context_tokens = 0) {
  llmrt_session_options options;
  llmrt_session_options_init(&options);
  options.context_tokens = context_tokens;
  llmrt_session_t* session = nullptr;
  Status status(llmrt_session_create(plan, &options, &session));
  EXPECT_TRUE(status.ok()) << status;
  return SessionPtr(session);
}

llmrt_sampler_params Greedy(int64_t max_tokens) {
  llmrt_sampler_params params;
  llmrt_sampler_params_init(&params);
  params.temperature = 0.0f;
  params.max_tokens = max_tokens;
  return params;
}

struct Generated {
  std::vector<int32_t> tokens;
  std::string text;
  int32_t stop_after = 0;  // the callback cancels after this many tokens; 0: never
  static int32_t Callback(void* user_data, int32_t token, const char* text, size_t size) {
    auto* self = static_cast<Generated*>(user_data);
    if (token >= 0) self->tokens.push_back(token);
    self->text.append(text, size);
    return self->stop_after > 0 && static_cast<int32_t>(self->tokens.size()) >= self->stop_after;
  }
};

Generated Generate(llmrt_session_t* session, const llmrt_sampler_params& params,
                   llmrt_generate_result* result = nullptr, int32_t stop_after = 0) {
  Generated generated;
  generated.stop_after = stop_after;
  Status status(llmrt_session_generate(session, &params, &Generated::Callback, &generated, result));
  EXPECT_TRUE(status.ok()) << status;
  return generated;
}

void AppendPrompt(llmrt_session_t* session, const std::string& text) {
  Status status(llmrt_session_append_text(session, text.data(), text.size(), 1));
  ASSERT_TRUE(status.ok()) << status;
}

// ---- plan ----

TEST(CapiPlanTest, OpenQueryClose) {
  EXPECT_EQ(llmrt_abi_version(), static_cast<uint32_t>(LLMRT_ABI_VERSION));
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  llmrt_model_config config;
  llmrt_model_config_init(&config);
  Status status(llmrt_plan_get_config(plan.get(), &config));
  ASSERT_TRUE(status.ok()) << status;
  // tests/data/stories260K/config.json
  EXPECT_STREQ(config.architecture, "LlamaForCausalLM");
  EXPECT_EQ(config.vocab_size, 512);
  EXPECT_EQ(config.hidden_size, 64);
  EXPECT_EQ(config.num_layers, 5);
  EXPECT_EQ(config.num_attention_heads, 8);
  EXPECT_EQ(config.num_kv_heads, 4);
  EXPECT_EQ(config.head_dim, 8);
  EXPECT_EQ(config.max_position_embeddings, 512);
  EXPECT_EQ(config.bos_token_id, 1);
  EXPECT_EQ(config.eos_token_id, 2);
  EXPECT_EQ(config.has_chat_template, 0);
  EXPECT_NE(config.plan_checksum, 0u);

  const char* source = nullptr;
  size_t size = 0;
  Status none(llmrt_plan_get_chat_template(plan.get(), &source, &size));
  EXPECT_EQ(none.code(), LLMRT_STATUS_FAILED_PRECONDITION);
  EXPECT_THAT(none.message(), HasSubstr("no chat template"));

  PlanPtr chat = OpenPlan(LLMRT_TEST_PLAN_CHAT);
  Status found(llmrt_plan_get_chat_template(chat.get(), &source, &size));
  ASSERT_TRUE(found.ok()) << found;
  EXPECT_EQ(std::string(source, size),
            llmc::testing::ReadFile(LLMRT_SOURCE_DIR "/tests/data/chatml_test.jinja"));
}

TEST(CapiPlanTest, OlderSmallerConfigStructGetsOnlyItsFields) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  // A caller built against a struct that ended after vocab_size.
  struct {
    llmrt_model_config config;
    char guard[64];
  } buffer;
  std::memset(&buffer, 0x5a, sizeof(buffer));
  buffer.config.struct_size = offsetof(llmrt_model_config, hidden_size);
  Status status(llmrt_plan_get_config(plan.get(), &buffer.config));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(buffer.config.vocab_size, 512);
  const unsigned char* rest = reinterpret_cast<const unsigned char*>(&buffer.config.hidden_size);
  EXPECT_EQ(rest[0], 0x5a) << "wrote past the caller's struct_size";
}

// An older program's _init writes only its own, shorter struct: the macros pass its sizeof.
TEST(CapiPlanTest, InitWritesOnlyTheCallersBytes) {
  struct {
    llmrt_sampler_params params;
    char guard[64];
  } buffer;
  std::memset(&buffer, 0x5a, sizeof(buffer));
  const size_t old_size = offsetof(llmrt_sampler_params, ignore_eos);
  llmrt_sampler_params_init_sized(&buffer.params, old_size);
  EXPECT_EQ(buffer.params.struct_size, old_size);
  EXPECT_EQ(buffer.params.temperature, 1.0f);
  EXPECT_EQ(buffer.params.max_tokens, 256);
  const unsigned char* rest = reinterpret_cast<const unsigned char*>(&buffer.params.ignore_eos);
  EXPECT_EQ(rest[0], 0x5a) << "wrote past the caller's struct";
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  std::memset(&buffer, 0x5a, sizeof(buffer));
  llmrt_sampler_params_init_from_plan_sized(plan.get(), &buffer.params, old_size);
  EXPECT_EQ(buffer.params.temperature, 0.0f);  // stories260K's generation_config: greedy
  EXPECT_EQ(rest[0], 0x5a) << "wrote past the caller's struct";
  // A newer program's longer struct: ours, then zeros, and struct_size says the caller's size.
  std::memset(&buffer, 0x5a, sizeof(buffer));
  llmrt_session_options_init_sized(reinterpret_cast<llmrt_session_options*>(&buffer),
                                   sizeof(llmrt_session_options) + 8);
  const auto* options = reinterpret_cast<const llmrt_session_options*>(&buffer);
  EXPECT_EQ(options->struct_size, sizeof(llmrt_session_options) + 8);
  EXPECT_EQ(options->max_tokens_per_step, 256);
  const unsigned char* tail = reinterpret_cast<const unsigned char*>(options + 1);
  for (int index = 0; index < 8; ++index) EXPECT_EQ(tail[index], 0);
  EXPECT_EQ(tail[8], 0x5a);
  // The macros are those functions with the program's sizeof.
  llmrt_generate_result result;
  std::memset(&result, 0x5a, sizeof(result));
  llmrt_generate_result_init(&result);
  EXPECT_EQ(result.struct_size, sizeof(result));
  EXPECT_EQ(result.num_tokens, 0);
}

TEST(CapiPlanTest, TokenizeAndDetokenizeMatchTheReference) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  const std::string prompt = "Once upon a time";
  int32_t* tokens = nullptr;
  size_t count = 0;
  Status status(llmrt_plan_tokenize(plan.get(), prompt.data(), prompt.size(), 1, &tokens, &count));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(std::vector<int32_t>(tokens, tokens + count), kPromptIds);
  char* text = nullptr;
  size_t size = 0;
  Status decoded(llmrt_plan_detokenize(plan.get(), tokens, count, 1, &text, &size));
  ASSERT_TRUE(decoded.ok()) << decoded;
  EXPECT_EQ(std::string(text, size), prompt);
  EXPECT_EQ(text[size], '\0');
  llmrt_free(text);
  llmrt_free(tokens);
}

TEST(CapiPlanTest, RenderChatLikeTheTemplate) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_CHAT);
  const llmrt_chat_message messages[] = {{"system", "Be brief."}, {"user", "Hi"}};
  char* text = nullptr;
  size_t size = 0;
  Status status(llmrt_plan_render_chat(plan.get(), messages, 2, 1, &text, &size));
  ASSERT_TRUE(status.ok()) << status;
  // tests/data/chatml_test.jinja by hand.
  EXPECT_EQ(std::string(text, size),
            "<|system|>\nBe brief.</s>\n<|user|>\nHi</s>\n<|assistant|>\n");
  llmrt_free(text);

  PlanPtr plain = OpenPlan(LLMRT_TEST_PLAN_F32);
  Status none(llmrt_plan_render_chat(plain.get(), messages, 2, 1, &text, &size));
  EXPECT_EQ(none.code(), LLMRT_STATUS_FAILED_PRECONDITION);
  EXPECT_THAT(none.message(), HasSubstr(LLMRT_TEST_PLAN_F32));
}

// ---- session ----

TEST(CapiSessionTest, GreedyMatchesTheReferenceStory) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get());
  AppendPrompt(session.get(), "Once upon a time");
  llmrt_generate_result result;
  llmrt_generate_result_init(&result);
  Generated generated = Generate(session.get(), Greedy(40), &result);
  EXPECT_EQ(generated.tokens, kGreedyIds);
  EXPECT_EQ(generated.text, kGreedyText);
  EXPECT_EQ(result.num_tokens, 40);
  EXPECT_EQ(result.finish_reason, LLMRT_FINISH_LENGTH);
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 45);
}

// The default is one thread per allowed CPU, as in the tools; a pinned thread count gives the
// same tokens (a step's work split never changes its arithmetic).
TEST(CapiSessionTest, DefaultThreadsAreOnePerCpuAndGiveTheOneThreadTokens) {
  llmrt_session_options session_options;
  llmrt_session_options_init(&session_options);
  EXPECT_EQ(session_options.num_threads, 0);
  llmrt_engine_options engine_options;
  llmrt_engine_options_init(&engine_options);
  EXPECT_EQ(engine_options.num_threads, 0);
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  for (int32_t threads : {0, 1, 3}) {
    session_options.num_threads = threads;
    llmrt_session_t* raw = nullptr;
    Status created(llmrt_session_create(plan.get(), &session_options, &raw));
    ASSERT_TRUE(created.ok()) << created;
    SessionPtr session(raw);
    AppendPrompt(session.get(), "Once upon a time");
    EXPECT_EQ(Generate(session.get(), Greedy(40)).tokens, kGreedyIds) << threads << " threads";
  }
}

TEST(CapiSessionTest, GreedyEqualsLlmrtRun) {
  // Long enough to reach EOS or the context: every path of the token loop.
  const int kTokens = 300;
  CommandResult run =
      RunCommand(ToolPath("llmrt") + " run " + LLMRT_TEST_PLAN_F32 + " --temp 0 -n " +
                 std::to_string(kTokens) + " -p \"Once upon a time\"");
  ASSERT_EQ(run.exit_code, 0) << run.error;
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get());
  AppendPrompt(session.get(), "Once upon a time");
  Generated generated = Generate(session.get(), Greedy(kTokens));
  EXPECT_EQ("Once upon a time" + generated.text + "\n", run.output);

  char c_text[8192];
  char error[512];
  ASSERT_EQ(llmrt_c_generate(LLMRT_TEST_PLAN_F32, "Once upon a time", kTokens, c_text,
                             sizeof(c_text), error, sizeof(error)),
            0)
      << error;
  EXPECT_EQ(std::string(c_text), generated.text);
}

TEST(CapiSessionTest, CallbackCancelsAndTheConversationGoesOn) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get());
  AppendPrompt(session.get(), "Once upon a time");
  llmrt_generate_result result;
  llmrt_generate_result_init(&result);
  Generated first = Generate(session.get(), Greedy(40), &result, /*stop_after=*/7);
  EXPECT_EQ(result.finish_reason, LLMRT_FINISH_CANCELLED);
  EXPECT_EQ(result.num_tokens, 7);
  EXPECT_EQ(first.tokens, std::vector<int32_t>(kGreedyIds.begin(), kGreedyIds.begin() + 7));
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 5 + 7);
  // Generating again continues the same greedy story.
  Generated rest = Generate(session.get(), Greedy(33));
  EXPECT_EQ(rest.tokens, std::vector<int32_t>(kGreedyIds.begin() + 7, kGreedyIds.end()));
}

TEST(CapiSessionTest, AppendTokensResetAndGetTokens) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get());
  Status appended(llmrt_session_append_tokens(session.get(), kPromptIds.data(), kPromptIds.size()));
  ASSERT_TRUE(appended.ok()) << appended;
  EXPECT_EQ(Generate(session.get(), Greedy(10)).tokens,
            std::vector<int32_t>(kGreedyIds.begin(), kGreedyIds.begin() + 10));
  int32_t* tokens = nullptr;
  size_t count = 0;
  Status got(llmrt_session_get_tokens(session.get(), &tokens, &count));
  ASSERT_TRUE(got.ok()) << got;
  std::vector<int32_t> expected = kPromptIds;
  expected.insert(expected.end(), kGreedyIds.begin(), kGreedyIds.begin() + 10);
  EXPECT_EQ(std::vector<int32_t>(tokens, tokens + count), expected);
  llmrt_free(tokens);

  llmrt_session_reset(session.get());
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 0);
  AppendPrompt(session.get(), "Once upon a time");
  EXPECT_EQ(Generate(session.get(), Greedy(10)).tokens,
            std::vector<int32_t>(kGreedyIds.begin(), kGreedyIds.begin() + 10));
}

TEST(CapiSessionTest, SaveRestoreGivesTheSameContinuation) {
  const std::string dir = MakeScratchDir("capi-save");
  const std::string path = dir + "/story.session";
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr original = NewSession(plan.get());
  AppendPrompt(original.get(), "Once upon a time");
  Generate(original.get(), Greedy(12));
  Status saved(llmrt_session_save(original.get(), path.c_str()));
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_FALSE(llmc::testing::FileExists(path + ".tmp-" + std::to_string(getpid())));
  const Generated expected = Generate(original.get(), Greedy(28));
  EXPECT_EQ(expected.tokens, std::vector<int32_t>(kGreedyIds.begin() + 12, kGreedyIds.end()));

  // Into a fresh session of another handle on the same plan file.
  PlanPtr reopened = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr restored = NewSession(reopened.get());
  Status status(llmrt_session_restore(restored.get(), path.c_str()));
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(llmrt_session_num_tokens(restored.get()), 5 + 12);
  const Generated continued = Generate(restored.get(), Greedy(28));
  EXPECT_EQ(continued.tokens, expected.tokens);
  EXPECT_EQ(continued.text, expected.text);
}

TEST(CapiSessionTest, RestoreRefusesAnotherPlanAndDamagedFiles) {
  const std::string dir = MakeScratchDir("capi-restore");
  const std::string path = dir + "/story.session";
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get());
  AppendPrompt(session.get(), "Once upon a time");
  Status saved(llmrt_session_save(session.get(), path.c_str()));
  ASSERT_TRUE(saved.ok()) << saved;

  // The same model compiled to f16 is another plan.
  PlanPtr other = OpenPlan(LLMRT_TEST_PLAN_F16);
  SessionPtr other_session = NewSession(other.get());
  AppendPrompt(other_session.get(), "The dog");
  const int64_t held = llmrt_session_num_tokens(other_session.get());
  Status wrong(llmrt_session_restore(other_session.get(), path.c_str()));
  EXPECT_EQ(wrong.code(), LLMRT_STATUS_FAILED_PRECONDITION);
  EXPECT_THAT(wrong.message(), HasSubstr("checksum"));
  EXPECT_THAT(wrong.message(), HasSubstr(LLMRT_TEST_PLAN_F16));
  // Unchanged, and it goes on.
  EXPECT_EQ(llmrt_session_num_tokens(other_session.get()), held);
  EXPECT_EQ(Generate(other_session.get(), Greedy(3)).tokens.size(), 3u);

  WriteFile(dir + "/garbage.session", "not a session at all, but long enough for a header");
  Status garbage(llmrt_session_restore(session.get(), (dir + "/garbage.session").c_str()));
  EXPECT_EQ(garbage.code(), LLMRT_STATUS_DATA_LOSS);
  Status missing(llmrt_session_restore(session.get(), (dir + "/missing.session").c_str()));
  EXPECT_EQ(missing.code(), LLMRT_STATUS_NOT_FOUND);
  EXPECT_THAT(missing.message(), HasSubstr("missing.session"));

  // A context too small for the saved tokens.
  SessionPtr small = NewSession(plan.get(), /*context_tokens=*/4);
  Status too_long(llmrt_session_restore(small.get(), path.c_str()));
  EXPECT_EQ(too_long.code(), LLMRT_STATUS_FAILED_PRECONDITION);
  EXPECT_THAT(too_long.message(), HasSubstr("5 tokens"));
}

TEST(CapiSessionTest, SessionsOfOnePlanRunOnThreads) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  std::vector<std::vector<int32_t>> outputs(3);
  std::vector<std::thread> threads;
  for (size_t index = 0; index < outputs.size(); ++index) {
    threads.emplace_back([&, index]() {
      SessionPtr session = NewSession(plan.get());
      AppendPrompt(session.get(), "Once upon a time");
      outputs[index] = Generate(session.get(), Greedy(40)).tokens;
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::vector<int32_t>& output : outputs) EXPECT_EQ(output, kGreedyIds);
}

// ---- engine ----

struct EngineResult {
  std::vector<int32_t> tokens;
  std::string text;
  int finished = 0;
  llmrt_finish_reason reason = LLMRT_FINISH_NONE;
  int32_t cancel_after = 0;
  static int32_t Callback(void* user_data, const llmrt_engine_output* output) {
    auto* self = static_cast<EngineResult*>(user_data);
    self->tokens.insert(self->tokens.end(), output->tokens, output->tokens + output->num_tokens);
    self->text.append(output->text, output->text_size);
    if (output->finished) {
      ++self->finished;
      self->reason = output->finish_reason;
    }
    return self->cancel_after > 0 &&
           static_cast<int32_t>(self->tokens.size()) >= self->cancel_after;
  }
};

std::vector<int32_t> SessionGreedy(llmrt_plan_t* plan, const std::string& prompt, int64_t n) {
  SessionPtr session = NewSession(plan);
  AppendPrompt(session.get(), prompt);
  return Generate(session.get(), Greedy(n)).tokens;
}

TEST(CapiEngineTest, ManyRequestsBatchedEqualTheSessionPath) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  llmrt_engine_options options;
  llmrt_engine_options_init(&options);
  llmrt_engine_t* raw = nullptr;
  Status created(llmrt_engine_create(plan.get(), &options, &raw));
  ASSERT_TRUE(created.ok()) << created;
  EnginePtr engine(raw);
  const std::vector<std::string> prompts = {"Once upon a time", "The dog", "Lily and Ben",
                                            "Once upon a time there"};
  std::vector<EngineResult> results(prompts.size());
  for (size_t index = 0; index < prompts.size(); ++index) {
    int32_t* tokens = nullptr;
    size_t count = 0;
    Status tokenized(llmrt_plan_tokenize(plan.get(), prompts[index].data(), prompts[index].size(),
                                         1, &tokens, &count));
    ASSERT_TRUE(tokenized.ok()) << tokenized;
    const llmrt_sampler_params params = Greedy(30);
    llmrt_request_id id = 0;
    Status submitted(llmrt_engine_submit(engine.get(), tokens, count, &params,
                                         &EngineResult::Callback, &results[index], &id));
    llmrt_free(tokens);
    ASSERT_TRUE(submitted.ok()) << submitted;
    EXPECT_GT(id, 0u);
  }
  EXPECT_EQ(llmrt_engine_has_work(engine.get()), 1);
  Status ran(llmrt_engine_run_until_idle(engine.get()));
  ASSERT_TRUE(ran.ok()) << ran;
  EXPECT_EQ(llmrt_engine_has_work(engine.get()), 0);
  for (size_t index = 0; index < prompts.size(); ++index) {
    EXPECT_EQ(results[index].finished, 1) << prompts[index];
    EXPECT_EQ(results[index].tokens, SessionGreedy(plan.get(), prompts[index], 30))
        << prompts[index];
  }
  EXPECT_EQ(results[0].tokens, std::vector<int32_t>(kGreedyIds.begin(), kGreedyIds.begin() + 30));
}

TEST(CapiEngineTest, BackgroundThreadAndCancelFromTheCallback) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  llmrt_engine_t* raw = nullptr;
  Status created(llmrt_engine_create(plan.get(), nullptr, &raw));
  ASSERT_TRUE(created.ok()) << created;
  EnginePtr engine(raw);
  EngineResult cancelled, full;
  cancelled.cancel_after = 3;
  const llmrt_sampler_params params = Greedy(40);
  Status first(llmrt_engine_submit(engine.get(), kPromptIds.data(), kPromptIds.size(), &params,
                                   &EngineResult::Callback, &cancelled, nullptr));
  Status second(llmrt_engine_submit(engine.get(), kPromptIds.data(), kPromptIds.size(), &params,
                                    &EngineResult::Callback, &full, nullptr));
  ASSERT_TRUE(first.ok() && second.ok()) << first << second;
  llmrt_engine_start(engine.get());
  for (int wait = 0; wait < 3000 && llmrt_engine_has_work(engine.get()); ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  llmrt_engine_stop(engine.get());
  EXPECT_EQ(full.tokens, kGreedyIds);
  EXPECT_EQ(full.reason, LLMRT_FINISH_LENGTH);
  EXPECT_EQ(cancelled.finished, 1);
  EXPECT_EQ(cancelled.reason, LLMRT_FINISH_CANCELLED);
  EXPECT_GE(cancelled.tokens.size(), 3u);
  EXPECT_LT(cancelled.tokens.size(), 40u);
}

// Nothing is generated past the context or max_tokens: a session that the prompt fills
// generates nothing (it used to hold context + 1 tokens and could not restore its own save);
// an engine request with max_tokens 0, or a prompt as long as the context, finishes with none.
TEST(CapiContractTest, FullContextsAndZeroMaxTokensGenerateNothing) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get(), /*context_tokens=*/16);
  std::vector<int32_t> prompt(16);
  for (int index = 0; index < 16; ++index) prompt[index] = 100 + index;
  Status appended(llmrt_session_append_tokens(session.get(), prompt.data(), prompt.size()));
  ASSERT_TRUE(appended.ok()) << appended;
  llmrt_generate_result result;
  llmrt_generate_result_init(&result);
  const Generated none = Generate(session.get(), Greedy(-1), &result);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(result.finish_reason, LLMRT_FINISH_LENGTH);
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 16);
  const std::string path = testing::TempDir() + "/full.session";
  Status saved(llmrt_session_save(session.get(), path.c_str()));
  Status restored(llmrt_session_restore(session.get(), path.c_str()));
  EXPECT_TRUE(saved.ok() && restored.ok()) << saved << restored;

  llmrt_engine_t* raw = nullptr;
  Status created(llmrt_engine_create(plan.get(), nullptr, &raw));
  ASSERT_TRUE(created.ok()) << created;
  EnginePtr engine(raw);
  EngineResult zero, full;
  const llmrt_sampler_params no_tokens = Greedy(0);
  const llmrt_sampler_params to_the_end = Greedy(-1);
  const std::vector<int32_t> whole_context(512, 5);
  Status first(llmrt_engine_submit(engine.get(), kPromptIds.data(), kPromptIds.size(), &no_tokens,
                                   &EngineResult::Callback, &zero, nullptr));
  Status second(llmrt_engine_submit(engine.get(), whole_context.data(), whole_context.size(),
                                    &to_the_end, &EngineResult::Callback, &full, nullptr));
  ASSERT_TRUE(first.ok() && second.ok()) << first << second;
  Status ran(llmrt_engine_run_until_idle(engine.get()));
  ASSERT_TRUE(ran.ok()) << ran;
  EXPECT_TRUE(zero.tokens.empty());
  EXPECT_EQ(zero.finished, 1);
  EXPECT_EQ(zero.reason, LLMRT_FINISH_LENGTH);
  EXPECT_TRUE(full.tokens.empty());
  EXPECT_EQ(full.finished, 1);
  EXPECT_EQ(full.reason, LLMRT_FINISH_LENGTH);
}

// A request a callback submits while llmrt_engine_free cancels the others is cancelled too: every
// accepted request gets its one final output.
TEST(CapiContractTest, RequestsSubmittedDuringFreeGetTheirFinalOutput) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  llmrt_engine_t* engine = nullptr;
  Status created(llmrt_engine_create(plan.get(), nullptr, &engine));
  ASSERT_TRUE(created.ok()) << created;
  struct Parent {
    llmrt_engine_t* engine;
    EngineResult child;
    int finished = 0;
    static int32_t Callback(void* user_data, const llmrt_engine_output* output) {
      auto* self = static_cast<Parent*>(user_data);
      if (output->finished && self->finished++ == 0) {
        llmrt_status_t* status =
            llmrt_engine_submit(self->engine, kPromptIds.data(), kPromptIds.size(), nullptr,
                                &EngineResult::Callback, &self->child, nullptr);
        llmrt_status_free(status);
      }
      return 0;
    }
  } parent{engine, {}};
  Status submitted(llmrt_engine_submit(engine, kPromptIds.data(), kPromptIds.size(), nullptr,
                                       &Parent::Callback, &parent, nullptr));
  ASSERT_TRUE(submitted.ok()) << submitted;
  Status stepped(llmrt_engine_step(engine, nullptr));
  ASSERT_TRUE(stepped.ok()) << stepped;
  llmrt_engine_free(engine);
  EXPECT_EQ(parent.finished, 1);
  EXPECT_EQ(parent.child.finished, 1);
  EXPECT_EQ(parent.child.reason, LLMRT_FINISH_CANCELLED);
}

// An absurd thread count is a status naming it, not std::terminate when the system runs out of
// threads midway (1,000,000 aborted the process).
TEST(CapiContractTest, AbsurdThreadCountsAreAStatus) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  llmrt_session_options options;
  llmrt_session_options_init(&options);
  options.num_threads = 1000000;
  llmrt_session_t* session = nullptr;
  Status status(llmrt_session_create(plan.get(), &options, &session));
  EXPECT_EQ(status.code(), LLMRT_STATUS_INVALID_ARGUMENT) << status;
  EXPECT_THAT(status.message(), HasSubstr("num_threads 1000000: at most 1024"));
  EXPECT_EQ(session, nullptr);
}

// ---- plans compiled with llmc compile --max-memory ----

TEST(CapiBudgetTest, SessionsTakeTheContextTheBudgetLeft) {
  absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> mapped =
      llmrt::plan::Plan::Open(LLMRT_TEST_PLAN_BUDGET);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const llmrt::plan::MemoryBudget& budget = (*mapped)->meta().memory_budget();
  EXPECT_EQ(budget.max_memory_bytes(), LLMRT_TEST_BUDGET_BYTES);
  EXPECT_EQ(budget.kv_bytes_per_token(), 2 * 5 * 4 * 8 * 4);  // f32 K and V, 5 layers x 4 x 8
  // The budget, not the model's 512 positions, limits the context.
  EXPECT_GE(budget.max_context(), 256);
  EXPECT_LT(budget.max_context(), 512);
  EXPECT_LE(budget.weight_bytes() + budget.workspace_bytes() +
                budget.kv_cache_tokens() * budget.kv_bytes_per_token(),
            budget.max_memory_bytes());
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_BUDGET);
  SessionPtr session = NewSession(plan.get());
  EXPECT_EQ(llmrt_session_max_tokens(session.get()), budget.max_context());
  AppendPrompt(session.get(), "Once upon a time");
  EXPECT_EQ(Generate(session.get(), Greedy(40)).tokens, kGreedyIds);
}

TEST(CapiBudgetTest, RefusedWhereLessMemoryIsAvailable) {
  // 1 TiB: more than any CI machine has available.
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_HUGE_BUDGET);
  llmrt_session_t* session = nullptr;
  Status refused(llmrt_session_create(plan.get(), nullptr, &session));
  EXPECT_EQ(refused.code(), LLMRT_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.message(), HasSubstr("memory budget of 1024.00 GiB"));
  EXPECT_THAT(refused.message(), HasSubstr("available"));
  EXPECT_EQ(session, nullptr);
  CommandResult run = RunCommand(ToolPath("llmrt") + " run " + LLMRT_TEST_PLAN_HUGE_BUDGET +
                                 " -p \"Once upon a time\" -n 5");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.error, HasSubstr("memory budget of 1024.00 GiB"));
  EXPECT_EQ(run.output, "");
}

TEST(CapiBudgetTest, LlmcRefusesABudgetTheWeightsDoNotLeaveRoomIn) {
  const std::string dir = MakeScratchDir("capi-budget");
  CommandResult compiled =
      RunCommand(ToolPath("llmc") + " compile " + LLMRT_SOURCE_DIR + "/tests/data/stories260K -o " +
                 dir + "/small.plan --quiet --max-memory 32M");
  EXPECT_EQ(compiled.exit_code, 1);
  EXPECT_THAT(compiled.error, HasSubstr("--max-memory 32.0 MiB: the weights take"));
  EXPECT_FALSE(llmc::testing::FileExists(dir + "/small.plan"));
  CommandResult usage = RunCommand(ToolPath("llmc") + " compile " + LLMRT_SOURCE_DIR +
                                   "/tests/data/stories260K -o " + dir + "/auto.plan --quant auto");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.error, HasSubstr("--max-memory"));
}

// ---- errors ----

TEST(CapiErrorTest, BadPathsAndFilesGiveAStatusNamingThem) {
  llmrt_plan_t* plan = nullptr;
  Status missing(llmrt_plan_open("/nonexistent/model.plan", nullptr, &plan));
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("/nonexistent/model.plan"));
  EXPECT_EQ(plan, nullptr);

  const std::string dir = MakeScratchDir("capi-bad");
  WriteFile(dir + "/bad.plan", std::string(70000, 'x'));
  Status garbage(llmrt_plan_open((dir + "/bad.plan").c_str(), nullptr, &plan));
  EXPECT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.message(), HasSubstr("bad.plan"));
  EXPECT_EQ(plan, nullptr);

  llmrt_plan_options options;
  std::memset(&options, 0, sizeof(options));  // struct_size 0: _init() was not called
  Status uninitialized(llmrt_plan_open(LLMRT_TEST_PLAN_F32, &options, &plan));
  EXPECT_EQ(uninitialized.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(uninitialized.message(), HasSubstr("struct_size"));
}

TEST(CapiErrorTest, NullHandlesGiveInvalidArgument) {
  char error[256];
  EXPECT_EQ(llmrt_c_null_handles(error, sizeof(error)), 0) << error;
  llmrt_session_t* session = nullptr;
  llmrt_engine_t* engine = nullptr;
  Status no_plan(llmrt_session_create(nullptr, nullptr, &session));
  EXPECT_EQ(no_plan.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(no_plan.message(), HasSubstr("llmrt_session_create: plan is NULL"));
  Status no_engine_plan(llmrt_engine_create(nullptr, nullptr, &engine));
  EXPECT_EQ(no_engine_plan.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  Status no_session(llmrt_session_generate(nullptr, nullptr, nullptr, nullptr, nullptr));
  EXPECT_THAT(no_session.message(), HasSubstr("session is NULL"));
  Status no_text(llmrt_session_append_text(nullptr, "x", 1, 1));
  EXPECT_EQ(no_text.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  Status no_save(llmrt_session_save(nullptr, "/tmp/x"));
  EXPECT_EQ(no_save.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  Status no_step(llmrt_engine_step(nullptr, nullptr));
  EXPECT_EQ(no_step.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  Status no_submit(
      llmrt_engine_submit(nullptr, kPromptIds.data(), 5, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(no_submit.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  // Queries on NULL return neutral values rather than crash.
  EXPECT_EQ(llmrt_session_num_tokens(nullptr), 0);
  EXPECT_EQ(llmrt_engine_has_work(nullptr), 0);
  llmrt_session_reset(nullptr);
  llmrt_engine_cancel(nullptr, 1);
  EXPECT_EQ(llmrt_status_get_code(nullptr), LLMRT_STATUS_OK);
  EXPECT_STREQ(llmrt_status_get_message(nullptr), "");
}

TEST(CapiErrorTest, BadRequestsLeaveTheSessionUsable) {
  PlanPtr plan = OpenPlan(LLMRT_TEST_PLAN_F32);
  SessionPtr session = NewSession(plan.get(), /*context_tokens=*/16);
  EXPECT_EQ(llmrt_session_max_tokens(session.get()), 16);

  Status empty(llmrt_session_generate(session.get(), nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(empty.code(), LLMRT_STATUS_FAILED_PRECONDITION);
  EXPECT_THAT(empty.message(), HasSubstr("append a prompt"));

  const int32_t outside[] = {1, 512};
  Status vocab(llmrt_session_append_tokens(session.get(), outside, 2));
  EXPECT_EQ(vocab.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(vocab.message(), HasSubstr("token 512 at index 1"));

  const std::string long_text =
      "Once upon a time there was a little dog who liked to run in the big green park";
  Status overflow(llmrt_session_append_text(session.get(), long_text.data(), long_text.size(), 1));
  EXPECT_EQ(overflow.code(), LLMRT_STATUS_OUT_OF_RANGE);
  EXPECT_THAT(overflow.message(), HasSubstr("context of 16 tokens"));
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 0);

  AppendPrompt(session.get(), "Once upon a time");
  llmrt_sampler_params bad = Greedy(5);
  bad.top_p = 2.0f;
  Status top_p(llmrt_session_generate(session.get(), &bad, nullptr, nullptr, nullptr));
  EXPECT_EQ(top_p.code(), LLMRT_STATUS_INVALID_ARGUMENT);
  EXPECT_THAT(top_p.message(), HasSubstr("top_p"));

  // The context fills: generation stops with LENGTH at 16 tokens, no error.
  llmrt_generate_result result;
  llmrt_generate_result_init(&result);
  Generated generated = Generate(session.get(), Greedy(100), &result);
  EXPECT_EQ(result.finish_reason, LLMRT_FINISH_LENGTH);
  EXPECT_EQ(llmrt_session_num_tokens(session.get()), 16);
  EXPECT_EQ(generated.tokens, std::vector<int32_t>(kGreedyIds.begin(), kGreedyIds.begin() + 11));
  Status full(llmrt_session_append_tokens(session.get(), kPromptIds.data(), 1));
  EXPECT_EQ(full.code(), LLMRT_STATUS_OUT_OF_RANGE);
}

}  // namespace
