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
#include "runtime/plan/plan_reader.h"
#include "runtime/server/protocol.h"
#include "runtime/server/template_input.h"
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

// The messages array: objects with a string "role" (what the shared conversion expects).
absl::Status CheckMessages(const server::Json& json, const std::string& path) {
  if (!json.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"messages\" must be an array, found %s", path, json.type_name()));
  }
  for (size_t index = 0; index < json.size(); ++index) {
    const server::Json& message = json[index];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: message %d must be an object with a string \"role\"", path, index));
    }
  }
  return absl::OkStatus();
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
  absl::StatusOr<server::Json> parsed = server::ParseJsonBounded(buffer.str(), messages_path);
  if (!parsed.ok()) return fail(parsed.status());
  const server::Json& json = *parsed;

  jinja::ChatOptions options;
  options.add_generation_prompt = add_generation_prompt;
  const server::Json* messages = &json;
  if (json.is_object()) {
    if (!json.contains("messages")) {
      return fail(absl::InvalidArgumentError(
          absl::StrFormat("%s: an object needs a \"messages\" array", messages_path)));
    }
    messages = &json["messages"];
    for (auto it = json.begin(); it != json.end(); ++it) {
      if (it.key() == "messages") continue;
      if (it.key() == "add_generation_prompt") {
        return fail(absl::InvalidArgumentError(absl::StrFormat(
            "%s: \"add_generation_prompt\" is the --add-generation-prompt flag; leave it out of "
            "the file",
            messages_path)));
      }
      if (it.key() == "tools") {
        // As transformers' apply_chat_template(tools=None): no tools; each tool a JSON schema.
        if (it.value().is_null()) continue;
        if (!it.value().is_array()) {
          return fail(absl::InvalidArgumentError(
              absl::StrFormat("%s: \"tools\" must be an array of tool objects, found %s",
                              messages_path, it.value().type_name())));
        }
        for (size_t index = 0; index < it.value().size(); ++index) {
          if (!it.value()[index].is_object()) {
            return fail(absl::InvalidArgumentError(
                absl::StrFormat("%s: tools[%d] must be an object (a JSON schema), found %s",
                                messages_path, index, it.value()[index].dump())));
          }
        }
        options.tools = server::TemplateValue(it.value());
      } else {
        options.extra_variables.emplace_back(it.key(), server::TemplateValue(it.value()));
      }
    }
  }
  if (absl::Status checked = CheckMessages(*messages, messages_path); !checked.ok()) {
    return fail(checked);
  }

  absl::StatusOr<std::string> prompt =
      chat_template->Render(server::ChatMessages(*messages), options, template_name);
  if (!prompt.ok()) {
    return fail(absl::Status(prompt.status().code(),
                             absl::StrFormat("%s: %s", plan_path, prompt.status().message())));
  }
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

}  // namespace llmrt
