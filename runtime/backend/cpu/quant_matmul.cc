// Quantized matmul kernels (see quant_matmul.h), compiled per SIMD target by Highway. The
// integer dot products use AVX2 intrinsics inside the AVX2 and AVX-512 target bodies and NEON
// intrinsics inside the AArch64 NEON body (Highway 1.0 has no int8 pairwise multiply-add op):
// widening multiplies on the NEON tier (sdot when the whole build enables dotprod), sdot and
// smmla in functions compiled for those extensions on the NEON_DOTPROD / NEON_I8MM tiers
// (quant_neon-inl.h); every other target runs the scalar loops.
#include "runtime/backend/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/quant_gemm.h"
#include "runtime/backend/cpu/region_schedule.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/quant_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/backend/cpu/quant_vnni-inl.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

// Every x86 target at or above AVX2 (AVX3 and its variants included) has the 256-bit integer
// instructions, and HWY_BEFORE_NAMESPACE enables them for this target's code.
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#undef LLMRT_QUANT_AVX2
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define LLMRT_QUANT_AVX2 1
#else
#define LLMRT_QUANT_AVX2 0
#endif
// Arm: the NEON target (AArch64); SVE targets run the scalar loops.
#undef LLMRT_QUANT_NEON
#if HWY_ARCH_ARM_A64 && HWY_TARGET == HWY_NEON
#define LLMRT_QUANT_NEON 1
#include <arm_neon.h>
#else
#define LLMRT_QUANT_NEON 0
#endif

// Activation rows per pass over the weights (with RowsPerPass weight rows: the tile). Every
// token count splits alike and each (weight row, token) pair has one accumulator whatever the
// tile, so a token's result never depends on the tokens or rows beside it.
constexpr int kTokenTile = 4;
// Weight rows per work item: 16 rows of K = 5632 I8 codes are 88 KiB, which stay in L2 while
// all token tiles of the step pass over them.
constexpr int64_t kRowsPerItem = 16;

struct ActivationTile {
  const int8_t* codes[kTokenTile];
  const float* scales[kTokenTile];
};

// The weight codes and per-group parameters of one matrix row.
struct WeightRow {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint8_t* zero_points;          // nullptr: symmetric
  const uint8_t* exponents = nullptr;  // FP4_E2M1: E8M0 scales (and `scales` null)
};

WeightRow RowOf(const MatrixView& w, int64_t row) {
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = QuantizedMatrixBytes(w.dtype, 1, w.cols);
  if (w.dtype == plan::FP4_E2M1) {
    return {w.data + row * row_bytes, nullptr, nullptr, w.exponents + row * groups};
  }
  return {w.data + row * row_bytes, w.scales + row * groups,
          w.zero_points != nullptr ? w.zero_points + row * groups : nullptr};
}

// MXFP4 (FP4_E2M1 codes, E8M0 scales; plan.proto Quantization). Each 32-column block is one
// scale group and one activation block; its integer sum of doubled E2M1 values
// (plan::E2M1Doubled, |v| <= 12) times activation codes is exact.
// - x86 (AVX2 and up): the decode GEMV (GemvMxfp4 below) and QuantizedGemm's tiles, with the
//   lane arithmetic of quant_vnni-inl.h (8 blocks per FMA), so GEMV and GEMM agree to the bit.
// - Other targets: Mxfp4RowTile for every row count, the block adding 2^(b - 127) / 2 * d * isum
//   in f32 block by block, so a token's result does not depend on the rows or tokens beside it.
#if LLMRT_QUANT_AVX2
// x86: a chunk of 8 blocks at a time, from plan.proto's LANE_CHUNKS layout against activations in
// lane order (LaneOrderInt4Activations), as ChunkSumsInt4 reads I4: per nibble half, |v| and
// v's sign come from two table shuffles, the sign moves onto q (sign_epi8), and maddubs
// multiplies the unsigned |v| <= 12 by the signed q: pairs reach 2 * 12 * 127 = 3048, a lane's
// 8 pairs 24384 < 32767 in int16, widened once: the exact integers, block j in lane j.
// Slice `slice` of a full LANE_CHUNKS chunk (block j in lane j) as nibbles, and the lane-order
// activations (LaneOrderInt4Activations) they multiply: low nibbles meet vector 2 slice, high
// nibbles vector 2 slice + 1.
struct ChunkSlice {
  __m256i low, high, x_low, x_high;
};
HWY_INLINE ChunkSlice LoadChunkSlice(const uint8_t* chunk, const int8_t* x, int slice) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * slice));
  return {_mm256_and_si256(packed, mask), _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 64 * slice)),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 64 * slice + 32))};
}

HWY_INLINE __m256i Mxfp4ChunkSums(const uint8_t* chunk, const int8_t* x) {
  const __m256i magnitudes = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12, 0,
                                              1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
  // Codes 0 and 8 are zero either way: any sign.
  const __m256i signs = _mm256_setr_epi8(1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, 1,
                                         1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1);
  auto products = [&](__m256i codes, __m256i q) HWY_ATTR {
    return _mm256_maddubs_epi16(_mm256_shuffle_epi8(magnitudes, codes),
                                _mm256_sign_epi8(q, _mm256_shuffle_epi8(signs, codes)));
  };
  __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int slice = 0; slice < 4; ++slice) {
    const ChunkSlice v = LoadChunkSlice(chunk, x, slice);
    sums = _mm256_add_epi16(sums,
                            _mm256_add_epi16(products(v.low, v.x_low), products(v.high, v.x_high)));
  }
  return _mm256_madd_epi16(sums, _mm256_set1_epi16(1));
}

// With VNNI (vpdpbusd multiplies unsigned by signed bytes): the 8 block sums of the biased codes
// 2 v + kMxfp4Bias (one table shuffle per 32 codes, as the GEMM tiles decode them), which the
// caller turns into Mxfp4ChunkSums's integers by subtracting kMxfp4Bias x sum(q). AVX512-VNNI:
// one 512-bit step per slice, the slice's low nibbles in the lower half and its high nibbles in
// the upper (a masked shift) against lane-order vectors 2 slice and 2 slice + 1, which lie side by
// side; the halves are added at the end. AVX-VNNI (the AVX2 body): two 256-bit steps per slice.
// Per 64 codes: 4 vector operations and one vpdpbusd (512-bit) against Mxfp4ChunkSums's ~14.
HWY_INLINE __m256i Mxfp4BiasedChunkSumsVnni(const uint8_t* chunk, const int8_t* x) {
#if LLMRT_QUANT_VNNI512
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4BiasedTable.bytes)));
  __m512i sums = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int slice = 0; slice < 4; ++slice) {
    const __m512i bytes = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * slice)));
    const __m512i nibbles =
        _mm512_and_si512(_mm512_mask_srli_epi16(bytes, 0xffff0000u, bytes, 4), mask);
    sums = vnni::DotBytes(sums, _mm512_shuffle_epi8(table, nibbles),
                          _mm512_loadu_si512(x + 64 * slice));
  }
  return _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
#else
  const __m256i table =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kMxfp4BiasedTable.bytes));
  __m256i sums = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int slice = 0; slice < 4; ++slice) {
    const ChunkSlice v = LoadChunkSlice(chunk, x, slice);
    sums = vnni::DotBytes(vnni::DotBytes(sums, _mm256_shuffle_epi8(table, v.low), v.x_low),
                          _mm256_shuffle_epi8(table, v.high), v.x_high);
  }
  return sums;
#endif
}

