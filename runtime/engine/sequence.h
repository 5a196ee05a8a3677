// Sequence: the engine's state for one completion (one of a request's n choices).
//
// The scheduler reads and changes only the KV part (tokens, num_computed, table); the rest is the
// engine's. A sequence's tokens are prompt + generated; num_computed of them have KV in the
// table. Preemption by recompute releases the table and sets num_computed to 0: the next
// admission recomputes the tokens (and usually finds the full prompt blocks in the prefix cache).
//
// Ownership: the engine owns every Sequence (unique_ptr); the scheduler's lists hold raw
// pointers. Thread-safety: engine thread only.
#ifndef LLMRT_ENGINE_SEQUENCE_H_
#define LLMRT_ENGINE_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kv/block_pool.h"
#include "runtime/sampling/sampler.h"
#include "runtime/sampling/stop_strings.h"
#include "runtime/sampling/token_constraint.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt::engine {

struct RequestState;

struct Sequence {
  // FCFS order: (arrival, choice index). Smaller is older.
  uint64_t arrival = 0;
  int32_t index = 0;
  bool OlderThan(const Sequence& other) const {
    return arrival != other.arrival ? arrival < other.arrival : index < other.index;
  }

  std::vector<int32_t> tokens;  // prompt + generated
  int64_t prompt_size = 0;
  int64_t num_computed = 0;  // tokens whose KV is in `table`
  kv::BlockTable table;
  int64_t remaining() const { return static_cast<int64_t>(tokens.size()) - num_computed; }

  // Engine state; null in scheduler tests.
  RequestState* request = nullptr;
  std::unique_ptr<sampling::Sampler> sampler;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<sampling::StopStringMatcher> stop_matcher;
  std::unique_ptr<sampling::TokenConstraint> constraint;  // null: unconstrained
  std::vector<uint32_t> allowed;                          // the constraint's mask, per step
  int64_t num_generated = 0;
  int32_t pending_forks = 0;  // n - 1 until the first token is sampled
  bool finished = false;
};

}  // namespace llmrt::engine

#endif  // LLMRT_ENGINE_SEQUENCE_H_
