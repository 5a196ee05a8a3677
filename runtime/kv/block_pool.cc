#include "runtime/kv/block_pool.h"

#include "absl/strings/str_format.h"

namespace llmrt::kv {

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), ref_counts_(num_blocks, 0) {
  free_blocks_.reserve(num_blocks);
  // Pushed in reverse so that Allocate() hands out 0, 1, 2, ... on a fresh pool.
  for (int32_t block = num_blocks - 1; block >= 0; --block) free_blocks_.push_back(block);
}

absl::StatusOr<int32_t> BlockPool::Allocate() {
  if (free_blocks_.empty()) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache: all %d blocks of %d tokens are in use", num_blocks(), block_size_));
  }
  int32_t block = free_blocks_.back();
  free_blocks_.pop_back();
  ref_counts_[block] = 1;
  return block;
}

absl::Status BlockPool::CheckAllocated(int32_t block, const char* action) const {
  if (block < 0 || block >= num_blocks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache: cannot %s block %d, the pool has blocks [0, %d)", action, block, num_blocks()));
  }
  if (ref_counts_[block] == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("KV cache: cannot %s block %d, it is free", action, block));
  }
  return absl::OkStatus();
}

absl::Status BlockPool::AddRef(int32_t block) {
  if (absl::Status status = CheckAllocated(block, "add a reference to"); !status.ok()) {
    return status;
  }
  ++ref_counts_[block];
  return absl::OkStatus();
}

absl::Status BlockPool::Release(int32_t block) {
  if (absl::Status status = CheckAllocated(block, "release"); !status.ok()) return status;
  if (--ref_counts_[block] == 0) free_blocks_.push_back(block);
  return absl::OkStatus();
}

absl::Status BlockTable::Reserve(BlockPool& pool, int64_t num_tokens) {
  const int32_t block_size = pool.block_size();
  const int64_t needed_blocks = (num_tokens + block_size - 1) / block_size;
  const size_t old_size = blocks_.size();
  while (static_cast<int64_t>(blocks_.size()) < needed_blocks) {
    absl::StatusOr<int32_t> block = pool.Allocate();
    if (!block.ok()) {
      for (size_t i = old_size; i < blocks_.size(); ++i) pool.Release(blocks_[i]).IgnoreError();
      blocks_.resize(old_size);
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s; a sequence needs %d blocks for %d tokens", block.status().message(),
                          needed_blocks, num_tokens));
    }
    blocks_.push_back(*block);
  }
  return absl::OkStatus();
}

void BlockTable::Release(BlockPool& pool) {
  for (int32_t block : blocks_) pool.Release(block).IgnoreError();
  blocks_.clear();
}

}  // namespace llmrt::kv
