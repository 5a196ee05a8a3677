#include "compiler/importer/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "compiler/importer/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/dtype.h"

namespace llmc {
namespace {

using ::llmc::testing_util::BuildSafetensors;
using ::llmc::testing_util::BytesOf;
using ::llmc::testing_util::RawSafetensors;
using ::llmc::testing_util::ReadFile;
using ::llmc::testing_util::TempDir;
using ::llmc::testing_util::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kStoriesFile = std::string(LLMC_TEST_DATA_DIR) + "/stories260K/model.safetensors";

TEST(SafetensorsTest, OpensRealCheckpoint) {
  auto file = SafetensorsFile::Open(kStoriesFile);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 47u);  // 5 layers x 9, embed_tokens, norm
  EXPECT_EQ((*file)->metadata().at("format"), "pt");

  const SafetensorsTensor* embed = (*file)->Find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, llmrt::plan::F32);
  EXPECT_THAT(embed->shape, ElementsAre(512, 64));
  EXPECT_EQ(embed->size_bytes, 512u * 64 * 4);

  const SafetensorsTensor* k_proj = (*file)->Find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k_proj, nullptr);
  EXPECT_THAT(k_proj->shape, ElementsAre(32, 64));
  float first[3];
  std::memcpy(first, k_proj->data, sizeof(first));
  // Values read with Python's struct module from the same file.
  EXPECT_EQ(first[0], 0.2161301076412201f);
  EXPECT_EQ(first[1], 0.18407107889652252f);
  EXPECT_EQ(first[2], -0.21698929369449615f);

  // The mapped bytes equal the file's bytes at 8 + header + 147712 (its data_offsets begin).
  const std::string contents = ReadFile(kStoriesFile);
  uint64_t header_size = 0;
  std::memcpy(&header_size, contents.data(), 8);
  EXPECT_EQ(
      std::memcmp(k_proj->data, contents.data() + 8 + header_size + 147712, k_proj->size_bytes), 0);
  EXPECT_EQ((*file)->Find("no.such.tensor"), nullptr);
  // Ordered by offset.
  for (size_t index = 1; index < (*file)->tensors().size(); ++index) {
    EXPECT_LT((*file)->tensors()[index - 1].data, (*file)->tensors()[index].data);
  }
}

