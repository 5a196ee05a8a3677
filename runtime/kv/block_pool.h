// Paged KV cache bookkeeping: a pool of fixed-size blocks, per-sequence block tables, reference
// counts, prefix caching and copy-on-write.
//
// The pool hands out block ids in [0, num_blocks); the storage behind an id lives elsewhere
// (KvStorage on the CPU, device memory on a GPU), so this file is backend independent.
//
// Prefix caching. A *full* block whose tokens were computed is registered under a hash of its
// tokens chained on the hash of the block before it, so equal hashes mean equal whole prefixes
// (vLLM's automatic prefix caching). A new sequence looks its prompt's full blocks up and shares
// the hits (reference count + 1) instead of recomputing them. When its last reference goes, a
// registered block is not wiped: it joins an LRU list of "cached free" blocks, still findable,
// and is evicted (its hash forgotten) only when Allocate() has no never-cached free block left.
// The hash is SipHash-2-4 keyed with 128 random bits drawn once per process: a client of a
// shared server that could predict hashes could craft a prompt whose block collides with another
// user's, then read that user's cached continuation or poison it. The key makes hashes
// unpredictable; the tokens of each registered block are also kept and compared on a hit
// (block_size x 4 bytes per block), so even a chance 64-bit collision cannot return wrong KV.
//
// Copy-on-write. Fork() shares every block of a table (n > 1 completions of one prompt); the
// first write into a block that has more than one reference (the prompt's last, partly filled
// block) goes to a fresh copy instead: PrepareWrite() swaps the block and reports the copy the
// backend must make before the step runs.
//
// Thread-safety: not thread-safe; the engine's step loop owns the pool and every table.
#ifndef LLMRT_KV_BLOCK_POOL_H_
#define LLMRT_KV_BLOCK_POOL_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace llmrt::kv {

// 16 tokens: small enough that a sequence wastes at most 15 slots, large enough that a block
// of one layer and kv head (16 x head_dim 128 x 4 bytes = 8 KiB) streams well.
inline constexpr int32_t kDefaultBlockSize = 16;

// The 128-bit SipHash key; RandomPrefixCacheKey() draws one from std::random_device.
using PrefixCacheKey = std::array<uint64_t, 2>;
PrefixCacheKey RandomPrefixCacheKey();
// SipHash-2-4 (Aumasson and Bernstein, 2012) of `bytes` under `key`.
uint64_t SipHash24(const PrefixCacheKey& key, absl::Span<const uint8_t> bytes);
// SipHash-2-4 of `parent_hash` followed by `tokens`, all little-endian, keyed with `key`.
uint64_t HashBlock(const PrefixCacheKey& key, uint64_t parent_hash,
                   absl::Span<const int32_t> tokens);

// A change to the set of registered (prefix-cached) blocks, for subscribers that mirror a
// replica's cache: KV-cache events (runtime/server/kv_events.h publishes them in vLLM's schema).
// Hashes are the pool's own chained block hashes (HashBlock), so a stored block names its parent
// by the hash the parent was stored under. Runs are coalesced as they are recorded: blocks
// registered one after another along one chain make one kStored event (the parent of the first,
// then every hash and all their tokens in order), consecutive evictions one kRemoved.
struct KvCacheEvent {
  enum class Kind { kStored, kRemoved, kAllCleared };
  Kind kind = Kind::kStored;
  std::vector<uint64_t> block_hashes;
  bool has_parent = false;  // kStored: false for the first block of a prompt
  uint64_t parent_hash = 0;
  std::vector<int32_t> token_ids;  // kStored: block_size tokens per hash
};

// One registered block as the pool holds it (BlockPool::CachedBlocks()).
struct CachedBlock {
  int32_t block = 0;
  uint64_t hash = 0;
  bool has_parent = false;
  uint64_t parent_hash = 0;
  std::vector<int32_t> token_ids;
};

