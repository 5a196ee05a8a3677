#include "runtime/grammar/matcher.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "runtime/base/status_macros.h"

namespace llmrt::grammar {
namespace {

// GPT-2's bytes_to_unicode, inverted: the byte each code point of a byte-level piece stands
// for. Printable Latin-1 bytes stand for themselves; the other 68 are U+0100 onwards in order.
absl::flat_hash_map<uint32_t, uint8_t> ByteLevelDecodeMap() {
  absl::flat_hash_map<uint32_t, uint8_t> map;
  uint32_t next = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    map[printable ? static_cast<uint32_t>(byte) : next++] = static_cast<uint8_t>(byte);
  }
  return map;
}

// Decodes one UTF-8 character at `text[*pos]`, moving pos; -1 for an invalid byte.
int64_t NextCodePoint(std::string_view text, size_t* pos) {
  const auto byte = static_cast<uint8_t>(text[*pos]);
  const int length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
  if (length == 0 || *pos + length > text.size()) {
    ++*pos;
    return -1;
  }
  uint32_t code = length == 1 ? byte : byte & (0xFF >> (length + 1));
  for (int i = 1; i < length; ++i) code = code << 6 | (static_cast<uint8_t>(text[*pos + i]) & 0x3F);
  *pos += length;
  return code;
}

// "<0xAB>" -> 0xAB; -1 otherwise.
int ByteFallbackValue(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = piece[i];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return -1;
    value = value * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return value;
}

uint64_t FrameKey(int32_t position, int32_t parent) {
  return static_cast<uint64_t>(static_cast<uint32_t>(position)) << 32 |
         static_cast<uint32_t>(parent + 1);
}

}  // namespace

absl::StatusOr<std::shared_ptr<const TokenVocabulary>> TokenVocabulary::Create(
    const plan::TokenizerSpec& spec, int32_t vocab_size) {
  const int32_t num_pieces = spec.pieces_size();
  if (vocab_size < num_pieces) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar: the model's vocabulary (%d) is smaller than the tokenizer's (%d)",
                        vocab_size, num_pieces));
  }
  bool byte_level = false;
  std::vector<std::pair<std::string, std::string>> replacements;
  for (const plan::TokenizerSpec::Decoder& decoder : spec.decoders()) {
    switch (decoder.kind()) {
      case plan::TokenizerSpec::Decoder::BYTE_LEVEL:
        byte_level = true;
        break;
      case plan::TokenizerSpec::Decoder::REPLACE:
        if (decoder.pattern_is_regex()) {
          return absl::UnimplementedError(
              "grammar: the tokenizer's decoder has a regex Replace; token bytes for "
              "constrained decoding are not defined for it");
        }
        replacements.emplace_back(decoder.pattern(), decoder.content());
        break;
      case plan::TokenizerSpec::Decoder::METASPACE:
        replacements.emplace_back(decoder.replacement(), " ");
        break;
      default:
        // Fuse joins pieces and Strip drops the first token's leading space: neither changes
        // a token's bytes in the middle of the text, which is where constrained output is.
        break;
    }
  }
  std::vector<std::string> token_bytes(num_pieces);
  std::vector<bool> special(num_pieces, false);
  absl::flat_hash_map<int32_t, const plan::TokenizerSpec::AddedToken*> added;
  for (const plan::TokenizerSpec::AddedToken& token : spec.added_tokens()) {
    added[token.id()] = &token;
  }
  const absl::flat_hash_map<uint32_t, uint8_t> byte_map =
      byte_level ? ByteLevelDecodeMap() : absl::flat_hash_map<uint32_t, uint8_t>();
  for (int32_t id = 0; id < num_pieces; ++id) {
    const std::string& piece = spec.pieces(id);
    if (auto found = added.find(id); found != added.end()) {
      special[id] = found->second->special();
      token_bytes[id] = found->second->content();
      continue;
    }
    if (byte_level) {
      std::string bytes;
      for (size_t pos = 0; pos < piece.size();) {
        const size_t start = pos;
        const int64_t code = NextCodePoint(piece, &pos);
        auto mapped = code >= 0 ? byte_map.find(static_cast<uint32_t>(code)) : byte_map.end();
        if (mapped != byte_map.end()) {
          bytes += static_cast<char>(mapped->second);
        } else {
          bytes.append(piece, start, pos - start);
        }
      }
      token_bytes[id] = std::move(bytes);
      continue;
    }
    if (spec.byte_fallback()) {
      if (const int value = ByteFallbackValue(piece); value >= 0) {
        token_bytes[id] = std::string(1, static_cast<char>(value));
        continue;
      }
    }
    std::string bytes = piece;
    for (const auto& [pattern, content] : replacements) {
      if (!pattern.empty()) bytes = absl::StrReplaceAll(bytes, {{pattern, content}});
    }
    token_bytes[id] = std::move(bytes);
  }
  // The unknown token decodes to a placeholder, not to text a grammar could want.
  if (spec.unk_id() >= 0 && spec.unk_id() < num_pieces) special[spec.unk_id()] = true;
  if (spec.bos_id() >= 0 && spec.bos_id() < num_pieces) special[spec.bos_id()] = true;
  if (spec.eos_id() >= 0 && spec.eos_id() < num_pieces) special[spec.eos_id()] = true;
  return FromBytes(std::move(token_bytes), std::move(special), vocab_size);
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromBytes(
    std::vector<std::string> token_bytes, std::vector<bool> special, int32_t vocab_size) {
  auto vocabulary = std::make_shared<TokenVocabulary>();
  vocabulary->vocab_size_ = vocab_size;
  token_bytes.resize(vocab_size);
  special.resize(vocab_size, true);
  vocabulary->usable_.assign(vocab_size, false);
  for (int32_t id = 0; id < vocab_size; ++id) {
    vocabulary->usable_[id] = !special[id] && !token_bytes[id].empty();
  }
  vocabulary->token_bytes_ = std::move(token_bytes);
  vocabulary->BuildTrie();
  return vocabulary;
}

