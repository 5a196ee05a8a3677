#include "runtime/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/sampling/token_constraint.h"

namespace llmrt::sampling {
namespace {

std::vector<float> LogitsOf(const std::vector<double>& probabilities) {
  std::vector<float> logits;
  for (double probability : probabilities)
    logits.push_back(static_cast<float>(std::log(probability)));
  return logits;
}

TEST(SamplerTest, GreedyPicksArgmaxAndLowestIdOnTies) {
  Sampler sampler({.temperature = 0.0, .top_k = 0, .top_p = 1.0, .seed = 1});
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sampler.Sample(logits.data(), 4), 1);
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
  EXPECT_EQ(probabilities, (std::vector<float>{0, 1, 0, 0}));
}

// ArgMax against the definition (the first strictly larger logit wins, scanning up from id 0)
// over lengths around its block size, with ties, infinities and NaNs placed anywhere.
TEST(SamplerTest, ArgMaxIsTheFirstLargestLogitAtEveryLengthAndPlacement) {
  std::mt19937 random(11);
  const float kSpecial[] = {std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::infinity(), 3.0f, 3.0f};
  for (int32_t size : {1, 2, 7, 8, 63, 64, 65, 127, 128, 129, 200, 1000, 151936}) {
    for (int trial = 0; trial < 24; ++trial) {
      // Few distinct values, so ties are common.
      std::uniform_int_distribution<int> value(-4, 3);
      std::vector<float> logits(size);
      for (float& logit : logits) logit = static_cast<float>(value(random));
      std::uniform_int_distribution<int32_t> place(0, size - 1);
      for (int special = 0; special < trial % 4; ++special) {
        logits[place(random)] = kSpecial[(trial + special) % 5];
      }
      if (trial == 23) logits[0] = std::numeric_limits<float>::quiet_NaN();
      int32_t expected = 0;
      for (int32_t id = 1; id < size; ++id) {
        if (logits[id] > logits[expected]) expected = id;
      }
      ASSERT_EQ(ArgMax(logits.data(), size), expected) << "size " << size << " trial " << trial;
    }
  }
}

TEST(SamplerTest, TemperatureScalesTheSoftmax) {
  std::vector<float> logits = {1.0f, 2.0f, 0.0f, -0.5f};
  for (double temperature : {0.5, 1.0, 2.0}) {
    Sampler sampler({.temperature = temperature, .top_k = 0, .top_p = 1.0, .seed = 0});
    std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
    double total = 0;
    for (float logit : logits) total += std::exp(logit / temperature);
    for (int id = 0; id < 4; ++id) {
      EXPECT_NEAR(probabilities[id], std::exp(logits[id] / temperature) / total, 1e-6)
          << "temperature " << temperature << " id " << id;
    }
  }
}

TEST(SamplerTest, DrawsFollowTheDistribution) {
  const std::vector<double> expected = {0.1, 0.2, 0.3, 0.4};
  std::vector<float> logits = LogitsOf(expected);
  Sampler sampler({.temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = 42});
  constexpr int kDraws = 40000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sampler.Sample(logits.data(), 4)];
  for (int id = 0; id < 4; ++id) {
    // Standard deviation of a frequency is sqrt(p (1 - p) / n) <= 0.0025; allow 4 of them.
    EXPECT_NEAR(static_cast<double>(counts[id]) / kDraws, expected[id], 0.01) << "id " << id;
  }
}

TEST(SamplerTest, TopKMasksAllButTheKLargest) {
  const std::vector<double> base = {0.05, 0.4, 0.1, 0.3, 0.15};
  std::vector<float> logits = LogitsOf(base);
  Sampler sampler({.temperature = 1.0, .top_k = 2, .top_p = 1.0, .seed = 7});
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 5);
  EXPECT_FLOAT_EQ(probabilities[1], 0.4f / 0.7f);
  EXPECT_FLOAT_EQ(probabilities[3], 0.3f / 0.7f);
  EXPECT_EQ(probabilities[0] + probabilities[2] + probabilities[4], 0.0f);
  for (int i = 0; i < 2000; ++i) {
    int32_t id = sampler.Sample(logits.data(), 5);
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<double> base = {0.05, 0.5, 0.15, 0.3};
  std::vector<float> logits = LogitsOf(base);
  // 0.5 < 0.75 <= 0.5 + 0.3: the two most likely tokens stay.
  Sampler sampler({.temperature = 1.0, .top_k = 0, .top_p = 0.75, .seed = 3});
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
  EXPECT_NEAR(probabilities[1], 0.5 / 0.8, 1e-6);
  EXPECT_NEAR(probabilities[3], 0.3 / 0.8, 1e-6);
  EXPECT_EQ(probabilities[0], 0.0f);
  EXPECT_EQ(probabilities[2], 0.0f);
  // A tiny p still keeps the most likely token.
  Sampler tiny({.temperature = 1.0, .top_k = 0, .top_p = 1e-9, .seed = 3});
  EXPECT_EQ(tiny.Probabilities(logits.data(), 4), (std::vector<float>{0, 1, 0, 0}));
}

