#include "runtime/server/protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"
#include "runtime/server/structured_output.h"

namespace llmrt::server {
namespace {

// ---- Field readers: null counts as absent, as in the OpenAI API. ----

const Json* Field(const Json& object, const char* name) {
  auto found = object.find(name);
  if (found == object.end() || found->is_null()) return nullptr;
  return &*found;
}

absl::Status TypeError(const char* name, const char* expected, const Json& found) {
  return absl::InvalidArgumentError(absl::StrFormat("'%s' must be %s, found %s %s", name, expected,
                                                    found.type_name(), found.dump()));
}

absl::Status ReadBool(const Json& object, const char* name, bool& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_boolean()) return TypeError(name, "a boolean", *value);
  out = value->get<bool>();
  return absl::OkStatus();
}

// An integer in [low, high]. JSON numbers like 3.0 are refused, as OpenAI refuses them.
absl::Status ReadInt(const Json& object, const char* name, int64_t low, int64_t high,
                     std::optional<int64_t>& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_number_integer()) return TypeError(name, "an integer", *value);
  if (value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(high)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be in [%d, %d], found %s", name, low, high, value->dump()));
  }
  const int64_t number = value->get<int64_t>();
  if (number < low || number > high) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be in [%d, %d], found %d", name, low, high, number));
  }
  out = number;
  return absl::OkStatus();
}

absl::Status ReadNumber(const Json& object, const char* name, double low, double high,
                        std::optional<double>& out) {
  const Json* value = Field(object, name);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_number()) return TypeError(name, "a number", *value);
  const double number = value->get<double>();
  if (!(number >= low && number <= high)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be in [%g, %g], found %g", name, low, high, number));
  }
  out = number;
  return absl::OkStatus();
}

absl::Status ReadTokenId(const Json& value, const std::string& where, int32_t& out) {
  if (!value.is_number_integer()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be a token id (an integer), found %s %s", where,
                        value.type_name(), value.dump()));
  }
  const int64_t id = value.get<int64_t>();
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'%s' must be a token id >= 0, found %d", where, id));
  }
  out = static_cast<int32_t>(id);
  return absl::OkStatus();
}

absl::Status ReadTokenIds(const Json& array, const std::string& where, std::vector<int32_t>& out) {
  out.clear();
  out.reserve(array.size());
  for (size_t index = 0; index < array.size(); ++index) {
    int32_t id = 0;
    if (absl::Status status =
            ReadTokenId(array[index], absl::StrFormat("%s[%d]", where, index), id);
        !status.ok()) {
      return status;
    }
    out.push_back(id);
  }
  return absl::OkStatus();
}

absl::Status ReadPrompts(const Json& object, const RequestLimits& limits,
                         std::vector<Prompt>& prompts) {
  const Json* value = Field(object, "prompt");
  if (value == nullptr) return absl::InvalidArgumentError("'prompt' is required");
  if (value->is_string()) {
    prompts.push_back({false, value->get<std::string>(), {}});
    return absl::OkStatus();
  }
  if (!value->is_array() || value->empty()) {
    return TypeError("prompt",
                     "a string, a non-empty array of strings, of token ids, or of token-id arrays",
                     *value);
  }
  const Json& first = value->front();
  if (first.is_number_integer()) {  // one prompt as token ids
    Prompt prompt;
    prompt.is_ids = true;
    if (absl::Status status = ReadTokenIds(*value, "prompt", prompt.ids); !status.ok()) {
      return status;
    }
    prompts.push_back(std::move(prompt));
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(value->size()) > limits.max_prompts) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'prompt' holds %d prompts; at most %d are allowed", value->size(), limits.max_prompts));
  }
  for (size_t index = 0; index < value->size(); ++index) {
    const Json& item = (*value)[index];
    Prompt prompt;
    if (item.is_string()) {
      prompt.text = item.get<std::string>();
    } else if (item.is_array() && !item.empty()) {
      prompt.is_ids = true;
      if (absl::Status status =
              ReadTokenIds(item, absl::StrFormat("prompt[%d]", index), prompt.ids);
          !status.ok()) {
        return status;
      }
    } else {
      return TypeError(absl::StrFormat("prompt[%d]", index).c_str(),
                       "a string or a non-empty array of token ids", item);
    }
    prompts.push_back(std::move(prompt));
  }
  return absl::OkStatus();
}