void TokenVocabulary::BuildTrie() {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < vocab_size_; ++id) {
    if (usable_[id]) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [this](int32_t a, int32_t b) {
    return token_bytes_[a] != token_bytes_[b] ? token_bytes_[a] < token_bytes_[b] : a < b;
  });
  trie_.clear();
  trie_token_ids_.clear();
  // Sorted order is preorder: each token adds the nodes of its bytes past the common prefix
  // with the previous token; `path` holds the node index at each depth of the current token.
  std::vector<int32_t> path;
  const std::string* previous = nullptr;
  for (int32_t id : order) {
    const std::string& bytes = token_bytes_[id];
    max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(bytes.size()));
    size_t common = 0;
    if (previous != nullptr) {
      while (common < bytes.size() && common < previous->size() &&
             bytes[common] == (*previous)[common]) {
        ++common;
      }
    }
    path.resize(common);
    for (size_t depth = common; depth < bytes.size(); ++depth) {
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back({static_cast<uint8_t>(bytes[depth]), static_cast<uint16_t>(depth + 1), 0,
                       static_cast<int32_t>(trie_token_ids_.size()),
                       static_cast<int32_t>(trie_token_ids_.size())});
    }
    TrieNode& end = trie_[path.back()];
    if (end.token_end == end.token_begin)
      end.token_begin = static_cast<int32_t>(trie_token_ids_.size());
    trie_token_ids_.push_back(id);
    end.token_end = static_cast<int32_t>(trie_token_ids_.size());
    previous = &bytes;
  }
  // Subtree ends: a node's subtree stops at the next node of the same or a smaller depth.
  std::vector<int32_t> open;
  for (int32_t i = 0; i < static_cast<int32_t>(trie_.size()); ++i) {
    while (!open.empty() && trie_[open.back()].depth >= trie_[i].depth) {
      trie_[open.back()].subtree_end = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  for (int32_t i : open) trie_[i].subtree_end = static_cast<int32_t>(trie_.size());
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int32_t> tops;
  bool accepting = false;
  absl::flat_hash_set<uint64_t> visited;
  for (int32_t alternative : grammar_.rules[grammar_.root].alternatives) {
    Close(alternative, -1, tops, accepting, visited);
  }
  // The first state cannot hit kMaxStates.
  initial_state_ = InternState(std::move(tops), accepting).value_or(kDead);
  walk_states_.resize(vocabulary_->max_token_bytes() + 1);
}

bool CompiledGrammar::Saturated() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return saturated_;
}

int32_t CompiledGrammar::InternFrame(int32_t position, int32_t parent) const {
  auto [it, inserted] =
      frame_ids_.try_emplace(FrameKey(position, parent), static_cast<int32_t>(frames_.size()));
  if (inserted) frames_.push_back({position, parent});
  return it->second;
}

