#include "runtime/tokenizer/bpe.h"

#include <algorithm>
#include <functional>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/tokenizer/utf8.h"

namespace llmrt::tokenizer_internal {
namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t byte_length;  // 0: merged into its left neighbour
};

// A queued merge packed as rank << 32 | position, so the min-heap orders by rank, then leftmost
// position, exactly as HF's queue does, with 8-byte entries (a 1 MB word queues ~1M of them).
uint64_t QueueKey(int32_t rank, int32_t pos) {
  return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos);
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(const plan::TokenizerSpec& spec) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  const int32_t vocab_size = spec.pieces_size();
  std::vector<bool> added_only(vocab_size, false);
  for (const auto& added : spec.added_tokens()) {
    if (added.id() < 0 || added.id() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: added token \"", added.content(), "\" has id ", added.id(),
                       ", outside the vocabulary [0, ", vocab_size, ")"));
    }
    if (!added.in_model_vocab()) added_only[added.id()] = true;
  }
  model->vocab_.reserve(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (added_only[id]) continue;
    model->vocab_.emplace(spec.pieces(id), id);
  }
  model->merges_.reserve(spec.merges_size());
  for (int32_t rank = 0; rank < spec.merges_size(); ++rank) {
    const auto& merge = spec.merges(rank);
    for (int32_t id : {merge.left(), merge.right(), merge.result()}) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer: merge ", rank, " refers to token id ", id,
                         ", outside the vocabulary [0, ", vocab_size, ")"));
      }
    }
    // A repeated pair keeps its last rank, as HF's merge map (built by inserting in order) does.
    model->merges_[PairKey(merge.left(), merge.right())] = {rank, merge.result()};
  }
  if (spec.unk_id() >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: unk_id ", spec.unk_id(), " is outside the vocabulary"));
  }
  model->unk_id_ = spec.unk_id() < 0 ? -1 : spec.unk_id();
  model->byte_fallback_ = spec.byte_fallback();
  model->fuse_unk_ = spec.fuse_unk();
  model->ignore_merges_ = spec.ignore_merges();
  model->continuing_subword_prefix_ = spec.continuing_subword_prefix();
  model->end_of_word_suffix_ = spec.end_of_word_suffix();
  for (int byte = 0; byte < 256; ++byte) {
    model->byte_ids_[byte] = model->Lookup(absl::StrFormat("<0x%02X>", byte));
  }
  model->char_ids_.assign(kDirectLookupSize, -1);
  for (const auto& [piece, id] : model->vocab_) {
    if (piece.empty() || piece.size() > 2 || ValidSequenceLength(piece, 0) != piece.size()) {
      continue;
    }
    size_t length = 0;
    const char32_t code_point = DecodeChar(piece, 0, &length);
    if (code_point < kDirectLookupSize) model->char_ids_[code_point] = id;
  }
  if (!model->ignore_merges_ && model->continuing_subword_prefix_.empty() &&
      model->end_of_word_suffix_.empty()) {
    for (std::string_view marker : {std::string_view("\xE2\x96\x81"), std::string_view(" ")}) {
      // The marker must be a piece itself, so an unknown-character run (fused unk) ends at it.
      if (model->Lookup(marker) < 0) continue;
      // A piece may hold the marker after its start only right after another marker (Llama's
      // and Mistral's "▁▁▁▁" runs): then no piece spans a marker that follows a non-marker
      // character, and the word can be cut before every such marker.
      bool marker_only_at_start = true;
      for (const auto& [piece, id] : model->vocab_) {
        for (size_t pos = piece.find(marker, 1); pos != std::string_view::npos;
             pos = piece.find(marker, pos + 1)) {
          if (pos < marker.size() || piece.substr(pos - marker.size(), marker.size()) != marker) {
            marker_only_at_start = false;
            break;
          }
        }
        if (!marker_only_at_start) break;
      }
      if (marker_only_at_start) {
        model->chunk_marker_ = std::string(marker);
        break;
      }
    }
  }
  return model;
}

int32_t BpeModel::Lookup(std::string_view piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

int32_t BpeModel::LookupChar(std::string_view piece) const {
  const unsigned char lead = static_cast<unsigned char>(piece[0]);
  if (piece.size() == 1) return lead < 0x80 ? char_ids_[lead] : Lookup(piece);
  if (piece.size() == 2) {
    return char_ids_[((lead & 0x1F) << 6) | (static_cast<unsigned char>(piece[1]) & 0x3F)];
  }
  return Lookup(piece);
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (chunk_marker_.empty()) {
    TokenizeChunk(word, ids);
    return;
  }
  const size_t marker_size = chunk_marker_.size();
  size_t begin = 0;
  while (begin < word.size()) {
    size_t end = word.find(chunk_marker_, begin + 1);
    // Cut only before a marker that follows a non-marker character (see Create).
    while (end != std::string_view::npos && end >= begin + marker_size &&
           word.substr(end - marker_size, marker_size) == chunk_marker_) {
      end = word.find(chunk_marker_, end + 1);
    }
    if (end == std::string_view::npos) end = word.size();
    TokenizeChunk(word.substr(begin, end - begin), ids);
    begin = end;
  }
}

void BpeModel::TokenizeChunk(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = Lookup(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    MergeChunk(word, ids);
    return;
  }
  const absl::string_view key(word.data(), word.size());
  CacheShard& shard = cache_[absl::Hash<absl::string_view>{}(key) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mutex);
    auto it = shard.words.find(key);
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  MergeChunk(word, ids);
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.words.size() < kCacheWordsPerShard) {
    shard.words.try_emplace(std::string(word), ids->begin() + first, ids->end());
  }
}