// Chat messages: an array of objects with a string role. Content given as a list of text parts
// is joined into one string (vLLM does the same for templates that expect strings); other
// part types (images, audio) are refused, this server runs text-only models.
absl::Status ReadMessages(const Json& object, Json& messages) {
  const Json* value = Field(object, "messages");
  if (value == nullptr) return absl::InvalidArgumentError("'messages' is required");
  if (!value->is_array() || value->empty()) {
    return TypeError("messages", "a non-empty array of message objects", *value);
  }
  messages = Json::array();
  for (size_t index = 0; index < value->size(); ++index) {
    Json message = (*value)[index];
    if (!message.is_object()) {
      return TypeError(absl::StrFormat("messages[%d]", index).c_str(), "an object", message);
    }
    auto role = message.find("role");
    if (role == message.end() || !role->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'messages[%d].role' must be a string", index));
    }
    auto content = message.find("content");
    if (content != message.end() && content->is_array()) {
      std::string text;
      for (size_t part_index = 0; part_index < content->size(); ++part_index) {
        const Json& part = (*content)[part_index];
        auto type = part.find("type");
        auto part_text = part.find("text");
        if (!part.is_object() || type == part.end() || *type != "text" || part_text == part.end() ||
            !part_text->is_string()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "'messages[%d].content[%d]' must be {\"type\": \"text\", \"text\": ...}; this "
              "server takes text only, found %s",
              index, part_index, part.dump()));
        }
        if (!text.empty()) text += "\n";
        text += part_text->get<std::string>();
      }
      *content = text;
    } else if (content != message.end() && !content->is_string() && !content->is_null()) {
      return TypeError(absl::StrFormat("messages[%d].content", index).c_str(),
                       "a string or an array of text parts", *content);
    }
    // OpenAI clients send "content": null beside tool calls. transformers drops None keys, and
    // then DeepSeek's templates fail on the missing content and Llama's would print "None" had
    // it stayed; "" renders as every real template means it (as the Messages and Responses
    // converters write a turn of calls).
    if ((content == message.end() || content->is_null()) && message.contains("tool_calls") &&
        !message["tool_calls"].is_null()) {
      message["content"] = "";
    }
    // Templates format the arguments of earlier calls themselves (Llama's `| tojson`, Qwen's
    // mapping check): give them the object, as transformers' and vLLM's callers do, not the
    // JSON string the OpenAI API carries.
    auto calls = message.find("tool_calls");
    if (calls != message.end() && !calls->is_null()) {
      if (!calls->is_array()) {
        return TypeError(absl::StrFormat("messages[%d].tool_calls", index).c_str(), "an array",
                         *calls);
      }
      for (size_t call_index = 0; call_index < calls->size(); ++call_index) {
        Json& call = (*calls)[call_index];
        auto function = call.find("function");
        if (!call.is_object() || function == call.end() || !function->is_object() ||
            !function->contains("name") || !(*function)["name"].is_string()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "'messages[%d].tool_calls[%d]' must be {\"id\", \"type\": \"function\", "
              "\"function\": {\"name\", \"arguments\"}}, found %s",
              index, call_index, call.dump()));
        }
        auto arguments = function->find("arguments");
        if (arguments != function->end() && arguments->is_string()) {
          Json parsed = Json::parse(arguments->get<std::string>(), nullptr, false);
          if (parsed.is_object()) *arguments = std::move(parsed);
        }
      }
    }
    messages.push_back(std::move(message));
  }
  return absl::OkStatus();
}

// Tools: [{"type": "function", "function": {"name", "description"?, "parameters"?,
// "strict"?}}]. An empty array is no tools, as in vLLM (clients send one for "none declared").
absl::Status ReadTools(const Json& object, Json& tools) {
  const Json* value = Field(object, "tools");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_array()) return TypeError("tools", "an array", *value);
  if (value->empty()) return absl::OkStatus();
  for (size_t index = 0; index < value->size(); ++index) {
    const Json& tool = (*value)[index];
    const Json* function = tool.is_object() ? Field(tool, "function") : nullptr;
    const Json* name =
        function != nullptr && function->is_object() ? Field(*function, "name") : nullptr;
    if (!tool.is_object() || tool.value("type", Json()) != "function" || name == nullptr ||
        !name->is_string() || name->get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'tools[%d]' must be {\"type\": \"function\", \"function\": {\"name\": ..., "
          "\"parameters\": {...}}}, found %s",
          index, tool.dump()));
    }
    const Json* parameters = Field(*function, "parameters");
    if (parameters != nullptr && !parameters->is_object()) {
      return TypeError(absl::StrFormat("tools[%d].function.parameters", index).c_str(),
                       "a JSON schema object", *parameters);
    }
    LLMRT_RETURN_IF_ERROR(
        OptionalBool(*function, "strict", absl::StrFormat("tools[%d].function.strict", index))
            .status());
  }
  tools = *value;
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadToolChoice(const Json& object, ParsedRequest& request) {
  const Json* value = Field(object, "tool_choice");
  if (value != nullptr) {
    if (value->is_string() && (*value == "auto" || *value == "none" || *value == "required")) {
      request.tool_choice = value->get<std::string>();
    } else if (value->is_object() && value->value("type", Json()) == "function" &&
               value->contains("function") && (*value)["function"].is_object() &&
               (*value)["function"].contains("name") && (*value)["function"]["name"].is_string()) {
      request.tool_choice = "required";
      request.tool_choice_function = (*value)["function"]["name"].get<std::string>();
    } else {
      return TypeError("tool_choice",
                       "\"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}",
                       *value);
    }
  }
  const Json* parallel = Field(object, "parallel_tool_calls");
  if (parallel != nullptr) {
    if (!parallel->is_boolean()) return TypeError("parallel_tool_calls", "a boolean", *parallel);
    request.parallel_tool_calls = parallel->get<bool>();
  }
  // request.tools is what ReadTools kept: null for none or an empty array.
  if (request.tool_choice != "none" && request.tools.is_null() && request.tool_choice != "auto") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'tool_choice' %s needs 'tools', and the request has none", DumpJson(*value)));
  }
  // With "auto" the model writes free text or calls; a grammar cannot cap the calls without
  // constraining the text too, so at most one call, or a strict schema, is enforced only where
  // a call is forced (a forcing tool_choice enforces every tool's schema: tool_grammar.h).
  if (!request.parallel_tool_calls && request.tool_choice == "auto" && !request.tools.is_null()) {
    return absl::InvalidArgumentError(
        "'parallel_tool_calls' false is enforced only together with a forcing 'tool_choice' "
        "(\"required\" or a named function: exactly one call); with \"auto\" leave it out "
        "or set it to true");
  }
  if (request.tool_choice == "auto" && !request.tools.is_null()) {
    for (size_t index = 0; index < request.tools.size(); ++index) {
      if (request.tools[index]["function"].value("strict", Json(false)) == true) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'tools[%d].function.strict' true is not enforced with free text around the calls "
            "(tool_choice \"auto\"); set it to false, or force the calls with tool_choice "
            "\"required\" or a named function, which enforces every tool's schema",
            index));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status FieldError(const std::string& field, const std::string& expected, const Json& found) {
  return absl::InvalidArgumentError(
      absl::StrFormat("'%s' must be %s, found %s", field, expected, DumpJson(found)));
}

