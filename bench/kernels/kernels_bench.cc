// Micro-benchmarks of the CPU kernels (runtime/backend/cpu) at TinyLlama-1.1B shapes (hidden
// 2048, intermediate 5632, 32 heads / 4 kv heads of 64, vocab 32000), per shape class:
// decode GEMV (1 token), batched decode (4 and 16 sequences), prefill GEMM (64 and 512 tokens);
// attention at 512 and 2048 positions; the thread pool's fork/join cost; the decode GEMV over
// weights in huge pages, small pages and a file mapping (BM_DecodeGemvMemory).
//
// Counters: bytes_per_second counts the weight bytes a matmul streams (what decode is bound
// by; compare with `llmrt bench --bandwidth`), GFLOPS = 2 * M * N * K / time (what prefill is
// bound by; compare with the FMA peak, docs/performance.md). Rates use wall time; on a loaded
// machine compare the CPU column of 1-thread runs instead. LLMRT_CPU_TARGET selects the SIMD
// target as for the runtime; threads are the last argument. Never timed in CI; run e.g.
//   build/bin/llmrt_kernels_bench --benchmark_filter='MatMul<.*F16>/2048/5632/1/'
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/kernels/attention_bench.h"
#include "benchmark/benchmark.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/plan/dtype.h"

namespace llmrt::cpu {
namespace {

std::vector<uint8_t> RandomMatrix(plan::DType dtype, int64_t rows, int64_t cols) {
  const int64_t bytes = MatrixBytes(dtype, rows, cols);
  std::vector<uint8_t> data(bytes);
  const int64_t elements = bytes / (dtype == plan::F32 ? 4 : 2);
  uint32_t state = 12345;
  for (int64_t i = 0; i < elements; ++i) {
    state = state * 1664525u + 1013904223u;
    const float value = (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.1f;
    if (dtype == plan::F32) {
      reinterpret_cast<float*>(data.data())[i] = value;
    } else {
      reinterpret_cast<uint16_t*>(data.data())[i] =
          dtype == plan::F16 ? plan::F32ToF16(value) : plan::F32ToBf16(value);
    }
  }
  return data;
}

std::vector<float> RandomFloats(int64_t count) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) values[i] = std::sin(0.37f * static_cast<float>(i));
  return values;
}

// Args: N (output rows), K, M (tokens), threads.
template <plan::DType kDtype>
void BM_MatMul(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  ThreadPool pool(static_cast<int32_t>(state.range(3)));
  const std::vector<uint8_t> weights = RandomMatrix(kDtype, n, k);
  const std::vector<float> x = RandomFloats(m * k);
  std::vector<float> out(m * n);
  const MatrixView w{weights.data(), kDtype, n, k, kPanelRows};
  const MatMulOutput output{out.data(), 0, n};
  for (auto _ : state) {
    MatMul(pool, x.data(), m, nullptr, w, nullptr, &output, 1);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(weights.size()));
  state.counters["GFLOPS"] = benchmark::Counter(static_cast<double>(2 * m * n * k) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(ActiveCpuTarget());
}

void MatMulShapes(benchmark::internal::Benchmark* b) {
  // qkv, o_proj, gate_up, down_proj, lm_head.
  const int64_t shapes[][2] = {
      {2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}, {32000, 2048}};
  // 64 x 2048 f16 = 256 KiB: stays in L2, so it measures the kernel rather than DRAM.
  b->Args({64, 2048, 1, 1});
  for (const auto& shape : shapes) {
    for (int64_t tokens : {1, 4, 16, 64, 512}) {
      // lm_head runs for the logit rows only: one per sequence.
      if (shape[0] == 32000 && tokens > 16) continue;
      for (int64_t threads : {1, 2}) b->Args({shape[0], shape[1], tokens, threads});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK_TEMPLATE(BM_MatMul, plan::F16)->Apply(MatMulShapes);
BENCHMARK_TEMPLATE(BM_MatMul, plan::BF16)->Apply(MatMulShapes);
BENCHMARK_TEMPLATE(BM_MatMul, plan::F32)->Apply(MatMulShapes);

// Where a decode GEMV's weights live, for BM_DecodeGemvMemory.
enum WeightMemory : int64_t {
  kAnonymousHugePages = 0,  // like `llmrt bench --bandwidth`'s probe buffer
  kAnonymousSmallPages = 1,
  kFileMapping = 2,  // page cache of a file, mapped as Plan::Open maps a plan
};

// `bytes` of f16 weights (a repeated 1 MiB random pattern) in `memory`; unmaps on destruction.
class WeightBuffer {
 public:
  WeightBuffer(WeightMemory memory, size_t bytes) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const std::vector<uint8_t> pattern = RandomMatrix(plan::F16, 256, 2048);  // 1 MiB
    if (memory == kFileMapping) {
      char path[] = "/tmp/llmrt_kernels_bench_XXXXXX";
      const int fd = mkstemp(path);
      if (fd < 0) return;
      unlink(path);  // the mapping keeps the data alive
      for (size_t done = 0; done < bytes; done += pattern.size()) {
        if (write(fd, pattern.data(), pattern.size()) != static_cast<ssize_t>(pattern.size())) {
          close(fd);
          return;
        }
      }
      void* address = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      close(fd);
      if (address == MAP_FAILED) return;
      madvise(address, bytes, MADV_WILLNEED);
      mapping_ = address;
      mapping_bytes_ = bytes;
      data_ = static_cast<uint8_t*>(address);
      return;
    }
    mapping_bytes_ = bytes + kHugePage;
    void* address =
        mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) return;
    mapping_ = address;
    const uintptr_t aligned =
        (reinterpret_cast<uintptr_t>(address) + kHugePage - 1) & ~(kHugePage - 1);
    uint8_t* data = reinterpret_cast<uint8_t*>(aligned);
    madvise(data, bytes, memory == kAnonymousHugePages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    for (size_t done = 0; done < bytes; done += pattern.size()) {
      std::memcpy(data + done, pattern.data(), pattern.size());
    }
    data_ = data;
  }
  ~WeightBuffer() {
    if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  }
  WeightBuffer(const WeightBuffer&) = delete;
  WeightBuffer& operator=(const WeightBuffer&) = delete;
  const uint8_t* data() const { return data_; }

 private:
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint8_t* data_ = nullptr;
};

// Decode GEMV (1 token) over 512 MiB of f16 weights (16x the L3 of the machine in
// docs/performance.md, so every byte comes from DRAM) in each kind of memory: does the kernel
// read a plan's page-cache mapping as fast as the huge-page buffer `llmrt bench --bandwidth`
// measures? bytes_per_second is the number to compare with the probe at the same thread
// count. K changes the length of each panel's stream (16 x K x 2 bytes: 32 KiB at K = 1024, the
// experts of the MoE presets; 64 KiB at 2048). Args: WeightMemory, threads, K.
void BM_DecodeGemvMemory(benchmark::State& state) {
  const int64_t kCols = state.range(2);
  const int64_t kRows = (int64_t{1} << 28) / kCols / kPanelRows * kPanelRows;
  const size_t bytes = static_cast<size_t>(MatrixBytes(plan::F16, kRows, kCols));
  const WeightBuffer weights(static_cast<WeightMemory>(state.range(0)), bytes);
  if (weights.data() == nullptr) {
    state.SkipWithError("cannot set up the weight memory");
    return;
  }
  ThreadPool pool(static_cast<int32_t>(state.range(1)));
  const std::vector<float> x = RandomFloats(kCols);
  std::vector<float> out(kRows);
  const MatrixView w{weights.data(), plan::F16, kRows, kCols, kPanelRows};
  const MatMulOutput output{out.data(), 0, kRows};
  MatMul(pool, x.data(), 1, nullptr, w, nullptr, &output, 1);  // faults the mapping in
  for (auto _ : state) {
    MatMul(pool, x.data(), 1, nullptr, w, nullptr, &output, 1);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
  state.SetLabel(ActiveCpuTarget());
}
BENCHMARK(BM_DecodeGemvMemory)
    ->ArgsProduct({{kAnonymousHugePages, kAnonymousSmallPages, kFileMapping}, {1, 2}, {2048}})
    ->ArgsProduct({{kFileMapping}, {1, 2}, {256, 1024, 5632}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Fork/join cost of one ParallelFor with an empty body: what each of a decode step's ~150
// split ops pays on top of its work. Args: threads.
void BM_ParallelForEmpty(benchmark::State& state) {
  ThreadPool pool(static_cast<int32_t>(state.range(0)));
  std::vector<int64_t> sink(pool.num_threads() * 16);
  for (auto _ : state) {
    pool.ParallelFor(pool.num_threads(),
                     [&](int64_t begin, int64_t, int32_t thread) { sink[thread * 16] += begin; });
  }
  benchmark::DoNotOptimize(sink.data());
}
BENCHMARK(BM_ParallelForEmpty)->Arg(1)->Arg(2)->UseRealTime();

// Args: tokens, width, threads.
void BM_FusedAddRmsNorm(benchmark::State& state) {
  const int64_t tokens = state.range(0), width = state.range(1);
  ThreadPool pool(static_cast<int32_t>(state.range(2)));
  const std::vector<float> a = RandomFloats(tokens * width), b = RandomFloats(tokens * width);
  const std::vector<float> gamma(width, 1.0f);
  std::vector<float> sum(tokens * width), y(tokens * width);
  for (auto _ : state) {
    FusedAddRmsNorm(pool, a.data(), b.data(), gamma.data(), 1e-5f, tokens, width, sum.data(),
                    y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * tokens * width * 4 * 4);
}
BENCHMARK(BM_FusedAddRmsNorm)->Args({1, 2048, 1})->Args({512, 2048, 1})->Args({512, 2048, 2});

// Args: tokens, width, threads.
void BM_SiluMul(benchmark::State& state) {
  const int64_t tokens = state.range(0), width = state.range(1);
  ThreadPool pool(static_cast<int32_t>(state.range(2)));
  const std::vector<float> gate = RandomFloats(tokens * width), up = RandomFloats(tokens * width);
  std::vector<float> out(tokens * width);
  for (auto _ : state) {
    ElementwiseOp(pool, plan::SILU_MUL, gate.data(), up.data(), tokens * width, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * tokens * width * 4 * 3);
}
BENCHMARK(BM_SiluMul)->Args({1, 5632, 1})->Args({512, 5632, 1})->Args({512, 5632, 2});

// Args: tokens, threads. q (32 heads) and k (4 heads) of 64, as the fused qkv output.
void BM_Rope(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  ThreadPool pool(static_cast<int32_t>(state.range(1)));
  plan::RopeConfig rope;
  rope.set_theta(10000.0);
  std::vector<float> inv_freq(32), scratch(64 * pool.num_threads());
  RopeInverseFrequencies(rope, 64, inv_freq.data());
  std::vector<float> x = RandomFloats(tokens * 36 * 64);
  std::vector<int32_t> positions(tokens);
  for (int64_t t = 0; t < tokens; ++t) positions[t] = static_cast<int32_t>(t + 100);
  for (auto _ : state) {
    Rope(pool, x.data(), positions.data(), tokens, 36, 64, 64, inv_freq.data(), 1.0f,
         scratch.data());
    benchmark::DoNotOptimize(x.data());
  }
}
BENCHMARK(BM_Rope)->Args({1, 1})->Args({512, 1})->Args({512, 2});

// Args: new tokens, context length, threads, kv heads. 32 query heads of 64, blocks of 16 in a
// shuffled order; 4 kv heads is TinyLlama's group of 8 (query heads in lanes), 32 is MHA
// (Qwen2-MoE, Phi-3, OLMo2: keys in lanes) and 16 a group of 2 (keys in lanes on AVX-512).
void BM_Attention(benchmark::State& state) {
  const int64_t tokens = state.range(0), context = state.range(1);
  const int32_t kv_heads = static_cast<int32_t>(state.range(3));
  ThreadPool pool(static_cast<int32_t>(state.range(2)));
  const int64_t blocks = (context + kBenchBlock - 1) / kBenchBlock;
  std::vector<int32_t> block_table(blocks);
  for (int64_t i = 0; i < blocks; ++i) block_table[i] = static_cast<int32_t>((i * 7) % blocks);
  const std::vector<float> keys = RandomFloats(blocks * kBenchBlock * kv_heads * kBenchHeadDim);
  const std::vector<float> values = RandomFloats(blocks * kBenchBlock * kv_heads * kBenchHeadDim);
  const std::vector<float> q = RandomFloats(tokens * kBenchHeads * kBenchHeadDim);
  std::vector<float> out(tokens * kBenchHeads * kBenchHeadDim);
  AttentionBench bench(pool, tokens, context, block_table,
                       AttentionScratchFloats(kBenchHeads, kv_heads, kBenchHeadDim, kBenchBlock),
                       q.data(), out.data());
  AttentionArgs& args = bench.args();
  args.key_cache = keys.data();
  args.value_cache = values.data();
  args.num_kv_heads = kv_heads;
  args.token_stride = kv_heads * kBenchHeadDim;
  for (auto _ : state) {
    Attention(pool, args);
    benchmark::DoNotOptimize(out.data());
  }
  // K and V of the context, read once per token.
  state.SetBytesProcessed(state.iterations() * tokens * context * kv_heads * kBenchHeadDim * 4 * 2);
}
BENCHMARK(BM_Attention)
    ->Args({1, 512, 1, 4})
    ->Args({1, 2048, 1, 4})
    ->Args({1, 2048, 2, 4})
    ->Args({16, 2048, 1, 4})
    ->Args({128, 512, 1, 4})
    ->Args({128, 512, 2, 4})
    ->Args({1, 512, 1, 32})
    ->Args({1, 2048, 1, 32})
    ->Args({1, 2048, 2, 32})
    ->Args({128, 512, 1, 32})
    ->Args({512, 512, 1, 32})
    ->Args({512, 512, 2, 32})
    ->Args({1, 2048, 1, 16})
    ->Args({512, 512, 1, 16})
    ->UseRealTime();

}  // namespace
}  // namespace llmrt::cpu

int main(int argc, char** argv) {
  if (absl::Status status = llmrt::cpu::SelectCpuTargetFromEnvironment(); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
