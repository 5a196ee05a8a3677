// The scheduling policies with a real BlockPool and no model.
#include "runtime/engine/scheduler.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::engine {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  // A sequence with `prompt` tokens 1000 * arrival + i (distinct prompts: no prefix hits).
  Sequence* Add(int64_t prompt, uint64_t base = 0) {
    auto sequence = std::make_unique<Sequence>();
    sequence->arrival = next_arrival_++;
    const uint64_t seed = base != 0 ? base : sequence->arrival * 1000 + 1;
    for (int64_t i = 0; i < prompt; ++i) {
      sequence->tokens.push_back(static_cast<int32_t>(seed + i));
    }
    sequence->prompt_size = prompt;
    sequences_.push_back(std::move(sequence));
    waiting_.push_back(sequences_.back().get());
    return sequences_.back().get();
  }

  // One engine step without a model: schedule, "compute" (advance num_computed, commit full
  // blocks), and give every sequence whose tokens all ran one new token.
  ScheduleResult Step(int32_t max_tokens, int32_t max_seqs, int32_t decode_prefill_cap = 0) {
    ScheduleResult result;
    StepBudget budget{max_tokens, max_seqs, decode_prefill_cap};
    RunningPolicy().Schedule(running_, pool_, budget, result);
    RequeuePaused(result.paused, waiting_);
    if (result.paused.empty())
      AdmissionPolicy().Schedule(waiting_, running_, pool_, budget, result);
    for (const ScheduledSequence& scheduled : result.scheduled) {
      Sequence& sequence = *scheduled.sequence;
      sequence.num_computed += scheduled.num_tokens;
      EXPECT_LE(sequence.num_computed, sequence.table.capacity(pool_.block_size()));
      sequence.table.CommitFullBlocks(pool_, sequence.tokens, sequence.num_computed);
      if (sequence.remaining() == 0) sequence.tokens.push_back(7);
    }
    return result;
  }

  void ReleaseAll() {
    for (auto& sequence : sequences_) sequence->table.Release(pool_);
  }

  kv::BlockPool pool_{8, 4};  // 32 token slots
  std::vector<std::unique_ptr<Sequence>> sequences_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;
  uint64_t next_arrival_ = 0;
};

TEST_F(SchedulerTest, ChunksPrefillUnderTheTokenBudgetAndMixesDecode) {
  Sequence* first = Add(6);
  ScheduleResult step = Step(4, 8);
  ASSERT_EQ(step.scheduled.size(), 1u);
  EXPECT_EQ(step.scheduled[0].num_tokens, 4);  // chunk 1 of the 6-token prompt
  Sequence* second = Add(5);
  step = Step(4, 8);
  // The running prefill finishes (2 tokens), the newcomer gets the remaining 2 of the budget.
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[0].sequence, first);
  EXPECT_EQ(step.scheduled[0].num_tokens, 2);
  EXPECT_EQ(step.scheduled[1].sequence, second);
  EXPECT_EQ(step.scheduled[1].num_tokens, 2);
  step = Step(4, 8);
  // A decode token for the first, the next prefill chunk for the second.
  EXPECT_EQ(step.scheduled[0].num_tokens, 1);
  EXPECT_EQ(step.scheduled[1].num_tokens, 3);
  ReleaseAll();
  EXPECT_EQ(pool_.num_used_blocks(), 0);
}

