#include "runtime/server/protocol.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/server/server.h"

namespace llmrt::server {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<ParsedRequest> Chat(const std::string& body, RequestLimits limits = {}) {
  return ParseRequest(Endpoint::kChatCompletions, body, limits);
}
absl::StatusOr<ParsedRequest> Completion(const std::string& body, RequestLimits limits = {}) {
  return ParseRequest(Endpoint::kCompletions, body, limits);
}

TEST(ParseRequest, ChatWithEverySamplingField) {
  absl::StatusOr<ParsedRequest> request = Chat(R"({
    "model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,
    "stream_options": {"include_usage": true}, "max_tokens": 5, "max_completion_tokens": 7,
    "n": 2, "logprobs": true, "top_logprobs": 3, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "repetition_penalty": 1.1, "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "logit_bias": {"12": -100, "7": 2.5}, "seed": 42, "stop": ["\n", "END"],
    "stop_token_ids": [2], "ignore_eos": true})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->model, "m");
  EXPECT_EQ(request->messages.size(), 1u);
  EXPECT_TRUE(request->stream);
  EXPECT_TRUE(request->include_usage);
  EXPECT_EQ(*request->max_tokens, 7);  // max_completion_tokens wins
  EXPECT_EQ(request->n, 2);
  EXPECT_TRUE(request->logprobs);
  EXPECT_EQ(request->top_logprobs, 3);
  EXPECT_DOUBLE_EQ(*request->temperature, 0.5);
  EXPECT_DOUBLE_EQ(*request->top_p, 0.9);
  EXPECT_EQ(*request->top_k, 40);
  EXPECT_DOUBLE_EQ(*request->min_p, 0.05);
  EXPECT_DOUBLE_EQ(*request->repetition_penalty, 1.1);
  EXPECT_DOUBLE_EQ(request->presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(request->frequency_penalty, -0.5);
  ASSERT_EQ(request->logit_bias.size(), 2u);
  EXPECT_EQ(request->logit_bias[0].first, 12);
  EXPECT_FLOAT_EQ(request->logit_bias[0].second, -100.0f);
  EXPECT_EQ(*request->seed, 42u);
  EXPECT_THAT(request->stop, ::testing::ElementsAre("\n", "END"));
  EXPECT_THAT(request->stop_token_ids, ::testing::ElementsAre(2));
  EXPECT_TRUE(request->ignore_eos);
}

TEST(ParseRequest, CompletionPromptForms) {
  auto one = Completion(R"({"prompt": "Once"})");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->prompts.size(), 1u);
  EXPECT_EQ(one->prompts[0].text, "Once");
  EXPECT_FALSE(one->prompts[0].is_ids);

  auto ids = Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->prompts.size(), 1u);
  EXPECT_TRUE(ids->prompts[0].is_ids);
  EXPECT_THAT(ids->prompts[0].ids, ::testing::ElementsAre(1, 2, 3));

  auto many = Completion(R"({"prompt": ["a", [4, 5]], "logprobs": 2})");
  ASSERT_TRUE(many.ok());
  ASSERT_EQ(many->prompts.size(), 2u);
  EXPECT_EQ(many->prompts[0].text, "a");
  EXPECT_THAT(many->prompts[1].ids, ::testing::ElementsAre(4, 5));
  EXPECT_TRUE(many->logprobs);
  EXPECT_EQ(many->top_logprobs, 2);
}

TEST(ParseRequest, ContentPartsAreJoined) {
  auto request = Chat(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
          {"type": "text", "text": "b"}]}]})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->messages[0]["content"], "a\nb");
  auto image = Chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})");
  EXPECT_EQ(image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(image.status().message(), HasSubstr("messages[0].content[0]"));
}

TEST(ParseRequest, NullMeansAbsent) {
  auto request = Chat(R"({"messages": [{"role": "user", "content": "x"}], "temperature": null,
                          "stop": null, "max_tokens": null, "seed": null})");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->temperature.has_value());
  EXPECT_FALSE(request->max_tokens.has_value());
  EXPECT_TRUE(request->stop.empty());
}

struct BadCase {
  const char* body;
  const char* message_part;
};

