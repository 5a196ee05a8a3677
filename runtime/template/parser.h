// The Jinja parser: tokens to a syntax tree, with jinja2's grammar and operator precedence.
#ifndef LLMRT_TEMPLATE_PARSER_H_
#define LLMRT_TEMPLATE_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "runtime/template/ast.h"
#include "runtime/template/lexer.h"

namespace llmrt::jinja {

// Nesting deeper than this (blocks inside blocks, or parentheses inside parentheses) is a syntax
// error: the parser and renderer recurse once per level, and 256 levels keep that far from the
// stack limit while being 20x deeper than any chat template we have seen.
inline constexpr int kMaxNestingDepth = 256;

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_PARSER_H_
