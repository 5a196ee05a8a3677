// Regular expressions to GBNF, for the `regex` response format and JSON Schema `pattern`s.
//
// The subset (ECMA-262 / Python `re` syntax, which JSON Schema patterns use):
//   literals and escapes \. \\ \/ \n \r \t \f \v \0 \xHH \uHHHH; classes [a-z] [^...] with
//   \d \w \s inside; \d \D \w \W \s \S; `.` (any character but a newline); groups ( ) and
//   (?: ); alternation |; quantifiers * + ? {m} {m,} {m,n}, greedy or lazy (the same language);
//   ^ at the very start and $ at the very end.
// Refused with InvalidArgument naming the construct: backreferences, lookaround, named groups,
// \b \B, inline flags, anchors anywhere else. The regex always matches the whole text (as if
// anchored at both ends), as xgrammar and OpenAI's structured outputs treat a `pattern`; a
// string that matches whole also satisfies JSON Schema's unanchored `pattern`.
//
// With `json_string`, the regex describes a JSON string's decoded value and the grammar its body
// between the quotes: `"` and `\` come out escaped (\" \\), control characters as \n \r \t \b
// \f or \u00XX.
#ifndef LLMRT_GRAMMAR_REGEX_TO_GRAMMAR_H_
#define LLMRT_GRAMMAR_REGEX_TO_GRAMMAR_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace llmrt::grammar {

// One GBNF expression (no rule definitions), to be placed on the right of `name ::=`.
absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, bool json_string);

}  // namespace llmrt::grammar

#endif  // LLMRT_GRAMMAR_REGEX_TO_GRAMMAR_H_
