#include "runtime/tokenizer/bpe.h"

#include <queue>

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

struct QueuedMerge {
  int32_t rank;
  int32_t pos;
  int32_t result;
  // std::priority_queue is a max-heap: the lowest rank, then the leftmost position, comes first.
  bool operator<(const QueuedMerge& other) const {
    if (rank != other.rank) return rank > other.rank;
    return pos > other.pos;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(const plan::TokenizerSpec& spec) {
  auto model = std::unique_ptr<BpeModel>(new BpeModel());
  const int32_t vocab_size = spec.pieces_size();
  std::vector<bool> added_only(vocab_size, false);
  for (const auto& added : spec.added_tokens()) {
    if (added.id() < 0 || added.id() >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: added token \"", added.content(),
                                                     "\" has id ", added.id(),
                                                     ", outside the vocabulary [0, ", vocab_size,
                                                     ")"));
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
        return absl::InvalidArgumentError(absl::StrCat("tokenizer: merge ", rank,
                                                       " refers to token id ", id,
                                                       ", outside the vocabulary [0, ",
                                                       vocab_size, ")"));
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
  return model;
}

int32_t BpeModel::Lookup(std::string_view piece) const {
  auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const int32_t whole = Lookup(word);
    if (whole >= 0) {
      ids->push_back(whole);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add_symbol = [&symbols](int32_t id, int32_t byte_length) {
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
    if ((!is_first && !continuing_subword_prefix_.empty()) ||
        (is_last && !end_of_word_suffix_.empty())) {
      affixed.clear();
      if (!is_first) affixed += continuing_subword_prefix_;
      affixed += piece;
      if (is_last) affixed += end_of_word_suffix_;
      piece = affixed;
    }
    pos += char_length;
    const int32_t id = Lookup(piece);
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

  std::vector<QueuedMerge> heap_storage;
  heap_storage.reserve(symbols.size());
  std::priority_queue<QueuedMerge> queue(std::less<QueuedMerge>(), std::move(heap_storage));
  auto find_merge = [this](int32_t left, int32_t right) -> const MergeTarget* {
    auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t index = 0; index + 1 < symbols.size(); ++index) {
    if (const MergeTarget* target = find_merge(symbols[index].id, symbols[index + 1].id)) {
      queue.push({target->rank, static_cast<int32_t>(index), target->result});
    }
  }
  while (!queue.empty()) {
    const QueuedMerge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.byte_length == 0 || left.next < 0) continue;
    const int32_t right_pos = left.next;
    const Symbol right = symbols[right_pos];
    // Entries go stale when a neighbour merged first; the pair must still produce this result.
    const MergeTarget* current = find_merge(left.id, right.id);
    if (current == nullptr || current->result != top.result) continue;
    left.id = top.result;
    left.byte_length += right.byte_length;
    left.next = right.next;
    symbols[right_pos].byte_length = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeTarget* target = find_merge(symbols[left.prev].id, left.id)) {
        queue.push({target->rank, left.prev, target->result});
      }
    }
    if (left.next >= 0) {
      if (const MergeTarget* target = find_merge(left.id, symbols[left.next].id)) {
        queue.push({target->rank, top.pos, target->result});
      }
    }
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.byte_length != 0) ids->push_back(symbol.id);
  }
}

}  // namespace llmrt::tokenizer_internal
