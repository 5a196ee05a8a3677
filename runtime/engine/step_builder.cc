#include "runtime/engine/step_builder.h"

namespace llmrt::engine {

int32_t StepBuilder::AddSequence(const int32_t* tokens, int32_t count, int64_t start,
                                 const kv::BlockTable& table, LogitRows logit_rows) {
  const int32_t first_row = batch_.num_tokens();
  StepSequence sequence;
  sequence.first_token = first_row;
  sequence.num_tokens = count;
  sequence.context_length = static_cast<int32_t>(start + count);
  sequence.block_table = table.blocks().data();
  sequence.num_blocks = static_cast<int32_t>(table.blocks().size());
  batch_.sequences.push_back(sequence);
  for (int32_t i = 0; i < count; ++i) {
    const int64_t index = start + i;
    batch_.token_ids.push_back(tokens[i]);
    // Positions equal cache indices: a sequence starts at position 0 and has no gaps.
    batch_.positions.push_back(static_cast<int32_t>(index));
    batch_.slot_mapping.push_back(table.Slot(index, block_size_));
    if (logit_rows == LogitRows::kAll) batch_.logit_rows.push_back(first_row + i);
  }
  if (logit_rows == LogitRows::kLast && count > 0)
    batch_.logit_rows.push_back(first_row + count - 1);
  return first_row;
}

}  // namespace llmrt::engine
