// Recognizes how a model writes tool calls from its chat template, for
// TokenizerSpec.tool_call_format (the format `llmrt serve` parses; runtime/server/tool_calls.h
// has the names and the syntax of each).
#ifndef LLMC_TOKENIZER_TOOL_CALL_FORMAT_H_
#define LLMC_TOKENIZER_TOOL_CALL_FORMAT_H_

#include <string>
#include <string_view>

#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// The format a template's own markup uses for assistant tool calls (or, for templates that
// only describe tools, the family's known output syntax): "hermes", "llama3_json", "mistral",
// "phi4_mini", "deepseek_v3", "harmony"; "" when none is recognized.
std::string ToolCallFormatFromTemplate(std::string_view source);

// Sets spec.tool_call_format from the default chat template, else from the "tool_use" named one.
void SetToolCallFormat(llmrt::plan::TokenizerSpec& spec);

}  // namespace llmc

#endif  // LLMC_TOKENIZER_TOOL_CALL_FORMAT_H_
