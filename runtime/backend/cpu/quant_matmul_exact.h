// Matmul over quantized weights (I8 / I4, quant_matmul.h) with f32 activations: the exact
// mode (BackendOptions::quantized_activations = kF32).
//
// QuantizedMatMul quantizes each activation row to int8 per block of 32 columns; on random or
// small models that alone moves logits by ~0.3 (GPTQ fixtures, docs/quantization.md), which
// hides whether the weights themselves are right. Here each weight row is dequantized to f32
// once per op (QuantizedRowToF32, the same code the embedding lookup uses) and multiplied by
// the unquantized activation rows with f32 FMAs, so the result equals MatMul over the
// dequantized f32 weights up to f32 summation order (~1e-6 relative). It reads the same weight
// bytes but does ~8x the arithmetic of the integer path: for checks and accuracy studies, not
// for serving.
//
// Thread-safety: like kernels.h (pure apart from outputs and scratch; one call per pool).
#ifndef LLMRT_BACKEND_CPU_QUANT_MATMUL_EXACT_H_
#define LLMRT_BACKEND_CPU_QUANT_MATMUL_EXACT_H_

#include <cstdint>

#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// Scratch bytes QuantizedMatMulExact needs on a pool of `num_threads` for matrices of up to
// `cols` columns: two f32 rows per thread (the dequantized row and its un-permuted copy).
int64_t QuantizedMatMulExactScratchBytes(int32_t num_threads, int64_t cols);

// out[r, n] = sum_c w(n, c) * x[input_rows[r], perm(c)] + bias[n], like MatMul (kernels.h),
// for a quantized `w` (I8 ROW_MAJOR or I4 LANE_CHUNKS, with scales; see MatrixView), with x
// kept in f32.
// `scratch` holds QuantizedMatMulExactScratchBytes(pool.num_threads(), w.cols) bytes.
void QuantizedMatMulExact(ThreadPool& pool, const float* x, int64_t num_rows,
                          const int32_t* input_rows, const MatrixView& w, const float* bias,
                          const MatMulOutput* outputs, int32_t num_outputs, void* scratch);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_QUANT_MATMUL_EXACT_H_
