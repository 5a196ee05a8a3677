#include "runtime/engine/step_builder.h"

#include <vector>

#include "gtest/gtest.h"

namespace llmrt::engine {
namespace {

TEST(StepBuilderTest, FlattensSequencesWithSlotsPositionsAndLogitRows) {
  kv::BlockPool pool(8, 4);
  kv::BlockTable first, second;
  // Interleave allocations so neither table is contiguous.
  ASSERT_TRUE(first.Reserve(pool, 4).ok());
  ASSERT_TRUE(second.Reserve(pool, 4).ok());
  ASSERT_TRUE(first.Reserve(pool, 8).ok());
  ASSERT_TRUE(second.Reserve(pool, 6).ok());
  StepBuilder builder(4, 16);
  const std::vector<int32_t> first_tokens = {10, 11, 12};
  const std::vector<int32_t> second_tokens = {20, 21};
  EXPECT_EQ(builder.AddSequence(first_tokens.data(), 3, 3, first, LogitRows::kLast), 0);
  EXPECT_EQ(builder.AddSequence(second_tokens.data(), 2, 4, second, LogitRows::kAll), 3);
  EXPECT_EQ(builder.free_tokens(), 11);
  const StepBatch& batch = builder.batch();
  EXPECT_EQ(batch.token_ids, (std::vector<int32_t>{10, 11, 12, 20, 21}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{3, 4, 5, 4, 5}));
  const int32_t f0 = first.blocks()[0], f1 = first.blocks()[1], s1 = second.blocks()[1];
  EXPECT_EQ(batch.slot_mapping,
            (std::vector<int32_t>{f0 * 4 + 3, f1 * 4 + 0, f1 * 4 + 1, s1 * 4 + 0, s1 * 4 + 1}));
  EXPECT_EQ(batch.logit_rows, (std::vector<int32_t>{2, 3, 4}));
  ASSERT_EQ(batch.sequences.size(), 2u);
  EXPECT_EQ(batch.sequences[0].context_length, 6);
  EXPECT_EQ(batch.sequences[1].first_token, 3);
  EXPECT_EQ(batch.sequences[1].context_length, 6);
  EXPECT_EQ(batch.sequences[1].block_table, second.blocks().data());
  builder.Clear();
  EXPECT_EQ(builder.batch().num_tokens(), 0);
  EXPECT_EQ(builder.free_tokens(), 16);
  first.Release(pool);
  second.Release(pool);
}

}  // namespace
}  // namespace llmrt::engine
