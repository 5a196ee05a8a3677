#include "runtime/server/responses.h"

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace llmrt::server {
namespace {

constexpr auto Invalid = FieldError;

std::string ItemId(const char* prefix) {
  thread_local std::mt19937_64 random(std::random_device{}());
  return absl::StrFormat("%s_%016x%08x", prefix, random(), static_cast<uint32_t>(random()));
}

// A message item's content: a string, or input_text / output_text parts.
absl::StatusOr<std::string> ItemText(const Json& content, const std::string& field) {
  return JoinTextParts(content, field, {"input_text", "output_text"},
                       "an input_text or output_text part (this server runs text-only models)");
}

// `input` items -> OpenAI-shaped chat messages appended to `messages`.
absl::Status ConvertInput(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return absl::OkStatus();
  }
  if (!input.is_array() || input.empty()) {
    return Invalid("input", "a string or a non-empty array of items", input);
  }
  for (size_t index = 0; index < input.size(); ++index) {
    const Json& item = input[index];
    const std::string field = absl::StrFormat("input[%d]", index);
    if (!item.is_object()) return Invalid(field, "an object", item);
    const bool typed = item.contains("type") && !item["type"].is_null();
    const std::string type =
        typed ? StringOrEmpty(item, "type") : (item.contains("role") ? "message" : "");
    if (type == "message") {
      std::string role = StringOrEmpty(item, "role");
      if (role == "developer") role = "system";  // the Responses API's name for it
      if (role != "user" && role != "assistant" && role != "system") {
        return Invalid(field + ".role", "\"user\", \"assistant\", \"system\" or \"developer\"",
                       item.value("role", Json(nullptr)));
      }
      LLMRT_ASSIGN_OR_RETURN(std::string text,
                             ItemText(item.value("content", Json(nullptr)), field + ".content"));
      messages.push_back({{"role", role}, {"content", text}});
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        if (!item.contains(key) || !item[key].is_string()) {
          return Invalid(field + "." + key, "a string", item.value(key, Json(nullptr)));
        }
      }
      Json arguments = Json::parse(item["arguments"].get<std::string>(), nullptr, false);
      if (!arguments.is_object()) {
        return Invalid(field + ".arguments", "a JSON object as a string", item["arguments"]);
      }
      Json call = {{"id", item["call_id"]},
                   {"type", "function"},
                   {"function", {{"name", item["name"]}, {"arguments", std::move(arguments)}}}};
      // Calls of one turn follow each other; they join the assistant message before them. A
      // turn of calls only has content "", as the chat path gives a null one (ReadMessages says
      // why).
      if (messages.empty() || messages.back()["role"] != "assistant") {
        messages.push_back({{"role", "assistant"}, {"content", ""}});
      }
      Json& turn = messages.back();
      if (!turn.contains("tool_calls")) turn["tool_calls"] = Json::array();
      turn["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      if (!item.contains("call_id") || !item["call_id"].is_string()) {
        return Invalid(field + ".call_id", "a string", item.value("call_id", Json(nullptr)));
      }
      LLMRT_ASSIGN_OR_RETURN(std::string output,
                             ItemText(item.value("output", Json(nullptr)), field + ".output"));
      messages.push_back(
          {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", output}});
    } else {
      return Invalid(field + ".type", "\"message\", \"function_call\" or \"function_call_output\"",
                     item.value("type", Json(nullptr)));
    }
  }
  return absl::OkStatus();
}

Json FunctionCallItem(const ToolCall& call, const std::string& id, const char* status) {
  return {{"type", "function_call"},     {"id", id},
          {"call_id", call.id},          {"name", call.name},
          {"arguments", call.arguments}, {"status", status}};
}

// `status`: "in_progress" (no content yet), "completed", or "incomplete" (cut by
// max_output_tokens, as OpenAI marks it).
Json MessageItem(const std::string& id, const std::string& text, const std::string& status) {
  Json content = Json::array();
  if (status != "in_progress") {
    content.push_back({{"type", "output_text"},
                       {"text", text},
                       {"annotations", Json::array()},
                       {"logprobs", Json::array()}});
  }
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", std::move(content)}};
}

Json ReasoningItem(const std::string& id, const std::string& text) {
  Json content = Json::array();
  if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", Json::array()},
          {"content", std::move(content)}};
}

class ResponsesWriter : public ApiWriter {
 public:
  ResponsesWriter(const ResponseContext& context, const Json& echo)
      : context_(context), echo_(echo) {}

  Json Response(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    const ChoiceResult& choice = choices.front();
    Json output = Json::array();
    if (!choice.reasoning.empty()) output.push_back(ReasoningItem(ItemId("rs"), choice.reasoning));
    if (!choice.text.empty() || choice.tool_calls.empty()) {
      output.push_back(MessageItem(ItemId("msg"), choice.text, Status(choice)));
    }
    for (const ToolCall& call : choice.tool_calls) {
      output.push_back(FunctionCallItem(call, ItemId("fc"), "completed"));
    }
    return Object(Status(choice), std::move(output), &usage);
  }

  std::string StreamStart() override {
    const Json response = Object("in_progress", Json::array(), nullptr);
    std::string events = Event("response.created", {{"response", response}});
    return events + Event("response.in_progress", {{"response", response}});
  }

  std::string StreamDelta(const ChoiceResult&, const ParsedDelta& delta,
                          const engine::RequestOutput&) override {
    std::string events;
    if (!delta.reasoning.empty()) {
      if (open_ != Open::kReasoning) {
        events += Close();
        open_ = Open::kReasoning;
        open_id_ = ItemId("rs");
        open_text_.clear();
        events += Added(ReasoningItem(open_id_, ""));
      }
      open_text_ += delta.reasoning;
      events += Event("response.reasoning_text.delta", {{"item_id", open_id_},
                                                        {"output_index", output_.size()},
                                                        {"content_index", 0},
                                                        {"delta", delta.reasoning}});
    }
    if (!delta.content.empty()) {
      if (open_ != Open::kMessage) {
        events += Close();
        open_ = Open::kMessage;
        open_id_ = ItemId("msg");
        open_text_.clear();
        events += Added(MessageItem(open_id_, "", "in_progress"));
        events += Event("response.content_part.added", {{"item_id", open_id_},
                                                        {"output_index", output_.size()},
                                                        {"content_index", 0},
                                                        {"part", TextPart("")}});
      }
      open_text_ += delta.content;
      events += Event("response.output_text.delta", {{"item_id", open_id_},
                                                     {"output_index", output_.size()},
                                                     {"content_index", 0},
                                                     {"delta", delta.content},
                                                     {"logprobs", Json::array()}});
    }
    for (const ToolCall& call : delta.calls) {
      events += Close();
      const std::string id = ItemId("fc");
      ToolCall opened = call;
      opened.arguments.clear();
      events += Added(FunctionCallItem(opened, id, "in_progress"));
      events +=
          Event("response.function_call_arguments.delta",
                {{"item_id", id}, {"output_index", output_.size()}, {"delta", call.arguments}});
      events += Event("response.function_call_arguments.done", {{"item_id", id},
                                                                {"output_index", output_.size()},
                                                                {"name", call.name},
                                                                {"arguments", call.arguments}});
      events += Done(FunctionCallItem(call, id, "completed"));
    }
    return events;
  }

  std::string StreamFinish(const ChoiceResult& choice) override {
    std::string events = Close(Status(choice));
    // A reply with neither text nor calls still has its (empty) message, as non-streamed.
    bool answered = false;
    for (const Json& item : output_) answered = answered || item["type"] != "reasoning";
    if (!answered) {
      const std::string id = ItemId("msg");
      events += Added(MessageItem(id, "", "in_progress"));
      events += Done(MessageItem(id, "", Status(choice)));
    }
    finish_ = choice;
    return events;
  }

  std::string StreamEnd(const std::vector<ChoiceResult>&, const Usage& usage) override {
    const std::string status = Status(finish_);
    const Json response = Object(status, output_, &usage);
    return Event(status == "completed" ? "response.completed" : "response.incomplete",
                 {{"response", response}});
  }

  std::string StreamError(const ApiError& error) override {
    return Event("error", {{"code", error.code.empty() ? Json(error.type) : Json(error.code)},
                           {"message", error.message},
                           {"param", nullptr}});
  }

 private:
  enum class Open { kNone, kReasoning, kMessage };

  static Json TextPart(const std::string& text) {
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", Json::array()},
            {"logprobs", Json::array()}};
  }
  static std::string Status(const ChoiceResult& choice) {
    return choice.finish_reason == engine::FinishReason::kLength ? "incomplete" : "completed";
  }

  Json Object(const std::string& status, Json output, const Usage* usage) const {
    Json response = {
        {"id", context_.id},
        {"object", "response"},
        {"created_at", context_.created},
        {"status", status},
        {"error", nullptr},
        {"incomplete_details",
         status == "incomplete" ? Json({{"reason", "max_output_tokens"}}) : Json(nullptr)},
        {"model", context_.model},
        {"output", std::move(output)},
        {"parallel_tool_calls", true},
        {"store", false},
        {"metadata", Json::object()},
        {"text", {{"format", {{"type", "text"}}}}}};
    for (auto it = echo_.begin(); it != echo_.end(); ++it) response[it.key()] = it.value();
    if (usage != nullptr) {
      response["usage"] = {
          {"input_tokens", usage->prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", usage->cached_prompt_tokens}}},
          {"output_tokens", usage->completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
    } else {
      response["usage"] = nullptr;
    }
    return response;
  }

  std::string Event(const char* type, Json data) {
    Json event = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto it = data.begin(); it != data.end(); ++it) event[it.key()] = std::move(it.value());
    return absl::StrFormat("event: %s\ndata: %s\n\n", type, DumpJson(event));
  }
  std::string Added(const Json& item) {
    return Event("response.output_item.added", {{"output_index", output_.size()}, {"item", item}});
  }
  std::string Done(Json item) {
    std::string event =
        Event("response.output_item.done", {{"output_index", output_.size()}, {"item", item}});
    output_.push_back(std::move(item));
    return event;
  }
  // Ends the open reasoning or message item; `message_status` is the message's.
  std::string Close(const std::string& message_status = "completed") {
    std::string events;
    if (open_ == Open::kReasoning) {
      events += Event("response.reasoning_text.done", {{"item_id", open_id_},
                                                       {"output_index", output_.size()},
                                                       {"content_index", 0},
                                                       {"text", open_text_}});
      events += Done(ReasoningItem(open_id_, open_text_));
    } else if (open_ == Open::kMessage) {
      events += Event("response.output_text.done", {{"item_id", open_id_},
                                                    {"output_index", output_.size()},
                                                    {"content_index", 0},
                                                    {"text", open_text_},
                                                    {"logprobs", Json::array()}});
      events += Event("response.content_part.done", {{"item_id", open_id_},
                                                     {"output_index", output_.size()},
                                                     {"content_index", 0},
                                                     {"part", TextPart(open_text_)}});
      events += Done(MessageItem(open_id_, open_text_, message_status));
    }
    open_ = Open::kNone;
    return events;
  }

  ResponseContext context_;
  Json echo_;
  int64_t sequence_ = 0;
  Json output_ = Json::array();  // finished items
  Open open_ = Open::kNone;
  std::string open_id_, open_text_;
  ChoiceResult finish_;
};

}  // namespace

absl::StatusOr<ParsedRequest> ParseResponsesRequest(std::string_view body,
                                                    const RequestLimits& limits) {
  LLMRT_ASSIGN_OR_RETURN(const Json object, ParseBody(body));
  LLMRT_RETURN_IF_ERROR(CheckKnownFields(
      object, {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls"},
      {"max_output_tokens", "temperature", "top_p", "stream", "store", "previous_response_id",
       "text", "reasoning"},
      "Responses"));
  LLMRT_ASSIGN_OR_RETURN(const bool store, OptionalBool(object, "store", "store"));
  if (store) {
    return absl::InvalidArgumentError(
        "'store' must be false or left out: this server is stateless and keeps no responses");
  }
  if (object.contains("previous_response_id") && !object["previous_response_id"].is_null()) {
    return absl::InvalidArgumentError(
        "'previous_response_id' is not supported: this server is stateless and keeps no "
        "responses; send the whole conversation as 'input' items");
  }
  // text.format is the chat API's response_format in the Responses layout: json_schema's
  // name, schema and strict sit beside "type" instead of under "json_schema".
  Json response_format;
  if (object.contains("text") && !object["text"].is_null()) {
    const Json& text = object["text"];
    if (!text.is_object() || text.size() != 1 || !text.contains("format") ||
        !text["format"].is_object()) {
      return Invalid("text", "{\"format\": {\"type\": ...}}", text);
    }
    const Json& format = text["format"];
    if (format.value("type", Json()) == "json_schema") {
      Json spec = format;
      spec.erase("type");
      response_format = {{"type", "json_schema"}, {"json_schema", std::move(spec)}};
    } else {
      response_format = format;
    }
  }
  Json chat = Json::object();
  Json echo = Json::object();
  if (object.contains("model")) chat["model"] = object["model"];
  Json messages = Json::array();
  if (object.contains("instructions") && !object["instructions"].is_null()) {
    if (!object["instructions"].is_string()) {
      return Invalid("instructions", "a string", object["instructions"]);
    }
    messages.push_back({{"role", "system"}, {"content", object["instructions"]}});
    echo["instructions"] = object["instructions"];
  } else {
    echo["instructions"] = nullptr;
  }
  if (!object.contains("input")) return absl::InvalidArgumentError("'input' is required");
  LLMRT_RETURN_IF_ERROR(ConvertInput(object["input"], messages));
  chat["messages"] = std::move(messages);

  echo["tools"] = Json::array();
  if (object.contains("tools") && !object["tools"].is_null()) {
    const Json& tools = object["tools"];
    if (!tools.is_array()) return Invalid("tools", "an array", tools);
    Json converted = Json::array();
    for (size_t index = 0; index < tools.size(); ++index) {
      const Json& tool = tools[index];
      const std::string field = absl::StrFormat("tools[%d]", index);
      if (!tool.is_object() || StringOrEmpty(tool, "type") != "function" ||
          !tool.contains("name") || !tool["name"].is_string()) {
        return Invalid(field, "a function tool {\"type\": \"function\", \"name\", \"parameters\"}",
                       tool);
      }
      Json function = {{"name", tool["name"]}};
      if (tool.contains("description")) function["description"] = tool["description"];
      if (tool.contains("parameters")) function["parameters"] = tool["parameters"];
      // Enforced only with a forcing tool_choice (ReadToolChoice says why).
      if (tool.contains("strict")) function["strict"] = tool["strict"];
      converted.push_back({{"type", "function"}, {"function", std::move(function)}});
    }
    chat["tools"] = std::move(converted);
    echo["tools"] = tools;
  }
  for (const char* copied :
       {"tool_choice", "parallel_tool_calls", "temperature", "top_p", "stream"}) {
    if (object.contains(copied)) chat[copied] = object[copied];
  }
  // A named function is {"type": "function", "name"} here, nested under "function" in chat.
  if (const auto choice = object.find("tool_choice");
      choice != object.end() && choice->is_object() &&
      choice->value("type", Json()) == "function" && choice->contains("name")) {
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*choice)["name"]}}}};
  }
  if (!response_format.is_null()) chat["response_format"] = response_format;
  if (object.contains("max_output_tokens") && !object["max_output_tokens"].is_null()) {
    chat["max_tokens"] = object["max_output_tokens"];
  }
  if (object.contains("reasoning") && !object["reasoning"].is_null()) {
    const Json& reasoning = object["reasoning"];
    if (!reasoning.is_object() || reasoning.size() != 1 || !reasoning.contains("effort")) {
      return Invalid("reasoning",
                     "{\"effort\": \"low\" | \"medium\" | \"high\"} (summaries are "
                     "not supported)",
                     reasoning);
    }
    chat["reasoning_effort"] = reasoning["effort"];
  }
  absl::StatusOr<ParsedRequest> request =
      ParseRequestJson(Endpoint::kChatCompletions, chat, limits);
  // The chat path names its own fields; say the Responses names instead.
  if (!request.ok()) {
    return RenameFields(request.status(), {{"'max_tokens'", "'max_output_tokens'"},
                                           {"'reasoning_effort'", "'reasoning.effort'"},
                                           {"'response_format.json_schema.", "'text.format."},
                                           {"'response_format", "'text.format"},
                                           {".function.strict'", ".strict'"}});
  }
  request->endpoint = Endpoint::kResponses;
  echo["tool_choice"] = request->tool_choice_function.empty()
                            ? Json(request->tool_choice)
                            : Json({{"type", "function"}, {"name", request->tool_choice_function}});
  echo["parallel_tool_calls"] = request->parallel_tool_calls;
  if (!response_format.is_null()) echo["text"] = object["text"];
  echo["temperature"] = object.value("temperature", Json(1.0));
  echo["top_p"] = object.value("top_p", Json(1.0));
  echo["max_output_tokens"] = object.value("max_output_tokens", Json(nullptr));
  request->api_echo = std::move(echo);
  return request;
}

std::unique_ptr<ApiWriter> MakeResponsesWriter(const ResponseContext& context, const Json& echo) {
  return std::make_unique<ResponsesWriter>(context, echo);
}

}  // namespace llmrt::server
