// The agent-facing request rules and the Messages / Responses conversions (anthropic.h,
// responses.h), without a server.
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/server/anthropic.h"
#include "runtime/server/protocol.h"
#include "runtime/server/responses.h"

namespace llmrt::server {
namespace {

using ::testing::HasSubstr;

constexpr char kTools[] =
    R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])";

absl::StatusOr<ParsedRequest> Chat(const std::string& fields) {
  return ParseRequest(Endpoint::kChatCompletions,
                      R"({"messages": [{"role": "user", "content": "x"}])" +
                          (fields.empty() ? std::string() : ", " + fields) + "}",
                      {});
}

void ExpectRefused(const absl::StatusOr<ParsedRequest>& request, const std::string& part) {
  ASSERT_FALSE(request.ok()) << part;
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(request.status().message()), HasSubstr(part));
}

TEST(ChatRequest, AgentFieldsAreReadOrRefusedByName) {
  absl::StatusOr<ParsedRequest> request =
      Chat(std::string(R"("tools": )") + kTools +
           R"(, "tool_choice": "none", "parallel_tool_calls": true,
          "chat_template_kwargs": {"enable_thinking": false}, "reasoning_effort": "high",
          "skip_special_tokens": false)");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->tool_choice, "none");
  EXPECT_EQ(request->chat_template_kwargs["enable_thinking"], false);
  EXPECT_EQ(request->reasoning_effort, "high");
  EXPECT_FALSE(request->skip_special_tokens);

  request = Chat(std::string(R"("tools": )") + kTools +
                 R"(, "tool_choice": {"type": "function", "function": {"name": "f"}},
                 "parallel_tool_calls": false)");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->tool_choice, "required");
  EXPECT_EQ(request->tool_choice_function, "f");
  EXPECT_FALSE(request->parallel_tool_calls);
  ExpectRefused(Chat(R"("tool_choice": "required")"), "needs 'tools'");
  ExpectRefused(Chat(R"("tool_choice": {"type": "function", "function": {"name": 1}})"),
                "'tool_choice' must be");
  ExpectRefused(Chat(R"("tool_choice": "sometimes")"), "'tool_choice' must be");
  ExpectRefused(Chat(std::string(R"("tools": )") + kTools + R"(, "parallel_tool_calls": false)"),
                "'parallel_tool_calls' false is enforced only");
  ExpectRefused(Chat(R"("tools": [{"type": "function", "function": {}}])"), "'tools[0]'");
  ExpectRefused(Chat(R"("tools": [{"type": "code_interpreter"}])"), "'tools[0]'");
  ExpectRefused(Chat(R"("reasoning_effort": "max")"), "'reasoning_effort'");
  ExpectRefused(Chat(R"("chat_template_kwargs": [1])"), "'chat_template_kwargs'");
  ExpectRefused(Chat(R"("continue_final_message": true, "add_generation_prompt": false)"),
                "last message to be an assistant");
  ExpectRefused(Chat(R"("continue_final_message": true)"), "'add_generation_prompt' to false");
  for (const char* field : {"user", "store", "metadata", "functions", "audio", "modalities"}) {
    ExpectRefused(Chat(std::string("\"") + field + "\": 1"), std::string("'") + field + "'");
  }
  // null is absent, as everywhere in the API.
  EXPECT_TRUE(Chat(R"("user": null, "tool_choice": null)").ok());
}

