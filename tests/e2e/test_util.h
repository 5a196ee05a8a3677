// Helpers shared by the end-to-end tests: run the built tools, make scratch directories.
#ifndef LLMC_TESTS_E2E_TEST_UTIL_H_
#define LLMC_TESTS_E2E_TEST_UTIL_H_

#include <string>

namespace llmc::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout
  std::string error;   // stderr
};

// Runs `command` through /bin/sh, capturing stdout and stderr separately.
CommandResult RunCommand(const std::string& command);

// build/bin/<tool>, from the LLMC_BIN_DIR compile definition.
std::string ToolPath(const std::string& tool);
// A path inside the source tree, from the LLMC_SOURCE_DIR compile definition.
std::string SourcePath(const std::string& relative);

// A fresh empty directory under the test's temporary directory; removed by the caller's
// process exit (ctest runs each test in its own process).
std::string MakeScratchDir(const std::string& name);
void CopyDir(const std::string& from, const std::string& to);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);
bool FileExists(const std::string& path);

}  // namespace llmc::testing

#endif  // LLMC_TESTS_E2E_TEST_UTIL_H_