class BadChatRequest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadChatRequest, IsInvalidArgumentNamingTheField) {
  RequestLimits limits;
  limits.max_n = 4;
  limits.max_stop = 2;
  limits.max_tokens = 100;
  auto request = Chat(GetParam().body, limits);
  ASSERT_FALSE(request.ok()) << GetParam().body;
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(request.status().message()), HasSubstr(GetParam().message_part));
  EXPECT_EQ(ErrorFromStatus(request.status()).http_status, 400);
}

constexpr char kMessages[] = R"("messages": [{"role": "user", "content": "x"}])";

std::string With(const std::string& field) {
  return std::string("{") + kMessages + ", " + field + "}";
}

const BadCase kBadCases[] = {
    {"{not json", "not valid JSON"},
    {"[1, 2]", "must be a JSON object"},
    {"{}", "'messages' is required"},
    {R"({"messages": []})", "'messages'"},
    {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
    {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
    {R"({"model": 5, "messages": [{"role": "user", "content": "x"}]})", "'model'"},
};
INSTANTIATE_TEST_SUITE_P(Structure, BadChatRequest, ::testing::ValuesIn(kBadCases));

// Built at run time: the field cases share the message list.
std::vector<BadCase> FieldCases() {
  static std::vector<std::string> bodies;
  const std::vector<std::pair<std::string, const char*>> cases = {
      {R"("temperature": "hot")", "'temperature' must be a number"},
      {R"("temperature": 2.5)", "'temperature' must be in [0, 2]"},
      {R"("top_p": 0)", "'top_p'"},
      {R"("top_p": 1.5)", "'top_p'"},
      {R"("max_tokens": 0)", "'max_tokens' must be in [1, 100]"},
      {R"("max_tokens": 101)", "'max_tokens' must be in [1, 100]"},
      {R"("max_tokens": 3.5)", "'max_tokens' must be an integer"},
      {R"("n": 5)", "'n' must be in [1, 4]"},
      {R"("stream": "yes")", "'stream' must be a boolean"},
      {R"("stream_options": {"include_usage": true})", "only allowed when 'stream' is true"},
      {R"("top_logprobs": 2)", "needs 'logprobs'"},
      {R"("logprobs": true, "top_logprobs": 21)", "'top_logprobs' must be in [0, 20]"},
      {R"("stop": ["a", "b", "c"])", "at most 2"},
      {R"("stop": [""])", "must not be empty"},
      {R"("stop": 3)", "'stop' must be a string or an array"},
      {R"("logit_bias": {"x": 1})", "'logit_bias' keys"},
      {R"("logit_bias": {"3": 101})", "[-100, 100]"},
      {R"("presence_penalty": 3)", "'presence_penalty'"},
      {R"("frequency_penalty": -3)", "'frequency_penalty'"},
      {R"("repetition_penalty": 0)", "'repetition_penalty'"},
      {R"("min_p": 2)", "'min_p'"},
      {R"("top_k": -2)", "'top_k'"},
      {R"("seed": "1")", "'seed' must be an integer"},
      {R"("stop_token_ids": [-1])", "stop_token_ids[0]"},
      {R"("best_of": 3)", "'best_of'"},
      // Negative and huge counts never reach the engine (CVE-2026-21869 was a negative count
      // reaching llama.cpp's server): each is a 400 naming the field.
      {R"("max_tokens": -1)", "'max_tokens' must be in [1, 100], found -1"},
      {R"("max_completion_tokens": -9223372036854775808)", "'max_completion_tokens'"},
      {R"("max_tokens": 18446744073709551615)", "'max_tokens' must be in [1, 100]"},
      {R"("max_tokens": 1e300)", "'max_tokens' must be an integer"},
      {R"("n": -1)", "'n' must be in [1, 4], found -1"},
      {R"("n": 0)", "'n' must be in [1, 4], found 0"},
      {R"("n": 4294967297)", "'n' must be in [1, 4]"},
      {R"("logprobs": true, "top_logprobs": -1)", "'top_logprobs' must be in [0, 20], found -1"},
      {R"("logprobs": true, "top_logprobs": 1099511627776)", "'top_logprobs' must be in [0, 20]"},
      {R"("logprobs": 3)", "'logprobs' must be a boolean"},
      {R"("logit_bias": {"-5": 1})", "'logit_bias' keys"},
      {R"("logit_bias": {"99999999999": 1})", "'logit_bias' keys"},
      {R"("stop": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"])", "at most 2"},
      {R"("stop_token_ids": [1, 2, 3])", "at most 2"},
      {R"("top_k": -9223372036854775808)", "'top_k'"},
  };
  std::vector<BadCase> out;
  bodies.reserve(cases.size());
  for (const auto& [field, message] : cases) {
    bodies.push_back(With(field));
    out.push_back({bodies.back().c_str(), message});
  }
  return out;
}
INSTANTIATE_TEST_SUITE_P(Fields, BadChatRequest, ::testing::ValuesIn(FieldCases()));

TEST(ParseRequest, CompletionRejections) {
  RequestLimits limits;
  limits.max_prompts = 2;
  EXPECT_THAT(std::string(Completion(R"({})").status().message()),
              HasSubstr("'prompt' is required"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": ["a", "b", "c"]})", limits).status().message()),
              HasSubstr("at most 2"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": [1, "x"]})").status().message()),
              HasSubstr("prompt[1]"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": [[]]})").status().message()),
              HasSubstr("prompt[0]"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": "a", "echo": true})").status().message()),
              HasSubstr("'echo'"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": "a", "logprobs": 30})").status().message()),
              HasSubstr("'logprobs' must be in [0, 20]"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": "a", "logprobs": -1})").status().message()),
              HasSubstr("'logprobs' must be in [0, 20], found -1"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": [-1]})").status().message()),
              HasSubstr("prompt[0]"));
  EXPECT_THAT(std::string(Completion(R"({"prompt": [2147483648]})").status().message()),
              HasSubstr("prompt[0]"));
}

