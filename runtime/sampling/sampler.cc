#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace llmrt::sampling {

int32_t ArgMax(const float* logits, int32_t vocab_size) {
  int32_t best = 0;
  for (int32_t id = 1; id < vocab_size; ++id) {
    if (logits[id] > logits[best]) best = id;
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), random_(params.seed) {}

absl::Status Sampler::Validate(const SamplingParams& params) {
  if (!(params.temperature >= 0.0) || std::isinf(params.temperature)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling: temperature must be >= 0 and finite, got %g", params.temperature));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: top_k must be >= 0 (0: off), got %d", params.top_k));
  }
  if (!(params.top_p > 0.0 && params.top_p <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: top_p must be in (0, 1] (1: off), got %g", params.top_p));
  }
  return absl::OkStatus();
}

void Sampler::BuildCandidates(const float* logits, int32_t vocab_size) {
  candidates_.resize(vocab_size);
  const double inverse_temperature = 1.0 / params_.temperature;
  for (int32_t id = 0; id < vocab_size; ++id) candidates_[id] = {id, logits[id], 0.0};
  // Descending by logit, ascending id on ties, so results do not depend on sort stability.
  auto before = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  size_t kept = candidates_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < kept) {
    kept = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + kept, candidates_.end(), before);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), before);
  }
  candidates_.resize(kept);
  // Softmax of logit / temperature in double, shifted by the maximum for range.
  const double max_scaled = candidates_[0].logit * inverse_temperature;
  double total = 0.0;
  for (Candidate& candidate : candidates_) {
    candidate.probability = std::exp(candidate.logit * inverse_temperature - max_scaled);
    total += candidate.probability;
  }
  for (Candidate& candidate : candidates_) candidate.probability /= total;
  if (params_.top_p < 1.0) {
    // Keep the smallest prefix whose mass reaches top_p (the token that crosses it stays), as
    // transformers' TopPLogitsWarper does; at least one token always stays.
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < candidates_.size()) {
      cumulative += candidates_[prefix].probability;
      ++prefix;
      if (cumulative >= params_.top_p) break;
    }
    candidates_.resize(prefix);
    for (Candidate& candidate : candidates_) candidate.probability /= cumulative;
  }
}

double Sampler::NextUniform() {
  // The top 53 bits give a double in [0, 1) with every value equally likely.
  return static_cast<double>(random_() >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::Sample(const float* logits, int32_t vocab_size) {
  if (params_.temperature == 0.0) return ArgMax(logits, vocab_size);
  BuildCandidates(logits, vocab_size);
  const double target = NextUniform();
  double cumulative = 0.0;
  for (const Candidate& candidate : candidates_) {
    cumulative += candidate.probability;
    if (target < cumulative) return candidate.id;
  }
  // Rounding left the total a hair below 1 and the draw above it.
  return candidates_.back().id;
}

std::vector<float> Sampler::Probabilities(const float* logits, int32_t vocab_size) {
  std::vector<float> probabilities(vocab_size, 0.0f);
  if (params_.temperature == 0.0) {
    probabilities[ArgMax(logits, vocab_size)] = 1.0f;
    return probabilities;
  }
  BuildCandidates(logits, vocab_size);
  for (const Candidate& candidate : candidates_) {
    probabilities[candidate.id] = static_cast<float>(candidate.probability);
  }
  return probabilities;
}

}  // namespace llmrt::sampling