TEST(SamplerTest, TopKThenTopP) {
  const std::vector<double> base = {0.35, 0.25, 0.2, 0.2};
  std::vector<float> logits = LogitsOf(base);
  // top-k 3 renormalises to 0.35/0.8, 0.25/0.8, 0.2/0.8; top-p 0.7 then keeps the first two
  // (0.4375 + 0.3125 = 0.75 >= 0.7), which p = 0.7 alone on the raw distribution would not
  // (0.35 + 0.25 = 0.6 < 0.7).
  Sampler sampler({.temperature = 1.0, .top_k = 3, .top_p = 0.7, .seed = 0});
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
  EXPECT_NEAR(probabilities[0], 0.35 / 0.6, 1e-6);
  EXPECT_NEAR(probabilities[1], 0.25 / 0.6, 1e-6);
  EXPECT_EQ(probabilities[2] + probabilities[3], 0.0f);
}

TEST(SamplerTest, SameSeedSameTokensOtherSeedOtherTokens) {
  std::vector<float> logits(64);
  for (int id = 0; id < 64; ++id) logits[id] = std::sin(id * 0.7f);
  auto draw = [&](uint64_t seed) {
    Sampler sampler({.temperature = 1.0, .top_k = 0, .top_p = 1.0, .seed = seed});
    std::vector<int32_t> ids;
    for (int i = 0; i < 32; ++i) ids.push_back(sampler.Sample(logits.data(), 64));
    return ids;
  };
  EXPECT_EQ(draw(123), draw(123));
  EXPECT_NE(draw(123), draw(124));
}

// The sampler sorts only as much of the vocabulary as its filters and its draw look at. Check it
// against the plain algorithm of the header on a 32000-token vocabulary: sort everything,
// softmax, top-k, top-p, min-p, then walk the cumulative mass to a draw made from the same
// Mersenne twister the same way (top 53 bits / 2^53).
struct Reference {
  std::vector<int32_t> ids;           // kept, descending
  std::vector<double> probabilities;  // normalised over the kept ones
};

Reference ReferenceDistribution(const std::vector<float>& logits, const SamplingParams& params) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(vocab);
  for (int32_t id = 0; id < vocab; ++id) order[id] = id;
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (params.top_k > 0 && params.top_k < vocab) order.resize(params.top_k);
  std::vector<double> weights;
  double total = 0.0;
  for (int32_t id : order) {
    weights.push_back(std::exp((logits[id] - logits[order[0]]) / params.temperature));
    total += weights.back();
  }
  for (double& weight : weights) weight /= total;
  if (params.top_p < 1.0) {
    double cumulative = 0.0;
    size_t prefix = 0;
    while (prefix < weights.size()) {
      cumulative += weights[prefix++];
      if (cumulative >= params.top_p) break;
    }
    weights.resize(prefix);
    for (double& weight : weights) weight /= cumulative;
  }
  if (params.min_p > 0.0) {
    size_t prefix = 1;
    double kept = weights[0];
    while (prefix < weights.size() && weights[prefix] >= params.min_p * weights[0]) {
      kept += weights[prefix++];
    }
    weights.resize(prefix);
    for (double& weight : weights) weight /= kept;
  }
  order.resize(weights.size());
  return {order, weights};
}

