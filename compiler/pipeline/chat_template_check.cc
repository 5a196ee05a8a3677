#include "compiler/pipeline/chat_template_check.h"

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "runtime/template/plan_chat_template.h"

namespace llmc {
namespace {

namespace jinja = llmrt::jinja;

jinja::ChatMessage Message(const char* role, const char* content) {
  jinja::ChatMessage message;
  message.role = role;
  message.content = jinja::Value::String(content);
  return message;
}

struct SampleConversation {
  const char* name;
  std::vector<jinja::ChatMessage> messages;
  bool may_raise;  // the template may refuse it on purpose with raise_exception
};

}  // namespace

absl::Status CheckChatTemplate(const llmrt::plan::TokenizerSpec& tokenizer,
                               const std::string& source) {
  if (tokenizer.chat_template().empty()) return absl::OkStatus();
  absl::StatusOr<jinja::PlanChatTemplate> chat_template =
      jinja::PlanChatTemplate::Create(tokenizer);
  if (!chat_template.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", chat_template.status().message()));
  }
  // Content with quotes, a newline and Jinja-like text: templates that escape or re-parse content
  // show it here.
  const std::vector<SampleConversation> samples = {
      {"a one-turn conversation", {Message("user", "Hello! What is 2 + 2?")}, false},
      {"a three-turn conversation",
       {Message("user", "Tell me a story."), Message("assistant", "Once upon a time..."),
        Message("user", "Make it \"shorter\",\nplease {{ not a tag }}.")},
       false},
      {"a conversation with a system message",
       {Message("system", "You are helpful."), Message("user", "Hi")},
       true},
  };
  for (const SampleConversation& sample : samples) {
    jinja::ChatOptions options;
    options.add_generation_prompt = true;
    absl::StatusOr<std::string> rendered = chat_template->Render(sample.messages, options);
    if (!rendered.ok()) {
      if (sample.may_raise && rendered.status().code() == jinja::kTemplateRaisedCode) continue;
      return absl::InvalidArgumentError(absl::StrCat(source, ": rendering ", sample.name,
                                                     " failed: ", rendered.status().message()));
    }
    for (const jinja::ChatMessage& message : sample.messages) {
      if (message.role != "user") continue;
      const std::string& content = message.content.string_value();
      if (rendered->find(content) == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(source, ": rendering ", sample.name,
                                                       " dropped the user message \"", content,
                                                       "\"; rendered: \"", *rendered, "\""));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace llmc
