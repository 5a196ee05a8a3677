// Multi-row quantized matmul (prefill and batched decode) over I8 / I4 / MXFP4 weights: the kernel
// QuantizedMatMul (quant_matmul.h) hands activation rows to from kQuantGemmMinRows rows on, on
// x86 targets with AVX2 (and AVX-512 targets, which run the same 256-bit code, or with
// AVX512-VNNI the tiles of quant_vnni-inl.h).
//
// Numerics: exactly those of quant_matmul.h's decode GEMVs on the same tier, to the bit (on the
// AVX512-VNNI tiers I8 takes I4's per-chunk block sums; quant_vnni-inl.h). On AVX2: each (weight
// row, token) result is one f32 chain of 8 lanes over the blocks in column order, each block (I4:
// each chunk of 8 blocks, one per lane) contributing fma(float(exact int32 lane sums), weight_scale
// * act_scale) with the same lane layout, then the same horizontal sum, so a token's output is the
// same whether it runs alone through the decode GEMV or inside a prefill / batch of any size
// (QuantGemmTest.* checks M = 1 against rows of M = 16 and 512).
//
// Speed: the decode GEMV tiles stream weights once per step and keep activations in L1; here
// every weight block is unpacked once per tile of kGemmTokens tokens and every activation block
// loaded once per kGemmRows weight rows, the activation scale products are precomputed per
// chunk of 64 blocks (vectorized, whatever the group size), and threads split the rows into
// panels whose weights stay in L2 while all token tiles pass over them. On AVX512-VNNI I4 runs
// a 4 rows x 4 tokens tile on the packed codes instead, two tokens per 512-bit vector, and I8
// the same tile on panels laid out once per call in lane order (quant_gemm.cc's vnni512;
// docs/performance.md has the measurements).
//
// MXFP4 (FP4_E2M1 codes in I4's LANE_CHUNKS layout, one E8M0 scale per block) runs the I4 tiles:
// each code becomes 2 x its E2M1 value + 12 (0..24, unsigned for maddubs / vpdpbusd) by a byte
// shuffle, where I4 only masks its nibbles, the block sums lose 12 x sum(q) as I4's lose its zero
// point 8 x sum(q), and a block's weight scale is 2^(b - 127) / 2 (exact). The integer sums are the
// decode GEMV's (which keeps the codes signed, quant_matmul.cc), the f32 steps I4's, so MXFP4 rows
// too are the same to the bit alone or in any batch.
//
// Thread-safety: like kernels.h (pure apart from outputs; one call per pool).
#ifndef LLMRT_BACKEND_CPU_QUANT_GEMM_H_
#define LLMRT_BACKEND_CPU_QUANT_GEMM_H_

#include <cstdint>

#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// Activation rows from which QuantizedMatMul runs QuantizedGemm rather than its GEMV tiles
// (below it a step is bound by the weight stream, which the GEMV reads in long sequential runs).
inline constexpr int64_t kQuantGemmMinRows = 2;

// block >> QuantGroupShift(group_size, cols) is a 32-column block's quantization group in the
// x86 kernels (here and quant_matmul.cc's GEMVs): groups of 32 * 2^k columns give k, one group
// per row 63 (every block in group 0). Other group sizes (96, 160, ... columns, which GPTQ / AWQ
// checkpoints may carry) give -1: QuantizedMatMul runs those on its portable row tiles.
inline int QuantGroupShift(int32_t group_size, int64_t cols) {
  if (group_size == cols) return 63;
  for (int shift = 0; (int64_t{32} << shift) <= group_size; ++shift) {
    if ((int64_t{32} << shift) == group_size) return shift;
  }
  return -1;
}

// Activation rows as QuantizedMatMul quantized them (quant_matmul.h): per row `padded_cols`
// (QuantizedActivationCols) int8 codes (I4: in lane order, LaneOrderInt4Activations),
// padded_cols / 32 scales and the int32 sum of each block's codes.
struct QuantizedActivationRows {
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  const int32_t* sums = nullptr;
  int64_t num_rows = 0;
  int64_t padded_cols = 0;
};

// Reorders one I4 activation row of `padded_cols` codes (a multiple of 256, 32-byte aligned)
// from natural order into the GEMM's lane order: per chunk of 8 blocks, vector v holds columns
// 4v..4v+3 of block j in its 32-bit lane j (plan.proto's LANE_CHUNKS weights meet it without
// reordering), so that each block's products stay in their own lane. Read by the decode GEMV
// too. AVX2 / AVX-512 targets only, like QuantizedGemm.
void LaneOrderInt4Activations(int8_t* codes, int64_t padded_cols);

// out[r, n] = the quantized dot product of activation row r with weight row n + bias[n] (bias
// may be nullptr), columns split across `outputs` (sorted by begin, covering [0, w.rows)), for
// an I8 (ROW_MAJOR), I4 or FP4_E2M1 (LANE_CHUNKS) `w`. Runs only on x86 AVX2 / AVX-512 targets:
// QuantizedMatMul calls it from those bodies alone (elsewhere it aborts).
void QuantizedGemm(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                   const float* bias, const MatMulOutput* outputs, int32_t num_outputs);

// QuantizedGemm on AMX tiles (quant_gemm_amx.cc), bit-identical to the avx3_vnni tier's decode
// GEMVs: runs and returns true on the avx3_amx tier from kAmxMinTokens rows on (or with emulated
// tiles on any AVX3 tier with VNNI, below); false, having done nothing, otherwise.
bool QuantizedGemmOnAmx(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                        const float* bias, const MatMulOutput* outputs, int32_t num_outputs);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_QUANT_GEMM_H_
