// The NFC, NFKC, NFD, NFKD and Lowercase of every code point, and of random sequences of
// combining marks, against HF tokenizers' own normalizers (testdata/unicode/*.tsv, made by
// testdata/unicode/make_expected.py with tokenizers; the format is described there).
#include "runtime/tokenizer/unicode_normalize.h"

#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/tokenizer/utf8.h"

namespace llmrt::tokenizer_internal {
namespace {

constexpr char kTestdata[] = LLMRT_TOKENIZER_TESTDATA "/unicode";
constexpr int kForms = 5;
constexpr std::array<const char*, kForms> kFormNames = {"NFC", "NFKC", "NFD", "NFKD", "LOWERCASE"};

std::string Apply(int form, const std::string& text) {
  switch (form) {
    case 0:
      return NormalizeNfc(text);
    case 1:
      return NormalizeNfkc(text);
    case 2:
      return NormalizeNfd(text);
    case 3:
      return NormalizeNfkd(text);
    default:
      return Lowercase(text);
  }
}

std::vector<std::string> Split(const std::string& line, char separator) {
  std::vector<std::string> fields;
  size_t pos = 0;
  while (true) {
    const size_t end = line.find(separator, pos);
    fields.push_back(line.substr(pos, end == std::string::npos ? std::string::npos : end - pos));
    if (end == std::string::npos) return fields;
    pos = end + 1;
  }
}

// "41 301" -> "Á" as UTF-8.
std::string FromHex(const std::string& field) {
  std::string text;
  for (const std::string& hex : Split(field, ' ')) {
    if (!hex.empty()) AppendUtf8(static_cast<char32_t>(std::stoul(hex, nullptr, 16)), &text);
  }
  return text;
}

std::string ToHex(const std::string& text) {
  std::string hex;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    char buffer[16];
    std::snprintf(buffer, sizeof(buffer), "%s%X", hex.empty() ? "" : " ",
                  static_cast<unsigned>(DecodeChar(text, pos, &length)));
    hex += buffer;
    pos += length;
  }
  return hex;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  EXPECT_TRUE(file.good()) << path;
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(file, line)) lines.push_back(line);
  return lines;
}

uint64_t Fnv1a(const std::string& data, uint64_t hash) {
  for (unsigned char byte : data) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

TEST(UnicodeNormalizeTest, EveryCodePointMatchesHf) {
  const std::vector<std::string> lines = ReadLines(std::string(kTestdata) + "/code_points.tsv");
  ASSERT_GT(lines.size(), 6000u);
  // Expected outputs of the listed code points; every other one maps to itself.
  std::map<char32_t, std::array<std::string, kForms>> listed;
  for (size_t index = 1; index < lines.size(); ++index) {
    const std::vector<std::string> fields = Split(lines[index], '\t');
    ASSERT_EQ(fields.size(), 1u + kForms) << "code_points.tsv line " << index + 1;
    const auto code_point = static_cast<char32_t>(std::stoul(fields[0], nullptr, 16));
    std::string self;
    AppendUtf8(code_point, &self);
    std::array<std::string, kForms> expected;
    for (int form = 0; form < kForms; ++form) {
      const std::string& field = fields[1 + form];
      if (field == "=") {
        expected[form] = expected[form - 1];
      } else {
        expected[form] = field.empty() ? self : FromHex(field);
      }
    }
    listed[code_point] = expected;
  }

  std::array<uint64_t, kForms> hashes;
  hashes.fill(0xcbf29ce484222325ull);
  std::array<int, kForms> mismatches{};
  for (char32_t code_point = 0; code_point < 0x110000; ++code_point) {
    if (code_point >= 0xD800 && code_point <= 0xDFFF) continue;
    std::string text;
    AppendUtf8(code_point, &text);
    const auto row = listed.find(code_point);
    const bool hangul = code_point >= 0xAC00 && code_point <= 0xD7A3;
    for (int form = 0; form < kForms; ++form) {
      const std::string actual = Apply(form, text);
      hashes[form] = Fnv1a(actual + "\xff", hashes[form]);
      if (hangul) continue;  // not listed; the hash covers them
      const std::string& expected = row == listed.end() ? text : row->second[form];
      if (actual != expected && ++mismatches[form] <= 10) {
        ADD_FAILURE() << kFormNames[form] << " of U+" << ToHex(text) << ": HF gives ["
                      << ToHex(expected) << "], we give [" << ToHex(actual) << "]";
      }
    }
  }
  // The hashes in the header cover every code point, Hangul syllables included.
  const std::string& header = lines[0];
  for (int form = 0; form < kForms; ++form) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hashes[form]));
    EXPECT_NE(header.find(std::string("\"") + kFormNames[form] + "\": \"" + hex + "\""),
              std::string::npos)
        << kFormNames[form] << ": hash of all outputs " << hex << " differs from HF's in "
        << header;
    EXPECT_EQ(mismatches[form], 0) << kFormNames[form];
  }
}

TEST(UnicodeNormalizeTest, CombiningSequencesMatchHf) {
  const std::vector<std::string> lines = ReadLines(std::string(kTestdata) + "/sequences.tsv");
  ASSERT_GE(lines.size(), 1000u);
  int failures = 0;
  for (size_t index = 0; index < lines.size(); ++index) {
    const std::vector<std::string> fields = Split(lines[index], '\t');
    ASSERT_EQ(fields.size(), 4u) << "sequences.tsv line " << index + 1;
    const std::string input = FromHex(fields[0]);
    const std::array<std::string, 3> actual = {NormalizeNfc(input), NormalizeNfkc(input),
                                               Lowercase(input)};
    const std::array<const char*, 3> names = {"NFC", "NFKC", "LOWERCASE"};
    for (int form = 0; form < 3; ++form) {
      const std::string expected = fields[1 + form].empty() ? input : FromHex(fields[1 + form]);
      if (actual[form] != expected && ++failures <= 20) {
        ADD_FAILURE() << names[form] << " of [" << fields[0] << "]: HF gives [" << ToHex(expected)
                      << "], we give [" << ToHex(actual[form]) << "]";
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

// The two cases where ICU's newer tables (Unicode 15) disagreed with HF (Unicode 9.0).
TEST(UnicodeNormalizeTest, MarksNewerThanUnicode9AreNotReorderedOrComposed) {
  // U+07FD has combining class 220 only since Unicode 11: HF keeps it after U+0301 (230).
  EXPECT_EQ(ToHex(NormalizeNfc("\u0301\u07fd")), "301 7FD");
  // U+11935 U+11930 compose to U+11938 only since Unicode 13.
  EXPECT_EQ(ToHex(NormalizeNfc("\U00011935\U00011930")), "11935 11930");
  // Rust's lowercase is Unicode 17: U+A7CE (new in 17.0) -> U+A7CF; İ -> i + U+0307.
  EXPECT_EQ(ToHex(Lowercase("\uA7CE\u0130\u03A3")), "A7CF 69 307 3C3");
}

TEST(UnicodeNormalizeTest, InvalidUtf8DoesNotCrash) {
  EXPECT_EQ(NormalizeNfc("a\xff\xe4\xb8"), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Lowercase("A\xff"), "a\xff");
}

}  // namespace
}  // namespace llmrt::tokenizer_internal
