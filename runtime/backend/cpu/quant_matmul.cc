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

// Activation rows per pass over a weight row. Each AVX2 pass keeps two f32 accumulators per row
// (even and odd blocks: one FMA chain at 4 cycles per 32-column block would cap decode of an
// I4 row at 4 bytes per cycle, below one core's bandwidth) next to the weight vector, its
// magnitude, one activation and one product: 4 rows use 12 of the 16 ymm registers. Every
// token count splits alike, so a token's result never depends on the tokens beside it.
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

// The 32 codes of one block in column order: I8 codes as stored; I4 codes 0..15 unpacked.
template <bool kInt4>
HWY_INLINE __m256i LoadBlock(const uint8_t* row_codes, int64_t block) {
  if constexpr (kInt4) {
    const __m128i packed =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_codes + block * (kQuantBlock / 2)));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i low = _mm_and_si128(packed, mask);                      // columns 0..15
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);  // columns 16..31
    return _mm256_set_m128i(high, low);
  } else {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_codes + block * kQuantBlock));
  }
}

// I4: blocks `block` and `block + 1` from one 32-byte load (one shift and two masks for 64
// codes instead of two of each): the low nibbles hold columns 0..15 of both blocks, the high
// nibbles columns 16..31, and a lane permute regroups them per block.
HWY_INLINE void LoadInt4BlockPair(const uint8_t* row_codes, int64_t block, __m256i* first,
                                  __m256i* second) {
  const __m256i packed =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row_codes + block * (kQuantBlock / 2)));
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i low = _mm256_and_si256(packed, mask);
  const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), mask);
  *first = _mm256_permute2x128_si256(low, high, 0x20);
  *second = _mm256_permute2x128_si256(low, high, 0x31);
}

// Eight int32 lanes summing to the block's exact integer dot product.
HWY_INLINE __m256i BlockProducts(__m256i weights, __m256i magnitudes, const int8_t* x) {
  const __m256i activations = _mm256_load_si256(reinterpret_cast<const __m256i*>(x));
  const __m256i signed_activations = _mm256_sign_epi8(activations, weights);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitudes, signed_activations),
                           _mm256_set1_epi16(1));
}

// Blocks per chunk of a row whose combined scales are computed up front (64 blocks: 2048
// columns; the stack buffer is kTokenTile x 64 floats).
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

// One block's contribution to every token's accumulator in `acc`, from its codes as LoadBlock
// returns them. kZeroPoints: I4 with a zero point per group (else I4 subtracts 8).
template <int kTokens, bool kInt4, bool kZeroPoints>
HWY_INLINE void AccumulateBlock(const WeightRow& row, int64_t block, __m256i codes, int group_shift,
                                const int8_t* const* x_codes, const float* combined, __m256* acc) {
  __m256i weights = codes;
  if constexpr (kZeroPoints) {
    weights = _mm256_sub_epi8(
        codes, _mm256_set1_epi8(static_cast<char>(row.zero_points[block >> group_shift])));
  } else if constexpr (kInt4) {
    weights = _mm256_sub_epi8(codes, _mm256_set1_epi8(8));
  }
  const __m256i magnitudes = _mm256_sign_epi8(weights, weights);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    const __m256i products = BlockProducts(weights, magnitudes, x_codes[t] + block * kQuantBlock);
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(products),
                             _mm256_broadcast_ss(combined + t * kScaleChunk), acc[t]);
  }
}