#else
// Other targets: a block's 16 code bytes (its 4 slices, plan::Int4SliceOffset) decoded with one
// table shuffle per nibble half, against activations split to match (SplitMxfp4Activations):
// the low nibbles' columns first, then the high nibbles'.
HWY_INLINE void DecodeMxfp4Block(const uint8_t* row_codes, int64_t cols, int64_t block, int8_t* low,
                                 int8_t* high) {
  // Slice v of run `block` lies at base + v * step (plan::Int4SliceOffset).
  const int64_t base = plan::Int4SliceOffset(cols, block, 0);
  const int64_t step = 4 * plan::Int4RunsInChunk(cols, block);
  alignas(16) uint8_t bytes[16];
  for (int64_t slice = 0; slice < 4; ++slice) {
    std::memcpy(bytes + 4 * slice, row_codes + base + slice * step, 4);
  }
#if HWY_TARGET == HWY_SCALAR
  for (int i = 0; i < 16; ++i) {
    low[i] = plan::E2M1Doubled(bytes[i] & 0x0f);
    high[i] = plan::E2M1Doubled(bytes[i] >> 4);
  }
#else
  alignas(16) static constexpr int8_t kDoubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                      0, -1, -2, -3, -4, -6, -8, -12};
  const hn::Full128<uint8_t> du8;
  const hn::Full128<int8_t> di8;
  const auto codes = hn::Load(du8, bytes);
  const auto table = hn::Load(di8, kDoubled);
  hn::StoreU(hn::TableLookupBytes(table, hn::BitCast(di8, hn::And(codes, hn::Set(du8, 0x0f)))), di8,
             low);
  hn::StoreU(hn::TableLookupBytes(table, hn::BitCast(di8, hn::ShiftRight<4>(codes))), di8, high);
#endif
}

template <int kTokens>
void Mxfp4RowTile(const WeightRow& row, int64_t cols, const ActivationTile& tile, float* result) {
  float acc[kTokens] = {};
  for (int64_t block = 0; block < cols / kQuantBlock; ++block) {
    int8_t values[kQuantBlock];
    DecodeMxfp4Block(row.codes, cols, block, values, values + kQuantBlock / 2);
    const float weight_scale = plan::E8M0ToF32(row.exponents[block]) * 0.5f;
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* x = tile.codes[t] + block * kQuantBlock;
      // Exact in int32 (|v * q| <= 12 * 127), so any summation order gives the same integer.
      int32_t isum = 0;
      for (int64_t c = 0; c < kQuantBlock; ++c) isum += values[c] * x[c];
      acc[t] += weight_scale * tile.scales[t][block] * static_cast<float>(isum);
    }
  }
  for (int t = 0; t < kTokens; ++t) result[t] = acc[t];
}

// Reorders each 32-code block of an activation row as DecodeMxfp4Block lays out a weight
// block: position 4 v + i holds column 8 v + i (the low nibble of slice v's byte i), position
// 16 + 4 v + i column 8 v + 4 + i (its high nibble).
void SplitMxfp4Activations(int8_t* codes, int64_t padded_cols) {
  for (int64_t begin = 0; begin < padded_cols; begin += kQuantBlock) {
    int8_t block[kQuantBlock];
    for (int64_t v = 0; v < 4; ++v) {
      for (int64_t i = 0; i < 4; ++i) {
        block[4 * v + i] = codes[begin + 8 * v + i];
        block[16 + 4 * v + i] = codes[begin + 8 * v + 4 + i];
      }
    }
    std::memcpy(codes + begin, block, kQuantBlock);
  }
}
#endif  // LLMRT_QUANT_AVX2

// The integer dot product of `count` (<= 32) columns of block `block` of a row of `cols`
// columns with activation codes (I4: a whole block, from its 4 slices, plan::Int4SliceOffset).
template <bool kInt4>
int32_t BlockDot(const uint8_t* row_codes, int64_t cols, int64_t block, int zero, const int8_t* x,
                 int64_t count) {
  int32_t sum = 0;
  if constexpr (kInt4) {
    for (int64_t slice = 0; slice < 4; ++slice) {
      const uint8_t* bytes = row_codes + plan::Int4SliceOffset(cols, block, slice);
      for (int64_t i = 0; i < 4; ++i) {
        sum += ((bytes[i] & 0x0f) - zero) * x[8 * slice + i];
        sum += ((bytes[i] >> 4) - zero) * x[8 * slice + 4 + i];
      }
    }
  } else {
    const int8_t* codes = reinterpret_cast<const int8_t*>(row_codes) + block * kQuantBlock;
    for (int64_t c = 0; c < count; ++c) sum += codes[c] * x[c];
  }
  return sum;
}

// result[t] = the row's dot product with activation row t of the tile, portable version.
template <int kTokens, bool kInt4>
void RowTileScalar(const WeightRow& row, int64_t cols, int32_t group_size,
                   const ActivationTile& tile, float* result) {
  float acc[kTokens] = {};
  const int64_t blocks = (cols + kQuantBlock - 1) / kQuantBlock;
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t group = block * kQuantBlock / group_size;
    const float weight_scale = plan::F16ToF32(row.scales[group]);
    const int zero = kInt4 ? (row.zero_points != nullptr ? row.zero_points[group] : 8) : 0;
    const int64_t count = std::min(kQuantBlock, cols - block * kQuantBlock);
    for (int t = 0; t < kTokens; ++t) {
      const int32_t isum =
          BlockDot<kInt4>(row.codes, cols, block, zero, tile.codes[t] + block * kQuantBlock, count);
      acc[t] += weight_scale * tile.scales[t][block] * static_cast<float>(isum);
    }
  }
  for (int t = 0; t < kTokens; ++t) result[t] = acc[t];
}

#if LLMRT_QUANT_AVX2
// The 32 I8 codes of one block.
HWY_INLINE __m256i LoadBlock(const uint8_t* row_codes, int64_t block) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_codes + block * kQuantBlock));
}

// Blocks per chunk of a row whose combined scales are computed up front (64 blocks: 2048
// columns; the stack buffer is at most 8 (row, token) pairs x 64 floats, 2 KiB).
constexpr int64_t kScaleChunk = 64;

// combined[t][b - begin] = weight scale of block b * activation scale of token t's block b,
// for blocks [begin, end): eight at a time with F16C when each block has its own weight scale
// (groups of 32), else one weight-scale conversion per group. The same two f32 factors and one
// rounding as the scalar kernel's weight_scale * activation_scale.
template <int kTokens>
HWY_INLINE void CombineScales(const WeightRow& row, int64_t begin, int64_t end, int group_shift,
                              const float* const* x_scales, float (*combined)[kScaleChunk]) {
  int64_t block = begin;
  if (group_shift == 0) {
    for (; block + 8 <= end; block += 8) {
      const __m256 weight_scales =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.scales + block)));
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        _mm256_storeu_ps(combined[t] + (block - begin),
                         _mm256_mul_ps(weight_scales, _mm256_loadu_ps(x_scales[t] + block)));
      }
    }
  }
  for (; block < end; ++block) {
    const float weight_scale = _cvtsh_ss(row.scales[block >> group_shift]);
    for (int t = 0; t < kTokens; ++t) {
      combined[t][block - begin] = weight_scale * x_scales[t][block];
    }
  }
}

// ---- Decode GEMV: one activation row (kernels for QuantizedGemvInt8Avx2 / QuantizedGemvInt4Avx2)
// ----
//
// A decode step reads each weight byte once, from DRAM, and a core keeps enough misses in
// flight to use its bandwidth only if it spends few instructions per byte: the row-group kernels
// above spent 12.9 (I8) and 12.5 (I4) instructions per 32 weights at M = 1 (callgrind,
// 5632 x 2048, g32), half of them outside the inner loop (scale expansion per chunk and
// per row group), and moved ~10 GB/s of the ~19 GB/s a core reads. These kernels:
// - I8: |x| once per block for all kRows rows and sign(w, x) per row (codes are in
//   [-127, 127], plan.proto, so the sign never meets -128): 3 integer instructions, a convert
//   and an FMA per row and block; with one scale per row (the compiler's default for int8) the
//   FMA takes the activation block scale, shared by the rows, and the row scale multiplies the
//   sum once at the end.
// - I4: the exact integer sums of 8 blocks, one per lane straight from the LANE_CHUNKS layout
//   (plan.proto), the zero point subtracted in int32 (isum - zero * sum(q): exact, the same
//   integer as the scalar kernel's), then one convert and one FMA with the 8 combined scales
//   per 8 blocks.

