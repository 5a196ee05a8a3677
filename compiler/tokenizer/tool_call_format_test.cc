#include "compiler/tokenizer/tool_call_format.h"

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

std::string ReadShared(const std::string& relative) {
  std::ifstream file(std::string(LLMC_SHARED_TOKENIZERS_DIR) + "/" + relative, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  EXPECT_FALSE(buffer.str().empty()) << relative;
  return buffer.str();
}

// Each real template maps to the syntax its model writes calls in (the format names of
// runtime/server/tool_calls.h); templates without tool calls map to "".
TEST(ToolCallFormat, RecognizesRealTemplates) {
  const std::pair<const char*, const char*> cases[] = {
      {"qwen2/chat_template.jinja", "hermes"},
      {"qwen3/chat_template.jinja", "hermes"},
      {"hermes3/chat_template.tool_use.jinja", "hermes"},
      {"llama3/more/chat_template.Llama-3.1-8B-Instruct.jinja", "llama3_json"},
      {"llama3/more/chat_template.Llama-3.2-3B-Instruct.jinja", "llama3_json"},
      {"mistral/more/chat_template.Mistral-Nemo-Instruct-2407.jinja", "mistral"},
      {"mistral/more/chat_template.mistral-common-v11.jinja", "mistral"},
      {"deepseek/chat_template.jinja", "deepseek_v3"},
      {"deepseek/more/chat_template.DeepSeek-V3.1.jinja", "deepseek_v3"},
      {"gpt-oss/chat_template.jinja", "harmony"},
      {"gpt-oss/chat_template.onnxruntime-extensions-variant.jinja", "harmony"},
      {"llama3/chat_template.jinja", ""},
      {"tinyllama/chat_template.jinja", ""},
      {"gemma/chat_template.jinja", ""},
  };
  for (const auto& [file, format] : cases) {
    EXPECT_EQ(ToolCallFormatFromTemplate(ReadShared(file)), format) << file;
  }
  // Phi-4-mini keeps its template in tokenizer_config.json.
  const nlohmann::json config =
      nlohmann::json::parse(ReadShared("phi4-mini/tokenizer_config.json"));
  EXPECT_EQ(ToolCallFormatFromTemplate(config["chat_template"].get<std::string>()), "phi4_mini");
}

TEST(ToolCallFormat, TheToolUseTemplateCountsWhenTheDefaultHasNone) {
  llmrt::plan::TokenizerSpec spec;
  spec.set_chat_template(ReadShared("tinyllama/chat_template.jinja"));
  auto* named = spec.add_named_chat_templates();
  named->set_name("tool_use");
  named->set_source(ReadShared("hermes3/chat_template.tool_use.jinja"));
  SetToolCallFormat(spec);
  EXPECT_EQ(spec.tool_call_format(), "hermes");
  spec.clear_named_chat_templates();
  SetToolCallFormat(spec);
  EXPECT_EQ(spec.tool_call_format(), "");
}

}  // namespace
}  // namespace llmc
