// Plan writer and reader: round trip, and one test per corruption the reader must catch.
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/plan/output_file.h"
#include "runtime/plan/plan_format.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/plan_writer.h"

namespace llmrt::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "/plan_test.XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const char* created = mkdtemp(buffer.data());
  EXPECT_NE(created, nullptr);
  return created == nullptr ? std::string() : std::string(created);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return names;
  while (const dirent* entry = readdir(handle)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  closedir(handle);
  return names;
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

PlanHeader HeaderOf(const std::string& bytes) {
  PlanHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  return header;
}

void SetHeader(std::string& bytes, const PlanHeader& header) {
  std::memcpy(bytes.data(), &header, sizeof(header));
}

// The blobs of the test plan, three dtypes with sizes that are not multiples of 256 so the
// alignment padding is exercised.
struct TestWeights {
  std::vector<float> matrix;             // f32 [3, 5]
  std::vector<uint16_t> vector_f16;      // f16 [7]
  std::vector<uint16_t> embedding_bf16;  // bf16 [2, 300]
};

TestWeights MakeWeights() {
  TestWeights weights;
  for (int i = 0; i < 15; ++i) weights.matrix.push_back(0.25f * static_cast<float>(i) - 1.0f);
  for (int i = 0; i < 7; ++i) weights.vector_f16.push_back(F32ToF16(static_cast<float>(i) / 3));
  for (int i = 0; i < 600; ++i) {
    weights.embedding_bf16.push_back(F32ToBf16(static_cast<float>(i) * 0.01f));
  }
  return weights;
}

Tensor MakeTensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                  const BlobRange& range) {
  Tensor tensor;
  tensor.set_name(name);
  tensor.set_dtype(dtype);
  for (int64_t dim : shape) tensor.add_shape(dim);
  tensor.set_offset(range.offset);
  tensor.set_size_bytes(range.size_bytes);
  tensor.set_checksum(range.checksum);
  return tensor;
}

// Writes a three-tensor plan to `path`; the f16 blob is streamed in two Appends.
PlanMeta WriteTestPlan(const std::string& path, const TestWeights& weights) {
  PlanMeta meta;
  auto writer_or = PlanWriter::Create(path);
  EXPECT_TRUE(writer_or.ok()) << writer_or.status();
  if (!writer_or.ok()) return meta;
  PlanWriter& writer = **writer_or;

  auto matrix = writer.AddBlob(weights.matrix.data(), weights.matrix.size() * sizeof(float));
  EXPECT_TRUE(matrix.ok()) << matrix.status();
  EXPECT_TRUE(writer.BeginBlob().ok());
  EXPECT_TRUE(writer.Append(weights.vector_f16.data(), 3 * sizeof(uint16_t)).ok());
  EXPECT_TRUE(writer.Append(weights.vector_f16.data() + 3, 4 * sizeof(uint16_t)).ok());
  auto vector = writer.EndBlob();
  EXPECT_TRUE(vector.ok()) << vector.status();
  auto embedding = writer.AddBlob(weights.embedding_bf16.data(),
                                  weights.embedding_bf16.size() * sizeof(uint16_t));
  EXPECT_TRUE(embedding.ok()) << embedding.status();

  meta.set_producer("plan_test");
  meta.mutable_config()->set_architecture("LlamaForCausalLM");
  meta.mutable_config()->set_hidden_size(64);
  meta.mutable_config()->mutable_rope()->set_theta(10000.0);
  meta.mutable_generation()->add_eos_token_ids(2);
  meta.set_weight_dtype(F32);
  *meta.add_tensors() = MakeTensor("matrix", F32, {3, 5}, *matrix);
  *meta.add_tensors() = MakeTensor("vector", F16, {7}, *vector);
  *meta.add_tensors() = MakeTensor("embedding", BF16, {2, 300}, *embedding);
  const absl::Status finished = writer.Finish(meta);
  EXPECT_TRUE(finished.ok()) << finished;
  return meta;
}

// Replaces the meta of a valid plan image with `meta` and fixes the header (offsets, size,
// checksum) so that only the meta's content is wrong.
std::string WithMeta(const std::string& bytes, const PlanMeta& meta) {
  PlanHeader header = HeaderOf(bytes);
  std::string result = bytes.substr(0, header.meta_offset);
  const std::string meta_bytes = meta.SerializeAsString();
  result += meta_bytes;
  result.resize((result.size() + kFilePadding - 1) / kFilePadding * kFilePadding, '\0');
  header.meta_size = meta_bytes.size();
  header.file_size = result.size();
  header.meta_checksum = XXH64(meta_bytes.data(), meta_bytes.size(), 0);
  SetHeader(result, header);
  return result;
}