TEST(SafetensorsTest, ReadsEveryAcceptedDTypeAndMetadata) {
  TempDir dir;
  const std::vector<float> f32 = {1.5f, -2.0f};
  const std::vector<uint16_t> f16 = {llmrt::plan::F32ToF16(0.5f), llmrt::plan::F32ToF16(3.0f),
                                     llmrt::plan::F32ToF16(-1.0f)};
  const std::vector<uint16_t> bf16 = {llmrt::plan::F32ToBf16(7.0f)};
  WriteFile(dir.File("x.safetensors"),
            BuildSafetensors({{"a", "F32", {2}, BytesOf(f32)},
                              {"b", "F16", {3, 1}, BytesOf(f16)},
                              {"c", "BF16", {1}, BytesOf(bf16)},
                              {"d", "U8", {1, 3}, std::string("\x7f\x00\xfe", 3)},
                              {"empty", "F32", {0, 4}, ""}},
                             {{"format", "pt"}}));
  auto file = SafetensorsFile::Open(dir.File("x.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->tensors().size(), 5u);
  const SafetensorsTensor* b = (*file)->Find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, llmrt::plan::F16);
  uint16_t second;
  std::memcpy(&second, b->data + 2, 2);
  EXPECT_EQ(llmrt::plan::F16ToF32(second), 3.0f);
  const SafetensorsTensor* c = (*file)->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, llmrt::plan::BF16);
  uint16_t seven;
  std::memcpy(&seven, c->data, 2);
  EXPECT_EQ(llmrt::plan::Bf16ToF32(seven), 7.0f);
  const SafetensorsTensor* d = (*file)->Find("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dtype, llmrt::plan::U8);
  EXPECT_EQ(d->size_bytes, 3u);
  EXPECT_EQ(d->data[2], 0xfe);
  EXPECT_EQ((*file)->Find("empty")->size_bytes, 0u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
}

class SafetensorsErrorTest : public ::testing::Test {
 protected:
  // Writes `bytes` as model.safetensors and returns Open's error message ("" if it opened).
  std::string OpenError(const std::string& bytes) {
    WriteFile(dir_.File("model.safetensors"), bytes);
    auto file = SafetensorsFile::Open(dir_.File("model.safetensors"));
    return file.ok() ? std::string() : std::string(file.status().message());
  }

  TempDir dir_;
};

TEST_F(SafetensorsErrorTest, TooShortFile) {
  EXPECT_THAT(OpenError("abc"), HasSubstr("model.safetensors: 3 bytes, too short"));
  EXPECT_THAT(OpenError(""), HasSubstr("model.safetensors: 0 bytes"));
}

TEST_F(SafetensorsErrorTest, HeaderLengthBeyondTheFile) {
  std::string bytes = RawSafetensors("{}", "");
  bytes[0] = 100;  // claims 100 header bytes, 2 follow
  EXPECT_THAT(OpenError(bytes),
              HasSubstr("model.safetensors: header length 100 exceeds the 2 bytes after the "
                        "length field"));
  bytes[7] = static_cast<char>(0xff);  // ~2^63: must not overflow any check
  EXPECT_THAT(OpenError(bytes), HasSubstr("exceeds the 2 bytes"));
}

TEST_F(SafetensorsErrorTest, HeaderLengthOverTheCap) {
  // A sparse 101 MB file whose length field claims all of it as header.
  const std::string path = dir_.File("model.safetensors");
  WriteFile(path, RawSafetensors(std::string(16, ' '), ""));
  const uint64_t claimed = 101u * 1000 * 1000;
  std::string length(8, '\0');
  for (int byte = 0; byte < 8; ++byte)
    length[byte] = static_cast<char>((claimed >> (8 * byte)) & 0xff);
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, length.data(), 8, 0), 8);
  ASSERT_EQ(ftruncate(fd, static_cast<off_t>(claimed + 8)), 0);
  close(fd);
  auto file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(),
              HasSubstr("header length 101000000 exceeds the 100000000-byte limit"));
}

TEST_F(SafetensorsErrorTest, HeaderNotJson) {
  EXPECT_THAT(OpenError(RawSafetensors("{\"a\": {\n  \"dtype\": F32}}", "")),
              HasSubstr("model.safetensors (header): invalid JSON at line 2, column 12"));
  EXPECT_THAT(OpenError(RawSafetensors("[1, 2]", "")),
              HasSubstr("model.safetensors: header must be a JSON object, found a array"));
  // Deep nesting is refused before the recursive JSON library sees it.
  EXPECT_THAT(OpenError(RawSafetensors(std::string(100000, '['), "")),
              HasSubstr("nested deeper than 64 levels"));
}