void BpeModel::MergeChunk(std::string_view word, std::vector<int32_t>* ids) const {
  // Per-thread scratch: byte-level models call this once per ~5-byte word, and two allocations
  // per word were a fifth of the encode time. thread_local keeps Tokenize lock-free.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<uint64_t> queue;
  symbols.clear();
  queue.clear();
  auto add_symbol = [](int32_t id, int32_t byte_length) {
    const int32_t index = static_cast<int32_t>(symbols.size());
    if (index > 0) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, byte_length});
  };
  // HF keeps one pending unk so consecutive unknown characters fuse; note that byte-fallback
  // symbols do not flush it, which this loop reproduces.
  int32_t pending_unk_length = 0;
  bool has_pending_unk = false;
  std::string affixed;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t char_length = ValidSequenceLength(word, pos);
    if (char_length == 0) char_length = 1;  // callers pass valid UTF-8; never loop forever
    const bool is_first = pos == 0;
    const bool is_last = pos + char_length >= word.size();
    std::string_view piece = word.substr(pos, char_length);
    bool is_affixed = false;
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      affixed.clear();
      if (!is_first) affixed += continuing_subword_prefix_;
      affixed += piece;
      if (is_last) affixed += end_of_word_suffix_;
      piece = affixed;
      is_affixed = true;
    }
    pos += char_length;
    const int32_t id = is_affixed ? Lookup(piece) : LookupChar(piece);
    if (id >= 0) {
      if (has_pending_unk) {
        add_symbol(unk_id_, pending_unk_length);
        has_pending_unk = false;
      }
      add_symbol(id, static_cast<int32_t>(char_length));
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes_known = true;
      for (unsigned char byte : piece) all_bytes_known &= byte_ids_[byte] >= 0;
      if (all_bytes_known) {
        for (unsigned char byte : piece) add_symbol(byte_ids_[byte], 1);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // HF drops the character when there is no unk token
    if (has_pending_unk && fuse_unk_) {
      pending_unk_length += static_cast<int32_t>(char_length);
    } else {
      if (has_pending_unk) add_symbol(unk_id_, pending_unk_length);
      has_pending_unk = true;
      pending_unk_length = static_cast<int32_t>(char_length);
    }
  }
  if (has_pending_unk) add_symbol(unk_id_, pending_unk_length);

  // A min-heap over `queue` (std::greater): lowest rank, then leftmost position, on top.
  const auto push = [](uint64_t key) {
    queue.push_back(key);
    std::push_heap(queue.begin(), queue.end(), std::greater<uint64_t>());
  };
  auto find_merge = [this](int32_t left, int32_t right) -> const MergeTarget* {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t index = 0; index + 1 < symbols.size(); ++index) {
    if (const MergeTarget* target = find_merge(symbols[index].id, symbols[index + 1].id)) {
      push(QueueKey(target->rank, static_cast<int32_t>(index)));
    }
  }
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), std::greater<uint64_t>());
    const uint64_t top = queue.back();
    queue.pop_back();
    const int32_t rank = static_cast<int32_t>(top >> 32);
    const int32_t pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol& left = symbols[pos];
    if (left.byte_length == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    // An entry goes stale when a neighbour merged first. HF compares the pair's result with the
    // queued one; comparing ranks is the same test, since changing either symbol changes the
    // pair's concatenation and so its merge.
    const MergeTarget* current = find_merge(left.id, right.id);
    if (current == nullptr || current->rank != rank) continue;
    left.id = current->result;
    left.byte_length += right.byte_length;
    left.next = right.next;
    symbols[right_pos].byte_length = 0;
    if (right.next >= 0) symbols[right.next].prev = pos;
    if (left.prev >= 0) {
      if (const MergeTarget* target = find_merge(symbols[left.prev].id, left.id)) {
        push(QueueKey(target->rank, left.prev));
      }
    }
    if (left.next >= 0) {
      if (const MergeTarget* target = find_merge(left.id, symbols[left.next].id)) {
        push(QueueKey(target->rank, pos));
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.byte_length != 0) ids->push_back(symbol.id);
  }
  // Keep the scratch small after a huge word (a 1 MB paragraph needs ~28 MB of it).
  constexpr size_t kKeptCapacity = 1 << 16;
  if (symbols.capacity() > kKeptCapacity) {
    symbols = std::vector<Symbol>();
    queue = std::vector<uint64_t>();
  }
}

}  // namespace llmrt::tokenizer_internal
