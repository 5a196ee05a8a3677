#include "runtime/engine/scheduler.h"

#include <algorithm>

namespace llmrt::engine {

absl::Status ReserveForStep(Sequence& sequence, int32_t num_tokens, kv::BlockPool& pool,
                            std::vector<kv::BlockCopy>& copies) {
  const int64_t end = sequence.num_computed + num_tokens;
  if (absl::Status status = sequence.table.Reserve(pool, end); !status.ok()) return status;
  return sequence.table.PrepareWrite(pool, sequence.num_computed, end, copies);
}

namespace {

void Preempt(Sequence& sequence, kv::BlockPool& pool) {
  sequence.table.Release(pool);
  sequence.num_computed = 0;
}

}  // namespace

void RunningPolicy::Schedule(std::vector<Sequence*>& running, kv::BlockPool& pool,
                             StepBudget& budget, ScheduleResult& result) const {
  // Decode tokens are set aside first; prompt tokens get what is left, capped while decoding.
  int32_t decoding = 0;
  for (const Sequence* sequence : running) decoding += sequence->remaining() == 1 ? 1 : 0;
  int32_t prefill_tokens = std::max(0, budget.tokens - decoding);
  if (decoding > 0 && budget.decode_prefill_cap > 0) {
    prefill_tokens = std::min(prefill_tokens, budget.decode_prefill_cap);
  }
  budget.prefill_tokens = std::min(budget.prefill_tokens, prefill_tokens);
  size_t kept = 0;  // running[0, kept) stay; the tail is preempted
  size_t end = running.size();
  for (size_t position = 0; position < end; ++position) {
    Sequence& sequence = *running[position];
    const bool decode = sequence.remaining() == 1;
    const int32_t num_tokens =
        decode ? std::min(1, budget.tokens)
               : static_cast<int32_t>(std::min<int64_t>(
                     sequence.remaining(), std::min(budget.tokens, budget.prefill_tokens)));
    if (num_tokens <= 0) {
      running[kept++] = &sequence;  // out of budget (or nothing to do): waits for a later step
      continue;
    }
    bool self_preempted = false;
    while (sequence.table.BlocksNeeded(pool, sequence.num_computed,
                                       sequence.num_computed + num_tokens) >
           pool.num_free_blocks()) {
      // Newest first; the sequence itself when nothing newer is left.
      Sequence& victim = *running[end - 1];
      Preempt(victim, pool);
      result.paused.push_back(&victim);
      --end;
      if (&victim == &sequence) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    // Cannot fail: the blocks were counted above.
    ReserveForStep(sequence, num_tokens, pool, result.copies).IgnoreError();
    result.scheduled.push_back({&sequence, num_tokens});
    budget.tokens -= num_tokens;
    if (!decode) budget.prefill_tokens -= num_tokens;
    running[kept++] = &sequence;
  }
  running.resize(kept);
  // Preempted newest first; report them oldest first.
  std::reverse(result.paused.begin(), result.paused.end());
}

void AdmissionPolicy::Schedule(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                               kv::BlockPool& pool, StepBudget& budget,
                               ScheduleResult& result) const {
  while (!waiting.empty() && std::min(budget.tokens, budget.prefill_tokens) > 0 &&
         static_cast<int32_t>(running.size()) < budget.sequences) {
    Sequence& sequence = *waiting.front();
    const kv::BlockPoolStats stats_before = pool.stats();
    if (sequence.table.blocks().empty()) {
      // At most size - 1 tokens: the last one must run to give the logits of the next token.
      sequence.num_computed = sequence.table.MatchPrefix(
          pool, sequence.tokens, static_cast<int64_t>(sequence.tokens.size()) - 1);
    }
    const int32_t num_tokens = static_cast<int32_t>(
        std::min<int64_t>(sequence.remaining(), std::min(budget.tokens, budget.prefill_tokens)));
    if (sequence.table.BlocksNeeded(pool, sequence.num_computed,
                                    sequence.num_computed + num_tokens) > pool.num_free_blocks()) {
      // Not now: give the matched blocks back and do not count the lookup twice.
      sequence.table.Release(pool);
      sequence.num_computed = 0;
      pool.stats().prefix_queried_tokens = stats_before.prefix_queried_tokens;
      pool.stats().prefix_hit_tokens = stats_before.prefix_hit_tokens;
      break;
    }
    ReserveForStep(sequence, num_tokens, pool, result.copies).IgnoreError();
    result.scheduled.push_back({&sequence, num_tokens});
    budget.tokens -= num_tokens;
    budget.prefill_tokens -= num_tokens;
    waiting.pop_front();
    // Keep `running` oldest first: a preempted sequence coming back is older than the ones
    // that kept running, and RunningPolicy preempts from the back.
    running.insert(
        std::upper_bound(running.begin(), running.end(), &sequence,
                         [](const Sequence* a, const Sequence* b) { return a->OlderThan(*b); }),
        &sequence);
  }
}

void RequeuePaused(const std::vector<Sequence*>& paused, std::deque<Sequence*>& waiting) {
  for (auto sequence = paused.rbegin(); sequence != paused.rend(); ++sequence) {
    auto position = std::find_if(waiting.begin(), waiting.end(), [&](const Sequence* other) {
      return (*sequence)->OlderThan(*other);
    });
    waiting.insert(position, *sequence);
  }
}

}  // namespace llmrt::engine
