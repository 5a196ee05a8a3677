// The server's API-key check (issue 9's security list): the key is compared in constant time,
// so a client cannot find it a byte at a time from response times. Timing itself is not
// measured here (a timed test on a shared machine proves nothing); instead:
//   - ConstantTimeEquals agrees with == on every kind of pair (equal, one byte changed at each
//     position, prefixes and extensions, empty, embedded NUL, high bytes);
//   - the server compares the key through ConstantTimeEquals and nothing else: a source check of
//     runtime/server/server.cc that fails if a plain comparison (==, compare, memcmp, strcmp)
//     of the key appears or the ConstantTimeEquals call goes;
//   - the comparison visits the whole of both strings: ConstantTimeEquals has no early exit
//     (no `return` inside its loop, checked on its source).
// tests/server/http_test.cc (ApiKeyGuardsEverythingButHealth) checks the HTTP side: a missing,
// shorter, longer or differently-schemed key is a 401 OpenAI error, /health stays open.
#include <cstdint>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "runtime/server/server.h"
#include "tests/e2e/test_util.h"

namespace llmrt {
namespace {

using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;

TEST(ApiKeyTest, ConstantTimeEqualsAgreesWithEquality) {
  const std::string key = "sk-llmrt-0123456789abcdef";
  std::vector<std::string> others = {
      "",        key.substr(0, 1),           key.substr(0, key.size() - 1),
      key + "x", key + std::string(1, '\0'), std::string(4096, 'k')};
  for (size_t position = 0; position < key.size(); ++position) {
    std::string changed = key;
    changed[position] ^= 0x01;  // one bit: the smallest difference
    others.push_back(changed);
    changed[position] = static_cast<char>(0x80 | position);  // a high byte
    others.push_back(changed);
  }
  std::mt19937 random(9);
  for (int draw = 0; draw < 500; ++draw) {
    std::string text(random() % 8, '\0');
    for (char& c : text) c = static_cast<char>(random() % 4);  // small alphabet: many collisions
    others.push_back(text);
  }
  EXPECT_TRUE(server::ConstantTimeEquals(key, key));
  EXPECT_TRUE(server::ConstantTimeEquals("", ""));
  for (const std::string& other : others) {
    EXPECT_EQ(server::ConstantTimeEquals(key, other), key == other) << other;
    EXPECT_EQ(server::ConstantTimeEquals(other, key), key == other) << other;
    for (const std::string& third : {others[0], others[others.size() - 1], others[7]}) {
      EXPECT_EQ(server::ConstantTimeEquals(other, third), other == third);
    }
  }
}

// The lines of runtime/server/server.cc that mention the configured key.
std::vector<std::string> KeyLines(const std::string& source) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(source, '\n')) {
    if (absl::StrContains(line, "api_key")) lines.emplace_back(line);
  }
  return lines;
}

TEST(ApiKeyTest, ServerComparesTheKeyOnlyInConstantTime) {
  const std::string source = ReadFile(SourcePath("runtime/server/server.cc"));
  ASSERT_FALSE(source.empty());
  int constant_time_uses = 0;
  // Any comparison of the key other than ConstantTimeEquals: ==/!= on either side, compare() and
  // std::equal either way round, memcmp/strcmp/strncmp/bcmp, starts_with/rfind/find on the key.
  const std::regex plain(
      R"(api_key\s*[!=]=|[!=]=\s*\w*\.?api_key|api_key\.(compare|find|rfind|starts_with)|)"
      R"((compare|equal|memcmp|strcmp|strncmp|bcmp)\s*\([^;]*api_key)");
  for (const std::string& line : KeyLines(source)) {
    SCOPED_TRACE(line);
    EXPECT_FALSE(std::regex_search(line, plain)) << "the API key compared in variable time";
    if (absl::StrContains(line, "ConstantTimeEquals(") && absl::StrContains(line, "api_key"))
      ++constant_time_uses;
  }
  EXPECT_EQ(constant_time_uses, 1) << "the authorization check no longer uses ConstantTimeEquals";
}

TEST(ApiKeyTest, ConstantTimeEqualsHasNoEarlyExit) {
  const std::string source = ReadFile(SourcePath("runtime/server/server.cc"));
  const size_t start = source.find("bool ConstantTimeEquals(");
  ASSERT_NE(start, std::string::npos);
  const size_t loop = source.find("for (", start);
  const size_t end = source.find("\n}\n", start);
  ASSERT_NE(loop, std::string::npos);
  ASSERT_LT(loop, end);
  const std::string loop_text = source.substr(loop, end - loop);
  // One return, after the loop; no break, no short-circuit operators inside it.
  const size_t loop_end = loop_text.rfind("return");
  ASSERT_NE(loop_end, std::string::npos);
  const std::string body = loop_text.substr(0, loop_end);
  EXPECT_FALSE(absl::StrContains(body, "return")) << body;
  EXPECT_FALSE(absl::StrContains(body, "break")) << body;
  EXPECT_FALSE(absl::StrContains(body, "&&")) << body;
  EXPECT_FALSE(absl::StrContains(body, "||")) << body;
}

}  // namespace
}  // namespace llmrt
