// The serving engine end to end with real plans compiled by llmc: stories260K (a trained model,
// whose documented greedy story is the reference) and transformers' tiny fixtures.
//
// Exactness: greedy output must be token-for-token the same whether a request runs alone or among
// 16, after a prefix-cache hit, or after being preempted and recomputed under a tiny KV pool.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/engine/model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/e2e/test_util.h"

namespace llmc::testing {
namespace {

using llmrt::engine::Engine;
using llmrt::engine::EngineOptions;
using llmrt::engine::FinishReason;
using llmrt::engine::GenerationRequest;
using llmrt::engine::Model;
using llmrt::engine::ModelOptions;
using llmrt::engine::RequestId;
using llmrt::engine::RequestOutput;

constexpr char kStoriesDir[] = "tests/data/stories260K";
// tests/data/stories260K/README.md: greedy f32 continuation of "Once upon a time".
const std::vector<int32_t> kStoriesGreedy = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                             426, 338, 401, 396, 267, 337, 410, 408, 419, 292};

// Compiles `model_dir` (relative to the source tree) to an f32 plan once per test binary.
std::string CompilePlan(const std::string& model_dir) {
  static std::map<std::string, std::string> plans;
  auto found = plans.find(model_dir);
  if (found != plans.end()) return found->second;
  std::string name = model_dir.substr(model_dir.rfind('/') + 1);
  const std::string plan = MakeScratchDir("engine_" + name) + "/plan.bin";
  CommandResult result = RunCommand(ToolPath("llmc") + " compile " + SourcePath(model_dir) +
                                    " -o " + plan + " --dtype f32 -q");
  EXPECT_EQ(result.exit_code, 0) << result.error;
  plans[model_dir] = plan;
  return plan;
}

struct Choice {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::string stop_string;
  int64_t cached_prompt_tokens = 0;
  int32_t outputs_finished = 0;
};

std::vector<std::vector<int32_t>> SixteenPrompts(const llmrt::Tokenizer& tokenizer, int64_t vocab,
                                                 bool text);

class EngineTest : public ::testing::Test {
 protected:
  void Load(const std::string& model_dir, int64_t kv_cache_tokens = 0,
            int32_t max_tokens_per_step = 64, const EngineOptions& engine_options = {}) {
    engine_.reset();  // before the model whose pool it uses
    ModelOptions options;
    options.kv_cache_tokens = kv_cache_tokens;
    options.max_tokens_per_step = max_tokens_per_step;
    auto model = Model::Load(CompilePlan(model_dir), options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    auto tokenizer = llmrt::Tokenizer::Create(model_->meta().tokenizer());
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    tokenizer_ = *std::move(tokenizer);
    // Request ids restart with a new engine.
    results_.clear();
    engine_ = std::make_unique<Engine>(*model_, tokenizer_.get(), engine_options);
  }

  GenerationRequest Greedy(std::vector<int32_t> prompt, int64_t max_tokens) {
    GenerationRequest request;
    request.prompt_ids = std::move(prompt);
    request.sampling.temperature = 0.0;
    request.max_tokens = max_tokens;
    request.ignore_eos = true;
    return request;
  }

  RequestId Submit(GenerationRequest request) {
    request.on_output = [this](const RequestOutput& output) {
      Choice& choice = Get(output.request_id, output.index);
      for (const auto& token : output.tokens) choice.tokens.push_back(token.token);
      choice.text += output.text;
      if (output.finished) {
        ++choice.outputs_finished;
        choice.reason = output.finish_reason;
        choice.stop_string = output.stop_string;
        choice.cached_prompt_tokens = output.cached_prompt_tokens;
        EXPECT_TRUE(output.status.ok()) << output.status;
      }
    };
    absl::StatusOr<RequestId> id = engine_->Submit(std::move(request));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }

  void Run() {
    absl::Status status = engine_->RunUntilIdle();
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_EQ(engine_->GetStats().kv_blocks_used, 0);
  }

  // Runs each request alone (one at a time) and returns their tokens.
  std::vector<std::vector<int32_t>> RunAlone(const std::vector<GenerationRequest>& requests) {
    std::vector<std::vector<int32_t>> tokens;
    for (const GenerationRequest& request : requests) {
      RequestId id = Submit(request);
      Run();
      tokens.push_back(Get(id, 0).tokens);
    }
    return tokens;
  }

  Choice& Get(RequestId id, int32_t index) { return results_[std::make_pair(id, index)]; }

  // Runs the first 8 of SixteenPrompts alone, then together in a pool of `kv_cache_tokens`
  // that holds each alone but not all: they are preempted (by recompute) and must finish with
  // the tokens they got alone.
  void ExpectPreemptedRequestsMatchAlone(const std::string& model_dir, bool text_prompts,
                                         int64_t max_tokens, int64_t kv_cache_tokens) {
    Load(model_dir);
    std::vector<std::vector<int32_t>> prompts = SixteenPrompts(*tokenizer_, 512, text_prompts);
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 8; ++i) requests.push_back(Greedy(prompts[i], max_tokens));
    std::vector<std::vector<int32_t>> alone = RunAlone(requests);
    Load(model_dir, kv_cache_tokens);
    std::vector<RequestId> ids;
    for (const GenerationRequest& request : requests) ids.push_back(Submit(request));
    Run();
    EXPECT_GT(engine_->GetStats().preemptions_total, 0);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(Get(ids[i], 0).tokens, alone[i]) << "request " << i;
      EXPECT_EQ(Get(ids[i], 0).reason, FinishReason::kLength);
    }
  }