std::string StringOrEmpty(const Json& object, const char* name) {
  const auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

absl::StatusOr<bool> OptionalBool(const Json& object, const char* name, const std::string& field) {
  const Json* value = Field(object, name);
  if (value == nullptr) return false;
  if (!value->is_boolean()) return FieldError(field, "a boolean", *value);
  return value->get<bool>();
}

absl::Status RenameFields(
    const absl::Status& status,
    std::initializer_list<std::pair<std::string_view, std::string_view>> renames) {
  std::string message(status.message());
  for (const auto& [from, to] : renames) {
    const size_t at = message.find(from);
    if (at != std::string::npos) message.replace(at, from.size(), to);
  }
  return absl::Status(status.code(), message);
}

absl::StatusOr<std::string> JoinTextParts(const Json& content, const std::string& field,
                                          std::initializer_list<std::string_view> types,
                                          const std::string& expected_part) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return FieldError(field, "a string or an array of text parts", content);
  std::string text;
  for (size_t index = 0; index < content.size(); ++index) {
    const Json& part = content[index];
    const std::string type = part.is_object() ? StringOrEmpty(part, "type") : "";
    bool known = false;
    for (std::string_view allowed : types) known = known || type == allowed;
    if (!known || !part.contains("text") || !part["text"].is_string()) {
      return FieldError(absl::StrFormat("%s[%d]", field, index), expected_part, part);
    }
    if (!text.empty()) text += "\n";
    text += part["text"].get<std::string>();
  }
  return text;
}

absl::Status CheckKnownFields(const Json& object, const std::vector<std::string_view>& known,
                              std::initializer_list<std::string_view> more, std::string_view api) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (std::string_view name : known) found = found || it.key() == name;
    for (std::string_view name : more) found = found || it.key() == name;
    if (found || it.value().is_null()) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "'%s' is not supported by this server's %s API; leave it out", it.key(), api));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ReadStop(const Json& object, const RequestLimits& limits,
                      std::vector<std::string>& stop) {
  const Json* value = Field(object, "stop");
  if (value == nullptr) return absl::OkStatus();
  std::vector<std::string> strings;
  if (value->is_string()) {
    strings.push_back(value->get<std::string>());
  } else if (value->is_array()) {
    for (const Json& item : *value) {
      if (!item.is_string()) return TypeError("stop", "a string or an array of strings", *value);
      strings.push_back(item.get<std::string>());
    }
  } else {
    return TypeError("stop", "a string or an array of strings", *value);
  }
  if (static_cast<int64_t>(strings.size()) > limits.max_stop) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'stop' holds %d strings; at most %d are allowed", strings.size(), limits.max_stop));
  }
  for (const std::string& string : strings) {
    if (string.empty()) return absl::InvalidArgumentError("'stop' strings must not be empty");
    if (static_cast<int64_t>(string.size()) > limits.max_stop_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'stop' strings must be at most %d bytes, found one of %d",
                          limits.max_stop_bytes, string.size()));
    }
  }
  stop = std::move(strings);
  return absl::OkStatus();
}

absl::Status ReadLogitBias(const Json& object, const RequestLimits& limits,
                           std::vector<std::pair<int32_t, float>>& bias) {
  const Json* value = Field(object, "logit_bias");
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_object()) {
    return TypeError("logit_bias", "an object mapping token ids to numbers", *value);
  }
  if (static_cast<int64_t>(value->size()) > limits.max_logit_bias) {
    return absl::InvalidArgumentError(
        absl::StrFormat("'logit_bias' holds %d entries; at most %d are allowed", value->size(),
                        limits.max_logit_bias));
  }
  for (auto it = value->begin(); it != value->end(); ++it) {
    int32_t id = 0;
    if (!absl::SimpleAtoi(it.key(), &id) || id < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'logit_bias' keys must be token ids (integers >= 0 as strings), found \"%s\"",
          it.key()));
    }
    if (!it.value().is_number()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'logit_bias[\"%s\"]' must be a number, found %s", it.key(), it.value().dump()));
    }
    const double amount = it.value().get<double>();
    if (!(amount >= -sampling::kMaxLogitBias && amount <= sampling::kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'logit_bias[\"%s\"]' must be in [-100, 100], found %g", it.key(), amount));
    }
    bias.emplace_back(id, static_cast<float>(amount));
  }
  return absl::OkStatus();
}

}  // namespace