TEST(ChatRequest, StrictToolsAreEnforcedOrRefused) {
  constexpr char kStrict[] = R"("tools": [{"type": "function", "function": {"name": "f",
      "strict": true, "parameters": {"type": "object"}}}])";
  // With auto the model writes free text around any calls: the schema cannot be enforced.
  ExpectRefused(Chat(kStrict), "'tools[0].function.strict' true is not enforced");
  // A forcing tool_choice constrains every call to its tool's schema.
  EXPECT_TRUE(Chat(std::string(kStrict) + R"(, "tool_choice": "required")").ok());
  EXPECT_TRUE(Chat(std::string(kStrict) + R"(, "tool_choice": "none")").ok());
  ExpectRefused(Chat(R"("tools": [{"type": "function", "function": {"name": "f",
      "strict": "yes"}}])"),
                "'tools[0].function.strict' must be a boolean");
  // An empty tools array declares none (as vLLM reads it): nothing is parsed as a call.
  absl::StatusOr<ParsedRequest> request = Chat(R"("tools": [])");
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->tools.is_null());
  ExpectRefused(Chat(R"("tools": [], "tool_choice": "required")"), "needs 'tools'");
}

TEST(ChatRequest, SetVariablesAndUnknownStreamOptionsAreRefused) {
  for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
    ExpectRefused(Chat(std::string(R"("chat_template_kwargs": {")") + reserved + R"(": 1})"),
                  std::string("'chat_template_kwargs.") + reserved + "' is set by the request");
  }
  ExpectRefused(Chat(R"("stream": true, "stream_options": {"include_usage": true, "foo": 1})"),
                "'stream_options.foo' is not supported");
  EXPECT_TRUE(Chat(R"("stream": true, "stream_options": {"include_usage": true})").ok());
}

// A field of the wrong type, or null, anywhere in a Messages or Responses body is a 400 naming
// it, never an exception (nlohmann's value() throws on a value of another type).
TEST(AgentRequests, WrongTypesAndNullsAreRefusedByName) {
  const std::pair<const char*, const char*> messages_cases[] = {
      {R"([{"role": 5, "content": "x"}])", "'messages[0].role'"},
      {R"([{"role": null, "content": "x"}])", "'messages[0].role'"},
      {R"([{"role": "user", "content": [{"type": null, "text": "x"}]}])",
       "'messages[0].content[0]'"},
      {R"([{"role": "user", "content": [{"type": 1, "text": "x"}]}])", "'messages[0].content[0]'"},
      {R"([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
          "content": "r", "is_error": "yes"}]}])",
       "'messages[0].content[0].is_error' must be a boolean"},
  };
  for (const auto& [messages, part] : messages_cases) {
    ExpectRefused(
        ParseMessagesRequest(std::string(R"({"max_tokens": 2, "messages": )") + messages + "}", {}),
        part);
  }
  const std::string ask = R"({"max_tokens": 2, "messages": [{"role": "user", "content": "x"}], )";
  ExpectRefused(ParseMessagesRequest(ask + R"("tool_choice": {"type": 5}})", {}), "'tool_choice'");
  ExpectRefused(ParseMessagesRequest(ask + R"("tool_choice": {"type": null}})", {}),
                "'tool_choice'");
  ExpectRefused(ParseMessagesRequest(ask + R"("system": [{"type": null, "text": "s"}]})", {}),
                "'system[0]'");
  // The chat path's errors come back under the Messages names.
  ExpectRefused(ParseMessagesRequest(ask + R"("stop_sequences": [""]})", {}),
                "'stop_sequences' strings must not be empty");
  // is_error null is absent.
  EXPECT_TRUE(ParseMessagesRequest(R"({"max_tokens": 2, "messages": [{"role": "user", "content":
      [{"type": "tool_result", "tool_use_id": "t", "content": "r", "is_error": null}]}]})",
                                   {})
                  .ok());

  const std::pair<const char*, const char*> responses_cases[] = {
      {R"("input": "x", "store": "yes")", "'store' must be a boolean"},
      {R"("input": [{"role": 5, "content": "x"}])", "'input[0].role'"},
      {R"("input": [{"type": 5, "role": "user", "content": "x"}])", "'input[0].type'"},
      {R"("input": [{"role": "user", "content": [{"type": null, "text": "x"}]}])",
       "'input[0].content[0]'"},
      {R"("input": "x", "tools": [{"type": 5, "name": "f"}])", "'tools[0]'"},
      {R"("input": "x", "tools": [{"type": "function", "name": "f", "strict": "no"}])",
       "'tools[0].strict' must be a boolean"},
  };
  for (const auto& [fields, part] : responses_cases) {
    ExpectRefused(ParseResponsesRequest(std::string("{") + fields + "}", {}), part);
  }
  // null is absent: store, strict and a type left null.
  absl::StatusOr<ParsedRequest> request = ParseResponsesRequest(
      R"({"store": null, "input": [{"type": null, "role": "user", "content": "x"}],
          "tools": [{"type": "function", "name": "f", "strict": null}]})",
      {});
  EXPECT_TRUE(request.ok()) << request.status();
}

