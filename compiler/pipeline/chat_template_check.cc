#include "compiler/pipeline/chat_template_check.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/template/plan_chat_template.h"

namespace llmc {
namespace {

namespace jinja = llmrt::jinja;
using jinja::Value;

jinja::ChatMessage Message(const char* role, const char* content,
                           std::vector<std::pair<std::string, Value>> fields = {}) {
  jinja::ChatMessage message;
  message.role = role;
  message.content = content == nullptr ? Value::None() : Value::String(content);
  message.fields = std::move(fields);
  return message;
}

// Every parameter has a description: command-r's tool_use template concatenates them (an
// undefined one is an error in jinja2 too).
Value WeatherTool() {
  return Value::Object(
      {{"type", Value::String("function")},
       {"function",
        Value::Object(
            {{"name", Value::String("get_weather")},
             {"description", Value::String("Get the current weather in a city.")},
             {"parameters",
              Value::Object(
                  {{"type", Value::String("object")},
                   {"properties",
                    Value::Object(
                        {{"city", Value::Object({{"type", Value::String("string")},
                                                 {"description", Value::String("City name")}})},
                         {"unit",
                          Value::Object({{"type", Value::String("string")},
                                         {"description", Value::String("Temperature unit")},
                                         {"enum", Value::List({Value::String("celsius"),
                                                               Value::String("fahrenheit")})}})}})},
                   {"required", Value::List({Value::String("city")})}})}})}});
}

// A question, a call (9-character id, as Mistral requires), its result and the answer.
std::vector<jinja::ChatMessage> ToolRoundTrip(Value arguments) {
  Value call = Value::Object({{"id", Value::String("call12345")},
                              {"type", Value::String("function")},
                              {"function", Value::Object({{"name", Value::String("get_weather")},
                                                          {"arguments", std::move(arguments)}})}});
  return {Message("user", "What is the weather in Paris?"),
          Message("assistant", nullptr, {{"tool_calls", Value::List({call})}}),
          Message("tool", "{\"temperature\": 21}",
                  {{"tool_call_id", Value::String("call12345")},
                   {"name", Value::String("get_weather")}}),
          Message("assistant", "It is 21 degrees in Paris."), Message("user", "Thanks!")};
}

struct Sample {
  const char* name;
  std::vector<jinja::ChatMessage> messages;
  bool with_tools;
};

// The variables transformers passes itself; an undefined one of these is the template's error,
// not a caller keyword argument.
bool IsStandardVariable(const std::string& name) {
  for (const char* standard :
       {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"}) {
    if (name == standard) return true;
  }
  return false;
}

// The name in our UndefinedError for a plain variable: "... UndefinedError: 'NAME' is undefined".
std::string UndefinedVariable(const absl::Status& status) {
  const std::string message(status.message());
  const std::string marker = "UndefinedError: '";
  const std::string suffix = "' is undefined";
  const size_t start = message.find(marker);
  if (start == std::string::npos || !absl::EndsWith(message, suffix)) return "";
  const std::string name =
      message.substr(start + marker.size(), message.size() - start - marker.size() - suffix.size());
  if (name.empty()) return "";
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return "";
  }
  return name;
}

// 8 caller variables: firefunction v2 reads 2; more means the template is not a chat template.
constexpr int kMaxCallerVariables = 8;

absl::Status CheckOneTemplate(const jinja::PlanChatTemplate& chat_template,
                              const std::string& template_name, const std::string& label) {
  std::vector<Sample> samples;
  samples.push_back({"a one-turn conversation", {Message("user", "Hello! What is 2 + 2?")}, false});
  // Content with quotes, a newline and Jinja-like text: templates that escape or re-parse
  // content show it here.
  samples.push_back(
      {"a three-turn conversation",
       {Message("user", "Tell me a story."), Message("assistant", "Once upon a time..."),
        Message("user", "Make it \"shorter\",\nplease {{ not a tag }}.")},
       false});
  samples.push_back({"a conversation with a system message",
                     {Message("system", "You are helpful."), Message("user", "Hi")},
                     false});
  samples.push_back(
      {"a conversation with tools offered",
       {Message("system", "You are helpful."), Message("user", "What is the weather in Paris?")},
       true});
  samples.push_back({"a tool call with JSON-string arguments and its result",
                     ToolRoundTrip(Value::String("{\"city\": \"Paris\"}")), true});
  samples.push_back({"a tool call with dict arguments and its result",
                     ToolRoundTrip(Value::Object({{"city", Value::String("Paris")}})), true});

  std::vector<std::pair<std::string, Value>> caller_variables;
  std::vector<bool> rendered(samples.size(), false);
  std::vector<std::string> failures;
  for (size_t index = 0; index < samples.size(); ++index) {
    const Sample& sample = samples[index];
    absl::StatusOr<std::string> output;
    while (true) {
      jinja::ChatOptions options;
      options.add_generation_prompt = true;
      if (sample.with_tools) options.tools = Value::List({WeatherTool()});
      options.extra_variables = caller_variables;
      output = chat_template.Render(sample.messages, options, template_name);
      if (output.ok()) break;
      const std::string variable = UndefinedVariable(output.status());
      if (variable.empty() || IsStandardVariable(variable) ||
          static_cast<int>(caller_variables.size()) >= kMaxCallerVariables) {
        break;
      }
      caller_variables.emplace_back(variable, Value::String(""));
    }
    if (!output.ok()) {
      if (output.status().code() == jinja::kTemplateUnsupportedCode) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": rendering ", sample.name,
                                                       " failed: ", output.status().message()));
      }
      failures.push_back(absl::StrCat(sample.name, ": ", output.status().message()));
      continue;
    }
    for (const jinja::ChatMessage& message : sample.messages) {
      if (message.role != "user") continue;
      const std::string& content = message.content.string_value();
      if (output->find(content) == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(label, ": rendering ", sample.name,
                                                       " dropped the user message \"", content,
                                                       "\"; rendered: \"", *output, "\""));
      }
    }
    rendered[index] = true;
  }
  const bool plain = rendered[0] && rendered[1];
  const bool with_tools = rendered[3] && (rendered[4] || rendered[5]);
  if (plain || with_tools) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(label,
                   ": renders neither the plain samples (one-turn and three-turn) nor the tool "
                   "samples (tools offered, and a tool call in either argument form): ",
                   absl::StrJoin(failures, "; ")));
}

}  // namespace

absl::Status CheckChatTemplate(const llmrt::plan::TokenizerSpec& tokenizer,
                               const std::string& source) {
  if (tokenizer.chat_template().empty() && tokenizer.named_chat_templates().empty()) {
    return absl::OkStatus();
  }
  absl::StatusOr<jinja::PlanChatTemplate> chat_template =
      jinja::PlanChatTemplate::Create(tokenizer);
  if (!chat_template.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", chat_template.status().message()));
  }
  for (const std::string& name : chat_template->names()) {
    const std::string label = name == jinja::kDefaultTemplateName
                                  ? source
                                  : absl::StrCat(source, " (template \"", name, "\")");
    if (absl::Status checked = CheckOneTemplate(*chat_template, name, label); !checked.ok()) {
      return checked;
    }
  }
  return absl::OkStatus();
}

}  // namespace llmc
