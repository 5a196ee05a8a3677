#include "runtime/kv/block_pool.h"

#include <set>
#include <vector>

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

// The reference vector of the SipHash paper (Aumasson and Bernstein, appendix A): key
// 00 01 .. 0f, message 00 01 .. 0e (15 bytes).
TEST(SipHashTest, MatchesThePaperTestVector) {
  const PrefixCacheKey key = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
  std::vector<uint8_t> message(15);
  for (int i = 0; i < 15; ++i) message[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(SipHash24(key, message), 0xa129ca6149be45e5ull);
  // And the empty message (first row of the reference implementation's vectors.h table:
  // 31 0e 0e dd 47 db 6f 72, little-endian).
  EXPECT_EQ(SipHash24(key, {}), 0x726fdb47dd0e0e31ull);
}

TEST(SipHashTest, BlockHashDependsOnKeyParentAndTokens) {
  const PrefixCacheKey key = {1, 2};
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const uint64_t hash = HashBlock(key, 0, tokens);
  EXPECT_EQ(hash, HashBlock(key, 0, tokens));
  EXPECT_NE(hash, HashBlock({1, 3}, 0, tokens));
  EXPECT_NE(hash, HashBlock(key, 1, tokens));
  EXPECT_NE(hash, HashBlock(key, 0, std::vector<int32_t>{1, 2, 4, 3}));
  // Two pools draw different keys, so the same prefix hashes differently per process.
  EXPECT_NE(RandomPrefixCacheKey(), RandomPrefixCacheKey());
}

// Runs a "sequence" over `tokens`: matches the cache, reserves the rest, commits the blocks.
int64_t RunSequence(BlockPool& pool, BlockTable& table, const std::vector<int32_t>& tokens) {
  const int64_t hit = table.MatchPrefix(pool, tokens, static_cast<int64_t>(tokens.size()) - 1);
  EXPECT_TRUE(table.Reserve(pool, static_cast<int64_t>(tokens.size())).ok());
  table.CommitFullBlocks(pool, tokens, static_cast<int64_t>(tokens.size()));
  return hit;
}

TEST(PrefixCacheTest, SharedPrefixReusesFullBlocksOnly) {
  BlockPool pool(16, 4);
  const std::vector<int32_t> first = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  BlockTable a;
  EXPECT_EQ(RunSequence(pool, a, first), 0);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  // Same first 8 tokens, different tail: the two full blocks are shared.
  const std::vector<int32_t> second = {1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44};
  BlockTable b;
  EXPECT_EQ(RunSequence(pool, b, second), 8);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);
  EXPECT_EQ(pool.ref_count(a.blocks()[0]), 2);
  EXPECT_EQ(pool.num_used_blocks(), 4);
  // A different first block breaks the chain even though the second block's tokens match.
  const std::vector<int32_t> third = {0, 2, 3, 4, 5, 6, 7, 8, 9};
  BlockTable c;
  EXPECT_EQ(RunSequence(pool, c, third), 0);
  EXPECT_EQ(pool.stats().prefix_hit_tokens, 8);
  a.Release(pool);
  b.Release(pool);
  c.Release(pool);
  EXPECT_EQ(pool.num_used_blocks(), 0);
  // Freed, the registered blocks stay findable until evicted.
  EXPECT_GT(pool.num_cached_free_blocks(), 0);
  BlockTable d;
  EXPECT_EQ(RunSequence(pool, d, first), 8);
  d.Release(pool);
}

TEST(PrefixCacheTest, WholePromptHitLeavesTheLastTokenToCompute) {
  BlockPool pool(8, 4);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  BlockTable a, b;
  RunSequence(pool, a, prompt);
  // Matching stops at size - 1 tokens, so the step still has a token whose logits it needs.
  EXPECT_EQ(RunSequence(pool, b, prompt), 4);
  a.Release(pool);
  b.Release(pool);
}

TEST(PrefixCacheTest, EvictsLeastRecentlyFreedCachedBlockFirst) {
  BlockPool pool(4, 2);
  BlockTable a, b;
  RunSequence(pool, a, {1, 2, 3});  // blocks: [1 2] cached, [3] partial
  RunSequence(pool, b, {7, 8, 9});
  const int32_t a_full = a.blocks()[0], b_full = b.blocks()[0];
  a.Release(pool);  // a's cached block is freed first: least recently used
  b.Release(pool);
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_cached_free_blocks(), 2);
  // Never-cached free blocks go first, then the LRU cached one.
  BlockTable c;
  ASSERT_TRUE(c.Reserve(pool, 6).ok());
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_TRUE(pool.is_cached(b_full));
  EXPECT_FALSE(pool.is_cached(a_full));
  BlockTable d;
  EXPECT_EQ(d.MatchPrefix(pool, std::vector<int32_t>{1, 2, 3}, 2), 0);
  EXPECT_EQ(d.MatchPrefix(pool, std::vector<int32_t>{7, 8, 9}, 2), 2);
  c.Release(pool);
  d.Release(pool);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