TEST_F(SchedulerTest, DecodeTokensComeBeforeAnOlderSequencesPrefillChunk) {
  Sequence* old_one = Add(12);
  Sequence* young = Add(2);
  Step(16, 8);  // both prompts
  Step(16, 8);  // both decode
  ASSERT_EQ(young->remaining(), 1);
  // The old one is preempted by recompute and comes back: 14 tokens to prefill again, and it
  // is older than the decoding one. (A new first token keeps its cached blocks out of it, as if
  // they had been evicted.)
  old_one->table.Release(pool_);
  old_one->num_computed = 0;
  old_one->tokens[0] += 500;
  running_.erase(std::find(running_.begin(), running_.end(), old_one));
  waiting_.push_front(old_one);
  ScheduleResult step = Step(4, 8);
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[0].sequence, young);
  EXPECT_EQ(step.scheduled[0].num_tokens, 1);
  EXPECT_EQ(step.scheduled[1].sequence, old_one);
  EXPECT_EQ(step.scheduled[1].num_tokens, 3);
  // Now the old one runs first, mid-prefill, and a 4-token budget would all go to it oldest
  // first; the decode token is set aside before its chunk is cut.
  step = Step(4, 8);
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[0].sequence, old_one);
  EXPECT_EQ(step.scheduled[0].num_tokens, 3);
  EXPECT_EQ(step.scheduled[1].sequence, young);
  EXPECT_EQ(step.scheduled[1].num_tokens, 1);
  ReleaseAll();
}

TEST_F(SchedulerTest, PromptTokensAreCappedOnlyWhileSomethingDecodes) {
  Sequence* first = Add(3);
  // Alone, nothing decodes: the whole prompt runs in one step, cap or not.
  ScheduleResult step = Step(64, 8, /*decode_prefill_cap=*/2);
  ASSERT_EQ(step.scheduled.size(), 1u);
  EXPECT_EQ(step.scheduled[0].num_tokens, 3);
  Sequence* second = Add(7);
  Sequence* third = Add(5);
  // The first decodes: the two new prompts share a 2-token prefill chunk per step, FCFS.
  step = Step(64, 8, 2);
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[0].sequence, first);
  EXPECT_EQ(step.scheduled[0].num_tokens, 1);
  EXPECT_EQ(step.scheduled[1].sequence, second);
  EXPECT_EQ(step.scheduled[1].num_tokens, 2);
  EXPECT_EQ(waiting_.front(), third);
  int steps = 1;
  while (second->remaining() > 1) {
    step = Step(64, 8, 2);
    ++steps;
    int32_t prompt_tokens = 0;
    for (const ScheduledSequence& scheduled : step.scheduled) {
      if (scheduled.sequence != first) prompt_tokens += scheduled.num_tokens;
    }
    EXPECT_LE(prompt_tokens, 2);
  }
  // 6 of the 7 tokens in chunks of 2; the last one then runs like a decode token.
  EXPECT_EQ(steps, 3);
  ReleaseAll();
}

TEST_F(SchedulerTest, MaxSeqsLimitsAdmission) {
  Add(2);
  Add(2);
  Add(2);
  ScheduleResult step = Step(16, 2);
  EXPECT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(waiting_.size(), 1u);
  ReleaseAll();
}

TEST_F(SchedulerTest, AdmissionStopsAtTheFirstRequestThatDoesNotFit) {
  Add(20);  // 5 blocks
  Add(16);  // 4 blocks: does not fit next to the first
  Add(2);   // would fit, but FCFS does not let it jump the queue
  ScheduleResult step = Step(64, 8);
  ASSERT_EQ(step.scheduled.size(), 1u);
  EXPECT_EQ(waiting_.size(), 2u);
  EXPECT_EQ(pool_.num_used_blocks(), 5);
  ReleaseAll();
}

TEST_F(SchedulerTest, PreemptsTheNewestWhenBlocksRunOutAndTheOldestAlwaysProgresses) {
  Sequence* old_one = Add(12);  // 3 blocks
  Sequence* new_one = Add(16);  // 4 blocks; 7 of 8 used
  Step(64, 8);
  ASSERT_EQ(running_.size(), 2u);
  EXPECT_EQ(pool_.num_used_blocks(), 7);
  // Decoding: the old one takes the 8th block for its token 12; the new one then needs a 5th
  // block for its token 16, the pool is dry, and it is the newest: it is preempted.
  ScheduleResult step = Step(64, 8);
  ASSERT_EQ(step.paused.size(), 1u);
  EXPECT_EQ(step.paused[0], new_one);
  EXPECT_EQ(new_one->num_computed, 0);
  EXPECT_TRUE(new_one->table.blocks().empty());
  EXPECT_EQ(waiting_.front(), new_one);
  EXPECT_EQ(old_one->num_computed, 13);
  for (int i = 0; i < 20 && old_one->num_computed < 20; ++i) Step(64, 8);
  // The old one kept its KV the whole time and kept decoding.
  EXPECT_GE(old_one->num_computed, 20);
  EXPECT_EQ(running_.front(), old_one);
  ReleaseAll();
  EXPECT_EQ(pool_.num_used_blocks(), 0);
}

