// Sampler: picks the next token from a row of logits.
//
// The order of transformations is transformers' LogitsProcessor order for these options:
// temperature, then top-k, then top-p, then a draw from the renormalised distribution.
// Temperature 0 is greedy decoding (argmax, lowest id on ties) and ignores the other options.
//
// Determinism: the random source is a 64-bit Mersenne twister (its output sequence is fixed by
// the C++ standard) turned into uniforms by hand, not by std::uniform_real_distribution (whose
// algorithm is implementation-defined), so a seed gives the same tokens on every platform.
//
// Thread-safety: not thread-safe; one sampler per sequence. Scratch buffers are kept between
// calls, so after the first call with a given vocabulary size Sample() does not allocate.
#ifndef LLMRT_SAMPLING_SAMPLER_H_
#define LLMRT_SAMPLING_SAMPLER_H_

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"

namespace llmrt::sampling {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // InvalidArgument for a negative temperature or top_k, top_p outside (0, 1].
  static absl::Status Validate(const SamplingParams& params);

  // The chosen token id in [0, vocab_size).
  int32_t Sample(const float* logits, int32_t vocab_size);

  // The distribution Sample() draws from, after temperature, top-k and top-p; masked tokens
  // get probability 0. With temperature 0, all mass on the argmax. For tests and inspection.
  std::vector<float> Probabilities(const float* logits, int32_t vocab_size);

  const SamplingParams& params() const { return params_; }

 private:
  // Fills candidates_ (ids with their probabilities, descending, masked tail removed).
  void BuildCandidates(const float* logits, int32_t vocab_size);
  double NextUniform();

  SamplingParams params_;
  std::mt19937_64 random_;
  struct Candidate {
    int32_t id;
    float logit;
    double probability;
  };
  std::vector<Candidate> candidates_;
};

// Index of the largest logit; the lowest such index on ties.
int32_t ArgMax(const float* logits, int32_t vocab_size);

}  // namespace llmrt::sampling

#endif  // LLMRT_SAMPLING_SAMPLER_H_
