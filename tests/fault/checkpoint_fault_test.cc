// Damaged checkpoints through `llmc compile`, and disk full while it writes the plan.
//
// A safetensors file is an 8-byte little-endian header length, that many bytes of JSON, then
// the tensor data. Truncated anywhere, the compile must fail with one error line and leave no
// plan (nor a temporary file) in the output directory; with a byte changed it may also succeed
// (a changed weight is still a weight). Disk full is RLIMIT_FSIZE in the child with SIGXFSZ
// ignored, so write() fails with EFBIG as it would with ENOSPC on a full disk.
#include <dirent.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/test_util.h"
#include "tests/fault/fault_util.h"

namespace llmrt::fault {
namespace {

using ::llmc::testing::CommandResult;
using ::llmc::testing::CopyDir;
using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;
using ::llmc::testing::WriteFile;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* handle = opendir(dir.c_str())) {
    while (const dirent* entry = readdir(handle)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    closedir(handle);
  }
  return names;
}

class CheckpointFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = MakeScratchDir("checkpoint");
    CopyDir(SourcePath("tests/data/stories260K"), model_dir_);
    out_dir_ = MakeScratchDir("out");
    weights_ = ReadFile(model_dir_ + "/model.safetensors");
    ASSERT_GT(weights_.size(), 8u);
    std::memcpy(&header_length_, weights_.data(), 8);
    ASSERT_LT(8 + header_length_, weights_.size());
  }

  // `prefix` runs before llmc in the same shell (ulimit, trap).
  CommandResult Compile(const std::string& prefix = "") {
    const std::string command = Quote(LLMRT_FAULT_LLMC) + " compile " + Quote(model_dir_) + " -o " +
                                Quote(out_dir_ + "/model.plan") + " --quiet";
    if (prefix.empty()) return RunLimited(command);
    return RunLimited("bash -c " + Quote(prefix + " exec " + command));
  }

  // After a failed compile the output directory is empty; after a successful one it holds
  // exactly the plan, which is then removed for the next case.
  void CheckCompile(const CommandResult& result, bool success_allowed, const std::string& what) {
    ExpectCleanEnd(result, success_allowed, "llmc: error: ", "", what);
    const std::vector<std::string> left = ListDir(out_dir_);
    if (result.exit_code == 0) {
      EXPECT_EQ(left, std::vector<std::string>({"model.plan"})) << what;
      std::remove((out_dir_ + "/model.plan").c_str());
    } else {
      EXPECT_TRUE(left.empty()) << what << ": left " << left.front();
    }
  }

  std::string model_dir_;
  std::string out_dir_;
  std::string weights_;
  uint64_t header_length_ = 0;
};

TEST_F(CheckpointFaultTest, IntactCheckpointCompiles) {
  CheckCompile(Compile(), /*success_allowed=*/true, "intact");
  const CommandResult again = Compile();
  EXPECT_EQ(again.exit_code, 0) << again.error;
}

TEST_F(CheckpointFaultTest, TruncatedSafetensors) {
  const uint64_t data_start = 8 + header_length_;
  const std::pair<const char*, uint64_t> cuts[] = {
      {"empty", 0},
      {"inside the header length", 4},
      {"header length only", 8},
      {"inside the header", 8 + header_length_ / 2},
      {"one byte before the data", data_start - 1},
      {"at the data", data_start},
      {"inside the data", (data_start + weights_.size()) / 2},
      {"one byte short", weights_.size() - 1},
  };
  for (const auto& [name, size] : cuts) {
    WriteFile(model_dir_ + "/model.safetensors", weights_.substr(0, size));
    CheckCompile(Compile(), /*success_allowed=*/false, absl::StrCat("truncated ", name));
  }
}

