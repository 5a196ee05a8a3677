#include "tests/e2e/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace llmc::testing {

namespace fs = std::filesystem;

CommandResult RunCommand(const std::string& command) {
  std::string scratch = MakeScratchDir("command");
  std::string out_path = scratch + "/stdout";
  std::string err_path = scratch + "/stderr";
  std::string full = command + " >" + out_path + " 2>" + err_path;
  int status = std::system(full.c_str());
  CommandResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.output = ReadFile(out_path);
  result.error = ReadFile(err_path);
  return result;
}

std::string ToolPath(const std::string& tool) { return std::string(LLMC_BIN_DIR) + "/" + tool; }

std::string SourcePath(const std::string& relative) {
  return std::string(LLMC_SOURCE_DIR) + "/" + relative;
}

namespace {

// The process's scratch root, removed when the process exits: ctest runs every test in a process
// of its own, so a root left behind per process fills /tmp (thousands of directories, tens of GB
// per suite run). LLMC_KEEP_TEST_SCRATCH=1 keeps them for a failure's inspection. Only the process
// that created the root removes it (not a forked child that exits).
const fs::path& ScratchRoot() {
  // Never destroyed: the exit handler below reads it after static destructors may have run.
  static const fs::path* const root = [] {
    const char* tmp = std::getenv("TMPDIR");
    static const pid_t owner = getpid();
    auto* path = new fs::path(fs::path(tmp ? tmp : "/tmp") / ("llmc-e2e-" + std::to_string(owner)));
    const char* keep = std::getenv("LLMC_KEEP_TEST_SCRATCH");
    if (keep == nullptr || std::string(keep) != "1") {
      std::atexit([] {
        if (getpid() != owner) return;
        std::error_code ignored;
        fs::remove_all(*root, ignored);
      });
    }
    return path;
  }();
  return *root;
}

}  // namespace

std::string MakeScratchDir(const std::string& name) {
  const fs::path& base = ScratchRoot();
  static int counter = 0;
  fs::path dir = base / (name + "-" + std::to_string(counter++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void CopyDir(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  // Test data may be read-only in the checkout; the copy is ours to modify.
  for (const auto& entry : fs::recursive_directory_iterator(to)) {
    fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  if (!out) throw std::runtime_error("cannot write " + path);
}

bool FileExists(const std::string& path) { return fs::exists(path); }

}  // namespace llmc::testing
