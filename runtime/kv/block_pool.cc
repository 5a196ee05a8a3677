#include "runtime/kv/block_pool.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_format.h"

namespace llmrt::kv {
namespace {

inline uint64_t RotateLeft(uint64_t value, int bits) {
  return (value << bits) | (value >> (64 - bits));
}

struct SipState {
  uint64_t v0, v1, v2, v3;
  void Round() {
    v0 += v1;
    v1 = RotateLeft(v1, 13);
    v1 ^= v0;
    v0 = RotateLeft(v0, 32);
    v2 += v3;
    v3 = RotateLeft(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = RotateLeft(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = RotateLeft(v1, 17);
    v1 ^= v2;
    v2 = RotateLeft(v2, 32);
  }
  void Absorb(uint64_t word) {
    v3 ^= word;
    Round();
    Round();
    v0 ^= word;
  }
};

}  // namespace

PrefixCacheKey RandomPrefixCacheKey() {
  std::random_device device;
  PrefixCacheKey key;
  for (uint64_t& word : key) word = (static_cast<uint64_t>(device()) << 32) ^ device();
  return key;
}

uint64_t SipHash24(const PrefixCacheKey& key, absl::Span<const uint8_t> bytes) {
  SipState state{key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull,
                 key[0] ^ 0x6c7967656e657261ull, key[1] ^ 0x7465646279746573ull};
  const size_t whole = bytes.size() / 8 * 8;
  for (size_t offset = 0; offset < whole; offset += 8) {
    uint64_t word = 0;
    for (int i = 7; i >= 0; --i) word = (word << 8) | bytes[offset + i];
    state.Absorb(word);
  }
  // The last word: the remaining bytes, with the length's low byte on top.
  uint64_t last = static_cast<uint64_t>(bytes.size() & 0xff) << 56;
  for (size_t i = whole; i < bytes.size(); ++i)
    last |= static_cast<uint64_t>(bytes[i]) << (8 * (i - whole));
  state.Absorb(last);
  state.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) state.Round();
  return state.v0 ^ state.v1 ^ state.v2 ^ state.v3;
}

uint64_t HashBlock(const PrefixCacheKey& key, uint64_t parent_hash,
                   absl::Span<const int32_t> tokens) {
  // Serialised explicitly little-endian so a hash does not depend on the host's byte order.
  // 16-token blocks make 72 bytes; a stack buffer covers blocks up to 256 tokens.
  uint8_t stack_buffer[8 + 4 * 256];
  std::vector<uint8_t> heap_buffer;
  const size_t size = 8 + 4 * tokens.size();
  uint8_t* bytes = stack_buffer;
  if (size > sizeof(stack_buffer)) {
    heap_buffer.resize(size);
    bytes = heap_buffer.data();
  }
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(parent_hash >> (8 * i));
  for (size_t t = 0; t < tokens.size(); ++t) {
    const uint32_t token = static_cast<uint32_t>(tokens[t]);
    for (int i = 0; i < 4; ++i) bytes[8 + 4 * t + i] = static_cast<uint8_t>(token >> (8 * i));
  }
  return SipHash24(key, absl::MakeConstSpan(bytes, size));
}

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, const PrefixCacheKey& key)
    : block_size_(block_size),
      key_(key),
      ref_counts_(num_blocks, 0),
      lru_prev_(num_blocks, -1),
      lru_next_(num_blocks, -1),
      cached_hash_(num_blocks, 0),
      cached_hash_valid_(num_blocks, false),
      cached_tokens_(static_cast<size_t>(num_blocks) * block_size, 0),
      cached_parent_(num_blocks, 0),
      cached_has_parent_(num_blocks, false) {
  free_blocks_.reserve(num_blocks);
  // Pushed in reverse so that Allocate() hands out 0, 1, 2, ... on a fresh pool.
  for (int32_t block = num_blocks - 1; block >= 0; --block) free_blocks_.push_back(block);
}

void BlockPool::LruPushBack(int32_t block) {
  lru_prev_[block] = lru_tail_;
  lru_next_[block] = -1;
  if (lru_tail_ >= 0) {
    lru_next_[lru_tail_] = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  ++lru_size_;
}

void BlockPool::LruRemove(int32_t block) {
  const int32_t prev = lru_prev_[block], next = lru_next_[block];
  if (prev >= 0) {
    lru_next_[prev] = next;
  } else {
    lru_head_ = next;
  }
  if (next >= 0) {
    lru_prev_[next] = prev;
  } else {
    lru_tail_ = prev;
  }
  lru_prev_[block] = lru_next_[block] = -1;
  --lru_size_;
}

absl::StatusOr<int32_t> BlockPool::Allocate() {
  int32_t block;
  if (!free_blocks_.empty()) {
    block = free_blocks_.back();
    free_blocks_.pop_back();
  } else if (lru_head_ >= 0) {
    block = lru_head_;
    LruRemove(block);
    cached_blocks_.erase(cached_hash_[block]);
    cached_hash_valid_[block] = false;
    ++stats_.evictions;
    if (record_events_) RecordRemoved(cached_hash_[block]);
  } else {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "KV cache: all %d blocks of %d tokens are in use", num_blocks(), block_size_));
  }
  ref_counts_[block] = 1;
  return block;
}

