#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "runtime/sampling/token_constraint.h"

namespace llmrt::sampling {

SamplingParams SamplingFromGenerationConfig(const plan::GenerationDefaults& generation) {
  SamplingParams params;
  params.temperature = generation.do_sample()
                           ? (generation.temperature() > 0 ? generation.temperature() : 1.0)
                           : 0.0;
  params.top_k = static_cast<int32_t>(generation.top_k());
  params.top_p = generation.top_p() > 0 && generation.top_p() <= 1 ? generation.top_p() : 1.0;
  params.repetition_penalty =
      generation.repetition_penalty() > 0 ? generation.repetition_penalty() : 1.0;
  return params;
}

int32_t ArgMax(const float* logits, int32_t vocab_size) {
  // Blocks of 64 reduced by 8 independent maxima (a compare-and-branch per logit was 3.7% of a
  // Qwen3-MoE-shape int4 decode step at 151,936 logits), then the first index of the best block
  // holding the best value. Same result as one pass keeping the first strictly larger value:
  // NaNs never win (a NaN logits[0] returns 0), ties go to the lowest id.
  constexpr int32_t kBlock = 64, kLanes = 8;
  float best_value = logits[0];
  int32_t best_block = 0;
  int32_t block = 0;
  for (; block + kBlock <= vocab_size; block += kBlock) {
    float lanes[kLanes];
    for (int32_t j = 0; j < kLanes; ++j) lanes[j] = -std::numeric_limits<float>::infinity();
    for (int32_t i = block; i < block + kBlock; i += kLanes) {
      for (int32_t j = 0; j < kLanes; ++j) {
        lanes[j] = logits[i + j] > lanes[j] ? logits[i + j] : lanes[j];
      }
    }
    float block_max = lanes[0];
    for (int32_t j = 1; j < kLanes; ++j) block_max = std::max(block_max, lanes[j]);
    if (block_max > best_value) {
      best_value = block_max;
      best_block = block;
    }
  }
  for (int32_t id = block; id < vocab_size; ++id) {
    if (logits[id] > best_value) {
      best_value = logits[id];
      best_block = id;
    }
  }
  for (int32_t id = best_block; id < vocab_size; ++id) {
    if (logits[id] == best_value) return id;
  }
  return 0;  // best_value is logits[0], a NaN
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

const float* Sampler::Process(const float* logits, int32_t vocab_size, const uint32_t* allowed) {
  const bool penalties = params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
                         params_.frequency_penalty != 0.0;
  if (params_.logit_bias.empty() && !penalties && allowed == nullptr) return logits;
  processed_.assign(logits, logits + vocab_size);
  if (allowed != nullptr) {
    // Word by word: inside a JSON string nearly every word is all ones, between values nearly
    // every word is zero, so the per-bit loop runs only on the mixed words.
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (int32_t base = 0; base < vocab_size; base += 32) {
      const uint32_t word = allowed[base >> 5];
      if (word == ~0u) continue;
      const int32_t end = std::min(base + 32, vocab_size);
      for (int32_t id = base; id < end; ++id) {
        if (!((word >> (id - base)) & 1u)) processed_[id] = kMasked;
      }
    }
  }
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

namespace {

// Descending by logit, ascending id on ties, so results do not depend on sort stability.
template <typename Candidate>
bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// The first sorted chunk: a trained model's top 64 tokens usually hold most of the mass; each
// extension sorts 4x as many, and past half of what is left the rest is sorted at once, so a
// flat distribution costs a few linear heap passes more than one full sort.
constexpr int64_t kFirstSortedChunk = 64;

}  // namespace

void Sampler::SortPrefix(int64_t count) {
  count = std::min(count, kept_);
  if (count <= sorted_) return;
  count = std::max({count, kFirstSortedChunk, 4 * sorted_});
  // Everything past sorted_ is <= the sorted prefix, so sorting the next chunk of the rest
  // extends the prefix. Past half of the rest a plain sort is cheaper than a heap.
  if (2 * count >= kept_) {
    count = kept_;
    std::sort(candidates_.begin() + sorted_, candidates_.begin() + kept_, Before<Candidate>);
  } else {
    std::partial_sort(candidates_.begin() + sorted_, candidates_.begin() + count,
                      candidates_.begin() + kept_, Before<Candidate>);
  }
  for (int64_t i = sorted_; i < count; ++i) {
    candidates_[i].probability =
        std::exp(candidates_[i].logit * inverse_temperature_ - max_scaled_);
  }
  sorted_ = count;
}

void Sampler::BuildCandidates(const float* logits, int32_t vocab_size) {
  candidates_.resize(vocab_size);
  inverse_temperature_ = 1.0 / params_.temperature;
  // Tokens at -inf (masked by a constraint) can never be drawn: they are left out, so a step
  // where the grammar allows a handful of tokens weighs a handful, not the whole vocabulary.
  int32_t count = 0;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (logits[id] != -std::numeric_limits<float>::infinity()) {
      candidates_[count++] = {id, logits[id], 0.0};
    }
  }
  if (count == 0) candidates_[count++] = {0, logits[0], 0.0};  // callers never mask all
  candidates_.resize(count);
  sorted_ = 0;
  kept_ = count;
  float max_logit = candidates_[0].logit;
  if (params_.top_k > 0 && params_.top_k < count) {
    kept_ = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + kept_, candidates_.end(),
                      Before<Candidate>);
    sorted_ = kept_;  // weighted below
    max_logit = candidates_[0].logit;
  } else {
    for (int32_t i = 1; i < count; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
  }
  // Softmax of logit / temperature in double, shifted by the maximum for range.
  max_scaled_ = max_logit * inverse_temperature_;
  kept_weight_ = 0.0;
  if (sorted_ > 0) {
    for (int64_t i = 0; i < kept_; ++i) {
      candidates_[i].probability =
          std::exp(candidates_[i].logit * inverse_temperature_ - max_scaled_);
      kept_weight_ += candidates_[i].probability;
    }
  } else {
    for (int32_t i = 0; i < count; ++i) {
      kept_weight_ += std::exp(candidates_[i].logit * inverse_temperature_ - max_scaled_);
    }
  }
  if (params_.top_p < 1.0) {
    // Keep the smallest prefix whose mass reaches top_p (the token that crosses it stays), as
    // transformers' TopPLogitsWarper does; at least one token always stays.
    const double target = params_.top_p * kept_weight_;
    double cumulative = 0.0;
    int64_t prefix = 0;
    while (prefix < kept_) {
      SortPrefix(prefix + 1);
      cumulative += candidates_[prefix].probability;
      ++prefix;
      if (cumulative >= target) break;
    }
    kept_ = prefix;
    kept_weight_ = cumulative;
  }
  if (params_.min_p > 0.0) {
    // The kept ones are a prefix of the sorted order; the first always stays.
    SortPrefix(1);
    const double threshold = params_.min_p * candidates_[0].probability;
    int64_t prefix = 1;
    double kept_weight = candidates_[0].probability;
    while (prefix < kept_) {
      SortPrefix(prefix + 1);
      if (candidates_[prefix].probability < threshold) break;
      kept_weight += candidates_[prefix].probability;
      ++prefix;
    }
    kept_ = prefix;
    kept_weight_ = kept_weight;
  }
}

double Sampler::NextUniform() {
  // The top 53 bits give a double in [0, 1) with every value equally likely.
  return static_cast<double>(random_() >> 11) * (1.0 / 9007199254740992.0);
}

int32_t Sampler::Sample(const float* raw_logits, int32_t vocab_size, const uint32_t* allowed) {
  const float* logits = Process(raw_logits, vocab_size, allowed);
  if (params_.temperature == 0.0) return ArgMax(logits, vocab_size);
  BuildCandidates(logits, vocab_size);
  // Walk the sorted candidates until their mass passes the draw, sorting further on demand.
  const double target = NextUniform() * kept_weight_;
  double cumulative = 0.0;
  for (int64_t i = 0; i < kept_; ++i) {
    SortPrefix(i + 1);
    cumulative += candidates_[i].probability;
    if (target < cumulative) return candidates_[i].id;
  }
  // Rounding left the total a hair below the kept weight and the draw above it.
  return candidates_[kept_ - 1].id;
}

std::vector<float> Sampler::Probabilities(const float* raw_logits, int32_t vocab_size,
                                          const uint32_t* allowed) {
  const float* logits = Process(raw_logits, vocab_size, allowed);
  std::vector<float> probabilities(vocab_size, 0.0f);
  if (params_.temperature == 0.0) {
    probabilities[ArgMax(logits, vocab_size)] = 1.0f;
    return probabilities;
  }
  BuildCandidates(logits, vocab_size);
  SortPrefix(kept_);
  for (int64_t i = 0; i < kept_; ++i) {
    probabilities[candidates_[i].id] =
        static_cast<float>(candidates_[i].probability / kept_weight_);
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
                    Before<Candidate>);
  for (int32_t i = 0; i < count; ++i) {
    top.push_back({candidates_[i].id, static_cast<float>(candidates_[i].logit - log_total)});
  }
}

}  // namespace llmrt::sampling
