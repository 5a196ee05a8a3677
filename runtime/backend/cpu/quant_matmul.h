// Matmul over quantized weights (dtype I8 / I4, plan.proto Quantization): x [M, K] f32 times
// w [N, K]^T, where w = (code - zero) * scale per group of columns.
//
// Decode is bound by weight bytes, so the weights are never widened to f32. Instead each
// activation row is quantized once per op to int8 per block of kQuantBlock = 32 columns with
// one f32 scale per block (d = max|x| / 127, q = round-to-nearest-even(x * 127 / max|x|)), in
// stored-column order when the matrix has an input permutation. Each (weight row, 32-column
// block) then contributes
//   weight_scale[row, group] * d[block] * isum,  isum = sum_c (code_c - zero) * q_c,
// where isum is an exact int32 (|code - zero| <= 128 and |q| <= 127: 32 products fit easily).
// On AVX2 (and AVX-512 targets without VNNI, which run the same 256-bit code) I8 isum comes from
// _mm256_maddubs_epi16 over |q| and sign(w, q) (the u8 x s8 instruction made s8 x s8; codes
// are in [-127, 127], so pairs sum to at most 2 * 127 * 127, below the int16 saturation) and
// _mm256_madd_epi16, one f32 FMA per block into 8 lanes; with one scale per row the FMA takes
// the activation scale alone and the row scale multiplies the lane sum once at the end. I4
// multiplies the unsigned codes directly, in plan.proto's LANE_CHUNKS layout where each block of
// a chunk of 8 keeps its exact sum in its own 32-bit lane (activations laid out alike),
// subtracts zero * sum(q) in int32 (the same integer as the scalar kernel's) and takes one FMA
// with the 8 combined scales. With AVX512-VNNI (dispatch.h's avx3_vnni tier) vpdpbusd computes
// the same exact lane sums (quant_vnni-inl.h: I4 to the bit like AVX2, I8 as I4's per-chunk block
// sums; the avx3_amx tier's GEMM gets the same sums from tdpbssd, quant_gemm_amx.cc). On arm64 the NEON tier sums each block in 4 int32 lanes (widening multiplies) for every
// row count; the NEON_DOTPROD and NEON_I8MM tiers run quant_neon-inl.h (sdot GEMV, sdot or smmla
// row tiles), one lane and one f32 chain per (row, token), so GEMV and multi-row agree to the bit
// there too. Other targets run the portable scalar loop, which is the reference. The integer
// products are exact on every target; only the order and grouping of the f32 accumulation differ
// (relative differences ~1e-7 of the sum of the terms' magnitudes).
//
// One activation row (decode) runs a GEMV (quant_matmul.cc) that reads long sequential streams:
// I8 4 rows per pass taken from the 4 quarters of the matrix, I4 one row after another; work
// items are claimed dynamically by the threads. From kQuantGemmMinRows rows on, AVX2 runs
// QuantizedGemm (quant_gemm.h) with the same per-(row, token) arithmetic, so a result never depends
// on the rows or tokens computed beside it.
//
// Thread-safety: like kernels.h (pure apart from outputs and scratch; one call per pool).
#ifndef LLMRT_BACKEND_CPU_QUANT_MATMUL_H_
#define LLMRT_BACKEND_CPU_QUANT_MATMUL_H_

#include <cstdint>

#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// Columns per activation block: one AVX2 vector of int8, and the I4 packing run
// (plan::kInt4Run).
inline constexpr int64_t kQuantBlock = 32;

// Whether `dtype` is a quantized matrix dtype these kernels read (I8, I4, FP4_E2M1: MXFP4, on x86
// through the GEMV and QuantizedGemm like I4, elsewhere quant_matmul.cc's Mxfp4RowTile for every
// row count).
bool IsQuantizedMatrix(plan::DType dtype);

// Bytes of the codes of a [rows, cols] I8 (rows * cols) or I4 / FP4_E2M1 (rows * cols / 2)
// matrix.
int64_t QuantizedMatrixBytes(plan::DType dtype, int64_t rows, int64_t cols);

// Columns of 8 blocks: the I4 kernels reduce 8 blocks' integer sums into one vector.
inline constexpr int64_t kQuantChunk = 8 * kQuantBlock;

// Columns of a quantized activation row in QuantizedMatMul's scratch: `cols` padded with zero
// blocks to whole chunks of 8 blocks.
int64_t QuantizedActivationCols(int64_t cols);

// Scratch bytes QuantizedMatMul needs for `num_rows` activation rows of `cols` columns: int8
// codes (QuantizedActivationCols per row) plus an f32 scale and an f32 sum per block. Size it at
// load for the largest step (max tokens x largest K) so a step never allocates.
int64_t QuantizedActivationBytes(int64_t num_rows, int64_t cols);

// One activation row quantized per block of 32 (see the file comment): codes[c] is the code of
// x[permutation[c]] (x[c] without a permutation), padded with zero codes to a whole block;
// scales[b] = max|x| / 127 over block b (0 for an all-zero block). Identical on every target.
void QuantizeActivationRow(const float* x, const int32_t* permutation, int64_t cols, int8_t* codes,
                           float* scales);

// out[r, n] = sum_c w(n, c) * x[input_rows[r], perm(c)] + bias[n], like MatMul (kernels.h),
// for a quantized `w` (I8 ROW_MAJOR or I4 LANE_CHUNKS, with scales; see MatrixView). `scratch`
// holds QuantizedActivationBytes(num_rows, w.cols) bytes, 32-byte aligned.
void QuantizedMatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                     const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                     int32_t num_outputs, void* scratch);

// Row `row` of a quantized `w` dequantized to f32 (cols floats) in stored-column order
// (embedding tables have no permutation).
void QuantizedRowToF32(const MatrixView& w, int64_t row, float* out);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_QUANT_MATMUL_H_
