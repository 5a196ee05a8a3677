// OpenAI Responses API (POST /v1/responses), stateless, over the chat path: `instructions`
// becomes the system message, `input` (a string or items: messages, function_call,
// function_call_output) the conversation, function tools the chat tools.
//
//   response  {"id": "resp_...", "object": "response", "created_at", "status": "completed" |
//              "incomplete" (incomplete_details.reason "max_output_tokens"), "model", "output":
//              [reasoning?, message?, function_call...], "usage": {"input_tokens",
//              "output_tokens", "total_tokens", ...}, plus the request's settings}
//   stream    event: response.created, response.in_progress, then per output item
//             response.output_item.added, (message) response.content_part.added,
//             response.output_text.delta..., response.output_text.done,
//             response.content_part.done, (reasoning) response.reasoning_text.delta / .done,
//             (function_call) response.function_call_arguments.delta / .done,
//             response.output_item.done; finally response.completed (or response.incomplete).
//             Every event carries a sequence_number.
//
// Nothing is stored: `store` true and `previous_response_id` are 400s.
#ifndef LLMRT_SERVER_RESPONSES_H_
#define LLMRT_SERVER_RESPONSES_H_

#include <cstdint>
#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/server/protocol.h"

namespace llmrt::server {

absl::StatusOr<ParsedRequest> ParseResponsesRequest(std::string_view body,
                                                    const RequestLimits& limits);

// `echo`: ParsedRequest.api_echo (the request settings every response object repeats).
std::unique_ptr<ApiWriter> MakeResponsesWriter(const ResponseContext& context, const Json& echo);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_RESPONSES_H_
