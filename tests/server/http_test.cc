// `llmrt serve` against curl: greedy output equals `llmrt run --temp 0`, SSE framing as OpenAI
// streams it, OpenAI error objects with the right statuses, API keys, the queue limit (429),
// client disconnects (cancelled, KV freed) and the SIGTERM drain.
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/test_util.h"
#include "tests/server/server_process.h"

namespace llmrt::testing {
namespace {

using Json = nlohmann::json;
using llmc::testing::CommandResult;
using llmc::testing::MakeScratchDir;
using llmc::testing::ReadFile;
using llmc::testing::RunCommand;
using llmc::testing::SourcePath;
using llmc::testing::ToolPath;
using ::testing::HasSubstr;

HttpResult Post(const ServerProcess& server, const std::string& path, const Json& body,
                const std::string& extra = "") {
  return Curl(server.url() + path, "-H 'Content-Type: application/json' --data-binary " +
                                       ShellQuote(body.dump()) + " " + extra);
}

// The "data:" payloads of an SSE body, checking the framing on the way: every event is exactly
// one "data: " line followed by a blank line, and nothing follows the last event.
std::vector<std::string> SseEvents(const std::string& body) {
  std::vector<std::string> events;
  size_t position = 0;
  while (position < body.size()) {
    const size_t end = body.find("\n\n", position);
    EXPECT_NE(end, std::string::npos) << "unterminated event at byte " << position;
    if (end == std::string::npos) break;
    const std::string event = body.substr(position, end - position);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    EXPECT_EQ(event.find('\n'), std::string::npos) << "multi-line event: " << event;
    events.push_back(event.substr(6));
    position = end + 2;
  }
  return events;
}

// A value of one series in /metrics, e.g. Metric(page, "llmrt:kv_cache_usage_perc").
double Metric(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series);
  if (at == std::string::npos) return -1;
  const size_t line_end = page.find('\n', at + 1);
  const std::string line = page.substr(at + 1, line_end - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plan_ = new std::string(StoriesChatPlan());
    ASSERT_FALSE(plan_->empty());
  }
  static void TearDownTestSuite() { delete plan_; }
  void SetUp() override {
    ASSERT_TRUE(plan_ != nullptr && !plan_->empty()) << "compiling stories260K failed";
  }
  static std::string* plan_;
};
std::string* HttpTest::plan_ = nullptr;

TEST_F(HttpTest, GreedyCompletionEqualsLlmrtRun) {
  const CommandResult run =
      RunCommand(ToolPath("llmrt") + " run " + *plan_ + " -p 'Once upon a time' -n 48 --temp 0");
  ASSERT_EQ(run.exit_code, 0) << run.error;
  const std::string prompt = "Once upon a time";
  ASSERT_EQ(run.output.rfind(prompt, 0), 0u);
  const std::string expected =
      run.output.substr(prompt.size(), run.output.size() - prompt.size() - 1);
  ASSERT_GT(expected.size(), 40u);

  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  const HttpResult plain =
      Post(server, "/v1/completions", {{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json response = Json::parse(plain.body);
  EXPECT_EQ(response["choices"][0]["text"], expected);
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["usage"]["completion_tokens"], 48);
  EXPECT_EQ(response["usage"]["total_tokens"], response["usage"]["prompt_tokens"].get<int>() + 48);

  // The same through the stream, several requests at once (batched in the engine).
  std::vector<std::thread> clients;
  std::vector<std::string> streamed(4);
  for (int index = 0; index < 4; ++index) {
    clients.emplace_back([&, index] {
      const HttpResult result =
          Post(server, "/v1/completions",
               {{"prompt", prompt}, {"max_tokens", 48}, {"temperature", 0}, {"stream", true}});
      for (const std::string& event : SseEvents(result.body)) {
        if (event == "[DONE]") continue;
        streamed[index] += Json::parse(event)["choices"][0]["text"].get<std::string>();
      }
    });
  }
  for (std::thread& client : clients) client.join();
  for (const std::string& text : streamed) EXPECT_EQ(text, expected);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, ChatStreamFollowsOpenAiFraming) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  const HttpResult result =
      Post(server, "/v1/chat/completions",
           {{"model", "stories"},
            {"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
            {"max_tokens", 12},
            {"n", 2},
            {"seed", 7},
            {"temperature", 0.8},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(result.status, 200) << result.body;
  EXPECT_THAT(result.headers, HasSubstr("Content-Type: text/event-stream"));
  const std::vector<std::string> events = SseEvents(result.body);
  ASSERT_GE(events.size(), 5u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string id;
  std::vector<bool> role_seen(2, false), finished(2, false);
  std::vector<int> content_chunks(2, 0);
  for (size_t index = 0; index + 1 < events.size(); ++index) {
    const Json chunk = Json::parse(events[index]);
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id) << "every chunk carries the same id";
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    EXPECT_EQ(chunk["model"], "stories");
    ASSERT_TRUE(chunk.contains("usage"));
    if (index + 2 == events.size()) {  // the usage chunk
      EXPECT_TRUE(chunk["choices"].empty());
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 24);  // 2 choices x 12
      EXPECT_GT(chunk["usage"]["prompt_tokens"].get<int>(), 3);
      continue;
    }
    EXPECT_TRUE(chunk["usage"].is_null());
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const Json& choice = chunk["choices"][0];
    const int choice_index = choice["index"];
    ASSERT_TRUE(choice_index == 0 || choice_index == 1);
    const Json& delta = choice["delta"];
    if (!role_seen[choice_index]) {
      EXPECT_EQ(delta["role"], "assistant") << "the first delta of a choice carries the role";
      role_seen[choice_index] = true;
    } else {
      EXPECT_FALSE(delta.contains("role"));
    }
    EXPECT_FALSE(finished[choice_index]) << "nothing after the finish chunk";
    if (!choice["finish_reason"].is_null()) {
      EXPECT_EQ(choice["finish_reason"], "length");
      EXPECT_TRUE(delta.empty());
      finished[choice_index] = true;
    } else if (delta.contains("content") && !delta["content"].get<std::string>().empty()) {
      ++content_chunks[choice_index];
    }
  }
  EXPECT_TRUE(finished[0] && finished[1]);
  EXPECT_GT(content_chunks[0], 1);
  EXPECT_GT(content_chunks[1], 1);

  // Not streamed: the whole message and usage.
  const HttpResult whole = Post(server, "/v1/chat/completions",
                                {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                 {"max_completion_tokens", 5},
                                 {"logprobs", true},
                                 {"top_logprobs", 2}});
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json response = Json::parse(whole.body);
  EXPECT_EQ(response["object"], "chat.completion");
  EXPECT_EQ(response["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(response["choices"][0]["logprobs"]["content"].size(), 5u);
  EXPECT_EQ(response["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(response["usage"]["completion_tokens"], 5);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, StopStringsAndSeedsAreHonoured) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  // Greedy continues "Once upon a time, there was a little girl named Lily."; stop at "girl".
  const HttpResult stopped = Post(
      server, "/v1/completions",
      {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}, {"stop", {"girl"}}});
  ASSERT_EQ(stopped.status, 200) << stopped.body;
  const Json response = Json::parse(stopped.body);
  EXPECT_EQ(response["choices"][0]["text"], ", there was a little ");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "stop");

  const Json sampled = {{"prompt", "Once upon a time"},
                        {"max_tokens", 24},
                        {"temperature", 1.0},
                        {"top_p", 0.9},
                        {"seed", 1234}};
  const HttpResult first = Post(server, "/v1/completions", sampled);
  const HttpResult second = Post(server, "/v1/completions", sampled);
  ASSERT_EQ(first.status, 200);
  EXPECT_EQ(Json::parse(first.body)["choices"][0]["text"],
            Json::parse(second.body)["choices"][0]["text"]);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, ErrorsAreOpenAiObjectsWithTheRightStatus) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--max-body-bytes 4096 --model-name stories")) << server.error();
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"/v1/completions", "{not json", 400, "not valid JSON"},
      {"/v1/completions", R"({"prompt": "Once", "max_tokens": 600})", 400,
       "maximum context length is 512 tokens. However, you requested 602 tokens (2 in the "
       "prompt, 600 for the completion)"},
      {"/v1/completions", R"({"prompt": "Once", "model": "gpt-4o"})", 404, "gpt-4o"},
      {"/v1/completions", R"({"prompt": "Once", "n": 17})", 400, "'n' must be in [1, 16]"},
      {"/v1/completions", R"({"prompt": "Once", "temperature": -1})", 400, "'temperature'"},
      {"/v1/completions", R"({"prompt": [1, 99999]})", 400, "outside the vocabulary"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "'messages'"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
         "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       400, "at most 16"},
      {"/v1/nothing", "{}", 404, "no route"},
      {"/v1/completions", std::string(5000, ' '), 413, "larger than the server accepts"},
  };
  for (const Case& test : cases) {
    const HttpResult result =
        Curl(server.url() + test.path,
             "-H 'Content-Type: application/json' --data-binary " + ShellQuote(test.body));
    EXPECT_EQ(result.status, test.status) << test.path << " " << test.body << " -> " << result.body;
    const Json error = Json::parse(result.body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << result.body;
    EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr(test.message_part));
    EXPECT_TRUE(error["error"]["type"].is_string());
    EXPECT_TRUE(error["error"].contains("param"));
    EXPECT_TRUE(error["error"].contains("code"));
  }
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, ApiKeyGuardsEverythingButHealth) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--api-key sekrit-123")) << server.error();
  EXPECT_EQ(Curl(server.url() + "/health").status, 200);
  const HttpResult missing = Curl(server.url() + "/v1/models");
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(Json::parse(missing.body)["error"]["type"], "authentication_error");
  EXPECT_EQ(Curl(server.url() + "/v1/models", "-H 'Authorization: Bearer sekrit-12'").status, 401);
  EXPECT_EQ(Curl(server.url() + "/v1/models", "-H 'Authorization: Bearer sekrit-1234'").status,
            401);
  EXPECT_EQ(Curl(server.url() + "/metrics", "-H 'Authorization: Basic sekrit-123'").status, 401);
  EXPECT_EQ(Post(server, "/v1/completions", {{"prompt", "Once"}}).status, 401);
  const HttpResult ok = Curl(server.url() + "/v1/models", "-H 'Authorization: Bearer sekrit-123'");
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(Json::parse(ok.body)["data"][0]["max_model_len"], 512);
  EXPECT_EQ(Curl(server.url() + "/metrics", "-H 'Authorization: Bearer sekrit-123'").status, 200);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, KvAndContextFlagsBoundTheContext) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--max-seq-len 100 --kv-memory-fraction 0.001"))
      << server.error();
  const HttpResult models = Curl(server.url() + "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(Json::parse(models.body)["data"][0]["max_model_len"], 100);
  const HttpResult too_long =
      Post(server, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 99}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_THAT(too_long.body, HasSubstr("maximum context length is 100 tokens"));
  EXPECT_EQ(server.Terminate(), 0);
  const CommandResult bad =
      RunCommand(ToolPath("llmrt") + " serve " + *plan_ + " --kv-memory-fraction 2");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.error, HasSubstr("--kv-memory-fraction"));
}

TEST_F(HttpTest, TokenizeAndDetokenizeRoundTrip) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  const HttpResult tokens = Post(server, "/tokenize", {{"prompt", "Once upon a time"}});
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  const Json ids = Json::parse(tokens.body)["tokens"];
  EXPECT_EQ(ids[0], 1);  // BOS
  EXPECT_EQ(Json::parse(tokens.body)["count"], ids.size());
  const HttpResult text = Post(server, "/detokenize", {{"tokens", ids}});
  ASSERT_EQ(text.status, 200);
  EXPECT_EQ(Json::parse(text.body)["prompt"], "<s> Once upon a time");
  const HttpResult chat =
      Post(server, "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const HttpResult rendered =
      Post(server, "/detokenize", {{"tokens", Json::parse(chat.body)["tokens"]}});
  EXPECT_EQ(Json::parse(rendered.body)["prompt"], "<s> user: Hi\nassistant:");
  EXPECT_EQ(Post(server, "/detokenize", {{"tokens", {100000}}}).status, 400);
  EXPECT_EQ(server.Terminate(), 0);
}

// Starts a long generation in the background; the curl output goes to `body_path`.
void LongStreamInBackground(const ServerProcess& server, const std::string& body_path,
                            const std::string& pipe_tail = "") {
  const Json body = {
      {"prompt", "Once"}, {"max_tokens", 480}, {"ignore_eos", true}, {"n", 12}, {"stream", true}};
  RunCommand("(curl -s -N -H 'Content-Type: application/json' --data-binary " +
             ShellQuote(body.dump()) + " " + server.url() + "/v1/completions " + pipe_tail + " > " +
             body_path + " 2>&1 &)");
}

bool WaitFor(const std::function<bool()>& condition, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

// A byte-fallback token (<0xE2>, id 229 in stories260K) reads U+FFFD alone; its logprob entry
// carries its own byte, from which clients rebuild split characters. Completions' text_offset
// counts characters ("\u201c", id 465, is one character of three bytes).
TEST_F(HttpTest, LogprobsCarryTokenBytesAndCharacterOffsets) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  const HttpResult chat = Post(server, "/v1/chat/completions",
                               {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"max_tokens", 2},
                                {"temperature", 0},
                                {"logprobs", true},
                                {"logit_bias", {{"229", 100}}}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const Json content = Json::parse(chat.body)["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u) << chat.body;
  EXPECT_EQ(content[0]["token"], "\xEF\xBF\xBD");
  EXPECT_EQ(content[0]["bytes"], Json::array({0xE2}));

  const HttpResult completion = Post(server, "/v1/completions",
                                     {{"prompt", "Lily said"},
                                      {"max_tokens", 3},
                                      {"temperature", 0},
                                      {"logprobs", 1},
                                      {"logit_bias", {{"465", 100}}}});
  ASSERT_EQ(completion.status, 200) << completion.body;
  const Json choice = Json::parse(completion.body)["choices"][0];
  EXPECT_EQ(choice["text"], "\xE2\x80\x9C\xE2\x80\x9C\xE2\x80\x9C");
  EXPECT_EQ(choice["logprobs"]["text_offset"], Json::array({0, 1, 2}));
  // The sampled token is among the alternatives, whatever their number.
  EXPECT_TRUE(choice["logprobs"]["top_logprobs"][0].contains("\xE2\x80\x9C"));
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, DisconnectCancelsAndFreesTheKvCache) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_)) << server.error();
  const std::string dir = MakeScratchDir("disconnect");
  // `head -c 1` exits after the first byte; curl then dies on its next write and the socket
  // closes while the server still has ~480 steps to go.
  LongStreamInBackground(server, dir + "/out", "| head -c 1");
  auto metrics = [&] { return Curl(server.url() + "/metrics").body; };
  // (No wait for "running" first: the cancel may come before a /metrics scrape sees it.)
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string page = metrics();
        return Metric(page,
                      "llmrt:request_success_total{model_name=\"stories\",finished_reason="
                      "\"abort\"}") == 12;
      },
      30))
      << metrics();
  const std::string page = metrics();
  EXPECT_EQ(Metric(page, "llmrt:num_requests_running"), 0);
  EXPECT_EQ(Metric(page, "llmrt:kv_cache_usage_perc"), 0) << "blocks freed after the cancel";
  EXPECT_LT(Metric(page, "llmrt:generation_tokens_total"), 12 * 480);

  // A non-streamed request whose client gives up is cancelled too. The KV pool holds 512
  // tokens, so 12 x 480 preempt each other and a choice may still reach its length before the
  // cancel: what matters is that all 12 end and at least one was cut. The whole request takes
  // about 0.5 s on stories260K, so the client gives up after 0.1 s.
  RunCommand(
      "curl -s --max-time 0.1 -H 'Content-Type: application/json' --data-binary " +
      ShellQuote(
          Json({{"prompt", "Once"}, {"max_tokens", 480}, {"ignore_eos", true}, {"n", 12}}).dump()) +
      " " + server.url() + "/v1/completions");
  const std::string abort_series =
      "llmrt:request_success_total{model_name=\"stories\",finished_reason=\"abort\"}";
  const std::string length_series =
      "llmrt:request_success_total{model_name=\"stories\",finished_reason=\"length\"}";
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string page = metrics();
        return Metric(page, abort_series) + Metric(page, length_series) == 24;
      },
      30))
      << metrics();
  const std::string after = metrics();
  EXPECT_GT(Metric(after, abort_series), 12);
  EXPECT_EQ(Metric(after, "llmrt:kv_cache_usage_perc"), 0);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, FullQueueAnswers429) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1 --max-seqs 12 --max-queued 0")) << server.error();
  const std::string dir = MakeScratchDir("queue");
  LongStreamInBackground(server, dir + "/out");  // takes all 12 sequences
  ASSERT_TRUE(WaitFor(
      [&] {
        return Metric(Curl(server.url() + "/metrics").body, "llmrt:num_requests_running") > 0;
      },
      30));
  const HttpResult rejected = Post(server, "/v1/completions", {{"prompt", "Once"}});
  EXPECT_EQ(rejected.status, 429) << rejected.body;
  EXPECT_THAT(rejected.body, HasSubstr("rate_limit_exceeded"));
  EXPECT_THAT(rejected.headers, HasSubstr("Retry-After: 1"));
  // Every API says it in its own shape, with the same header.
  const HttpResult messages =
      Post(server, "/v1/messages",
           {{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  EXPECT_EQ(messages.status, 429) << messages.body;
  EXPECT_EQ(Json::parse(messages.body)["error"]["type"], "rate_limit_error");
  EXPECT_THAT(messages.headers, HasSubstr("Retry-After: 1"));
  const HttpResult responses = Post(server, "/v1/responses", {{"input", "Hi"}});
  EXPECT_EQ(responses.status, 429) << responses.body;
  EXPECT_THAT(responses.headers, HasSubstr("Retry-After: 1"));
  EXPECT_EQ(Post(server, "/v1/completions", {{"prompt", "Once"}, {"n", 13}}).status, 400);
  // A bad request is a 400 even while the queue is full (found by the soak: an out-of-vocabulary
  // id used to be checked only after admission, and got 429).
  EXPECT_EQ(Post(server, "/v1/completions", {{"prompt", {1, 99999}}}).status, 400);
  EXPECT_EQ(
      Post(server, "/v1/completions", {{"prompt", "Once"}, {"logit_bias", {{"99999", 5}}}}).status,
      400);
  // Once the long request is done, there is room again.
  ASSERT_TRUE(
      WaitFor([&] { return ReadFile(dir + "/out").find("[DONE]") != std::string::npos; }, 120));
  ASSERT_TRUE(WaitFor(
      [&] {
        return Post(server, "/v1/completions", {{"prompt", "Once"}}).status == 200;
      },
      10));
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, OverloadGets200Or429AndNothingIsLost) {
  // 48 streaming clients at once against room for 4 running + 4 queued sequences: every request
  // must end as a complete 200 stream or a 429, and the server must be empty afterwards.
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--max-seqs 4 --max-queued 4")) << server.error();
  const std::string dir = MakeScratchDir("overload");
  const Json body = {
      {"prompt", "Once"}, {"max_tokens", 160}, {"ignore_eos", true}, {"stream", true}};
  llmc::testing::WriteFile(dir + "/body.json", body.dump());
  const CommandResult burst = RunCommand(
      "seq 1 48 | xargs -P 48 -I{} sh -c \"curl -s -N -o " + dir +
      "/out.{} -w '%{http_code}\\n' -H 'Content-Type: application/json' --data-binary @" + dir +
      "/body.json " + server.url() + "/v1/completions >> " + dir + "/codes\"");
  ASSERT_EQ(burst.exit_code, 0) << burst.error;
  const std::string codes = ReadFile(dir + "/codes");
  int ok = 0, rejected = 0, other = 0;
  for (size_t start = 0; start < codes.size();) {
    const size_t end = codes.find('\n', start);
    const std::string code = codes.substr(start, end - start);
    start = end == std::string::npos ? codes.size() : end + 1;
    if (code == "200") {
      ++ok;
    } else if (code == "429") {
      ++rejected;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(ok + rejected, 48) << codes;
  EXPECT_EQ(other, 0) << codes;
  EXPECT_GE(ok, 1);
  for (int index = 1; index <= 48; ++index) {
    const std::string out = ReadFile(dir + "/out." + std::to_string(index));
    if (out.find("rate_limit_exceeded") != std::string::npos) continue;
    ASSERT_GE(out.size(), 14u);
    EXPECT_EQ(out.substr(out.size() - 14), "data: [DONE]\n\n") << "stream " << index << " cut";
    EXPECT_THAT(out, HasSubstr("\"finish_reason\":\"length\""));
  }
  const std::string page = Curl(server.url() + "/metrics").body;
  EXPECT_EQ(Metric(page, "llmrt:num_requests_running"), 0);
  EXPECT_EQ(Metric(page, "llmrt:num_requests_waiting"), 0);
  EXPECT_EQ(Metric(page, "llmrt:kv_cache_usage_perc"), 0);
  EXPECT_EQ(Metric(page, "llmrt:request_rejected_queue_full_total"), rejected);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(HttpTest, SigtermDrainsInFlightRequestsThenExitsZero) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1 --drain-timeout 120")) << server.error();
  const std::string dir = MakeScratchDir("drain");
  LongStreamInBackground(server, dir + "/out");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Metric(Curl(server.url() + "/metrics").body, "llmrt:num_requests_running") > 0;
      },
      30));
  server.SendSigterm();
  // While draining: new work and health checks get 503.
  ASSERT_TRUE(WaitFor([&] { return Curl(server.url() + "/health").status == 503; }, 10));
  const HttpResult refused = Post(server, "/v1/completions", {{"prompt", "Once"}});
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(server.Wait(120), 0) << server.error();
  // The in-flight stream was finished, not cut: every choice ran to its length.
  const std::string body = ReadFile(dir + "/out");
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
  size_t finished = 0;
  for (size_t at = body.find("\"finish_reason\":\"length\""); at != std::string::npos;
       at = body.find("\"finish_reason\":\"length\"", at + 1)) {
    ++finished;
  }
  EXPECT_EQ(finished, 12u);
}

TEST_F(HttpTest, DrainTimeoutAbortsWhatIsLeft) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--drain-timeout 0.2")) << server.error();
  const std::string dir = MakeScratchDir("drain-timeout");
  LongStreamInBackground(server, dir + "/out");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Metric(Curl(server.url() + "/metrics").body, "llmrt:num_requests_running") > 0;
      },
      30));
  server.SendSigterm();
  EXPECT_EQ(server.Wait(60), 0) << server.error();
  const std::string body = ReadFile(dir + "/out");
  EXPECT_THAT(body, HasSubstr("\"finish_reason\":\"abort\""));
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n");
}