TEST(ParseRequest, EveryCapHasAnExplicitLimit) {
  // The default caps: a request can ask for at most n 16 x 64 prompts of 16 stop strings of
  // 512 bytes, 20 top logprobs and 1024 logit_bias entries; the body itself is size-limited by
  // ServerOptions::max_body_bytes (16 MiB) before parsing.
  const RequestLimits limits;
  EXPECT_EQ(limits.max_n, 16);
  EXPECT_EQ(limits.max_prompts, 64);
  EXPECT_EQ(limits.max_top_logprobs, 20);
  EXPECT_EQ(limits.max_stop, 16);
  EXPECT_EQ(limits.max_stop_bytes, 512);
  EXPECT_EQ(limits.max_logit_bias, 1024);
  EXPECT_EQ(ServerOptions().max_body_bytes, size_t{16} << 20);
  std::string bias = R"({"prompt": "a", "logit_bias": {)";
  for (int id = 0; id <= 1024; ++id) bias += (id ? ", \"" : "\"") + std::to_string(id) + "\": 1";
  bias += "}}";
  EXPECT_THAT(std::string(Completion(bias).status().message()),
              HasSubstr("'logit_bias' holds 1025 entries; at most 1024"));
  const std::string long_stop = R"({"prompt": "a", "stop": ")" + std::string(513, 'x') + "\"}";
  EXPECT_THAT(std::string(Completion(long_stop).status().message()),
              HasSubstr("at most 512 bytes, found one of 513"));
}

// Found by tests/fuzz/request_body_fuzzer.cc: deeply nested JSON overflowed the stack (the
// message copy and the error's dump() recurse per level); 100k levels is a 200 kB body.
TEST(ParseRequest, DeepNestingIsRefusedNotRecursed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& body :
       {R"({"messages": [{"role": "user", "content": "x", "extra": )" + deep + "}]}",
        R"({"messages": [{"role": "user", "content": )" + deep + "}]}",
        R"({"prompt": "x", "n": )" + deep + "}", deep}) {
    for (Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
      auto request = ParseRequest(endpoint, body, RequestLimits());
      ASSERT_FALSE(request.ok());
      EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(request.status().message(), HasSubstr("deeper than 64 levels"));
    }
  }
  // 64 levels are fine where the field takes any JSON (a message's extra keys).
  const std::string ok_nesting = std::string(60, '[') + std::string(60, ']');
  auto request =
      Chat(R"({"messages": [{"role": "user", "content": "x", "extra": )" + ok_nesting + "}]}");
  EXPECT_TRUE(request.ok()) << request.status();
}

