// Unicode normalization forms and lowercasing for the NFC, NFKC and Lowercase normalizers, from
// our own tables (unicode_tables.inc, made by scripts/gen-unicode-tables.py) at the Unicode
// versions HF tokenizers uses, which are not the newest: normalization is Unicode 9.0.0 (the
// Rust crate unicode-normalization-alignments 0.1.12), lowercase is Unicode 17.0.0 (Rust's
// char::to_lowercase in tokenizers 0.23.3). A library with newer tables (ICU) would reorder and
// compose some marks differently from HF; see docs/architecture.md.
//
// All functions are pure and thread-safe; the tables are constant data (about 80 KB).
#ifndef LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_
#define LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_

#include <string>
#include <string_view>

namespace llmrt::tokenizer_internal {

// Inputs should be valid UTF-8 (the tokenizer repairs its input first); an invalid byte becomes
// U+FFFD here and stays as it is in Lowercase. ASCII-only inputs are returned as they are.
std::string NormalizeNfc(std::string_view text);
std::string NormalizeNfkc(std::string_view text);
// The decompositions alone: not used by any normalizer of the plan format, kept because NFC and
// NFKC are built on them and the tests check them separately against HF.
std::string NormalizeNfd(std::string_view text);
std::string NormalizeNfkd(std::string_view text);
// Rust's char::to_lowercase applied to each character (full mappings, no context: HF lowercases
// character by character, so a final sigma stays σ).
std::string Lowercase(std::string_view text);

}  // namespace llmrt::tokenizer_internal

#endif  // LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_
