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
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/engine.h"
#include "runtime/sampling/sampler.h"
#include "runtime/server/tool_calls.h"

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

// The generation endpoints. Messages (Anthropic) and Responses (OpenAI) requests are converted
// to a chat request (anthropic.h, responses.h) and share everything after that.
enum class Endpoint { kCompletions, kChatCompletions, kMessages, kResponses };

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
  // "auto" (tools given: parse tool calls), "none" (tools are neither rendered nor parsed) or
  // "required" (the output is only calls, by constrained decoding: tool_grammar.h); a named
  // function is "required" with tool_choice_function set.
  std::string tool_choice = "auto";
  std::string tool_choice_function;
  // false: exactly one call (only with a forcing tool_choice).
  bool parallel_tool_calls = true;
  // chat: the name of the plan's template to render with ("" picks as transformers does:
  // tool_use when tools are rendered and the plan has it, else default).
  std::string chat_template;
  Json chat_template_kwargs;  // chat: an object of extra template variables, or null
  std::optional<std::string> reasoning_effort;  // passed to the template as reasoning_effort
  // The last message is an assistant turn the model continues (rendered without its end).
  bool continue_final_message = false;
  // Responses API: the request fields its response objects repeat (instructions, tools, ...).
  Json api_echo;
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
// The same for an already parsed object (the Messages and Responses converters build one).
absl::StatusOr<ParsedRequest> ParseRequestJson(Endpoint endpoint, const Json& object,
                                               const RequestLimits& limits);
// A request body as a JSON object: InvalidArgument for malformed JSON, another top-level type,
// or nesting deeper than 64 levels.
absl::StatusOr<Json> ParseBody(std::string_view body);
// Any JSON text nesting at most 64 levels (what everything that walks JSON recursively here
// can take); InvalidArgument naming `what` otherwise.
absl::StatusOr<Json> ParseJsonBounded(std::string_view text, std::string_view what);
// InvalidArgument naming the first non-null field of `object` in neither `known` nor `more`
// ("'X' is not supported by this server's API API; leave it out").
absl::Status CheckKnownFields(const Json& object, const std::vector<std::string_view>& known,
                              std::initializer_list<std::string_view> more, std::string_view api);
// InvalidArgument "'FIELD' must be EXPECTED, found JSON".
absl::Status FieldError(const std::string& field, const std::string& expected, const Json& found);
// object[name] when it is a string; "" when it is absent, null or of another type. For fields
// whose value the caller then checks against the values it allows, naming what it found
// (json::value() with a string default throws on a value of another type).
std::string StringOrEmpty(const Json& object, const char* name);
// object[name] as a boolean: false when absent or null; "'FIELD' must be a boolean" for any
// other type.
absl::StatusOr<bool> OptionalBool(const Json& object, const char* name, const std::string& field);
// `status` with each API field name of `renames` ("'max_tokens'" -> "'max_output_tokens'")
// replaced in its message: the Messages and Responses converters parse through the chat
// request, whose errors name the chat fields.
absl::Status RenameFields(
    const absl::Status& status,
    std::initializer_list<std::pair<std::string_view, std::string_view>> renames);
// The text of a string, or of an array of parts {"type": one of `types`, "text": ...} joined by
// newlines; any other part is refused as "'FIELD[i]' must be EXPECTED_PART".
absl::StatusOr<std::string> JoinTextParts(const Json& content, const std::string& field,
                                          std::initializer_list<std::string_view> types,
                                          const std::string& expected_part);
// tool_choice ("auto", "none", "required", {"type": "function", "function": {"name"}}) and
// parallel_tool_calls of an OpenAI-shaped object into `request`.
absl::Status ReadToolChoice(const Json& object, ParsedRequest& request);

// The sampling settings: the request's fields, and for those it leaves unset `defaults` (the
// plan's generation_config.json through sampling::SamplingFromGenerationConfig; a default
// SamplingParams is OpenAI's: temperature 1, top_p 1).
sampling::SamplingParams ResolveSampling(const ParsedRequest& request,
                                         const sampling::SamplingParams& defaults);

// ---- Responses ----

