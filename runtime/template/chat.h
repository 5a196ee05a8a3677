// RenderChat: a conversation through a model's chat template, with the variables transformers'
// apply_chat_template passes (messages, tools, documents, add_generation_prompt, bos_token,
// eos_token, plus any extra keyword variables).
#ifndef LLMRT_TEMPLATE_CHAT_H_
#define LLMRT_TEMPLATE_CHAT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/template/template.h"
#include "runtime/template/value.h"

namespace llmrt::jinja {

struct ChatMessage {
  std::string role;
  // Usually a string; a list of content parts is passed through as given. None (an assistant
  // turn with only tool calls) leaves the key out of the message, as transformers does.
  Value content = Value::String("");
  // Further message keys in order (tool_calls, tool_call_id, name, ...); None ones are left out
  // too.
  std::vector<std::pair<std::string, Value>> fields;
};

struct ChatOptions {
  bool add_generation_prompt = false;
  // Unset tokens are left undefined, as transformers leaves a tokenizer's missing bos_token.
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  // The tool schemas; None when unset, as transformers passes tools=None.
  std::optional<Value> tools;
  // More variables (e.g. date_string, enable_thinking); they may override the ones above.
  std::vector<std::pair<std::string, Value>> extra_variables;
  RenderOptions render;
};

// The message as the dict a template sees: {"role": ..., "content": ..., fields...}, with its
// reasoning (reasoning_content, thinking or reasoning) also under "thinking" and
// "reasoning_content", as transformers' apply_chat_template passes it.
Value MessageValue(const ChatMessage& message);

absl::StatusOr<std::string> RenderChat(const Template& chat_template,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options);

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_CHAT_H_