  std::vector<int32_t> Encode(const std::string& text) { return tokenizer_->Encode(text, true); }

  std::unique_ptr<Model> model_;
  std::unique_ptr<llmrt::Tokenizer> tokenizer_;
  std::unique_ptr<Engine> engine_;
  std::map<std::pair<RequestId, int32_t>, Choice> results_;
};

// 16 prompts of different lengths: texts for stories260K, token patterns for the fixtures.
std::vector<std::vector<int32_t>> SixteenPrompts(const llmrt::Tokenizer& tokenizer, int64_t vocab,
                                                 bool text) {
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<std::string> words = {
      "Once", "upon", "a",     "time", "there", "was",     "a",    "little", "girl", "named",
      "Lily", "who",  "loved", "to",   "play",  "outside", "with", "her",    "dog"};
  for (int i = 0; i < 16; ++i) {
    if (text) {
      std::string prompt;
      for (int w = 0; w <= i + (i % 3) * 2 && w < static_cast<int>(words.size()); ++w) {
        prompt += (w ? " " : "") + words[(w + i / 4) % words.size()];
      }
      prompts.push_back(tokenizer.Encode(i == 0 ? "Once upon a time" : prompt, true));
    } else {
      std::vector<int32_t> prompt;
      for (int t = 0; t < 3 + 5 * i; ++t)
        prompt.push_back(static_cast<int32_t>((7 * t + 13 * i + 1) % vocab));
      prompts.push_back(prompt);
    }
  }
  return prompts;
}

class EngineModelTest : public EngineTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(EngineModelTest, GreedyBatchOf16MatchesEachRequestAlone) {
  const bool stories = GetParam() == kStoriesDir;
  Load(GetParam());
  std::vector<std::vector<int32_t>> prompts =
      SixteenPrompts(*tokenizer_, model_->vocab_size(), stories);
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < prompts.size(); ++i) {
    requests.push_back(Greedy(prompts[i], 20 - static_cast<int64_t>(i % 4) * 3));
  }
  std::vector<std::vector<int32_t>> alone = RunAlone(requests);
  const int64_t steps_alone = engine_->GetStats().steps_total;
  if (stories) {
    EXPECT_EQ(alone[0], kStoriesGreedy);  // the documented story
  }
  // Fresh prefix cache: the batch must not get its exactness from cached blocks.
  Load(GetParam());
  std::vector<RequestId> ids;
  for (const GenerationRequest& request : requests) ids.push_back(Submit(request));
  Run();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(Get(ids[i], 0).tokens, alone[i]) << "request " << i;
    EXPECT_EQ(Get(ids[i], 0).reason, FinishReason::kLength);
  }
  // They really shared steps: far fewer steps than one request at a time.
  EXPECT_LT(engine_->GetStats().steps_total * 4, steps_alone);
}

