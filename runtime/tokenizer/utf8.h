// UTF-8 helpers shared by the tokenizer stages. All functions take arbitrary bytes and never read
// past the end of their input.
#ifndef LLMRT_TOKENIZER_UTF8_H_
#define LLMRT_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace llmrt::tokenizer_internal {

// Length of the UTF-8 sequence starting at text[pos] if it is a valid, complete sequence;
// 0 otherwise (invalid lead byte, bad continuation, overlong, surrogate, > U+10FFFF, truncated).
size_t ValidSequenceLength(std::string_view text, size_t pos);

// Decodes the character at text[pos], which must start a valid sequence.
char32_t DecodeChar(std::string_view text, size_t pos, size_t* length);

void AppendUtf8(char32_t code_point, std::string* out);

// Replaces invalid sequences by U+FFFD exactly like Rust's String::from_utf8_lossy (which HF
// tokenizers uses): each maximal prefix of a valid sequence becomes one U+FFFD, and so does
// every other invalid byte. Python's bytes.decode(errors="replace") gives the same result.
std::string ToValidUtf8Lossy(std::string_view bytes);

bool IsValidUtf8(std::string_view text);

// True when `bytes` ends inside a sequence that could still become valid with more bytes
// (e.g. "\xE4\xB8"): a stream decoder must hold such a tail back.
bool EndsWithIncompleteSequence(std::string_view bytes);

// Rust's char::is_whitespace (the Unicode White_Space property), which HF uses for strip,
// lstrip/rstrip of added tokens and WhitespaceSplit.
bool IsWhitespace(char32_t code_point);

}  // namespace llmrt::tokenizer_internal

#endif  // LLMRT_TOKENIZER_UTF8_H_
