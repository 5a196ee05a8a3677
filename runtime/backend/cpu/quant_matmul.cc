// Quantized matmul kernels (see quant_matmul.h), compiled per SIMD target by Highway. The
// integer dot products use AVX2 intrinsics inside the AVX2 and AVX-512 target bodies and NEON
// intrinsics (sdot, or widening multiplies) inside the AArch64 NEON body (Highway 1.0 has no
// int8 pairwise multiply-add op); every other target runs the scalar loops.
#include "runtime/backend/cpu/quant_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/plan/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/quant_matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

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
// Arm: the NEON target (AArch64) with sdot when the build enables it (-march=...+dotprod),
// else widening multiplies; SVE targets run the scalar loops.
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
  const float* sums[kTokenTile];  // scale * sum of the block's codes (I4 on AVX2 only)
};

// The weight codes and per-group parameters of one matrix row.
struct WeightRow {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint8_t* zero_points;  // nullptr: symmetric
};

WeightRow RowOf(const MatrixView& w, int64_t row) {
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = w.dtype == plan::I4 ? w.cols / 2 : w.cols;
  return {w.data + row * row_bytes, w.scales + row * groups,
          w.zero_points != nullptr ? w.zero_points + row * groups : nullptr};
}

// The integer dot product of `count` (<= 32) columns of block `block` with activation codes.
template <bool kInt4>
int32_t BlockDot(const uint8_t* row_codes, int64_t block, int zero, const int8_t* x,
                 int64_t count) {
  int32_t sum = 0;
  if constexpr (kInt4) {
    const uint8_t* packed = row_codes + block * (kQuantBlock / 2);
    for (int64_t c = 0; c < 16; ++c) {
      sum += ((packed[c] & 0x0f) - zero) * x[c];
      sum += ((packed[c] >> 4) - zero) * x[c + 16];
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
          BlockDot<kInt4>(row.codes, block, zero, tile.codes[t] + block * kQuantBlock, count);
      acc[t] += weight_scale * tile.scales[t][block] * static_cast<float>(isum);
    }
  }
  for (int t = 0; t < kTokens; ++t) result[t] = acc[t];
}

#if LLMRT_QUANT_AVX2
HWY_INLINE float HorizontalSum(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_movehdup_ps(sum2)));
}

// The 32 I8 codes of one block.
HWY_INLINE __m256i LoadBlock(const uint8_t* row_codes, int64_t block) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_codes + block * kQuantBlock));
}

// Eight int32 lanes summing to the block's exact integer dot product.
HWY_INLINE __m256i BlockProducts(__m256i weights, __m256i magnitudes, const int8_t* x) {
  const __m256i activations = _mm256_load_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i signed_activations = _mm256_sign_epi8(activations, weights);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_activations),
                           _mm256_set1_epi16(1));
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

// One I8 block's contribution to every token's accumulator in `acc`.
template <int kTokens>
HWY_INLINE void AccumulateBlock(__m256i weights, int64_t block, const int8_t* const* x_codes,
                                const float* combined, __m256* acc) {
  const __m256i magnitudes = _mm256_sign_epi8(weights, weights);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    const __m256i products = BlockProducts(weights, magnitudes, x_codes[t] + block * kQuantBlock);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(products),
                             _mm256_broadcast_ss(combined + t * kScaleChunk), acc[t]);
  }
}

