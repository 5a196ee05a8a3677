// The OpenAI protocol layer of `llmrt serve`: request parsing and validation, response and
// streaming-chunk JSON, Server-Sent-Events framing, and the mapping of errors to OpenAI error
// objects with their HTTP status. Pure functions over strings and JSON; no sockets, no engine
// thread, so every rule here is unit-tested (protocol_test.cc).
//
// Wire formats follow the OpenAI API reference (and what vLLM and llama-server emit):
//   error        {"error": {"message", "type", "param", "code"}} with the HTTP status below;
//   SSE event    "data: <one-line JSON>\n\n", the stream ends with "data: [DONE]\n\n";
//   chat chunk   {"id", "object": "chat.completion.chunk", "created", "model", "choices":
//                 [{"index", "delta": {"role"?, "content"?}, "logprobs", "finish_reason"}]}
//                 the first chunk of each choice carries role "assistant"; the last has an empty
//                 delta and the finish_reason; with stream_options.include_usage every chunk has
//                 "usage": null and one extra chunk with "choices": [] carries the usage.
//   completion   {"object": "text_completion", "choices": [{"index", "text", "logprobs",
//                 "finish_reason"}]} (streamed chunks have the same object name, as OpenAI's).
//
// Thread-safety: everything here is stateless or per-request.
#ifndef LLMRT_SERVER_PROTOCOL_H_
#define LLMRT_SERVER_PROTOCOL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/engine.h"
#include "runtime/sampling/sampler.h"

namespace llmrt::server {

using Json = nlohmann::ordered_json;

// ---- Errors ----

// An OpenAI error object and the HTTP status it travels with.
struct ApiError {
  int http_status = 500;
  std::string type;     // "invalid_request_error", "authentication_error", ...
  std::string message;  // says which field, what was expected and what was found
  std::string code;     // "" -> null; e.g. "model_not_found", "invalid_api_key"
};

// Status codes of this layer and what the HTTP side answers:
//   InvalidArgument, OutOfRange, FailedPrecondition -> 400 invalid_request_error
//   Unauthenticated -> 401 authentication_error;    NotFound -> 404 (code model_not_found)
//   ResourceExhausted -> 429 rate_limit_exceeded;   Unavailable -> 503 (draining)
//   anything else -> 500 server_error.
ApiError ErrorFromStatus(const absl::Status& status);
// {"error": {"message", "type", "param": null, "code"}}.
std::string ErrorBody(const ApiError& error);

// One-line JSON; invalid UTF-8 inside strings becomes U+FFFD instead of throwing.
std::string DumpJson(const Json& json);

// ---- Server-Sent Events ----

// "data: " + payload + "\n\n". The payload must be one line (dumped JSON is).
std::string SseEvent(std::string_view payload);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// ---- Requests ----

enum class Endpoint { kCompletions, kChatCompletions };

// Caps that keep one request from taking the server; each breach is a 400 naming the field.
struct RequestLimits {
  int32_t max_n = 16;             // choices per prompt
  int32_t max_prompts = 64;       // a /v1/completions prompt list
  int32_t max_top_logprobs = 20;  // OpenAI's own cap
  int32_t max_stop = 16;          // OpenAI allows 4; vLLM no limit; 16 costs little per token
  int32_t max_stop_bytes = 512;   // each stop string; the matcher holds this much text back
  int32_t max_logit_bias = 1024;  // entries of logit_bias
  int64_t max_tokens = 0;         // cap on max_tokens; 0: only the context bounds it
};

// A /v1/completions prompt: text, or token ids as given.
struct Prompt {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

// A request, checked for types and ranges. Sampling fields left unset by the client stay
// nullopt so the server can fill them from the plan's generation_config (as vLLM does).
struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;            // "" when the client sent none
  std::vector<Prompt> prompts;  // completions: one or more prompts
  Json messages;                // chat: the messages array as sent
  Json tools;                   // chat: null unless given
  bool add_generation_prompt = true;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<int64_t> max_tokens;
  int32_t n = 1;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  // response_format as sent, checked by CheckResponseFormat (structured_output.h); null
  // unless given.
  Json response_format;
};

// Parses a request body. InvalidArgument for malformed JSON, a field of the wrong type or out of
// range, or a cap in `limits` exceeded; the message names the field, the expectation and the
// value found.
absl::StatusOr<ParsedRequest> ParseRequest(Endpoint endpoint, std::string_view body,
                                           const RequestLimits& limits);

// The sampling settings, with unset fields taken from the plan's generation defaults and then
// from OpenAI's defaults (temperature 1, top_p 1).
struct GenerationDefaultsView {
  bool do_sample = true;
  double temperature = 1.0;
  int32_t top_k = 0;
  double top_p = 1.0;
  double repetition_penalty = 1.0;
};
sampling::SamplingParams ResolveSampling(const ParsedRequest& request,
                                         const GenerationDefaultsView& defaults);

// ---- Responses ----

// Everything the response JSON needs besides the per-choice results.
struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "chatcmpl-..." / "cmpl-...", the same on every chunk
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // Text of one token id (for logprobs); the server passes the tokenizer's Decode.
  std::function<std::string(int32_t)> token_text;
};

// "chatcmpl-" or "cmpl-" followed by 24 random hex digits.
std::string NewResponseId(Endpoint endpoint);
// OpenAI's names: "stop", "length"; a cancelled request (drain timeout) "abort", as vLLM.
const char* FinishReasonString(engine::FinishReason reason);

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;
};
Json UsageJson(const Usage& usage);

// One choice's accumulated result for a non-streamed response.
struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  std::vector<engine::TokenOutput> tokens;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
};

// The logprobs object of a choice (chat: {"content": [...]}; completions: tokens /
// token_logprobs / top_logprobs / text_offset with offsets counted from `text_offset_base`).
Json LogprobsJson(const ResponseContext& context, const std::vector<engine::TokenOutput>& tokens,
                  int64_t text_offset_base);

// The whole non-streamed response, choices sorted by index.
Json CompletionResponse(const ResponseContext& context, const std::vector<ChoiceResult>& choices,
                        const Usage& usage);

// One streamed chunk for one choice. `role_first` adds the assistant role to a chat delta (the
// first chunk of a choice); `finish_reason` kNone gives null. `text_offset_base`: bytes of this
// choice's text already sent (completions logprobs).
Json StreamChunk(const ResponseContext& context, int32_t index, const std::string& text,
                 const std::vector<engine::TokenOutput>& tokens, bool role_first,
                 engine::FinishReason finish_reason, bool include_usage_field,
                 int64_t text_offset_base);
// The final usage chunk: "choices": [] and the usage.
Json UsageChunk(const ResponseContext& context, const Usage& usage);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_PROTOCOL_H_