TEST(PrefixCacheTest, HashCollisionWithDifferentTokensIsAMiss) {
  BlockPool pool(4, 2);
  int32_t block = *pool.Allocate();
  // Register under the hash another token pair would have: Lookup compares the tokens too.
  const uint64_t forged = HashBlock(pool.key(), 0, std::vector<int32_t>{5, 6});
  ASSERT_TRUE(pool.Register(block, forged, std::vector<int32_t>{1, 2}));
  EXPECT_EQ(pool.Lookup(forged, std::vector<int32_t>{5, 6}), -1);
  EXPECT_EQ(pool.Lookup(forged, std::vector<int32_t>{1, 2}), block);
  EXPECT_FALSE(pool.Register(block, forged, std::vector<int32_t>{1, 2}));
}

TEST(CopyOnWriteTest, ForkSharesBlocksAndWritingCopiesTheSharedOne) {
  BlockPool pool(8, 4);
  BlockTable parent;
  ASSERT_TRUE(parent.Reserve(pool, 6).ok());  // one full block, one with 2 of 4 tokens
  BlockTable child = parent.Fork(pool);
  EXPECT_EQ(child.blocks(), parent.blocks());
  EXPECT_EQ(pool.num_used_blocks(), 2);
  EXPECT_EQ(pool.ref_count(parent.blocks()[1]), 2);
  // Appending token 6 writes into block 1, which both share: one copy.
  EXPECT_EQ(child.BlocksNeeded(pool, 6, 7), 1);
  std::vector<BlockCopy> copies;
  ASSERT_TRUE(child.Reserve(pool, 7).ok());
  ASSERT_TRUE(child.PrepareWrite(pool, 6, 7, copies).ok());
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].source, parent.blocks()[1]);
  EXPECT_EQ(copies[0].destination, child.blocks()[1]);
  EXPECT_EQ(child.blocks()[0], parent.blocks()[0]);  // the full block stays shared
  EXPECT_EQ(pool.ref_count(parent.blocks()[1]), 1);
  // Now the parent owns its partial block alone: no copy.
  copies.clear();
  EXPECT_EQ(parent.BlocksNeeded(pool, 6, 7), 0);
  ASSERT_TRUE(parent.PrepareWrite(pool, 6, 7, copies).ok());
  EXPECT_TRUE(copies.empty());
  parent.Release(pool);
  child.Release(pool);
  EXPECT_EQ(pool.num_used_blocks(), 0);
}

// The events a subscriber needs to mirror the cache: a prompt's blocks stored as one chained
// event, evictions as removals of exactly the hashes that were stored, and a mirror built from
// them equal to CachedBlocks().
TEST(BlockPoolEventsTest, StoredAndRemovedEventsMirrorTheCache) {
  BlockPool pool(3, 2);
  pool.set_record_events(true);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  BlockTable table;
  ASSERT_TRUE(table.Reserve(pool, 5).ok());
  table.CommitFullBlocks(pool, prompt, 5);
  std::vector<KvCacheEvent> events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::kStored);
  ASSERT_EQ(events[0].block_hashes.size(), 2u);
  EXPECT_FALSE(events[0].has_parent);
  EXPECT_EQ(events[0].token_ids, (std::vector<int32_t>{1, 2, 3, 4}));
  const uint64_t first = HashBlock(pool.key(), 0, {1, 2});
  EXPECT_EQ(events[0].block_hashes[0], first);
  EXPECT_EQ(events[0].block_hashes[1], HashBlock(pool.key(), first, {3, 4}));
  EXPECT_TRUE(pool.TakeEvents().empty());

  std::vector<CachedBlock> cached = pool.CachedBlocks();
  ASSERT_EQ(cached.size(), 2u);
  EXPECT_FALSE(cached[0].has_parent);
  EXPECT_TRUE(cached[1].has_parent);
  EXPECT_EQ(cached[1].parent_hash, first);

  // Freed, then two fresh blocks: the never-cached one first, then the least recently freed
  // cached block (the prompt's second, released first) is evicted.
  table.Release(pool);
  BlockTable other;
  ASSERT_TRUE(other.Reserve(pool, 4).ok());
  events = pool.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvCacheEvent::Kind::kRemoved);
  EXPECT_EQ(events[0].block_hashes, (std::vector<uint64_t>{cached[1].hash}));
  ASSERT_EQ(pool.CachedBlocks().size(), 1u);
  EXPECT_EQ(pool.CachedBlocks()[0].hash, first);
  other.Release(pool);
}

TEST(BlockPoolEventsTest, NothingIsRecordedUnlessAsked) {
  BlockPool pool(2, 2);
  BlockTable table;
  ASSERT_TRUE(table.Reserve(pool, 2).ok());
  table.CommitFullBlocks(pool, std::vector<int32_t>{7, 8}, 2);
  EXPECT_TRUE(pool.TakeEvents().empty());
  EXPECT_EQ(pool.CachedBlocks().size(), 1u);
  table.Release(pool);
}

}  // namespace
}  // namespace llmrt::kv