TEST(MessagesRequest, AFinalAssistantMessageIsContinued) {
  // Anthropic's prefill: "the response continues immediately from that content".
  absl::StatusOr<ParsedRequest> request = ParseMessagesRequest(
      R"({"max_tokens": 4, "messages": [{"role": "user", "content": "Write a haiku"},
          {"role": "assistant", "content": "Autumn moon"}]})",
      {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_TRUE(request->continue_final_message);
  EXPECT_FALSE(request->add_generation_prompt);
  request = ParseMessagesRequest(
      R"({"max_tokens": 4, "messages": [{"role": "user", "content": "Write a haiku"}]})", {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_FALSE(request->continue_final_message);
  EXPECT_TRUE(request->add_generation_prompt);
}

TEST(ChatRequest, ToolCallArgumentsReachTemplatesAsObjects) {
  absl::StatusOr<ParsedRequest> request = ParseRequest(
      Endpoint::kChatCompletions,
      R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null,
          "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f",
          "arguments": "{\"a\": 1}"}}]}, {"role": "tool", "tool_call_id": "call_1",
          "content": "ok"}]})",
      {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->messages[1]["tool_calls"][0]["function"]["arguments"],
            Json::parse(R"({"a": 1})"));
  ExpectRefused(
      ParseRequest(Endpoint::kChatCompletions,
                   R"({"messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]})", {}),
      "'messages[0].tool_calls[0]'");
}

TEST(ForcingToolChoice, MessagesAndResponsesFormsBecomeTheChatOnes) {
  absl::StatusOr<ParsedRequest> messages = ParseMessagesRequest(
      R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
          "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true}})",
      {});
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->tool_choice, "required");
  EXPECT_EQ(messages->tool_choice_function, "f");
  EXPECT_FALSE(messages->parallel_tool_calls);
  messages = ParseMessagesRequest(
      R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
          "tools": [{"name": "f", "input_schema": {"type": "object"}}],
          "tool_choice": {"type": "any"}})",
      {});
  ASSERT_TRUE(messages.ok()) << messages.status();
  EXPECT_EQ(messages->tool_choice, "required");
  EXPECT_EQ(messages->tool_choice_function, "");
  EXPECT_TRUE(messages->parallel_tool_calls);

  absl::StatusOr<ParsedRequest> responses = ParseResponsesRequest(
      R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}],
          "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false})",
      {});
  ASSERT_TRUE(responses.ok()) << responses.status();
  EXPECT_EQ(responses->tool_choice_function, "f");
  EXPECT_EQ(responses->api_echo["tool_choice"],
            Json::parse(R"({"type": "function", "name": "f"})"));
  EXPECT_EQ(responses->api_echo["parallel_tool_calls"], false);
}

TEST(ResponsesRequest, TextFormatIsTheResponseFormat) {
  absl::StatusOr<ParsedRequest> request = ParseResponsesRequest(
      R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
          "schema": {"type": "object"}, "strict": true}}})",
      {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->response_format,
            Json::parse(R"({"type": "json_schema", "json_schema": {"name": "n",
                "schema": {"type": "object"}, "strict": true}})"));
  EXPECT_EQ(request->api_echo["text"]["format"]["name"], "n");
  request =
      ParseResponsesRequest(R"({"input": "x", "text": {"format": {"type": "json_object"}}})", {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->response_format, Json::parse(R"({"type": "json_object"})"));
  ExpectRefused(ParseResponsesRequest(
                    R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "n",
                        "schema": {"type": "object", "not": {}}}}})",
                    {}),
                "'text.format.schema'");
  ExpectRefused(ParseResponsesRequest(R"({"input": "x", "text": {"verbosity": "low"}})", {}),
                "'text'");
}