// Everything the response JSON needs besides the per-choice results.
struct ResponseContext {
  Endpoint endpoint = Endpoint::kCompletions;
  bool reasoning = false;  // the template thinks: messages carry reasoning_content
  std::string id;          // "chatcmpl-..." / "cmpl-...", the same on every chunk
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // Text of one token id (for logprobs); the server passes the tokenizer's Decode.
  std::function<std::string(int32_t)> token_text;
  // The bytes of one token id before invalid UTF-8 becomes U+FFFD (logprobs' "bytes", and the
  // completions text_offset in characters); token_text when unset.
  std::function<std::string(int32_t)> token_bytes;
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
  std::string text;  // chat: the content, without reasoning and tool calls
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  std::string stop_string;  // the stop string that ended it, if one did
  std::vector<engine::TokenOutput> tokens;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
};

// The logprobs object of a choice (chat: {"content": [...]}; completions: tokens /
// token_logprobs / top_logprobs / text_offset, offsets in characters counted from
// `text_offset_base`).
Json LogprobsJson(const ResponseContext& context, const std::vector<engine::TokenOutput>& tokens,
                  int64_t text_offset_base);

// The whole non-streamed response, choices sorted by index.
Json CompletionResponse(const ResponseContext& context, const std::vector<ChoiceResult>& choices,
                        const Usage& usage);

// "tool_calls" when the choice made calls (and was not cancelled or failed), else
// FinishReasonString; null while running.
Json ChatFinishReason(engine::FinishReason reason, bool made_tool_calls);

// One streamed chat chunk with the given delta object; `finish_reason` is a string or null.
Json ChatChunk(const ResponseContext& context, int32_t index, Json delta,
               const std::vector<engine::TokenOutput>& tokens, Json finish_reason,
               bool include_usage_field);
// The delta.tool_calls entries of one call as the OpenAI SDK accumulates them: the first
// carries index, id, type and name with empty arguments, the second the arguments.
std::vector<Json> ToolCallDeltas(const ToolCall& call, int32_t index);
// {"id", "type": "function", "function": {"name", "arguments"}}.
Json ToolCallJson(const ToolCall& call);

// One streamed chunk for one choice. `role_first` adds the assistant role to a chat delta (the
// first chunk of a choice); `finish_reason` kNone gives null. `text_offset_base`: characters of
// this choice's text already sent (completions logprobs).
Json StreamChunk(const ResponseContext& context, int32_t index, const std::string& text,
                 const std::vector<engine::TokenOutput>& tokens, bool role_first,
                 engine::FinishReason finish_reason, bool include_usage_field,
                 int64_t text_offset_base);
// The final usage chunk: "choices": [] and the usage.
Json UsageChunk(const ResponseContext& context, const Usage& usage);

// ---- One API's view of a generation ----

// How one API writes a generation's results: OpenAI chat / completions (MakeOpenAiWriter),
// Anthropic Messages (anthropic.h), OpenAI Responses (responses.h). The server drives every API
// through this, so admission, streaming, disconnects and drain are written once. Stream methods
// return complete SSE events ("" for none); `choices` hold everything received so far.
class ApiWriter {
 public:
  virtual ~ApiWriter() = default;
  virtual Json Response(const std::vector<ChoiceResult>& choices, const Usage& usage) = 0;
  virtual std::string StreamStart() = 0;
  // New parsed output of one choice, with the engine output it came from (tokens, finished).
  virtual std::string StreamDelta(const ChoiceResult& choice, const ParsedDelta& delta,
                                  const engine::RequestOutput& output) = 0;
  // The choice finished (choice.finish_reason, stop_string and tool_calls are final).
  virtual std::string StreamFinish(const ChoiceResult& choice) = 0;
  virtual std::string StreamEnd(const std::vector<ChoiceResult>& choices, const Usage& usage) = 0;
  virtual std::string StreamError(const ApiError& error) = 0;
};

// Chat completions or completions (context.endpoint), `choices` choices.
std::unique_ptr<ApiWriter> MakeOpenAiWriter(const ResponseContext& context, int32_t choices,
                                            bool include_usage);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_PROTOCOL_H_