// result[r][t] = the dot product of weight row r of the group with token t of the tile. Each
// activation block is loaded once per pass for all kRows rows, and each (row, token) pair keeps
// one f32 accumulator: a pass of 4 rows x 1 token has 4 independent FMA chains (one 4-cycle
// chain alone caps an I8 row at 16 bytes per 4 cycles, below one core's bandwidth), and a
// result never depends on the rows or tokens beside it (one chain, blocks in column order).
// prefetch_distance (0: none): bytes ahead of each row's codes to prefetch at the pace of the
// loads, one cache line per row per step — the next group's rows, so that memory delivers them
// across 4 KiB page boundaries (where the hardware prefetcher stops) while this group computes.
template <int kRows, int kTokens>
void RowGroupAvx2(const WeightRow* rows, int64_t cols, int32_t group_size,
                  const ActivationTile& tile, int64_t prefetch_distance,
                  float (*result)[kTokenTile]) {
  // Copied into locals so the compiler keeps pointers and accumulators in registers (the
  // stores through `result` could alias the tile otherwise).
  const int8_t* x_codes[kTokens];
  const float* x_scales[kTokens];
  WeightRow w[kRows];
  __m256 acc[kRows][kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x_codes[t] = tile.codes[t];
    x_scales[t] = tile.scales[t];
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w[r] = rows[r];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  // group = block >> shift: group sizes are 32, 64 or 128 columns (1, 2, 4 blocks), or the
  // whole row (shift 63: every block in group 0).
  const int group_shift = group_size == cols ? 63 : group_size == 128 ? 2 : group_size == 64;
  const int64_t full_blocks = cols / kQuantBlock;
  // Blocks per step: 64 code bytes of each row, one cache line to prefetch.
  constexpr int64_t kStep = 2;
  alignas(32) float combined[kRows][kTokens][kScaleChunk];
  for (int64_t chunk = 0; chunk < full_blocks; chunk += kScaleChunk) {
    const int64_t chunk_end = std::min(full_blocks, chunk + kScaleChunk);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      CombineScales<kTokens>(w[r], chunk, chunk_end, group_shift, x_scales, combined[r]);
    }
    int64_t block = chunk;
    for (; block + kStep <= chunk_end; block += kStep) {
      if (prefetch_distance != 0) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          __builtin_prefetch(w[r].codes + block * kQuantBlock + prefetch_distance, /*rw=*/0,
                             /*locality=*/3);
        }
      }
#pragma GCC unroll 4
      for (int64_t step_block = block; step_block < block + kStep; ++step_block) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          AccumulateBlock<kTokens>(LoadBlock(w[r].codes, step_block), step_block, x_codes,
                                   &combined[r][0][step_block - chunk], acc[r]);
        }
      }
    }
    for (; block < chunk_end; ++block) {
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        AccumulateBlock<kTokens>(LoadBlock(w[r].codes, block), block, x_codes,
                                 &combined[r][0][block - chunk], acc[r]);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) result[r][t] = HorizontalSum(acc[r][t]);
  }
  // I8 with one scale per row and cols not a multiple of 32: the partial last block.
  if (full_blocks * kQuantBlock < cols) {
    for (int r = 0; r < kRows; ++r) {
      const float weight_scale = _cvtsh_ss(w[r].scales[0]);
      for (int t = 0; t < kTokens; ++t) {
        const int32_t isum =
            BlockDot<false>(w[r].codes, full_blocks, 0, x_codes[t] + full_blocks * kQuantBlock,
                            cols - full_blocks * kQuantBlock);
        result[r][t] += weight_scale * x_scales[t][full_blocks] * static_cast<float>(isum);
      }
    }
  }
}

// I4 on AVX2 multiplies the unsigned codes (0..15) directly, sum_c code_c * q_c, and subtracts
// zero * sum_c q_c once per block through precomputed activation sums (ActivationTile::sums):
// no per-block zero subtraction or sign trick. It also reads activations interleaved per pair
// of blocks (InterleaveInt4Activations), so that one 32-byte load of two packed blocks gives
// its low nibbles (columns 0..15 of both blocks) and high nibbles (columns 16..31) with no lane
// permute: 6 vector instructions per block instead of 12, below one core's bandwidth (AVX2
// issues 4 per cycle: ~10 bytes of I4 per cycle, ~19 GB/s one core). maddubs pairs reach
// 2 * 15 * 127 = 3810 and the two halves' sum 7620, far from the int16 limit.
constexpr int64_t kInt4Chunk = 32;  // blocks per chunk of expanded scales (16 pairs)