template <int kTokens, bool kInt4, bool kZeroPoints>
void RowTileAvx2(const WeightRow& row, int64_t cols, int32_t group_size, const ActivationTile& tile,
                 float* result) {
  // Copied into locals so the compiler keeps pointers and accumulators in registers (the
  // stores through `result` could alias the tile otherwise).
  const int8_t* x_codes[kTokens];
  const float* x_scales[kTokens];
  __m256 even[kTokens], odd[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x_codes[t] = tile.codes[t];
    x_scales[t] = tile.scales[t];
    even[t] = _mm256_setzero_ps();
    odd[t] = _mm256_setzero_ps();
  }
  // group = block >> shift: group sizes are 32, 64 or 128 columns (1, 2, 4 blocks), or the
  // whole row (shift 63: every block in group 0).
  const int group_shift = group_size == cols ? 63 : group_size == 128 ? 2 : group_size == 64;
  const int64_t full_blocks = cols / kQuantBlock;
  alignas(32) float combined[kTokens][kScaleChunk];
  // Even and odd blocks into separate accumulators (see kTokenTile); chunks start at even
  // blocks, so a block's accumulator never depends on the chunking.
  for (int64_t chunk = 0; chunk < full_blocks; chunk += kScaleChunk) {
    const int64_t chunk_end = std::min(full_blocks, chunk + kScaleChunk);
    CombineScales<kTokens>(row, chunk, chunk_end, group_shift, x_scales, combined);
    int64_t block = chunk;
    for (; block + 2 <= chunk_end; block += 2) {
      __m256i first, second;
      if constexpr (kInt4) {
        LoadInt4BlockPair(row.codes, block, &first, &second);
      } else {
        first = LoadBlock<false>(row.codes, block);
        second = LoadBlock<false>(row.codes, block + 1);
      }
      AccumulateBlock<kTokens, kInt4, kZeroPoints>(row, block, first, group_shift, x_codes,
                                                   &combined[0][block - chunk], even);
      AccumulateBlock<kTokens, kInt4, kZeroPoints>(row, block + 1, second, group_shift, x_codes,
                                                   &combined[0][block + 1 - chunk], odd);
    }
    if (block < chunk_end) {
      AccumulateBlock<kTokens, kInt4, kZeroPoints>(row, block, LoadBlock<kInt4>(row.codes, block),
                                                   group_shift, x_codes,
                                                   &combined[0][block - chunk], even);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) result[t] = HorizontalSum(_mm256_add_ps(even[t], odd[t]));
  // I8 with one scale per row and cols not a multiple of 32: the partial last block.
  if (!kInt4 && full_blocks * kQuantBlock < cols) {
    const float weight_scale = _cvtsh_ss(row.scales[0]);
    for (int t = 0; t < kTokens; ++t) {
      const int32_t isum =
          BlockDot<false>(row.codes, full_blocks, 0, x_codes[t] + full_blocks * kQuantBlock,
                          cols - full_blocks * kQuantBlock);
      result[t] += weight_scale * x_scales[t][full_blocks] * static_cast<float>(isum);
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

template <int kTokens, bool kInt4, bool kZeroPoints>
void RowTile(const WeightRow& row, int64_t cols, int32_t group_size, const ActivationTile& tile,
             float* result) {
#if LLMRT_QUANT_AVX2
  RowTileAvx2<kTokens, kInt4, kZeroPoints>(row, cols, group_size, tile, result);
#elif LLMRT_QUANT_NEON
  RowTileNeon<kTokens, kInt4>(row, cols, group_size, tile, result);
#else
  RowTileScalar<kTokens, kInt4>(row, cols, group_size, tile, result);
#endif
}

template <bool kInt4, bool kZeroPoints>
void RunRowTile(int count, const WeightRow& row, int64_t cols, int32_t group_size,
                const ActivationTile& tile, float* result) {
  switch (count) {
    case 1:
      RowTile<1, kInt4, kZeroPoints>(row, cols, group_size, tile, result);
      break;
    case 2:
      RowTile<2, kInt4, kZeroPoints>(row, cols, group_size, tile, result);
      break;
    case 3:
      RowTile<3, kInt4, kZeroPoints>(row, cols, group_size, tile, result);
      break;
    default:
      RowTile<kTokenTile, kInt4, kZeroPoints>(row, cols, group_size, tile, result);
      break;
  }
}

// Where each output column goes (outputs sorted by begin and covering [0, w.rows)).
struct ColumnDestination {
  float* column;  // row 0 of the column
  int64_t stride;
};

template <bool kInt4, bool kZeroPoints>
void QuantizedMatMulTyped(ThreadPool& pool, int64_t num_rows, const MatrixView& w,
                          const float* bias, const MatMulOutput* outputs, int32_t num_outputs,
                          const int8_t* codes, const float* scales, int64_t padded_cols) {
  const int64_t blocks = padded_cols / kQuantBlock;
  const int64_t num_items = (w.rows + kRowsPerItem - 1) / kRowsPerItem;
  pool.ParallelFor(num_items, [&](int64_t item_begin, int64_t item_end, int32_t) {
    const int64_t row_begin = item_begin * kRowsPerItem;
    const int64_t row_end = std::min(w.rows, item_end * kRowsPerItem);
    ColumnDestination destinations[kRowsPerItem];
    ActivationTile tile;
    float result[kTokenTile];
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
        for (int64_t n = chunk; n < chunk_end; ++n) {
          RunRowTile<kInt4, kZeroPoints>(count, RowOf(w, n), w.cols, w.group_size, tile, result);
          const float row_bias = bias != nullptr ? bias[n] : 0.0f;
          const ColumnDestination& destination = destinations[n - chunk];
          for (int t = 0; t < count; ++t) {
            destination.column[(token + t) * destination.stride] = result[t] + row_bias;
          }
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

void QuantizedMatMulImpl(ThreadPool& pool, int64_t num_rows, const MatrixView& w, const float* bias,
                         const MatMulOutput* outputs, int32_t num_outputs, const int8_t* codes,
                         const float* scales, int64_t padded_cols) {
  if (w.dtype == plan::I4 && w.zero_points != nullptr) {
    QuantizedMatMulTyped<true, true>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                     padded_cols);
  } else if (w.dtype == plan::I4) {
    QuantizedMatMulTyped<true, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                      padded_cols);
  } else {
    QuantizedMatMulTyped<false, false>(pool, num_rows, w, bias, outputs, num_outputs, codes, scales,
                                       padded_cols);
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

int64_t PaddedCols(int64_t cols) { return (cols + kQuantBlock - 1) / kQuantBlock * kQuantBlock; }

// Below this many activation rows quantizing them (~1 ns per element) is cheaper than waking
// the other threads.
constexpr int64_t kParallelQuantizeRows = 16;

}  // namespace

bool IsQuantizedMatrix(plan::DType dtype) { return dtype == plan::I8 || dtype == plan::I4; }

int64_t QuantizedMatrixBytes(plan::DType dtype, int64_t rows, int64_t cols) {
  return dtype == plan::I4 ? rows * cols / 2 : rows * cols;
}

int64_t QuantizedActivationBytes(int64_t num_rows, int64_t cols) {
  const int64_t padded = PaddedCols(cols);
  return num_rows * (padded + padded / kQuantBlock * static_cast<int64_t>(sizeof(float)));
}

void QuantizeActivationRow(const float* x, const int32_t* permutation, int64_t cols, int8_t* codes,
                           float* scales) {
  HWY_DYNAMIC_DISPATCH(QuantizeActivationRowImpl)(x, permutation, cols, codes, scales);
}

void QuantizedMatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                     const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                     int32_t num_outputs, void* scratch) {
  if (num_rows <= 0 || w.rows <= 0) return;
  const int64_t padded = PaddedCols(w.cols);
  int8_t* codes = static_cast<int8_t*>(scratch);
  float* scales = reinterpret_cast<float*>(codes + num_rows * padded);
  auto quantize = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t source = input_rows != nullptr ? input_rows[row] : row;
      QuantizeActivationRow(x + source * w.cols, w.input_permutation, w.cols, codes + row * padded,
                            scales + row * (padded / kQuantBlock));
    }
  };
  if (num_rows < kParallelQuantizeRows) {
    quantize(0, num_rows, 0);
  } else {
    pool.ParallelFor(num_rows, quantize);
  }
  HWY_DYNAMIC_DISPATCH(QuantizedMatMulImpl)
  (pool, num_rows, w, bias, outputs, num_outputs, codes, scales, padded);
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