void CompiledGrammar::Close(int32_t position, int32_t parent, std::vector<int32_t>& tops,
                            bool& accepting, absl::flat_hash_set<uint64_t>& visited) const {
  if (!visited.insert(FrameKey(position, parent)).second) return;
  const Grammar::Element& element = grammar_.elements[position];
  switch (element.kind) {
    case Grammar::Kind::kBytes:
    case Grammar::Kind::kToken:
      tops.push_back(InternFrame(position, parent));
      return;
    case Grammar::Kind::kEnd:
      if (parent < 0) {
        accepting = true;
      } else {
        const Frame frame = frames_[parent];
        Close(frame.position, frame.parent, tops, accepting, visited);
      }
      return;
    case Grammar::Kind::kRule: {
      // A call in tail position resumes the caller's parent directly, so right-recursive
      // loops (repetitions) do not deepen the stack.
      const int32_t resume = grammar_.elements[position + 1].kind == Grammar::Kind::kEnd
                                 ? parent
                                 : InternFrame(position + 1, parent);
      for (int32_t alternative : grammar_.rules[element.value].alternatives) {
        Close(alternative, resume, tops, accepting, visited);
      }
      return;
    }
  }
}

absl::StatusOr<int32_t> CompiledGrammar::InternState(std::vector<int32_t> tops,
                                                     bool accepting) const {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.empty() && !accepting) return kDead;
  std::vector<int32_t> key = tops;
  key.push_back(accepting ? -1 : -2);
  auto found = state_ids_.find(key);
  if (found != state_ids_.end()) return found->second;
  if (static_cast<int32_t>(states_.size()) >= kMaxStates) {
    saturated_ = true;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "grammar: the automaton reached its limit of %d parser states (the output nests too "
        "deeply for this grammar)",
        kMaxStates));
  }
  const int32_t id = static_cast<int32_t>(states_.size());
  State state;
  state.tops = std::move(tops);
  state.accepting = accepting;
  state.next.reset(new int32_t[256]);
  std::fill(state.next.get(), state.next.get() + 256, kUnknown);
  states_.push_back(std::move(state));
  state_ids_.emplace(std::move(key), id);
  return id;
}

absl::StatusOr<int32_t> CompiledGrammar::Successor(
    int32_t state, const std::function<bool(const Grammar::Element&)>& matches) const {
  std::vector<int32_t> tops;
  bool accepting = false;
  absl::flat_hash_set<uint64_t> visited;
  for (int32_t top : states_[state].tops) {
    const Frame frame = frames_[top];
    if (matches(grammar_.elements[frame.position])) {
      Close(frame.position + 1, frame.parent, tops, accepting, visited);
    }
  }
  return InternState(std::move(tops), accepting);
}

absl::StatusOr<int32_t> CompiledGrammar::Step(int32_t state, uint8_t byte) const {
  const int32_t known = states_[state].next[byte];
  if (known != kUnknown) return known;
  LLMRT_ASSIGN_OR_RETURN(
      const int32_t next, Successor(state, [this, byte](const Grammar::Element& element) {
        return element.kind == Grammar::Kind::kBytes && grammar_.byte_sets[element.value].Has(byte);
      }));
  states_[state].next[byte] = next;
  return next;
}

absl::StatusOr<int32_t> CompiledGrammar::AdvanceToken(int32_t state, int32_t token) const {
  if (state == kDead) return kDead;
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t key = static_cast<uint64_t>(state) << 32 | static_cast<uint32_t>(token);
  if (auto known = token_next_.find(key); known != token_next_.end()) return known->second;
  LLMRT_ASSIGN_OR_RETURN(const int32_t next,
                         Successor(state, [token](const Grammar::Element& element) {
                           return element.kind == Grammar::Kind::kToken && element.value == token;
                         }));
  token_next_.emplace(key, next);
  return next;
}

absl::StatusOr<int32_t> CompiledGrammar::Advance(int32_t state, std::string_view bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (char c : bytes) {
    if (state == kDead) return kDead;
    LLMRT_ASSIGN_OR_RETURN(state, Step(state, static_cast<uint8_t>(c)));
  }
  return state;
}

bool CompiledGrammar::Accepting(int32_t state) const {
  if (state == kDead) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return states_[state].accepting;
}

