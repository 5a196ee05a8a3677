// Micro-benchmarks of the multi-row quantized GEMM (runtime/backend/cpu/quant_gemm.h) through
// QuantizedMatMul at TinyLlama-1.1B prefill and batched-decode shapes: qkv 2560x2048,
// gate_up 11264x2048, down 2048x5632; M = 16 (a batch-16 decode step), 64 and 512 (prefill).
//
// Counters: GMACS = multiply-accumulates per second of wall time (activation quantization
// included, as a step pays it), GMACS_per_core = that over the threads. Register-only loops of
// each tile's instruction mix on one Zen 3 core (~3.1 GHz; docs/performance.md, "Why the kernels
// are shaped as they are"): ~52 GMAC/s for I8 (vpsignb, vpmaddubsw and vpmaddwd all run on the two
// multiply pipes) and ~80 for I4 (a 1 x 4 tile without its corrections). Weights are one copy (at M
// >= 16 a matmul reads them from memory once and then from L2, so DRAM is not what bounds it). Part
// of llmrt_kernels_bench, e.g.
//   build/bin/llmrt_kernels_bench --benchmark_filter='QuantGemm.*/512/'
#include <cstdint>
#include <vector>

#include "bench/kernels/quant_bench.h"
#include "benchmark/benchmark.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/quant_gemm.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_test_util.h"

namespace llmrt::cpu {
namespace {

// kFormat: 0 I8 one scale per row (llmc's int8 default), 1 I8 g32 (Q8_0's scales), 2 I4 g32
// symmetric (Q4_0's), 3 I4 g32 with zero points. Args: N (output rows), K, M (tokens), threads.
template <int kFormat>
void BM_QuantGemm(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const int32_t threads = static_cast<int32_t>(state.range(3));
  ThreadPool pool(threads);
  std::vector<float> weights(n * k);
  for (int64_t i = 0; i < n * k; ++i) weights[i] = static_cast<float>((i * 7919) % 201) - 100.0f;
  const testing::QuantizedMatrix q = testing::QuantizeReference(
      weights, n, k, kFormat >= 2 ? 4 : 8, kFormat == 3, kFormat == 0 ? k : 32, {});
  QuantMatMulBuffers buffers(m, n, k);
  void* scratch = buffers.aligned_scratch();
  const MatrixView w = q.View();
  for (auto _ : state) {
    QuantizedMatMul(pool, buffers.x.data(), m, nullptr, w, nullptr, &buffers.output, 1, scratch);
    benchmark::DoNotOptimize(buffers.out.data());
    benchmark::ClobberMemory();
  }
  const double macs = static_cast<double>(m * n * k) * 1e-9;
  state.counters["GMACS"] = benchmark::Counter(macs, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMACS_per_core"] =
      benchmark::Counter(macs / threads, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveCpuTarget());
}

void GemmShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{2560, 2048}, {11264, 2048}, {2048, 5632}};
  for (const auto& shape : shapes) {
    for (int64_t tokens : {16, 64, 512}) {
      for (int64_t threads : {1, 2}) b->Args({shape[0], shape[1], tokens, threads});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_TEMPLATE(BM_QuantGemm, 0)->Apply(GemmShapes);
BENCHMARK_TEMPLATE(BM_QuantGemm, 1)->Apply(GemmShapes);
BENCHMARK_TEMPLATE(BM_QuantGemm, 2)->Apply(GemmShapes);
BENCHMARK_TEMPLATE(BM_QuantGemm, 3)->Apply(GemmShapes);

}  // namespace
}  // namespace llmrt::cpu
