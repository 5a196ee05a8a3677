// PlanChatTemplate: a plan's chat template, parsed once, with the special-token strings
// (bos_token, eos_token) taken from the plan's tokenizer the way transformers passes them.
// Used by `llmrt render`, `llmrt chat`, the server and llmc's compile-time check, so every
// caller renders a conversation the same way.
//
// Thread-safety: immutable after Create(); Render() may run on many threads at once.
#ifndef LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_
#define LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/template/chat.h"
#include "runtime/template/template.h"

namespace llmrt::jinja {

class PlanChatTemplate {
 public:
  // FailedPrecondition when the tokenizer has no chat template; InvalidArgument (with line and
  // column) when it does not parse.
  static absl::StatusOr<PlanChatTemplate> Create(const plan::TokenizerSpec& tokenizer);

  // Renders with `options`; bos_token/eos_token default to the tokenizer's when unset there.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     ChatOptions options) const;

 private:
  PlanChatTemplate(Template parsed, std::optional<std::string> bos, std::optional<std::string> eos)
      : template_(std::move(parsed)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}
  Template template_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
};

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_