std::vector<std::string> Models() {
  std::vector<std::string> models = {kStoriesDir};
  // The window fixtures: a batch, prefix-cache hits and recomputed prompts must keep every
  // window layer inside its window (qwen2_sliding and smollm3_nope_window window one layer of two).
  // phi3_longrope_partial: one factor set for every chunk, hit or recompute (partial rotary).
  // gemma2_softcap / gemma3_text: alternating and 5:1 window layers, soft-caps, per-layer rope.
  // qwen3_moe / qwen2_moe_shared / gpt_oss: a token's experts and output do not depend on which
  // other tokens share its step (grouped expert GEMMs over the batch's union), and gpt_oss's
  // sinks and window hold across prefix-cache hits and recomputed prompts.
  for (const char* fixture :
       {"llama_gqa_tied", "llama_mha", "qwen2_bias", "mistral_sliding", "qwen2_sliding",
        "smollm3_nope_window", "olmo2_postnorm", "phi3_sliding", "phi3_longrope_partial",
        "gemma2_softcap", "gemma3_text", "qwen3_moe", "qwen2_moe_shared", "gpt_oss"}) {
    models.push_back(std::string("tests/fixtures/") + fixture);
  }
  return models;
}

INSTANTIATE_TEST_SUITE_P(Models, EngineModelTest, ::testing::ValuesIn(Models()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(info.param.rfind('/') + 1);
                         });

// The MoE fixtures, with their MoE layers (qwen3_moe's layer 1 is dense), experts and top_k.
struct MoeFixture {
  const char* name;
  int32_t moe_layers, num_experts, top_k;
};
void PrintTo(const MoeFixture& fixture, std::ostream* out) { *out << fixture.name; }

class EngineMoeTest : public EngineTest, public ::testing::WithParamInterface<MoeFixture> {
 protected:
  std::string Dir() const { return std::string("tests/fixtures/") + GetParam().name; }
};

// A prompt that reaches the prefix cache: the same request again hits its full blocks and
// generates the same tokens (its experts are recomputed from cached KV alone). The expert load
// the CPU backend reports adds up: every token run chooses top_k experts of each MoE layer, and
// a step's union lies between top_k and the expert count.
TEST_P(EngineMoeTest, PrefixHitGivesIdenticalOutputAndExpertLoadAddsUp) {
  const MoeFixture& fixture = GetParam();
  EngineOptions options;
  options.expert_token_counts = true;
  Load(Dir(), 0, 64, options);
  std::vector<int32_t> prompt;
  for (int t = 0; t < 40; ++t) prompt.push_back(static_cast<int32_t>((11 * t + 5) % 500 + 3));
  constexpr int64_t kMaxTokens = 12;
  const RequestId first = Submit(Greedy(prompt, kMaxTokens));
  Run();
  const llmrt::engine::EngineStats stats = engine_->GetStats();
  ASSERT_EQ(stats.moe_layers, fixture.moe_layers);
  ASSERT_EQ(stats.num_experts, fixture.num_experts);
  EXPECT_EQ(stats.moe_layer_steps_total, stats.steps_total * fixture.moe_layers);
  // Tokens run: the prompt and every generated token but the last.
  const int64_t tokens_run = static_cast<int64_t>(prompt.size()) + kMaxTokens - 1;
  ASSERT_EQ(stats.expert_tokens_total.size(),
            static_cast<size_t>(fixture.moe_layers * fixture.num_experts));
  for (int32_t layer = 0; layer < fixture.moe_layers; ++layer) {
    int64_t routed = 0, used = 0;
    for (int32_t e = 0; e < fixture.num_experts; ++e) {
      const int64_t count = stats.expert_tokens_total[layer * fixture.num_experts + e];
      routed += count;
      used += count > 0;
    }
    EXPECT_EQ(routed, tokens_run * fixture.top_k) << "MoE layer " << layer;
    EXPECT_GE(used, 3) << "MoE layer " << layer;  // make_fixtures checks the prompt's routing
  }
  EXPECT_GE(stats.moe_active_experts_total, stats.moe_layer_steps_total * fixture.top_k);
  EXPECT_LE(stats.moe_active_experts_total, stats.moe_layer_steps_total * fixture.num_experts);
  // The prompt's step chose more than top_k experts per layer; decode steps of one token top_k.
  EXPECT_GT(stats.moe_active_experts_total, stats.moe_layer_steps_total * fixture.top_k);

  const RequestId second = Submit(Greedy(prompt, kMaxTokens));
  Run();
  EXPECT_EQ(Get(second, 0).cached_prompt_tokens,
            (static_cast<int64_t>(prompt.size()) - 1) / 16 * 16);
  EXPECT_EQ(Get(second, 0).tokens, Get(first, 0).tokens);
}

