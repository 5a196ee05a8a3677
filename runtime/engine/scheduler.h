// Scheduling policies: which sequences get how many tokens in the next step.
//
// Two small policies run in order each step (the split TensorRT-LLM makes between its capacity
// and micro-batch schedulers, in vLLM's chunked-prefill form):
//
//   RunningPolicy   decode tokens first: the budget for one token per decoding sequence is set
//                   aside before any prefill chunk is cut, so an old sequence still prefilling
//                   (a long prompt, a preempted one recomputing) never starves the decoders.
//                   Then every running sequence, oldest first, gets its decode token or the
//                   next chunk of its prefill, the chunk limited by the prompt-token budget
//                   (StepBudget::prefill_tokens). When the pool cannot hold them, the newest
//                   running sequence is preempted by recompute (blocks released, back to
//                   waiting) until it can, so the oldest always progresses: a request that fits
//                   the pool alone never fails for lack of KV.
//   AdmissionPolicy waiting sequences, oldest first, are admitted while the prompt-token
//                   budget, max_seqs and free blocks allow, each after matching its prompt
//                   against the prefix cache. FCFS is strict: it stops at the first one that
//                   does not fit, and admits nothing in a step that preempted.
//
// The prompt-token budget is what keeps inter-token latency low under arrivals: in a step that
// runs any decode token, prompt tokens are capped at StepBudget::decode_prefill_cap (the
// engine's prefill_chunk_tokens), so a decode step grows by at most one bounded prefill chunk
// instead of by every new prompt at once; TTFT grows instead (docs/architecture.md, "Engine").
//
// Both return (scheduled, paused) and change only the KV state of sequences (table,
// num_computed) and the pool; they are tested with a real BlockPool and no model.
//
// Thread-safety: none; the engine thread owns the lists.
#ifndef LLMRT_ENGINE_SCHEDULER_H_
#define LLMRT_ENGINE_SCHEDULER_H_

#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "runtime/engine/sequence.h"
#include "runtime/kv/block_pool.h"

namespace llmrt::engine {

struct StepBudget {
  int32_t tokens = 0;     // max_batched_tokens left in this step
  int32_t sequences = 0;  // max_seqs: running sequences allowed in total
  // Prompt tokens a step that also runs decode tokens may run; <= 0: no cap beyond `tokens`.
  int32_t decode_prefill_cap = 0;
  // Prompt tokens left in this step. RunningPolicy sets it (tokens minus the decode tokens it
  // sets aside, capped at decode_prefill_cap when anything decodes); AdmissionPolicy spends it.
  int32_t prefill_tokens = std::numeric_limits<int32_t>::max();
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