ApiError ErrorFromStatus(const absl::Status& status) {
  ApiError error;
  error.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition:
      error.http_status = 400;
      error.type = "invalid_request_error";
      break;
    case absl::StatusCode::kUnauthenticated:
      error.http_status = 401;
      error.type = "authentication_error";
      error.code = "invalid_api_key";
      break;
    case absl::StatusCode::kNotFound:
      error.http_status = 404;
      error.type = "invalid_request_error";
      error.code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      error.http_status = 429;
      error.type = "rate_limit_exceeded";
      error.code = "rate_limit_exceeded";
      break;
    case absl::StatusCode::kUnavailable:
      error.http_status = 503;
      error.type = "service_unavailable";
      break;
    default:
      error.http_status = 500;
      error.type = "server_error";
      break;
  }
  return error;
}

std::string ErrorBody(const ApiError& error) {
  Json body = {{"error",
                {{"message", error.message},
                 {"type", error.type},
                 {"param", nullptr},
                 {"code", error.code.empty() ? Json(nullptr) : Json(error.code)}}}};
  return DumpJson(body);
}

std::string SseEvent(std::string_view payload) {
  std::string event;
  event.reserve(payload.size() + 8);
  event += "data: ";
  event += payload;
  event += "\n\n";
  return event;
}

absl::StatusOr<Json> ParseJsonBounded(std::string_view text, std::string_view what) {
  // Copying, dumping and converting JSON recurse once per nesting level: a 16 MiB body of '['
  // (8M levels) overflowed the handler thread's stack and took the server down (found by
  // tests/fuzz/request_body_fuzzer.cc), and `llmrt render` segfaulted at 20k levels. Real
  // requests nest about 10 levels (tool parameter schemas); 64 leaves room. nlohmann's parser
  // itself is iterative; deeper values are dropped as they are read and the text refused.
  constexpr int kMaxJsonDepth = 64;
  bool too_deep = false;
  const Json json = Json::parse(
      text.begin(), text.end(),
      [&too_deep](int depth, Json::parse_event_t, Json&) {
        if (depth <= kMaxJsonDepth) return true;
        too_deep = true;
        return false;
      },
      /*allow_exceptions=*/false);
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s nests JSON deeper than %d levels", what, kMaxJsonDepth));
  }
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is not valid JSON", what));
  }
  return json;
}

absl::StatusOr<Json> ParseBody(std::string_view body) {
  absl::StatusOr<Json> object = ParseJsonBounded(body, "the request body");
  if (!object.ok()) return object.status();
  if (!object->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the request body must be a JSON object, found %s", object->type_name()));
  }
  return object;
}

absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body,
                                           const RequestLimits& limits) {
  LLMRT_ASSIGN_OR_RETURN(const Json object, ParseBody(body));
  return ParseRequestJson(endpoint, object, limits);
}

