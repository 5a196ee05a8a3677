// PlanChatTemplate: a plan's chat templates, parsed once, with the special-token strings
// (bos_token, eos_token) taken from the plan's tokenizer the way transformers passes them.
// Used by `llmrt render`, `llmrt chat`, the C API and llmc's compile-time check, so every caller
// renders a conversation the same way.
//
// A plan carries a default template (TokenizerSpec.chat_template) and named ones
// (named_chat_templates: "tool_use", ...). Which one renders follows transformers'
// get_chat_template: the name asked for; without one, "tool_use" when tools are given (even an
// empty list, as transformers tests `tools is not None`) and the plan has it, else "default".
//
// Thread-safety: immutable after Create(); Render() may run on many threads at once.
#ifndef LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_
#define LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/template/chat.h"
#include "runtime/template/template.h"

namespace llmrt::jinja {

inline constexpr char kDefaultTemplateName[] = "default";

class PlanChatTemplate {
 public:
  // FailedPrecondition when the tokenizer has no chat template at all; InvalidArgument (naming
  // the template, with line and column) when one does not parse.
  static absl::StatusOr<PlanChatTemplate> Create(const plan::TokenizerSpec& tokenizer);

  // "default" first when the plan has one, then the named templates in plan order.
  std::vector<std::string> names() const;

  // The name Render would use: `requested` when non-empty (NotFound listing the names when the
  // plan has no such template), else the automatic choice above (FailedPrecondition when the
  // plan has only named templates and none applies).
  absl::StatusOr<std::string> Select(std::string_view requested, bool has_tools) const;

  // Renders with `options` through the template Select(template_name, options.tools) names;
  // bos_token/eos_token default to the tokenizer's when unset in `options`.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages, ChatOptions options,
                                     std::string_view template_name = {}) const;

  // The text of the template `name` (one of names()), or nullptr. Callers read it for what a
  // template declares without rendering (whether it reads reasoning_effort, writes </think>).
  const std::string* Source(std::string_view name) const;

 private:
  struct NamedTemplate {
    std::string name;
    std::string source;
    Template parsed;
  };
  PlanChatTemplate(std::vector<NamedTemplate> templates, std::optional<std::string> bos,
                   std::optional<std::string> eos)
      : templates_(std::move(templates)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}
  const NamedTemplate* Find(std::string_view name) const;

  std::vector<NamedTemplate> templates_;  // "default" first
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
};

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_PLAN_CHAT_TEMPLATE_H_