TEST(ResolveSampling, ClientFieldsWinOverPlanDefaults) {
  sampling::SamplingParams greedy_plan;
  greedy_plan.temperature = 0.0;
  ParsedRequest request;
  EXPECT_EQ(ResolveSampling(request, greedy_plan).temperature, 0.0);
  request.temperature = 0.7;
  request.top_k = 5;
  request.seed = 9;
  const sampling::SamplingParams params = ResolveSampling(request, greedy_plan);
  EXPECT_EQ(params.temperature, 0.7);
  EXPECT_EQ(params.top_k, 5);
  EXPECT_EQ(params.seed, 9u);
  sampling::SamplingParams sampling_plan;
  sampling_plan.temperature = 0.6;
  sampling_plan.top_p = 0.9;
  const sampling::SamplingParams defaults = ResolveSampling(ParsedRequest{}, sampling_plan);
  EXPECT_EQ(defaults.temperature, 0.6);
  EXPECT_EQ(defaults.top_p, 0.9);
}

TEST(Errors, StatusMapsToOpenAiStatusAndType) {
  struct Case {
    absl::Status status;
    int http;
    const char* type;
  };
  const Case cases[] = {
      {absl::InvalidArgumentError("x"), 400, "invalid_request_error"},
      {absl::OutOfRangeError("x"), 400, "invalid_request_error"},
      {absl::UnauthenticatedError("x"), 401, "authentication_error"},
      {absl::NotFoundError("x"), 404, "invalid_request_error"},
      {absl::ResourceExhaustedError("x"), 429, "rate_limit_exceeded"},
      {absl::UnavailableError("x"), 503, "service_unavailable"},
      {absl::InternalError("x"), 500, "server_error"},
  };
  for (const Case& test : cases) {
    const ApiError error = ErrorFromStatus(test.status);
    EXPECT_EQ(error.http_status, test.http) << test.status;
    EXPECT_EQ(error.type, test.type) << test.status;
  }
  const Json body = Json::parse(ErrorBody(ErrorFromStatus(absl::NotFoundError("no such model"))));
  EXPECT_EQ(body["error"]["message"], "no such model");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_TRUE(body["error"]["param"].is_null());
  const Json plain = Json::parse(ErrorBody(ErrorFromStatus(absl::InvalidArgumentError("bad"))));
  EXPECT_TRUE(plain["error"]["code"].is_null());
}