PlanOpenOptions VerifyBlobs() {
  PlanOpenOptions options;
  options.verify_blob_checksums = true;
  return options;
}

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir();
    path_ = dir_ + "/model.plan";
    weights_ = MakeWeights();
    meta_ = WriteTestPlan(path_, weights_);
    bytes_ = ReadBytes(path_);
    ASSERT_GT(bytes_.size(), kHeaderSize);
  }

  void TearDown() override {
    for (const std::string& name : ListDir(dir_)) unlink((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }

  // Writes `bytes` to a new file and opens it; returns the status message ("" when OK).
  std::string OpenError(const std::string& bytes, const PlanOpenOptions& options = {}) {
    const std::string path = dir_ + "/corrupt.plan";
    WriteBytes(path, bytes);
    auto plan = Plan::Open(path, options);
    return plan.ok() ? std::string() : std::string(plan.status().message());
  }

  std::string dir_;
  std::string path_;
  TestWeights weights_;
  PlanMeta meta_;
  std::string bytes_;
};

TEST_F(PlanTest, RoundTripPreservesMetaAndBlobs) {
  auto plan_or = Plan::Open(path_, VerifyBlobs());
  ASSERT_TRUE(plan_or.ok()) << plan_or.status();
  const Plan& plan = **plan_or;
  EXPECT_EQ(plan.meta().SerializeAsString(), meta_.SerializeAsString());
  EXPECT_EQ(plan.path(), path_);
  EXPECT_EQ(plan.header().major, kPlanMajorVersion);
  EXPECT_EQ(plan.header().data_offset, 256u);
  EXPECT_EQ(plan.file_size(), bytes_.size());
  EXPECT_EQ(bytes_.size() % kFilePadding, 0u);
  EXPECT_GE(plan.header().meta_offset, 256u + 15 * 4);

  ASSERT_EQ(plan.meta().tensors_size(), 3);
  const std::vector<std::pair<const void*, size_t>> expected = {
      {weights_.matrix.data(), weights_.matrix.size() * sizeof(float)},
      {weights_.vector_f16.data(), weights_.vector_f16.size() * sizeof(uint16_t)},
      {weights_.embedding_bf16.data(), weights_.embedding_bf16.size() * sizeof(uint16_t)},
  };
  for (int index = 0; index < 3; ++index) {
    const Tensor& tensor = plan.meta().tensors(index);
    EXPECT_EQ(tensor.offset() % kBlobAlignment, 0u) << tensor.name();
    // mmap returns page-aligned memory, so file alignment is memory alignment.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(plan.blob(index)) % kBlobAlignment, 0u);
    ASSERT_EQ(tensor.size_bytes(), expected[index].second);
    EXPECT_EQ(std::memcmp(plan.blob(index), expected[index].first, expected[index].second), 0)
        << tensor.name();
    EXPECT_EQ(tensor.checksum(), XXH64(expected[index].first, expected[index].second, 0));
  }
  EXPECT_EQ(plan.blob(3), nullptr);
  EXPECT_EQ(plan.blob(-1), nullptr);
  // Nothing but the plan is left in the directory: the temporary file was renamed.
  EXPECT_THAT(ListDir(dir_), ::testing::ElementsAre("model.plan"));
}

TEST_F(PlanTest, StreamedBlobEqualsOneShotBlob) {
  // The f16 blob was written in two Appends; its checksum must equal the one-shot hash.
  EXPECT_EQ(meta_.tensors(1).checksum(),
            XXH64(weights_.vector_f16.data(), weights_.vector_f16.size() * 2, 0));
  EXPECT_EQ(meta_.tensors(1).offset(), 512u);
  EXPECT_EQ(meta_.tensors(2).offset(), 768u);
}

TEST_F(PlanTest, FlippedMetaByteIsAChecksumMismatch) {
  std::string bytes = bytes_;
  bytes[HeaderOf(bytes).meta_offset + 3] ^= 0x10;
  EXPECT_THAT(OpenError(bytes), HasSubstr("corrupt.plan: meta checksum mismatch: header says 0x"));
  EXPECT_THAT(OpenError(bytes), HasSubstr("meta hashes to 0x"));
}

TEST_F(PlanTest, TruncatedFileIsRejected) {
  // Cut inside the bf16 blob: the header's file_size no longer matches.
  const std::string cut = bytes_.substr(0, 900);
  EXPECT_THAT(OpenError(cut), HasSubstr("header says the file is 65536 bytes, it is 900 bytes; "
                                        "file truncated?"));
  // Same cut with file_size patched to match: the meta range now lies beyond the end.
  std::string patched = cut;
  PlanHeader header = HeaderOf(patched);
  header.file_size = patched.size();
  SetHeader(patched, header);
  EXPECT_THAT(OpenError(patched), HasSubstr("meta range"));
  EXPECT_THAT(OpenError(patched), HasSubstr("beyond the end of the file (900 bytes)"));
  // Shorter than a header.
  EXPECT_THAT(OpenError(bytes_.substr(0, 10)), HasSubstr("shorter than the 64-byte header"));
  EXPECT_THAT(OpenError(""), HasSubstr("0 bytes"));
}

TEST_F(PlanTest, WrongMajorVersionNamesBothVersions) {
  std::string bytes = bytes_;
  PlanHeader header = HeaderOf(bytes);
  header.major = kPlanMajorVersion + 1;
  header.minor = 0;
  SetHeader(bytes, header);
  EXPECT_THAT(OpenError(bytes), HasSubstr("corrupt.plan: plan format version " +
                                          std::to_string(kPlanMajorVersion + 1) +
                                          ".0 is not supported by this llmrt (supports " +
                                          std::to_string(kPlanMajorVersion) + ".x)"));
}

TEST_F(PlanTest, NewerMinorVersionIsAccepted) {
  std::string bytes = bytes_;
  PlanHeader header = HeaderOf(bytes);
  header.minor = kPlanMinorVersion + 7;
  SetHeader(bytes, header);
  EXPECT_EQ(OpenError(bytes), "");
}

TEST_F(PlanTest, WrongMagicIsNotAPlan) {
  std::string bytes = bytes_;
  bytes[0] = 'G';
  EXPECT_THAT(OpenError(bytes), HasSubstr("not a plan file: "));
  EXPECT_THAT(OpenError(bytes), HasSubstr("corrupt.plan: bad magic"));
}

TEST_F(PlanTest, BadDataOffsetIsRejected) {
  std::string bytes = bytes_;
  PlanHeader header = HeaderOf(bytes);
  header.data_offset = 100;
  SetHeader(bytes, header);
  EXPECT_THAT(OpenError(bytes), HasSubstr("data_offset 100 must be a multiple of 256"));
}

TEST_F(PlanTest, TensorOffsetOutsideTheFileIsRejected) {
  PlanMeta meta = meta_;
  meta.mutable_tensors(2)->set_offset(1u << 30);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)),
              HasSubstr("tensor 2 (embedding): blob [1073741824, 1073743024) lies outside the "
                        "data section [256, "));
  // Inside the file but overlapping the meta is outside the data section too.
  meta.mutable_tensors(2)->set_offset(HeaderOf(bytes_).meta_offset);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)), HasSubstr("lies outside the data section"));
  // Offsets near 2^64 must not wrap around the range check.
  meta.mutable_tensors(2)->set_offset(UINT64_MAX - 255);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)), HasSubstr("lies outside the data section"));
}