// For blocks [begin, end) (begin even): scale_pairs[t][8 * p ...] = the combined scales of pair
// p (blocks begin + 2p, +1), each repeated over the 4 lanes its products land in; and
// correction[t] += weight scale * zero * activation scale * activation sum, per lane.
template <int kTokens, bool kZeroPoints>
HWY_INLINE void CombineInt4Scales(const WeightRow& row, int64_t begin, int64_t end, int group_shift,
                                  const float* const* x_scales, const float* const* x_sums,
                                  float (*scale_pairs)[kInt4Chunk * 4], float (*correction)[8]) {
  const __m256i pair_lanes[4] = {
      _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
      _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
  for (int64_t block = begin; block < end; block += 8) {
    const int64_t count = std::min<int64_t>(8, end - block);
    __m256 weight_scales, zeros;
    alignas(32) float activation_scales[kTokens][8], activation_sums[kTokens][8];
    const bool whole = count == 8 && group_shift == 0;
    if (whole) {
      weight_scales =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row.scales + block)));
      if constexpr (kZeroPoints) {
        zeros = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row.zero_points + block))));
      } else {
        zeros = _mm256_set1_ps(8.0f);
      }
    } else {
      // Larger groups, or the row's last blocks (zero beyond `end`).
      alignas(32) float scale_lanes[8] = {}, zero_lanes[8] = {};
      for (int64_t i = 0; i < count; ++i) {
        const int64_t group = (block + i) >> group_shift;
        scale_lanes[i] = _cvtsh_ss(row.scales[group]);
        zero_lanes[i] = kZeroPoints ? row.zero_points[group] : 8.0f;
      }
      weight_scales = _mm256_load_ps(scale_lanes);
      zeros = _mm256_load_ps(zero_lanes);
      for (int t = 0; t < kTokens; ++t) {
        for (int64_t i = 0; i < 8; ++i) {
          activation_scales[t][i] = i < count ? x_scales[t][block + i] : 0.0f;
          activation_sums[t][i] = i < count ? x_sums[t][block + i] : 0.0f;
        }
      }
    }
    const __m256 weighted_zeros = _mm256_mul_ps(weight_scales, zeros);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      // Read in place for whole runs of 8 blocks (the common case), else from the copies.
      const float* activation_scale = whole ? x_scales[t] + block : activation_scales[t];
      const float* activation_sum = whole ? x_sums[t] + block : activation_sums[t];
      const __m256 combined = _mm256_mul_ps(weight_scales, _mm256_loadu_ps(activation_scale));
      float* out = scale_pairs[t] + (block - begin) * 4;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        _mm256_store_ps(out + 8 * q, _mm256_permutevar8x32_ps(combined, pair_lanes[q]));
      }
      // In memory, not registers: touched once per 8 blocks, it leaves the registers to the
      // accumulators.
      _mm256_store_ps(correction[t],
                      _mm256_fmadd_ps(weighted_zeros, _mm256_loadu_ps(activation_sum),
                                      _mm256_load_ps(correction[t])));
    }
  }
}

// RowGroupAvx2 for I4 (see above): `tile` holds interleaved codes and activation sums.
template <int kRows, int kTokens, bool kZeroPoints>
void RowGroupInt4Avx2(const WeightRow* rows, int64_t cols, int32_t group_size,
                      const ActivationTile& tile, int64_t prefetch_distance,
                      float (*result)[kTokenTile]) {
  const int8_t* x_codes[kTokens];
  const float* x_scales[kTokens];
  const float* x_sums[kTokens];
  WeightRow w[kRows];
  __m256 acc[kRows][kTokens];
  alignas(32) float correction[kRows][kTokens][8] = {};
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x_codes[t] = tile.codes[t];
    x_scales[t] = tile.scales[t];
    x_sums[t] = tile.sums[t];
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w[r] = rows[r];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      acc[r][t] = _mm256_setzero_ps();
    }
  }
  const int group_shift = group_size == cols ? 63 : group_size == 128 ? 2 : group_size == 64;
  const int64_t blocks = cols / kQuantBlock;
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  alignas(32) float scale_pairs[kRows][kTokens][kInt4Chunk * 4];
  // Both blocks of a pair: packed holds 16 bytes of each (the second half zero for a lone last
  // block, whose activation pair partner is zero padding).
  auto accumulate_pair = [&](int r, __m256i packed, int64_t block, int64_t chunk) HWY_ATTR {
    const __m256i low = _mm256_and_si256(packed, mask);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* x = x_codes[t] + block * kQuantBlock;
      const __m256i pairs = _mm256_add_epi16(
          _mm256_maddubs_epi16(low, _mm256_load_si256(reinterpret_cast<const __m256i*>(x))),
          _mm256_maddubs_epi16(high, _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32))));
      acc[r][t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones)),
                          _mm256_load_ps(scale_pairs[r][t] + (block - chunk) * 4), acc[r][t]);
    }
  };
  for (int64_t chunk = 0; chunk < blocks; chunk += kInt4Chunk) {
    const int64_t chunk_end = std::min(blocks, chunk + kInt4Chunk);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      CombineInt4Scales<kTokens, kZeroPoints>(w[r], chunk, chunk_end, group_shift, x_scales, x_sums,
                                              scale_pairs[r], correction[r]);
    }
    int64_t block = chunk;
    // Two pairs (64 bytes of each row, one cache line to prefetch) per step.
    for (; block + 4 <= chunk_end; block += 4) {
      if (prefetch_distance != 0) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          __builtin_prefetch(w[r].codes + block * (kQuantBlock / 2) + prefetch_distance,
                             /*rw=*/0, /*locality=*/3);
        }
      }
