#include "runtime/sampling/stop_strings.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::sampling {
namespace {

// Feeds `pieces` one by one; returns everything emitted (Finish() included unless stopped).
std::string Stream(StopStringMatcher& matcher, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& piece : pieces) out += matcher.Push(piece);
  out += matcher.Finish();
  return out;
}

TEST(StopStringMatcherTest, NoStopsPassesEverythingThrough) {
  StopStringMatcher matcher({});
  EXPECT_EQ(matcher.Push("hello"), "hello");
  EXPECT_EQ(matcher.Push(" world"), " world");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStringMatcherTest, MatchAcrossPiecesIsNeverEmitted) {
  StopStringMatcher matcher({"the end"});
  EXPECT_EQ(matcher.Push("and so th"), "and so ");  // "th" might begin "the end"
  EXPECT_EQ(matcher.Push("e e"), "");
  EXPECT_EQ(matcher.Push("nd. More"), "");
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.matched(), "the end");
  EXPECT_EQ(matcher.Push("text"), "");
  EXPECT_EQ(matcher.Finish(), "");
}

TEST(StopStringMatcherTest, FalseStartIsReleased) {
  StopStringMatcher matcher({"STOP"});
  EXPECT_EQ(Stream(matcher, {"a ST", "OR", "M"}), "a STORM");
  EXPECT_FALSE(matcher.stopped());
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopsWins) {
  StopStringMatcher matcher({"cd", "bcdx", "b"});
  EXPECT_EQ(Stream(matcher, {"a", "bc", "de"}), "a");
  EXPECT_EQ(matcher.matched(), "b");
}

TEST(StopStringMatcherTest, StopInsideOnePieceTruncatesIt) {
  StopStringMatcher matcher({"\n\n"});
  EXPECT_EQ(Stream(matcher, {"line one\n", "\nline two"}), "line one");
}

TEST(StopStringMatcherTest, MultiByteCharactersStayWhole) {
  // "é" is C3 A9; the stop begins with it, so "é" is held back until it cannot match.
  StopStringMatcher matcher({"\xc3\xa9t\xc3\xa9"});
  std::string out = matcher.Push("caf\xc3\xa9");
  EXPECT_EQ(out, "caf");
  EXPECT_EQ(matcher.Push("!"), "\xc3\xa9!");
}

}  // namespace
}  // namespace llmrt::sampling