TEST_F(PlanTest, MisalignedTensorOffsetIsRejected) {
  PlanMeta meta = meta_;
  meta.mutable_tensors(1)->set_offset(meta.tensors(1).offset() + 16);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)),
              HasSubstr("tensor 1 (vector): blob offset 528 is not a multiple of 256"));
}

TEST_F(PlanTest, SubByteAndByteDTypesAreSizedByBits) {
  PlanMeta meta = meta_;  // tensor 0 holds 60 bytes
  meta.mutable_tensors(0)->set_dtype(I4);
  meta.mutable_tensors(0)->set_shape(1, 40);
  EXPECT_EQ(OpenError(WithMeta(bytes_, meta)), "");
  meta.mutable_tensors(0)->set_shape(1, 5);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)),
              HasSubstr("tensor 0 (matrix): shape [3, 5] of i4 needs an even last dimension"));
  meta.mutable_tensors(0)->set_dtype(I8);
  meta.mutable_tensors(0)->set_shape(1, 20);
  EXPECT_EQ(OpenError(WithMeta(bytes_, meta)), "");
  meta.mutable_tensors(0)->set_shape(1, 40);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)),
              HasSubstr("size_bytes is 60, expected 120 for shape [3, 40] of i8"));
}

TEST_F(PlanTest, SizeNotMatchingShapeIsRejected) {
  PlanMeta meta = meta_;
  meta.mutable_tensors(0)->set_shape(1, 6);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)),
              HasSubstr("tensor 0 (matrix): size_bytes is 60, expected 72 for shape [3, 6] of "
                        "f32"));
  meta = meta_;
  meta.mutable_tensors(0)->set_dtype(DTYPE_UNSPECIFIED);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)), HasSubstr("is not a storable dtype"));
  meta = meta_;
  meta.mutable_tensors(0)->set_shape(0, INT64_MAX);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)), HasSubstr("overflows 64 bits"));
  meta = meta_;
  meta.mutable_tensors(0)->set_shape(0, -3);
  EXPECT_THAT(OpenError(WithMeta(bytes_, meta)), HasSubstr("negative dimension"));
}