#pragma GCC unroll 2
      for (int64_t pair = block; pair < block + 4; pair += 2) {
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          accumulate_pair(r,
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                              w[r].codes + pair * (kQuantBlock / 2))),
                          pair, chunk);
        }
      }
    }
    for (; block < chunk_end; block += 2) {
      for (int r = 0; r < kRows; ++r) {
        const uint8_t* packed = w[r].codes + block * (kQuantBlock / 2);
        // Never read past the row's last block (the end of the mapped plan may follow).
        accumulate_pair(
            r,
            block + 1 < chunk_end
                ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(packed))
                : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed))),
            block, chunk);
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      result[r][t] = HorizontalSum(acc[r][t]) - HorizontalSum(_mm256_load_ps(correction[r][t]));
    }
  }
}
#endif  // LLMRT_QUANT_AVX2

#if LLMRT_QUANT_NEON
// The block's exact integer dot product as four int32 lanes: weights and activations as two
// halves of 16 signed values each.
HWY_INLINE int32x4_t BlockProductsNeon(int8x16_t w_low, int8x16_t w_high, const int8_t* x) {
  const int8x16_t x_low = vld1q_s8(x);
  const int8x16_t x_high = vld1q_s8(x + 16);
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdotq_s32(vdupq_n_s32(0), w_low, x_low), w_high, x_high);
#else
  // Two products per int16 lane: at most 2 * 128 * 127 = 32512, below 32767.
  int16x8_t pairs = vmull_s8(vget_low_s8(w_low), vget_low_s8(x_low));
  pairs = vmlal_s8(pairs, vget_high_s8(w_low), vget_high_s8(x_low));
  int32x4_t sums = vpaddlq_s16(pairs);
  pairs = vmull_s8(vget_low_s8(w_high), vget_low_s8(x_high));
  pairs = vmlal_s8(pairs, vget_high_s8(w_high), vget_high_s8(x_high));
  return vpadalq_s16(sums, pairs);
#endif
}