TEST(MessagesRequest, BecomesAChatRequest) {
  absl::StatusOr<ParsedRequest> request = ParseMessagesRequest(R"({
    "model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5, "stream": true,
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42", "is_error": true},
        {"type": "text", "text": "and?"}]}]})",
                                                               {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->endpoint, Endpoint::kMessages);
  EXPECT_EQ(request->max_tokens, 9);
  EXPECT_EQ(request->stop, std::vector<std::string>{"END"});
  EXPECT_EQ(request->top_k, 5);
  EXPECT_TRUE(request->stream);
  EXPECT_EQ(request->tools[0]["function"]["parameters"], Json::parse(R"({"type": "object"})"));
  const Json& messages = request->messages;
  ASSERT_EQ(messages.size(), 5u) << messages.dump();
  EXPECT_EQ(messages[0], Json::parse(R"({"role": "system", "content": "Be brief."})"));
  EXPECT_EQ(messages[2]["content"], "calling");
  EXPECT_EQ(messages[2]["reasoning_content"], "hm");
  EXPECT_EQ(messages[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"a": 1})"));
  EXPECT_EQ(messages[3],
            Json::parse(R"({"role": "tool", "tool_call_id": "toolu_1", "content": "Error: 42"})"));
  EXPECT_EQ(messages[4], Json::parse(R"({"role": "user", "content": "and?"})"));

  const std::string ask = R"("messages": [{"role": "user", "content": "x"}])";
  auto refused = [&](const std::string& fields, const std::string& part) {
    ExpectRefused(ParseMessagesRequest("{" + ask + ", " + fields + "}", {}), part);
  };
  refused(R"("model": "m")", "'max_tokens' is required");
  refused(R"("max_tokens": 5, "temperature": 1.5)", "'temperature' must be a number in [0, 1]");
  refused(R"("max_tokens": 5, "tool_choice": {"type": "any"})", "needs 'tools'");
  refused(R"("max_tokens": 5, "tool_choice": {"type": "tool"})", "'tool_choice.name'");
  refused(R"("max_tokens": 5, "tool_choice": {"type": "auto", "disable_parallel_tool_use": true})",
          "disable_parallel_tool_use' is enforced only");
  refused(R"("max_tokens": 5, "tools": [{"type": "web_search_20250305", "name": "web_search"}])",
          "'tools[0]'");
  refused(R"("max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 10})", "'thinking'");
  ExpectRefused(ParseMessagesRequest(
                    R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})", {}),
                "'messages[0].role'");
  // count_tokens takes no max_tokens and no sampling fields.
  EXPECT_TRUE(ParseMessagesRequest("{" + ask + "}", {}, /*count_tokens=*/true).ok());
  ExpectRefused(ParseMessagesRequest("{" + ask + R"(, "max_tokens": 5})", {}, true),
                "'max_tokens' is not supported");
}

