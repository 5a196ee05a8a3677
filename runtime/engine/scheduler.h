// Scheduling policies: which sequences get how many tokens in the next step.
//
// Two small policies run in order each step (the split TensorRT-LLM makes between its capacity
// and micro-batch schedulers, in vLLM's chunked-prefill form):
//
//   RunningPolicy   every running sequence, oldest first, gets its remaining tokens (one decode
//                   token, or the rest of its prefill) up to the step's token budget. When the
//                   pool cannot hold them, the newest running sequence is preempted by
//                   recompute (blocks released, back to waiting) until it can, so the oldest
//                   always progresses: a request that fits the pool alone never fails for lack
//                   of KV.
//   AdmissionPolicy waiting sequences, oldest first, are admitted while the token budget,
//                   max_seqs and free blocks allow, each after matching its prompt against the
//                   prefix cache. FCFS is strict: it stops at the first one that does not fit,
//                   and admits nothing in a step that preempted.
//
// Both return (scheduled, paused) and change only the KV state of sequences (table,
// num_computed) and the pool; they are tested with a real BlockPool and no model.
//
// Thread-safety: none; the engine thread owns the lists.
#ifndef LLMRT_ENGINE_SCHEDULER_H_
#define LLMRT_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "runtime/engine/sequence.h"
#include "runtime/kv/block_pool.h"

namespace llmrt::engine {

struct StepBudget {
  int32_t tokens = 0;     // max_batched_tokens left in this step
  int32_t sequences = 0;  // max_seqs: running sequences allowed in total
};

struct ScheduledSequence {
  Sequence* sequence;
  int32_t num_tokens;  // tokens [num_computed, num_computed + num_tokens) run this step
};

struct ScheduleResult {
  std::vector<ScheduledSequence> scheduled;
  std::vector<Sequence*> paused;      // preempted (RunningPolicy) this step
  std::vector<kv::BlockCopy> copies;  // copy-on-write to do before the step runs
};

class RunningPolicy {
 public:
  // `running` is ordered oldest first; preempted sequences are removed from it, their blocks
  // released, num_computed reset, and listed in result.paused (oldest first).
  void Schedule(std::vector<Sequence*>& running, kv::BlockPool& pool, StepBudget& budget,
                ScheduleResult& result) const;
};

class AdmissionPolicy {
 public:
  // Moves admitted sequences from the front of `waiting` (oldest first) into `running` (kept
  // oldest first) and schedules their first chunk.
  void Schedule(std::deque<Sequence*>& waiting, std::vector<Sequence*>& running,
                kv::BlockPool& pool, StepBudget& budget, ScheduleResult& result) const;
};

// Makes room for tokens [num_computed, num_computed + num_tokens) of `sequence`: reserves the
// blocks and replaces shared blocks about to be written (copies appended to `copies`). The
// caller checked BlocksNeeded() against the free blocks.
absl::Status ReserveForStep(Sequence& sequence, int32_t num_tokens, kv::BlockPool& pool,
                            std::vector<kv::BlockCopy>& copies);

// Puts preempted sequences back into `waiting`, keeping it ordered oldest first (they are older
// than most waiting ones, so they go to the front: FCFS resumes them first).
void RequeuePaused(const std::vector<Sequence*>& paused, std::deque<Sequence*>& waiting);

}  // namespace llmrt::engine

#endif  // LLMRT_ENGINE_SCHEDULER_H_
