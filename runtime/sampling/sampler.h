// Sampler: picks the next token of one sequence from a row of logits.
//
// Order of transformations (vLLM's, which matches transformers' LogitsProcessor order for the
// options both have):
//   0. the allowed-token mask of structured output (token_constraint.h), when given: every
//      other token's logit becomes -inf, so nothing below can bring it back (vLLM applies its
//      grammar bitmask to the logits before its sampler, too);
//   1. logit_bias is added (OpenAI semantics, clamped to [-100, 100]);
//   2. repetition_penalty (transformers/CTRL): a token seen in the prompt or the output has its
//      logit divided by the penalty when positive, multiplied when negative;
//   3. presence/frequency penalties (OpenAI): logit -= presence * (count > 0) + frequency *
//      count, counting the output tokens only;
//   4. temperature 0: argmax (lowest id on ties), steps 5-6 skipped;
//   5. softmax(logit / temperature), then top-k, then top-p (the smallest prefix reaching p,
//      the token that crosses it kept), then min-p (drop tokens below min_p x the top
//      probability), renormalising after each;
//   6. one draw from the sequence's own random stream.
//
// Logprobs are log-softmax of the raw model logits (before steps 1-5), like vLLM's default
// "raw_logprobs": they describe the model, not the sampling settings.
//
// Determinism: each Sampler has its own 64-bit Mersenne twister (its output sequence is fixed by
// the C++ standard) turned into uniforms by hand, not by std::uniform_real_distribution (whose
// algorithm is implementation-defined). A seed therefore gives the same tokens on every platform
// and whatever else shares the batch: no random state is shared between sequences.
//
// Thread-safety: not thread-safe; one sampler per sequence. Scratch buffers are kept between
// calls, so after the first call with a given vocabulary size Sample() does not allocate.
#ifndef LLMRT_SAMPLING_SAMPLER_H_
#define LLMRT_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::sampling {

// OpenAI's limits: logit_bias values in [-100, 100], top_logprobs at most 20.
inline constexpr float kMaxLogitBias = 100.0f;
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingParams {
  double temperature = 1.0;                           // 0: greedy
  int32_t top_k = 0;                                  // 0 or -1: off
  double top_p = 1.0;                                 // 1: off
  double min_p = 0.0;                                 // 0: off
  double repetition_penalty = 1.0;                    // 1: off; > 0
  double presence_penalty = 0.0;                      // [-2, 2]
  double frequency_penalty = 0.0;                     // [-2, 2]
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token id, bias)
  uint64_t seed = 0;
};

// The sampling a plan's generation_config.json asks for, read as transformers reads it: greedy
// unless do_sample, then its temperature (1 when unset), top_k and top_p; its
// repetition_penalty either way. `llmrt run` / `chat`, the server and the C API all start from
// this, so one plan samples alike everywhere.
SamplingParams SamplingFromGenerationConfig(const plan::GenerationDefaults& generation);

// A token and its log-probability under the model.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // InvalidArgument naming the field for a value outside the ranges above. With vocab_size > 0
  // also checks that logit_bias ids lie in [0, vocab_size).
  static absl::Status Validate(const SamplingParams& params, int64_t vocab_size = 0);

  // The tokens the repetition penalty also counts (the prompt); call once before sampling.
  void SetPrompt(absl::Span<const int32_t> prompt);
  // Records a generated token for the penalties. The engine calls it for each token it keeps.
  void Accept(int32_t token);

  // The chosen token id in [0, vocab_size). `allowed` (MaskWords(vocab_size) words, or null
  // for no constraint) must allow at least one token; the result is always an allowed one.
  int32_t Sample(const float* logits, int32_t vocab_size, const uint32_t* allowed = nullptr);

  // Log-probability of `token` and the `top_n` most likely tokens (descending, lowest id first
  // on ties) under log-softmax of the raw `logits`.
  void Logprobs(const float* logits, int32_t vocab_size, int32_t token, int32_t top_n,
                TokenLogprob& chosen, std::vector<TokenLogprob>& top);

  // The distribution Sample() draws from, after every step; masked tokens get probability 0.
  // With temperature 0, all mass on the argmax. For tests and inspection.
  std::vector<float> Probabilities(const float* logits, int32_t vocab_size,
                                   const uint32_t* allowed = nullptr);

  const SamplingParams& params() const { return params_; }

 private:
  // Applies the mask, bias and penalties; returns `logits` itself when none is active.
  const float* Process(const float* logits, int32_t vocab_size, const uint32_t* allowed);
  // Sets up the distribution Sample() draws from: candidates_ holds every id, of which the
  // first kept_ survive top-k/top-p/min-p, each with weight exp(logit / T - max) in
  // `probability` (its probability is weight / kept_weight_). Only a prefix of candidates_ is
  // sorted (descending logit, lowest id first on ties), as far as the filters and the draw
  // looked: a 32000-token vocabulary costs one pass plus a partial sort of the few hundred
  // likely tokens instead of a full sort (~2.5 ms a token, on the engine thread of a batch).
  void BuildCandidates(const float* logits, int32_t vocab_size);
  // Sorts candidates_ up to at least `count` (capped at kept_) and gives them their weights.
  void SortPrefix(int64_t count);
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 random_;
  struct Candidate {
    int32_t id;
    float logit;
    double probability;
  };
  std::vector<Candidate> candidates_;
  int64_t sorted_ = 0;  // candidates_[0, sorted_) are sorted and weighted
  int64_t kept_ = 0;
  double kept_weight_ = 0.0;
  double inverse_temperature_ = 1.0;
  double max_scaled_ = 0.0;
  std::vector<float> processed_;
  absl::flat_hash_set<int32_t> prompt_tokens_;
  absl::flat_hash_map<int32_t, int32_t> output_counts_;
};

// Index of the largest logit; the lowest such index on ties.
int32_t ArgMax(const float* logits, int32_t vocab_size);

}  // namespace llmrt::sampling

#endif  // LLMRT_SAMPLING_SAMPLER_H_