TEST_F(PlanTest, UnparsableMetaIsRejected) {
  // Valid checksum over bytes that are not a PlanMeta (a truncated varint field).
  std::string bytes = bytes_;
  PlanHeader header = HeaderOf(bytes);
  const std::string garbage = "\x0a\xff\xff\xff\xff\x0f";
  bytes.replace(header.meta_offset, garbage.size(), garbage);
  header.meta_size = garbage.size();
  header.meta_checksum = XXH64(garbage.data(), garbage.size(), 0);
  SetHeader(bytes, header);
  EXPECT_THAT(OpenError(bytes), HasSubstr("is not a valid PlanMeta"));
}

TEST_F(PlanTest, VerifyCatchesFlippedBlobByte) {
  std::string bytes = bytes_;
  bytes[meta_.tensors(2).offset() + 1000] ^= 0x01;
  EXPECT_EQ(OpenError(bytes), "") << "without verification the blob is not read";
  EXPECT_THAT(OpenError(bytes, VerifyBlobs()),
              HasSubstr("tensor 2 (embedding): blob checksum mismatch: meta says 0x"));
}

TEST_F(PlanTest, RandomCorruptionNeverCrashes) {
  // The reader must turn any bytes into a status. 300 files with 1-8 random bytes changed,
  // biased to the header and meta where the parser looks.
  std::mt19937 random(1234);
  const uint64_t meta_end = HeaderOf(bytes_).meta_offset + HeaderOf(bytes_).meta_size;
  int rejected = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes = bytes_;
    const int num_changes = 1 + static_cast<int>(random() % 8);
    for (int change = 0; change < num_changes; ++change) {
      const uint64_t limit = trial % 2 == 0 ? kHeaderSize : meta_end;
      bytes[random() % limit] = static_cast<char>(random());
    }
    if (!OpenError(bytes, VerifyBlobs()).empty()) ++rejected;
  }
  EXPECT_GT(rejected, 250);
}

TEST_F(PlanTest, MissingFileIsNotFound) {
  auto plan = Plan::Open(dir_ + "/absent.plan");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(plan.status().message(), HasSubstr("absent.plan: cannot open"));
}

TEST(PlanWriterTest, DestroyedBeforeFinishLeavesNoFile) {
  const std::string dir = MakeTempDir();
  {
    auto writer = PlanWriter::Create(dir + "/partial.plan");
    ASSERT_TRUE(writer.ok()) << writer.status();
    const std::vector<uint8_t> data(1000, 7);
    ASSERT_TRUE((*writer)->AddBlob(data.data(), data.size()).ok());
    EXPECT_EQ(ListDir(dir).size(), 1u) << "the temporary file exists while writing";
    EXPECT_EQ((*writer)->bytes_written(), 256u + 1000u);
  }
  EXPECT_THAT(ListDir(dir), IsEmpty());
  rmdir(dir.c_str());
}

TEST(PlanWriterTest, CreateInMissingDirectoryFails) {
  auto writer = PlanWriter::Create("/nonexistent-dir-for-plan-test/x.plan");
  ASSERT_FALSE(writer.ok());
  EXPECT_THAT(writer.status().message(),
              HasSubstr("/nonexistent-dir-for-plan-test/x.plan: cannot create temporary file"));
}

