// Engine unit tests over a tiny in-memory Llama (no compiler, no plan file): a batch of 16
// greedy requests that really share one decode step gives what each gives alone, and the
// figures /metrics is built from (queue time, decode steps, bytes, sequences) are exact.
// tests/e2e/engine_test.cc runs the same exactness check on compiled plans.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/engine/model.h"

namespace llmrt::engine {
namespace {

using ::llmrt::testing::BuildTinyLlama;
using ::llmrt::testing::TinyLlama;

constexpr int32_t kVocab = 40;  // TinyLlamaOptions' default

struct Result {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  double queue_seconds = -2;  // from the finishing output
  int32_t finished_outputs = 0;
};

class EngineStepTest : public ::testing::Test {
 protected:
  void SetUp() override { tiny_ = BuildTinyLlama({}); }

  // A fresh model (empty prefix cache) and engine. 64 tokens per step: 16 sequences decode in
  // one step with room to spare.
  void Reset(int32_t max_seqs = 0, int32_t prefill_chunk_tokens = 0,
             std::function<void(std::vector<kv::KvCacheEvent>)> on_kv_events = nullptr) {
    engine_.reset();
    ModelOptions options;
    options.max_tokens_per_step = 64;
    options.kv_block_size = 4;
    options.kv_cache_tokens = 1024;
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Create(tiny_.meta, tiny_.Lookup(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
    EngineOptions engine_options;
    engine_options.max_seqs = max_seqs;
    engine_options.prefill_chunk_tokens = prefill_chunk_tokens;
    engine_options.eos_token_ids = {kVocab + 1};  // never sampled: runs to max_tokens
    engine_options.on_kv_events = std::move(on_kv_events);
    engine_ = std::make_unique<Engine>(*model_, nullptr, engine_options);
    results_.clear();
  }

  RequestId Submit(std::vector<int32_t> prompt, int64_t max_tokens, int32_t n = 1) {
    GenerationRequest request;
    request.prompt_ids = std::move(prompt);
    request.n = n;
    request.sampling.temperature = 0.0;
    request.max_tokens = max_tokens;
    request.on_output = [this](const RequestOutput& output) {
      Result& result = results_[output.request_id];
      for (const TokenOutput& token : output.tokens) result.tokens.push_back(token.token);
      if (output.finished) {
        result.reason = output.finish_reason;
        result.queue_seconds = output.queue_seconds;
        ++result.finished_outputs;
      }
    };
    absl::StatusOr<RequestId> id = engine_->Submit(std::move(request));
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : 0;
  }

  static std::vector<int32_t> Prompt(int32_t index) {
    std::vector<int32_t> prompt;
    for (int32_t t = 0; t < 2 + index % 5; ++t) prompt.push_back((7 * t + 13 * index + 1) % kVocab);
    return prompt;
  }

  TinyLlama tiny_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::map<RequestId, Result> results_;
};

// Allows exactly the tokens of `script`, in order, then the end.
class ScriptConstraint : public sampling::TokenConstraint {
 public:
  explicit ScriptConstraint(std::vector<int32_t> script) : script_(std::move(script)) {}
  absl::Status FillNextTokenMask(absl::Span<uint32_t> mask) override {
    std::fill(mask.begin(), mask.end(), 0u);
    if (next_ < script_.size()) mask[script_[next_] >> 5] |= 1u << (script_[next_] & 31);
    return absl::OkStatus();
  }
  bool CanEnd() const override { return next_ == script_.size(); }
  absl::Status Accept(int32_t token) override {
    if (next_ >= script_.size() || token != script_[next_]) {
      return absl::InvalidArgumentError("not in the script");
    }
    ++next_;
    return absl::OkStatus();
  }
  std::unique_ptr<sampling::TokenConstraint> CloneInitial() const override {
    return std::make_unique<ScriptConstraint>(script_);
  }

 private:
  std::vector<int32_t> script_;
  size_t next_ = 0;
};

TEST_F(EngineStepTest, EveryChoiceFollowsItsConstraintToTheEndOrTheLengthLimit) {
  Reset();
  std::map<std::pair<RequestId, int32_t>, Result> choices;
  auto submit = [&](int64_t max_tokens) {
    GenerationRequest request;
    request.prompt_ids = Prompt(3);
    request.sampling.temperature = 1.0;
    request.seed = 11;
    request.n = 3;
    request.max_tokens = max_tokens;
    request.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{5, 33, 7});
    request.on_output = [&choices](const RequestOutput& output) {
      Result& result = choices[{output.request_id, output.index}];
      for (const TokenOutput& token : output.tokens) result.tokens.push_back(token.token);
      if (output.finished) result.reason = output.finish_reason;
    };
    absl::StatusOr<RequestId> id = engine_->Submit(std::move(request));
    EXPECT_TRUE(id.ok()) << id.status();
    return *id;
  };
  const RequestId full = submit(16);
  const RequestId cut = submit(2);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  for (int32_t index = 0; index < 3; ++index) {
    const Result& whole = choices[std::make_pair(full, index)];
    const Result& limited = choices[std::make_pair(cut, index)];
    // The script's end leaves no token allowed (the EOS id lies outside the vocabulary): stop.
    EXPECT_EQ(whole.tokens, (std::vector<int32_t>{5, 33, 7})) << index;
    EXPECT_EQ(whole.reason, FinishReason::kStop) << index;
    EXPECT_EQ(limited.tokens, (std::vector<int32_t>{5, 33})) << index;
    EXPECT_EQ(limited.reason, FinishReason::kLength) << index;
  }
}

TEST_F(EngineStepTest, SixteenGreedyRequestsInOneDecodeStepMatchEachAlone) {
  constexpr int kRequests = 16;
  constexpr int64_t kMaxTokens = 12;
  std::vector<std::vector<int32_t>> alone;
  for (int index = 0; index < kRequests; ++index) {
    Reset();  // nothing cached from the others
    const RequestId id = Submit(Prompt(index), kMaxTokens);
    ASSERT_TRUE(engine_->RunUntilIdle().ok());
    alone.push_back(results_[id].tokens);
    ASSERT_EQ(alone.back().size(), static_cast<size_t>(kMaxTokens));
  }

  Reset();
  std::vector<RequestId> ids;
  for (int index = 0; index < kRequests; ++index) ids.push_back(Submit(Prompt(index), kMaxTokens));
  // Step by hand to see each step's decode batch.
  int64_t largest_decode_batch = 0;
  while (engine_->HasWork()) {
    const EngineStats before = engine_->GetStats();
    absl::StatusOr<bool> stepped = engine_->Step();
    ASSERT_TRUE(stepped.ok()) << stepped.status();
    const EngineStats after = engine_->GetStats();
    largest_decode_batch = std::max(largest_decode_batch,
                                    after.decode_sequences_total - before.decode_sequences_total);
  }
  EXPECT_EQ(largest_decode_batch, kRequests) << "the 16 requests never shared a decode step";
  for (int index = 0; index < kRequests; ++index) {
    EXPECT_EQ(results_[ids[index]].tokens, alone[index]) << "request " << index;
    EXPECT_EQ(results_[ids[index]].reason, FinishReason::kLength);
  }
  const EngineStats stats = engine_->GetStats();
  // One prefill step (all 16 prompts fit 64 tokens) samples each first token; the other
  // 11 tokens come from 11 decode steps of 16 sequences.
  EXPECT_EQ(stats.decode_steps_total, kMaxTokens - 1);
  EXPECT_EQ(stats.decode_sequences_total, kRequests * (kMaxTokens - 1));
  EXPECT_EQ(stats.kv_blocks_used, 0);
}

TEST_F(EngineStepTest, DecodeBytesCountWeightsOncePerStepAndEachSequencesKv) {
  Reset();
  constexpr int64_t kMaxTokens = 5;
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9};
  Submit(prompt, kMaxTokens);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  const EngineStats stats = engine_->GetStats();
  // 4 decode steps; step k (1..4) writes position P + k - 1 and reads P + k positions of KV.
  ASSERT_EQ(stats.decode_steps_total, kMaxTokens - 1);
  const double positions = 4.0 * static_cast<double>(prompt.size()) + (1 + 2 + 3 + 4);
  const double kv_bytes_per_token =
      static_cast<double>(model_->kv_block_bytes()) / model_->kv_block_size();
  const double weight_bytes = static_cast<double>(DecodeWeightBytes(model_->meta()));
  EXPECT_GT(weight_bytes, 0);
  EXPECT_DOUBLE_EQ(stats.decode_bytes_total, 4 * weight_bytes + positions * kv_bytes_per_token);
  EXPECT_GT(stats.decode_seconds_total, 0);
  // The engine thread's time: the model's share includes the decode steps, the whole steps
  // include the model and the sampling.
  EXPECT_GE(stats.model_seconds_total, stats.decode_seconds_total);
  EXPECT_GT(stats.sample_seconds_total, 0);
  EXPECT_GE(stats.step_seconds_total, stats.model_seconds_total + stats.sample_seconds_total);
}

TEST_F(EngineStepTest, APromptArrivingDuringDecodeIsPrefilledInCappedChunks) {
  std::vector<int32_t> long_prompt;
  for (int32_t t = 0; t < 33; ++t) long_prompt.push_back((3 * t + 2) % kVocab);
  std::map<int32_t, std::pair<Result, Result>> by_cap;
  for (int32_t cap : {4, -1}) {
    SCOPED_TRACE(cap);
    Reset(/*max_seqs=*/0, /*prefill_chunk_tokens=*/cap);
    const RequestId decoding = Submit(Prompt(1), 40);
    ASSERT_TRUE(engine_->Step().ok());  // its prompt and first token
    const RequestId arriving = Submit(long_prompt, 3);
    int steps = 0;
    while (results_[arriving].tokens.empty()) {
      ASSERT_TRUE(engine_->Step().ok());
      ++steps;
      // The decoding request got its token in every one of those steps.
      ASSERT_EQ(results_[decoding].tokens.size(), static_cast<size_t>(1 + steps));
    }
    // Capped: 32 prompt tokens in chunks of 4, then the last one with the decode tokens.
    // Uncapped: the whole prompt fits the 64-token step next to the decode token.
    EXPECT_EQ(steps, cap == 4 ? 9 : 1);
    ASSERT_TRUE(engine_->RunUntilIdle().ok());
    by_cap[cap] = {results_[decoding], results_[arriving]};
  }
  // Chunking changes when tokens run, not what they compute.
  EXPECT_EQ(by_cap[4].first.tokens, by_cap[-1].first.tokens);
  EXPECT_EQ(by_cap[4].second.tokens, by_cap[-1].second.tokens);
  EXPECT_EQ(by_cap[4].second.tokens.size(), 3u);
}

TEST_F(EngineStepTest, WeightBytesCountAnUntiedEmbeddingTableAsOneRow) {
  int64_t full = 0, embedding = 0, rows = 0;
  for (const plan::Tensor& tensor : tiny_.meta.tensors()) {
    full += static_cast<int64_t>(tensor.size_bytes());
    if (tensor.name() == "model.embed_tokens.weight") {
      embedding = static_cast<int64_t>(tensor.size_bytes());
      rows = tensor.shape(0);
    }
  }
  ASSERT_GT(rows, 0);
  ASSERT_FALSE(tiny_.meta.config().tie_word_embeddings());
  EXPECT_EQ(DecodeWeightBytes(tiny_.meta), full - embedding + embedding / rows);
}

TEST_F(EngineStepTest, QueueTimeIsMeasuredFromSubmitToFirstScheduledStep) {
  Reset(/*max_seqs=*/1);  // the second request waits for the whole first one
  const RequestId first = Submit(Prompt(1), 24);
  const RequestId second = Submit(Prompt(2), 4);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  EXPECT_GE(results_[first].queue_seconds, 0);
  EXPECT_GT(results_[second].queue_seconds, results_[first].queue_seconds);
  // Cancelled before any step ran it: never scheduled, no queue time.
  const RequestId cancelled = Submit(Prompt(3), 4);
  engine_->Cancel(cancelled);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  EXPECT_EQ(results_[cancelled].reason, FinishReason::kCancelled);
  EXPECT_EQ(results_[cancelled].finished_outputs, 1);
  EXPECT_EQ(results_[cancelled].queue_seconds, -1);
}

// /metrics' request gauges: vllm:num_requests_* count choices (vLLM runs n > 1 as n child
// requests), llmrt:num_requests_* count each request once.
TEST_F(EngineStepTest, RequestsCountOnceAndChoicesCountEach) {
  Reset(/*max_seqs=*/1);  // the second request waits while the first runs
  Submit(Prompt(1), 6, /*n=*/2);
  Submit(Prompt(2), 6);
  ASSERT_TRUE(engine_->Step().ok());
  EngineStats stats = engine_->GetStats();
  EXPECT_EQ(stats.running_requests, 1);
  EXPECT_EQ(stats.waiting_requests, 1);
  // The first request's two choices (forked after its first token, or still to fork) and the
  // second's one, wherever the scheduler put them.
  EXPECT_EQ(stats.running + stats.waiting, 3);
  EXPECT_GE(stats.running, 1);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  stats = engine_->GetStats();
  EXPECT_EQ(stats.running_requests + stats.waiting_requests + stats.running + stats.waiting, 0);
}

// The events handed to on_kv_events, applied in order, rebuild exactly the pool's cache.
TEST_F(EngineStepTest, KvEventsRebuildTheCachedBlocks) {
  std::map<uint64_t, std::pair<std::optional<uint64_t>, std::vector<int32_t>>> mirror;
  int32_t calls = 0;
  Reset(0, 0, [&](std::vector<kv::KvCacheEvent> events) {
    ++calls;
    for (const kv::KvCacheEvent& event : events) {
      if (event.kind == kv::KvCacheEvent::Kind::kRemoved) {
        for (uint64_t hash : event.block_hashes) EXPECT_EQ(mirror.erase(hash), 1u);
        continue;
      }
      ASSERT_EQ(event.kind, kv::KvCacheEvent::Kind::kStored);
      std::optional<uint64_t> parent;
      if (event.has_parent) parent = event.parent_hash;
      for (size_t i = 0; i < event.block_hashes.size(); ++i) {
        std::vector<int32_t> tokens(event.token_ids.begin() + 4 * i,
                                    event.token_ids.begin() + 4 * (i + 1));
        EXPECT_TRUE(mirror.emplace(event.block_hashes[i], std::make_pair(parent, tokens)).second);
        parent = event.block_hashes[i];
      }
    }
  });
  std::vector<int32_t> shared = {3, 1, 4, 1, 5, 9, 2, 6, 5};
  for (int32_t i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt = shared;
    prompt.push_back(i);
    Submit(prompt, 5 + i, i % 2 + 1);
  }
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  EXPECT_GT(calls, 0);
  std::map<uint64_t, std::pair<std::optional<uint64_t>, std::vector<int32_t>>> cached;
  for (const kv::CachedBlock& block : engine_->CachedBlocks()) {
    std::optional<uint64_t> parent;
    if (block.has_parent) parent = block.parent_hash;
    cached.emplace(block.hash, std::make_pair(parent, block.token_ids));
  }
  EXPECT_FALSE(cached.empty());
  EXPECT_EQ(mirror, cached);
}

// A MoE "model" whose routing is known by hand: token t's router logits are row t of an EMBED
// table that ranks experts kExpertsOf[t] first and second (top 2 of 4), one EXPERT_MATMUL of 4
// experts [8 x 4] over those logits, MOE_COMBINE, and an identity LOGITS: a vocabulary of 8.
constexpr int32_t kMoeVocab = 8, kMoeExperts = 4, kMoeWidth = 8, kMoeTopK = 2;
constexpr std::array<std::array<int32_t, 2>, kMoeVocab> kExpertsOf = {
    {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {0, 2}, {1, 3}, {2, 0}, {3, 1}}};

class MoeEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::vector<float>> rows(kMoeVocab, std::vector<float>(kMoeExperts, -1.0f));
    for (int32_t token = 0; token < kMoeVocab; ++token) {
      rows[token][kExpertsOf[token][0]] = 2.0f;
      rows[token][kExpertsOf[token][1]] = 1.0f;
    }
    const int32_t logits = program_.InputRows(rows);
    const auto [ids, weights] =
        program_.Router(logits, kMoeExperts, kMoeTopK, plan::RouterAttrs::SOFTMAX_TOPK, true);
    const int32_t w = program_.ExpertMatrix(plan::F32, kMoeExperts, kMoeWidth, kMoeExperts);
    const int32_t y = program_.Activation(kMoeTopK * kMoeWidth);
    plan::ExpertAttrs* attrs =
        program_.AddOp(plan::EXPERT_MATMUL, {logits, ids}, {y}, {w})->mutable_expert();
    attrs->set_num_experts(kMoeExperts);
    attrs->set_top_k(kMoeTopK);
    const int32_t combined = program_.Activation(kMoeWidth);
    program_.AddOp(plan::MOE_COMBINE, {y, weights}, {combined}, {});
    program_.ReadOut(combined);
    ModelOptions options;
    options.max_tokens_per_step = 16;
    options.kv_block_size = 4;
    options.kv_cache_tokens = 256;
    absl::StatusOr<std::unique_ptr<Model>> model =
        Model::Create(program_.meta(), program_.Lookup(), options);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  // The experts the tokens of one step choose, counted per expert.
  static std::vector<int32_t> TokensPerExpert(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> counts(kMoeExperts, 0);
    for (int32_t token : tokens) {
      for (int32_t expert : kExpertsOf[token]) ++counts[expert];
    }
    return counts;
  }
  static int32_t Union(const std::vector<int32_t>& tokens) {
    std::set<int32_t> experts;
    for (int32_t token : tokens) experts.insert(kExpertsOf[token].begin(), kExpertsOf[token].end());
    return static_cast<int32_t>(experts.size());
  }

