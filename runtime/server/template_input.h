// JSON request data as chat-template input, shared by `llmrt serve` and `llmrt render`: the one
// conversion of JSON values into template values and of OpenAI-shaped messages into
// jinja::ChatMessage.
//
// Thread-safety: stateless.
#ifndef LLMRT_SERVER_TEMPLATE_INPUT_H_
#define LLMRT_SERVER_TEMPLATE_INPUT_H_

#include <vector>

#include "runtime/server/protocol.h"
#include "runtime/template/chat.h"
#include "runtime/template/value.h"

namespace llmrt::server {

// A JSON value as the template value Python's json.loads would give: null None, integers int
// (above INT64_MAX a float: the interpreter's ints are 64-bit), objects dicts in key order.
// Recurses once per nesting level: callers bound the depth (ParseJsonBounded).
jinja::Value TemplateValue(const Json& json);

// `messages`, an array of objects with a string "role" (checked by the caller), as chat
// messages: "content" and every other key in order. A key that is null, or an absent content,
// is left out of the message, as transformers' apply_chat_template drops None-valued keys
// (templates then see an undefined key, not "None").
std::vector<jinja::ChatMessage> ChatMessages(const Json& messages);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_TEMPLATE_INPUT_H_
