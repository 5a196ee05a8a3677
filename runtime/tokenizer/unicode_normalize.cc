#include "runtime/tokenizer/unicode_normalize.h"

#include <algorithm>
#include <vector>

#include "runtime/tokenizer/utf8.h"

#ifdef LLMRT_TOKENIZER_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utypes.h>
#endif

namespace llmrt::tokenizer_internal {
namespace {

bool IsAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

#ifdef LLMRT_TOKENIZER_ICU
std::vector<UChar> ToUtf16(std::string_view text) {
  std::vector<UChar> utf16(text.size() + 1);
  int32_t length = 0;
  UErrorCode error = U_ZERO_ERROR;
  u_strFromUTF8(utf16.data(), static_cast<int32_t>(utf16.size()), &length, text.data(),
                static_cast<int32_t>(text.size()), &error);
  utf16.resize(U_SUCCESS(error) ? length : 0);
  return utf16;
}

std::string ToUtf8(const UChar* text, int32_t length) {
  std::string utf8(static_cast<size_t>(length) * 3 + 1, '\0');
  int32_t utf8_length = 0;
  UErrorCode error = U_ZERO_ERROR;
  u_strToUTF8(utf8.data(), static_cast<int32_t>(utf8.size()), &utf8_length, text, length, &error);
  utf8.resize(U_SUCCESS(error) ? utf8_length : 0);
  return utf8;
}

std::string Normalize(const UNormalizer2* normalizer, std::string_view text) {
  const std::vector<UChar> input = ToUtf16(text);
  UErrorCode error = U_ZERO_ERROR;
  int32_t needed = unorm2_normalize(normalizer, input.data(), static_cast<int32_t>(input.size()),
                                    nullptr, 0, &error);
  std::vector<UChar> output(needed + 1);
  error = U_ZERO_ERROR;
  needed = unorm2_normalize(normalizer, input.data(), static_cast<int32_t>(input.size()),
                            output.data(), static_cast<int32_t>(output.size()), &error);
  if (U_FAILURE(error)) return std::string(text);
  return ToUtf8(output.data(), needed);
}
#endif

}  // namespace

#ifdef LLMRT_TOKENIZER_ICU
bool UnicodeNormalizationAvailable() { return true; }

std::string NormalizeNfc(std::string_view text) {
  if (IsAscii(text)) return std::string(text);
  UErrorCode error = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFCInstance(&error);
  return U_SUCCESS(error) ? Normalize(normalizer, text) : std::string(text);
}

std::string NormalizeNfkc(std::string_view text) {
  if (IsAscii(text)) return std::string(text);
  UErrorCode error = U_ZERO_ERROR;
  const UNormalizer2* normalizer = unorm2_getNFKCInstance(&error);
  return U_SUCCESS(error) ? Normalize(normalizer, text) : std::string(text);
}

std::string Lowercase(std::string_view text) {
  std::string result;
  result.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char byte = static_cast<unsigned char>(text[pos]);
    if (byte < 0x80) {
      result.push_back(static_cast<char>(byte >= 'A' && byte <= 'Z' ? byte + 32 : byte));
      ++pos;
      continue;
    }
    size_t length = ValidSequenceLength(text, pos);
    if (length == 0) length = 1;
    // One character at a time, so ICU sees no context (no final-sigma rule), like Rust's
    // char::to_lowercase.
    const std::vector<UChar> input = ToUtf16(text.substr(pos, length));
    UChar output[8];
    UErrorCode error = U_ZERO_ERROR;
    const int32_t out_length =
        u_strToLower(output, 8, input.data(), static_cast<int32_t>(input.size()), "", &error);
    if (U_SUCCESS(error)) {
      result += ToUtf8(output, out_length);
    } else {
      result.append(text.substr(pos, length));
    }
    pos += length;
  }
  return result;
}
#else
bool UnicodeNormalizationAvailable() { return false; }
std::string NormalizeNfc(std::string_view text) { return std::string(text); }
std::string NormalizeNfkc(std::string_view text) { return std::string(text); }
std::string Lowercase(std::string_view text) { return std::string(text); }
#endif

}  // namespace llmrt::tokenizer_internal