TEST(Sse, FramingIsDataLineAndBlankLine) {
  EXPECT_EQ(SseEvent(R"({"a":1})"), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
  // Model text with newlines stays on one line once dumped.
  Json chunk = {{"text", "a\nb"}};
  const std::string event = SseEvent(DumpJson(chunk));
  EXPECT_EQ(event.find('\n'), event.size() - 2);
}

TEST(Sse, InvalidUtf8BecomesReplacementCharacter) {
  Json chunk = {{"text", std::string("ok\xff")}};
  EXPECT_EQ(DumpJson(chunk), "{\"text\":\"ok\xef\xbf\xbd\"}");
}

ResponseContext MakeContext(Endpoint endpoint) {
  ResponseContext context;
  context.endpoint = endpoint;
  context.id = NewResponseId(endpoint);
  context.created = 1700000000;
  context.model = "stories";
  context.token_text = [](int32_t id) { return "t" + std::to_string(id); };
  return context;
}

TEST(Responses, ChatChunksFollowOpenAi) {
  const ResponseContext context = MakeContext(Endpoint::kChatCompletions);
  EXPECT_EQ(context.id.rfind("chatcmpl-", 0), 0u);
  const Json first = StreamChunk(context, 0, "", {}, true, engine::FinishReason::kNone, true, 0);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], context.id);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(first.contains("usage") && first["usage"].is_null());

  const Json middle =
      StreamChunk(context, 1, "Once", {}, false, engine::FinishReason::kNone, false, 0);
  EXPECT_EQ(middle["choices"][0]["index"], 1);
  EXPECT_FALSE(middle["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(middle["choices"][0]["delta"]["content"], "Once");
  EXPECT_FALSE(middle.contains("usage"));

  const Json last = StreamChunk(context, 0, "", {}, false, engine::FinishReason::kLength, false, 0);
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");

  const Json usage = UsageChunk(context, {5, 3, 2});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(Responses, NonStreamedCarryUsageAndSortedChoices) {
  ResponseContext context = MakeContext(Endpoint::kCompletions);
  context.logprobs = true;
  ChoiceResult a, b;
  a.index = 1;
  a.text = "xy";
  a.finish_reason = engine::FinishReason::kStop;
  b.index = 0;
  b.text = "z";
  b.finish_reason = engine::FinishReason::kLength;
  engine::TokenOutput token;
  token.token = 7;
  token.logprob = {7, -0.5f};
  token.top = {{7, -0.5f}, {3, -1.5f}};
  b.tokens = {token, token};
  const Json response = CompletionResponse(context, {a, b}, {4, 3, 0});
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["choices"][0]["index"], 0);
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["choices"][1]["text"], "xy");
  EXPECT_EQ(response["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(response["usage"]["completion_tokens"], 3);
  EXPECT_EQ(response["usage"]["total_tokens"], 7);
  const Json& logprobs = response["choices"][0]["logprobs"];
  EXPECT_EQ(logprobs["tokens"], Json::array({"t7", "t7"}));
  EXPECT_EQ(logprobs["text_offset"], Json::array({0, 2}));
  EXPECT_DOUBLE_EQ(logprobs["top_logprobs"][0]["t3"].get<double>(), -1.5);

  ResponseContext chat = MakeContext(Endpoint::kChatCompletions);
  chat.logprobs = true;
  const Json chat_response = CompletionResponse(chat, {b}, {1, 2, 0});
  EXPECT_EQ(chat_response["object"], "chat.completion");
  EXPECT_EQ(chat_response["choices"][0]["message"]["role"], "assistant");
  const Json& content = chat_response["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "t7");
  EXPECT_EQ(content[0]["bytes"], Json::array({'t', '7'}));
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST(Responses, LogprobsGiveTokenBytesAndCharacterOffsets) {
  // "\u201c" (E2 80 9C) split over two byte tokens, then "a": each piece alone decodes to
  // U+FFFD, its bytes are its own.
  auto context_for = [](Endpoint endpoint) {
    ResponseContext context = MakeContext(endpoint);
    context.logprobs = true;
    context.token_text = [](int32_t id) { return id == 3 ? std::string("a") : "\xEF\xBF\xBD"; };
    context.token_bytes = [](int32_t id) {
      return id == 1 ? std::string("\xE2") : id == 2 ? std::string("\x80\x9C") : "a";
    };
    return context;
  };
  std::vector<engine::TokenOutput> tokens(3);
  for (int32_t id = 1; id <= 3; ++id) {
    tokens[id - 1].token = id;
    tokens[id - 1].logprob = {id, -0.25f * id};
    tokens[id - 1].top = {{3, -0.1f}};
  }
  const Json chat = LogprobsJson(context_for(Endpoint::kChatCompletions), tokens, 0);
  EXPECT_EQ(chat["content"][0]["bytes"], Json::array({0xE2}));
  EXPECT_EQ(chat["content"][1]["bytes"], Json::array({0x80, 0x9C}));
  EXPECT_EQ(chat["content"][1]["top_logprobs"][0]["bytes"], Json::array({'a'}));
  // Offsets count characters of the text ("\u201ca"): the split character counts once, with
  // the token that starts it; a streamed chunk's base is the characters already sent.
  const Json completion = LogprobsJson(context_for(Endpoint::kCompletions), tokens, 5);
  EXPECT_EQ(completion["text_offset"], Json::array({5, 6, 6}));
  // The sampled token is always among the alternatives ("up to logprobs+1 elements").
  EXPECT_DOUBLE_EQ(completion["top_logprobs"][0]["\xEF\xBF\xBD"].get<double>(), -0.25);
  EXPECT_FLOAT_EQ(completion["top_logprobs"][0]["a"].get<float>(), -0.1f);
  EXPECT_EQ(completion["top_logprobs"][2].size(), 1u);
}

TEST(Responses, FinishReasonNames) {
  EXPECT_STREQ(FinishReasonString(engine::FinishReason::kStop), "stop");
  EXPECT_STREQ(FinishReasonString(engine::FinishReason::kLength), "length");
  EXPECT_STREQ(FinishReasonString(engine::FinishReason::kCancelled), "abort");
  EXPECT_EQ(FinishReasonString(engine::FinishReason::kNone), nullptr);
}

TEST(ConstantTimeEquals, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret1"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace llmrt::server