// The 8 exact block sums sum_c code_c * q_c of a chunk of 8 I4 blocks, one per 32-bit lane:
// codes in plan.proto's LANE_CHUNKS layout (4 slices of 32 bytes, block j in lane j), activation
// codes in lane order (LaneOrderInt4Activations: the low nibbles of slice v meet vector 2v, the
// high nibbles vector 2v + 1). AVX2: maddubs pairs reach 2 * 15 * 127 = 3810, so the 8 products
// of a lane are summed in int16 (30480 < 32767) and widened once. kVnni: vpdpbusd sums each
// lane's 4 products straight into int32 (quant_vnni-inl.h); the same integers.
template <bool kVnni>
HWY_INLINE __m256i ChunkSumsInt4(const uint8_t* chunk, const int8_t* x) {
  __m256i sums = _mm256_setzero_si256();
  // kVnni: the low and high nibbles' products in two vpdpbusd chains of 4, added once (int32:
  // exact, so the same integers), half the latency of one chain of 8, which bounded a row of one
  // chunk (the experts' down projections, K = 256). Zen 5, 1 thread, medians of 3 alternating:
  // BM_ExpertMatMul/2/1/1/0/1 43.9 -> 41.0 us, BM_QuantMatMul<4, false> decode 5632 x 2048
  // 167 -> 148 us, 2048 x 5632 176 -> 153, BM_QuantGemvL3 5632 x 2048 125 -> 113. Four chains of
  // 2 measured no better (42.6 against 43.4 us on the experts).
  __m256i high_sums = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int slice = 0; slice < 4; ++slice) {
    const ChunkSlice v = LoadChunkSlice(chunk, x, slice);
    if constexpr (kVnni) {
      sums = vnni::DotBytes(sums, v.low, v.x_low);
      high_sums = vnni::DotBytes(high_sums, v.high, v.x_high);
    } else {
      sums = _mm256_add_epi16(sums, _mm256_add_epi16(_mm256_maddubs_epi16(v.low, v.x_low),
                                                     _mm256_maddubs_epi16(v.high, v.x_high)));
    }
  }
  if constexpr (kVnni) return _mm256_add_epi32(sums, high_sums);
  return _mm256_madd_epi16(sums, _mm256_set1_epi16(1));
}

// result[r] = dot(weight row r, x) for a group of kRows I8 rows. kRowScale: one scale per row
// (group_shift 63), else combined scales per block.
// kVnni (the AVX2 body on the avx2_vnni tier): each block's 8 lane sums from vpdpbusd
// (vnni::BlockSums8), the same integers, so the same results to the bit.
template <int kRows, bool kRowScale, bool kVnni>
void GemvInt8Avx2(const WeightRow* rows, int64_t cols, int group_shift, const int8_t* x_codes,
                  const float* x_scales, float* result) {
  WeightRow w[kRows];
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w[r] = rows[r];
    acc[r] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const int64_t full_blocks = cols / kQuantBlock;
  alignas(32) float combined[kRows][1][kScaleChunk];
  for (int64_t chunk = 0; chunk < full_blocks; chunk += kScaleChunk) {
    const int64_t chunk_end = std::min(full_blocks, chunk + kScaleChunk);
    if constexpr (!kRowScale) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        CombineScales<1>(w[r], chunk, chunk_end, group_shift, &x_scales, combined[r]);
      }
    }
    auto accumulate = [&](int64_t block) HWY_ATTR {
      const __m256i x =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(x_codes + block * kQuantBlock));
      // AVX2: |x| for maddubs; VNNI: each lane's -128 x sum(x) to start vpdpbusd from.
      __m256i shared;
      if constexpr (kVnni) {
        shared = vnni::BlockStart8(x, bias);
      } else {
        shared = _mm256_abs_epi8(x);
      }
      const __m256 activation_scale = _mm256_broadcast_ss(x_scales + block);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        __m256i products;
        if constexpr (kVnni) {
          products = vnni::BlockSums8(shared, LoadBlock(w[r].codes, block), x, bias);
        } else {
          products = _mm256_madd_epi16(
              _mm256_maddubs_epi16(shared, _mm256_sign_epi8(LoadBlock(w[r].codes, block), x)),
              ones);
        }
        acc[r] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(products),
            kRowScale ? activation_scale : _mm256_broadcast_ss(&combined[r][0][block - chunk]),
            acc[r]);
      }
    };
    for (int64_t block = chunk; block < chunk_end; ++block) accumulate(block);
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    result[r] = SumLanes8(acc[r]);
    if constexpr (kRowScale) result[r] *= _cvtsh_ss(w[r].scales[0]);
  }
  // One scale per row and cols not a multiple of 32: the partial last block.
  if (full_blocks * kQuantBlock < cols) {
    for (int r = 0; r < kRows; ++r) {
      const int32_t isum =
          BlockDot<false>(w[r].codes, cols, full_blocks, 0, x_codes + full_blocks * kQuantBlock,
                          cols - full_blocks * kQuantBlock);
      result[r] += _cvtsh_ss(w[r].scales[0]) * x_scales[full_blocks] * static_cast<float>(isum);
    }
  }
}

// result[r] = dot(rows[r], x) for kRows I8 rows: GemvInt8Avx2 (with AVX-VNNI sums on the AVX2
// body's kVnni), or on the AVX3 body's kVnni vnni::GemvI8, in the arithmetic of the GEMM's
// 512-bit tiles (quant_vnni-inl.h).
template <int kRows, bool kRowScale, bool kVnni>
HWY_INLINE void GemvInt8(const WeightRow* rows, int64_t cols, int group_shift,
                         const int8_t* x_codes, const float* x_scales, float* result) {
  if constexpr (kVnni && LLMRT_QUANT_VNNI512) {
    const uint8_t* codes[kRows];
    const uint16_t* scales[kRows];
    for (int r = 0; r < kRows; ++r) {
      codes[r] = rows[r].codes;
      scales[r] = rows[r].scales;
    }
    // Each row's next bytes (in a region: the next row's) prefetched 2 KiB ahead of the loads,
    // as the f16 decode GEMV does (matmul.cc, kPrefetchAheadBytes): Qwen3-MoE-shape int8 tg64,
    // 1 thread, Zen 5, alternating runs: 61.4 / 64.5 tok/s without, 65.4 / 67.6 with. The I4
    // GEMV gained from it only with its scales prefetched too (PrefetchInt4Ahead): groups of 32
    // make them streams of their own, where the int8 plans have one scale per row.
    vnni::GemvI8<kRows>(codes, scales, x_codes, x_scales, cols, group_shift, result,
                        /*prefetch_offset=*/2048);
  } else {
    GemvInt8Avx2<kRows, kRowScale, kVnni>(rows, cols, group_shift, x_codes, x_scales, result);
  }
}
#endif  // LLMRT_QUANT_AVX2

#if LLMRT_QUANT_AVX2 || LLMRT_QUANT_NEON
// The decode GEMVs take the rows of each pass from kGemvStreams separate regions of the matrix
// (rows i, i + Q, i + 2Q, i + 3Q with Q = rows / 4; region_schedule.h, shared with the f16 panel
// matmul), so a thread reads 4 long sequential streams, as the bandwidth probe does, rather than
// 4 adjacent rows (4 streams of one row each, which the hardware prefetcher keeps re-learning)
// or one row after another (one stream: too few misses in flight for one core to use its
// bandwidth). Measured:
// - Zen 3 (AVX2, scratch program, 1 GiB of I8 rows, K = 2048): 21.0 / 31.3 GB/s at 1 / 2
//   threads against 12.6 / 17.9 for adjacent rows, and 16.7 / 25.8 for a 4-row panel layout;
// - Zen 5 (AVX-512, llmrt_kernels_bench BM_QuantMatMul<4, false>/5632/2048/1, I4 g32): one row
//   after another read 29 / 33 GB/s at 1 / 2 threads; see docs/performance.md for 4 regions.
constexpr int kGemvStreams = 4;
// Software prefetch only in the AVX-512 VNNI GEMVs (GemvInt8, PrefetchInt4Ahead): elsewhere, with
// 4 long streams the hardware prefetcher keeps up (prefetching 256 B - 2 KiB ahead in each
// stream made no difference beyond the noise on Zen 3).

