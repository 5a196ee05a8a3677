#include "compiler/tokenizer/tool_call_format.h"

namespace llmc {

std::string ToolCallFormatFromTemplate(std::string_view source) {
  auto has = [source](std::string_view marker) {
    return source.find(marker) != std::string_view::npos;
  };
  // DeepSeek V3 / R1 ("function<｜tool▁sep｜>NAME" and a ```json fence) and V3.1
  // ("NAME<｜tool▁sep｜>ARGUMENTS"): one parser reads both layouts.
  if (has("<\xEF\xBD\x9C"
          "tool\xE2\x96\x81"
          "calls\xE2\x96\x81"
          "begin\xEF\xBD\x9C>")) {
    return "deepseek_v3";
  }
  if (has("[TOOL_CALLS]")) return "mistral";
  // gpt-oss: messages on channels, addressed " to=RECIPIENT" (the template writes " to=" and
  // "functions." + name apart).
  if (has("<|channel|>") && has(" to=")) return "harmony";
  if (has("<tool_call>")) return "hermes";
  // Phi-4-mini's template only lists the tools between <|tool|> and <|/tool|>; the model answers
  // with <|tool_call|>[...]<|/tool_call|>.
  if (has("<|tool_call|>") || (has("<|tool|>") && has("<|/tool|>"))) return "phi4_mini";
  // Llama 3.1 / 3.2: tool results come back in the "ipython" role and the prompt asks for
  // {"name": ..., "parameters": ...}; <|python_tag|> opens a call.
  if (has("<|python_tag|>") || (has("ipython") && has("\"parameters\""))) return "llama3_json";
  return "";
}

void SetToolCallFormat(llmrt::plan::TokenizerSpec& spec) {
  std::string format = ToolCallFormatFromTemplate(spec.chat_template());
  for (const auto& named : spec.named_chat_templates()) {
    if (!format.empty()) break;
    if (named.name() == "tool_use") format = ToolCallFormatFromTemplate(named.source());
  }
  spec.set_tool_call_format(format);
}

}  // namespace llmc
