// Forced tool calls (tool_choice "required" or a named function, parallel_tool_calls false) as a
// grammar: the GBNF of the outputs that are nothing but well-formed calls in the plan's tool-call
// format (tool_calls.h), each call's arguments following its tool's `parameters` JSON Schema
// (runtime/grammar/json_schema.h, same layout as response_format). The server samples under it
// with the same TokenConstraint as structured output, so even a weak model's forced call parses
// and its arguments validate.
//
// Layout per format (what OutputParser reads back; ", " and ": " inside JSON):
//   hermes       <tool_call>\n{"name": N, "arguments": A}\n</tool_call>, calls joined by "\n"
//   llama3_json  {"name": N, "parameters": A}, calls joined by "; " (no <|python_tag|>: the
//                JSON tool-calling form of Llama 3.1 / 3.2)
//   mistral      [TOOL_CALLS][{"name": N, "arguments": A}, ...]
//   phi4_mini    <|tool_call|>[{"name": N, "arguments": A}, ...]<|/tool_call|>
//   deepseek_v3  <calls begin><call begin>function<sep>N\n```json\nA\n```<call end>, joined by
//                "\n", then <calls end>
//   harmony      <|channel|>commentary to=functions.N <|constrain|>json<|message|>A<|call|>,
//                calls joined by "<|start|>assistant" (the prompt ends with the first one's);
//                no analysis message before it (the reasoning rule below)
// A marker that is a special token of the tokenizer (e.g. Mistral's [TOOL_CALLS]) is the whole
// token (<[ID]>, grammar.h); any other is its text, which any tokens spelling it may write.
//
// Reasoning: no thinking comes before a forced call. Free text has no bound a grammar can set,
// and a weak model may never leave it, so the call could never come. When the template's
// generation prompt opened <think> itself, the grammar starts with "</think>\n\n" (empty
// reasoning), as the templates write a turn without thinking.
//
// Thread-safety: stateless.
#ifndef LLMRT_SERVER_TOOL_GRAMMAR_H_
#define LLMRT_SERVER_TOOL_GRAMMAR_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/server/tool_calls.h"

namespace llmrt::server {

struct ForcedToolCalls {
  std::string function;          // "": any of the tools; else only this one
  bool parallel = true;          // one call or more; false: exactly one
  bool close_reasoning = false;  // the prompt ends inside <think> (not harmony's)
};

// The GBNF (start rule root) of the forced calls. `tools`: the checked chat request's tools
// ([{"type": "function", "function": {"name", "parameters"?}}]). InvalidArgument naming the
// field when the format is none, the named function is not among the tools, or a candidate
// tool's parameters use a keyword the grammar cannot enforce.
absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format, const nlohmann::ordered_json& tools,
                                         const ForcedToolCalls& forced,
                                         const plan::TokenizerSpec& tokenizer);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_TOOL_GRAMMAR_H_
