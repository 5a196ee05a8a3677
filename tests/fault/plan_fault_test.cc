// A plan truncated at every section boundary and with seeded random byte changes, through
// `llmrt inspect [--verify]` and `llmrt run [--verify]`: every run ends with an error or (for
// damage the format does not check without --verify: weight bytes, padding) a normal run;
// never a crash, a sanitizer report or a hang. Sections (runtime/plan/plan_format.h): the
// 64-byte header, the blobs, the meta, the zero padding to 64 KiB.
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/plan/plan_format.h"
#include "runtime/plan/proto/plan.pb.h"
#include "tests/e2e/test_util.h"
#include "tests/fault/fault_util.h"

namespace llmrt::fault {
namespace {

using ::llmc::testing::CommandResult;
using ::llmc::testing::MakeScratchDir;
using ::llmc::testing::ReadFile;
using ::llmc::testing::SourcePath;
using ::llmc::testing::ToolPath;
using ::llmc::testing::WriteFile;

// Where one byte range of the plan lies, and what damage there must be caught by.
enum class Region { kHeader, kBlob, kMeta, kPadding };

struct PlanLayout {
  plan::PlanHeader header;
  plan::PlanMeta meta;
};

class PlanFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(MakeScratchDir("plan-fault"));
    const std::string plan_path = *dir_ + "/good.plan";
    const CommandResult compiled = RunLimited(Quote(LLMRT_FAULT_LLMC) + " compile " +
                                              Quote(SourcePath("tests/data/stories260K")) + " -o " +
                                              Quote(plan_path) + " --quiet");
    ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
    good_ = new std::string(ReadFile(plan_path));
  }

  void SetUp() override {
    ASSERT_NE(good_, nullptr);
    ASSERT_GE(good_->size(), plan::kHeaderSize);
    std::memcpy(&layout_.header, good_->data(), plan::kHeaderSize);
    ASSERT_EQ(layout_.header.file_size, good_->size());
    ASSERT_TRUE(layout_.meta.ParseFromArray(good_->data() + layout_.header.meta_offset,
                                            static_cast<int>(layout_.header.meta_size)));
    ASSERT_GT(layout_.meta.tensors_size(), 10);
  }

  Region RegionOf(uint64_t offset) const {
    if (offset < plan::kHeaderSize) return Region::kHeader;
    const uint64_t meta_end = layout_.header.meta_offset + layout_.header.meta_size;
    if (offset >= layout_.header.meta_offset && offset < meta_end) return Region::kMeta;
    for (const plan::Tensor& tensor : layout_.meta.tensors()) {
      if (offset >= tensor.offset() && offset < tensor.offset() + tensor.size_bytes()) {
        return Region::kBlob;
      }
    }
    return Region::kPadding;
  }

  // Writes `bytes` as the damaged plan and runs `arguments` of llmrt on it.
  CommandResult RunLlmrt(const std::string& bytes, const std::string& arguments) {
    const std::string path = *dir_ + "/damaged.plan";
    WriteFile(path, bytes);
    return RunLimited(Quote(ToolPath("llmrt")) + " " + arguments + " " + Quote(path));
  }

  // inspect, inspect --verify, run and run --verify of one damaged plan; `must_fail` says which
  // of them must report an error (the others may also succeed).
  struct MustFail {
    bool open = true;    // inspect and run without --verify
    bool verify = true;  // inspect --verify and run --verify
  };
  // `open_only`: inspect and run without --verify (a truncated plan fails the size check at
  // open, before --verify would read anything).
  void CheckAllCommands(const std::string& bytes, MustFail must_fail, const std::string& what,
                        bool open_only = false) {
    struct Command {
      const char* arguments;
      bool verify;
    };
    const Command commands[] = {
        {"inspect", false},
        {"inspect --verify", true},
        {"run -p 'Once upon a time' -n 4 --seed 1", false},
        {"run --verify -p 'Once upon a time' -n 4 --seed 1", true},
    };
    for (const Command& command : commands) {
      if (open_only && command.verify) continue;
      const CommandResult result = RunLlmrt(bytes, command.arguments);
      const bool fail = command.verify ? must_fail.verify : must_fail.open;
      ExpectCleanEnd(result, /*success_allowed=*/!fail, "llmrt: ", "[llmrt] ",
                     absl::StrCat(what, ": llmrt ", command.arguments));
    }
  }

  static std::string* dir_;
  static std::string* good_;
  PlanLayout layout_;
};

std::string* PlanFaultTest::dir_ = nullptr;
std::string* PlanFaultTest::good_ = nullptr;