TEST(ResponsesRequest, BecomesAChatRequest) {
  absl::StatusOr<ParsedRequest> request = ParseResponsesRequest(R"({
    "model": "m", "instructions": "Be brief.", "max_output_tokens": 7, "store": false,
    "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
    "input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
      {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{\"a\": 1}"},
      {"type": "function_call", "call_id": "call_2", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "42"}]})",
                                                                {});
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->endpoint, Endpoint::kResponses);
  EXPECT_EQ(request->max_tokens, 7);
  const Json& messages = request->messages;
  ASSERT_EQ(messages.size(), 5u) << messages.dump();
  EXPECT_EQ(messages[0]["content"], "Be brief.");
  EXPECT_EQ(messages[1], Json::parse(R"({"role": "system", "content": "Use tools."})"));
  EXPECT_EQ(messages[3]["role"], "assistant");
  EXPECT_EQ(messages[3]["content"], "");
  EXPECT_EQ(messages[3]["tool_calls"].size(), 2u);
  EXPECT_EQ(messages[4]["tool_call_id"], "call_1");
  EXPECT_EQ(request->api_echo["instructions"], "Be brief.");
  EXPECT_EQ(request->api_echo["max_output_tokens"], 7);

  auto refused = [](const std::string& fields, const std::string& part) {
    ExpectRefused(ParseResponsesRequest(R"({"input": "x", )" + fields + "}", {}), part);
  };
  refused(R"("store": true)", "'store' must be false");
  refused(R"("previous_response_id": "resp_1")", "stateless");
  refused(R"("max_output_tokens": 0)", "'max_output_tokens'");
  refused(R"("text": {"format": {"type": "yaml"}})", "'text.format.type'");
  refused(R"("tools": [{"type": "function", "name": "f", "strict": true}])",
          "'tools[0].strict' true is not enforced");
  EXPECT_TRUE(ParseResponsesRequest(R"({"input": "x", "tool_choice": "required",
      "tools": [{"type": "function", "name": "f", "strict": true}]})",
                                    {})
                  .ok());
  refused(R"("tools": [{"type": "web_search"}])", "'tools[0]'");
  refused(R"("reasoning": {"effort": "low", "summary": "auto"})", "'reasoning'");
  refused(R"("include": [])", "'include'");
  ExpectRefused(ParseResponsesRequest(R"({"input": [{"type": "reasoning"}]})", {}),
                "'input[0].type'");
}

ResponseContext Context(Endpoint endpoint) {
  ResponseContext context;
  context.endpoint = endpoint;
  context.id = NewResponseId(endpoint);
  context.model = "m";
  return context;
}

engine::RequestOutput Finished() {
  engine::RequestOutput output;
  output.finished = true;
  output.finish_reason = engine::FinishReason::kStop;
  return output;
}

// Writes one choice's deltas through `writer` as the server does; returns the event text.
std::string Stream(ApiWriter& writer, const std::vector<ParsedDelta>& deltas) {
  ChoiceResult choice;
  std::string events = writer.StreamStart();
  for (const ParsedDelta& delta : deltas) {
    for (const ToolCall& call : delta.calls) choice.tool_calls.push_back(call);
    events += writer.StreamDelta(choice, delta, engine::RequestOutput());
  }
  choice.finish_reason = engine::FinishReason::kStop;
  events += writer.StreamFinish(choice);
  return events + writer.StreamEnd({choice}, Usage{3, 4, 0});
}

std::vector<std::string> EventNames(const std::string& events) {
  std::vector<std::string> names;
  for (size_t at = events.find("event: "); at != std::string::npos;
       at = events.find("event: ", at + 1)) {
    names.push_back(events.substr(at + 7, events.find('\n', at) - at - 7));
  }
  return names;
}

const ToolCall kCall = {"call_x", "f", R"({"a":1})"};

