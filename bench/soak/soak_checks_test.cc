#include "bench/soak/soak_checks.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmrt::soak {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

SoakContext Context() {
  SoakContext context;
  context.token_pool = {5, 17, 42, 99, 301};
  context.max_context = 512;
  context.model = "stories";
  context.max_body_bytes = 4096;
  return context;
}

SoakRequest StreamedCompletion(int32_t choices, int64_t max_tokens, bool exact) {
  SoakRequest request;
  request.generation = true;
  request.stream = true;
  request.path = "/v1/completions";
  request.choices = choices;
  request.max_tokens = max_tokens;
  request.exact_tokens = exact;
  request.include_usage = true;
  return request;
}

// An event stream the way the OpenAI API sends a two-choice completion with usage.
std::string GoodStream() {
  std::string body;
  auto event = [&](const Json& json) { body += "data: " + json.dump() + "\n\n"; };
  const Json base = {{"id", "cmpl-1"}, {"object", "text_completion"}, {"model", "m"}};
  for (int index = 0; index < 2; ++index) {
    Json chunk = base;
    chunk["choices"] = {{{"index", index}, {"text", "ab"}, {"finish_reason", nullptr}}};
    chunk["usage"] = nullptr;
    event(chunk);
    chunk["choices"] = {{{"index", index}, {"text", "c"}, {"finish_reason", "length"}}};
    event(chunk);
  }
  Json usage = base;
  usage["choices"] = Json::array();
  usage["usage"] = {{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}};
  event(usage);
  return body + "data: [DONE]\n\n";
}

TEST(CheckResponse, AcceptsAWellFormedStreamAndRejectsBrokenOnes) {
  const SoakRequest request = StreamedCompletion(2, 2, /*exact=*/true);
  EXPECT_THAT(CheckResponse(request, 200, GoodStream()), IsEmpty());
  // Cut before [DONE]: a truncated stream.
  std::string cut = GoodStream();
  cut.resize(cut.size() - 14);
  EXPECT_THAT(CheckResponse(request, 200, cut), HasSubstr("[DONE]"));
  // A choice without its finish_reason.
  std::string unfinished = GoodStream();
  const size_t last_finish = unfinished.rfind("\"length\"");
  unfinished.replace(last_finish, 8, "null");
  EXPECT_THAT(CheckResponse(request, 200, unfinished), HasSubstr("no finish_reason"));
  // Usage that does not add up for an exact request.
  SoakRequest three = request;
  three.max_tokens = 3;
  EXPECT_THAT(CheckResponse(three, 200, GoodStream()), HasSubstr("completion_tokens"));
  // Changing ids.
  std::string ids = GoodStream();
  ids.replace(ids.find("cmpl-1"), 6, "cmpl-2");
  EXPECT_THAT(CheckResponse(request, 200, ids), HasSubstr("ids differ"));
  // An error event inside a 200 stream.
  EXPECT_THAT(
      CheckResponse(request, 200, "data: {\"error\": {\"message\": \"x\"}}\n\ndata: [DONE]\n\n"),
      HasSubstr("error event"));
}

TEST(CheckResponse, PlainCompletionNeedsEveryChoiceAndUsage) {
  SoakRequest request;
  request.generation = true;
  request.path = "/v1/chat/completions";
  request.chat = true;
  request.choices = 2;
  request.max_tokens = 5;
  Json body = {{"id", "chatcmpl-1"},
               {"object", "chat.completion"},
               {"choices",
                {{{"index", 0},
                  {"message", {{"role", "assistant"}, {"content", "hi"}}},
                  {"finish_reason", "stop"}},
                 {{"index", 1},
                  {"message", {{"role", "assistant"}, {"content", "yo"}}},
                  {"finish_reason", "length"}}}},
               {"usage", {{"prompt_tokens", 4}, {"completion_tokens", 7}, {"total_tokens", 11}}}};
  EXPECT_THAT(CheckResponse(request, 200, body.dump()), IsEmpty());
  request.exact_tokens = true;  // ignore_eos: both must run to length, 10 tokens
  EXPECT_THAT(CheckResponse(request, 200, body.dump()), HasSubstr("length"));
  request.exact_tokens = false;
  body["choices"].erase(1);
  EXPECT_THAT(CheckResponse(request, 200, body.dump()), HasSubstr("2 choices"));
  EXPECT_THAT(CheckResponse(request, 500, "{}"), HasSubstr("HTTP 500"));
}

