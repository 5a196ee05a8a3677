#include "tools/llmrt/render.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/plan_reader.h"
#include "runtime/template/chat.h"
#include "runtime/template/plan_chat_template.h"
#include "runtime/template/template.h"

namespace llmrt {
namespace {

constexpr char kRenderUsage[] =
    "usage: llmrt render PLAN MESSAGES.json [--add-generation-prompt] [--template NAME]\n"
    "  MESSAGES.json: [{\"role\": ..., \"content\": ...}, ...] or {\"messages\": [...], "
    "\"tools\": [...], ...more template variables}\n"
    "  --template NAME: one of the plan's named chat templates (\"default\", \"tool_use\", ...);\n"
    "    without it, \"tool_use\" when the file gives \"tools\" and the plan has it, else the "
    "default\n";

jinja::Value ToValue(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return jinja::Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::Value::Items items;
      for (const auto& item : json) items.push_back(ToValue(item));
      return jinja::Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Value::Entries entries;
      for (auto it = json.begin(); it != json.end(); ++it) {
        entries.emplace_back(jinja::Value::String(it.key()), ToValue(it.value()));
      }
      return jinja::Value::Dict(std::move(entries));
    }
    default:
      return jinja::Value::None();
  }
}

absl::StatusOr<std::vector<jinja::ChatMessage>> ToMessages(const nlohmann::ordered_json& json,
                                                           const std::string& path) {
  if (!json.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"messages\" must be an array, found %s", path, json.type_name()));
  }
  std::vector<jinja::ChatMessage> messages;
  for (size_t index = 0; index < json.size(); ++index) {
    const auto& message = json[index];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: message %d must be an object with a string \"role\"", path, index));
    }
    jinja::ChatMessage chat_message;
    chat_message.content = jinja::Value::None();
    bool has_content = false;
    for (auto it = message.begin(); it != message.end(); ++it) {
      if (it.key() == "role") {
        chat_message.role = it.value().get<std::string>();
      } else if (it.key() == "content") {
        chat_message.content = ToValue(it.value());
        has_content = true;
      } else {
        chat_message.fields.emplace_back(it.key(), ToValue(it.value()));
      }
    }
    if (!has_content)
      chat_message.content = jinja::Value::Undefined("'dict object' has no attribute 'content'");
    messages.push_back(std::move(chat_message));
  }
  return messages;
}

}  // namespace

int Render(int argc, char** argv) {
  std::string plan_path, messages_path, template_name;
  bool add_generation_prompt = false;
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    if (argument == "--add-generation-prompt") {
      add_generation_prompt = true;
    } else if (argument == "--template") {
      if (index + 1 >= argc || argv[index + 1][0] == '\0') {
        std::fprintf(stderr, "llmrt: --template needs a template name\n%s", kRenderUsage);
        return 2;
      }
      template_name = argv[++index];
    } else if (!argument.empty() && argument[0] == '-') {
      std::fprintf(stderr, "llmrt: unknown flag %s\n%s", argument.c_str(), kRenderUsage);
      return 2;
    } else if (plan_path.empty()) {
      plan_path = argument;
    } else if (messages_path.empty()) {
      messages_path = argument;
    } else {
      std::fprintf(stderr, "llmrt: unexpected argument %s\n%s", argument.c_str(), kRenderUsage);
      return 2;
    }
  }
  if (messages_path.empty()) {
    std::fprintf(stderr, "llmrt: render needs a plan and a messages file\n%s", kRenderUsage);
    return 2;
  }
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "llmrt: %s\n", std::string(status.message()).c_str());
    return 1;
  };

  absl::StatusOr<std::unique_ptr<plan::Plan>> opened = plan::Plan::Open(plan_path, {});
  if (!opened.ok()) return fail(opened.status());
  const plan::TokenizerSpec& spec = (*opened)->meta().tokenizer();
  absl::StatusOr<jinja::PlanChatTemplate> chat_template = jinja::PlanChatTemplate::Create(spec);
  if (!chat_template.ok()) {
    return fail(
        absl::Status(chat_template.status().code(),
                     absl::StrFormat("%s: %s", plan_path, chat_template.status().message())));
  }

  std::ifstream file(messages_path, std::ios::binary);
  if (!file) {
    return fail(absl::NotFoundError(absl::StrFormat("%s: cannot open", messages_path)));
  }
  std::stringstream buffer;
  buffer << file.rdbuf();
  const nlohmann::ordered_json json =
      nlohmann::ordered_json::parse(buffer.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return fail(absl::InvalidArgumentError(absl::StrFormat("%s: not valid JSON", messages_path)));
  }

  jinja::ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  absl::StatusOr<std::vector<jinja::ChatMessage>> messages;
  if (json.is_object()) {
    if (!json.contains("messages")) {
      return fail(absl::InvalidArgumentError(
          absl::StrFormat("%s: an object needs a \"messages\" array", messages_path)));
    }
    messages = ToMessages(json["messages"], messages_path);
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (it.key() == "messages") continue;
      if (it.key() == "tools") {
        options.tools = ToValue(it.value());
      } else {
        options.extra_variables.emplace_back(it.key(), ToValue(it.value()));
      }
    }
  } else {
    messages = ToMessages(json, messages_path);
  }
  if (!messages.ok()) return fail(messages.status());

  absl::StatusOr<std::string> prompt = chat_template->Render(*messages, options, template_name);
  if (!prompt.ok()) {
    return fail(absl::Status(prompt.status().code(),
                             absl::StrFormat("%s: %s", plan_path, prompt.status().message())));
  }
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

}  // namespace llmrt
