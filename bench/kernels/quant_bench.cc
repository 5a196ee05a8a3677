// Micro-benchmarks of the quantized matmul kernels (runtime/backend/cpu/quant_matmul.h) at
// TinyLlama-1.1B shapes: o_proj 2048x2048, gate/up 5632x2048, down 2048x5632, lm_head
// 32000x2048; decode GEMV (1 token), small batches (4), batched decode (16 sequences) and
// prefill (64, 512 tokens).
//
// bytes_per_second counts the weight traffic of one matmul: codes + F16 scales (+ U8 zero
// points), what decode is bound by; compare with `llmrt bench --bandwidth` (~19 GB/s on one
// core and ~40 GB/s on two of the project machine). Each iteration uses the next of enough
// copies of the matrix to span 96 MiB, so the weights come from memory as at decode (a single
// 4-12 MiB matrix would stay in the 32 MiB L3). Part of llmrt_kernels_bench, e.g.
//   build/bin/llmrt_kernels_bench --benchmark_filter='QuantMatMul.*/2048/5632/1/'
#include "bench/kernels/quant_bench.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/kernels/attention_bench.h"
#include "benchmark/benchmark.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/quant_kv_attention.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/dtype.h"

namespace llmrt::cpu {
namespace {

struct RandomQuantizedMatrix {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zero_points;
  std::vector<uint8_t> exponents;  // MXFP4
  MatrixView view;

