// The Jinja lexer: splits template source into text and tag tokens, applying whitespace control
// the way jinja2's lexer does under transformers' settings (trim_blocks and lstrip_blocks on,
// keep_trailing_newline off).
#ifndef LLMRT_TEMPLATE_LEXER_H_
#define LLMRT_TEMPLATE_LEXER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::jinja {

struct Token {
  enum class Kind {
    kData,
    kVariableBegin,
    kVariableEnd,
    kBlockBegin,
    kBlockEnd,
    kName,
    kString,   // text is the decoded literal
    kInteger,  // text is the digits without '_'
    kFloat,
    kOperator,
    kEnd,
  };
  Kind kind;
  std::string text;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Syntax errors name the line and column ("line 3, column 7: unterminated string").
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options);

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_LEXER_H_
