#include "runtime/template/plan_chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace llmrt::jinja {
namespace {

// A missing id stays unset, so the template sees an undefined variable, as transformers leaves
// a tokenizer's missing bos_token (Qwen2 has none).
std::optional<std::string> PieceText(const plan::TokenizerSpec& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.pieces_size()) return std::nullopt;
  return tokenizer.pieces(id);
}

constexpr char kToolUseTemplateName[] = "tool_use";

// How messages name a template: the default one as before named templates existed.
std::string TemplateLabel(std::string_view name) {
  if (name == kDefaultTemplateName) return "chat template";
  return absl::StrCat("chat template \"", std::string(name), "\"");
}

}  // namespace

absl::StatusOr<PlanChatTemplate> PlanChatTemplate::Create(const plan::TokenizerSpec& tokenizer) {
  if (tokenizer.chat_template().empty() && tokenizer.named_chat_templates().empty()) {
    return absl::FailedPreconditionError(
        "the plan has no chat template (the checkpoint had no chat_template.jinja and "
        "tokenizer_config.json no \"chat_template\"; give one with llmc compile --chat-template "
        "FILE)");
  }
  std::vector<std::pair<std::string, std::string_view>> sources;
  if (!tokenizer.chat_template().empty()) {
    sources.emplace_back(kDefaultTemplateName, tokenizer.chat_template());
  }
  for (const plan::TokenizerSpec::NamedChatTemplate& named : tokenizer.named_chat_templates()) {
    sources.emplace_back(named.name(), named.source());
  }
  std::vector<NamedTemplate> templates;
  for (auto& [name, source] : sources) {
    absl::StatusOr<Template> parsed = Template::Parse(source);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(TemplateLabel(name), ": ", parsed.status().message()));
    }
    templates.push_back({std::move(name), std::string(source), *std::move(parsed)});
  }
  return PlanChatTemplate(std::move(templates), PieceText(tokenizer, tokenizer.bos_id()),
                          PieceText(tokenizer, tokenizer.eos_id()));
}

std::vector<std::string> PlanChatTemplate::names() const {
  std::vector<std::string> out;
  for (const NamedTemplate& named : templates_) out.push_back(named.name);
  return out;
}

const PlanChatTemplate::NamedTemplate* PlanChatTemplate::Find(std::string_view name) const {
  for (const NamedTemplate& named : templates_) {
    if (named.name == name) return &named;
  }
  return nullptr;
}

const std::string* PlanChatTemplate::Source(std::string_view name) const {
  const NamedTemplate* named = Find(name);
  return named != nullptr ? &named->source : nullptr;
}

absl::StatusOr<std::string> PlanChatTemplate::Select(std::string_view requested,
                                                     bool has_tools) const {
  if (!requested.empty()) {
    if (Find(requested) != nullptr) return std::string(requested);
    return absl::NotFoundError(absl::StrCat("the plan has no chat template named \"",
                                            std::string(requested),
                                            "\"; it has: ", absl::StrJoin(names(), ", ")));
  }
  if (has_tools && Find(kToolUseTemplateName) != nullptr) return std::string(kToolUseTemplateName);
  if (Find(kDefaultTemplateName) != nullptr) return std::string(kDefaultTemplateName);
  return absl::FailedPreconditionError(
      absl::StrCat("the plan has several chat templates and no \"default\"; name one (",
                   absl::StrJoin(names(), ", "), ")"));
}

absl::StatusOr<std::string> PlanChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                     ChatOptions options,
                                                     std::string_view template_name) const {
  absl::StatusOr<std::string> name = Select(template_name, options.tools.has_value());
  if (!name.ok()) {
    return absl::Status(name.status().code(),
                        absl::StrCat("chat template: ", name.status().message()));
  }
  if (!options.bos_token) options.bos_token = bos_token_;
  if (!options.eos_token) options.eos_token = eos_token_;
  absl::StatusOr<std::string> rendered = RenderChat(Find(*name)->parsed, messages, options);
  if (!rendered.ok()) {
    return absl::Status(rendered.status().code(),
                        absl::StrCat(TemplateLabel(*name), ": ", rendered.status().message()));
  }
  return rendered;
}

}  // namespace llmrt::jinja