template <int kTokens, bool kInt4>
void RowTileNeon(const WeightRow& row, int64_t cols, int32_t group_size, const ActivationTile& tile,
                 float* result) {
  float32x4_t even[kTokens], odd[kTokens];
  for (int t = 0; t < kTokens; ++t) {
    even[t] = vdupq_n_f32(0.0f);
    odd[t] = vdupq_n_f32(0.0f);
  }
  const int64_t full_blocks = cols / kQuantBlock;
  for (int64_t block = 0; block < full_blocks; ++block) {
    const int64_t group = block * kQuantBlock / group_size;
    const float weight_scale = plan::F16ToF32(row.scales[group]);
    int8x16_t w_low, w_high;
    if constexpr (kInt4) {
      const uint8x16_t packed = vld1q_u8(row.codes + block * (kQuantBlock / 2));
      const int8x16_t zero =
          vdupq_n_s8(static_cast<int8_t>(row.zero_points != nullptr ? row.zero_points[group] : 8));
      w_low = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(0x0f))), zero);
      w_high = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), zero);
    } else {
      const int8_t* codes = reinterpret_cast<const int8_t*>(row.codes) + block * kQuantBlock;
      w_low = vld1q_s8(codes);
      w_high = vld1q_s8(codes + 16);
    }
    for (int t = 0; t < kTokens; ++t) {
      const float32x4_t products =
          vcvtq_f32_s32(BlockProductsNeon(w_low, w_high, tile.codes[t] + block * kQuantBlock));
      const float scale = weight_scale * tile.scales[t][block];
      if (block % 2 == 0) {
        even[t] = vfmaq_n_f32(even[t], products, scale);
      } else {
        odd[t] = vfmaq_n_f32(odd[t], products, scale);
      }
    }
  }
  for (int t = 0; t < kTokens; ++t) result[t] = vaddvq_f32(vaddq_f32(even[t], odd[t]));
  if (!kInt4 && full_blocks * kQuantBlock < cols) {
    const float weight_scale = plan::F16ToF32(row.scales[0]);
    for (int t = 0; t < kTokens; ++t) {
      const int32_t isum =
          BlockDot<false>(row.codes, full_blocks, 0, tile.codes[t] + full_blocks * kQuantBlock,
                          cols - full_blocks * kQuantBlock);
      result[t] += weight_scale * tile.scales[t][full_blocks] * static_cast<float>(isum);
    }
  }
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
              int64_t prefetch_distance, float (*result)[kTokenTile]) {
#if LLMRT_QUANT_AVX2
  if constexpr (kInt4) {
    RowGroupInt4Avx2<kRows, kTokens, kZeroPoints>(rows, cols, group_size, tile, prefetch_distance,
                                                  result);
  } else {
    RowGroupAvx2<kRows, kTokens>(rows, cols, group_size, tile, prefetch_distance, result);
  }
#else
  (void)prefetch_distance;
  for (int r = 0; r < kRows; ++r) {
#if LLMRT_QUANT_NEON
    RowTileNeon<kTokens, kInt4>(rows[r], cols, group_size, tile, result[r]);
#else
    RowTileScalar<kTokens, kInt4>(rows[r], cols, group_size, tile, result[r]);
#endif
  }
#endif
}

