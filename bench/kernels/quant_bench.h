// Shared setup of the quantized matmul micro-benchmarks (quant_bench.cc, quant_gemm_bench.cc):
// the activations, output and scratch of one QuantizedMatMul call.
#ifndef LLMRT_BENCH_KERNELS_QUANT_BENCH_H_
#define LLMRT_BENCH_KERNELS_QUANT_BENCH_H_

#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/quant_matmul.h"

namespace llmrt::cpu {

// `m` activation rows of `k` columns (a fixed spread of values in [-0.5, 0.5]), the m x n output
// they write and the 32-byte aligned scratch QuantizedMatMul needs for them.
struct QuantMatMulBuffers {
  QuantMatMulBuffers(int64_t m, int64_t n, int64_t k)
      : x(m * k), out(m * n), scratch(QuantizedActivationBytes(m, k) + 32) {
    for (int64_t i = 0; i < m * k; ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.01f - 0.5f;
    output = MatMulOutput{out.data(), 0, n};
  }
  void* aligned_scratch() {
    return scratch.data() + (32 - reinterpret_cast<uintptr_t>(scratch.data()) % 32) % 32;
  }

  std::vector<float> x;
  std::vector<float> out;
  std::vector<uint8_t> scratch;
  MatMulOutput output;
};

}  // namespace llmrt::cpu

#endif  // LLMRT_BENCH_KERNELS_QUANT_BENCH_H_
