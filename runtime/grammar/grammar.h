// Grammar: a context-free grammar over bytes, parsed from GBNF text (llama.cpp's grammar syntax,
// which xgrammar's EBNF reader also accepts), ready for the byte-level pushdown automaton in
// matcher.h.
//
// Syntax (GBNF):
//   root   ::= "{" ws members? "}"        a rule: name ::= alternatives; the start rule is `root`
//   name   ::= [a-zA-Z_-][a-zA-Z0-9_-]*   rule names; a reference before the definition is fine
//   "text"                                a literal (UTF-8), escapes \n \r \t \\ \" \' \[ \] \xHH
//                                         \uHHHH \UHHHHHHHH
//   [a-z0-9_] [^"\\]                      a character class over code points, negated with ^
//   .                                     any code point
//   <[128010]>                            one whole token by id (llama.cpp's syntax): for
//                                         special tokens, which no byte string spells
//   ( ... ) | * + ? {m} {m,} {m,n}        grouping, alternation, repetition
//   # comment                             to the end of the line
// Rules end where the next `name ::=` begins, so a rule may span lines.
//
// Code points are matched as their UTF-8 bytes: a class becomes alternatives of byte ranges
// (the standard UTF-8 range split), so a token that ends inside a multi-byte character, or a
// byte-fallback token <0xE4>, advances the automaton by exactly its bytes. Classes and `.` match
// only well-formed UTF-8 (no surrogates, no overlong forms, nothing above U+10FFFF).
//
// Repetitions are rewritten into right-recursive helper rules (X* is `r ::= X r | ""`); the
// matcher pops a finished frame before pushing its tail call, so such loops keep the stack flat.
// Left recursion (a rule that can reach itself before consuming a byte) is refused: a pushdown
// automaton that expands it never stops.
//
// Thread-safety: a Grammar is immutable after ParseGrammar().
#ifndef LLMRT_GRAMMAR_GRAMMAR_H_
#define LLMRT_GRAMMAR_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::grammar {

// 256 bits: which byte values an element accepts.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool Has(uint8_t byte) const { return (words[byte >> 6] >> (byte & 63)) & 1; }
  void Add(uint8_t byte) { words[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void AddRange(uint8_t low, uint8_t high) {
    for (int byte = low; byte <= high; ++byte) Add(static_cast<uint8_t>(byte));
  }
  bool operator==(const ByteSet& other) const { return words == other.words; }
};

struct Grammar {
  enum class Kind : uint8_t {
    kBytes,  // one byte from byte_sets[value]
    kRule,   // the rule rules[value]
    kEnd,    // end of an alternative
    kToken,  // the whole token with id `value` (special tokens; matcher.h)
  };
  struct Element {
    Kind kind = Kind::kEnd;
    int32_t value = 0;
  };
  struct Rule {
    std::string name;
    std::vector<int32_t> alternatives;  // positions in `elements` of each alternative's first
  };
  // Every alternative is a run of elements ending with kEnd, so a position plus one is the
  // next element of the same alternative.
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  std::vector<Rule> rules;
  int32_t root = 0;
};

// Parses GBNF text; `root_rule` names the start rule. InvalidArgument naming the line and
// column for a syntax error, an undefined or twice-defined rule, or left recursion.
absl::StatusOr<Grammar> ParseGrammar(std::string_view text, std::string_view root_rule = "root");

// A GBNF literal for `text`: quoted, with ", \ and control bytes escaped.
std::string GbnfLiteral(std::string_view text);

}  // namespace llmrt::grammar

#endif  // LLMRT_GRAMMAR_GRAMMAR_H_