TEST_F(PlanFaultTest, IntactPlanRuns) {
  const CommandResult result = RunLlmrt(*good_, "run --verify -p 'Once upon a time' -n 4");
  EXPECT_EQ(result.exit_code, 0) << result.error;
  EXPECT_FALSE(result.output.empty());
}

// Every truncation is an error at open: the header records the file size.
TEST_F(PlanFaultTest, TruncatedAtEverySectionBoundary) {
  const plan::PlanHeader& header = layout_.header;
  const std::pair<const char*, uint64_t> cuts[] = {
      {"empty", 0},
      {"inside the magic", 4},
      {"inside the header", plan::kHeaderSize / 2},
      {"header only", plan::kHeaderSize},
      {"at data_offset", header.data_offset},
      {"at meta_offset", header.meta_offset},
      {"inside the meta", header.meta_offset + header.meta_size / 2},
      {"at the end of the meta", header.meta_offset + header.meta_size},
      {"inside the padding", (header.meta_offset + header.meta_size + header.file_size) / 2},
      {"one byte short", header.file_size - 1},
  };
  for (const auto& [name, size] : cuts) {
    ASSERT_LT(size, good_->size()) << name;
    CheckAllCommands(good_->substr(0, size), MustFail(), absl::StrCat("truncated ", name));
  }
  // Every blob's first byte, and the middle of every eighth blob.
  for (int index = 0; index < layout_.meta.tensors_size(); ++index) {
    const plan::Tensor& tensor = layout_.meta.tensors(index);
    CheckAllCommands(good_->substr(0, tensor.offset()), MustFail(),
                     absl::StrCat("truncated at blob ", index, " (", tensor.name(), ")"),
                     /*open_only=*/true);
    if (index % 8 == 0) {
      CheckAllCommands(good_->substr(0, tensor.offset() + tensor.size_bytes() / 2), MustFail(),
                       absl::StrCat("truncated inside blob ", index), /*open_only=*/true);
    }
  }
  // And one byte too many: the size check works both ways.
  CheckAllCommands(*good_ + '\0', MustFail(), "one byte appended");
}

// Seeded so a failure reproduces; each region gets its own cases so that the small ones
// (header, meta) are hit as often as the megabyte of weights.
TEST_F(PlanFaultTest, RandomByteChanges) {
  std::mt19937_64 random(20261121);
  struct RegionCases {
    Region region;
    int count;
  };
  int cases_run[4] = {0, 0, 0, 0};
  for (const RegionCases& plan_region :
       {RegionCases{Region::kHeader, 10}, RegionCases{Region::kMeta, 12},
        RegionCases{Region::kBlob, 10}, RegionCases{Region::kPadding, 4}}) {
    for (int attempt = 0; cases_run[static_cast<int>(plan_region.region)] < plan_region.count;
         ++attempt) {
      ASSERT_LT(attempt, 100000) << "no offsets in region " << static_cast<int>(plan_region.region);
      uint64_t offset = 0;
      switch (plan_region.region) {
        case Region::kHeader:
          offset = random() % plan::kHeaderSize;
          break;
        case Region::kMeta:
          offset = layout_.header.meta_offset + random() % layout_.header.meta_size;
          break;
        default:
          offset = random() % good_->size();
          break;
      }
      if (RegionOf(offset) != plan_region.region) continue;
      ++cases_run[static_cast<int>(plan_region.region)];
      std::string damaged = *good_;
      const uint8_t mask = static_cast<uint8_t>(1 + random() % 255);  // never 0: a real change
      damaged[offset] = static_cast<char>(static_cast<uint8_t>(damaged[offset]) ^ mask);
      MustFail must_fail;
      switch (plan_region.region) {
        case Region::kHeader:
          // flags/reserved and the minor version are not checked (minor versions only add
          // fields); every other header field is.
          must_fail.open = !(offset >= 10 && offset < 16) && offset < 56;
          must_fail.verify = must_fail.open;
          break;
        case Region::kMeta:  // the header's xxh64 of the meta
          break;
        case Region::kBlob:  // only --verify checks the weights' checksums
          must_fail.open = false;
          break;
        case Region::kPadding:  // nothing reads the padding
          must_fail.open = false;
          must_fail.verify = false;
          break;
      }
      CheckAllCommands(damaged, must_fail,
                       absl::StrCat("byte ", offset, " ^= ", static_cast<int>(mask)));
    }
  }
}

}  // namespace
}  // namespace llmrt::fault
