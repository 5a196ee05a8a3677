// EXPERT_MATMUL (runtime/backend/cpu/moe.h) at the Qwen3-MoE preset's shapes (synth
// qwen3-moe-1.6b-a0.4b: hidden 1024, 64 experts, top-8, expert intermediate 256): gate/up
// (N 512 = gate + up, K 1024, x one row per token) and down (N 1024, K 256, x one slice per
// slot), for f16 panels, int8 g32, int4 g32 and MXFP4, at T = 1 (decode), 16 and 512 tokens,
// with uniform routing (distinct random experts per token) or skewed (expert 0 chosen by ~80%
// of the tokens).
//
// bytes_per_second counts the bytes of the experts the step chose (each once): the decode
// MBU on active bytes; GFLOPS = 2 T k N K / time. Run e.g.
//   build/bin/llmrt_kernels_bench --benchmark_filter='ExpertMatMul' --benchmark_repetitions=3
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/moe.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/plan/dtype.h"

namespace llmrt::cpu {
namespace {

constexpr int32_t kExperts = 64, kTopK = 8;

enum ExpertWeights { kF16Panels = 0, kInt8 = 1, kInt4 = 2, kMxfp4 = 3 };

// The expert stack [E N, K] of `kind` with random bytes (f16: small values; codes: any; scales
// f16 ~1e-3 or E8M0 120), and its view.
struct Stack {
  std::vector<uint8_t> codes, scales;
  MatrixView view;
};

Stack MakeStack(ExpertWeights kind, int64_t rows, int64_t cols) {
  Stack s;
  std::mt19937 random(7);
  const plan::DType dtype = kind == kF16Panels ? plan::F16
                            : kind == kInt8    ? plan::I8
                            : kind == kInt4    ? plan::I4
                                               : plan::FP4_E2M1;
  const int64_t bytes =
      kind == kF16Panels ? MatrixBytes(dtype, rows, cols) : QuantizedMatrixBytes(dtype, rows, cols);
  s.codes.resize(bytes);
  for (auto& b : s.codes) b = static_cast<uint8_t>(random());
  if (kind == kF16Panels) {
    auto* halves = reinterpret_cast<uint16_t*>(s.codes.data());
    for (int64_t i = 0; i < rows * cols; ++i) {
      halves[i] = plan::F32ToF16(0.01f * std::sin(static_cast<float>(i)));
    }
  }
  s.view = {s.codes.data(), dtype, rows, cols, kind == kF16Panels ? kPanelRows : 0};
  if (kind != kF16Panels) {
    const int64_t groups = rows * cols / 32;
    s.view.group_size = 32;
    if (kind == kMxfp4) {
      s.scales.assign(groups, 120);
      s.view.exponents = s.scales.data();
    } else {
      s.scales.resize(groups * 2);
      auto* halves = reinterpret_cast<uint16_t*>(s.scales.data());
      for (int64_t g = 0; g < groups; ++g) halves[g] = plan::F32ToF16(1e-3f);
      s.view.scales = halves;
    }
  }
  return s;
}

// top_k distinct experts per token: uniform, or expert 0 first for ~80% of the tokens.
std::vector<int32_t> Routing(int64_t tokens, bool skewed, int32_t* distinct) {
  std::mt19937 random(11);
  std::vector<int32_t> ids(tokens * kTopK), order(kExperts);
  std::vector<bool> used(kExperts, false);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int32_t e = 0; e < kExperts; ++e) order[e] = e;
    std::shuffle(order.begin(), order.end(), random);
    if (skewed && random() % 10 < 8) {
      std::swap(order[0], *std::find(order.begin(), order.end(), 0));
    }
    for (int32_t j = 0; j < kTopK; ++j) used[ids[t * kTopK + j] = order[j]] = true;
  }
  *distinct = static_cast<int32_t>(std::count(used.begin(), used.end(), true));
  return ids;
}