TEST(PlanWriterTest, FinishOntoUnwritablePathFailsCleanly) {
  // The target becomes a non-empty directory after Create (which refuses one outright): the
  // rename fails after everything was written.
  const std::string dir = MakeTempDir();
  const std::string target = dir + "/occupied";
  EXPECT_FALSE(PlanWriter::Create(dir).ok());
  auto writer = PlanWriter::Create(target);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  WriteBytes(target + "/keep", "x");
  const float data[4] = {1, 2, 3, 4};
  auto range = (*writer)->AddBlob(data, sizeof(data));
  ASSERT_TRUE(range.ok());
  PlanMeta meta;
  *meta.add_tensors() = MakeTensor("t", F32, {4}, *range);
  const absl::Status status = (*writer)->Finish(meta);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("occupied: renaming"));
  EXPECT_THAT(ListDir(dir), ::testing::ElementsAre("occupied")) << "temporary file removed";
  // The writer is spent: further calls fail instead of writing.
  EXPECT_FALSE((*writer)->BeginBlob().ok());
  writer->reset();
  unlink((target + "/keep").c_str());
  rmdir(target.c_str());
  rmdir(dir.c_str());
}

TEST(PlanWriterTest, DiskFullIsAStatusNamingThePath) {
  // RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, like a full disk would.
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/big.plan";
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous_handler = signal(SIGXFSZ, SIG_IGN);
  rlimit limited = saved;
  limited.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  absl::Status status;
  {
    auto writer = PlanWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    const std::vector<uint8_t> data(200 * 1024, 1);
    status = (*writer)->AddBlob(data.data(), data.size()).status();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  signal(SIGXFSZ, previous_handler);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("big.plan: writing"));
  EXPECT_THAT(ListDir(dir), IsEmpty());
  rmdir(dir.c_str());
}

TEST(PlanWriterTest, FinishRejectsTensorOutsideTheBlobs) {
  const std::string dir = MakeTempDir();
  auto writer = PlanWriter::Create(dir + "/bad.plan");
  ASSERT_TRUE(writer.ok());
  const float data[4] = {1, 2, 3, 4};
  auto range = (*writer)->AddBlob(data, sizeof(data));
  ASSERT_TRUE(range.ok());
  PlanMeta meta;
  BlobRange wrong = *range;
  wrong.offset += 256;
  *meta.add_tensors() = MakeTensor("w", F32, {4}, wrong);
  const absl::Status status = (*writer)->Finish(meta);
  EXPECT_THAT(status.message(), HasSubstr("tensor 0 (w): blob [512, 528) lies outside"));
  EXPECT_THAT(ListDir(dir), IsEmpty());
  rmdir(dir.c_str());
}

TEST(PlanWriterTest, MisuseIsAStatus) {
  const std::string dir = MakeTempDir();
  auto writer = PlanWriter::Create(dir + "/misuse.plan");
  ASSERT_TRUE(writer.ok());
  EXPECT_THAT((*writer)->Append("x", 1).message(), HasSubstr("Append outside a blob"));
  EXPECT_FALSE((*writer)->EndBlob().ok());
  ASSERT_TRUE((*writer)->BeginBlob().ok());
  EXPECT_FALSE((*writer)->BeginBlob().ok());
  writer->reset();
  EXPECT_THAT(ListDir(dir), IsEmpty());
  rmdir(dir.c_str());
}

TEST(PlanWriterTest, EmptyPlanRoundTrips) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/empty.plan";
  auto writer = PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Finish(PlanMeta()).ok());
  auto plan = Plan::Open(path, VerifyBlobs());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)->file_size(), kFilePadding);
  unlink(path.c_str());
  rmdir(dir.c_str());
}