// QuantizedMatMul for one activation row (decode), over rows of `row_bytes` code bytes, on
// ForEachRegionItem's items (rows [i, i + n) of each of the 4 regions; the rows past the regions,
// at most 3, one at a time as the last item). `kernel.Run<kRows>(rows, result)` computes
// result[r] = dot(rows[r], x) for kRows rows (kGemvStreams or 1), each row's arithmetic
// independent of the rows beside it.
template <typename Kernel>
void GemvOverRegions(ThreadPool& pool, const MatrixView& w, int64_t row_bytes, const float* bias,
                     const MatMulOutput* outputs, int32_t num_outputs, const Kernel& kernel) {
  const int64_t groups = w.cols / w.group_size;
  // RowOf without its two divisions per row (~5% of the instructions at K = 2048).
  const bool mxfp4 = w.dtype == plan::FP4_E2M1;
  auto row_of = [&](int64_t row) {
    if (mxfp4)
      return WeightRow{w.data + row * row_bytes, nullptr, nullptr, w.exponents + row * groups};
    return WeightRow{w.data + row * row_bytes, w.scales + row * groups,
                     w.zero_points != nullptr ? w.zero_points + row * groups : nullptr};
  };
  // Output row `row` = value + bias; `cursor` is the output that held its stream's previous row
  // (rows rise within each stream of an item).
  auto store = [&](int32_t& cursor, int64_t row, float value) {
    while (cursor + 1 < num_outputs && row >= outputs[cursor + 1].begin) ++cursor;
    outputs[cursor].data[row - outputs[cursor].begin] =
        value + (bias != nullptr ? bias[row] : 0.0f);
  };
  ForEachRegionItem(
      pool, w.rows, kGemvStreams, row_bytes,
      [&](int64_t begin, int64_t end, int64_t region) {
        int32_t output[kGemvStreams] = {};
        WeightRow rows[kGemvStreams];
        float result[kGemvStreams];
        for (int64_t i = begin; i < end; ++i) {
          for (int s = 0; s < kGemvStreams; ++s) rows[s] = row_of(s * region + i);
          kernel.template Run<kGemvStreams>(rows, result);
          for (int s = 0; s < kGemvStreams; ++s) store(output[s], s * region + i, result[s]);
        }
      },
      [&](int64_t begin, int64_t end) {
        int32_t output = 0;
        WeightRow rows[1];
        float result[1];
        for (int64_t row = begin; row < end; ++row) {
          rows[0] = row_of(row);
          kernel.template Run<1>(rows, result);
          store(output, row, result[0]);
        }
      });
}
#endif  // LLMRT_QUANT_AVX2 || LLMRT_QUANT_NEON

#if LLMRT_QUANT_AVX2

// The I8 GEMV's kernel for GemvOverRegions.
template <bool kRowScale, bool kVnni>
struct GemvInt8Kernel {
  int64_t cols;
  int group_shift;
  const int8_t* x_codes;
  const float* x_scales;
  template <int kRows>
  HWY_INLINE void Run(const WeightRow* rows, float* result) const {
    GemvInt8<kRows, kRowScale, kVnni>(rows, cols, group_shift, x_codes, x_scales, result);
  }
};

// Software prefetch of the I4 and MXFP4 decode GEMVs on the AVX-512 VNNI tiers: a row's codes
// 2 KiB ahead (kInt4PrefetchBlocks blocks; in a region, the next rows') and the scales (I4: and
// zero points; MXFP4: the E8M0 bytes) of the same blocks, which are streams of their own: 4
// regions of codes and 4 of scales are 8 streams, more than the hardware prefetcher keeps up
// with. Qwen3-MoE-shape int4 tg64, Zen 5, 1 thread, alternating runs: 83.1 / 86.0 / 88.4 / 86.6
// tok/s without, 92.3 / 93.7 / 92.5 / 94.7 with both; the codes alone (the I8 GEMV's prefetch)
// or the scales alone measured no gain, nor did 1 KiB (88.6 / 89.7) or 4 KiB (87.5 / 87.9)
// ahead. MXFP4 from DRAM (BM_Mxfp4Gemv, 5632 x 2048 and 2048 x 5632): 33.7 -> 38.7 GB/s at
// 1 thread, 49.5 -> 52-53 at 2. Both pay ~5% where the rows are already in cache
// (BM_ExpertMatMul, whose few experts stay in L2 / L3 from call to call). Without AVX-512 VNNI
// (AVX2, Zen 3) the codes' prefetch made no difference beyond the noise; the scales' was not
// measured there.
constexpr int64_t kInt4PrefetchBlocks = 2048 / (kQuantBlock / 2);
HWY_INLINE void PrefetchInt4Ahead(const WeightRow& row, int64_t block, int group_shift) {
  const char* codes = reinterpret_cast<const char*>(row.codes + block * (kQuantBlock / 2));
  _mm_prefetch(codes + 2048, _MM_HINT_T0);
  _mm_prefetch(codes + 2048 + 64, _MM_HINT_T0);
  // Past the row's groups these are the next rows' (a prefetch never faults).
  const int64_t group = (block + kInt4PrefetchBlocks) >> group_shift;
  if (row.exponents != nullptr) {
    _mm_prefetch(reinterpret_cast<const char*>(row.exponents + group), _MM_HINT_T0);
    return;
  }
  _mm_prefetch(reinterpret_cast<const char*>(row.scales + group), _MM_HINT_T0);
  if (row.zero_points != nullptr) {
    _mm_prefetch(reinterpret_cast<const char*>(row.zero_points + group), _MM_HINT_T0);
  }
}

// result[r] = dot(weight row r, x) for kRows I4 rows, a chunk of 8 blocks at a time: the exact
// integer sums of the 8 blocks (ChunkSumsInt4), minus zero * sum(q) in int32, times the 8
// combined scales, into one f32 accumulator per row — the same operations in the same order as
// QuantizedGemm's per (row, token), so a token's result does not depend on the batch around it
// nor on the rows computed beside it. x_codes are in lane order, x_sums int32
// (ActivationBlockSums). ~31 instructions per chunk of a row on AVX2 (4 loads, 12 nibble ops, 8
// maddubs, 8 adds, 1 madd) against ~65 for runs of 32 contiguous columns, which needed a shuffle
// reduction to bring 8 block sums into 8 lanes.
// On AVX512-VNNI the same lanes two rows per 512-bit vector (row r in lanes 0-7, r + 1 in 8-15,
// the activation vectors broadcast to both halves; the same bits) were measured and not kept:
// faster from L3 (BM_QuantGemvL3<4, false>, 1 thread, 5632 x 2048: 52 -> 59 GB/s; 2048 x 5632:
// 58 -> 72) but not from DRAM (BM_QuantMatMul: 33-36 GB/s either way), slower on the experts'
// short rows (BM_ExpertMatMul int4 down, K = 256, 1 thread: 46 -> 64 us: with one chunk a row,
// two rows share one vpdpbusd chain's latency), and slower end to end (Qwen3-MoE-shape int4
// tg64, 1 thread: 86.7 / 86.3 against 92.3 / 93.7 tok/s, both with PrefetchInt4Ahead). Eight
// rows a call (two adjacent rows of each region, 4 zmm) were faster still from cache but read
// DRAM slower (8 streams): 60.7 against 83.5 tok/s end to end.
template <int kRows, bool kZeroPoints, bool kVnni>
void GemvInt4Avx2(const WeightRow* rows, int64_t cols, int group_shift, const int8_t* x_codes,
                  const float* x_scales, const int32_t* x_sums, float* result) {
  const int64_t blocks = cols / kQuantBlock;
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  // Blocks [block, block + count) of row r (count <= 8; lanes past count have zero codes,
  // activations, scales and sums).
  auto accumulate = [&](int r, const uint8_t* chunk, int64_t block, int64_t count,
                        __m256 activation_scales, __m256i activation_sums) HWY_ATTR {
    const __m256i isums = ChunkSumsInt4<kVnni>(chunk, x_codes + block * kQuantBlock);
    const __m256i corrections =
        kZeroPoints ? _mm256_mullo_epi32(ZeroLanes8(rows[r].zero_points, block, count, group_shift),
                                         activation_sums)
                    : _mm256_slli_epi32(activation_sums, 3);  // zero point 8
    acc[r] = _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm256_sub_epi32(isums, corrections)),
        _mm256_mul_ps(ScaleLanes8(rows[r].scales, block, count, group_shift), activation_scales),
        acc[r]);
  };
  int64_t block = 0;
  for (; block + 8 <= blocks; block += 8) {
    const __m256 activation_scales = _mm256_loadu_ps(x_scales + block);
    const __m256i activation_sums =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_sums + block));
    if constexpr (kVnni && LLMRT_QUANT_VNNI512) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) PrefetchInt4Ahead(rows[r], block, group_shift);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      accumulate(r, rows[r].codes + block * (kQuantBlock / 2), block, 8, activation_scales,
                 activation_sums);
    }
  }
  if (block < blocks) {
    // The row's last, shorter chunk, laid out as a full one (nothing past the row is read: the
    // end of the mapped plan may follow).
    const int64_t count = blocks - block;
    alignas(32) float scales[8] = {};
    alignas(32) int32_t sums[8] = {};
    for (int64_t i = 0; i < count; ++i) {
      scales[i] = x_scales[block + i];
      sums[i] = x_sums[block + i];
    }
    for (int r = 0; r < kRows; ++r) {
      alignas(32) uint8_t chunk[plan::kInt4ChunkBytes];
      plan::ExpandInt4Chunk(rows[r].codes, cols, block, chunk);
      accumulate(r, chunk, block, count, _mm256_load_ps(scales),
                 _mm256_load_si256(reinterpret_cast<const __m256i*>(sums)));
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) result[r] = SumLanes8(acc[r]);
}