TEST(SamplerTest, LargeVocabularyMatchesTheFullSortReference) {
  constexpr int32_t kVocab = 32000;
  std::mt19937 generator(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(kVocab);
  for (float& logit : logits) logit = normal(generator);
  logits[123] = logits[456];  // a tie, broken by the lower id
  const SamplingParams settings[] = {
      {.temperature = 1.0, .seed = 11},                // the whole vocabulary
      {.temperature = 0.7, .top_p = 0.9, .seed = 12},  // a long top-p prefix
      {.temperature = 1.3, .top_k = 50, .top_p = 0.8, .seed = 13},
      {.temperature = 1.0, .min_p = 0.05, .seed = 14},
      {.temperature = 8.0, .top_p = 0.99, .seed = 15},  // nearly flat: sorts almost all
  };
  for (const SamplingParams& params : settings) {
    SCOPED_TRACE(testing::Message()
                 << "temperature " << params.temperature << " top_k " << params.top_k << " top_p "
                 << params.top_p << " min_p " << params.min_p);
    const Reference reference = ReferenceDistribution(logits, params);
    Sampler sampler(params);
    std::vector<float> probabilities = sampler.Probabilities(logits.data(), kVocab);
    std::vector<double> expected(kVocab, 0.0);
    for (size_t i = 0; i < reference.ids.size(); ++i) {
      expected[reference.ids[i]] = reference.probabilities[i];
    }
    for (int32_t id = 0; id < kVocab; ++id) {
      ASSERT_NEAR(probabilities[id], expected[id], 1e-6 + 1e-5 * expected[id]) << "id " << id;
    }
    // Draws: token for token the reference's inverse CDF of the same uniforms.
    Sampler drawing(params);
    std::mt19937_64 random(params.seed);
    for (int draw = 0; draw < 200; ++draw) {
      const double target = static_cast<double>(random() >> 11) * (1.0 / 9007199254740992.0);
      double cumulative = 0.0;
      int32_t want = reference.ids.back();
      for (size_t i = 0; i < reference.ids.size(); ++i) {
        cumulative += reference.probabilities[i];
        if (target < cumulative) {
          want = reference.ids[i];
          break;
        }
      }
      ASSERT_EQ(drawing.Sample(logits.data(), kVocab), want) << "draw " << draw;
    }
  }
}

TEST(SamplerTest, ValidateRejectsBadParams) {
  EXPECT_TRUE(Sampler::Validate({}).ok());
  EXPECT_FALSE(Sampler::Validate({.temperature = -1.0}).ok());
  EXPECT_FALSE(Sampler::Validate({.temperature = NAN}).ok());
  EXPECT_FALSE(Sampler::Validate({.temperature = 1.0, .top_k = -2}).ok());
  EXPECT_FALSE(Sampler::Validate({.temperature = 1.0, .top_k = 0, .top_p = 0.0}).ok());
  EXPECT_FALSE(Sampler::Validate({.temperature = 1.0, .top_k = 0, .top_p = 1.5}).ok());
}

TEST(SamplerTest, ValidateRejectsBadNewParams) {
  SamplingParams params;
  params.min_p = 1.5;
  EXPECT_FALSE(Sampler::Validate(params).ok());
  params = {};
  params.repetition_penalty = 0.0;
  EXPECT_FALSE(Sampler::Validate(params).ok());
  params = {};
  params.presence_penalty = 2.5;
  EXPECT_FALSE(Sampler::Validate(params).ok());
  params = {};
  params.frequency_penalty = -3;
  EXPECT_FALSE(Sampler::Validate(params).ok());
  params = {};
  params.logit_bias = {{70, 1.0f}};
  EXPECT_TRUE(Sampler::Validate(params).ok());
  absl::Status status = Sampler::Validate(params, 64);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("logit_bias token 70"), std::string::npos) << status;
  params.logit_bias = {{3, 101.0f}};
  EXPECT_FALSE(Sampler::Validate(params, 64).ok());
}

