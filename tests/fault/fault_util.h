// Shared by the file fault tests: run a tool on a damaged input under a time limit and check
// that it ended the way a tool may end on bad input.
#ifndef LLMRT_TESTS_FAULT_FAULT_UTIL_H_
#define LLMRT_TESTS_FAULT_FAULT_UTIL_H_

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_util.h"

namespace llmrt::fault {

// 120 s per run: a run takes well under a second here, a few seconds sanitized on a busy
// machine; only a hang reaches the limit. `timeout` exits 124 (137 after the KILL).
inline ::llmc::testing::CommandResult RunLimited(const std::string& command) {
  return ::llmc::testing::RunCommand("timeout -k 5 120 " + command);
}

// One shell word: single-quoted, embedded single quotes as '\'' (so quoted commands nest).
inline std::string Quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

// The ways a tool may end on damaged input: exit 0 (only where `success_allowed`), or exit 1
// with exactly one error line `error_prefix...` on stderr. Any other stderr line (a sanitizer
// report, an assertion, a stack trace) fails, as do a signal, a hang and other exit codes.
// `info_prefix` marks the tool's informational lines ("[llmrt] ...").
inline void ExpectCleanEnd(const ::llmc::testing::CommandResult& result, bool success_allowed,
                           const std::string& error_prefix, const std::string& info_prefix,
                           const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_NE(result.exit_code, 124) << "hung (killed by timeout)";
  EXPECT_NE(result.exit_code, 137) << "hung (killed by timeout)";
  if (success_allowed) {
    EXPECT_TRUE(result.exit_code == 0 || result.exit_code == 1)
        << "exit " << result.exit_code << "\n"
        << result.error;
  } else {
    EXPECT_EQ(result.exit_code, 1) << result.error;
  }
  int error_lines = 0;
  for (absl::string_view line : absl::StrSplit(result.error, '\n', absl::SkipEmpty())) {
    // llmc redraws its progress line with "\r\033[K"; none appears with --quiet.
    if (absl::StartsWith(line, error_prefix)) {
      ++error_lines;
    } else {
      EXPECT_TRUE(!info_prefix.empty() && absl::StartsWith(line, info_prefix))
          << "unexpected stderr line: " << line << "\nfull stderr:\n"
          << result.error;
    }
  }
  EXPECT_EQ(error_lines, result.exit_code == 1 ? 1 : 0) << result.error;
}

}  // namespace llmrt::fault

#endif  // LLMRT_TESTS_FAULT_FAULT_UTIL_H_
