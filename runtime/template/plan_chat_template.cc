#include "runtime/template/plan_chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmrt::jinja {
namespace {

// A missing id stays unset, so the template sees an undefined variable, as transformers leaves
// a tokenizer's missing bos_token (Qwen2 has none).
std::optional<std::string> PieceText(const plan::TokenizerSpec& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.pieces_size()) return std::nullopt;
  return tokenizer.pieces(id);
}

}  // namespace

absl::StatusOr<PlanChatTemplate> PlanChatTemplate::Create(const plan::TokenizerSpec& tokenizer) {
  if (tokenizer.chat_template().empty()) {
    return absl::FailedPreconditionError(
        "the plan has no chat template (tokenizer_config.json had no \"chat_template\"; "
        "give one with llmc compile --chat-template FILE)");
  }
  absl::StatusOr<Template> parsed = Template::Parse(tokenizer.chat_template());
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("chat template: ", parsed.status().message()));
  }
  return PlanChatTemplate(*std::move(parsed), PieceText(tokenizer, tokenizer.bos_id()),
                          PieceText(tokenizer, tokenizer.eos_id()));
}

absl::StatusOr<std::string> PlanChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                     ChatOptions options) const {
  if (!options.bos_token) options.bos_token = bos_token_;
  if (!options.eos_token) options.eos_token = eos_token_;
  absl::StatusOr<std::string> rendered = RenderChat(template_, messages, options);
  if (!rendered.ok()) {
    return absl::Status(rendered.status().code(),
                        absl::StrCat("chat template: ", rendered.status().message()));
  }
  return rendered;
}

}  // namespace llmrt::jinja