// The scripted Qwen3 plan (make_agent_model.py): real Qwen3 tokenizer and chat template; every
// reply is a <think> block, "Let me check." and two <tool_call>s, then EOS.
class AgentHttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = MakeScratchDir("agent");
    const CommandResult made =
        RunCommand("python3 " + SourcePath("tests/server/make_agent_model.py") + " --llmc " +
                   ToolPath("llmc") + " --family qwen3 -o " + dir + "/model");
    ASSERT_EQ(made.exit_code, 0) << made.error;
    const CommandResult compiled = RunCommand(ToolPath("llmc") + " compile " + dir + "/model -o " +
                                              dir + "/agent.plan --quiet");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
    plan_ = new std::string(dir + "/agent.plan");
  }
  static void TearDownTestSuite() { delete plan_; }
  void SetUp() override { ASSERT_TRUE(plan_ != nullptr) << "building the agent plan failed"; }
  static std::string* plan_;
};
std::string* AgentHttpTest::plan_ = nullptr;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "get_time",
   "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}}])");
const Json kAsk = Json::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");

TEST_F(AgentHttpTest, ToolCallsStreamedAndNotAgree) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--model-name agent")) << server.error();
  const HttpResult plain =
      Post(server, "/v1/chat/completions", {{"messages", kAsk}, {"tools", kTools}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json choice = Json::parse(plain.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Let me check.");
  EXPECT_EQ(choice["message"]["reasoning_content"], "I should check the weather.\n");
  const Json& calls = choice["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u) << plain.body;
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(Json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            Json({{"city", "Paris"}}));
  EXPECT_EQ(calls[1]["function"]["name"], "get_time");
  EXPECT_THAT(calls[0]["id"].get<std::string>(), ::testing::MatchesRegex("call_[A-Za-z0-9]{24}"));

  const HttpResult streamed = Post(server, "/v1/chat/completions",
                                   {{"messages", kAsk}, {"tools", kTools}, {"stream", true}});
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string content, reasoning, finish;
  std::vector<Json> call_deltas;
  for (const std::string& event : SseEvents(streamed.body)) {
    if (event == "[DONE]") continue;
    const Json chunk = Json::parse(event);
    const Json& delta = chunk["choices"][0]["delta"];
    content += delta.value("content", "");
    reasoning += delta.value("reasoning_content", "");
    if (delta.contains("tool_calls")) call_deltas.push_back(delta["tool_calls"][0]);
    const Json& reason = chunk["choices"][0]["finish_reason"];
    if (!reason.is_null()) finish = reason;
  }
  EXPECT_EQ(content, "Let me check.");
  EXPECT_EQ(reasoning, "I should check the weather.\n");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(call_deltas.size(), 4u) << streamed.body;
  // The first delta of a call: index, id, type, name and empty arguments; then the arguments.
  EXPECT_EQ(call_deltas[0]["index"], 0);
  EXPECT_EQ(call_deltas[0]["function"]["name"], "get_weather");
  EXPECT_EQ(call_deltas[0]["function"]["arguments"], "");
  EXPECT_FALSE(call_deltas[1].contains("id"));
  EXPECT_EQ(call_deltas[1]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(call_deltas[2]["index"], 1);
  EXPECT_EQ(call_deltas[3]["function"]["arguments"], "{\"zone\":\"CET\"}");

  // --tool-call-format none: the same output is all content.
  EXPECT_EQ(server.Terminate(), 0);
  ServerProcess unparsed;
  ASSERT_TRUE(unparsed.Start(*plan_, "--tool-call-format none")) << unparsed.error();
  // Without a format in the plan or on the command line, tools are refused: their calls could
  // not be read (the stories plan has a chat template and no tool-call format).
  const HttpResult refused = [&] {
    ServerProcess stories;
    EXPECT_TRUE(stories.Start(StoriesChatPlan())) << stories.error();
    const HttpResult result =
        Post(stories, "/v1/chat/completions", {{"messages", kAsk}, {"tools", kTools}});
    EXPECT_EQ(stories.Terminate(), 0);
    return result;
  }();
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_THAT(refused.body, HasSubstr("no tool-call format"));
  const HttpResult text =
      Post(unparsed, "/v1/chat/completions", {{"messages", kAsk}, {"tools", kTools}});
  ASSERT_EQ(text.status, 200) << text.body;
  const Json message = Json::parse(text.body)["choices"][0]["message"];
  EXPECT_FALSE(message.contains("tool_calls"));
  EXPECT_THAT(message["content"].get<std::string>(), HasSubstr("<tool_call>"));
  EXPECT_EQ(unparsed.Terminate(), 0);
  const CommandResult bad =
      RunCommand(ToolPath("llmrt") + " serve " + *plan_ + " --port 0 --tool-call-format qwen");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.error, HasSubstr("'qwen' is not one of none, hermes"));
}

TEST_F(AgentHttpTest, EndpointsMethodsAndErrorShapes) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--model-name agent")) << server.error();
  const HttpResult model = Curl(server.url() + "/v1/models/agent");
  ASSERT_EQ(model.status, 200) << model.body;
  EXPECT_EQ(Json::parse(model.body)["id"], "agent");
  const HttpResult missing = Curl(server.url() + "/v1/models/gpt-4o");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(Json::parse(missing.body)["error"]["code"], "model_not_found");
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                           "/v1/messages/count_tokens", "/v1/responses", "/tokenize"}) {
    const HttpResult wrong = Curl(server.url() + path);
    EXPECT_EQ(wrong.status, 405) << path;
    EXPECT_THAT(wrong.headers, HasSubstr("Allow: POST")) << path;
  }
  const HttpResult post_models = Post(server, "/v1/models", Json::object());
  EXPECT_EQ(post_models.status, 405);
  EXPECT_THAT(post_models.headers, HasSubstr("Allow: GET"));
  EXPECT_EQ(Curl(server.url() + "/v1/nothing").status, 404);

  // Anthropic errors have Anthropic's shape.
  const HttpResult anthropic = Post(server, "/v1/messages", {{"messages", kAsk}});
  EXPECT_EQ(anthropic.status, 400);
  const Json error = Json::parse(anthropic.body);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "invalid_request_error");
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("'max_tokens' is required"));

  // Unknown and refused parameters are 400s naming them, on every API.
  struct Refused {
    const char* path;
    Json body;
    const char* field;
  };
  const std::vector<Refused> refused = {
      {"/v1/chat/completions", {{"messages", kAsk}, {"functions", Json::array()}}, "functions"},
      {"/v1/completions", {{"prompt", "x"}, {"tools", kTools}}, "tools"},
      {"/v1/messages",
       {{"messages", kAsk}, {"max_tokens", 2}, {"service_tier", "auto"}},
       "service_tier"},
      {"/v1/responses", {{"input", "x"}, {"include", Json::array()}}, "include"},
      {"/v1/responses", {{"input", "x"}, {"store", true}}, "store"},
      // Wrong types and nulls where nlohmann's value() would throw: 400s, not 500s.
      {"/v1/messages",
       {{"messages", {{{"role", 5}, {"content", "x"}}}}, {"max_tokens", 2}},
       "messages[0].role"},
      {"/v1/responses", {{"input", "x"}, {"store", "yes"}}, "store"},
      {"/v1/chat/completions",
       {{"messages", kAsk},
        {"tools", kTools},
        {"tool_choice", "auto"},
        {"chat_template_kwargs", {{"messages", Json::array()}}}},
       "chat_template_kwargs.messages"},
  };
  for (const Refused& test : refused) {
    const HttpResult result = Post(server, test.path, test.body);
    EXPECT_EQ(result.status, 400) << test.path << " " << test.body.dump();
    EXPECT_THAT(result.body, HasSubstr(std::string("'") + test.field + "'")) << result.body;
  }
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace llmrt::testing
