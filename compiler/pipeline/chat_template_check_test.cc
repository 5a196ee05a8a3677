#include "compiler/pipeline/chat_template_check.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using llmrt::plan::TokenizerSpec;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

// A tokenizer whose only pieces are the special tokens the template is given ("" for none).
TokenizerSpec WithTemplate(const std::string& source, const std::string& bos = "",
                           const std::string& eos = "") {
  TokenizerSpec spec;
  spec.set_chat_template(source);
  spec.add_pieces(bos);
  spec.add_pieces(eos);
  spec.set_bos_id(bos.empty() ? -1 : 0);
  spec.set_eos_id(eos.empty() ? -1 : 1);
  return spec;
}

// Every real template in ../shared/tokenizers (the set runtime/template's jinja2 reference
// renders) compiles: tool-use templates that fail without tools, templates that refuse system or
// tool messages by raising, templates that reject one argument form of a tool call.
TEST(ChatTemplateCheckTest, EveryRealTemplateCompiles) {
  std::ifstream file(LLMC_SOURCE_DIR "/runtime/template/testdata/chat_reference.json");
  ASSERT_TRUE(file.good());
  const nlohmann::json reference = nlohmann::json::parse(file);
  ASSERT_GE(reference["templates"].size(), 35u);
  for (const auto& entry : reference["templates"]) {
    const std::string name = entry["name"].get<std::string>();
    auto token = [&](const char* key) {
      return entry[key].is_null() ? std::string() : entry[key].get<std::string>();
    };
    const absl::Status checked = CheckChatTemplate(
        WithTemplate(entry["source"].get<std::string>(), token("bos_token"), token("eos_token")),
        name);
    EXPECT_TRUE(checked.ok()) << checked;
  }
}

// Hermes-3's tool_use template iterates `tools`, so it cannot render without them: as a named
// template beside a default and on its own as the default, it compiles.
TEST(ChatTemplateCheckTest, ToolUseTemplateThatNeedsToolsCompiles) {
  const std::string tool_use =
      ReadFile(LLMC_SHARED_TOKENIZERS_DIR "/hermes3/chat_template.tool_use.jinja");
  ASSERT_FALSE(tool_use.empty());
  TokenizerSpec spec =
      WithTemplate(ReadFile(LLMC_SHARED_TOKENIZERS_DIR "/qwen2/chat_template.jinja"));
  auto* named = spec.add_named_chat_templates();
  named->set_name("tool_use");
  named->set_source(tool_use);
  absl::Status checked = CheckChatTemplate(spec, "tokenizer_config.json");
  EXPECT_TRUE(checked.ok()) << checked;
  checked = CheckChatTemplate(WithTemplate(tool_use), "chat_template.jinja");
  EXPECT_TRUE(checked.ok()) << checked;
}

TEST(ChatTemplateCheckTest, CallerVariablesAreGivenEmpty) {
  // As firefunction v2 reads `functions` and `datetime`, which its callers pass.
  const absl::Status checked = CheckChatTemplate(
      WithTemplate("{% set suffix = 'Functions: ' + functions + ' Today is ' + datetime %}"
                   "{% for m in messages %}{{ m.content }}{% endfor %}{{ suffix }}"),
      "t.jinja");
  EXPECT_TRUE(checked.ok()) << checked;
}

TEST(ChatTemplateCheckTest, RefusesWhatCannotRender) {
  struct Case {
    const char* source;
    const char* expected;
  };
  const Case cases[] = {
      // A filter we lack, even in a branch only tools reach.
      {"{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{{ 'x' | wordwrap }}"
       "{% endif %}",
       "t.jinja: rendering a conversation with tools offered failed: chat template: template "
       "line 1: the filter 'wordwrap' is not supported by this interpreter"},
      {"{% for m in messages %}{% if m.role != 'user' %}{{ m.content }}{% endif %}{% endfor %}",
       "t.jinja: rendering a one-turn conversation dropped the user message"},
      {"{{ messages[0].content + 1 }}",
       "t.jinja: renders neither the plain samples (one-turn and three-turn) nor the tool samples"},
      {"{% if %}", "t.jinja: chat template: template syntax error"},
  };
  for (const Case& test_case : cases) {
    const absl::Status checked = CheckChatTemplate(WithTemplate(test_case.source), "t.jinja");
    ASSERT_FALSE(checked.ok()) << test_case.source;
    EXPECT_TRUE(absl::StartsWith(checked.message(), test_case.expected))
        << test_case.source << " -> " << checked;
  }
  // A named template is named.
  TokenizerSpec spec = WithTemplate("{% for m in messages %}{{ m.content }}{% endfor %}");
  auto* named = spec.add_named_chat_templates();
  named->set_name("tool_use");
  named->set_source("{{ messages[0].content + 1 }}");
  const absl::Status checked = CheckChatTemplate(spec, "tokenizer_config.json");
  EXPECT_TRUE(
      absl::StartsWith(checked.message(), "tokenizer_config.json (template \"tool_use\"): "))
      << checked;
}

}  // namespace
}  // namespace llmc
