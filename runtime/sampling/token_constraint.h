// TokenConstraint: which tokens a sequence may sample next (structured output). The engine holds
// one per choice, asks for the allowed-token mask before each sample and advances it with the
// sampled token; the sampler sends the logits of the other tokens to -inf before anything else
// (sampler.h, step 0). runtime/grammar implements it with a grammar's pushdown automaton; this
// interface keeps that code (and its JSON Schema converter) out of the engine.
//
// Masks are bit vectors: token t is allowed when bit (t % 32) of word t / 32 is set.
//
// Thread-safety: one constraint per sequence, used from one thread at a time.
#ifndef LLMRT_SAMPLING_TOKEN_CONSTRAINT_H_
#define LLMRT_SAMPLING_TOKEN_CONSTRAINT_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace llmrt::sampling {

inline int64_t MaskWords(int64_t vocab_size) { return (vocab_size + 31) / 32; }
inline bool MaskAllows(const uint32_t* mask, int32_t token) {
  return (mask[token >> 5] >> (token & 31)) & 1u;
}

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  // Sets `mask` (MaskWords(vocab) words, every bit written) to the tokens that may come next.
  // End-of-sequence tokens are not the constraint's business: the engine adds its EOS ids when
  // CanEnd(). A failure (e.g. the automaton outgrew its limits) names what happened.
  virtual absl::Status FillNextTokenMask(absl::Span<uint32_t> mask) = 0;
  // Whether the text so far is complete (the end of sequence may come now).
  virtual bool CanEnd() const = 0;
  // Advances on a sampled token; InvalidArgument when the token was not allowed.
  virtual absl::Status Accept(int32_t token) = 0;
  // A fresh constraint in the start state (one per choice of an n > 1 request).
  virtual std::unique_ptr<TokenConstraint> CloneInitial() const = 0;
};

}  // namespace llmrt::sampling

#endif  // LLMRT_SAMPLING_TOKEN_CONSTRAINT_H_