absl::StatusOr<ParsedRequest> ParseRequestJson(Endpoint endpoint, const Json& object,
                                               const RequestLimits& limits) {
  static const std::vector<std::string_view> kCommon = {"model",
                                                        "stream",
                                                        "stream_options",
                                                        "max_tokens",
                                                        "max_completion_tokens",
                                                        "n",
                                                        "best_of",
                                                        "logprobs",
                                                        "temperature",
                                                        "top_p",
                                                        "top_k",
                                                        "min_p",
                                                        "repetition_penalty",
                                                        "presence_penalty",
                                                        "frequency_penalty",
                                                        "logit_bias",
                                                        "seed",
                                                        "stop",
                                                        "stop_token_ids",
                                                        "ignore_eos",
                                                        "skip_special_tokens",
                                                        "response_format"};
  ParsedRequest request;
  request.endpoint = endpoint;
  // Every field is either implemented or refused: a parameter the client relies on must never
  // be silently dropped.
  if (endpoint == Endpoint::kCompletions) {
    LLMRT_RETURN_IF_ERROR(
        CheckKnownFields(object, kCommon, {"prompt", "echo", "suffix"}, "completions"));
  } else {
    LLMRT_RETURN_IF_ERROR(
        CheckKnownFields(object, kCommon,
                         {"messages", "tools", "tool_choice", "parallel_tool_calls",
                          "add_generation_prompt", "top_logprobs", "chat_template",
                          "chat_template_kwargs", "reasoning_effort", "continue_final_message"},
                         "chat completions"));
  }
  if (const Json* model = Field(object, "model")) {
    if (!model->is_string()) return TypeError("model", "a string", *model);
    request.model = model->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    LLMRT_RETURN_IF_ERROR(ReadPrompts(object, limits, request.prompts));
  } else {
    LLMRT_RETURN_IF_ERROR(ReadMessages(object, request.messages));
    LLMRT_RETURN_IF_ERROR(ReadTools(object, request.tools));
    LLMRT_RETURN_IF_ERROR(ReadToolChoice(object, request));
    LLMRT_RETURN_IF_ERROR(ReadBool(object, "add_generation_prompt", request.add_generation_prompt));
    if (const Json* name = Field(object, "chat_template")) {
      if (!name->is_string()) {
        return TypeError("chat_template", "the name of one of the model's chat templates", *name);
      }
      request.chat_template = name->get<std::string>();
    }
    if (const Json* kwargs = Field(object, "chat_template_kwargs")) {
      if (!kwargs->is_object()) {
        return TypeError("chat_template_kwargs", "an object of template variables", *kwargs);
      }
      // The variables the request itself sets (transformers' apply_chat_template refuses them
      // as keyword arguments too).
      for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
        if (kwargs->contains(reserved)) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "'chat_template_kwargs.%s' is set by the request itself; leave it out of "
              "chat_template_kwargs",
              reserved));
        }
      }
      request.chat_template_kwargs = *kwargs;
    }
    if (const Json* effort = Field(object, "reasoning_effort")) {
      if (!effort->is_string() ||
          (*effort != "minimal" && *effort != "low" && *effort != "medium" && *effort != "high")) {
        return TypeError("reasoning_effort", "\"minimal\", \"low\", \"medium\" or \"high\"",
                         *effort);
      }
      request.reasoning_effort = effort->get<std::string>();
    }
    LLMRT_RETURN_IF_ERROR(
        ReadBool(object, "continue_final_message", request.continue_final_message));
    if (request.continue_final_message) {
      if (request.add_generation_prompt) {
        return absl::InvalidArgumentError(
            "'continue_final_message' continues the last message, 'add_generation_prompt' "
            "starts a new one: set 'add_generation_prompt' to false");
      }
      if (request.messages.back().value("role", "") != "assistant") {
        return absl::InvalidArgumentError(
            "'continue_final_message' needs the last message to be an assistant message");
      }
    }
  }

  LLMRT_RETURN_IF_ERROR(ReadBool(object, "stream", request.stream));
  if (const Json* options = Field(object, "stream_options")) {
    if (!request.stream) {
      return absl::InvalidArgumentError("'stream_options' is only allowed when 'stream' is true");
    }
    if (!options->is_object()) return TypeError("stream_options", "an object", *options);
    for (auto it = options->begin(); it != options->end(); ++it) {
      if (it.key() != "include_usage" && !it.value().is_null()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'stream_options.%s' is not supported by this server (only include_usage is); "
            "leave it out",
            it.key()));
      }
    }
    LLMRT_RETURN_IF_ERROR(ReadBool(*options, "include_usage", request.include_usage));
  }

  // max_completion_tokens is the chat API's newer name; it wins when both are given.
  const int64_t max_tokens_cap =
      limits.max_tokens > 0 ? limits.max_tokens : std::numeric_limits<int32_t>::max();
  std::optional<int64_t> integer;
  LLMRT_RETURN_IF_ERROR(ReadInt(object, "max_tokens", 1, max_tokens_cap, integer));
  request.max_tokens = integer;
  integer.reset();
  LLMRT_RETURN_IF_ERROR(ReadInt(object, "max_completion_tokens", 1, max_tokens_cap, integer));
  if (integer.has_value()) request.max_tokens = integer;

  integer.reset();
  LLMRT_RETURN_IF_ERROR(ReadInt(object, "n", 1, limits.max_n, integer));
  request.n = static_cast<int32_t>(integer.value_or(1));
  integer.reset();
  LLMRT_RETURN_IF_ERROR(ReadInt(object, "best_of", 1, limits.max_n, integer));
  if (integer.has_value() && *integer != request.n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'best_of' (%d) different from 'n' (%d) is not supported", *integer, request.n));
  }

  if (endpoint == Endpoint::kChatCompletions) {
    LLMRT_RETURN_IF_ERROR(ReadBool(object, "logprobs", request.logprobs));
    integer.reset();
    LLMRT_RETURN_IF_ERROR(ReadInt(object, "top_logprobs", 0, limits.max_top_logprobs, integer));
    if (integer.has_value()) {
      if (!request.logprobs) {
        return absl::InvalidArgumentError("'top_logprobs' needs 'logprobs' set to true");
      }
      request.top_logprobs = static_cast<int32_t>(*integer);
    }
  } else {
    // Legacy completions: logprobs is the number of alternatives; 0 still reports the chosen
    // token's logprob.
    integer.reset();
    LLMRT_RETURN_IF_ERROR(ReadInt(object, "logprobs", 0, limits.max_top_logprobs, integer));
    if (integer.has_value()) {
      request.logprobs = true;
      request.top_logprobs = static_cast<int32_t>(*integer);
    }
    bool echo = false;
    LLMRT_RETURN_IF_ERROR(ReadBool(object, "echo", echo));
    if (echo) return absl::InvalidArgumentError("'echo' is not supported by this server");
    if (Field(object, "suffix") != nullptr) {
      return absl::InvalidArgumentError("'suffix' is not supported by this server");
    }
  }

  // Ranges: OpenAI's where it has them, the sampler's otherwise.
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "temperature", 0.0, 2.0, request.temperature));
  std::optional<double> top_p;
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "top_p", 0.0, 1.0, top_p));
  if (top_p.has_value() && *top_p <= 0.0) {
    return absl::InvalidArgumentError("'top_p' must be in (0, 1], found 0");
  }
  request.top_p = top_p;
  integer.reset();
  LLMRT_RETURN_IF_ERROR(ReadInt(object, "top_k", -1, std::numeric_limits<int32_t>::max(), integer));
  if (integer.has_value()) request.top_k = static_cast<int32_t>(*integer);
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "min_p", 0.0, 1.0, request.min_p));
  std::optional<double> number;
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "repetition_penalty", 0.0, 1e6, number));
  if (number.has_value() && *number <= 0.0) {
    return absl::InvalidArgumentError("'repetition_penalty' must be > 0, found 0");
  }
  request.repetition_penalty = number;
  number.reset();
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "presence_penalty", -2.0, 2.0, number));
  request.presence_penalty = number.value_or(0.0);
  number.reset();
  LLMRT_RETURN_IF_ERROR(ReadNumber(object, "frequency_penalty", -2.0, 2.0, number));
  request.frequency_penalty = number.value_or(0.0);
  LLMRT_RETURN_IF_ERROR(ReadLogitBias(object, limits, request.logit_bias));
  if (const Json* seed = Field(object, "seed")) {
    if (!seed->is_number_integer()) return TypeError("seed", "an integer", *seed);
    request.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                              : static_cast<uint64_t>(seed->get<int64_t>());
  }
  LLMRT_RETURN_IF_ERROR(ReadStop(object, limits, request.stop));
  if (const Json* ids = Field(object, "stop_token_ids")) {
    if (!ids->is_array()) return TypeError("stop_token_ids", "an array of token ids", *ids);
    if (static_cast<int64_t>(ids->size()) > limits.max_stop) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "'stop_token_ids' holds %d ids; at most %d are allowed", ids->size(), limits.max_stop));
    }
    LLMRT_RETURN_IF_ERROR(ReadTokenIds(*ids, "stop_token_ids", request.stop_token_ids));
  }
  LLMRT_RETURN_IF_ERROR(ReadBool(object, "ignore_eos", request.ignore_eos));
  LLMRT_RETURN_IF_ERROR(ReadBool(object, "skip_special_tokens", request.skip_special_tokens));
  if (const Json* format = Field(object, "response_format")) {
    LLMRT_RETURN_IF_ERROR(CheckResponseFormat(*format));
    request.response_format = *format;
  }
  return request;
}