TEST_P(EngineMoeTest, PreemptionUnderATinyPoolGivesIdenticalOutput) {
  // 96 slots: every request fits alone (prompt <= 38 + 24 tokens), 8 together do not.
  ExpectPreemptedRequestsMatchAlone(Dir(), /*text_prompts=*/false, 24, 96);
}

INSTANTIATE_TEST_SUITE_P(MoeFixtures, EngineMoeTest,
                         ::testing::Values(MoeFixture{"qwen3_moe", 1, 8, 2},
                                           MoeFixture{"qwen2_moe_shared", 2, 8, 2},
                                           MoeFixture{"gpt_oss", 2, 8, 4}),
                         [](const ::testing::TestParamInfo<MoeFixture>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(EngineTest, PrefixCacheHitReusesBlocksAndGivesIdenticalOutput) {
  Load(kStoriesDir);
  const std::vector<int32_t> prompt = Encode(
      "Once upon a time there was a little girl named Lily. She loved to play outside in "
      "the park with her dog, and every day they ran to the big tree by the pond.");
  ASSERT_GT(prompt.size(), 32u);
  RequestId first = Submit(Greedy(prompt, 16));
  Run();
  const int64_t hits_before = engine_->GetStats().prefix_hit_tokens;
  RequestId second = Submit(Greedy(prompt, 16));
  Run();
  const int64_t full_blocks = (static_cast<int64_t>(prompt.size()) - 1) / 16 * 16;
  EXPECT_EQ(Get(first, 0).cached_prompt_tokens, 0);
  EXPECT_EQ(Get(second, 0).cached_prompt_tokens, full_blocks);
  EXPECT_EQ(engine_->GetStats().prefix_hit_tokens - hits_before, full_blocks);
  EXPECT_EQ(Get(second, 0).tokens, Get(first, 0).tokens);
}

TEST_F(EngineTest, PreemptionUnderATinyPoolGivesIdenticalOutput) {
  // 64 slots: every request fits alone (prompt <= 20 + 40 tokens), 8 together do not.
  ExpectPreemptedRequestsMatchAlone(kStoriesDir, /*text_prompts=*/true, 40, 64);
}

TEST_F(EngineTest, SeedGivesTheSameSampleAloneOrInABatch) {
  Load(kStoriesDir);
  GenerationRequest sampled = Greedy(Encode("The dog"), 24);
  sampled.sampling.temperature = 1.0;
  sampled.sampling.top_p = 0.95;
  sampled.seed = 1234;
  RequestId alone = Submit(sampled);
  Run();
  std::vector<RequestId> others;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest other = Greedy(Encode("A cat named Tom " + std::to_string(i)), 10 + i);
    other.sampling.temperature = 0.7;  // random seeds, different from run to run
    others.push_back(Submit(other));
  }
  RequestId batched = Submit(sampled);
  GenerationRequest reseeded = sampled;
  reseeded.seed = 99;
  RequestId other_seed = Submit(reseeded);
  Run();
  EXPECT_EQ(Get(batched, 0).tokens, Get(alone, 0).tokens);
  EXPECT_EQ(Get(batched, 0).tokens.size(), 24u);
  EXPECT_NE(Get(other_seed, 0).tokens, Get(alone, 0).tokens);
}

TEST_F(EngineTest, StopStringAcrossTokenBoundariesIsNeverEmitted) {
  Load(kStoriesDir);
  const std::vector<int32_t> prompt = Encode("Once upon a time");
  RequestId plain = Submit(Greedy(prompt, 30));
  Run();
  const Choice full = Get(plain, 0);
  ASSERT_EQ(full.text, tokenizer_->Decode(full.tokens, true).substr(0, full.text.size()));
  // A stop string made of the end of one token's text and the start of the next one's.
  std::string stop;
  size_t boundary = 0;
  for (size_t k = 3; k + 1 < full.tokens.size() && stop.empty(); ++k) {
    const std::string before = tokenizer_->Decode(
        std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + k), true);
    const std::string through = tokenizer_->Decode(
        std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + k + 1), true);
    if (before.size() >= 2 && through.size() >= before.size() + 2 &&
        static_cast<unsigned char>(through[before.size()]) < 0x80) {
      stop = through.substr(before.size() - 2, 4);
      boundary = before.size() - 2;
    }
  }
  ASSERT_FALSE(stop.empty());
  GenerationRequest request = Greedy(prompt, 30);
  request.stop = {stop, "never appears \x01"};
  RequestId stopped = Submit(request);
  Run();
  const Choice& choice = Get(stopped, 0);
  const size_t first = full.text.find(stop);
  ASSERT_LE(first, boundary);
  EXPECT_EQ(choice.text, full.text.substr(0, first));
  EXPECT_EQ(choice.text.find(stop), std::string::npos);
  EXPECT_EQ(choice.reason, FinishReason::kStop);
  EXPECT_EQ(choice.stop_string, stop);
  EXPECT_LT(choice.tokens.size(), full.tokens.size());

  // A stop token id ends it too, and is not emitted.
  GenerationRequest by_token = Greedy(prompt, 30);
  by_token.stop_token_ids = {full.tokens[5]};
  RequestId token_stopped = Submit(by_token);
  Run();
  const Choice& token_choice = Get(token_stopped, 0);
  EXPECT_EQ(token_choice.reason, FinishReason::kStop);
  const size_t first_index =
      std::find(full.tokens.begin(), full.tokens.end(), full.tokens[5]) - full.tokens.begin();
  EXPECT_EQ(token_choice.tokens,
            std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + first_index));
}

