#include "runtime/tokenizer/unicode_normalize.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "runtime/tokenizer/utf8.h"

namespace llmrt::tokenizer_internal {
namespace {

#include "runtime/tokenizer/unicode_tables.inc"

constexpr uint64_t kCodePointMask = (uint64_t{1} << 21) - 1;

// Hangul syllables decompose and compose by arithmetic (The Unicode Standard, section 3.12).
constexpr char32_t kHangulFirst = 0xAC00;
constexpr char32_t kLeadingFirst = 0x1100;
constexpr char32_t kVowelFirst = 0x1161;
constexpr char32_t kTrailingBase = 0x11A7;  // one before the first trailing consonant
constexpr char32_t kLeadingCount = 19;
constexpr char32_t kVowelCount = 21;
constexpr char32_t kTrailingCount = 28;
constexpr char32_t kHangulCount = kLeadingCount * kVowelCount * kTrailingCount;  // 11,172

bool IsAscii(std::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::u32string ToCodePoints(std::string_view text) {
  std::u32string code_points;
  code_points.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = ValidSequenceLength(text, pos);
    if (length == 0) {
      code_points.push_back(0xFFFD);
      ++pos;
      continue;
    }
    code_points.push_back(DecodeChar(text, pos, &length));
    pos += length;
  }
  return code_points;
}

std::string ToUtf8(const std::u32string& code_points) {
  std::string text;
  text.reserve(code_points.size() * 2);
  for (char32_t code_point : code_points) AppendUtf8(code_point, &text);
  return text;
}

uint8_t CombiningClass(char32_t code_point) {
  // Every code point below the first run (U+0300) has class 0, so ASCII and Latin-1 never search.
  if (code_point < kCombiningClassRuns[0].first) return 0;
  const auto* after = std::upper_bound(
      std::begin(kCombiningClassRuns), std::end(kCombiningClassRuns), code_point,
      [](char32_t value, const CombiningClassRun& run) { return value < run.first; });
  const CombiningClassRun& run = *(after - 1);
  return code_point - run.first <= run.count_minus_one ? run.combining_class : 0;
}

// Appends the full (recursive) decomposition of `code_point`.
void Decompose(char32_t code_point, bool compatibility, std::u32string* out) {
  if (code_point < 0xA0) {  // nothing below U+00A0 has a decomposition mapping
    out->push_back(code_point);
    return;
  }
  if (code_point - kHangulFirst < kHangulCount) {
    const char32_t index = code_point - kHangulFirst;
    out->push_back(kLeadingFirst + index / (kVowelCount * kTrailingCount));
    out->push_back(kVowelFirst + index % (kVowelCount * kTrailingCount) / kTrailingCount);
    if (index % kTrailingCount != 0) out->push_back(kTrailingBase + index % kTrailingCount);
    return;
  }
  if (compatibility) {
    const auto* found =
        std::lower_bound(std::begin(kCompatibilityKeys), std::end(kCompatibilityKeys), code_point,
                         [](uint32_t key, char32_t value) { return (key >> 5) < value; });
    if (found != std::end(kCompatibilityKeys) && (*found >> 5) == code_point) {
      const size_t index = found - std::begin(kCompatibilityKeys);
      const size_t offset = kCompatibilityOffsets[index];
      for (size_t i = 0; i < (*found & 31); ++i) {
        Decompose(kCompatibilityData[offset + i], compatibility, out);
      }
      return;
    }
  }
  const auto* found = std::lower_bound(
      std::begin(kCanonicalDecompositions), std::end(kCanonicalDecompositions), code_point,
      [](uint64_t entry, char32_t value) { return (entry & kCodePointMask) < value; });
  if (found != std::end(kCanonicalDecompositions) && (*found & kCodePointMask) == code_point) {
    Decompose(static_cast<char32_t>(*found >> 21 & kCodePointMask), compatibility, out);
    const auto second = static_cast<char32_t>(*found >> 42 & kCodePointMask);
    if (second != 0) Decompose(second, compatibility, out);
    return;
  }
  out->push_back(code_point);
}

// The composite of a canonical pair, or 0.
char32_t Compose(char32_t first, char32_t second) {
  if (first - kLeadingFirst < kLeadingCount && second - kVowelFirst < kVowelCount) {
    return kHangulFirst +
           ((first - kLeadingFirst) * kVowelCount + (second - kVowelFirst)) * kTrailingCount;
  }
  if (first - kHangulFirst < kHangulCount && (first - kHangulFirst) % kTrailingCount == 0 &&
      second - kTrailingBase - 1 < kTrailingCount - 1) {
    return first + (second - kTrailingBase);
  }
  const uint64_t pair = uint64_t{first} << 42 | uint64_t{second} << 21;
  const auto* found = std::lower_bound(
      std::begin(kCompositions), std::end(kCompositions), pair,
      [](uint64_t entry, uint64_t value) { return (entry & ~kCodePointMask) < value; });
  if (found != std::end(kCompositions) && (*found & ~kCodePointMask) == pair) {
    return static_cast<char32_t>(*found & kCodePointMask);
  }
  return 0;
}

// Decomposes every character, then puts each run of non-starters in canonical order.
std::u32string DecomposeOrdered(std::string_view text, bool compatibility,
                                std::vector<uint8_t>* classes) {
  const std::u32string input = ToCodePoints(text);
  std::u32string decomposed;
  decomposed.reserve(input.size() + input.size() / 2);
  for (char32_t code_point : input) Decompose(code_point, compatibility, &decomposed);
  classes->resize(decomposed.size());
  for (size_t i = 0; i < decomposed.size(); ++i) (*classes)[i] = CombiningClass(decomposed[i]);
  // Insertion sort of each run of non-starters: the runs are short (a few marks) and it is
  // stable, as canonical ordering must be.
  for (size_t i = 1; i < decomposed.size(); ++i) {
    const uint8_t combining_class = (*classes)[i];
    if (combining_class == 0) continue;
    const char32_t code_point = decomposed[i];
    size_t j = i;
    while (j > 0 && (*classes)[j - 1] > combining_class) {
      (*classes)[j] = (*classes)[j - 1];
      decomposed[j] = decomposed[j - 1];
      --j;
    }
    (*classes)[j] = combining_class;
    decomposed[j] = code_point;
  }
  return decomposed;
}

// Canonical composition of a decomposed, ordered string (UAX #15, as the crate's Recompositions):
// a character joins the last starter unless a character between them has a class equal to or
// above its own.
std::u32string ComposeAll(const std::u32string& decomposed, const std::vector<uint8_t>& classes) {
  std::u32string composed;
  composed.reserve(decomposed.size());
  constexpr size_t kNoStarter = static_cast<size_t>(-1);
  size_t starter = kNoStarter;
  int last_class = -1;  // class of the last character kept after the starter; -1: none
  for (size_t i = 0; i < decomposed.size(); ++i) {
    const char32_t code_point = decomposed[i];
    const int combining_class = classes[i];
    if (starter != kNoStarter && (last_class < 0 || last_class < combining_class)) {
      const char32_t composite = Compose(composed[starter], code_point);
      if (composite != 0) {
        composed[starter] = composite;
        continue;
      }
    }
    if (combining_class == 0) {
      starter = composed.size();
      last_class = -1;
    } else if (starter != kNoStarter) {
      last_class = combining_class;
    }
    composed.push_back(code_point);
  }
  return composed;
}

std::string Normalize(std::string_view text, bool compatibility, bool compose) {
  if (IsAscii(text)) return std::string(text);
  std::vector<uint8_t> classes;
  const std::u32string decomposed = DecomposeOrdered(text, compatibility, &classes);
  return ToUtf8(compose ? ComposeAll(decomposed, classes) : decomposed);
}

}  // namespace

std::string NormalizeNfc(std::string_view text) { return Normalize(text, false, true); }
std::string NormalizeNfkc(std::string_view text) { return Normalize(text, true, true); }
std::string NormalizeNfd(std::string_view text) { return Normalize(text, false, false); }
std::string NormalizeNfkd(std::string_view text) { return Normalize(text, true, false); }

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
    if (length == 0) {  // not valid UTF-8: kept as it is, byte by byte
      result.push_back(static_cast<char>(byte));
      ++pos;
      continue;
    }
    const char32_t code_point = DecodeChar(text, pos, &length);
    pos += length;
    const auto* multiple = std::find_if(
        std::begin(kLowercaseMultiple), std::end(kLowercaseMultiple),
        [&](const LowercaseMultiple& entry) { return entry.code_point == code_point; });
    if (multiple != std::end(kLowercaseMultiple)) {
      for (char32_t mapped : multiple->mapping) {
        if (mapped != 0) AppendUtf8(mapped, &result);
      }
      continue;
    }
    char32_t lower = code_point;
    const auto* after = std::upper_bound(
        std::begin(kLowercaseRanges), std::end(kLowercaseRanges), code_point,
        [](char32_t value, const LowercaseRange& range) { return value < range.first; });
    if (after != std::begin(kLowercaseRanges)) {
      const LowercaseRange& range = *(after - 1);
      const char32_t offset = code_point - range.first;
      if (offset % range.stride == 0 && offset / range.stride < range.count) {
        lower = static_cast<char32_t>(static_cast<int32_t>(code_point) + range.delta);
      }
    }
    AppendUtf8(lower, &result);
  }
  return result;
}

}  // namespace llmrt::tokenizer_internal
