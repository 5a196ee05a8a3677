// The CPU MoE kernels (moe.h): a token's routed outputs do not depend on its batch or on the
// thread count, decode and small steps read only the chosen experts' bytes, and the routed
// rows are grouped exactly. Correctness against the double reference is the op conformance
// matrix's (tests/conformance); here the properties the engine relies on.
#include "runtime/backend/cpu/moe.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/quant_test_util.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt::cpu {
namespace {

using ::llmrt::testing::OpProgram;

constexpr int32_t kHidden = 64;

struct WeightKind {
  plan::DType dtype;
  int32_t group = 0;
  bool asymmetric = false;
  int32_t panel_rows = 0;
  std::string Name() const {
    return absl::StrCat(plan::DType_Name(dtype), group ? absl::StrCat("_g", group) : "",
                        asymmetric ? "_asym" : "", panel_rows ? "_panels" : "");
  }
};

const std::vector<WeightKind>& WeightKinds() {
  static const std::vector<WeightKind> kinds = {
      {plan::F32},
      {plan::F32, 0, false, 16},
      {plan::F16, 0, false, 16},
      {plan::BF16, 0, false, 16},
      {plan::F16},
      {plan::I8, 32},
      {plan::I8, 64},
      {plan::I4, 32},
      {plan::I4, 64, true},
      {plan::FP4_E2M1, 32},
  };
  return kinds;
}

// Which value a MoE block program reads out.
enum class Output { kGateUp, kDown, kCombine };

// x and router logits for `tokens` tokens -> ROUTER -> EXPERT_MATMUL gate/up (two outputs) ->
// SILU_MUL -> EXPERT_MATMUL down (one K slice per slot) -> MOE_COMBINE; reads `output` out.
void BuildMoeBlock(OpProgram& p, int32_t tokens, int32_t experts, int32_t top_k, double skew,
                   const WeightKind& kind, Output output) {
  const int32_t logits = p.RouterLogits(tokens, experts, skew, 1);
  const int32_t x = p.Input(kHidden, 1.0f);
  const auto [ids, weights] =
      p.Router(logits, experts, top_k, plan::RouterAttrs::SOFTMAX_TOPK, true);
  const int64_t inner = 64;
  const int32_t gate = p.Activation(top_k * inner), up = p.Activation(top_k * inner);
  auto expert_op = [&](int32_t in, std::vector<int32_t> outs, int64_t rows, int64_t cols) {
    const int32_t w = p.ExpertMatrix(kind.dtype, experts, rows, cols, kind.group, kind.asymmetric,
                                     kind.panel_rows);
    plan::ExpertAttrs* attrs = p.AddOp(plan::EXPERT_MATMUL, {in, ids}, outs, {w})->mutable_expert();
    attrs->set_num_experts(experts);
    attrs->set_top_k(top_k);
  };
  expert_op(x, {gate, up}, 2 * inner, kHidden);
  const int32_t act = p.Activation(top_k * inner);
  p.AddOp(plan::SILU_MUL, {gate, up}, {act}, {});
  const int32_t down = p.Activation(top_k * kHidden);
  expert_op(act, {down}, kHidden, inner);
  const int32_t combined = p.Activation(kHidden);
  p.AddOp(plan::MOE_COMBINE, {down, weights}, {combined}, {});
  p.ReadOut(output == Output::kGateUp ? up : output == Output::kDown ? down : combined);
}

// Runs one step of `tokens` (token ids; rows of the program's inputs) and returns every row's
// output.
std::vector<float> RunTokens(Backend& backend, const std::vector<int32_t>& tokens, int64_t width) {
  StepBatch batch;
  const int32_t n = static_cast<int32_t>(tokens.size());
  for (int32_t i = 0; i < n; ++i) {
    batch.token_ids.push_back(tokens[i]);
    batch.positions.push_back(i);
    batch.slot_mapping.push_back(i);
    batch.logit_rows.push_back(i);
  }
  batch.sequences.push_back({0, n, n, nullptr, 0});
  std::vector<float> out(n * width);
  const absl::Status status = backend.RunStep(batch, out.data());
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

std::unique_ptr<Backend> Create(OpProgram& p, int32_t max_tokens, int32_t threads,
                                QuantizedActivations mode = QuantizedActivations::kInt8) {
  BackendOptions options;
  options.max_tokens_per_step = max_tokens;
  options.num_threads = threads;
  options.quantized_activations = mode;
  auto backend = CreateCpuBackend(p.meta(), p.Lookup(), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

int64_t ReadOutWidth(OpProgram& p) {
  for (const plan::Value& value : p.meta().program().values()) {
    if (value.kind() == plan::Value::LOGITS) return value.width();
  }
  return 0;
}

// (a) A token's gate/up, down and combined outputs are bit-identical alone, in a batch of 16 and
// in a batch of 512, at every weight dtype, on the current tier. Where F16 / BF16 matmuls of 64
// tokens or more take the AMX-BF16 path (matmul_amx.cc: the same bits among such steps, not those
// of smaller ones), those dtypes compare the batch of 512 with one of 64 and a token alone with a
// batch of 16 that holds it.
void CheckTokenOutputsDoNotDependOnTheBatch(int32_t threads) {
  constexpr int32_t kTokens = 512;
  for (const WeightKind& kind : WeightKinds()) {
    for (Output output : {Output::kGateUp, Output::kDown, Output::kCombine}) {
      SCOPED_TRACE(absl::StrCat(kind.Name(), " output ", static_cast<int>(output)));
      OpProgram p(kTokens, 7);
      BuildMoeBlock(p, kTokens, 8, 2, 0.5, kind, output);
      auto backend = Create(p, kTokens, threads);
      ASSERT_NE(backend, nullptr);
      const int64_t width = ReadOutWidth(p);
      std::vector<int32_t> all(kTokens);
      for (int32_t t = 0; t < kTokens; ++t) all[t] = t;
      const bool amx_bf16 =
          (kind.dtype == plan::F16 || kind.dtype == plan::BF16) && AmxMatMulActive();
      const std::vector<float> batch512 = RunTokens(*backend, all, width);
      const int32_t smaller = amx_bf16 ? static_cast<int32_t>(kAmxMinTokens) : 16;
      const std::vector<float> batch_smaller = RunTokens(
          *backend, std::vector<int32_t>(all.begin() + 100, all.begin() + 100 + smaller), width);
      for (int32_t t = 0; t < smaller; ++t) {
        EXPECT_EQ(std::memcmp(&batch_smaller[t * width], &batch512[(100 + t) * width],
                              width * sizeof(float)),
                  0)
            << "token " << 100 + t << " in a batch of " << smaller;
      }
      for (int32_t t : {0, 105, 311, 511}) {
        const std::vector<float> alone = RunTokens(*backend, {t}, width);
        std::vector<float> beside(width);
        if (amx_bf16) {
          const int32_t first = std::min(t, kTokens - 16);
          const std::vector<float> batch16 = RunTokens(
              *backend, std::vector<int32_t>(all.begin() + first, all.begin() + first + 16), width);
          std::memcpy(beside.data(), &batch16[(t - first) * width], width * sizeof(float));
        } else {
          std::memcpy(beside.data(), &batch512[t * width], width * sizeof(float));
        }
        EXPECT_EQ(std::memcmp(alone.data(), beside.data(), width * sizeof(float)), 0)
            << "token " << t << " alone";
      }
    }
  }
}

TEST(MoeTest, TokenOutputsDoNotDependOnTheBatch) { CheckTokenOutputsDoNotDependOnTheBatch(2); }

// The same with the quantized experts' GEMMs on AMX tiles (quant_gemm_amx.cc; emulated where the
// CPU has none), on 1 thread, where each of the 8 experts takes its ~128 rows of the batch of 512
// whole, past kAmxMinTokens (2 threads cut them into blocks of ~64 rows, moe.cc).
TEST(MoeTest, TokenOutputsDoNotDependOnTheBatchOnAmxTiles) {
  if (const std::string reason = testing::AmxGemmScope::SkipReason(); !reason.empty()) {
    GTEST_SKIP() << reason;
  }
  testing::AmxGemmScope amx;
  CheckTokenOutputsDoNotDependOnTheBatch(1);
  EXPECT_TRUE(amx.Ran()) << "the AMX path never ran";
}

// (d) With skewed routing (one expert chosen by ~80% of the tokens), 2 and 3 threads give the
// 1-thread outputs to the bit: every routed row computed exactly once, none skipped — with work
// items of whole experts (1 and 5 tokens) and, at 37 and 300 tokens, the favourite expert cut
// into blocks (300 tokens x top-4 on 2 threads: blocks of at most 75 rows), against experts one
// after another on 1 thread; quantized weights also in the exact mode (f32 activations).
TEST(MoeTest, ThreadCountDoesNotChangeOutputs) {
  std::vector<std::pair<WeightKind, QuantizedActivations>> cases;
  for (const WeightKind& kind : WeightKinds()) {
    cases.push_back({kind, QuantizedActivations::kInt8});
    if (kind.group != 0) cases.push_back({kind, QuantizedActivations::kF32});
  }
  for (const auto& [kind, mode] : cases) {
    for (int32_t tokens : {1, 5, 37, 300}) {
      SCOPED_TRACE(absl::StrCat(kind.Name(), " tokens ", tokens,
                                mode == QuantizedActivations::kF32 ? " exact" : ""));
      OpProgram p(tokens, 11);
      BuildMoeBlock(p, tokens, 16, 4, 0.8, kind, Output::kCombine);
      const int64_t width = ReadOutWidth(p);
      std::vector<int32_t> all(tokens);
      for (int32_t t = 0; t < tokens; ++t) all[t] = t;
      std::vector<float> one;
      for (int32_t threads : {1, 2, 3}) {
        auto backend = Create(p, tokens, threads, mode);
        ASSERT_NE(backend, nullptr);
        const std::vector<float> out = RunTokens(*backend, all, width);
        if (threads == 1) {
          one = out;
          continue;
        }
        EXPECT_EQ(std::memcmp(out.data(), one.data(), out.size() * sizeof(float)), 0)
            << threads << " threads";
      }
    }
  }
}

// (c) GroupRoutedRows: a counting sort of r = t * top_k + j by ids[r], ascending within an
// expert, with empty experts in between.
TEST(MoeTest, GroupRoutedRowsSortsByExpert) {
  // 4 tokens, top_k 2, 5 experts; expert 2 and 4 unchosen.
  const std::vector<int32_t> ids = {3, 0, 0, 1, 3, 1, 0, 3};
  std::vector<int32_t> offsets(6, -1), rows(8, -1);
  GroupRoutedRows(ids.data(), 4, 2, 5, offsets.data(), rows.data());
  EXPECT_EQ(offsets, (std::vector<int32_t>{0, 3, 5, 5, 8, 8}));
  EXPECT_EQ(rows, (std::vector<int32_t>{1, 2, 6, 3, 5, 0, 4, 7}));
}

// RouteTokens with many equal logits (values from {0, 1, 2}, and rows all equal): plan.proto's
// order, descending with ties to the lower index, is a stable sort of the experts by logit;
// the weights are the softmax of the chosen logits (both scorings' renormalised form).
TEST(MoeTest, RouterBreaksTiesTowardTheLowerIndex) {
  ThreadPool pool(1);
  std::mt19937 random(3);
  for (int32_t experts : {4, 8, 64, 128}) {
    for (int32_t top_k : {1, 2, 8}) {
      if (top_k > experts) continue;
      SCOPED_TRACE(absl::StrCat("experts ", experts, " top_k ", top_k));
      constexpr int32_t kTokens = 70;  // above the serial threshold: both paths of RouteTokens
      std::vector<float> logits(kTokens * experts);
      for (int32_t t = 0; t < kTokens; ++t) {
        for (int32_t e = 0; e < experts; ++e) {
          logits[t * experts + e] = t == 0 ? 1.5f : static_cast<float>(random() % 3);
        }
      }
      std::vector<int32_t> ids(kTokens * top_k);
      std::vector<float> weights(kTokens * top_k);
      RouteTokens(pool, logits.data(), kTokens, experts, top_k, plan::RouterAttrs::TOPK_SOFTMAX,
                  false, ids.data(), weights.data(), nullptr);
      for (int32_t t = 0; t < kTokens; ++t) {
        const float* row = &logits[t * experts];
        std::vector<int32_t> order(experts);
        for (int32_t e = 0; e < experts; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        order.resize(top_k);
        EXPECT_EQ(std::vector<int32_t>(ids.begin() + t * top_k, ids.begin() + (t + 1) * top_k),
                  order)
            << "token " << t;
        double sum = 0;
        for (int32_t j = 0; j < top_k; ++j) sum += std::exp(row[order[j]] - row[order[0]]);
        for (int32_t j = 0; j < top_k; ++j) {
          EXPECT_NEAR(weights[t * top_k + j], std::exp(row[order[j]] - row[order[0]]) / sum, 1e-6);
        }
      }
    }
  }
}

// MoeCombine: out[t] = w[0] y[0] + w[1] y[1] + ... accumulated in slot order, then
// + sigmoid(gate) shared; to the bit against that scalar loop on x86 (a summation order other
// than slot order would change bits; arm64: within the FMA contraction's rounding), at a width with
// a tail (100 = 64 + 36), on 1 and 70 tokens (the serial and the parallel split).
TEST(MoeTest, CombineSumsTheSlotsInOrder) {
  constexpr int64_t kWidth = 100;
  constexpr int32_t kTopK = 3;
  ThreadPool pool(2);
  std::mt19937 random(9);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (int64_t tokens : {1, 70}) {
    for (bool with_shared : {false, true}) {
      std::vector<float> y(tokens * kTopK * kWidth), w(tokens * kTopK), shared(tokens * kWidth),
          gate(tokens);
      for (float& v : y) v = uniform(random);
      for (float& v : w) v = uniform(random);
      for (float& v : shared) v = uniform(random);
      for (float& v : gate) v = uniform(random);
      std::vector<float> out(tokens * kWidth);
      MoeCombine(pool, y.data(), w.data(), with_shared ? shared.data() : nullptr, gate.data(),
                 tokens, kTopK, kWidth, out.data());
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t i = 0; i < kWidth; ++i) {
          float sum = w[t * kTopK] * y[(t * kTopK) * kWidth + i];
          float magnitude = std::abs(sum);
          for (int32_t j = 1; j < kTopK; ++j) {
            const float term = w[t * kTopK + j] * y[(t * kTopK + j) * kWidth + i];
            sum += term;
            magnitude += std::abs(term);
          }
          if (with_shared) {
            const float term = 1.0f / (1.0f + std::exp(-gate[t])) * shared[t * kWidth + i];
            sum += term;
            magnitude += std::abs(term);
          }
#if defined(__x86_64__)
          ASSERT_EQ(out[t * kWidth + i], sum) << "token " << t << " column " << i;
#else
          // arm64 compilers contract a multiply and an add into one FMA (GCC's default
          // -ffp-contract=fast), in the kernel's vector loop and this scalar one alike but not
          // always at the same terms: each of the kTopK + 1 products may then skip its rounding,
          // at most half an ulp of that product each.
          ASSERT_NEAR(out[t * kWidth + i], sum,
                      (kTopK + 1) * std::numeric_limits<float>::epsilon() * magnitude)
              << "token " << t << " column " << i;
#endif
        }
      }
    }
  }
}

// (b) The expert stack lies in an mmapped region, one page per expert; the experts no token
// chooses are PROT_NONE, so reading a byte of them faults. A decode step and a 5-token step
// must not.
TEST(MoeTest, ReadsOnlyTheChosenExperts) {
#if !defined(__linux__)
  GTEST_SKIP() << "mprotect-based check: Linux only";
#else
  const int64_t page = sysconf(_SC_PAGESIZE);
  constexpr int32_t kExperts = 8, kTopK = 2, kTokens = 5;
  // Rows and columns so that one expert's codes are exactly one page (4 KiB pages; larger pages
  // take several experts per page, which the test then cannot isolate).
  if (page != 4096) GTEST_SKIP() << "page size " << page << ", the test lays experts on 4 KiB";
  for (const WeightKind& kind :
       {WeightKind{plan::F32}, WeightKind{plan::F16, 0, false, 16}, WeightKind{plan::I8, 32},
        WeightKind{plan::I4, 32, true}, WeightKind{plan::FP4_E2M1, 32}}) {
    SCOPED_TRACE(kind.Name());
    const int64_t cols = 64;
    const int64_t rows = kind.dtype == plan::F32 ? 16
                         : kind.dtype == plan::F16 ? 32
                         : kind.dtype == plan::I8 ? 64
                                                  : 128;
    OpProgram p(kTokens, 3);
    // Every token's two largest logits are experts 2 and 5.
    std::vector<std::vector<float>> logit_rows(kTokens, std::vector<float>(kExperts, 0.0f));
    for (int32_t t = 0; t < kTokens; ++t) {
      for (int32_t e = 0; e < kExperts; ++e) logit_rows[t][e] = -0.1f * static_cast<float>(e + t);
      logit_rows[t][2] = 3.0f;
      logit_rows[t][5] = 2.0f + 0.1f * static_cast<float>(t);
    }
    const int32_t logits = p.InputRows(logit_rows);
    const int32_t x = p.Input(cols, 1.0f);
    const int32_t ids =
        p.Router(logits, kExperts, kTopK, plan::RouterAttrs::TOPK_SOFTMAX, false).first;
    const int32_t w = p.ExpertMatrix(kind.dtype, kExperts, rows, cols, kind.group, kind.asymmetric,
                                     kind.panel_rows);
    const int32_t out = p.Activation(kTopK * rows);
    plan::ExpertAttrs* attrs = p.AddOp(plan::EXPERT_MATMUL, {x, ids}, {out}, {w})->mutable_expert();
    attrs->set_num_experts(kExperts);
    attrs->set_top_k(kTopK);
    p.ReadOut(out);
    const plan::PlanMeta& meta = p.meta();
    const int64_t bytes = static_cast<int64_t>(meta.tensors(w).size_bytes());
    ASSERT_EQ(bytes, kExperts * page);
    void* region = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(region, MAP_FAILED);
    std::memcpy(region, p.Lookup()(w), bytes);
    for (int32_t e = 0; e < kExperts; ++e) {
      const int prot = e == 2 || e == 5 ? PROT_READ : PROT_NONE;
      ASSERT_EQ(mprotect(static_cast<uint8_t*>(region) + e * page, page, prot), 0);
    }
    const BlobLookup inner = p.Lookup();
    const BlobLookup lookup = [&](int index) -> const uint8_t* {
      return index == w ? static_cast<const uint8_t*>(region) : inner(index);
    };
    BackendOptions options;
    options.max_tokens_per_step = kTokens;
    options.num_threads = 2;
    auto backend = CreateCpuBackend(meta, lookup, options);
    ASSERT_TRUE(backend.ok()) << backend.status();
    const int64_t width = kTopK * rows;
    RunTokens(**backend, {3}, width);
    RunTokens(**backend, {0, 1, 2, 3, 4}, width);
    munmap(region, bytes);
  }
#endif
}

// LastStepExpertLoad: counts per ROUTER op of the last step, refused without the option.
TEST(MoeTest, ExpertLoadCountsTheLastStep) {
  constexpr int32_t kTokens = 37;
  OpProgram p(kTokens, 5);
  BuildMoeBlock(p, kTokens, 8, 2, 0.8, WeightKinds()[0], Output::kCombine);
  const int64_t width = ReadOutWidth(p);
  {
    auto backend = Create(p, kTokens, 2);
    ExpertLoad load;
    const absl::Status status = backend->LastStepExpertLoad(load);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("record_expert_load"), std::string::npos) << status;
  }
  BackendOptions options;
  options.max_tokens_per_step = kTokens;
  options.num_threads = 2;
  options.record_expert_load = true;
  auto backend = CreateCpuBackend(p.meta(), p.Lookup(), options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ExpertLoad load;
  EXPECT_EQ((*backend)->LastStepExpertLoad(load).code(), absl::StatusCode::kFailedPrecondition);
  for (int32_t tokens : {kTokens, 3}) {
    std::vector<int32_t> rows(tokens);
    for (int32_t t = 0; t < tokens; ++t) rows[t] = t;
    RunTokens(**backend, rows, width);
    ASSERT_TRUE((*backend)->LastStepExpertLoad(load).ok());
    EXPECT_EQ(load.num_routers, 1);
    EXPECT_EQ(load.num_experts, 8);
    ASSERT_EQ(load.counts.size(), 8u);
    int32_t total = 0;
    for (int32_t count : load.counts) total += count;
    EXPECT_EQ(total, tokens * 2);
    // Expert 1 is the skewed routing's favourite.
    if (tokens == kTokens) {
      EXPECT_EQ(*std::max_element(load.counts.begin(), load.counts.end()), load.counts[1]);
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
