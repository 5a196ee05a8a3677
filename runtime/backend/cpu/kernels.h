// Scalar f32 kernels of the CPU backend. Plain C++ written so the compiler can vectorize the
// inner loops; Highway dispatch replaces the hot ones later without changing these signatures.
//
// Activations are row-major [rows, width] f32. Weights are row-major [rows, cols] in F32, F16
// or BF16 and are widened to f32 row by row; every sum accumulates in f32.
//
// Thread-safety: the functions are pure apart from their output and scratch arguments.
#ifndef LLMRT_BACKEND_CPU_KERNELS_H_
#define LLMRT_BACKEND_CPU_KERNELS_H_

#include <cstdint>

#include "runtime/backend/cpu/thread_pool.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::cpu {

struct MatrixView {
  const uint8_t* data = nullptr;
  plan::DType dtype = plan::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Row `row` of `matrix` as f32: a pointer into the matrix itself for F32, else `scratch`
// (cols floats) filled with the widened row.
const float* MatrixRow(const MatrixView& matrix, int64_t row, float* scratch);

float Dot(const float* a, const float* b, int64_t size);

// One destination of a fused matmul: output columns [begin, begin + width) go to a
// [rows, width] buffer.
struct MatMulOutput {
  float* data = nullptr;
  int64_t begin = 0;
  int64_t width = 0;
};

// Rows per tile of weights: 4 weight rows are widened once and reused for every token row,
// which cuts re-reads of the activations 4x while the 4 rows (4 * K floats, 32 KiB at K =
// 2048) stay in L1/L2.
inline constexpr int64_t kMatMulTileRows = 4;

// out[r, n] = dot(x[input_rows[r]], w[n]) + bias[n] for every row r < num_rows (input_rows
// nullptr: input row r), columns split across `outputs`. `scratch` holds, per thread,
// kMatMulTileRows * w.cols floats at scratch + thread * scratch_stride.
void MatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
            const MatrixView& w, const float* bias, const MatMulOutput* outputs,
            int32_t num_outputs, float* scratch, int64_t scratch_stride);

// y = x * rsqrt(mean(x^2) + eps) * gamma, per row.
void RmsNorm(const float* x, const float* gamma, float eps, int64_t num_rows, int64_t width,
             float* y);

// Rotate-half rotary embedding in place over `num_heads` heads of `head_dim` per row, with
// angle position * inv_freq[i] (inv_freq has head_dim / 2 entries). `scratch` holds head_dim
// floats per thread.
void Rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t num_rows, int32_t num_heads,
          int32_t head_dim, const float* inv_freq, float* scratch);

// transformers' inverse frequencies for `rope` (default, LINEAR or LLAMA3), in f32 as it
// computes them. `inv_freq` receives head_dim / 2 entries.
void RopeInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim, float* inv_freq);

float Silu(float x);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_KERNELS_H_