sampling::SamplingParams ResolveSampling(const ParsedRequest& request,
                                         const sampling::SamplingParams& defaults) {
  sampling::SamplingParams params;
  // generation_config.json with do_sample false means greedy unless the client asks otherwise.
  params.temperature = request.temperature.value_or(defaults.temperature);
  params.top_p = request.top_p.value_or(defaults.top_p);
  params.top_k = request.top_k.value_or(defaults.top_k);
  params.min_p = request.min_p.value_or(defaults.min_p);
  params.repetition_penalty = request.repetition_penalty.value_or(defaults.repetition_penalty);
  params.presence_penalty = request.presence_penalty;
  params.frequency_penalty = request.frequency_penalty;
  params.logit_bias = request.logit_bias;
  if (request.seed.has_value()) params.seed = *request.seed;
  return params;
}

std::string NewResponseId(Endpoint endpoint) {
  // Ids only need to be unique per server; 96 random bits from a per-thread engine.
  thread_local std::mt19937_64 random(std::random_device{}());
  const char* prefix = "cmpl-";
  switch (endpoint) {
    case Endpoint::kChatCompletions:
      prefix = "chatcmpl-";
      break;
    case Endpoint::kMessages:
      prefix = "msg_";
      break;
    case Endpoint::kResponses:
      prefix = "resp_";
      break;
    case Endpoint::kCompletions:
      break;
  }
  return absl::StrFormat("%s%016x%08x", prefix, random(), static_cast<uint32_t>(random()));
}

const char* FinishReasonString(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return "stop";
    case engine::FinishReason::kLength:
      return "length";
    case engine::FinishReason::kCancelled:
      return "abort";
    case engine::FinishReason::kError:
      return "error";
    case engine::FinishReason::kNone:
      break;
  }
  return nullptr;
}

Json UsageJson(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

namespace {

Json Bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char byte : text) bytes.push_back(static_cast<int>(byte));
  return bytes;
}

// Characters of UTF-8 `bytes`: the bytes that are not continuation bytes, so a character split
// across tokens counts once, with the token that starts it.
int64_t CountCharacters(std::string_view bytes) {
  int64_t count = 0;
  for (unsigned char byte : bytes) count += (byte & 0xC0) != 0x80;
  return count;
}

Json FinishReasonJson(engine::FinishReason reason) {
  const char* name = FinishReasonString(reason);
  return name == nullptr ? Json(nullptr) : Json(name);
}

const char* ObjectName(const ResponseContext& context, bool chunk) {
  if (context.endpoint == Endpoint::kChatCompletions) {
    return chunk ? "chat.completion.chunk" : "chat.completion";
  }
  return "text_completion";
}

Json Envelope(const ResponseContext& context, bool chunk) {
  return {{"id", context.id},
          {"object", ObjectName(context, chunk)},
          {"created", context.created},
          {"model", context.model}};
}

}  // namespace

