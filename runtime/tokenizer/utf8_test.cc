#include "runtime/tokenizer/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace llmrt::tokenizer_internal {
namespace {

TEST(Utf8Test, ValidSequenceLengths) {
  EXPECT_EQ(ValidSequenceLength("a", 0), 1u);
  EXPECT_EQ(ValidSequenceLength("\xC3\xA9", 0), 2u);
  EXPECT_EQ(ValidSequenceLength("\xE4\xB8\xAD", 0), 3u);
  EXPECT_EQ(ValidSequenceLength("\xF0\x9F\x98\x80", 0), 4u);
  EXPECT_EQ(ValidSequenceLength("\xC0\x80", 0), 0u);          // overlong
  EXPECT_EQ(ValidSequenceLength("\xED\xA0\x80", 0), 0u);      // surrogate
  EXPECT_EQ(ValidSequenceLength("\xF4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(ValidSequenceLength("\xE4\xB8", 0), 0u);          // truncated
}

// Expected strings follow Python's bytes.decode("utf-8", "replace"), which matches Rust's
// from_utf8_lossy: one U+FFFD per maximal valid prefix, one per other invalid byte.
TEST(Utf8Test, LossyMatchesMaximalSubpartRule) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(ToValidUtf8Lossy("ab"), "ab");
  EXPECT_EQ(ToValidUtf8Lossy("\xE4\xB8"), fffd);
  EXPECT_EQ(ToValidUtf8Lossy("\xE4\xB8x"), fffd + "x");
  EXPECT_EQ(ToValidUtf8Lossy("\x80\x80"), fffd + fffd);
  EXPECT_EQ(ToValidUtf8Lossy("\xF0\x9F\x98"), fffd);
  EXPECT_EQ(ToValidUtf8Lossy("\xE0\x80\x80"), fffd + fffd + fffd);  // E0 needs A0..BF next
  EXPECT_EQ(ToValidUtf8Lossy("\xFF"
                             "a"),
            fffd + "a");
}

TEST(Utf8Test, IncompleteTail) {
  EXPECT_TRUE(EndsWithIncompleteSequence("a\xE4\xB8"));
  EXPECT_TRUE(EndsWithIncompleteSequence("\xF0"));
  EXPECT_FALSE(EndsWithIncompleteSequence("a\xE4\xB8\xAD"));
  EXPECT_FALSE(EndsWithIncompleteSequence("a\x80"));
  EXPECT_FALSE(EndsWithIncompleteSequence(""));
}

TEST(Utf8Test, WhitespaceIsUnicodeWhiteSpace) {
  for (char32_t c : {U' ', U'\t', U'\n', U'\r', U'\u00A0', U'\u3000', U'\u2009', U'\u0085'}) {
    EXPECT_TRUE(IsWhitespace(c)) << static_cast<uint32_t>(c);
  }
  for (char32_t c : {U'a', U'\u200B', U'\u2581', U'_'}) {
    EXPECT_FALSE(IsWhitespace(c)) << static_cast<uint32_t>(c);
  }
}

}  // namespace
}  // namespace llmrt::tokenizer_internal
