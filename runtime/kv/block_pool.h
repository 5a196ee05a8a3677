// Paged KV cache bookkeeping: a pool of fixed-size blocks and per-sequence block tables.
//
// The pool hands out block ids in [0, num_blocks); the storage behind an id lives elsewhere
// (KvStorage on the CPU, device memory on a GPU), so this file is backend independent.
// Blocks carry reference counts so that a later prefix cache can share a full block between
// sequences: a block returns to the free list only when its last reference is released.
//
// Thread-safety: not thread-safe; the engine's step loop owns the pool and every table.
#ifndef LLMRT_KV_BLOCK_POOL_H_
#define LLMRT_KV_BLOCK_POOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt::kv {

// 16 tokens: small enough that a sequence wastes at most 15 slots, large enough that a block
// of one layer and kv head (16 x head_dim 128 x 4 bytes = 8 KiB) streams well.
inline constexpr int32_t kDefaultBlockSize = 16;

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A free block with reference count 1; ResourceExhausted when none is left.
  absl::StatusOr<int32_t> Allocate();
  // Adds a reference to an allocated block (prefix sharing).
  absl::Status AddRef(int32_t block);
  // Drops one reference; the block is free again when none is left.
  absl::Status Release(int32_t block);

  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_blocks_.size()); }
  int32_t block_size() const { return block_size_; }

 private:
  absl::Status CheckAllocated(int32_t block, const char* action) const;

  int32_t block_size_;
  std::vector<int32_t> ref_counts_;
  // LIFO: a just-released block is reused first while its lines may still be cached.
  std::vector<int32_t> free_blocks_;
};

// The blocks of one sequence, in order: token i lives in block blocks()[i / block_size] at
// offset i % block_size.
class BlockTable {
 public:
  BlockTable() = default;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;
  BlockTable(BlockTable&&) = default;
  BlockTable& operator=(BlockTable&&) = default;
  ~BlockTable() = default;  // Release() must be called before; the table holds no pool.

  // Makes room for `num_tokens` tokens in total, allocating blocks from `pool`. On failure
  // the table is unchanged (blocks allocated by this call are returned).
  absl::Status Reserve(BlockPool& pool, int64_t num_tokens);
  // Returns every block to `pool` and empties the table.
  void Release(BlockPool& pool);

  // Flat cache slot of token `index`: block * block_size + offset.
  int32_t Slot(int64_t index, int32_t block_size) const {
    return blocks_[index / block_size] * block_size + static_cast<int32_t>(index % block_size);
  }
  const std::vector<int32_t>& blocks() const { return blocks_; }
  int64_t capacity(int32_t block_size) const {
    return static_cast<int64_t>(blocks_.size()) * block_size;
  }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace llmrt::kv

#endif  // LLMRT_KV_BLOCK_POOL_H_