std::string DumpJson(const Json& json) {
  // Invalid UTF-8 in model text (a byte-fallback token cut short) becomes U+FFFD rather than an
  // exception in the middle of a stream.
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json LogprobsJson(const ResponseContext& context, const std::vector<engine::TokenOutput>& tokens,
                  int64_t text_offset_base) {
  auto text_of = [&](int32_t id) {
    return context.token_text ? context.token_text(id) : std::to_string(id);
  };
  // A token that holds part of a character (a byte-fallback <0xE2>, a byte-level piece of an
  // emoji) has text U+FFFD but its own bytes, from which clients rebuild the character.
  auto bytes_of = [&](int32_t id) {
    return context.token_bytes ? context.token_bytes(id) : text_of(id);
  };
  if (context.endpoint == Endpoint::kChatCompletions) {
    Json content = Json::array();
    for (const engine::TokenOutput& token : tokens) {
      Json top = Json::array();
      for (const sampling::TokenLogprob& alternative : token.top) {
        top.push_back({{"token", text_of(alternative.token)},
                       {"logprob", alternative.logprob},
                       {"bytes", Bytes(bytes_of(alternative.token))}});
      }
      content.push_back({{"token", text_of(token.token)},
                         {"logprob", token.logprob.logprob},
                         {"bytes", Bytes(bytes_of(token.token))},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  Json texts = Json::array(), logprobs = Json::array(), tops = Json::array(),
       offsets = Json::array();
  int64_t offset = text_offset_base;
  for (const engine::TokenOutput& token : tokens) {
    texts.push_back(text_of(token.token));
    logprobs.push_back(token.logprob.logprob);
    Json top = Json::object();
    for (const sampling::TokenLogprob& alternative : token.top) {
      top[text_of(alternative.token)] = alternative.logprob;
    }
    // "The API will always return the logprob of the sampled token, so there may be up to
    // logprobs+1 elements" (OpenAI's completions reference).
    top[text_of(token.token)] = token.logprob.logprob;
    tops.push_back(std::move(top));
    // OpenAI's offsets count characters of the choice's text.
    offsets.push_back(offset);
    offset += CountCharacters(bytes_of(token.token));
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

Json CompletionResponse(const ResponseContext& context, const std::vector<ChoiceResult>& choices,
                        const Usage& usage) {
  Json response = Envelope(context, /*chunk=*/false);
  Json array = Json::array();
  std::vector<const ChoiceResult*> sorted;
  for (const ChoiceResult& choice : choices) sorted.push_back(&choice);
  std::sort(sorted.begin(), sorted.end(),
            [](const ChoiceResult* a, const ChoiceResult* b) { return a->index < b->index; });
  for (const ChoiceResult* choice : sorted) {
    Json logprobs = context.logprobs ? LogprobsJson(context, choice->tokens, 0) : Json(nullptr);
    if (context.endpoint == Endpoint::kChatCompletions) {
      // OpenAI's message for a turn that only calls tools has "content": null.
      Json message = {
          {"role", "assistant"},
          {"content", choice->text.empty() && !choice->tool_calls.empty() ? Json(nullptr)
                                                                          : Json(choice->text)}};
      if (context.reasoning) {
        message["reasoning_content"] =
            choice->reasoning.empty() ? Json(nullptr) : Json(choice->reasoning);
      }
      if (!choice->tool_calls.empty()) {
        Json calls = Json::array();
        for (const ToolCall& call : choice->tool_calls) calls.push_back(ToolCallJson(call));
        message["tool_calls"] = std::move(calls);
      }
      array.push_back({{"index", choice->index},
                       {"message", std::move(message)},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason",
                        ChatFinishReason(choice->finish_reason, !choice->tool_calls.empty())}});
    } else {
      array.push_back({{"index", choice->index},
                       {"text", choice->text},
                       {"logprobs", std::move(logprobs)},
                       {"finish_reason", FinishReasonJson(choice->finish_reason)}});
    }
  }
  response["choices"] = std::move(array);
  response["usage"] = UsageJson(usage);
  return response;
}

Json ChatFinishReason(engine::FinishReason reason, bool made_tool_calls) {
  if (made_tool_calls &&
      (reason == engine::FinishReason::kStop || reason == engine::FinishReason::kLength)) {
    return "tool_calls";
  }
  return FinishReasonJson(reason);
}

Json ToolCallJson(const ToolCall& call) {
  return {{"id", call.id},
          {"type", "function"},
          {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

std::vector<Json> ToolCallDeltas(const ToolCall& call, int32_t index) {
  return {{{"index", index},
           {"id", call.id},
           {"type", "function"},
           {"function", {{"name", call.name}, {"arguments", ""}}}},
          {{"index", index}, {"function", {{"arguments", call.arguments}}}}};
}

Json ChatChunk(const ResponseContext& context, int32_t index, Json delta,
               const std::vector<engine::TokenOutput>& tokens, Json finish_reason,
               bool include_usage_field) {
  Json chunk = Envelope(context, /*chunk=*/true);
  Json logprobs =
      context.logprobs && !tokens.empty() ? LogprobsJson(context, tokens, 0) : Json(nullptr);
  chunk["choices"] = Json::array({{{"index", index},
                                   {"delta", std::move(delta)},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", std::move(finish_reason)}}});
  if (include_usage_field) chunk["usage"] = nullptr;
  return chunk;
}

Json StreamChunk(const ResponseContext& context, int32_t index, const std::string& text,
                 const std::vector<engine::TokenOutput>& tokens, bool role_first,
                 engine::FinishReason finish_reason, bool include_usage_field,
                 int64_t text_offset_base) {
  if (context.endpoint == Endpoint::kChatCompletions) {
    Json delta = Json::object();
    if (role_first) delta["role"] = "assistant";
    // OpenAI's first chunk is {"role": "assistant", "content": ""}; the closing chunk has an
    // empty delta.
    if (!text.empty() || role_first) delta["content"] = text;
    return ChatChunk(context, index, std::move(delta), tokens, FinishReasonJson(finish_reason),
                     include_usage_field);
  }
  Json chunk = Envelope(context, /*chunk=*/true);
  Json logprobs = context.logprobs && !tokens.empty()
                      ? LogprobsJson(context, tokens, text_offset_base)
                      : Json(nullptr);
  chunk["choices"] = Json::array({{{"index", index},
                                   {"text", text},
                                   {"logprobs", std::move(logprobs)},
                                   {"finish_reason", FinishReasonJson(finish_reason)}}});
  if (include_usage_field) chunk["usage"] = nullptr;
  return chunk;
}

Json UsageChunk(const ResponseContext& context, const Usage& usage) {
  Json chunk = Envelope(context, /*chunk=*/true);
  chunk["choices"] = Json::array();
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

namespace {

class OpenAiWriter : public ApiWriter {
 public:
  OpenAiWriter(const ResponseContext& context, int32_t choices, bool include_usage)
      : context_(context),
        choices_(choices),
        include_usage_(include_usage),
        text_sent_(choices, 0) {}

  Json Response(const std::vector<ChoiceResult>& choices, const Usage& usage) override {
    return CompletionResponse(context_, choices, usage);
  }

  std::string StreamStart() override {
    std::string events;
    // OpenAI opens every chat choice with {"role": "assistant", "content": ""}.
    if (context_.endpoint != Endpoint::kChatCompletions) return events;
    for (int32_t index = 0; index < choices_; ++index) {
      events += Event(StreamChunk(context_, index, "", {}, /*role_first=*/true,
                                  engine::FinishReason::kNone, include_usage_, 0));
    }
    return events;
  }

  std::string StreamDelta(const ChoiceResult& choice, const ParsedDelta& delta,
                          const engine::RequestOutput& output) override {
    const bool logprobs = context_.logprobs && !output.tokens.empty();
    if (context_.endpoint != Endpoint::kChatCompletions) {
      // Completions: the text, and the finish reason on the chunk of the last text.
      if (delta.content.empty() && !logprobs && !output.finished) return "";
      std::string event =
          Event(StreamChunk(context_, choice.index, delta.content, output.tokens, false,
                            output.finished ? output.finish_reason : engine::FinishReason::kNone,
                            include_usage_, text_sent_[choice.index]));
      text_sent_[choice.index] += CountCharacters(delta.content);
      return event;
    }
    // One chunk per kind of news; the token logprobs ride on the first (or on an empty delta
    // when the parser holds the text back).
    std::vector<Json> deltas;
    if (!delta.reasoning.empty()) deltas.push_back({{"reasoning_content", delta.reasoning}});
    if (!delta.content.empty()) deltas.push_back({{"content", delta.content}});
    int32_t call_index = static_cast<int32_t>(choice.tool_calls.size() - delta.calls.size());
    for (const ToolCall& call : delta.calls) {
      for (Json& part : ToolCallDeltas(call, call_index)) {
        deltas.push_back({{"tool_calls", Json::array({std::move(part)})}});
      }
      ++call_index;
    }
    if (deltas.empty() && logprobs) deltas.push_back(Json::object());
    std::string events;
    for (size_t index = 0; index < deltas.size(); ++index) {
      events += Event(ChatChunk(context_, choice.index, std::move(deltas[index]),
                                index == 0 ? output.tokens : std::vector<engine::TokenOutput>{},
                                nullptr, include_usage_));
    }
    return events;
  }

  std::string StreamFinish(const ChoiceResult& choice) override {
    if (context_.endpoint != Endpoint::kChatCompletions) return "";
    return Event(ChatChunk(context_, choice.index, Json::object(), {},
                           ChatFinishReason(choice.finish_reason, !choice.tool_calls.empty()),
                           include_usage_));
  }

  std::string StreamEnd(const std::vector<ChoiceResult>&, const Usage& usage) override {
    std::string events;
    if (include_usage_) events += Event(UsageChunk(context_, usage));
    return events + kSseDone;
  }

  std::string StreamError(const ApiError& error) override { return SseEvent(ErrorBody(error)); }

 private:
  static std::string Event(const Json& json) { return SseEvent(DumpJson(json)); }

  ResponseContext context_;
  int32_t choices_;
  bool include_usage_;
  std::vector<int64_t> text_sent_;  // completions: characters per choice, for text_offset
};

}  // namespace

std::unique_ptr<ApiWriter> MakeOpenAiWriter(const ResponseContext& context, int32_t choices,
                                            bool include_usage) {
  return std::make_unique<OpenAiWriter>(context, choices, include_usage);
}

}  // namespace llmrt::server