// The I4 GEMV's kernel for GemvOverRegions.
template <bool kZeroPoints, bool kVnni>
struct GemvInt4Kernel {
  int64_t cols;
  int group_shift;
  const int8_t* x_codes;
  const float* x_scales;
  const int32_t* x_sums;
  template <int kRows>
  HWY_INLINE void Run(const WeightRow* rows, float* result) const {
    GemvInt4Avx2<kRows, kZeroPoints, kVnni>(rows, cols, group_shift, x_codes, x_scales, x_sums,
                                            result);
  }
};

// result[r] = dot(weight row r, x) for kRows MXFP4 rows, a chunk of 8 blocks at a time: the
// exact block sums (Mxfp4ChunkSums; kVnni: Mxfp4BiasedChunkSumsVnni minus kMxfp4Bias x sum(q),
// x_sums as ActivationBlockSums gives them), one convert and one FMA with the 8 weight x activation
// scales into one 8-lane f32 chain per row, as QuantizedGemm's MXFP4 tiles compute each (row,
// token) (quant_vnni-inl.h), so a token's result does not depend on the batch around it. x_codes
// are in lane order, x_scales padded with zero blocks to whole chunks (QuantizedMatMulImpl).
// Per block this spends a quarter of Mxfp4RowTile's scalar f32 steps.
template <int kRows, bool kVnni>
void GemvMxfp4(const WeightRow* rows, int64_t cols, const int8_t* x_codes, const float* x_scales,
               const int32_t* x_sums, float* result) {
  const int64_t blocks = cols / kQuantBlock;
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t block = 0; block < blocks; block += 8) {
    const int64_t count = std::min<int64_t>(8, blocks - block);
    const __m256 activation_scales = _mm256_loadu_ps(x_scales + block);
    __m256i corrections = _mm256_setzero_si256();
    if constexpr (kVnni) {
      corrections =
          _mm256_mullo_epi32(_mm256_set1_epi32(kMxfp4Bias),
                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_sums + block)));
    }
    if constexpr (kVnni && LLMRT_QUANT_VNNI512) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) PrefetchInt4Ahead(rows[r], block, 0);
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* chunk = rows[r].codes + block * (kQuantBlock / 2);
      alignas(32) uint8_t expanded[plan::kInt4ChunkBytes];
      if (count < 8) {
        // The row's last, shorter chunk, laid out as a full one (nothing past the row is read).
        plan::ExpandInt4Chunk(rows[r].codes, cols, block, expanded);
        chunk = expanded;
      }
      __m256i isums;
      if constexpr (kVnni) {
        isums = _mm256_sub_epi32(Mxfp4BiasedChunkSumsVnni(chunk, x_codes + block * kQuantBlock),
                                 corrections);
      } else {
        isums = Mxfp4ChunkSums(chunk, x_codes + block * kQuantBlock);
      }
      acc[r] = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(isums),
          _mm256_mul_ps(Mxfp4Scales8(rows[r].exponents, block, count), activation_scales), acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) result[r] = SumLanes8(acc[r]);
}

// The MXFP4 GEMV's kernel for GemvOverRegions.
template <bool kVnni>
struct GemvMxfp4Kernel {
  int64_t cols;
  const int8_t* x_codes;
  const float* x_scales;
  const int32_t* x_sums;
  template <int kRows>
  HWY_INLINE void Run(const WeightRow* rows, float* result) const {
    GemvMxfp4<kRows, kVnni>(rows, cols, x_codes, x_scales, x_sums, result);
  }
};
#endif  // LLMRT_QUANT_AVX2

#if LLMRT_QUANT_NEON
// The 32 weights of one block as signed values in column order: columns 0..15 and 16..31.
struct NeonBlock {
  int8x16_t low;
  int8x16_t high;
};

// I8: a row whose cols is no multiple of 32 (one scale per row) ends in a partial block. Kernels
// copy it once, before their block loop, zero-padded to 32 codes (activations are zero-padded
// alike, so the sum is the row's own): the loop then never reads past the row (the end of the
// mapped plan may follow) and never calls memcpy, which would make it spill its accumulators.
HWY_INLINE bool HasI8Tail(int64_t cols) { return cols % kQuantBlock != 0; }
HWY_INLINE void CopyI8Tail(const WeightRow& row, int64_t cols, int8_t* tail) {
  const int64_t full = cols / kQuantBlock * kQuantBlock;
  std::memset(tail, 0, kQuantBlock);
  std::memcpy(tail, row.codes + full, cols - full);
}

// I4: block `block` of a row in plan::Int4SliceOffset's layout, codes minus `zero` (|code - zero|
// <= 15). The block's 4 slices lie `stride` bytes apart; byte 4v + i of the gathered words holds
// column 8v + i (low nibble) and 8v + 4 + i (high), so interleaving the words of the two nibble
// vectors restores column order.
HWY_INLINE NeonBlock LoadI4BlockNeon(const uint8_t* row_codes, int64_t cols, int64_t block,
                                     int zero) {
  const int64_t first_run = block / plan::kInt4ChunkRuns * plan::kInt4ChunkRuns;
  const uint8_t* base = row_codes + first_run * (kQuantBlock / 2) + (block - first_run) * 4;
  const int64_t stride = 4 * plan::Int4RunsInChunk(cols, block);
  uint32_t words[4];
  for (int64_t slice = 0; slice < 4; ++slice) std::memcpy(&words[slice], base + slice * stride, 4);
  const uint8x16_t packed = vreinterpretq_u8_u32(vld1q_u32(words));
  const uint32x4_t low = vreinterpretq_u32_u8(vandq_u8(packed, vdupq_n_u8(0x0f)));
  const uint32x4_t high = vreinterpretq_u32_u8(vshrq_n_u8(packed, 4));
  const int8x16_t zeros = vdupq_n_s8(static_cast<int8_t>(zero));
  return {vsubq_s8(vreinterpretq_s8_u32(vzip1q_u32(low, high)), zeros),
          vsubq_s8(vreinterpretq_s8_u32(vzip2q_u32(low, high)), zeros)};
}

// Block `block` (of group `group`) of `row` as NeonBlock (I4: zero point 8 when symmetric; I8:
// a whole block, or with `i8_tail` the row's partial last block, CopyI8Tail's copy).
template <bool kInt4>
HWY_INLINE NeonBlock LoadBlockNeon(const WeightRow& row, int64_t cols, int64_t block, int64_t group,
                                   const int8_t* i8_tail = nullptr) {
  if constexpr (kInt4) {
    return LoadI4BlockNeon(row.codes, cols, block,
                           row.zero_points != nullptr ? row.zero_points[group] : 8);
  }
  const int8_t* codes = i8_tail != nullptr
                            ? i8_tail
                            : reinterpret_cast<const int8_t*>(row.codes) + block * kQuantBlock;
  return {vld1q_s8(codes), vld1q_s8(codes + 16)};
}