TEST_F(EngineTest, NChoicesShareThePromptBlocks) {
  Load(kStoriesDir);
  const std::vector<int32_t> prompt =
      Encode("Once upon a time there was a little girl named Lily. She loved to play");
  const int64_t prompt_blocks = (static_cast<int64_t>(prompt.size()) + 15) / 16;
  ASSERT_GE(prompt_blocks, 2);
  GenerationRequest request = Greedy(prompt, 12);
  request.n = 4;
  request.sampling.temperature = 1.0;
  request.seed = 7;
  RequestId id = Submit(request);
  // One step runs the prompt and forks: 4 choices, still only the prompt's blocks.
  ASSERT_TRUE(engine_->Step().ok());
  EXPECT_EQ(engine_->GetStats().running, 4);
  EXPECT_EQ(engine_->GetStats().kv_blocks_used, prompt_blocks);
  // The next step writes into the shared last block: one copy per choice but the last.
  ASSERT_TRUE(engine_->Step().ok());
  EXPECT_LE(engine_->GetStats().kv_blocks_used, prompt_blocks + 3 + 4);
  Run();
  std::vector<int32_t> distinct_firsts;
  for (int32_t index = 0; index < 4; ++index) {
    EXPECT_EQ(Get(id, index).tokens.size(), 12u);
    EXPECT_EQ(Get(id, index).outputs_finished, 1);
  }
  EXPECT_NE(Get(id, 0).tokens, Get(id, 1).tokens);
  // Choice i draws from seed + i and must give what a lone request with that seed gives: the
  // shared prompt blocks were not overwritten by a sibling (copy-on-write worked).
  for (int32_t index = 0; index < 4; ++index) {
    GenerationRequest lone = request;
    lone.n = 1;
    lone.seed = 7 + index;
    RequestId lone_id = Submit(lone);
    Run();
    EXPECT_EQ(Get(lone_id, 0).tokens, Get(id, index).tokens) << "choice " << index;
  }
  // Greedy n = 2: both choices equal the n = 1 answer.
  RequestId single = Submit(Greedy(prompt, 12));
  GenerationRequest pair = Greedy(prompt, 12);
  pair.n = 2;
  RequestId doubled = Submit(pair);
  Run();
  EXPECT_EQ(Get(doubled, 0).tokens, Get(single, 0).tokens);
  EXPECT_EQ(Get(doubled, 1).tokens, Get(single, 0).tokens);
}