absl::Status BlockPool::CheckIndex(int32_t block, const char* action) const {
  if (block < 0 || block >= num_blocks()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV cache: cannot %s block %d, the pool has blocks [0, %d)", action, block, num_blocks()));
  }
  return absl::OkStatus();
}

absl::Status BlockPool::AddRef(int32_t block) {
  if (absl::Status status = CheckIndex(block, "add a reference to"); !status.ok()) return status;
  if (ref_counts_[block] == 0) {
    if (!cached_hash_valid_[block]) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "KV cache: cannot add a reference to block %d, it is free and holds no cached prefix",
          block));
    }
    LruRemove(block);
  }
  ++ref_counts_[block];
  return absl::OkStatus();
}

absl::Status BlockPool::Release(int32_t block) {
  if (absl::Status status = CheckIndex(block, "release"); !status.ok()) return status;
  if (ref_counts_[block] == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("KV cache: cannot release block %d, it is free", block));
  }
  if (--ref_counts_[block] == 0) {
    if (cached_hash_valid_[block]) {
      LruPushBack(block);
    } else {
      free_blocks_.push_back(block);
    }
  }
  return absl::OkStatus();
}

int32_t BlockPool::Lookup(uint64_t hash, absl::Span<const int32_t> tokens) const {
  auto found = cached_blocks_.find(hash);
  if (found == cached_blocks_.end() || tokens.size() != static_cast<size_t>(block_size_)) {
    return -1;
  }
  const int32_t block = found->second;
  const int32_t* stored = cached_tokens_.data() + static_cast<size_t>(block) * block_size_;
  return std::equal(tokens.begin(), tokens.end(), stored) ? block : -1;
}

bool BlockPool::Register(int32_t block, uint64_t hash, absl::Span<const int32_t> tokens,
                         std::optional<uint64_t> parent_hash) {
  if (block < 0 || block >= num_blocks() || ref_counts_[block] == 0 || cached_hash_valid_[block] ||
      tokens.size() != static_cast<size_t>(block_size_)) {
    return false;
  }
  if (!cached_blocks_.emplace(hash, block).second) return false;
  cached_hash_[block] = hash;
  cached_hash_valid_[block] = true;
  std::copy(tokens.begin(), tokens.end(),
            cached_tokens_.begin() + static_cast<size_t>(block) * block_size_);
  cached_has_parent_[block] = parent_hash.has_value();
  cached_parent_[block] = parent_hash.value_or(0);
  if (record_events_) RecordStored(hash, parent_hash, tokens);
  return true;
}

void BlockPool::RecordStored(uint64_t hash, std::optional<uint64_t> parent_hash,
                             absl::Span<const int32_t> tokens) {
  // Continues the last event when this block hangs off its last hash: one prompt's blocks,
  // committed in one step, travel as one event (as vLLM sends them).
  if (!events_.empty() && parent_hash.has_value()) {
    KvCacheEvent& last = events_.back();
    if (last.kind == KvCacheEvent::Kind::kStored && last.block_hashes.back() == *parent_hash) {
      last.block_hashes.push_back(hash);
      last.token_ids.insert(last.token_ids.end(), tokens.begin(), tokens.end());
      return;
    }
  }
  KvCacheEvent event;
  event.kind = KvCacheEvent::Kind::kStored;
  event.block_hashes.push_back(hash);
  event.has_parent = parent_hash.has_value();
  event.parent_hash = parent_hash.value_or(0);
  event.token_ids.assign(tokens.begin(), tokens.end());
  events_.push_back(std::move(event));
}

void BlockPool::RecordRemoved(uint64_t hash) {
  if (events_.empty() || events_.back().kind != KvCacheEvent::Kind::kRemoved) {
    KvCacheEvent event;
    event.kind = KvCacheEvent::Kind::kRemoved;
    events_.push_back(std::move(event));
  }
  events_.back().block_hashes.push_back(hash);
}

std::vector<KvCacheEvent> BlockPool::TakeEvents() {
  std::vector<KvCacheEvent> taken;
  taken.swap(events_);
  return taken;
}

