// StepBuilder: flattens several sequences' new tokens into one StepBatch (backend.h).
//
// The batch's vectors keep their capacity between steps, so after the first few steps
// building a step does not allocate. Not thread-safe.
#ifndef LLMRT_ENGINE_STEP_BUILDER_H_
#define LLMRT_ENGINE_STEP_BUILDER_H_

#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/kv/block_pool.h"

namespace llmrt::engine {

enum class LogitRows { kNone, kLast, kAll };

class StepBuilder {
 public:
  StepBuilder(int32_t block_size, int32_t max_tokens_per_step)
      : block_size_(block_size), max_tokens_(max_tokens_per_step) {}

  void Clear() { batch_.Clear(); }
  int32_t free_tokens() const { return max_tokens_ - batch_.num_tokens(); }

  // Adds `count` tokens of a sequence whose first new token has index `start` in the sequence
  // (the tokens before it are cached). `table` must already hold blocks for start + count
  // tokens and stay unchanged until the step ran. Returns the batch row of the first token.
  // The caller keeps count <= free_tokens().
  int32_t AddSequence(const int32_t* tokens, int32_t count, int64_t start,
                      const kv::BlockTable& table, LogitRows logit_rows);

  const StepBatch& batch() const { return batch_; }

 private:
  int32_t block_size_;
  int32_t max_tokens_;
  StepBatch batch_;
};

}  // namespace llmrt::engine

#endif  // LLMRT_ENGINE_STEP_BUILDER_H_
