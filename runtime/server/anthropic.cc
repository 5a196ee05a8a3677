#include "runtime/server/anthropic.h"

#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace llmrt::server {
namespace {

constexpr auto Invalid = FieldError;

// Text of a string or of an array of text blocks; other block types are refused by name.
absl::StatusOr<std::string> TextOf(const Json& content, const std::string& field) {
  return JoinTextParts(content, field, {"text"},
                       "a text block {\"type\": \"text\", \"text\": ...} (this server runs "
                       "text-only models)");
}

// One Anthropic message -> OpenAI-shaped messages appended to `out`.
absl::Status ConvertMessage(const Json& message, size_t index, Json& out) {
  const std::string field = absl::StrFormat("messages[%d]", index);
  if (!message.is_object()) return Invalid(field, "an object", message);
  const std::string role = StringOrEmpty(message, "role");
  if (role != "user" && role != "assistant") {
    return Invalid(field + ".role", "\"user\" or \"assistant\"",
                   message.contains("role") ? message["role"] : Json(nullptr));
  }
  if (!message.contains("content")) {
    return absl::InvalidArgumentError(absl::StrFormat("'%s.content' is required", field));
  }
  const Json& content = message["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return absl::OkStatus();
  }
  if (!content.is_array()) return Invalid(field + ".content", "a string or an array", content);
  std::string text, thinking;
  Json tool_calls = Json::array();
  for (size_t block_index = 0; block_index < content.size(); ++block_index) {
    const Json& block = content[block_index];
    const std::string where = absl::StrFormat("%s.content[%d]", field, block_index);
    const std::string type = block.is_object() ? StringOrEmpty(block, "type") : "";
    if (type == "text" && block.contains("text") && block["text"].is_string()) {
      if (!text.empty()) text += "\n";
      text += block["text"].get<std::string>();
    } else if (type == "tool_use" && role == "assistant") {
      if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") ||
          !block["name"].is_string() || (block.contains("input") && !block["input"].is_object())) {
        return Invalid(where, "{\"type\": \"tool_use\", \"id\", \"name\", \"input\": {...}}",
                       block);
      }
      tool_calls.push_back(
          {{"id", block["id"]},
           {"type", "function"},
           {"function",
            {{"name", block["name"]}, {"arguments", block.value("input", Json::object())}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string()) {
        return Invalid(where + ".tool_use_id", "a string",
                       block.value("tool_use_id", Json(nullptr)));
      }
      std::string result;
      if (block.contains("content") && !block["content"].is_null()) {
        LLMRT_ASSIGN_OR_RETURN(result, TextOf(block["content"], where + ".content"));
      }
      // Templates have no error flag for tool results; the model reads it in the text.
      LLMRT_ASSIGN_OR_RETURN(const bool is_error,
                             OptionalBool(block, "is_error", where + ".is_error"));
      if (is_error) result = "Error: " + result;
      // Results answer the previous assistant turn, so they go before this turn's text.
      out.push_back(
          {{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", result}});
    } else if (type == "thinking" && role == "assistant" && block.contains("thinking") &&
               block["thinking"].is_string()) {
      thinking += block["thinking"].get<std::string>();
    } else {
      return Invalid(
          where,
          role == "user" ? "a text or tool_result block" : "a text, thinking or tool_use block",
          block);
    }
  }
  if (role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") {
    return absl::OkStatus();  // a turn of tool results only
  }
  // A turn of tool_use blocks only keeps content "", not null (why: responses.cc, function
  // calls).
  Json converted = {{"role", role}, {"content", text}};
  if (!tool_calls.empty()) converted["tool_calls"] = std::move(tool_calls);
  if (!thinking.empty()) converted["reasoning_content"] = thinking;
  out.push_back(std::move(converted));
  return absl::OkStatus();
}

const char* AnthropicErrorType(int http_status) {
  switch (http_status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return "api_error";
  }
}

const char* StopReason(const ChoiceResult& choice) {
  if (!choice.tool_calls.empty() && (choice.finish_reason == engine::FinishReason::kStop ||
                                     choice.finish_reason == engine::FinishReason::kLength)) {
    return "tool_use";
  }
  if (choice.finish_reason == engine::FinishReason::kLength) return "max_tokens";
  if (!choice.stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

Json StopSequence(const ChoiceResult& choice) {
  return std::string(StopReason(choice)) == "stop_sequence" ? Json(choice.stop_string)
                                                            : Json(nullptr);
}

Json ToolUseBlock(const ToolCall& call) {
  return {{"type", "tool_use"},
          {"id", call.id},
          {"name", call.name},
          {"input", Json::parse(call.arguments, nullptr, false)}};
}

std::string Event(const char* name, const Json& data) {
  return absl::StrFormat("event: %s\ndata: %s\n\n", name, DumpJson(data));
}

class MessagesWriter : public ApiWriter {
 public:
  MessagesWriter(const ResponseContext& context, int64_t prompt_tokens)
      : context_(context), prompt_tokens_(prompt_tokens) {}

  Json Response(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    const ChoiceResult& choice = choices.front();
    Json content = Json::array();
    if (!choice.reasoning.empty()) {
      content.push_back({{"type", "thinking"}, {"thinking", choice.reasoning}, {"signature", ""}});
    }
    if (!choice.text.empty()) content.push_back({{"type", "text"}, {"text", choice.text}});
    for (const ToolCall& call : choice.tool_calls) content.push_back(ToolUseBlock(call));
    Json message = Message(content, StopReason(choice), StopSequence(choice));
    message["usage"] = {{"input_tokens", usage.prompt_tokens},
                        {"output_tokens", usage.completion_tokens}};
    return message;
  }

  std::string StreamStart() override {
    Json message = Message(Json::array(), nullptr, nullptr);
    message["usage"] = {{"input_tokens", prompt_tokens_}, {"output_tokens", 0}};
    return Event("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
  }

  std::string StreamDelta(const ChoiceResult&, const ParsedDelta& delta,
                          const engine::RequestOutput&) override {
    std::string events;
    if (!delta.reasoning.empty()) {
      events += Open("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
      events += Delta({{"type", "thinking_delta"}, {"thinking", delta.reasoning}});
    }
    if (!delta.content.empty()) {
      events += Open("text", {{"type", "text"}, {"text", ""}});
      events += Delta({{"type", "text_delta"}, {"text", delta.content}});
    }
    for (const ToolCall& call : delta.calls) {
      events += Close();
      Json block = ToolUseBlock(call);
      block["input"] = Json::object();  // filled by the input_json_delta, as Anthropic streams
      events += Open("tool_use", std::move(block));
      events += Delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}});
      events += Close();
    }
    return events;
  }

  std::string StreamFinish(const ChoiceResult& choice) override {
    stop_reason_ = StopReason(choice);
    stop_sequence_ = StopSequence(choice);
    return Close();
  }

  std::string StreamEnd(const std::vector<ChoiceResult>&, const Usage& usage) override {
    return Event("message_delta",
                 {{"type", "message_delta"},
                  {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                  {"usage", {{"output_tokens", usage.completion_tokens}}}}) +
           Event("message_stop", {{"type", "message_stop"}});
  }

  std::string StreamError(const ApiError& error) override {
    return Event("error", Json::parse(AnthropicErrorBody(error)));
  }

 private:
  Json Message(Json content, Json stop_reason, Json stop_sequence) const {
    return {{"id", context_.id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", context_.model},
            {"content", std::move(content)},
            {"stop_reason", std::move(stop_reason)},
            {"stop_sequence", std::move(stop_sequence)}};
  }
  // Starts a block of `type` unless one is open already (closing another kind first).
  std::string Open(const std::string& type, Json block) {
    if (open_type_ == type && type != "tool_use") return "";
    std::string events = Close();
    open_type_ = type;
    return events + Event("content_block_start", {{"type", "content_block_start"},
                                                  {"index", block_index_},
                                                  {"content_block", std::move(block)}});
  }
  std::string Delta(Json delta) {
    return Event(
        "content_block_delta",
        {{"type", "content_block_delta"}, {"index", block_index_}, {"delta", std::move(delta)}});
  }
  std::string Close() {
    if (open_type_.empty()) return "";
    open_type_.clear();
    return Event("content_block_stop", {{"type", "content_block_stop"}, {"index", block_index_++}});
  }

  ResponseContext context_;
  int64_t prompt_tokens_;
  std::string open_type_;  // "" when no block is open
  int32_t block_index_ = 0;
  Json stop_reason_ = "end_turn";
  Json stop_sequence_ = nullptr;
};

}  // namespace

absl::StatusOr<ParsedRequest> ParseMessagesRequest(std::string_view body,
                                                   const RequestLimits& limits, bool count_tokens) {
  LLMRT_ASSIGN_OR_RETURN(const Json object, ParseBody(body));
  static const std::vector<std::string_view> kCountFields = {"model", "messages", "system", "tools",
                                                             "tool_choice"};
  if (count_tokens) {
    LLMRT_RETURN_IF_ERROR(CheckKnownFields(object, kCountFields, {}, "Messages count_tokens"));
  } else {
    LLMRT_RETURN_IF_ERROR(CheckKnownFields(
        object, kCountFields,
        {"max_tokens", "stop_sequences", "stream", "temperature", "top_p", "top_k"}, "Messages"));
  }
  Json chat = Json::object();
  if (object.contains("model")) chat["model"] = object["model"];
  Json messages = Json::array();
  if (object.contains("system") && !object["system"].is_null()) {
    LLMRT_ASSIGN_OR_RETURN(std::string system, TextOf(object["system"], "system"));
    messages.push_back({{"role", "system"}, {"content", system}});
  }
  if (!object.contains("messages") || !object["messages"].is_array() ||
      object["messages"].empty()) {
    return Invalid("messages", "a non-empty array of messages",
                   object.value("messages", Json(nullptr)));
  }
  for (size_t index = 0; index < object["messages"].size(); ++index) {
    LLMRT_RETURN_IF_ERROR(ConvertMessage(object["messages"][index], index, messages));
  }
  // A final assistant message is a prefill: "the response continues immediately from that
  // content" (Anthropic's Messages reference), transformers' continue_final_message.
  if (messages.back()["role"] == "assistant" &&
      !StringOrEmpty(messages.back(), "content").empty()) {
    chat["add_generation_prompt"] = false;
    chat["continue_final_message"] = true;
  }
  chat["messages"] = std::move(messages);

  if (!count_tokens) {
    const Json max_tokens = object.value("max_tokens", Json(nullptr));
    if (max_tokens.is_null()) return absl::InvalidArgumentError("'max_tokens' is required");
    chat["max_tokens"] = max_tokens;
  }
  if (object.contains("stop_sequences") && !object["stop_sequences"].is_null()) {
    if (!object["stop_sequences"].is_array()) {
      return Invalid("stop_sequences", "an array of strings", object["stop_sequences"]);
    }
    chat["stop"] = object["stop_sequences"];
  }
  // Anthropic's temperature range is [0, 1].
  if (object.contains("temperature") && object["temperature"].is_number()) {
    const double temperature = object["temperature"].get<double>();
    if (!(temperature >= 0.0 && temperature <= 1.0)) {
      return Invalid("temperature", "a number in [0, 1]", object["temperature"]);
    }
  }
  for (const char* copied : {"stream", "temperature", "top_p", "top_k"}) {
    if (object.contains(copied)) chat[copied] = object[copied];
  }

  if (object.contains("tools") && !object["tools"].is_null()) {
    const Json& tools = object["tools"];
    if (!tools.is_array()) return Invalid("tools", "an array", tools);
    Json converted = Json::array();
    for (size_t index = 0; index < tools.size(); ++index) {
      const Json& tool = tools[index];
      // Anthropic's server tools (web_search, bash, ...) carry a "type"; custom tools do not,
      // or say "custom".
      if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string() ||
          !tool.contains("input_schema") || !tool["input_schema"].is_object() ||
          (tool.contains("type") && tool["type"] != "custom")) {
        return Invalid(absl::StrFormat("tools[%d]", index),
                       "a custom tool {\"name\", \"description\", \"input_schema\": {...}}", tool);
      }
      Json function = {{"name", tool["name"]}, {"parameters", tool["input_schema"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      converted.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(converted);
  }
  if (object.contains("tool_choice") && !object["tool_choice"].is_null()) {
    const Json& choice = object["tool_choice"];
    const std::string type = choice.is_object() ? StringOrEmpty(choice, "type") : "";
    if (type != "auto" && type != "none" && type != "any" && type != "tool") {
      return Invalid("tool_choice", "{\"type\": \"auto\" | \"none\" | \"any\" | \"tool\"}", choice);
    }
    // any: some call (OpenAI's "required"); tool: this one (a named function). Both are
    // enforced by constrained decoding (tool_grammar.h).
    if (type == "tool") {
      if (!choice.contains("name") || !choice["name"].is_string()) {
        return Invalid("tool_choice.name", "the name of one of the tools",
                       choice.value("name", Json()));
      }
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
    } else {
      chat["tool_choice"] = type == "any" ? "required" : type;
    }
    if (choice.contains("disable_parallel_tool_use") &&
        !choice["disable_parallel_tool_use"].is_null()) {
      if (!choice["disable_parallel_tool_use"].is_boolean()) {
        return Invalid("tool_choice.disable_parallel_tool_use", "a boolean",
                       choice["disable_parallel_tool_use"]);
      }
      if (choice["disable_parallel_tool_use"].get<bool>()) {
        if (type == "auto") {
          // With auto the model writes text or calls; at most one call cannot be enforced
          // without constraining the text too (see ReadToolChoice).
          return absl::InvalidArgumentError(
              "'tool_choice.disable_parallel_tool_use' is enforced only with {\"type\": \"any\"} "
              "or {\"type\": \"tool\"} (exactly one call); with \"auto\" leave it out");
        }
        chat["parallel_tool_calls"] = false;
      }
    }
  }
  absl::StatusOr<ParsedRequest> request =
      ParseRequestJson(Endpoint::kChatCompletions, chat, limits);
  // The chat path names its own fields; say the Messages names instead.
  if (!request.ok()) return RenameFields(request.status(), {{"'stop'", "'stop_sequences'"}});
  request->endpoint = Endpoint::kMessages;
  return request;
}

std::string AnthropicErrorBody(const ApiError& error) {
  return DumpJson(
      {{"type", "error"},
       {"error", {{"type", AnthropicErrorType(error.http_status)}, {"message", error.message}}}});
}

std::unique_ptr<ApiWriter> MakeMessagesWriter(const ResponseContext& context,
                                              int64_t prompt_tokens) {
  return std::make_unique<MessagesWriter>(context, prompt_tokens);
}

}  // namespace llmrt::server
