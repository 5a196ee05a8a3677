// Byte-pair encoding of one pre-tokenized word, with HF tokenizers' semantics: characters are
// looked up in the vocabulary (with the continuing-subword prefix and end-of-word suffix when
// configured), unknown characters become byte-fallback tokens `<0xAB>` or the unk token (fused
// when `fuse_unk`), then merges are applied lowest rank first, leftmost first among equal ranks,
// through a priority queue: O(n log n) in the word length, so a whole paragraph handed over
// without pre-tokenization (SentencePiece-style models) stays fast.
//
// Thread-safety: immutable after Create(); Tokenize may run concurrently.
#ifndef LLMRT_TOKENIZER_BPE_H_
#define LLMRT_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::tokenizer_internal {

class BpeModel {
 public:
  // `spec` must outlive the model: the vocabulary map points into `spec.pieces()`.
  // Added tokens with in_model_vocab == false are not part of the model's vocabulary, as in HF
  // where they live only in the AddedVocabulary.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(const plan::TokenizerSpec& spec);

  // Appends the ids of `word` (valid UTF-8) to `ids`. Empty words give no ids.
  void Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  // The id of piece `<0xAB>` for byte 0xAB, or -1.
  int32_t ByteFallbackId(uint8_t byte) const { return byte_ids_[byte]; }

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t result;
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  int32_t Lookup(std::string_view piece) const;
  // Id of the one-character piece for code points below kDirectLookupSize, or -1: the common
  // case (ASCII, byte-level's U+0100..U+0143, Latin, Greek, Cyrillic) skips hashing.
  static constexpr size_t kDirectLookupSize = 0x800;
  int32_t LookupChar(std::string_view piece) const;
  void TokenizeChunk(std::string_view word, std::vector<int32_t>* ids) const;
  void MergeChunk(std::string_view word, std::vector<int32_t>* ids) const;

  // A word cache, as HF's BPE keeps one (10,000 words there): prose repeats its words, so most
  // words skip the merge loop (gpt2 on English prose: 7 -> see bench/tokenizer). Sharded by
  // hash so concurrent encoders rarely contend; bounded: once a shard is full, new words are
  // simply not cached. Words longer than kMaxCachedWordBytes are rare and always merged.
  static constexpr size_t kCacheShards = 16;
  static constexpr size_t kCacheWordsPerShard = 4096;
  static constexpr size_t kMaxCachedWordBytes = 48;
  struct CacheShard {
    std::mutex mutex;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;
  };
  mutable std::array<CacheShard, kCacheShards> cache_;

  absl::flat_hash_map<std::string_view, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, MergeTarget> merges_;
  std::array<int32_t, 256> byte_ids_;
  std::vector<int32_t> char_ids_;  // kDirectLookupSize entries, by code point
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  // SentencePiece-style models see whole paragraphs as one word. When no piece contains this
  // marker ("▁" or " ") after its start except right after another marker (runs like "▁▁▁▁"),
  // no token can span a position just before a marker that follows another character, so the
  // word is tokenized chunk by chunk, cut there, with the same result and a much smaller queue.
  std::string chunk_marker_;
};

}  // namespace llmrt::tokenizer_internal

#endif  // LLMRT_TOKENIZER_BPE_H_