// The block's exact integer dot product as four int32 lanes (NEON tier, no dot product
// instructions unless the whole build enables them).
HWY_INLINE int32x4_t BlockProductsNeon(const NeonBlock& w, const int8_t* x) {
  const int8x16_t x_low = vld1q_s8(x);
  const int8x16_t x_high = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.low, x_low), w.high, x_high);
#else
  // Two products per int16 lane: at most 2 * 128 * 127 = 32512, below 32767.
  int16x8_t pairs = vmull_s8(vget_low_s8(w.low), vget_low_s8(x_low));
  pairs = vmlal_s8(pairs, vget_high_s8(w.low), vget_high_s8(x_low));
  int32x4_t sums = vpaddlq_s16(pairs);
  pairs = vmull_s8(vget_low_s8(w.high), vget_low_s8(x_high));
  pairs = vmlal_s8(pairs, vget_high_s8(w.high), vget_high_s8(x_high));
  return vpadalq_s16(sums, pairs);
#endif
}

// The NEON tier's row tile: per token, the 4 lane sums of each block times its combined scale
// into even- and odd-block accumulators. Every row count runs it, so a token's result does not
// depend on the batch.
template <int kTokens, bool kInt4>
void RowTileNeon(const WeightRow& row, int64_t cols, int32_t group_size, const ActivationTile& tile,
                 float* result) {
  float32x4_t even[kTokens], odd[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    even[t] = vdupq_n_f32(0.0f);
    odd[t] = vdupq_n_f32(0.0f);
  }
  alignas(16) int8_t i8_tail[kQuantBlock];
  const bool tail = !kInt4 && HasI8Tail(cols);
  if (tail) CopyI8Tail(row, cols, i8_tail);
  const int64_t full_blocks = cols / kQuantBlock;
  for (int64_t block = 0; block < full_blocks + (tail ? 1 : 0); ++block) {
    const int64_t group = block * kQuantBlock / group_size;
    const float weight_scale = plan::F16ToF32(row.scales[group]);
    const NeonBlock w =
        LoadBlockNeon<kInt4>(row, cols, block, group, block == full_blocks ? i8_tail : nullptr);
    for (int t = 0; t < kTokens; ++t) {
      const float32x4_t products =
          vcvtq_f32_s32(BlockProductsNeon(w, tile.codes[t] + block * kQuantBlock));
      const float scale = weight_scale * tile.scales[t][block];
      if (block % 2 == 0) {
        even[t] = vfmaq_n_f32(even[t], products, scale);
      } else {
        odd[t] = vfmaq_n_f32(odd[t], products, scale);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) result[t] = vaddvq_f32(vaddq_f32(even[t], odd[t]));
}
#endif  // LLMRT_QUANT_NEON

// Weight rows per pass for a tile of `tokens` activation rows: 4 x 1 or 4 x 2 accumulators for
// decode and small batches (4 weight streams, each activation block reused 4 times), 2 x 3 or
// 2 x 4 for prefill (8 accumulators, with the weights, magnitudes and products: 13 of the 16
// ymm registers).
constexpr int RowsPerPass(int tokens) { return tokens <= 2 ? 4 : 2; }
constexpr int kMaxRowsPerPass = RowsPerPass(1);

template <int kRows, int kTokens, bool kInt4, bool kZeroPoints>
void RowGroup(const WeightRow* rows, int64_t cols, int32_t group_size, const ActivationTile& tile,
              float (*result)[kTokenTile]) {
  for (int r = 0; r < kRows; ++r) {
#if LLMRT_QUANT_NEON
    RowTileNeon<kTokens, kInt4>(rows[r], cols, group_size, tile, result[r]);
#else
    RowTileScalar<kTokens, kInt4>(rows[r], cols, group_size, tile, result[r]);
#endif
  }
}

// `rows_per_pass` is RowsPerPass(count), or 1 for the rows left over at the end of a chunk.
template <bool kInt4, bool kZeroPoints>
void RunRowGroup(int count, int rows_per_pass, const WeightRow* rows, int64_t cols,
                 int32_t group_size, const ActivationTile& tile, float (*result)[kTokenTile]) {
#define LLMRT_QUANT_ROW_GROUP(kRows, kTokens) \
  RowGroup<kRows, kTokens, kInt4, kZeroPoints>(rows, cols, group_size, tile, result)
  const bool single = rows_per_pass == 1;
  switch (count) {
    case 1:
      single ? LLMRT_QUANT_ROW_GROUP(1, 1) : LLMRT_QUANT_ROW_GROUP(RowsPerPass(1), 1);
      break;
    case 2:
      single ? LLMRT_QUANT_ROW_GROUP(1, 2) : LLMRT_QUANT_ROW_GROUP(RowsPerPass(2), 2);
      break;
    case 3:
      single ? LLMRT_QUANT_ROW_GROUP(1, 3) : LLMRT_QUANT_ROW_GROUP(RowsPerPass(3), 3);
      break;
    default:
      single ? LLMRT_QUANT_ROW_GROUP(1, kTokenTile)
             : LLMRT_QUANT_ROW_GROUP(RowsPerPass(kTokenTile), kTokenTile);
      break;
  }
#undef LLMRT_QUANT_ROW_GROUP
}

// Where each output column goes (outputs sorted by begin and covering [0, w.rows)).
struct ColumnDestination {
  float* column;  // row 0 of the column
  int64_t stride;
};

// QuantizedMatMul over row tiles for every row count: threads take items of kRowsPerItem weight
// rows; in each, tiles of up to kTokenTile activation rows pass over passes of weight rows.
// `kernel.Rows(count, rows_left)` says how many of the rows left in the item the next pass takes
// for a tile of `count` tokens (at most kMaxRowsPerPass), `kernel.Run(count, group, rows, tile,
// result)` computes result[r][t] for those `group` rows and `count` tokens.
template <typename Kernel>
void RowTiledMatMul(ThreadPool& pool, int64_t num_rows, const MatrixView& w, const float* bias,
                    const MatMulOutput* outputs, int32_t num_outputs, const int8_t* codes,
                    const float* scales, int64_t padded_cols, const Kernel& kernel) {
  const int64_t blocks = padded_cols / kQuantBlock;
  const int64_t num_items = (w.rows + kRowsPerItem - 1) / kRowsPerItem;
  pool.ParallelFor(num_items, [&](int64_t item_begin, int64_t item_end, int32_t) {
    const int64_t row_begin = item_begin * kRowsPerItem;
    const int64_t row_end = std::min(w.rows, item_end * kRowsPerItem);
    ColumnDestination destinations[kRowsPerItem];
    ActivationTile tile;
    WeightRow rows[kMaxRowsPerPass];
    float result[kMaxRowsPerPass][kTokenTile];
    int32_t output = 0;
    for (int64_t chunk = row_begin; chunk < row_end; chunk += kRowsPerItem) {
      const int64_t chunk_end = std::min(row_end, chunk + kRowsPerItem);
      for (int64_t n = chunk; n < chunk_end; ++n) {
        while (output + 1 < num_outputs && n >= outputs[output + 1].begin) ++output;
        destinations[n - chunk] = {outputs[output].data + (n - outputs[output].begin),
                                   outputs[output].width};
      }
      // Token tiles outside, weight rows inside: a tile's activation codes (4 x K bytes) stay in
      // L1 while the chunk's rows stream through from L2.
      for (int64_t token = 0; token < num_rows; token += kTokenTile) {
        const int count = static_cast<int>(std::min<int64_t>(kTokenTile, num_rows - token));
        for (int t = 0; t < count; ++t) {
          tile.codes[t] = codes + (token + t) * padded_cols;
          tile.scales[t] = scales + (token + t) * blocks;
        }
        for (int64_t n = chunk; n < chunk_end;) {
          const int group = kernel.Rows(count, chunk_end - n);
          for (int r = 0; r < group; ++r) rows[r] = RowOf(w, n + r);
          kernel.Run(count, group, rows, tile, result);
          for (int r = 0; r < group; ++r) {
            const float row_bias = bias != nullptr ? bias[n + r] : 0.0f;
            const ColumnDestination& destination = destinations[n + r - chunk];
            for (int t = 0; t < count; ++t) {
              destination.column[(token + t) * destination.stride] = result[r][t] + row_bias;
            }
          }
          n += group;
        }
      }
    }
  });
}

// RowTiledMatMul's kernel on the NEON tier and the scalar targets: RowsPerPass(count) rows a
// pass, the rows left over at the end of an item one at a time.
template <bool kInt4, bool kZeroPoints>
struct RowGroupKernel {
  int64_t cols;
  int32_t group_size;
  int Rows(int count, int64_t rows_left) const {
    return rows_left >= RowsPerPass(count) ? RowsPerPass(count) : 1;
  }
  void Run(int count, int group, const WeightRow* rows, const ActivationTile& tile,
           float (*result)[kTokenTile]) const {
    RunRowGroup<kInt4, kZeroPoints>(count, group, rows, cols, group_size, tile, result);
  }
};

template <bool kInt4, bool kZeroPoints>
void QuantizedMatMulTyped(ThreadPool& pool, int64_t num_rows, const MatrixView& w,
                          const float* bias, const MatMulOutput* outputs, int32_t num_outputs,
                          const int8_t* codes, const float* scales, int64_t padded_cols) {
  RowTiledMatMul(pool, num_rows, w, bias, outputs, num_outputs, codes, scales, padded_cols,
                 RowGroupKernel<kInt4, kZeroPoints>{w.cols, w.group_size});
}

#if !LLMRT_QUANT_AVX2
// RowTiledMatMul's kernel for MXFP4 (Mxfp4RowTile), one row a pass (x86 runs GemvMxfp4 and
// QuantizedGemm instead).
struct Mxfp4RowKernel {
  int64_t cols;
  int Rows(int, int64_t) const { return 1; }
  void Run(int count, int, const WeightRow* rows, const ActivationTile& tile,
           float (*result)[kTokenTile]) const {
    switch (count) {
      case 1:
        return Mxfp4RowTile<1>(rows[0], cols, tile, result[0]);
      case 2:
        return Mxfp4RowTile<2>(rows[0], cols, tile, result[0]);
      case 3:
        return Mxfp4RowTile<3>(rows[0], cols, tile, result[0]);
      default:
        return Mxfp4RowTile<kTokenTile>(rows[0], cols, tile, result[0]);
    }
  }
};
#endif  // !LLMRT_QUANT_AVX2

#if LLMRT_QUANT_NEON
#include "runtime/backend/cpu/quant_neon-inl.h"
#endif

#if LLMRT_QUANT_AVX2
// The decode GEMV for one activation row (scratch as QuantizedMatMulImpl lays it out).
template <bool kVnni>
void QuantizedGemv(ThreadPool& pool, const MatrixView& w, const float* bias,
                   const MatMulOutput* outputs, int32_t num_outputs, const int8_t* codes,
                   const float* scales, const int32_t* integer_sums) {
  const int group_shift = QuantGroupShift(w.group_size, w.cols);
  if (w.dtype == plan::FP4_E2M1) {
    GemvOverRegions(pool, w, w.cols / 2, bias, outputs, num_outputs,
                    GemvMxfp4Kernel<kVnni>{w.cols, codes, scales, integer_sums});
  } else if (w.dtype == plan::I4) {
    const int64_t row_bytes = w.cols / 2;
    if (w.zero_points != nullptr) {
      GemvOverRegions(
          pool, w, row_bytes, bias, outputs, num_outputs,
          GemvInt4Kernel<true, kVnni>{w.cols, group_shift, codes, scales, integer_sums});
    } else {
      GemvOverRegions(
          pool, w, row_bytes, bias, outputs, num_outputs,
          GemvInt4Kernel<false, kVnni>{w.cols, group_shift, codes, scales, integer_sums});
    }
  } else if (group_shift == 63) {
    GemvOverRegions(pool, w, w.cols, bias, outputs, num_outputs,
                    GemvInt8Kernel<true, kVnni>{w.cols, group_shift, codes, scales});
  } else {
    GemvOverRegions(pool, w, w.cols, bias, outputs, num_outputs,
                    GemvInt8Kernel<false, kVnni>{w.cols, group_shift, codes, scales});
  }
}
#endif  // LLMRT_QUANT_AVX2

// One 32-column block of activations to codes and a scale (quant_matmul.h). NearestInt rounds
// to nearest even on every target, like std::nearbyint in the default rounding mode.
void QuantizeBlock(const float* HWY_RESTRICT block, int8_t* HWY_RESTRICT codes, float* scale) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  constexpr size_t kLanes = hn::MaxLanes(DF());
  static_assert(kQuantBlock % kLanes == 0, "a block must be whole vectors");
  VF max_vector = hn::Zero(df);
  for (size_t i = 0; i < kQuantBlock; i += kLanes) {
    max_vector = hn::Max(max_vector, hn::Abs(hn::LoadU(df, block + i)));
  }
  const float max_magnitude = hn::GetLane(hn::MaxOfLanes(df, max_vector));
  // x * (127 / max) rather than x / d: one multiply per element, the same on every target.
  const VF inverse = hn::Set(df, max_magnitude > 0.0f ? 127.0f / max_magnitude : 0.0f);
  HWY_ALIGN int32_t levels[kQuantBlock];
  for (size_t i = 0; i < kQuantBlock; i += kLanes) {
    hn::Store(hn::NearestInt(hn::Mul(hn::LoadU(df, block + i), inverse)), di, levels + i);
  }
  for (size_t i = 0; i < kQuantBlock; ++i) codes[i] = static_cast<int8_t>(levels[i]);
  *scale = max_magnitude / 127.0f;
}

}  // namespace

