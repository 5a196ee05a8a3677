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

absl::Status Sampler::Validate(const SamplingParams& params, int64_t vocab_size) {
  if (!(params.temperature >= 0.0) || std::isinf(params.temperature)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling: temperature must be >= 0 and finite, got %g", params.temperature));
  }
  if (params.top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: top_k must be >= 0 (0 or -1: off), got %d", params.top_k));
  }
  if (!(params.top_p > 0.0 && params.top_p <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: top_p must be in (0, 1] (1: off), got %g", params.top_p));
  }
  if (!(params.min_p >= 0.0 && params.min_p <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: min_p must be in [0, 1] (0: off), got %g", params.min_p));
  }
  if (!(params.repetition_penalty > 0.0) || std::isinf(params.repetition_penalty)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sampling: repetition_penalty must be > 0 and finite (1: off), got %g",
                        params.repetition_penalty));
  }
  if (!(params.presence_penalty >= -2.0 && params.presence_penalty <= 2.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling: presence_penalty must be in [-2, 2], got %g", params.presence_penalty));
  }
  if (!(params.frequency_penalty >= -2.0 && params.frequency_penalty <= 2.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sampling: frequency_penalty must be in [-2, 2], got %g", params.frequency_penalty));
  }
  for (const auto& [token, bias] : params.logit_bias) {
    if (token < 0 || (vocab_size > 0 && token >= vocab_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling: logit_bias token %d is outside the vocabulary [0, %d)", token, vocab_size));
    }
    if (!(bias >= -kMaxLogitBias && bias <= kMaxLogitBias)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sampling: logit_bias of token %d must be in [-100, 100], got %g", token, bias));
    }
  }
  return absl::OkStatus();
}

void Sampler::SetPrompt(absl::Span<const int32_t> prompt) {
  if (params_.repetition_penalty == 1.0) return;
  prompt_tokens_.insert(prompt.begin(), prompt.end());
}

void Sampler::Accept(int32_t token) {
  if (params_.repetition_penalty == 1.0 && params_.presence_penalty == 0.0 &&
      params_.frequency_penalty == 0.0) {
    return;
  }
  ++output_counts_[token];
}

const float* Sampler::Process(const float* logits, int32_t vocab_size) {
  const bool penalties = params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
                         params_.frequency_penalty != 0.0;
  if (params_.logit_bias.empty() && !penalties) return logits;
  processed_.assign(logits, logits + vocab_size);
  for (const auto& [token, bias] : params_.logit_bias) {
    if (token >= 0 && token < vocab_size) processed_[token] += bias;
  }
  if (params_.repetition_penalty != 1.0) {
    const float penalty = static_cast<float>(params_.repetition_penalty);
    auto penalize = [&](int32_t token) {
      if (token < 0 || token >= vocab_size) return;
      float& logit = processed_[token];
      logit = logit > 0 ? logit / penalty : logit * penalty;
    };
    for (int32_t token : prompt_tokens_) penalize(token);
    for (const auto& [token, count] : output_counts_) {
      if (!prompt_tokens_.contains(token)) penalize(token);
    }
  }
  for (const auto& [token, count] : output_counts_) {
    if (token < 0 || token >= vocab_size) continue;
    processed_[token] -=
        static_cast<float>(params_.presence_penalty + params_.frequency_penalty * count);
  }
  return processed_.data();
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
  if (params_.min_p > 0.0) {
    // Candidates are sorted, so the kept ones are a prefix; the first always stays.
    const double threshold = params_.min_p * candidates_[0].probability;
    size_t prefix = 1;
    double kept_mass = candidates_[0].probability;
    while (prefix < candidates_.size() && candidates_[prefix].probability >= threshold) {
      kept_mass += candidates_[prefix].probability;
      ++prefix;
    }
    candidates_.resize(prefix);
    for (Candidate& candidate : candidates_) candidate.probability /= kept_mass;
  }
}

double Sampler::NextUniform() {
  // The top 53 bits give a double in [0, 1) with every value equally likely.
  return static_cast<double>(random_() >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::Sample(const float* raw_logits, int32_t vocab_size) {
  const float* logits = Process(raw_logits, vocab_size);
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

std::vector<float> Sampler::Probabilities(const float* raw_logits, int32_t vocab_size) {
  const float* logits = Process(raw_logits, vocab_size);
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

void Sampler::Logprobs(const float* logits, int32_t vocab_size, int32_t token, int32_t top_n,
                       TokenLogprob& chosen, std::vector<TokenLogprob>& top) {
  // log_softmax(x)_i = x_i - max - log(sum(exp(x - max))), in double for the sum.
  float max_logit = logits[0];
  for (int32_t id = 1; id < vocab_size; ++id) max_logit = std::max(max_logit, logits[id]);
  double total = 0.0;
  for (int32_t id = 0; id < vocab_size; ++id) total += std::exp(double{logits[id]} - max_logit);
  const double log_total = std::log(total) + max_logit;
  chosen = {token, static_cast<float>(logits[token] - log_total)};
  top.clear();
  const int32_t count = std::min(top_n, vocab_size);
  if (count <= 0) return;
  candidates_.resize(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) candidates_[id] = {id, logits[id], 0.0};
  std::partial_sort(candidates_.begin(), candidates_.begin() + count, candidates_.end(),
                    [](const Candidate& a, const Candidate& b) {
                      return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
                    });
  for (int32_t i = 0; i < count; ++i) {
    top.push_back({candidates_[i].id, static_cast<float>(candidates_[i].logit - log_total)});
  }
}

}  // namespace llmrt::sampling