  ::llmrt::testing::OpProgram program_;
  std::unique_ptr<Model> model_;
};

// One f32 expert is 8 x 4 floats; the rest of the plan (the EMBED table and the identity
// LOGITS matrix) is what a step reads besides the experts.
TEST_F(MoeEngineTest, ExpertBytesAndTheWeightsBesideThem) {
  const std::vector<MoeRouter> routers = ExpertBytes(model_->meta());
  ASSERT_EQ(routers.size(), 1u);
  EXPECT_EQ(routers[0].num_experts, kMoeExperts);
  EXPECT_EQ(routers[0].top_k, kMoeTopK);
  EXPECT_EQ(routers[0].bytes_per_expert, kMoeWidth * kMoeExperts * 4);
  EXPECT_EQ(DecodeWeightBytes(model_->meta()),
            (kMoeVocab * kMoeExperts + kMoeWidth * kMoeWidth) * 4);
}

// The CUDA kernels' code is loaded into a module once, never read by a step: a kernel table's
// code tensors add nothing to DecodeWeightBytes.
TEST_F(MoeEngineTest, DecodeWeightBytesLeavesKernelCodeOut) {
  plan::PlanMeta meta = model_->meta();
  const int64_t without = DecodeWeightBytes(meta);
  plan::Tensor* code = meta.add_tensors();
  code->set_name("cuda.sm_90.expert_gemv");
  code->set_dtype(plan::I32);
  code->add_shape(1024);
  code->set_size_bytes(4096);
  plan::KernelTable* table = meta.mutable_program()->add_kernel_tables();
  table->set_target("cuda:sm_90");
  plan::KernelTable::Kernel* kernel = table->add_kernels();
  kernel->set_code_tensor(meta.tensors_size() - 1);
  kernel->set_code_size(4093);
  EXPECT_EQ(DecodeWeightBytes(meta), without);
}

// ActiveExpertBytes counts the experts a load shows chosen, and refuses a load shaped for
// another plan, naming both shapes.
TEST_F(MoeEngineTest, ActiveExpertBytesCountsTheUnionAndRefusesAForeignLoad) {
  const std::vector<MoeRouter> routers = ExpertBytes(model_->meta());
  std::vector<int32_t> active;
  ExpertLoad load{1, kMoeExperts, {2, 0, 1, 0}};
  absl::StatusOr<int64_t> bytes = ActiveExpertBytes(routers, load, active);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(active, std::vector<int32_t>{2});
  EXPECT_EQ(*bytes, 2 * routers[0].bytes_per_expert);
  load = ExpertLoad{1, kMoeExperts + 1, {2, 0, 1, 0, 0}};
  bytes = ActiveExpertBytes(routers, load, active);
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(bytes.status().message().find("1 routers of 5 experts (5 counts); the plan has 1 "
                                          "routers of at most 4 experts"),
            absl::string_view::npos)
      << bytes.status();
}

// A step's union and bytes: tokens 0 and 4 (experts {0, 1} and {0, 2}) in one step read 3
// experts; two sessions' single tokens 1 and 3 ({1, 2}, {3, 0}) in one step read all 4.
TEST_F(MoeEngineTest, ModelReportsEachStepsExpertUnionAndBytes) {
  const int64_t per_expert = ExpertBytes(model_->meta())[0].bytes_per_expert;
  std::unique_ptr<Session> first = model_->NewSession();
  ASSERT_TRUE(first->Append({0, 4}, false).ok());
  EXPECT_EQ(model_->last_step_active_experts(), std::vector<int32_t>{3});
  EXPECT_EQ(model_->last_step_expert_tokens(), (std::vector<int32_t>{2, 1, 1, 0}));
  EXPECT_EQ(model_->last_step_active_expert_bytes(), 3 * per_expert);

  std::unique_ptr<Session> second = model_->NewSession();
  ASSERT_TRUE(second->Append({5}, false).ok());
  std::vector<AppendRequest> requests(2);
  requests[0].session = first.get();
  requests[0].tokens = {1};
  requests[1].session = second.get();
  requests[1].tokens = {3};
  ASSERT_TRUE(model_->AppendBatch(absl::MakeSpan(requests)).ok());
  EXPECT_EQ(model_->last_step_active_experts(), std::vector<int32_t>{4});
  EXPECT_EQ(model_->last_step_expert_tokens(), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(model_->last_step_active_expert_bytes(), 4 * per_expert);
}

// Two greedy requests decoding together: every decode step reads the weights beside the experts
// once and the union of the two tokens' experts; the counters add up every step's routing,
// recomputed here from the tokens each step ran.
TEST_F(MoeEngineTest, EngineCountsTheBatchUnionAndActiveBytes) {
  EngineOptions engine_options;
  engine_options.eos_token_ids = {kMoeVocab + 1};  // never sampled
  engine_options.expert_token_counts = true;
  Engine engine(*model_, nullptr, engine_options);
  std::map<RequestId, std::vector<int32_t>> generated;
  constexpr int64_t kMaxTokens = 5;
  const std::vector<std::vector<int32_t>> prompts = {{6}, {1}};
  for (const std::vector<int32_t>& prompt : prompts) {
    GenerationRequest request;
    request.prompt_ids = prompt;
    request.sampling.temperature = 0.0;
    request.max_tokens = kMaxTokens;
    request.on_output = [&generated](const RequestOutput& output) {
      for (const TokenOutput& token : output.tokens)
        generated[output.request_id].push_back(token.token);
    };
    ASSERT_TRUE(engine.Submit(std::move(request)).ok());
  }
  ASSERT_TRUE(engine.RunUntilIdle().ok());
  ASSERT_EQ(generated.size(), 2u);
  const std::vector<int32_t>& a = generated.begin()->second;
  const std::vector<int32_t>& b = generated.rbegin()->second;
  ASSERT_EQ(a.size(), static_cast<size_t>(kMaxTokens));
  ASSERT_EQ(b.size(), static_cast<size_t>(kMaxTokens));

  // Step 0 runs both one-token prompts; step k >= 1 the (k-1)-th generated token of each. The
  // last generated tokens are sampled, never run. One token per sequence in every step: all five
  // are decode steps.
  std::vector<std::vector<int32_t>> steps = {{prompts[0][0], prompts[1][0]}};
  for (int64_t k = 0; k + 1 < kMaxTokens; ++k) steps.push_back({a[k], b[k]});
  int64_t unions = 0;
  double decode_bytes = 0;
  std::vector<int64_t> tokens_per_expert(kMoeExperts, 0);
  const int64_t per_expert = ExpertBytes(model_->meta())[0].bytes_per_expert;
  for (size_t step = 0; step < steps.size(); ++step) {
    unions += Union(steps[step]);
    decode_bytes += static_cast<double>(DecodeWeightBytes(model_->meta())) +
                    static_cast<double>(Union(steps[step]) * per_expert);
    const std::vector<int32_t> counts = TokensPerExpert(steps[step]);
    for (int32_t e = 0; e < kMoeExperts; ++e) tokens_per_expert[e] += counts[e];
  }
  const EngineStats stats = engine.GetStats();
  EXPECT_EQ(stats.moe_layers, 1);
  EXPECT_EQ(stats.num_experts, kMoeExperts);
  EXPECT_EQ(stats.steps_total, kMaxTokens);
  EXPECT_EQ(stats.moe_layer_steps_total, kMaxTokens);
  EXPECT_EQ(stats.moe_active_experts_total, unions);
  EXPECT_EQ(stats.expert_tokens_total, tokens_per_expert);
  EXPECT_EQ(stats.decode_steps_total, kMaxTokens);
  EXPECT_DOUBLE_EQ(stats.decode_bytes_total, decode_bytes);  // no attention: no KV bytes
  // Some step's two tokens share an expert, so a sum of top_k per token (4 a step) would fail.
  EXPECT_LT(unions, kMoeTopK * 2 * kMaxTokens);
}

// Without EngineOptions::expert_token_counts the per-expert table stays empty; the union
// counters are kept either way.
TEST_F(MoeEngineTest, PerExpertCountsOnlyWhenAsked) {
  Engine engine(*model_, nullptr, EngineOptions());
  GenerationRequest request;
  request.prompt_ids = {2, 7};
  request.sampling.temperature = 0.0;
  request.max_tokens = 2;
  request.on_output = [](const RequestOutput&) {};
  ASSERT_TRUE(engine.Submit(std::move(request)).ok());
  ASSERT_TRUE(engine.RunUntilIdle().ok());
  const EngineStats stats = engine.GetStats();
  EXPECT_TRUE(stats.expert_tokens_total.empty());
  EXPECT_EQ(stats.moe_layer_steps_total, 2);
  EXPECT_EQ(stats.moe_active_experts_total, Union({2, 7}) + kMoeTopK);  // prefill, 1 decode
}

TEST_F(EngineStepTest, DensePlansHaveNoMoeStats) {
  Reset();
  Submit(Prompt(1), 3);
  ASSERT_TRUE(engine_->RunUntilIdle().ok());
  const EngineStats stats = engine_->GetStats();
  EXPECT_EQ(stats.moe_layers, 0);
  EXPECT_EQ(stats.moe_layer_steps_total, 0);
  EXPECT_TRUE(stats.expert_tokens_total.empty());
  EXPECT_TRUE(model_->moe_routers().empty());
}

}  // namespace
}  // namespace llmrt::engine