void QuantizeActivationRowImpl(const float* x, const int32_t* permutation, int64_t cols,
                               int8_t* codes, float* scales) {
  for (int64_t begin = 0; begin < cols; begin += kQuantBlock) {
    const int64_t count = std::min(kQuantBlock, cols - begin);
    if (permutation == nullptr && count == kQuantBlock) {
      QuantizeBlock(x + begin, codes + begin, scales + begin / kQuantBlock);
      continue;
    }
    float block[kQuantBlock] = {};
    for (int64_t c = 0; c < count; ++c) {
      block[c] = x[permutation != nullptr ? permutation[begin + c] : begin + c];
    }
    QuantizeBlock(block, codes + begin, scales + begin / kQuantBlock);
  }
}

// sums[b] = the int32 sum of block b's codes, stored in the f32 slot the scratch layout gives it
// (the I4 AVX2 kernels subtract zero * sum(q) in int32).
void ActivationBlockSums(const int8_t* codes, int64_t blocks, float* sums) {
  for (int64_t block = 0; block < blocks; ++block) {
    int32_t sum = 0;
    for (int64_t c = 0; c < kQuantBlock; ++c) sum += codes[block * kQuantBlock + c];
    std::memcpy(sums + block, &sum, sizeof(sum));
  }
}

// Below this many activation rows quantizing them (~1 ns per element) is cheaper than waking
// the other threads.
constexpr int64_t kParallelQuantizeRows = 16;

