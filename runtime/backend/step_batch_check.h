// Validation of a StepBatch against a backend's limits, shared by every backend: the batch
// comes from the engine, but a backend never trusts indices it is about to write through.
#ifndef LLMRT_BACKEND_STEP_BATCH_CHECK_H_
#define LLMRT_BACKEND_STEP_BATCH_CHECK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "runtime/backend/backend.h"

namespace llmrt {

struct StepLimits {
  int64_t max_tokens = 0;    // max_tokens_per_step
  int64_t max_token_id = 0;  // exclusive: the embedding table's rows
  bool has_kv_layers = false;
  bool kv_allocated = false;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
};

// Every token id in the vocabulary, every KV slot and block table entry inside the cache, the
// sequences tiling the batch rows in order, the logit rows inside the batch.
absl::Status CheckStepBatch(const StepBatch& batch, const StepLimits& limits);

}  // namespace llmrt

#endif  // LLMRT_BACKEND_STEP_BATCH_CHECK_H_