TEST(MessagesWriter, StreamsBlocksInAnthropicOrder) {
  std::unique_ptr<ApiWriter> writer = MakeMessagesWriter(Context(Endpoint::kMessages), 3);
  ParsedDelta think, text, call;
  think.reasoning = "hm";
  text.content = "ok";
  call.calls = {kCall};
  const std::string events = Stream(*writer, {think, text, text, call});
  EXPECT_EQ(EventNames(events),
            (std::vector<std::string>{
                "message_start", "content_block_start", "content_block_delta", "content_block_stop",
                "content_block_start", "content_block_delta", "content_block_delta",
                "content_block_stop", "content_block_start", "content_block_delta",
                "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_THAT(events, HasSubstr(R"("stop_reason":"tool_use")"));
  EXPECT_THAT(events, HasSubstr(R"("partial_json":"{\"a\":1}")"));
  EXPECT_THAT(events, HasSubstr(R"("input_tokens":3)"));
  EXPECT_THAT(events, HasSubstr(R"("index":2)"));
}

TEST(ResponsesWriter, NumbersEventsAndItems) {
  std::unique_ptr<ApiWriter> writer = MakeResponsesWriter(Context(Endpoint::kResponses), {});
  ParsedDelta text, call;
  text.content = "ok";
  call.calls = {kCall};
  const std::string events = Stream(*writer, {text, call});
  const std::vector<std::string> names = EventNames(events);
  EXPECT_EQ(names.front(), "response.created");
  EXPECT_EQ(names.back(), "response.completed");
  for (size_t index = 0; index < names.size(); ++index) {
    EXPECT_THAT(events, HasSubstr("\"sequence_number\":" + std::to_string(index)));
  }
  EXPECT_THAT(events, HasSubstr(R"("type":"response.function_call_arguments.done")"));
  EXPECT_THAT(events, HasSubstr(R"("output_index":1)"));
}

TEST(OpenAiWriter, ToolCallChunksAndFinishReason) {
  ResponseContext context = Context(Endpoint::kChatCompletions);
  std::unique_ptr<ApiWriter> writer = MakeOpenAiWriter(context, 1, false);
  ParsedDelta call;
  call.calls = {kCall};
  ChoiceResult choice;
  choice.tool_calls = {kCall};
  const std::string events = writer->StreamDelta(choice, call, engine::RequestOutput());
  EXPECT_THAT(events, HasSubstr(R"("tool_calls":[{"index":0,"id":"call_x","type":"function",)"
                                R"("function":{"name":"f","arguments":""}}])"));
  EXPECT_THAT(events,
              HasSubstr(R"("tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}])"));
  choice.finish_reason = engine::FinishReason::kStop;
  EXPECT_THAT(writer->StreamFinish(choice), HasSubstr(R"("finish_reason":"tool_calls")"));
  const Json response = writer->Response({choice}, {});
  EXPECT_TRUE(response["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(response["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "tool_calls");
  // A cancelled choice keeps its reason even with calls.
  EXPECT_EQ(ChatFinishReason(engine::FinishReason::kCancelled, true), "abort");
}

TEST(ResponsesWriter, AMessageCutByMaxOutputTokensIsIncomplete) {
  ResponseContext context = Context(Endpoint::kResponses);
  ChoiceResult choice;
  choice.text = "Once upon";
  choice.finish_reason = engine::FinishReason::kLength;
  const Json response = MakeResponsesWriter(context, Json::object())->Response({choice}, {});
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["output"][0]["status"], "incomplete");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "Once upon");

  std::unique_ptr<ApiWriter> writer = MakeResponsesWriter(context, Json::object());
  ParsedDelta delta;
  delta.content = "Once upon";
  std::string events = writer->StreamStart();
  events += writer->StreamDelta(choice, delta, engine::RequestOutput());
  events += writer->StreamFinish(choice);
  // Only the message item can say so: StreamEnd, which writes the response's status, has not run.
  EXPECT_THAT(events, HasSubstr(R"("status":"incomplete")"));
}

TEST(Errors, AnthropicShape) {
  ApiError error = ErrorFromStatus(absl::ResourceExhaustedError("busy"));
  EXPECT_EQ(Json::parse(AnthropicErrorBody(error)),
            Json::parse(R"({"type": "error", "error": {"type": "rate_limit_error",
                                                        "message": "busy"}})"));
  error = ErrorFromStatus(absl::NotFoundError("no"));
  EXPECT_EQ(Json::parse(AnthropicErrorBody(error))["error"]["type"], "not_found_error");
}

}  // namespace
}  // namespace llmrt::server