std::vector<CachedBlock> BlockPool::CachedBlocks() const {
  std::vector<CachedBlock> blocks;
  blocks.reserve(cached_blocks_.size());
  for (int32_t block = 0; block < num_blocks(); ++block) {
    if (!cached_hash_valid_[block]) continue;
    CachedBlock cached;
    cached.block = block;
    cached.hash = cached_hash_[block];
    cached.has_parent = cached_has_parent_[block];
    cached.parent_hash = cached_parent_[block];
    const int32_t* tokens = cached_tokens_.data() + static_cast<size_t>(block) * block_size_;
    cached.token_ids.assign(tokens, tokens + block_size_);
    blocks.push_back(std::move(cached));
  }
  return blocks;
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

int64_t BlockTable::BlocksNeeded(const BlockPool& pool, int64_t first_written,
                                 int64_t num_tokens) const {
  const int32_t block_size = pool.block_size();
  const int64_t have = static_cast<int64_t>(blocks_.size());
  const int64_t needed = std::max<int64_t>(0, (num_tokens + block_size - 1) / block_size - have);
  int64_t copies = 0;
  if (num_tokens > first_written) {
    const int64_t last_existing = std::min(have, (num_tokens - 1) / block_size + 1);
    for (int64_t index = first_written / block_size; index < last_existing; ++index) {
      if (pool.ref_count(blocks_[index]) > 1) ++copies;
    }
  }
  return needed + copies;
}

void BlockTable::Release(BlockPool& pool) {
  // Last block first: of a sequence's cached blocks, the tail is the least likely to be shared
  // by another prompt, so it should be evicted before the head (vLLM frees in reverse too).
  for (auto block = blocks_.rbegin(); block != blocks_.rend(); ++block) {
    pool.Release(*block).IgnoreError();
  }
  blocks_.clear();
  num_hashed_blocks_ = 0;
  last_hash_ = 0;
}

int64_t BlockTable::MatchPrefix(BlockPool& pool, absl::Span<const int32_t> tokens,
                                int64_t max_tokens) {
  if (!blocks_.empty()) return 0;
  const int32_t block_size = pool.block_size();
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  const int64_t full_blocks = std::max<int64_t>(0, limit) / block_size;
  uint64_t parent = 0;
  for (int64_t index = 0; index < full_blocks; ++index) {
    absl::Span<const int32_t> block_tokens = tokens.subspan(index * block_size, block_size);
    const uint64_t hash = HashBlock(pool.key(), parent, block_tokens);
    const int32_t block = pool.Lookup(hash, block_tokens);
    if (block < 0 || !pool.AddRef(block).ok()) break;
    blocks_.push_back(block);
    parent = hash;
  }
  num_hashed_blocks_ = blocks_.size();
  last_hash_ = parent;
  const int64_t hit_tokens = static_cast<int64_t>(blocks_.size()) * block_size;
  pool.stats().prefix_queried_tokens += full_blocks * block_size;
  pool.stats().prefix_hit_tokens += hit_tokens;
  return hit_tokens;
}

void BlockTable::CommitFullBlocks(BlockPool& pool, absl::Span<const int32_t> tokens,
                                  int64_t num_computed) {
  const int32_t block_size = pool.block_size();
  const int64_t computed = std::min<int64_t>(num_computed, static_cast<int64_t>(tokens.size()));
  const size_t full_blocks = std::min(static_cast<size_t>(computed / block_size), blocks_.size());
  while (num_hashed_blocks_ < full_blocks) {
    absl::Span<const int32_t> block_tokens =
        tokens.subspan(num_hashed_blocks_ * block_size, block_size);
    // The chain starts at 0 (HashBlock's parent for the first block), which is no block's hash.
    const std::optional<uint64_t> parent =
        num_hashed_blocks_ == 0 ? std::nullopt : std::optional<uint64_t>(last_hash_);
    last_hash_ = HashBlock(pool.key(), last_hash_, block_tokens);
    pool.Register(blocks_[num_hashed_blocks_], last_hash_, block_tokens, parent);
    ++num_hashed_blocks_;
  }
}

BlockTable BlockTable::Fork(BlockPool& pool) const {
  BlockTable copy;
  copy.blocks_ = blocks_;
  for (int32_t block : copy.blocks_) pool.AddRef(block).IgnoreError();
  copy.num_hashed_blocks_ = num_hashed_blocks_;
  copy.last_hash_ = last_hash_;
  return copy;
}

absl::Status BlockTable::PrepareWrite(BlockPool& pool, int64_t first_written, int64_t end,
                                      std::vector<BlockCopy>& copies) {
  const int32_t block_size = pool.block_size();
  if (end <= first_written) return absl::OkStatus();
  if (end > capacity(block_size)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("KV cache: writing tokens [%d, %d) needs %d blocks, the table holds %d",
                        first_written, end, (end + block_size - 1) / block_size, blocks_.size()));
  }
  for (int64_t index = first_written / block_size; index <= (end - 1) / block_size; ++index) {
    const int32_t shared = blocks_[index];
    if (pool.ref_count(shared) <= 1) continue;
    absl::StatusOr<int32_t> fresh = pool.Allocate();
    if (!fresh.ok()) return fresh.status();
    copies.push_back({shared, *fresh});
    blocks_[index] = *fresh;
    pool.Release(shared).IgnoreError();
  }
  return absl::OkStatus();
}

}  // namespace llmrt::kv