TEST_F(EngineTest, KvUsageReturnsToZeroAfterCancellation) {
  Load(kStoriesDir);
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i)
    ids.push_back(Submit(Greedy(Encode("Tom and Sam " + std::to_string(i)), 50)));
  for (int step = 0; step < 4; ++step) ASSERT_TRUE(engine_->Step().ok());
  EXPECT_GT(engine_->GetStats().kv_blocks_used, 0);
  for (int i = 0; i < 6; i += 2) engine_->Cancel(ids[i]);
  engine_->Cancel(12345);  // unknown: ignored
  Run();
  for (int i = 0; i < 6; ++i) {
    const Choice& choice = Get(ids[i], 0);
    EXPECT_EQ(choice.outputs_finished, 1);
    EXPECT_EQ(choice.reason, i % 2 == 0 ? FinishReason::kCancelled : FinishReason::kLength);
  }
  EXPECT_EQ(engine_->GetStats().running, 0);
  EXPECT_EQ(engine_->GetStats().waiting, 0);
}

TEST_F(EngineTest, BackgroundThreadServesConcurrentSubmissions) {
  Load(kStoriesDir);
  engine_->Start();
  RequestId id = Submit(Greedy(Encode("Once upon a time"), 20));
  while (engine_->HasWork()) std::this_thread::yield();
  engine_->Stop();
  EXPECT_EQ(Get(id, 0).tokens, kStoriesGreedy);
  EXPECT_EQ(engine_->GetStats().kv_blocks_used, 0);
}

TEST_F(EngineTest, PoolSizeFromAByteBudgetOrAFractionOfMemory) {
  ModelOptions options;
  auto probe = Model::Load(CompilePlan(kStoriesDir), options);
  ASSERT_TRUE(probe.ok()) << probe.status();
  // stories260K: 2 (K, V) x 5 layers x 4 kv heads x head_dim 8 x 16 tokens x 4 bytes.
  const int64_t block_bytes = (*probe)->kv_block_bytes();
  EXPECT_EQ(block_bytes, 2 * 5 * 4 * 8 * 16 * 4);
  options.kv_memory_bytes = 10 * block_bytes + block_bytes / 2;
  auto budgeted = Model::Load(CompilePlan(kStoriesDir), options);
  ASSERT_TRUE(budgeted.ok()) << budgeted.status();
  EXPECT_EQ((*budgeted)->block_pool().num_blocks(), 10);
  EXPECT_EQ((*budgeted)->max_context(), 160);
  options.kv_memory_bytes = block_bytes - 1;
  auto too_small = Model::Load(CompilePlan(kStoriesDir), options);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kResourceExhausted);
  options.kv_memory_bytes = 0;
  options.max_seq_len = 100;
  auto capped = Model::Load(CompilePlan(kStoriesDir), options);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ((*capped)->max_context(), 100);
  options.max_seq_len = 0;
  options.kv_memory_fraction = 1e-4;  // of MemAvailable: some MB, thousands of blocks
  auto fraction = Model::Load(CompilePlan(kStoriesDir), options);
  ASSERT_TRUE(fraction.ok()) << fraction.status();
  EXPECT_GT((*fraction)->block_pool().num_blocks(), 0);
  options.kv_memory_fraction = 1.5;
  EXPECT_EQ(Model::Load(CompilePlan(kStoriesDir), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, RejectsBadRequestsUpFront) {
  Load(kStoriesDir);
  GenerationRequest too_long = Greedy(std::vector<int32_t>(600, 5), 1);
  too_long.on_output = [](const RequestOutput&) {};
  absl::StatusOr<RequestId> id = engine_->Submit(too_long);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(id.status().message().find("600 tokens"), std::string::npos) << id.status();
  EXPECT_NE(id.status().message().find("512"), std::string::npos) << id.status();
  GenerationRequest bad = Greedy({1, 2}, 1);
  bad.on_output = [](const RequestOutput&) {};
  bad.sampling.top_p = 0;
  EXPECT_EQ(engine_->Submit(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad = Greedy({1, 9999}, 1);
  bad.on_output = [](const RequestOutput&) {};
  EXPECT_EQ(engine_->Submit(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine_->HasWork());
}

}  // namespace
}  // namespace llmc::testing