  int64_t weight_bytes() const {
    return static_cast<int64_t>(codes.size() + scales.size() * 2 + zero_points.size() +
                                exponents.size());
  }
};

// Random codes and scales: the kernels' speed does not depend on the values.
RandomQuantizedMatrix MakeMatrix(plan::DType dtype, bool asymmetric, int32_t group_size,
                                 int64_t rows, int64_t cols) {
  RandomQuantizedMatrix m;
  m.codes.resize(QuantizedMatrixBytes(dtype, rows, cols));
  uint32_t state = 12345;
  auto next = [&state] { return (state = state * 1664525u + 1013904223u) >> 8; };
  for (uint8_t& code : m.codes) {
    code = static_cast<uint8_t>(dtype == plan::I8 ? next() % 255 - 127 : next());
  }
  if (dtype == plan::FP4_E2M1) {
    // E8M0 scales 2^-10 .. 2^-7 (bytes 117-120), one per block of 32.
    m.exponents.resize(rows * (cols / 32));
    for (uint8_t& exponent : m.exponents) exponent = static_cast<uint8_t>(117 + next() % 4);
    m.view = MatrixView{m.codes.data(), dtype, rows, cols, 0};
    m.view.group_size = 32;
    m.view.exponents = m.exponents.data();
    return m;
  }
  m.scales.resize(rows * (cols / group_size));
  for (uint16_t& scale : m.scales) scale = plan::F32ToF16(1e-3f * (1 + next() % 100));
  if (asymmetric) {
    m.zero_points.resize(m.scales.size());
    for (uint8_t& zero : m.zero_points) zero = static_cast<uint8_t>(next() % 16);
  }
  m.view = MatrixView{m.codes.data(), dtype, rows, cols, 0};
  m.view.group_size = group_size;
  m.view.scales = m.scales.data();
  m.view.zero_points = asymmetric ? m.zero_points.data() : nullptr;
  return m;
}

// Args: N (output rows), K, M (tokens), threads. kBits 8: I8 per group of 32 (llama.cpp
// Q8_0's shape of scales) or, kPerChannel, one scale per row (llmc's int8 default); kBits 4:
// I4 g32, symmetric (like Q4_0) or with zero points. span_bytes: copies of the matrix are added
// until they span this many bytes, and each iteration reads the next copy (96 MiB: from DRAM, as
// at decode; 0: one copy, which a 4-12 MiB matrix keeps in the 32 MiB L3, so the kernel's own
// speed shows rather than the memory's).
void RunQuantMatMul(benchmark::State& state, plan::DType dtype, bool asymmetric, bool per_channel,
                    int64_t span_bytes) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  ThreadPool pool(static_cast<int32_t>(state.range(3)));
  std::vector<RandomQuantizedMatrix> copies(1);
  copies[0] = MakeMatrix(dtype, asymmetric, per_channel ? static_cast<int32_t>(k) : 32, n, k);
  const int64_t bytes = copies[0].weight_bytes();
  // (Not the L2-sized kernel shape below.)
  while (bytes > (int64_t{1} << 20) && static_cast<int64_t>(copies.size()) * bytes < span_bytes) {
    copies.push_back(copies[0]);
    copies.back().view.data = copies.back().codes.data();
    copies.back().view.scales = dtype == plan::FP4_E2M1 ? nullptr : copies.back().scales.data();
    copies.back().view.zero_points = asymmetric ? copies.back().zero_points.data() : nullptr;
    copies.back().view.exponents =
        dtype == plan::FP4_E2M1 ? copies.back().exponents.data() : nullptr;
  }
  QuantMatMulBuffers buffers(m, n, k);
  void* scratch = buffers.aligned_scratch();
  size_t next = 0;
  for (auto _ : state) {
    const MatrixView& w = copies[next].view;
    next = next + 1 < copies.size() ? next + 1 : 0;
    QuantizedMatMul(pool, buffers.x.data(), m, nullptr, w, nullptr, &buffers.output, 1, scratch);
    benchmark::DoNotOptimize(buffers.out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["GOPS"] = benchmark::Counter(static_cast<double>(2 * m * n * k) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveCpuTarget());
}

template <int kBits, bool kAsymmetric, bool kPerChannel = false>
void BM_QuantMatMul(benchmark::State& state) {
  RunQuantMatMul(state, kBits == 8 ? plan::I8 : plan::I4, kAsymmetric, kPerChannel,
                 int64_t{96} << 20);
}

// The decode GEMV on one matrix that stays in L3: what the kernel reads when memory is not the
// limit (against BM_QuantMatMul's DRAM rate: whether decode is bound by instructions or bytes).
template <int kBits, bool kAsymmetric, bool kPerChannel = false>
void BM_QuantGemvL3(benchmark::State& state) {
  RunQuantMatMul(state, kBits == 8 ? plan::I8 : plan::I4, kAsymmetric, kPerChannel, 0);
}

void QuantShapes(benchmark::internal::Benchmark* b) {
  const int64_t shapes[][2] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
  // 64 x 2048 I8 = 128 KiB: stays in L2, so it measures the kernel rather than DRAM.
  b->Args({64, 2048, 1, 1});
  for (const auto& shape : shapes) {
    for (int64_t tokens : {1, 4, 16, 64, 512}) {
      if (shape[0] == 32000 && tokens > 16) continue;  // lm_head: one row per sequence
      for (int64_t threads : {1, 2}) b->Args({shape[0], shape[1], tokens, threads});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK_TEMPLATE(BM_QuantMatMul, 8, false)->Apply(QuantShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, 8, false, true)->Apply(QuantShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, 4, false)->Apply(QuantShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, 4, true)->Apply(QuantShapes);

// The decode GEMVs of the Qwen3-MoE preset's attention (qkv 3072 x 1024, o 1024 x 2048: rows of
// 512 and 1024 I4 bytes, as its experts' gate/up rows of 1024 columns), from DRAM.
void MoeAttentionShapes(benchmark::internal::Benchmark* b) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{3072, 1024}, {1024, 2048}}) {
    for (int64_t threads : {1, 2}) b->Args({shape.first, shape.second, 1, threads});
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK_TEMPLATE(BM_QuantMatMul, 8, false, true)->Apply(MoeAttentionShapes);
BENCHMARK_TEMPLATE(BM_QuantMatMul, 4, false)->Apply(MoeAttentionShapes);

// The MXFP4 decode GEMV (FP4_E2M1 codes in I4's layout, an E8M0 byte per block of 32) from DRAM,
// at the decode shapes of BM_QuantMatMul.
void BM_Mxfp4Gemv(benchmark::State& state) {
  RunQuantMatMul(state, plan::FP4_E2M1, false, false, int64_t{96} << 20);
}
BENCHMARK(BM_Mxfp4Gemv)
    ->Args({5632, 2048, 1, 1})
    ->Args({5632, 2048, 1, 2})
    ->Args({2048, 5632, 1, 1})
    ->Args({2048, 5632, 1, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Decode shapes whose matrix (5.5-11 MiB) fits the L3 with room to spare.
void GemvL3Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{5632, 2048}, {2048, 5632}}) {
    for (int64_t threads : {1, 2}) b->Args({shape.first, shape.second, 1, threads});
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK_TEMPLATE(BM_QuantGemvL3, 8, false)->Apply(GemvL3Shapes);
BENCHMARK_TEMPLATE(BM_QuantGemvL3, 8, false, true)->Apply(GemvL3Shapes);
BENCHMARK_TEMPLATE(BM_QuantGemvL3, 4, false)->Apply(GemvL3Shapes);
BENCHMARK_TEMPLATE(BM_QuantGemvL3, 4, true)->Apply(GemvL3Shapes);

// Args: new tokens, context length, threads. Decode attention at TinyLlama's shape (32 query
// heads, 4 kv heads, head_dim 64, blocks of 16 in a shuffled order) over a cache of `kDtype`;
// bytes_per_second counts the cache bytes read (K and V of the context, I8 scales included),
// so F32 / F16 / I8 rows at 2048 tokens compare what an int8 cache saves at decode.
template <plan::DType kDtype>
void BM_KvCacheAttention(benchmark::State& state) {
  const int64_t tokens = state.range(0), context = state.range(1);
  ThreadPool pool(static_cast<int32_t>(state.range(2)));
  const int32_t blocks = static_cast<int32_t>((context + kBenchBlock - 1) / kBenchBlock);
  auto storage =
      kv::KvStorage::Create({1, kBenchKvHeads, kBenchHeadDim, blocks, kBenchBlock, kDtype});
  if (!storage.ok()) {
    state.SkipWithError(std::string(storage.status().message()).c_str());
    return;
  }
  kv::KvStorage& cache = **storage;
  std::vector<float> row(kBenchKvHeads * kBenchHeadDim);
  for (int64_t slot = 0; slot < cache.num_slots(); ++slot) {
    for (size_t i = 0; i < row.size(); ++i)
      row[i] = static_cast<float>((slot * 31 + i) % 97) * 0.01f;
    cache.WriteToken(0, slot, row.data(), row.data());
  }
  std::vector<int32_t> block_table(blocks);
  for (int32_t i = 0; i < blocks; ++i) block_table[i] = (i * 7) % blocks;
  std::vector<float> q(tokens * kBenchHeads * kBenchHeadDim);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 13) * 0.05f;
  std::vector<float> out(q.size());
  AttentionBench bench(
      pool, tokens, context, block_table,
      KvCacheAttentionScratchFloats(kBenchHeads, kBenchKvHeads, kBenchHeadDim, kBenchBlock),
      q.data(), out.data());
  AttentionArgs& args = bench.args();
  args.token_stride = cache.token_stride();
  args.kv_dtype = kDtype;
  if (kDtype == plan::F32) {
    args.key_cache = cache.key(0, 0);
    args.value_cache = cache.value(0, 0);
  } else {
    args.key_bytes = cache.key_bytes(0, 0);
    args.value_bytes = cache.value_bytes(0, 0);
    args.key_scales = cache.key_scales(0, 0);
    args.value_scales = cache.value_scales(0, 0);
  }
  for (auto _ : state) {
    if (kDtype == plan::F32) {
      Attention(pool, args);
    } else {
      KvCacheAttention(pool, args);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * tokens * context *
                          kv::KvBytesPerToken(1, kBenchKvHeads, kBenchHeadDim, kDtype));
  state.SetLabel(ActiveCpuTarget());
}
#define LLMRT_KV_ATTENTION_ARGS \
  Args({1, 2048, 1})->Args({1, 2048, 2})->Args({128, 512, 2})->UseRealTime()
BENCHMARK_TEMPLATE(BM_KvCacheAttention, plan::F32)->LLMRT_KV_ATTENTION_ARGS;
BENCHMARK_TEMPLATE(BM_KvCacheAttention, plan::F16)->LLMRT_KV_ATTENTION_ARGS;
BENCHMARK_TEMPLATE(BM_KvCacheAttention, plan::BF16)->LLMRT_KV_ATTENTION_ARGS;
BENCHMARK_TEMPLATE(BM_KvCacheAttention, plan::I8)->LLMRT_KV_ATTENTION_ARGS;
#undef LLMRT_KV_ATTENTION_ARGS

}  // namespace
}  // namespace llmrt::cpu