// SIGINT, SIGTERM or SIGHUP during a compile leaves no temporary file (a killed llmc used to
// leave hundreds of MB of <plan>.tmp-<pid>), and the process still dies of the signal.
TEST(OutputFileTest, AFatalSignalRemovesTheTemporaryFile) {
  const std::string dir = MakeTempDir();
  const std::string path = dir + "/killed.plan";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RemoveTemporaryFilesOnSignals();
    absl::StatusOr<std::unique_ptr<PlanWriter>> writer = PlanWriter::Create(path);
    if (!writer.ok() || !(*writer)->BeginBlob().ok()) _exit(3);
    const std::string temp = path + ".tmp-" + std::to_string(getpid());
    if (access(temp.c_str(), F_OK) != 0) _exit(4);  // the file the signal must remove
    raise(SIGTERM);
    _exit(5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_NE(access((path + ".tmp-" + std::to_string(child)).c_str(), F_OK), 0);
  EXPECT_NE(access(path.c_str(), F_OK), 0);
}

// Outputs replace regular files only: a FIFO (or a device: as root, -o /dev/null once replaced
// the device node) is refused by name; a symbolic link is followed to its target.
TEST(OutputFileTest, TargetsAreRegularFilesOrLinksToThem) {
  const std::string dir = MakeTempDir();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<std::string> target = OutputTarget(fifo);
  ASSERT_FALSE(target.ok());
  EXPECT_THAT(std::string(target.status().message()), ::testing::HasSubstr("is a FIFO"));
  EXPECT_FALSE(PlanWriter::Create(fifo).ok());
  EXPECT_FALSE(OutputTarget(dir).ok());
  EXPECT_EQ(*OutputTarget(dir + "/new.plan"), dir + "/new.plan");
  std::ofstream(dir + "/real.plan") << "old";
  ASSERT_EQ(symlink("real.plan", (dir + "/link.plan").c_str()), 0);
  char resolved[PATH_MAX];
  ASSERT_NE(realpath((dir + "/real.plan").c_str(), resolved), nullptr);
  EXPECT_EQ(*OutputTarget(dir + "/link.plan"), std::string(resolved));
  ASSERT_EQ(symlink("missing.plan", (dir + "/dangling.plan").c_str()), 0);
  EXPECT_EQ(OutputTarget(dir + "/dangling.plan").status().code(), absl::StatusCode::kNotFound);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(F32), 4u);
  EXPECT_EQ(DTypeSize(F16), 2u);
  EXPECT_EQ(DTypeSize(BF16), 2u);
  EXPECT_EQ(DTypeSize(I32), 4u);
  EXPECT_EQ(DTypeSize(I8), 1u);
  EXPECT_EQ(DTypeSize(U8), 1u);
  EXPECT_EQ(DTypeSize(I4), 0u);
  EXPECT_EQ(DTypeBits(I4), 4);
  EXPECT_EQ(DTypeBits(I8), 8);
  EXPECT_EQ(DTypeBits(F32), 32);
  EXPECT_EQ(DTypeSize(DTYPE_UNSPECIFIED), 0u);
  EXPECT_STREQ(DTypeName(BF16), "bf16");
  EXPECT_STREQ(DTypeName(I4), "i4");
  EXPECT_STREQ(DTypeName(static_cast<DType>(99)), "unknown");
  // MXFP4: codes half a byte like I4, scales one byte.
  EXPECT_EQ(DTypeSize(FP4_E2M1), 0u);
  EXPECT_EQ(DTypeBits(FP4_E2M1), 4);
  EXPECT_EQ(DTypeSize(E8M0), 1u);
  EXPECT_EQ(DTypeBits(E8M0), 8);
  EXPECT_STREQ(DTypeName(FP4_E2M1), "fp4_e2m1");
  EXPECT_STREQ(DTypeName(E8M0), "e8m0");
}

// Every E8M0 byte but NaN is exactly 2^(b - 127), the denormals 2^-127 (b = 0) included.
TEST(Mxfp4Test, E8M0IsExactForEveryByte) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(E8M0ToF32(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127)) << "byte " << b;
  }
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
}

// OCP MX v1.0's E2M1 table: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0.
TEST(Mxfp4Test, E2M1ValuesAndDoubledCodes) {
  for (int code = 0; code < 16; ++code) {
    const int exponent = (code >> 1) & 3, mantissa = code & 1;
    const double magnitude =
        exponent == 0 ? 0.5 * mantissa : std::ldexp(1.0 + 0.5 * mantissa, exponent - 1);
    const double value = code & 8 ? -magnitude : magnitude;
    EXPECT_EQ(kE2M1Values[code], static_cast<float>(value)) << "code " << code;
    EXPECT_EQ(E2M1Doubled(code), static_cast<int>(2 * value)) << "code " << code;
  }
}

}  // namespace
}  // namespace llmrt::plan