// `rows_per_pass` is RowsPerPass(count), or 1 for the rows left over at the end of a chunk.
template <bool kInt4, bool kZeroPoints>
void RunRowGroup(int count, int rows_per_pass, const WeightRow* rows, int64_t cols,
                 int32_t group_size, const ActivationTile& tile, int64_t prefetch_distance,
                 float (*result)[kTokenTile]) {
#define LLMRT_QUANT_ROW_GROUP(kRows, kTokens)                                                   \
  RowGroup<kRows, kTokens, kInt4, kZeroPoints>(rows, cols, group_size, tile, prefetch_distance, \
                                               result)
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

template <bool kInt4, bool kZeroPoints>
void QuantizedMatMulTyped(ThreadPool& pool, int64_t num_rows, const MatrixView& w,
                          const float* bias, const MatMulOutput* outputs, int32_t num_outputs,
                          const int8_t* codes, const float* scales, const float* sums,
                          int64_t padded_cols) {
  const int64_t blocks = padded_cols / kQuantBlock;
  const int64_t num_items = (w.rows + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t row_bytes = kInt4 ? w.cols / 2 : w.cols;
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
          tile.sums[t] = sums + (token + t) * blocks;
        }
        const int rows_per_pass = RowsPerPass(count);
        for (int64_t n = chunk; n < chunk_end;) {
          const int group = chunk_end - n >= rows_per_pass ? rows_per_pass : 1;
          for (int r = 0; r < group; ++r) rows[r] = RowOf(w, n + r);
          // The first token tile prefetches the next group of rows this thread computes; later
          // tiles find the chunk in L2.
          const int64_t prefetch_distance =
              token == 0 && n + 2 * group <= row_end ? group * row_bytes : 0;
          RunRowGroup<kInt4, kZeroPoints>(count, group, rows, w.cols, w.group_size, tile,
                                          prefetch_distance, result);
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

// The I4 AVX2 kernel's activation layout (RowGroupInt4Avx2): per pair of blocks, columns 0..15
// of both blocks, then columns 16..31 of both; and sums[b] = scale * sum of block b's codes.
void InterleaveInt4Activations(int8_t* codes, const float* scales, int64_t blocks, float* sums) {
  for (int64_t block = 0; block < blocks; ++block) {
    int32_t sum = 0;
    for (int64_t c = 0; c < kQuantBlock; ++c) sum += codes[block * kQuantBlock + c];
    sums[block] = scales[block] * static_cast<float>(sum);
  }
  for (int64_t block = 0; block + 1 < blocks; block += 2) {
    int8_t* pair = codes + block * kQuantBlock;
    int8_t swap[16];
    std::memcpy(swap, pair + 16, 16);
    std::memcpy(pair + 16, pair + 32, 16);
    std::memcpy(pair + 32, swap, 16);
  }
}

// Below this many activation rows quantizing them (~1 ns per element) is cheaper than waking
// the other threads.
constexpr int64_t kParallelQuantizeRows = 16;

void QuantizedMatMulImpl(ThreadPool& pool, const float* x, int64_t num_rows,
                         const int32_t* input_rows, const MatrixView& w, const float* bias,
                         const MatMulOutput* outputs, int32_t num_outputs, void* scratch) {
  // Scratch (QuantizedActivationBytes): codes, scales and sums of each row, padded to whole
  // pairs of blocks.
  const int64_t padded = (w.cols + 2 * kQuantBlock - 1) / (2 * kQuantBlock) * (2 * kQuantBlock);
  const int64_t blocks = padded / kQuantBlock;
  int8_t* codes = static_cast<int8_t*>(scratch);
  float* scales = reinterpret_cast<float*>(codes + num_rows * padded);
  float* sums = scales + num_rows * blocks;
  const bool interleave = LLMRT_QUANT_AVX2 && w.dtype == plan::I4;
  auto quantize = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t source = input_rows != nullptr ? input_rows[row] : row;
      int8_t* row_codes = codes + row * padded;
      float* row_scales = scales + row * blocks;
      QuantizeActivationRowImpl(x + source * w.cols, w.input_permutation, w.cols, row_codes,
                                row_scales);
      // The block that pads an odd count to a pair: zero codes and scale.
      const int64_t used = (w.cols + kQuantBlock - 1) / kQuantBlock;
      if (used < blocks) {
        std::memset(row_codes + used * kQuantBlock, 0, kQuantBlock);
        row_scales[used] = 0.0f;
      }
      if (interleave) InterleaveInt4Activations(row_codes, row_scales, blocks, sums + row * blocks);
    }
  };
  if (num_rows < kParallelQuantizeRows) {
    quantize(0, num_rows, 0);
  } else {
    pool.ParallelFor(num_rows, quantize);
  }
  if (w.dtype == plan::I4 && w.zero_points != nullptr) {
    QuantizedMatMulTyped<true, true>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                     sums, padded);
  } else if (w.dtype == plan::I4) {
    QuantizedMatMulTyped<true, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                      sums, padded);
  } else {
    QuantizedMatMulTyped<false, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                       sums, padded);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(QuantizedMatMulImpl);
HWY_EXPORT(QuantizeActivationRowImpl);

namespace {

// Whole pairs of blocks (the I4 AVX2 kernel reads activations a pair at a time).
int64_t PaddedCols(int64_t cols) {
  return (cols + 2 * kQuantBlock - 1) / (2 * kQuantBlock) * (2 * kQuantBlock);
}

}  // namespace

bool IsQuantizedMatrix(plan::DType dtype) { return dtype == plan::I8 || dtype == plan::I4; }

int64_t QuantizedMatrixBytes(plan::DType dtype, int64_t rows, int64_t cols) {
  return dtype == plan::I4 ? rows * cols / 2 : rows * cols;
}

int64_t QuantizedActivationBytes(int64_t num_rows, int64_t cols) {
  const int64_t padded = PaddedCols(cols);
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
  const uint16_t* scales = w.scales + row * groups;
  const uint8_t* zero_points = w.zero_points != nullptr ? w.zero_points + row * groups : nullptr;
  if (w.dtype == plan::I4) {
    const uint8_t* packed = w.data + row * (w.cols / 2);
    for (int64_t col = 0; col < w.cols; ++col) {
      const int64_t run = col / kQuantBlock;
      const int64_t offset = col % kQuantBlock;
      const uint8_t byte = packed[run * (kQuantBlock / 2) + offset % 16];
      const int code = offset < 16 ? (byte & 0x0f) : (byte >> 4);
      const int64_t group = col / w.group_size;
      const int zero = zero_points != nullptr ? zero_points[group] : 8;
      out[col] = static_cast<float>(code - zero) * plan::F16ToF32(scales[group]);
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