TEST(SamplerTest, LogitBiasChangesTheGreedyChoice) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.0f};
  SamplingParams params;
  params.temperature = 0.0;
  params.logit_bias = {{1, -100.0f}, {2, 1.5f}};
  Sampler sampler(params);
  EXPECT_EQ(sampler.Sample(logits.data(), 4), 2);  // 1 - 100, 2.5, 2
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  // transformers' RepetitionPenaltyLogitsProcessor on [2, -1, 1.5, 0.5] with penalty 2 and seen
  // tokens {0, 1} gives [1, -2, 1.5, 0.5].
  const std::vector<float> logits = {2.0f, -1.0f, 1.5f, 0.5f};
  SamplingParams params;
  params.temperature = 1.0;
  params.repetition_penalty = 2.0;
  Sampler sampler(params);
  sampler.SetPrompt(std::vector<int32_t>{0});
  sampler.Accept(1);
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
  const std::vector<double> expected_logits = {1.0, -2.0, 1.5, 0.5};
  double total = 0;
  for (double logit : expected_logits) total += std::exp(logit);
  for (int id = 0; id < 4; ++id) {
    EXPECT_NEAR(probabilities[id], std::exp(expected_logits[id]) / total, 1e-6) << id;
  }
  // Greedy now prefers token 2 (1.5) over token 0 (2 / 2 = 1).
  params.temperature = 0.0;
  Sampler greedy(params);
  greedy.SetPrompt(std::vector<int32_t>{0});
  EXPECT_EQ(greedy.Sample(logits.data(), 4), 2);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountOutputTokens) {
  const std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  SamplingParams params;
  params.temperature = 1.0;
  params.presence_penalty = 0.5;
  params.frequency_penalty = 0.25;
  Sampler sampler(params);
  sampler.SetPrompt(std::vector<int32_t>{2});  // the prompt does not count for these
  sampler.Accept(0);
  sampler.Accept(0);
  sampler.Accept(1);
  // OpenAI: logit - presence * (count > 0) - frequency * count -> [1 - 1, 1 - 0.75, 1].
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 3);
  const std::vector<double> expected_logits = {0.0, 0.25, 1.0};
  double total = 0;
  for (double logit : expected_logits) total += std::exp(logit);
  for (int id = 0; id < 3; ++id) {
    EXPECT_NEAR(probabilities[id], std::exp(expected_logits[id]) / total, 1e-6) << id;
  }
}

TEST(SamplerTest, MinPDropsTokensBelowAFractionOfTheTop) {
  // Probabilities 0.5, 0.3, 0.15, 0.05; min_p 0.25 keeps p >= 0.125: the first three.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  SamplingParams params;
  params.min_p = 0.25;
  Sampler sampler(params);
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 4);
  EXPECT_NEAR(probabilities[0], 0.5 / 0.95, 1e-6);
  EXPECT_NEAR(probabilities[1], 0.3 / 0.95, 1e-6);
  EXPECT_NEAR(probabilities[2], 0.15 / 0.95, 1e-6);
  EXPECT_EQ(probabilities[3], 0.0f);
}

TEST(SamplerTest, LogprobsAreLogSoftmaxOfRawLogits) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  SamplingParams params;
  params.temperature = 0.5;  // does not change logprobs
  params.logit_bias = {{0, 50.0f}};
  Sampler sampler(params);
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;
  sampler.Logprobs(logits.data(), 4, 2, 3, chosen, top);
  const double log_total = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  EXPECT_EQ(chosen.token, 2);
  EXPECT_NEAR(chosen.logprob, 2.0 - log_total, 1e-6);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].token, 1);  // ties: lowest id first
  EXPECT_EQ(top[1].token, 3);
  EXPECT_EQ(top[2].token, 2);
  EXPECT_NEAR(top[0].logprob, 3.0 - log_total, 1e-6);
}

TEST(SamplerTest, MaskComesFirstAndNothingBringsAMaskedTokenBack) {
  // Token 1 dominates and has a +100 bias, yet it is masked; top-k 3 keeps a masked token too.
  const std::vector<float> logits = {1.0f, 9.0f, 2.0f, 0.5f, 8.0f};
  const uint32_t allowed = (1u << 0) | (1u << 2) | (1u << 3);
  SamplingParams params;
  params.logit_bias = {{1, 100.0f}};
  params.top_k = 3;
  params.seed = 7;
  Sampler sampler(params);
  std::vector<float> probabilities = sampler.Probabilities(logits.data(), 5, &allowed);
  EXPECT_EQ(probabilities[1], 0.0f);
  EXPECT_EQ(probabilities[4], 0.0f);
  const double total = std::exp(1.0) + std::exp(2.0) + std::exp(0.5);
  EXPECT_NEAR(probabilities[2], std::exp(2.0) / total, 1e-6);
  for (int i = 0; i < 200; ++i) {
    const int32_t token = sampler.Sample(logits.data(), 5, &allowed);
    EXPECT_TRUE(MaskAllows(&allowed, token)) << token;
  }
  params.temperature = 0.0;
  Sampler greedy(params);
  EXPECT_EQ(greedy.Sample(logits.data(), 5, &allowed), 2);
}

}  // namespace
}  // namespace llmrt::sampling
