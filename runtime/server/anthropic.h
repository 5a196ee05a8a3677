// Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) over the chat path: the
// request becomes an OpenAI-shaped chat request (system first, tool_use blocks as tool_calls,
// tool_result blocks as tool messages, thinking blocks as reasoning_content) and the results
// are written as Anthropic messages and stream events.
//
//   response  {"id": "msg_...", "type": "message", "role": "assistant", "model", "content":
//              [thinking?, text?, tool_use...], "stop_reason", "stop_sequence", "usage":
//              {"input_tokens", "output_tokens"}}
//   stream    event: message_start, then per block content_block_start / content_block_delta
//             (text_delta, thinking_delta, input_json_delta) / content_block_stop, then
//             message_delta (stop_reason, usage.output_tokens) and message_stop
//   stop_reason  tool_use (calls made), max_tokens, stop_sequence (with the sequence), end_turn
//   error     {"type": "error", "error": {"type", "message"}}
#ifndef LLMRT_SERVER_ANTHROPIC_H_
#define LLMRT_SERVER_ANTHROPIC_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/server/protocol.h"

namespace llmrt::server {

// A Messages request (count_tokens: the count_tokens body, where max_tokens is not required
// and nothing is generated). InvalidArgument names the Anthropic field.
absl::StatusOr<ParsedRequest> ParseMessagesRequest(std::string_view body,
                                                   const RequestLimits& limits,
                                                   bool count_tokens = false);

// Anthropic's error object for the status of `error`.
std::string AnthropicErrorBody(const ApiError& error);

std::unique_ptr<ApiWriter> MakeMessagesWriter(const ResponseContext& context,
                                              int64_t prompt_tokens);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_ANTHROPIC_H_
