// LANE_CHUNKS positions written out from plan.proto's comment, for a full chunk and a row's
// shorter last chunk; packing and reading back; a short chunk expanded to full-chunk form.
#include "runtime/plan/int4_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::plan {
namespace {

TEST(Int4LayoutTest, PositionsFollowThePlanContract) {
  // 352 columns: 11 runs, a full chunk of 8 (128 bytes) and a chunk of 3 (48 bytes).
  const int64_t cols = 352;
  // Full chunk: slice v of 32 bytes, run j at byte 4j.
  EXPECT_EQ(Int4PositionOf(cols, 0).byte, 0);
  EXPECT_EQ(Int4PositionOf(cols, 0).shift, 0);
  EXPECT_EQ(Int4PositionOf(cols, 4).byte, 0);  // column 8v + 4 + i: high nibble
  EXPECT_EQ(Int4PositionOf(cols, 4).shift, 4);
  EXPECT_EQ(Int4PositionOf(cols, 3).byte, 3);
  EXPECT_EQ(Int4PositionOf(cols, 8).byte, 32);           // slice 1
  EXPECT_EQ(Int4PositionOf(cols, 31).byte, 3 * 32 + 3);  // slice 3, i 3, high
  EXPECT_EQ(Int4PositionOf(cols, 31).shift, 4);
  EXPECT_EQ(Int4PositionOf(cols, 32 * 5 + 9).byte, 32 + 5 * 4 + 1);  // run 5, slice 1
  // Short chunk of 3 runs from byte 128: slices of 12 bytes.
  EXPECT_EQ(Int4PositionOf(cols, 256).byte, 128);
  EXPECT_EQ(Int4PositionOf(cols, 256 + 8).byte, 128 + 12);
  EXPECT_EQ(Int4PositionOf(cols, 256 + 64 + 30).byte, 128 + 3 * 12 + 2 * 4 + 2);
  EXPECT_EQ(Int4PositionOf(cols, 256 + 64 + 30).shift, 4);
}

TEST(Int4LayoutTest, PackedRowReadsBackAndUsesEveryNibble) {
  for (const int64_t cols : {32, 64, 256, 288, 608, 2048}) {
    std::vector<uint8_t> codes(cols);
    for (int64_t c = 0; c < cols; ++c) codes[c] = static_cast<uint8_t>((c * 7 + c / 16) % 16);
    std::vector<uint8_t> packed(cols / 2, 0xff);
    PackInt4Row(codes.data(), cols, packed.data());
    std::vector<int> hits(cols, 0);
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(Int4CodeAt(packed.data(), cols, c), codes[c]) << cols << " " << c;
      const Int4Position position = Int4PositionOf(cols, c);
      ASSERT_LT(position.byte, cols / 2);
      ++hits[position.byte * 2 + position.shift / 4];
    }
    for (int64_t nibble = 0; nibble < cols; ++nibble) EXPECT_EQ(hits[nibble], 1) << nibble;
  }
}

TEST(Int4LayoutTest, ShortChunkExpandsToFullChunkForm) {
  const int64_t cols = 256 + 96;  // a full chunk, then 3 runs
  std::vector<uint8_t> codes(cols);
  for (int64_t c = 0; c < cols; ++c) codes[c] = static_cast<uint8_t>(1 + c % 15);
  std::vector<uint8_t> packed(cols / 2);
  PackInt4Row(codes.data(), cols, packed.data());
  uint8_t expanded[kInt4ChunkBytes];
  ExpandInt4Chunk(packed.data(), cols, 8, expanded);
  for (int64_t slice = 0; slice < 4; ++slice) {
    for (int64_t run = 0; run < 8; ++run) {
      for (int64_t i = 0; i < 4; ++i) {
        const uint8_t byte = expanded[32 * slice + 4 * run + i];
        if (run >= 3) {
          EXPECT_EQ(byte, 0);
          continue;
        }
        const int64_t column = 256 + 32 * run + 8 * slice + i;
        EXPECT_EQ(byte & 15, codes[column]);
        EXPECT_EQ(byte >> 4, codes[column + 4]);
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::plan