TEST_F(SchedulerTest, ASequenceThatFitsAloneAlwaysFinishesUnderPressure) {
  // Four sequences that each need up to 28 of the 32 slots: they cannot all run at once, but
  // preemption by recompute lets every one reach 28 tokens.
  std::vector<Sequence*> all;
  for (int i = 0; i < 4; ++i) all.push_back(Add(10));
  int64_t preemptions = 0;
  for (int step = 0; step < 400; ++step) {
    ScheduleResult result = Step(8, 4);
    preemptions += static_cast<int64_t>(result.paused.size());
    // Finish a sequence at 28 tokens: release it like the engine does.
    for (Sequence* sequence : all) {
      if (sequence->num_computed >= 28 && !sequence->table.blocks().empty()) {
        sequence->table.Release(pool_);
        running_.erase(std::find(running_.begin(), running_.end(), sequence));
        sequence->num_computed = 1 << 20;  // marks done
      }
    }
    if (running_.empty() && waiting_.empty()) break;
  }
  EXPECT_GT(preemptions, 0);
  for (Sequence* sequence : all) EXPECT_EQ(sequence->num_computed, 1 << 20);
  EXPECT_EQ(pool_.num_used_blocks(), 0);
}

TEST_F(SchedulerTest, AdmissionSharesCachedPromptBlocks) {
  Sequence* first = Add(9, 500);
  Step(64, 8);
  Sequence* second = Add(9, 500);  // the same 9 prompt tokens
  ScheduleResult step = Step(64, 8);
  // Two full blocks (8 tokens) are hits; only the 9th token runs.
  ASSERT_EQ(step.scheduled.size(), 2u);
  EXPECT_EQ(step.scheduled[1].sequence, second);
  EXPECT_EQ(step.scheduled[1].num_tokens, 1);
  EXPECT_EQ(second->table.blocks()[0], first->table.blocks()[0]);
  EXPECT_EQ(second->table.blocks()[1], first->table.blocks()[1]);
  EXPECT_EQ(pool_.stats().prefix_hit_tokens, 8);
  ReleaseAll();
}

TEST_F(SchedulerTest, ForkedSequenceCopiesTheSharedPartialBlockBeforeWriting) {
  Sequence* parent = Add(6);
  Step(64, 8);
  // Fork like the engine does for n = 2 after the prompt ran.
  auto child = std::make_unique<Sequence>();
  child->arrival = parent->arrival;
  child->index = 1;
  child->tokens = parent->tokens;
  child->num_computed = parent->num_computed;
  child->table = parent->table.Fork(pool_);
  running_.push_back(child.get());
  EXPECT_EQ(pool_.num_used_blocks(), 2);
  ScheduleResult step = Step(64, 8);
  // Both write token 6 into the shared block 1: the first writer copies it, the second then
  // owns the original alone.
  ASSERT_EQ(step.copies.size(), 1u);
  EXPECT_EQ(parent->table.blocks()[0], child->table.blocks()[0]);
  EXPECT_NE(parent->table.blocks()[1], child->table.blocks()[1]);
  EXPECT_EQ(pool_.num_used_blocks(), 3);
  child->table.Release(pool_);
  ReleaseAll();
  EXPECT_EQ(pool_.num_used_blocks(), 0);
}

}  // namespace
}  // namespace llmrt::engine
