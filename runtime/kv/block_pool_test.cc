#include "runtime/kv/block_pool.h"

#include <set>

#include "gtest/gtest.h"

namespace llmrt::kv {
namespace {

TEST(BlockPoolTest, AllocatesEveryBlockOnceThenRunsDry) {
  BlockPool pool(4, 16);
  std::set<int32_t> seen;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<int32_t> block = pool.Allocate();
    ASSERT_TRUE(block.ok());
    EXPECT_TRUE(seen.insert(*block).second);
    EXPECT_EQ(pool.ref_count(*block), 1);
  }
  EXPECT_EQ(pool.num_free_blocks(), 0);
  absl::StatusOr<int32_t> none = pool.Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BlockPoolTest, ReferenceCountKeepsSharedBlockAlive) {
  BlockPool pool(2, 16);
  int32_t block = *pool.Allocate();
  ASSERT_TRUE(pool.AddRef(block).ok());
  EXPECT_EQ(pool.ref_count(block), 2);
  ASSERT_TRUE(pool.Release(block).ok());
  EXPECT_EQ(pool.num_free_blocks(), 1);
  ASSERT_TRUE(pool.Release(block).ok());
  EXPECT_EQ(pool.num_free_blocks(), 2);
  // Freed twice or never allocated: errors, not corruption.
  EXPECT_FALSE(pool.Release(block).ok());
  EXPECT_FALSE(pool.AddRef(block).ok());
  EXPECT_FALSE(pool.Release(7).ok());
  EXPECT_FALSE(pool.Release(-1).ok());
  EXPECT_EQ(pool.num_free_blocks(), 2);
}

TEST(BlockPoolTest, ReleasedBlockIsReused) {
  BlockPool pool(3, 16);
  int32_t first = *pool.Allocate();
  ASSERT_TRUE(pool.Release(first).ok());
  EXPECT_EQ(*pool.Allocate(), first);
}

TEST(BlockTableTest, ReserveGrowsByWholeBlocksAndMapsSlots) {
  BlockPool pool(8, 4);
  // Take one block first so the table's blocks are not 0, 1, 2.
  int32_t other = *pool.Allocate();
  BlockTable table;
  ASSERT_TRUE(table.Reserve(pool, 1).ok());
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.Reserve(pool, 4).ok());
  EXPECT_EQ(table.blocks().size(), 1u);
  ASSERT_TRUE(table.Reserve(pool, 9).ok());
  ASSERT_EQ(table.blocks().size(), 3u);
  EXPECT_EQ(table.capacity(4), 12);
  for (int64_t index = 0; index < 9; ++index) {
    EXPECT_EQ(table.Slot(index, 4), table.blocks()[index / 4] * 4 + index % 4);
    EXPECT_NE(table.blocks()[index / 4], other);
  }
  EXPECT_EQ(pool.num_free_blocks(), 4);
  table.Release(pool);
  EXPECT_TRUE(table.blocks().empty());
  EXPECT_EQ(pool.num_free_blocks(), 7);
}

TEST(BlockTableTest, FailedReserveLeavesTableAndPoolUnchanged) {
  BlockPool pool(3, 4);
  BlockTable table;
  ASSERT_TRUE(table.Reserve(pool, 4).ok());
  absl::Status status = table.Reserve(pool, 20);  // needs 5 blocks, only 3 exist
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("5 blocks"), std::string::npos) << status;
  EXPECT_EQ(table.blocks().size(), 1u);
  EXPECT_EQ(pool.num_free_blocks(), 2);
}

}  // namespace
}  // namespace llmrt::kv