struct BlockPoolStats {
  int64_t prefix_queried_tokens = 0;  // full-block prompt tokens looked up
  int64_t prefix_hit_tokens = 0;      // of which found in the cache
  int64_t evictions = 0;              // cached free blocks reused for something else
};

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t block_size,
            const PrefixCacheKey& key = RandomPrefixCacheKey());
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A free block with reference count 1: a never-cached one if any, else the least recently
  // freed cached block (evicted from the cache). ResourceExhausted when every block is in use.
  absl::StatusOr<int32_t> Allocate();
  // Adds a reference to an allocated block, or revives a cached free block (prefix hit).
  absl::Status AddRef(int32_t block);
  // Drops one reference; at zero the block is free (cached free if registered).
  absl::Status Release(int32_t block);

  // The registered block holding exactly `tokens` under `hash`, or -1.
  int32_t Lookup(uint64_t hash, absl::Span<const int32_t> tokens) const;
  // Registers a full, computed, referenced block. Returns false (and changes nothing) when the
  // hash already has a block (the same prefix computed twice; the first copy stays the cached
  // one) or the block is registered already. `parent_hash` (absent for a prompt's first block)
  // is kept for CachedBlocks() and the kStored event.
  bool Register(int32_t block, uint64_t hash, absl::Span<const int32_t> tokens,
                std::optional<uint64_t> parent_hash = std::nullopt);

  // KV-cache events: off by default (nothing is recorded). When on, every registration and every
  // eviction is appended to a buffer that TakeEvents() empties; the engine takes it once a step.
  void set_record_events(bool record) { record_events_ = record; }
  bool record_events() const { return record_events_; }
  std::vector<KvCacheEvent> TakeEvents();
  // Every registered block, ascending by block id: what a subscriber of the events must hold.
  std::vector<CachedBlock> CachedBlocks() const;

  int32_t ref_count(int32_t block) const { return ref_counts_[block]; }
  bool is_cached(int32_t block) const { return cached_hash_valid_[block]; }
  int32_t num_blocks() const { return static_cast<int32_t>(ref_counts_.size()); }
  // Blocks Allocate() can still hand out: never-cached free plus cached free.
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_blocks_.size()) + lru_size_; }
  // Blocks some sequence references; 0 when every sequence finished or was cancelled.
  int32_t num_used_blocks() const { return num_blocks() - num_free_blocks(); }
  int32_t num_cached_free_blocks() const { return lru_size_; }
  int32_t block_size() const { return block_size_; }
  const PrefixCacheKey& key() const { return key_; }
  BlockPoolStats& stats() { return stats_; }
  const BlockPoolStats& stats() const { return stats_; }

 private:
  absl::Status CheckIndex(int32_t block, const char* action) const;
  void LruPushBack(int32_t block);
  void LruRemove(int32_t block);
  void RecordStored(uint64_t hash, std::optional<uint64_t> parent_hash,
                    absl::Span<const int32_t> tokens);
  void RecordRemoved(uint64_t hash);

  int32_t block_size_;
  PrefixCacheKey key_;
  std::vector<int32_t> ref_counts_;
  // Never-cached free blocks, LIFO: a just-released block is reused first while its lines may
  // still be in the CPU cache.
  std::vector<int32_t> free_blocks_;
  // Cached free blocks as an intrusive doubly linked list, least recently freed at the head;
  // -1 ends it. Intrusive so that freeing and reviving are O(1) and never allocate.
  std::vector<int32_t> lru_prev_, lru_next_;
  int32_t lru_head_ = -1, lru_tail_ = -1, lru_size_ = 0;
  // Prefix cache: hash -> block, and per block its hash and tokens (to verify hits).
  absl::flat_hash_map<uint64_t, int32_t> cached_blocks_;
  std::vector<uint64_t> cached_hash_;
  std::vector<bool> cached_hash_valid_;
  std::vector<int32_t> cached_tokens_;   // [num_blocks, block_size]
  std::vector<uint64_t> cached_parent_;  // valid where cached_has_parent_
  std::vector<bool> cached_has_parent_;
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;
  BlockPoolStats stats_;
};

// One block copy the backend must make before a step writes into `destination`.
struct BlockCopy {
  int32_t source;
  int32_t destination;
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
  // Blocks Reserve(num_tokens) plus PrepareWrite(first_written, num_tokens) would take from the
  // pool, so a scheduler can decide before it changes anything.
  int64_t BlocksNeeded(const BlockPool& pool, int64_t first_written, int64_t num_tokens) const;
  // Returns every block to `pool` and empties the table.
  void Release(BlockPool& pool);

  // On an empty table: shares the longest run of cached full blocks that starts `tokens`,
  // covering at most `max_tokens` tokens. Returns the number of tokens now cached (a multiple
  // of the block size). Counts queried and hit tokens in the pool's stats.
  int64_t MatchPrefix(BlockPool& pool, absl::Span<const int32_t> tokens, int64_t max_tokens);
  // Registers every block that the first `num_computed` of `tokens` fill completely and that
  // is not registered yet, so later sequences with the same prefix can share it.
  void CommitFullBlocks(BlockPool& pool, absl::Span<const int32_t> tokens, int64_t num_computed);
  // A table sharing every block of this one (each block's reference count + 1).
  BlockTable Fork(BlockPool& pool) const;
  // Before writing tokens [first_written, end): every touched block with other references is
  // replaced by a fresh copy; the copies to make are appended to `copies`. Reserve() first.
  absl::Status PrepareWrite(BlockPool& pool, int64_t first_written, int64_t end,
                            std::vector<BlockCopy>& copies);

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
  // Full blocks whose hash is known (registered or matched), and the hash of the last one:
  // the chain continues from there.
  size_t num_hashed_blocks_ = 0;
  uint64_t last_hash_ = 0;
};

}  // namespace llmrt::kv

#endif  // LLMRT_KV_BLOCK_POOL_H_
