// Grammar-constrained decoding: the vocabulary as bytes, a grammar compiled against it, and the
// per-sequence matcher that gives the allowed-token mask of each step.
//
// TokenVocabulary (one per tokenizer, shared): every token id's bytes as the detokenizer would
// emit them (byte-level BPE pieces through GPT-2's byte map, SentencePiece "▁" as a space,
// byte-fallback <0xNN> as the one byte NN, added tokens as their content), and a byte trie of
// all of them in preorder. Special tokens (control tokens such as <|im_end|>) are allowed only
// where a grammar names them whole (<[ID]>, grammar.h): their content is not text, so no byte
// string may match them. Ids past the tokenizer's vocabulary (padding rows of the model's
// lm_head) are never allowed.
//
// CompiledGrammar (one per grammar and vocabulary, shared by every sequence that uses it): the
// grammar's pushdown automaton, built lazily. A parser state is the set of stacks the bytes so
// far can leave (each stack a chain of interned frames; a stack's top is the byte element it
// waits for). States are interned, and each has a 256-entry transition table filled on first
// use, so the automaton turns into a DFA over the states actually visited: advancing a byte is
// one table read after the first time. The allowed-token mask of a state is a walk of the
// vocabulary trie that follows the transitions and skips every subtree whose prefix is dead;
// masks are cached per state (a JSON string's body, for instance, is one state however long the
// string), bounded by kMaskCacheBytes.
//
// Limits: at most kMaxStates parser states per compiled grammar (states grow with nesting
// depth); past it FillNextTokenMask/Accept fail with ResourceExhausted and Saturated() tells a
// cache to drop the grammar.
//
// Thread-safety: TokenVocabulary is immutable. CompiledGrammar's automaton is shared and
// guarded by its mutex, so matchers of one grammar may run on different threads. A
// GrammarMatcher is per sequence and not thread-safe.
#ifndef LLMRT_GRAMMAR_MATCHER_H_
#define LLMRT_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/grammar/grammar.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/sampling/token_constraint.h"

namespace llmrt::grammar {

class TokenVocabulary {
 public:
  // `vocab_size`: the model's (mask width); ids at or past the spec's pieces are never allowed.
  static absl::StatusOr<std::shared_ptr<const TokenVocabulary>> Create(
      const plan::TokenizerSpec& spec, int32_t vocab_size);
  // From raw bytes per id (tests); an empty entry or a set `special` bit is never allowed.
  static std::shared_ptr<const TokenVocabulary> FromBytes(std::vector<std::string> token_bytes,
                                                          std::vector<bool> special,
                                                          int32_t vocab_size);

  int32_t vocab_size() const { return vocab_size_; }
  const std::string& TokenBytes(int32_t id) const { return token_bytes_[id]; }
  bool Usable(int32_t id) const { return id >= 0 && id < vocab_size_ && usable_[id]; }

  // The trie in preorder: node i's byte extends its parent's prefix; its subtree is
  // [i, subtree_end); tokens [token_begin, token_end) of token_ids end exactly at it.
  struct TrieNode {
    uint8_t byte;
    uint16_t depth;  // 1 for children of the root
    int32_t subtree_end;
    int32_t token_begin, token_end;
  };
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_token_ids() const { return trie_token_ids_; }
  int32_t max_token_bytes() const { return max_token_bytes_; }

 private:
  void BuildTrie();

  int32_t vocab_size_ = 0;
  std::vector<std::string> token_bytes_;
  std::vector<bool> usable_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_token_ids_;
  int32_t max_token_bytes_ = 0;
};

class CompiledGrammar {
 public:
  static constexpr int32_t kMaxStates = 1 << 16;
  static constexpr int64_t kMaskCacheBytes = 64ll << 20;

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary);
  CompiledGrammar(const CompiledGrammar&) = delete;
  CompiledGrammar& operator=(const CompiledGrammar&) = delete;

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  bool Saturated() const;

  // The automaton, for GrammarMatcher. States are ids; kDead is the state of a rejected prefix.
  static constexpr int32_t kDead = -1;
  int32_t InitialState() const { return initial_state_; }
  // The state after `bytes` from `state`, kDead if rejected.
  absl::StatusOr<int32_t> Advance(int32_t state, std::string_view bytes) const;
  // The state after the whole token `token` (a <[ID]> element) from `state`, kDead if rejected.
  absl::StatusOr<int32_t> AdvanceToken(int32_t state, int32_t token) const;
  bool Accepting(int32_t state) const;
  absl::Status FillMask(int32_t state, absl::Span<uint32_t> mask) const;

 private:
  struct Frame {
    int32_t position;  // the next element of this frame's alternative
    int32_t parent;    // the frame to resume when this one ends; -1: the root's end
  };
  struct State {
    std::vector<int32_t> tops;  // frames whose position is a kBytes or kToken element, sorted
    bool accepting = false;
    std::unique_ptr<int32_t[]> next;  // 256 transitions; kUnknown until computed
  };
  static constexpr int32_t kUnknown = -2;

  int32_t InternFrame(int32_t position, int32_t parent) const;
  // Adds the tops reachable without consuming a byte from a frame at `position` that resumes
  // `parent` when it ends.
  void Close(int32_t position, int32_t parent, std::vector<int32_t>& tops, bool& accepting,
             absl::flat_hash_set<uint64_t>& visited) const;
  // The interned state of (sorted, unique) tops; kDead when there are none and it does not
  // accept. ResourceExhausted past kMaxStates.
  absl::StatusOr<int32_t> InternState(std::vector<int32_t> tops, bool accepting) const;
  // The state of the stacks whose top element `matches`, each advanced past it.
  absl::StatusOr<int32_t> Successor(
      int32_t state, const std::function<bool(const Grammar::Element&)>& matches) const;
  absl::StatusOr<int32_t> Step(int32_t state, uint8_t byte) const;

  const Grammar grammar_;
  const std::shared_ptr<const TokenVocabulary> vocabulary_;
  int32_t initial_state_ = kDead;

  mutable std::mutex mutex_;
  mutable std::vector<Frame> frames_;
  mutable absl::flat_hash_map<uint64_t, int32_t> frame_ids_;
  mutable std::vector<State> states_;
  mutable absl::flat_hash_map<std::vector<int32_t>, int32_t> state_ids_;
  mutable absl::flat_hash_map<uint64_t, int32_t> token_next_;  // (state, token) -> state
  mutable absl::flat_hash_map<int32_t, std::vector<uint32_t>> mask_cache_;
  mutable int64_t mask_cache_bytes_ = 0;
  mutable std::vector<int32_t> walk_states_;  // per trie depth, FillMask scratch
  mutable bool saturated_ = false;
};

// The per-sequence matcher: a state of a shared CompiledGrammar.
class GrammarMatcher : public sampling::TokenConstraint {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  absl::Status FillNextTokenMask(absl::Span<uint32_t> mask) override;
  bool CanEnd() const override;
  absl::Status Accept(int32_t token) override;
  std::unique_ptr<sampling::TokenConstraint> CloneInitial() const override;

  // Advances on raw bytes (tests); false when rejected (the state is then unchanged).
  bool AcceptBytes(std::string_view bytes);

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  int32_t state_;
};

// ParseGrammar + CompiledGrammar.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(
    std::string_view gbnf, std::shared_ptr<const TokenVocabulary> vocabulary);

}  // namespace llmrt::grammar

#endif  // LLMRT_GRAMMAR_MATCHER_H_