// Args: weights (ExpertWeights), projection (0 gate/up, 1 down), tokens, skewed, threads.
void BM_ExpertMatMul(benchmark::State& state) {
  const auto kind = static_cast<ExpertWeights>(state.range(0));
  const bool down = state.range(1) == 1;
  const int64_t tokens = state.range(2);
  ThreadPool pool(static_cast<int32_t>(state.range(4)));
  const int64_t n = down ? 1024 : 512, k = down ? 256 : 1024;
  const Stack stack = MakeStack(kind, kExperts * n, k);
  int32_t distinct = 0;
  const std::vector<int32_t> ids = Routing(tokens, state.range(3) != 0, &distinct);
  std::vector<float> x((down ? tokens * kTopK : tokens) * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> out(tokens * kTopK * n);
  const MatMulOutput output{out.data(), 0, n};
  std::vector<int32_t> ints(ExpertMatMulScratchInts(tokens, kTopK, kExperts));
  std::vector<float> floats(ExpertMatMulScratchFloats(tokens, n, pool.num_threads()));
  std::vector<std::unique_ptr<ThreadPool>> singles;
  std::vector<ThreadPool*> single_pools;
  for (int32_t t = 0; t < pool.num_threads(); ++t) {
    singles.push_back(std::make_unique<ThreadPool>(1));
    single_pools.push_back(singles.back().get());
  }
  const int64_t thread_bytes = ExpertMatMulThreadScratchBytes(tokens, pool.num_threads(), k);
  std::vector<uint8_t> thread_scratch(thread_bytes * pool.num_threads() + 64);
  std::vector<uint8_t> quantized(QuantizedActivationBytes(tokens, k) + 64);
  ExpertMatMulArgs args;
  args.x = x.data();
  args.sliced = down;
  args.ids = ids.data();
  args.num_tokens = tokens;
  args.top_k = kTopK;
  args.num_experts = kExperts;
  args.weights = stack.view;
  args.rows_per_expert = n;
  args.outputs = &output;
  args.num_outputs = 1;
  args.int_scratch = ints.data();
  args.float_scratch = floats.data();
  // The quantized multiplies' scratch is 32-byte aligned (quant_matmul.h), as the backend's.
  auto aligned = [](std::vector<uint8_t>& bytes) {
    return bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64;
  };
  args.matmul_scratch = aligned(quantized);
  args.single_pools = single_pools.data();
  args.thread_scratch = aligned(thread_scratch);
  args.thread_scratch_bytes = thread_bytes;
  ExpertRowsMatMul multiply;
  if (kind == kF16Panels) {
    multiply = [](ThreadPool& p, const float* xs, int64_t rows, const int32_t* input_rows,
                  const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                  int32_t num_outputs,
                  void*) { MatMul(p, xs, rows, input_rows, w, bias, outputs, num_outputs); };
  } else {
    multiply = QuantizedMatMul;
  }
  for (auto _ : state) {
    ExpertMatMul(pool, args, multiply);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  const int64_t expert_bytes =
      static_cast<int64_t>(stack.codes.size() + stack.scales.size()) / kExperts;
  state.SetBytesProcessed(state.iterations() * expert_bytes * distinct);
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(2 * tokens * kTopK * n * k) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["experts"] = distinct;
  state.SetLabel(ActiveCpuTarget());
}

void ExpertShapes(benchmark::internal::Benchmark* b) {
  for (int64_t kind : {kF16Panels, kInt8, kInt4, kMxfp4}) {
    for (int64_t projection : {0, 1}) {
      for (int64_t tokens : {1, 16, 512}) {
        for (int64_t skewed : {0, 1}) {
          if (tokens == 1 && skewed) continue;  // one token: routing shape does not matter
          for (int64_t threads : {1, 2}) b->Args({kind, projection, tokens, skewed, threads});
        }
      }
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_ExpertMatMul)->Apply(ExpertShapes);

// ROUTER at the Qwen3-MoE shape (64 experts, top-8, renormalised softmax) on random logits.
// Args: tokens.
void BM_RouteTokens(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  ThreadPool pool(1);
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  std::vector<float> logits(tokens * kExperts);
  for (float& v : logits) v = normal(random);
  std::vector<int32_t> ids(tokens * kTopK);
  std::vector<float> weights(tokens * kTopK);
  for (auto _ : state) {
    RouteTokens(pool, logits.data(), tokens, kExperts, kTopK, plan::RouterAttrs::SOFTMAX_TOPK, true,
                ids.data(), weights.data(), nullptr);
    benchmark::DoNotOptimize(ids.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_RouteTokens)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond);

// MOE_COMBINE at the Qwen3-MoE shape (top-8, hidden 1024). Args: tokens.
void BM_MoeCombine(benchmark::State& state) {
  const int64_t tokens = state.range(0), hidden = 1024;
  ThreadPool pool(1);
  std::vector<float> y(tokens * kTopK * hidden), weights(tokens * kTopK, 0.125f),
      out(tokens * hidden);
  for (size_t i = 0; i < y.size(); ++i) y[i] = std::sin(0.11f * static_cast<float>(i));
  for (auto _ : state) {
    MoeCombine(pool, y.data(), weights.data(), nullptr, nullptr, tokens, kTopK, hidden, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_MoeCombine)->Arg(1)->Arg(512)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace llmrt::cpu