void QuantizedMatMulImpl(ThreadPool& pool, const float* x, int64_t num_rows,
                         const int32_t* input_rows, const MatrixView& w, const float* bias,
                         const MatMulOutput* outputs, int32_t num_outputs, void* scratch) {
  // Scratch (QuantizedActivationBytes): codes, scales and sums of each row, padded with zero
  // blocks to QuantizedActivationCols.
  const int64_t padded = QuantizedActivationCols(w.cols);
  const int64_t blocks = padded / kQuantBlock;
  int8_t* codes = static_cast<int8_t*>(scratch);
  float* scales = reinterpret_cast<float*>(codes + num_rows * padded);
  float* sums = scales + num_rows * blocks;
  // The x86 GEMV and GEMM tiles take groups of 32 * 2^k columns or whole rows (QuantGroupShift;
  // MXFP4: blocks of 32).
  const bool mxfp4 = w.dtype == plan::FP4_E2M1;
  const bool x86_tiles = LLMRT_QUANT_AVX2 && (mxfp4 || QuantGroupShift(w.group_size, w.cols) >= 0);
  // I4 and MXFP4 there: block sums (the GEMM's zero-point / bias correction), and the codes in
  // lane order (the GEMV's and the GEMM's layout). I8 in the AVX-512 VNNI GEMM: block sums (its
  // tiles start each block's chains at -128 x its sum).
  const bool int4_lanes = x86_tiles && (w.dtype == plan::I4 || mxfp4);
  const bool block_sums =
      int4_lanes || (x86_tiles && LLMRT_QUANT_VNNI512 && num_rows >= kQuantGemmMinRows);
  auto quantize = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t source = input_rows != nullptr ? input_rows[row] : row;
      int8_t* row_codes = codes + row * padded;
      float* row_scales = scales + row * blocks;
      QuantizeActivationRowImpl(x + source * w.cols, w.input_permutation, w.cols, row_codes,
                                row_scales);
      // The padding blocks: zero codes and scales.
      const int64_t used = (w.cols + kQuantBlock - 1) / kQuantBlock;
      std::memset(row_codes + used * kQuantBlock, 0, (blocks - used) * kQuantBlock);
      std::fill(row_scales + used, row_scales + blocks, 0.0f);
      if (block_sums) ActivationBlockSums(row_codes, blocks, sums + row * blocks);
      if (int4_lanes) LaneOrderInt4Activations(row_codes, padded);
#if !LLMRT_QUANT_AVX2
      // The layout Mxfp4RowTile reads on this target.
      if (mxfp4) SplitMxfp4Activations(row_codes, padded);
#endif
    }
  };
  if (num_rows < kParallelQuantizeRows) {
    quantize(0, num_rows, 0);
  } else {
    pool.ParallelFor(num_rows, quantize);
  }
#if LLMRT_QUANT_AVX2
  // One activation row (decode): the GEMVs (QuantizedGemvInt8Avx2 / Int4Avx2); several rows
  // (prefill, batched decode): the register-tiled GEMM (quant_gemm.h); no rows: nothing to compute.
  // Other group sizes fall through to the portable row tiles.
  const bool gemv = x86_tiles && num_rows == 1;
  const bool gemm = x86_tiles && num_rows >= kQuantGemmMinRows;
  if (x86_tiles && num_rows == 0) return;
  if (gemv) {
    const int32_t* integer_sums = reinterpret_cast<const int32_t*>(sums);
#if LLMRT_QUANT_VNNI
    if (vnni::Active()) {
      QuantizedGemv<true>(pool, w, bias, outputs, num_outputs, codes, scales, integer_sums);
      return;
    }
#endif
    QuantizedGemv<false>(pool, w, bias, outputs, num_outputs, codes, scales, integer_sums);
    return;
  }
  if (gemm) {
    QuantizedGemm(pool, {codes, scales, reinterpret_cast<const int32_t*>(sums), num_rows, padded},
                  w, bias, outputs, num_outputs);
    return;
  }
#endif
#if LLMRT_QUANT_NEON
  // NEON_I8MM / NEON_DOTPROD (dispatch.h): sdot and smmla kernels compiled for those extensions
  // (quant_neon-inl.h), every row count.
  const CpuExtensions extensions = ActiveCpuExtensions();
  if (extensions.neon_dotprod && !mxfp4) {
    const bool int4 = w.dtype == plan::I4;
    if (extensions.neon_i8mm) {
      (int4 ? neon::DotProductMatMul<true, true>
            : neon::DotProductMatMul<false, true>)(pool, num_rows, w, bias, outputs, num_outputs,
                                                   codes, scales, padded);
    } else {
      (int4 ? neon::DotProductMatMul<true, false>
            : neon::DotProductMatMul<false, false>)(pool, num_rows, w, bias, outputs, num_outputs,
                                                    codes, scales, padded);
    }
    return;
  }
#endif
  // Other targets, and x86 group sizes the tiles do not take: the portable row tiles, every row
  // count.
#if !LLMRT_QUANT_AVX2
  if (mxfp4) {
    RowTiledMatMul(pool, num_rows, w, bias, outputs, num_outputs, codes, scales, padded,
                   Mxfp4RowKernel{w.cols});
    return;
  }
#endif
  if (w.dtype == plan::I4 && w.zero_points != nullptr) {
    QuantizedMatMulTyped<true, true>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                     padded);
  } else if (w.dtype == plan::I4) {
    QuantizedMatMulTyped<true, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                      padded);
  } else {
    QuantizedMatMulTyped<false, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                       padded);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(QuantizedMatMulImpl);
HWY_EXPORT(QuantizeActivationRowImpl);

bool IsQuantizedMatrix(plan::DType dtype) {
  return dtype == plan::I8 || dtype == plan::I4 || dtype == plan::FP4_E2M1;
}

int64_t QuantizedMatrixBytes(plan::DType dtype, int64_t rows, int64_t cols) {
  return dtype == plan::I4 || dtype == plan::FP4_E2M1 ? rows * cols / 2 : rows * cols;
}

int64_t QuantizedActivationCols(int64_t cols) {
  return (cols + kQuantChunk - 1) / kQuantChunk * kQuantChunk;
}

int64_t QuantizedActivationBytes(int64_t num_rows, int64_t cols) {
  const int64_t padded = QuantizedActivationCols(cols);
  // Codes, then a scale and a sum per block.
  return num_rows * (padded + padded / kQuantBlock * 2 * static_cast<int64_t>(sizeof(float)));
}

void QuantizeActivationRow(const float* x, const int32_t* permutation, int64_t cols, int8_t* codes,
                           float* scales) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationRowImpl)(x, permutation, cols, codes, scales);
}

void QuantizedMatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                     const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                     int32_t num_outputs, void* scratch) {
  if (num_rows <= 0 || w.rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(QuantizedMatMulImpl)
  (pool, x, num_rows, input_rows, w, bias, outputs, num_outputs, scratch);
}

void QuantizedRowToF32(const MatrixView& w, int64_t row, float* out) {
  const int64_t groups = w.cols / w.group_size;
  if (w.dtype == plan::FP4_E2M1) {
    // plan.proto: w = e2m1(code) * 2^(scale - 127), codes at I4's nibble positions.
    const uint8_t* packed = w.data + row * (w.cols / 2);
    for (int64_t col = 0; col < w.cols; ++col) {
      out[col] = plan::kE2M1Values[plan::Int4CodeAt(packed, w.cols, col)] *
                 plan::E8M0ToF32(w.exponents[row * groups + col / kQuantBlock]);
    }
    return;
  }
  const uint16_t* scales = w.scales + row * groups;
  const uint8_t* zero_points = w.zero_points != nullptr ? w.zero_points + row * groups : nullptr;
  if (w.dtype == plan::I4) {
    const uint8_t* packed = w.data + row * (w.cols / 2);
    // A slice of a run (8 columns in 4 bytes, plan::Int4SliceOffset) at a time; groups are whole
    // runs (plan.proto).
    for (int64_t run = 0; run < w.cols / kQuantBlock; ++run) {
      const int64_t group = run * kQuantBlock / w.group_size;
      const int zero = zero_points != nullptr ? zero_points[group] : 8;
      const float scale = plan::F16ToF32(scales[group]);
      for (int64_t slice = 0; slice < 4; ++slice) {
        const uint8_t* bytes = packed + plan::Int4SliceOffset(w.cols, run, slice);
        float* columns = out + run * kQuantBlock + 8 * slice;
        for (int64_t i = 0; i < 4; ++i) {
          columns[i] = static_cast<float>((bytes[i] & 15) - zero) * scale;
          columns[4 + i] = static_cast<float>((bytes[i] >> 4) - zero) * scale;
        }
      }
    }
  } else {
    const int8_t* codes = reinterpret_cast<const int8_t*>(w.data) + row * w.cols;
    for (int64_t col = 0; col < w.cols; ++col) {
      out[col] = static_cast<float>(codes[col]) * plan::F16ToF32(scales[col / w.group_size]);
    }
  }
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
