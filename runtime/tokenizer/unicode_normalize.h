// Unicode normalization forms and lowercasing for the NFC, NFKC and Lowercase normalizers.
// These need the Unicode data tables; the runtime takes them from ICU when it is built with
// LLMRT_TOKENIZER_ICU (on by default where ICU is installed). Without ICU,
// UnicodeNormalizationAvailable() is false and Tokenizer::Create refuses specs that need them,
// rather than approximating.
#ifndef LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_
#define LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_

#include <string>
#include <string_view>

namespace llmrt::tokenizer_internal {

bool UnicodeNormalizationAvailable();

// Inputs are valid UTF-8; ASCII-only inputs are returned (lowercased) without touching ICU.
std::string NormalizeNfc(std::string_view text);
std::string NormalizeNfkc(std::string_view text);
// Rust's char::to_lowercase applied to each character (full mappings, no context: HF lowercases
// character by character, so a final sigma stays σ).
std::string Lowercase(std::string_view text);

}  // namespace llmrt::tokenizer_internal

#endif  // LLMRT_TOKENIZER_UNICODE_NORMALIZE_H_
