#include "runtime/tokenizer/utf8.h"

namespace llmrt::tokenizer_internal {
namespace {

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Number of bytes of text[pos..] that form a prefix of some valid sequence (at least 1 when the
// lead byte can start a sequence), following the ranges of Unicode table 3-7 that Rust's and
// Python's decoders use to decide where an invalid sequence ends.
size_t ValidPrefixLength(std::string_view text, size_t pos, size_t* needed) {
  const unsigned char lead = static_cast<unsigned char>(text[pos]);
  unsigned char second_low = 0x80, second_high = 0xBF;
  if (lead < 0x80) {
    *needed = 1;
    return 1;
  } else if (lead >= 0xC2 && lead <= 0xDF) {
    *needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    *needed = 3;
    if (lead == 0xE0) second_low = 0xA0;
    if (lead == 0xED) second_high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    *needed = 4;
    if (lead == 0xF0) second_low = 0x90;
    if (lead == 0xF4) second_high = 0x8F;
  } else {
    *needed = 0;
    return 0;
  }
  size_t length = 1;
  while (length < *needed && pos + length < text.size()) {
    const unsigned char byte = static_cast<unsigned char>(text[pos + length]);
    if (length == 1 ? (byte < second_low || byte > second_high) : !IsContinuation(byte)) break;
    ++length;
  }
  return length;
}

}  // namespace

size_t ValidSequenceLength(std::string_view text, size_t pos) {
  size_t needed = 0;
  const size_t length = ValidPrefixLength(text, pos, &needed);
  return length == needed ? length : 0;
}

char32_t DecodeChar(std::string_view text, size_t pos, size_t* length) {
  const unsigned char lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) {
    *length = 1;
    return lead;
  }
  size_t count = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  char32_t code_point = lead & (0x7F >> count);
  for (size_t i = 1; i < count; ++i) {
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  }
  *length = count;
  return code_point;
}

void AppendUtf8(char32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

std::string ToValidUtf8Lossy(std::string_view bytes) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t needed = 0;
    const size_t length = ValidPrefixLength(bytes, pos, &needed);
    if (length != 0 && length == needed) {
      out.append(bytes.substr(pos, length));
      pos += length;
    } else {
      out.append(kReplacement);
      pos += length == 0 ? 1 : length;
    }
  }
  return out;
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = ValidSequenceLength(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

bool EndsWithIncompleteSequence(std::string_view bytes) {
  // A sequence is at most 4 bytes, so only the last 3 can begin an unfinished one.
  const size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t pos = first; pos < bytes.size(); ++pos) {
    size_t needed = 0;
    const size_t length = ValidPrefixLength(bytes, pos, &needed);
    if (length > 0 && length < needed && pos + length == bytes.size()) return true;
  }
  return false;
}

bool IsWhitespace(char32_t code_point) {
  switch (code_point) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return code_point >= 0x2000 && code_point <= 0x200A;
  }
}

}  // namespace llmrt::tokenizer_internal