TEST_F(SafetensorsErrorTest, EntryFieldsWithWrongTypes) {
  EXPECT_THAT(OpenError(RawSafetensors(R"({"w": {"dtype": "F32", "shape": [2]}})", "")),
              HasSubstr("tensor w: missing field \"data_offsets\""));
  EXPECT_THAT(
      OpenError(RawSafetensors(R"({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}})",
                               std::string(8, '\0'))),
      HasSubstr("tensor w: \"shape\" must be an array, found \"2\""));
  EXPECT_THAT(OpenError(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", "")),
              HasSubstr("tensor w: \"shape\" must hold non-negative integers, found -2"));
  EXPECT_THAT(
      OpenError(RawSafetensors(R"({"w": {"dtype": 5, "shape": [2], "data_offsets": [0, 8]}})", "")),
      HasSubstr("tensor w: \"dtype\" must be a string, found 5"));
  EXPECT_THAT(OpenError(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", "")),
              HasSubstr("\"data_offsets\" must be [begin, end], found [0]"));
  EXPECT_THAT(OpenError(RawSafetensors(R"({"w": 3})", "")),
              HasSubstr("tensor w: entry must be an object"));
  EXPECT_THAT(OpenError(RawSafetensors(R"({"__metadata__": {"k": 1}})", "")),
              HasSubstr("\"__metadata__\" entry \"k\" must be a string, found 1"));
}

TEST_F(SafetensorsErrorTest, UnsupportedDTypeNamesTensorAndDType) {
  for (const char* dtype : {"I8", "I64", "F64", "F8_E4M3", "BOOL"}) {
    const std::string header = std::string(R"({"model.layers.0.q.weight": {"dtype": ")") + dtype +
                               R"(", "shape": [1], "data_offsets": [0, 1]}})";
    EXPECT_THAT(OpenError(RawSafetensors(header, std::string(8, '\0'))),
                HasSubstr(std::string("tensor model.layers.0.q.weight: dtype ") + dtype +
                          " is not supported (supported: F32, F16, BF16, I32, U8)"));
  }
  EXPECT_THAT(OpenError(RawSafetensors(
                  R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", "x")),
              HasSubstr("tensor w: unknown dtype \"Q4\""));
}

TEST_F(SafetensorsErrorTest, OffsetsDisagreeingWithShape) {
  EXPECT_THAT(OpenError(RawSafetensors(
                  R"({"w": {"dtype": "F16", "shape": [3, 2], "data_offsets": [0, 8]}})",
                  std::string(16, '\0'))),
              HasSubstr("tensor w: data_offsets [0, 8] span 8 bytes, but shape [3, 2] of F16 "
                        "needs 12"));
  EXPECT_THAT(
      OpenError(RawSafetensors(
          R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 0]}})",
          "")),
      HasSubstr("tensor w: shape [4611686018427387904, 8] is too large"));
  EXPECT_THAT(OpenError(RawSafetensors(
                  R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", "")),
              HasSubstr("data_offsets [8, 4] end before they begin"));
}

TEST_F(SafetensorsErrorTest, TruncatedDataNamesTensorAndSizes) {
  const std::string full = BuildSafetensors(
      {{"model.layers.0.mlp.up_proj.weight", "F32", {32, 32}, std::string(4096, '\1')}});
  EXPECT_EQ(OpenError(full), "");
  EXPECT_THAT(OpenError(full.substr(0, full.size() - 2048)),
              HasSubstr("model.safetensors: tensor model.layers.0.mlp.up_proj.weight: "
                        "data_offsets [0, 4096] lie beyond the end of the data (2048 bytes); "
                        "file truncated?"));
}

TEST_F(SafetensorsErrorTest, OverlappingRanges) {
  const std::string header =
      R"({"first": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
      R"( "second": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})";
  EXPECT_THAT(OpenError(RawSafetensors(header, std::string(16, '\0'))),
              HasSubstr("model.safetensors: tensors first [0, 16] and second [8, 16] overlap"));
  // A range nested inside an earlier, longer one overlaps too.
  const std::string nested =
      R"({"outer": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]},)"
      R"( "inner": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},)"
      R"( "after": {"dtype": "F32", "shape": [1], "data_offsets": [12, 16]}})";
  EXPECT_THAT(OpenError(RawSafetensors(nested, std::string(32, '\0'))),
              HasSubstr("tensors outer [0, 32] and inner [4, 8] overlap"));
}

TEST_F(SafetensorsErrorTest, MissingFileIsNotFound) {
  auto file = SafetensorsFile::Open(dir_.File("absent.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_TRUE(absl::IsNotFound(file.status()));
  EXPECT_THAT(file.status().message(), HasSubstr("absent.safetensors: cannot open"));
}

}  // namespace
}  // namespace llmc
