// Model output -> reasoning, content and tool calls, incrementally, for the chat, Messages and
// Responses endpoints of `llmrt serve`.
//
// Tool-call formats (TokenizerSpec.tool_call_format, or `llmrt serve --tool-call-format`):
//   hermes       <tool_call>{"name": N, "arguments": {...}}</tool_call>, repeated
//                (Hermes 2 Pro / 3, Qwen2.5, Qwen3)
//   llama3_json  {"name": N, "parameters": {...}} as the whole output, several separated by ";",
//                optionally after <|python_tag|> (Llama 3.1 / 3.2 JSON tool calling)
//   mistral      [TOOL_CALLS][{"name": N, "arguments": {...}}, ...]  (tokenizer v3 - v7) or
//                [TOOL_CALLS]N[ARGS]{...} / [TOOL_CALLS]N[CALL_ID]ID[ARGS]{...}, repeated (v11+)
//   phi4_mini    <|tool_call|>[{"name": N, "arguments": {...}}, ...]<|/tool_call|>
//   deepseek_v3
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```
//                <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3, R1); the V3.1 layout
//                <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜> is read too
//   ("parameters" and "arguments" are both accepted as the arguments key.)
//   harmony      gpt-oss: the output (after the prompt's "<|start|>assistant") is a sequence
//                of messages [<|start|>ROLE]HEADER<|message|>BODY ended by <|end|>, <|call|>
//                or <|return|> (or the end of the output: <|call|> and <|return|> are EOS
//                tokens, which the engine does not put in the text). HEADER holds
//                <|channel|>CHANNEL, optionally " to=RECIPIENT" (before or after the channel,
//                as the template renders history: "<|start|>assistant to=functions.f<|channel|>
//                commentary json<|message|>") and a content type ("<|constrain|>json" or a bare
//                "json"). Channel analysis is reasoning; final, and commentary without a
//                recipient (a preamble), are content; a message to functions.NAME is a call
//                whose BODY is the JSON arguments. A message to another recipient (the built-in
//                browser.* and python tools), a body that is not a JSON object, or text that is
//                not a message is content, markers included. The markers are special tokens:
//                the server decodes with them kept.
//
// A call is reported only once it is complete (the first end marker after which its JSON
// parses, or the end of the output for formats without one); a call that never parses is
// returned as content at the end of the output, markers included, so nothing the model wrote is
// lost. Streamed and non-streamed
// results are therefore the same. Text that may be the start of a marker is held back until it
// is known not to be one.
//
// Reasoning (<think> families: Qwen3, DeepSeek-R1, when the chat template uses </think>): text
// between <think> and </think> at the start of the output is reasoning; when the prompt itself
// ends inside <think> (the template opened it), the output starts in the reasoning. Output that
// ends before </think> is all reasoning. Leading newlines of the reasoning and of the content
// after </think> are dropped (the templates put them there).
//
// Thread-safety: an OutputParser is per choice and not thread-safe.
#ifndef LLMRT_SERVER_TOOL_CALLS_H_
#define LLMRT_SERVER_TOOL_CALLS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmrt::server {

// The markers of the formats that take more than a start and an end (tool_calls.cc reads them,
// tool_grammar.cc writes them).
namespace markers {
// DeepSeek's markers use U+FF5C (fullwidth vertical bar) and U+2581 (lower one eighth block).
#define LLMRT_DS_BAR "\xEF\xBD\x9C"
#define LLMRT_DS_SP "\xE2\x96\x81"
inline constexpr std::string_view kDeepSeekCallsBegin =
    "<" LLMRT_DS_BAR "tool" LLMRT_DS_SP "calls" LLMRT_DS_SP "begin" LLMRT_DS_BAR ">";
inline constexpr std::string_view kDeepSeekCallsEnd =
    "<" LLMRT_DS_BAR "tool" LLMRT_DS_SP "calls" LLMRT_DS_SP "end" LLMRT_DS_BAR ">";
inline constexpr std::string_view kDeepSeekCallBegin =
    "<" LLMRT_DS_BAR "tool" LLMRT_DS_SP "call" LLMRT_DS_SP "begin" LLMRT_DS_BAR ">";
inline constexpr std::string_view kDeepSeekCallEnd =
    "<" LLMRT_DS_BAR "tool" LLMRT_DS_SP "call" LLMRT_DS_SP "end" LLMRT_DS_BAR ">";
inline constexpr std::string_view kDeepSeekSep =
    "<" LLMRT_DS_BAR "tool" LLMRT_DS_SP "sep" LLMRT_DS_BAR ">";
#undef LLMRT_DS_BAR
#undef LLMRT_DS_SP
inline constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
// Harmony (gpt-oss); all are special tokens of o200k_harmony.
inline constexpr std::string_view kHarmonyStart = "<|start|>";
inline constexpr std::string_view kHarmonyChannel = "<|channel|>";
inline constexpr std::string_view kHarmonyConstrain = "<|constrain|>";
inline constexpr std::string_view kHarmonyMessage = "<|message|>";
inline constexpr std::string_view kHarmonyEnd = "<|end|>";
inline constexpr std::string_view kHarmonyCall = "<|call|>";
inline constexpr std::string_view kHarmonyReturn = "<|return|>";
}  // namespace markers

enum class ToolCallFormat {
  kNone,
  kHermes,
  kLlama3Json,
  kMistral,
  kPhi4Mini,
  kDeepSeekV3,
  kHarmony
};

// "none", "hermes", ... as above; nullopt for an unknown name. "" (a plan without a recognized
// format) is kNone.
std::optional<ToolCallFormat> ToolCallFormatFromName(std::string_view name);
const char* ToolCallFormatName(ToolCallFormat format);
// The names above joined with ", " (for error messages and --help).
std::string ToolCallFormatNames();

struct ToolCall {
  std::string id;  // "call_" + 24 alphanumerics; 9 alphanumerics for mistral, whose
                   // templates refuse other ids when the call is sent back
  std::string name;
  std::string arguments;  // a JSON object as compact text
};

// New id in the shape the format's templates accept.
std::string NewToolCallId(ToolCallFormat format);

struct ParsedDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
};

class OutputParser {
 public:
  // `tools`: kNone parses no tool calls. `reasoning`: split <think> ... </think>;
  // `starts_in_reasoning`: the prompt ended inside <think>. kHarmony splits the channels and
  // parses calls (`reasoning` and `starts_in_reasoning` do not apply to it).
  OutputParser(ToolCallFormat tools, bool reasoning, bool starts_in_reasoning);
  // Harmony's channels without tool calls (a request without tools, or tool_choice "none"):
  // a message to functions.NAME is content, markers included.
  static OutputParser HarmonyWithoutCalls();

  // New model text; returns what can be told now.
  ParsedDelta Push(std::string_view text);
  // End of the output: releases held text, parses a call left open.
  ParsedDelta Finish();

  int32_t tool_calls() const { return calls_; }

 private:
  void Content(std::string_view text, bool final, ParsedDelta& out);
  void Reasoning(std::string_view text, ParsedDelta& out);
  // Ends the open call (body_ holds its text after the start marker): calls or content.
  void CloseCall(std::string_view end_marker, ParsedDelta& out);
  void EmitText(std::string text, ParsedDelta& out);
  ParsedDelta PushHarmony(std::string_view text);
  // The open harmony message's body up to an end marker (`final`) or so far; `end_marker` is
  // the marker that ended it ("" at the end of the output or while it is open).
  void HarmonyBody(std::string_view body, bool final, std::string_view end_marker,
                   ParsedDelta& out);

  ToolCallFormat format_;
  enum class State { kStart, kReasoning, kText, kCall } state_;
  bool reasoning_;
  std::string pending_;             // held text of the current state
  std::string open_marker_;         // the open call's start marker ("" for llama3_json's bare '{')
  std::string body_;                // the open call's text after its start marker
  size_t end_search_from_ = 0;      // where in body_ an unseen end marker could start
  std::string held_space_;          // content whitespace held until we know a call does not follow
  bool reasoning_started_ = false;  // a non-newline reasoning byte was sent
  bool content_started_ = false;    // a non-newline content byte was sent (after </think>)
  bool after_think_ = false;        // content follows a </think>
  bool seen_text_ = false;          // any non-whitespace content so far (llama3_json's '{')
  int32_t calls_ = 0;
  // Harmony (format_ kHarmony): pending_ holds the current message's header until its
  // <|message|>, then the body text not yet told.
  bool harmony_calls_ = true;  // messages to functions.NAME are calls
  bool in_body_ = false;       // past the open message's <|message|>
  enum class Route { kReasoning, kContent, kCall, kRaw } route_ = Route::kContent;
  std::string header_;     // the open message's header as written, <|message|> included
  std::string call_name_;  // route_ kCall: NAME of functions.NAME
};

// The calls in one complete call body (what follows the start marker up to the end marker),
// or nullopt when it does not parse (always for kHarmony, whose calls are named in the
// message header). Exposed for tests.
std::optional<std::vector<ToolCall>> ParseCallBody(ToolCallFormat format, std::string_view body);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_TOOL_CALLS_H_