absl::Status CompiledGrammar::FillMask(int32_t state, absl::Span<uint32_t> mask) const {
  std::fill(mask.begin(), mask.end(), 0u);
  if (state == kDead) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto cached = mask_cache_.find(state); cached != mask_cache_.end()) {
    std::copy(cached->second.begin(), cached->second.end(), mask.begin());
    return absl::OkStatus();
  }
  const std::vector<TokenVocabulary::TrieNode>& trie = vocabulary_->trie();
  const std::vector<int32_t>& token_ids = vocabulary_->trie_token_ids();
  walk_states_[0] = state;
  const int32_t num_nodes = static_cast<int32_t>(trie.size());
  for (int32_t i = 0; i < num_nodes;) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const int32_t from = walk_states_[node.depth - 1];
    int32_t next = states_[from].next[node.byte];
    if (next == kUnknown) {
      LLMRT_ASSIGN_OR_RETURN(next, Step(from, node.byte));
    }
    if (next == kDead) {
      i = node.subtree_end;
      continue;
    }
    walk_states_[node.depth] = next;
    for (int32_t t = node.token_begin; t < node.token_end; ++t) {
      const int32_t id = token_ids[t];
      mask[id >> 5] |= 1u << (id & 31);
    }
    ++i;
  }
  // Whole-token elements (<[ID]>) waiting at this state; CompileGrammar checked their ids.
  for (int32_t top : states_[state].tops) {
    const Grammar::Element& element = grammar_.elements[frames_[top].position];
    if (element.kind == Grammar::Kind::kToken) {
      mask[element.value >> 5] |= 1u << (element.value & 31);
    }
  }
  const int64_t bytes = static_cast<int64_t>(mask.size() * sizeof(uint32_t));
  if (mask_cache_bytes_ + bytes > kMaskCacheBytes) {
    mask_cache_.clear();
    mask_cache_bytes_ = 0;
  }
  mask_cache_.emplace(state, std::vector<uint32_t>(mask.begin(), mask.end()));
  mask_cache_bytes_ += bytes;
  return absl::OkStatus();
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), state_(grammar_->InitialState()) {}

absl::Status GrammarMatcher::FillNextTokenMask(absl::Span<uint32_t> mask) {
  return grammar_->FillMask(state_, mask);
}

bool GrammarMatcher::CanEnd() const { return grammar_->Accepting(state_); }

absl::Status GrammarMatcher::Accept(int32_t token) {
  const TokenVocabulary& vocabulary = grammar_->vocabulary();
  if (token < 0 || token >= vocabulary.vocab_size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar: token %d is outside the vocabulary", token));
  }
  // Text tokens advance by their bytes; special tokens only where the grammar names them.
  LLMRT_ASSIGN_OR_RETURN(const int32_t next,
                         vocabulary.Usable(token)
                             ? grammar_->Advance(state_, vocabulary.TokenBytes(token))
                             : grammar_->AdvanceToken(state_, token));
  if (next == CompiledGrammar::kDead) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar: token %d does not continue the grammar here", token));
  }
  state_ = next;
  return absl::OkStatus();
}

bool GrammarMatcher::AcceptBytes(std::string_view bytes) {
  absl::StatusOr<int32_t> next = grammar_->Advance(state_, bytes);
  if (!next.ok() || *next == CompiledGrammar::kDead) return false;
  state_ = *next;
  return true;
}

std::unique_ptr<sampling::TokenConstraint> GrammarMatcher::CloneInitial() const {
  return std::make_unique<GrammarMatcher>(grammar_);
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileGrammar(
    std::string_view gbnf, std::shared_ptr<const TokenVocabulary> vocabulary) {
  LLMRT_ASSIGN_OR_RETURN(Grammar grammar, ParseGrammar(gbnf));
  // A text token named by id would have two ways to advance (its bytes and its id); the bytes
  // are the one way, so <[ID]> is for tokens a byte string cannot spell.
  for (const Grammar::Element& element : grammar.elements) {
    if (element.kind != Grammar::Kind::kToken) continue;
    if (element.value >= vocabulary->vocab_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grammar: <[%d]> is outside the vocabulary (%d tokens)", element.value,
                          vocabulary->vocab_size()));
    }
    if (vocabulary->Usable(element.value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("grammar: <[%d]> is a text token; write its text %s as a literal instead",
                          element.value, GbnfLiteral(vocabulary->TokenBytes(element.value))));
    }
  }
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar), std::move(vocabulary));
  if (compiled->InitialState() == CompiledGrammar::kDead) {
    return absl::InvalidArgumentError("grammar: the start rule matches nothing");
  }
  return std::shared_ptr<const CompiledGrammar>(std::move(compiled));
}

}  // namespace llmrt::grammar
