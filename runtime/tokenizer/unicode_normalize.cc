#include "runtime/tokenizer/unicode_normalize.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
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

// The one-level compatibility mapping of `code_point` (not Hangul), or an empty range.
std::pair<const char16_t*, size_t> CompatibilityMapping(char32_t code_point) {
  const auto* found =
      std::lower_bound(std::begin(kCompatibilityKeys), std::end(kCompatibilityKeys), code_point,
                       [](uint32_t key, char32_t value) { return (key >> 5) < value; });
  if (found == std::end(kCompatibilityKeys) || (*found >> 5) != code_point) return {nullptr, 0};
  const size_t index = found - std::begin(kCompatibilityKeys);
  return {kCompatibilityData + kCompatibilityOffsets[index], *found & 31};
}

// The canonical decomposition entry of `code_point` (not Hangul), or null.
const uint64_t* CanonicalMapping(char32_t code_point) {
  const auto* found = std::lower_bound(
      std::begin(kCanonicalDecompositions), std::end(kCanonicalDecompositions), code_point,
      [](uint64_t entry, char32_t value) { return (entry & kCodePointMask) < value; });
  if (found == std::end(kCanonicalDecompositions) || (*found & kCodePointMask) != code_point) {
    return nullptr;
  }
  return found;
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
    const auto [mapping, length] = CompatibilityMapping(code_point);
    if (length > 0) {
      for (size_t i = 0; i < length; ++i) Decompose(mapping[i], compatibility, out);
      return;
    }
  }
  if (const uint64_t* entry = CanonicalMapping(code_point)) {
    Decompose(static_cast<char32_t>(*entry >> 21 & kCodePointMask), compatibility, out);
    const auto second = static_cast<char32_t>(*entry >> 42 & kCodePointMask);
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

std::string NormalizeAll(std::string_view text, bool compatibility, bool compose) {
  std::vector<uint8_t> classes;
  const std::u32string decomposed = DecomposeOrdered(text, compatibility, &classes);
  return ToUtf8(compose ? ComposeAll(decomposed, classes) : decomposed);
}

// True when `code_point` has class 0, NFC (NFKC with `compatibility`) leaves it as it is, and it
// is never the second of a composition: nothing before it can change it or move past it. Above
// the BMP, a primary composite counts as not inert, which only costs time.
bool IsInert(char32_t code_point, bool compatibility) {
  if (code_point < 0x10000) {
    const uint32_t* bits = compatibility ? kNfkcInertBmp : kNfcInertBmp;
    return (bits[code_point >> 5] >> (code_point & 31) & 1) != 0;
  }
  if (CombiningClass(code_point) != 0 || CanonicalMapping(code_point) != nullptr) return false;
  if (compatibility && CompatibilityMapping(code_point).second > 0) return false;
  return !std::binary_search(std::begin(kSupplementaryCompositionSeconds),
                             std::end(kSupplementaryCompositionSeconds), code_point);
}

// NFC or NFKC, normalizing only the stretches around code points that are not inert: each
// stretch starts at the inert code point before it (which may compose with what follows) and
// ends before the next inert one, so stretches are independent (UAX #15, section 9). Most text
// (CJK, Cyrillic, precomposed Latin) is copied as it is.
std::string NormalizeComposed(std::string_view text, bool compatibility) {
  std::string out;
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t copied = 0;       // text[0, copied) is done
  size_t last_inert = 0;   // where the last inert code point starts
  size_t stretch = kNone;  // where the stretch being collected starts
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t length = 1;
    bool inert = true;  // the end of the text closes a stretch like an inert code point
    if (pos < text.size() && static_cast<unsigned char>(text[pos]) >= 0x80) {
      length = ValidSequenceLength(text, pos);
      if (length == 0) {
        length = 1;
        inert = false;  // becomes U+FFFD in the stretch
      } else {
        inert = IsInert(DecodeChar(text, pos, &length), compatibility);
      }
    }
    if (!inert) {
      if (stretch == kNone) stretch = last_inert;
    } else {
      if (stretch != kNone) {
        out.append(text.substr(copied, stretch - copied));
        out += NormalizeAll(text.substr(stretch, pos - stretch), compatibility, true);
        copied = pos;
        stretch = kNone;
      }
      last_inert = pos;
    }
    pos += length;
  }
  if (copied == 0) return std::string(text);
  out.append(text.substr(copied));
  return out;
}

std::string Normalize(std::string_view text, bool compatibility, bool compose) {
  if (IsAscii(text)) return std::string(text);
  return compose ? NormalizeComposed(text, compatibility)
                 : NormalizeAll(text, compatibility, false);
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
