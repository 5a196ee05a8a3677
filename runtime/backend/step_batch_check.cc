#include "runtime/backend/step_batch_check.h"

#include "absl/strings/str_format.h"

namespace llmrt {

absl::Status CheckStepBatch(const StepBatch& batch, const StepLimits& limits) {
  const int64_t num_tokens = batch.num_tokens();
  if (num_tokens > limits.max_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step: %d tokens, more than max_tokens_per_step %d", num_tokens, limits.max_tokens));
  }
  if (static_cast<int64_t>(batch.positions.size()) != num_tokens ||
      static_cast<int64_t>(batch.slot_mapping.size()) != num_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d token ids but %d positions and %d slots", num_tokens,
                        batch.positions.size(), batch.slot_mapping.size()));
  }
  if (limits.has_kv_layers && !limits.kv_allocated) {
    return absl::FailedPreconditionError("step: the KV cache is not allocated");
  }
  const int64_t num_slots = static_cast<int64_t>(limits.num_blocks) * limits.block_size;
  for (int64_t row = 0; row < num_tokens; ++row) {
    const int32_t token = batch.token_ids[row];
    if (token < 0 || token >= limits.max_token_id) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step: token %d at batch row %d is outside the vocabulary [0, %d)", token,
                          row, limits.max_token_id));
    }
    if (limits.kv_allocated &&
        (batch.slot_mapping[row] < 0 || batch.slot_mapping[row] >= num_slots)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step: KV slot %d of batch row %d is outside the cache [0, %d)",
                          batch.slot_mapping[row], row, num_slots));
    }
  }
  int64_t next_row = 0;
  for (size_t index = 0; index < batch.sequences.size(); ++index) {
    const StepSequence& sequence = batch.sequences[index];
    if (sequence.first_token != next_row || sequence.num_tokens <= 0 ||
        sequence.context_length < sequence.num_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "step: sequence %d has rows [%d, +%d) with context %d; expected rows from %d, at least "
          "one token, context >= tokens",
          index, sequence.first_token, sequence.num_tokens, sequence.context_length, next_row));
    }
    next_row += sequence.num_tokens;
    if (limits.kv_allocated) {
      const int64_t needed_blocks =
          (static_cast<int64_t>(sequence.context_length) + limits.block_size - 1) /
          limits.block_size;
      if (sequence.num_blocks < needed_blocks || sequence.block_table == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrFormat("step: sequence %d has %d blocks for %d tokens of context, needs %d",
                            index, sequence.num_blocks, sequence.context_length, needed_blocks));
      }
      for (int64_t block = 0; block < needed_blocks; ++block) {
        if (sequence.block_table[block] < 0 || sequence.block_table[block] >= limits.num_blocks) {
          return absl::InvalidArgumentError(
              absl::StrFormat("step: sequence %d block table entry %d is block %d, outside [0, %d)",
                              index, block, sequence.block_table[block], limits.num_blocks));
        }
      }
    }
  }
  if (next_row != num_tokens) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "step: sequences cover %d rows, the batch has %d tokens", next_row, num_tokens));
  }
  if (static_cast<int64_t>(batch.logit_rows.size()) > limits.max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("step: %d logit rows, more than max_tokens_per_step %d",
                        batch.logit_rows.size(), limits.max_tokens));
  }
  for (int32_t row : batch.logit_rows) {
    if (row < 0 || row >= num_tokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("step: logit row %d outside the batch [0, %d)", row, num_tokens));
    }
  }
  return absl::OkStatus();
}

}  // namespace llmrt