TEST_F(CheckpointFaultTest, RandomByteChangesInSafetensors) {
  std::mt19937_64 random(20261121);
  for (int index = 0; index < 24; ++index) {
    // Two thirds in the length and the JSON header, where the parser works; the rest in data.
    const uint64_t offset =
        index % 3 != 2 ? random() % (8 + header_length_)
                       : 8 + header_length_ + random() % (weights_.size() - 8 - header_length_);
    const uint8_t mask = static_cast<uint8_t>(1 + random() % 255);
    std::string damaged = weights_;
    damaged[offset] = static_cast<char>(static_cast<uint8_t>(damaged[offset]) ^ mask);
    WriteFile(model_dir_ + "/model.safetensors", damaged);
    CheckCompile(Compile(), /*success_allowed=*/true,
                 absl::StrCat("byte ", offset, " ^= ", static_cast<int>(mask)));
  }
}

TEST_F(CheckpointFaultTest, DamagedConfigAndTokenizer) {
  const std::string config = ReadFile(model_dir_ + "/config.json");
  const std::string tokenizer = ReadFile(model_dir_ + "/tokenizer.json");
  for (const auto& [file, text] : {std::pair<std::string, std::string>{"config.json", config},
                                   {"tokenizer.json", tokenizer}}) {
    for (const uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{text.size() / 2}}) {
      WriteFile(model_dir_ + "/" + file, text.substr(0, size));
      CheckCompile(Compile(), /*success_allowed=*/false,
                   absl::StrCat(file, " truncated to ", size, " bytes"));
    }
    WriteFile(model_dir_ + "/" + file, text);
  }
}

// The sharded fixture: its index truncated and one shard truncated inside its header.
TEST_F(CheckpointFaultTest, TruncatedShardedIndexAndShard) {
  model_dir_ = MakeScratchDir("sharded");
  CopyDir(SourcePath("tests/fixtures/llama_sharded_bf16"), model_dir_);
  CheckCompile(Compile(), /*success_allowed=*/true, "intact sharded");
  const std::string index = ReadFile(model_dir_ + "/model.safetensors.index.json");
  WriteFile(model_dir_ + "/model.safetensors.index.json", index.substr(0, index.size() / 2));
  CheckCompile(Compile(), /*success_allowed=*/false, "index truncated");
  WriteFile(model_dir_ + "/model.safetensors.index.json", index);
  const std::string shard_path = model_dir_ + "/model-00002-of-00004.safetensors";
  const std::string shard = ReadFile(shard_path);
  WriteFile(shard_path, shard.substr(0, 100));
  CheckCompile(Compile(), /*success_allowed=*/false, "shard 2 truncated inside its header");
}

// The plan is ~1.1 MB (1088 KiB). A file size limit below that makes a write fail in the first
// blob, in the middle of the blobs and in the final padding; each must end in one error line
// with nothing left behind. The limit at the plan's size succeeds: the limit was the cause.
TEST_F(CheckpointFaultTest, DiskFullWhileWritingThePlan) {
  CheckCompile(Compile(), /*success_allowed=*/true, "unlimited");
  const CommandResult sized = Compile();
  ASSERT_EQ(sized.exit_code, 0) << sized.error;
  const uint64_t plan_kib = ReadFile(out_dir_ + "/model.plan").size() / 1024;
  std::remove((out_dir_ + "/model.plan").c_str());
  ASSERT_GT(plan_kib, 64u);
  // Not 0 KiB: the limit applies to the captured stderr file too, and the message must fit.
  for (const uint64_t limit_kib : {uint64_t{1}, uint64_t{64}, plan_kib / 2, plan_kib - 1}) {
    const std::string what = absl::StrCat("file size limit ", limit_kib, " KiB");
    const CommandResult result = Compile(absl::StrCat("trap '' XFSZ; ulimit -f ", limit_kib, ";"));
    CheckCompile(result, /*success_allowed=*/false, what);
    EXPECT_TRUE(absl::StrContains(result.error, "File too large")) << what << ": " << result.error;
  }
  CheckCompile(Compile(absl::StrCat("trap '' XFSZ; ulimit -f ", plan_kib, ";")),
               /*success_allowed=*/true, "limit at the plan's size");
  EXPECT_TRUE(ListDir(out_dir_).empty());
}

}  // namespace
}  // namespace llmrt::fault
