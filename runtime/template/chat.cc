#include "runtime/template/chat.h"

namespace llmrt::jinja {

Value MessageValue(const ChatMessage& message) {
  // transformers copies a message's reasoning, found under the first of these names that is not
  // None, to "thinking" (gpt-oss reads it) and "reasoning_content" (Qwen3, DeepSeek read it):
  // {"thinking": reasoning, **message, "reasoning_content": reasoning}.
  const Value* reasoning = nullptr;
  for (const char* name : {"reasoning_content", "thinking", "reasoning"}) {
    for (const auto& [key, value] : message.fields) {
      if (reasoning == nullptr && key == name && !value.is_none()) reasoning = &value;
    }
  }
  Value::Entries entries;
  if (reasoning != nullptr) entries.emplace_back(Value::String("thinking"), *reasoning);
  entries.emplace_back(Value::String("role"), Value::String(message.role));
  // None-valued keys are left out, as transformers' apply_chat_template drops them (OpenAI
  // clients send "content": null beside tool calls; Llama 3 would print "None").
  if (!message.content.is_none()) entries.emplace_back(Value::String("content"), message.content);
  for (const auto& [key, value] : message.fields) {
    if (!value.is_none()) entries.emplace_back(Value::String(key), value);
  }
  if (reasoning != nullptr) entries.emplace_back(Value::String("reasoning_content"), *reasoning);
  // Value::Dict keeps a repeated key's first position and last value, as the dict literal does.
  return Value::Dict(std::move(entries));
}

absl::StatusOr<std::string> RenderChat(const Template& chat_template,
                                       const std::vector<ChatMessage>& messages,
                                       const ChatOptions& options) {
  if (messages.empty()) {
    // transformers' words.
    return absl::InvalidArgumentError("Cannot apply chat template to an empty conversation.");
  }
  Value::Items message_values;
  message_values.reserve(messages.size());
  for (const ChatMessage& message : messages) message_values.push_back(MessageValue(message));
  Value::Entries variables;
  variables.emplace_back(Value::String("messages"), Value::List(std::move(message_values)));
  variables.emplace_back(Value::String("tools"), options.tools ? *options.tools : Value::None());
  variables.emplace_back(Value::String("documents"), Value::None());
  variables.emplace_back(Value::String("add_generation_prompt"),
                         Value::Bool(options.add_generation_prompt));
  if (options.bos_token) {
    variables.emplace_back(Value::String("bos_token"), Value::String(*options.bos_token));
  }
  if (options.eos_token) {
    variables.emplace_back(Value::String("eos_token"), Value::String(*options.eos_token));
  }
  for (const auto& [key, value] : options.extra_variables) {
    variables.emplace_back(Value::String(key), value);
  }
  // Value::Dict keeps the first position and the last value of a repeated key, so an extra
  // variable overrides a standard one.
  return chat_template.Render(Value::Dict(std::move(variables)), options.render);
}

}  // namespace llmrt::jinja
