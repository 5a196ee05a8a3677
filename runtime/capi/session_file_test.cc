#include "runtime/capi/session_file.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace llmrt::capi {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/llmrt_session_file_" +
         std::to_string(getpid()) + "_" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(SessionFileTest, RoundTripKeepsChecksumAndTokens) {
  const std::string path = TempPath("round_trip");
  SessionState state;
  state.plan_checksum = 0x0123456789abcdefULL;
  state.tokens = {1, 403, 407, 261, 378, 0, 2147483647};
  ASSERT_TRUE(WriteSessionFile(path, state).ok());
  EXPECT_EQ(ReadAll(path).size(), kSessionHeaderSize + 4 * state.tokens.size());
  absl::StatusOr<SessionState> read = ReadSessionFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->plan_checksum, state.plan_checksum);
  EXPECT_EQ(read->tokens, state.tokens);
  std::remove(path.c_str());
}

TEST(SessionFileTest, HeaderIsLittleEndianAsDocumented) {
  const std::string path = TempPath("layout");
  SessionState state;
  state.plan_checksum = 0x1122334455667788ULL;
  state.tokens = {0x01020304};
  ASSERT_TRUE(WriteSessionFile(path, state).ok());
  const std::string bytes = ReadAll(path);
  ASSERT_EQ(bytes.size(), 44u);
  EXPECT_EQ(bytes.substr(0, 8), "LLMRTSES");
  EXPECT_EQ(bytes[8], 1);                            // version
  EXPECT_EQ(static_cast<uint8_t>(bytes[16]), 0x88);  // checksum, low byte first
  EXPECT_EQ(bytes[24], 1);                           // num_tokens
  EXPECT_EQ(bytes.substr(40), std::string("\x04\x03\x02\x01", 4));
  std::remove(path.c_str());
}

TEST(SessionFileTest, DamageIsDataLossNamingTheFile) {
  const std::string path = TempPath("damaged");
  SessionState state;
  state.tokens = {5, 6, 7};
  ASSERT_TRUE(WriteSessionFile(path, state).ok());
  const std::string good = ReadAll(path);

  WriteAll(path, good.substr(0, good.size() - 2));  // truncated
  absl::Status truncated = ReadSessionFile(path).status();
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(truncated.message().find(path), std::string::npos) << truncated;
  EXPECT_NE(truncated.message().find("3 tokens"), std::string::npos) << truncated;

  std::string flipped = good;
  flipped.back() ^= 1;  // a token changed
  WriteAll(path, flipped);
  EXPECT_EQ(ReadSessionFile(path).status().code(), absl::StatusCode::kDataLoss);

  WriteAll(path, "LLMPLAN\0 not a session");
  EXPECT_EQ(ReadSessionFile(path).status().code(), absl::StatusCode::kDataLoss);

  std::string future = good;
  future[8] = 2;  // version 2
  WriteAll(path, future);
  absl::Status version = ReadSessionFile(path).status();
  EXPECT_EQ(version.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(version.message().find("version 2"), std::string::npos) << version;

  std::string huge = good;
  huge[31] = 0x7f;  // num_tokens near 2^63: must not overflow into a small size
  WriteAll(path, huge);
  EXPECT_EQ(ReadSessionFile(path).status().code(), absl::StatusCode::kDataLoss);
  std::remove(path.c_str());
}

TEST(SessionFileTest, MissingFileAndUnwritableDirectory) {
  EXPECT_EQ(ReadSessionFile(TempPath("does_not_exist")).status().code(),
            absl::StatusCode::kNotFound);
  SessionState state;
  absl::Status status = WriteSessionFile("/nonexistent-dir/x.session", state);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/nonexistent-dir/x.session"), std::string::npos) << status;
}

}  // namespace
}  // namespace llmrt::capi