TEST(CheckResponse, Only429WithAnOpenAiErrorIsAnAllowedRejection) {
  SoakRequest request = StreamedCompletion(1, 4, false);
  const std::string busy =
      R"({"error": {"message": "busy", "type": "rate_limit_exceeded", "param": null,)"
      R"( "code": "rate_limit_exceeded"}})";
  EXPECT_THAT(CheckResponse(request, 429, busy), IsEmpty());
  EXPECT_THAT(CheckResponse(request, 429, "busy"), HasSubstr("not an OpenAI error"));
  EXPECT_THAT(CheckResponse(request, 503, busy), HasSubstr("HTTP 503"));
}

TEST(CheckResponse, InvalidRequestsNeedExactlyTheirStatusAndAnErrorObject) {
  SoakRequest request;
  request.expect = Expect::kError;
  request.error_status = 400;
  const std::string error = R"({"error": {"message": "'n' must be in [1, 16], found -3", "type": )"
                            R"("invalid_request_error", "param": null, "code": null}})";
  EXPECT_THAT(CheckResponse(request, 400, error), IsEmpty());
  EXPECT_THAT(CheckResponse(request, 200, error), HasSubstr("expected HTTP 400"));
  EXPECT_THAT(CheckResponse(request, 500, error), HasSubstr("expected HTTP 400"));
  EXPECT_THAT(CheckResponse(request, 400, R"({"error": {"message": ""}})"),
              HasSubstr("lacks message"));
}

TEST(RandomRequest, CoversEveryKindWithWellFormedBodies) {
  std::mt19937_64 random(1);
  const SoakContext context = Context();
  std::set<std::string> names;
  int kinds[3] = {0, 0, 0};
  for (int draw = 0; draw < 4000; ++draw) {
    const SoakRequest request = RandomRequest(random, context);
    names.insert(request.name);
    ++kinds[static_cast<int>(request.expect)];
    if (request.expect == Expect::kError) {
      EXPECT_TRUE(request.error_status == 400 || request.error_status == 404 ||
                  request.error_status == 413)
          << request.name;
      continue;
    }
    if (request.method == "GET") continue;
    const Json body = Json::parse(request.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << request.name << ": " << request.body;
    if (request.generation) {
      EXPECT_GE(request.choices, 1);
      EXPECT_GE(request.max_tokens, 1);
      EXPECT_LE(request.max_tokens, request.expect == Expect::kSuccess ? 48 : 448);
    }
  }
  // Every invalid case of the catalogue is drawn (36 with a body limit), and all kinds.
  int invalid_names = 0;
  for (const std::string& name : names) {
    if (name.rfind("probe", 0) != 0 && name.rfind("completions", 0) != 0 &&
        name.rfind("chat", 0) != 0 && name.rfind("disconnect", 0) != 0) {
      ++invalid_names;
    }
  }
  EXPECT_EQ(invalid_names, 36);
  EXPECT_GT(kinds[static_cast<int>(Expect::kSuccess)], 2000);
  EXPECT_GT(kinds[static_cast<int>(Expect::kError)], 700);
  EXPECT_GT(kinds[static_cast<int>(Expect::kDisconnect)], 250);
  EXPECT_TRUE(names.count("chat_stream") && names.count("completions") &&
              names.count("disconnect_stream") && names.count("disconnect_plain") &&
              names.count("probe/metrics"));
}

}  // namespace
}  // namespace llmrt::soak
