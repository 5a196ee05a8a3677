// The multi-row quantized GEMM (see quant_gemm.h), compiled per SIMD target by Highway; only
// the x86 AVX2 and AVX-512 bodies have a kernel (AVX2 intrinsics, as in quant_matmul.cc, and on
// the avx3_vnni tier the VNNI arithmetic of quant_vnni-inl.h).
#include "runtime/backend/cpu/quant_gemm.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/panel_columns.h"
#include "runtime/backend/cpu/thread_buffer.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/quant_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/backend/cpu/quant_vnni-inl.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

#undef LLMRT_GEMM_AVX2
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define LLMRT_GEMM_AVX2 1
#else
#define LLMRT_GEMM_AVX2 0
#endif

#if LLMRT_GEMM_AVX2

constexpr int64_t kBlock = 32;  // columns per activation block (kQuantBlock)
// Blocks per chunk whose scale products are precomputed (2048 columns; at most
// kGemmRows x kGemmTokens x 64 floats = 2 KiB; I8 only: the I4 tile scales per chunk of 8).
constexpr int64_t kChunk = 64;
// The register tile: weight rows x tokens per pass, 8 f32 accumulators. I8 per pair: sign,
// maddubs, madd, cvt, fma (5 vector ops per 32 MACs) with the weight block and its magnitudes
// reused by 4 tokens and each activation block by 2 rows; 8 accumulators + ones + 2 weights +
// 2 magnitudes + activation + product + scale = 16 ymm registers.
constexpr int kGemmRows = 2;
constexpr int kGemmTokens = 4;
// (AVX-VNNI in the AVX2 body keeps AVX2's 2 x 4 tile in 16 ymm registers; AVX512-VNNI has the
// 4-row tiles of vnni512 below.)
constexpr int kGemmRowsVnni512 = 4;
constexpr int kMaxGemmRows = kGemmRowsVnni512;
// Weight rows per work item: 16 rows of K = 5632 I8 codes are 88 KiB, which stay in L2 while
// all token tiles pass over them; each token tile (4 x K bytes) stays in L1 for the 8 passes.
constexpr int64_t kPanelRows = 16;

struct GemmRow {
  const uint8_t* codes;
  const uint16_t* scales;
  const uint8_t* zero_points;          // nullptr: symmetric (I4 zero 8)
  const uint8_t* exponents = nullptr;  // MXFP4: E8M0 scales (and `scales` null)
};

// kKind: 0 I8 with combined scales, 1 I8 with one scale per row, 2 I4, 3 I4 with zero points,
// 4 MXFP4 (FP4_E2M1 codes in I4's LANE_CHUNKS layout, E8M0 scales; quant_vnni-inl.h).
constexpr int kKindMxfp4 = 4;
// The GemmRow of weight row n of `w` (row_bytes code bytes a row, `groups` scales).
HWY_INLINE GemmRow GemmRowOf(const MatrixView& w, int64_t n, int64_t row_bytes, int64_t groups) {
  if (w.dtype == plan::FP4_E2M1) {
    return {w.data + n * row_bytes, nullptr, nullptr, w.exponents + n * groups};
  }
  return {w.data + n * row_bytes, w.scales + n * groups,
          w.zero_points != nullptr ? w.zero_points + n * groups : nullptr};
}

struct TokenTile {
  const int8_t* codes[kGemmTokens];
  const float* scales[kGemmTokens];
  const int32_t* sums[kGemmTokens];
};

// Tag of the per-thread buffer of unpacked I4 panels (kPanelRows x K bytes: 88 KiB at K = 5632).
struct UnpackedPanels;

// out[i] = the f32 weight scale of block begin + i, for blocks [begin, end) (group = block >>
// group_shift; shift 63: one scale per row). F16C is exact, so vector and scalar agree.
HWY_INLINE void BlockWeightScales(const uint16_t* scales, int64_t begin, int64_t end,
                                  int group_shift, float* out) {
  int64_t block = begin;
  if (group_shift == 0) {
    for (; block + 8 <= end; block += 8) {
      _mm256_storeu_ps(
          out + (block - begin),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + block))));
    }
  } else if (group_shift == 63) {
    const __m256 scale = _mm256_set1_ps(_cvtsh_ss(scales[0]));
    for (; block + 8 <= end; block += 8) _mm256_storeu_ps(out + (block - begin), scale);
  }
  for (; block < end; ++block) out[block - begin] = _cvtsh_ss(scales[block >> group_shift]);
}

// combined[i] = weight[i] * activation[i] for i < count: one f32 rounding, as the GEMV's.
HWY_INLINE void MultiplyScales(const float* weight, const float* activation, int64_t count,
                               float* combined) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_store_ps(combined + i,
                    _mm256_mul_ps(_mm256_loadu_ps(weight + i), _mm256_loadu_ps(activation + i)));
  }
  for (; i < count; ++i) combined[i] = weight[i] * activation[i];
}

// result[r][t] = the I8 dot product of weight row r with token t of the tile, in the decode
// GEMV's order (GemvInt8Avx2): per block, 8 exact int32 lanes of 4 columns each (|x| times
// sign(w, x), pairs at most 2 * 127 * 127: codes are in [-127, 127]) into one FMA per block;
// with one scale per row (kRowScale) the FMA takes the activation scale and the row scale
// multiplies the lane sum once at the end, else the FMA takes weight x activation scale.
// kVnni (the AVX2 body on the avx2_vnni tier): the same lanes from vpdpbusd, the weights turned
// unsigned once per tile and each token's lanes started at vnni::BlockStart8.
template <int kRows, int kTokens, bool kRowScale, bool kVnni>
void TileI8(const GemmRow* rows, const TokenTile& tile, int64_t cols, int group_shift,
            float (*result)[kGemmTokens]) {
  // Locals, so that the compiler keeps pointers and accumulators in registers.
  const int8_t* x_codes[kTokens];
  const float* x_scales[kTokens];
  const int8_t* w_codes[kRows];
  __m256 acc[kRows][kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x_codes[t] = tile.codes[t];
    x_scales[t] = tile.scales[t];
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w_codes[r] = reinterpret_cast<const int8_t*>(rows[r].codes);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  const int64_t full_blocks = cols / kBlock;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  alignas(32) float weight_scales[kChunk];
  alignas(32) float combined[kRowScale ? 1 : kRows][kTokens][kChunk];
  for (int64_t chunk = 0; chunk < full_blocks; chunk += kChunk) {
    const int64_t chunk_end = std::min(full_blocks, chunk + kChunk);
    if constexpr (!kRowScale) {
      for (int r = 0; r < kRows; ++r) {
        BlockWeightScales(rows[r].scales, chunk, chunk_end, group_shift, weight_scales);
        for (int t = 0; t < kTokens; ++t) {
          MultiplyScales(weight_scales, x_scales[t] + chunk, chunk_end - chunk, combined[r][t]);
        }
      }
    }
    for (int64_t block = chunk; block < chunk_end; ++block) {
      __m256i weights[kRows];
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        weights[r] =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_codes[r] + block * kBlock));
        // VNNI: the weights as unsigned code + 128, once for the tile's tokens.
        if constexpr (kVnni) weights[r] = _mm256_xor_si256(weights[r], bias);
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m256i activations =
            _mm256_load_si256(reinterpret_cast<const __m256i*>(x_codes[t] + block * kBlock));
        // AVX2: |x| for maddubs; VNNI: each lane's -128 x sum(x) to start vpdpbusd from.
        __m256i shared;
        if constexpr (kVnni) {
          shared = vnni::BlockStart8(activations, bias);
        } else {
          shared = _mm256_abs_epi8(activations);
        }
        __m256 activation_scale;
        if constexpr (kRowScale) activation_scale = _mm256_broadcast_ss(x_scales[t] + block);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          __m256i products;
          if constexpr (kVnni) {
            products = vnni::DotBytes(shared, weights[r], activations);
          } else {
            products = _mm256_madd_epi16(
                _mm256_maddubs_epi16(shared, _mm256_sign_epi8(weights[r], activations)), ones);
          }
          acc[r][t] = _mm256_fmadd_ps(
              _mm256_cvtepi32_ps(products),
              kRowScale ? activation_scale
                        : _mm256_broadcast_ss(&combined[kRowScale ? 0 : r][t][block - chunk]),
              acc[r][t]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      result[r][t] = SumLanes8(acc[r][t]);
      if constexpr (kRowScale) result[r][t] *= _cvtsh_ss(rows[r].scales[0]);
    }
  }
  // One scale per row and cols not a multiple of 32: the partial last block, as the GEMV adds it.
  if (full_blocks * kBlock < cols) {
    for (int r = 0; r < kRows; ++r) {
      const float weight_scale = _cvtsh_ss(rows[r].scales[0]);
      for (int t = 0; t < kTokens; ++t) {
        int32_t isum = 0;
        for (int64_t c = full_blocks * kBlock; c < cols; ++c) isum += w_codes[r][c] * x_codes[t][c];
        result[r][t] += weight_scale * x_scales[t][full_blocks] * static_cast<float>(isum);
      }
    }
  }
}

// Lane order, the I4 GEMM's layout of a chunk of 8 blocks (256 codes, one byte each): 8 vectors,
// vector v holding columns 4v..4v+3 of block j in its 32-bit lane j. A maddubs of two such
// vectors leaves each block's products in its own lane, so the 8 blocks' sums need no shuffle
// (LaneSums8). From natural order (block j's 32 codes at 32j) it is the transpose of the 8 x 8
// matrix of 32-bit words (row j = block j): LaneOrderWords in registers (r[j] = block j's codes
// in, r[v] = vector v out), LaneOrderChunk in memory.
HWY_INLINE void LaneOrderWords(__m256i* r) {
  __m256i t[8];
#pragma GCC unroll 4
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm256_unpacklo_epi32(r[j], r[j + 1]);
    t[j + 1] = _mm256_unpackhi_epi32(r[j], r[j + 1]);
  }
  // t0 = r0w0 r1w0 r0w1 r1w1 | r0w4 r1w4 r0w5 r1w5; t1 = words 2, 3 | 6, 7 (likewise t2..t7).
  __m256i u[8];
#pragma GCC unroll 2
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm256_unpacklo_epi64(t[j], t[j + 2]);          // word 0 of r(j..j+3) | word 4
    u[j + 1] = _mm256_unpackhi_epi64(t[j], t[j + 2]);      // word 1 | word 5
    u[j + 2] = _mm256_unpacklo_epi64(t[j + 1], t[j + 3]);  // word 2 | word 6
    u[j + 3] = _mm256_unpackhi_epi64(t[j + 1], t[j + 3]);  // word 3 | word 7
  }
#pragma GCC unroll 4
  for (int v = 0; v < 4; ++v) {
    // Word v of rows 0..3 and 4..7 (low halves), then word v + 4 (high halves).
    r[v] = _mm256_permute2x128_si256(u[v], u[v + 4], 0x20);
    r[v + 4] = _mm256_permute2x128_si256(u[v], u[v + 4], 0x31);
  }
}

HWY_INLINE void LaneOrderChunk(uint8_t* chunk) {
  __m256i r[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(chunk + 32 * j));
  }
  LaneOrderWords(r);
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) _mm256_store_si256(reinterpret_cast<__m256i*>(chunk + 32 * v), r[v]);
}

// I4 codes of a panel row unpacked to one byte per code in lane order, the row padded with zero
// codes to whole chunks of 8 blocks. The plan's LANE_CHUNKS layout is lane order already (the
// low nibbles of slice v are vector 2v, the high nibbles vector 2v + 1), so unpacking is two
// nibble masks per slice; done once per panel, it takes them out of the (row, token) loop.
// kMxfp4: each E2M1 code becomes 2 x value + kMxfp4Bias (one table shuffle per 32 codes), the
// padding codes too (their activations are zero).
// prefetch_offset (0: none): bytes past the row to prefetch meanwhile (the same row of the
// thread's next panel, which then arrives while this panel computes).
template <bool kMxfp4>
void UnpackInt4Row(const uint8_t* packed, int64_t cols, uint8_t* out, int64_t prefetch_offset) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i table =
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kMxfp4BiasedTable.bytes));
  auto decode = [&](__m256i nibbles)
                    HWY_ATTR { return kMxfp4 ? _mm256_shuffle_epi8(table, nibbles) : nibbles; };
  const int64_t blocks = cols / kBlock;
  for (int64_t block = 0; block < blocks; block += 8) {
    const uint8_t* chunk = packed + block * (kBlock / 2);
    if (prefetch_offset != 0) {
      _mm_prefetch(chunk + prefetch_offset, _MM_HINT_T0);
      _mm_prefetch(chunk + prefetch_offset + 64, _MM_HINT_T0);
    }
    alignas(32) uint8_t expanded[plan::kInt4ChunkBytes];
    if (block + 8 > blocks) {
      // The row's last, shorter chunk (never read past the row: the end of the mapped plan may
      // follow).
      plan::ExpandInt4Chunk(packed, cols, block, expanded);
      chunk = expanded;
    }
    uint8_t* unpacked = out + block * kBlock;
#pragma GCC unroll 4
    for (int slice = 0; slice < 4; ++slice) {
      const __m256i bytes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * slice));
      _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked + 64 * slice),
                         decode(_mm256_and_si256(bytes, mask)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(unpacked + 64 * slice + 32),
                         decode(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask)));
    }
  }
}

// The 8 exact block sums sum_c code_c * q_c of a chunk in block order, from lane-ordered codes
// and activations. maddubs pairs reach 2 * 15 * 127 = 3810, so an int16 lane may sum 8 of them
// (30480 < 32767): the 8 products are folded in int16, then widened once.
// kMxfp4: biased codes up to 24 give pairs of 2 * 24 * 127 = 6096, so 4 vectors are folded in
// int16 (24384) and widened, twice.
template <bool kMxfp4>
HWY_INLINE __m256i LaneSums8(const uint8_t* w, const int8_t* x, __m256i ones) {
  auto products = [&](int v) HWY_ATTR {
    return _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * v)),
                                _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32 * v)));
  };
  constexpr int kFold = kMxfp4 ? 4 : 8;
  __m256i total = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int first = 0; first < 8; first += kFold) {
    __m256i sums = products(first);
#pragma GCC unroll 8
    for (int v = first + 1; v < first + kFold; ++v) sums = _mm256_add_epi16(sums, products(v));
    total = first == 0 ? _mm256_madd_epi16(sums, ones)
                       : _mm256_add_epi32(total, _mm256_madd_epi16(sums, ones));
  }
  return total;
}

// result[t] for I4 in the decode GEMV's order (GemvInt4Avx2): per 8 blocks, the exact integer
// sums minus zero * sum(q) in int32, one convert and one FMA with the 8 weight x activation
// scales. `unpacked` holds the row's codes (UnpackInt4Row), tile.sums the integer sums of the
// activation blocks' codes. One weight row per call: a (row, token) pair costs ~30 vector
// instructions per 8 blocks with the weights already unpacked, so a wider tile would save
// little and spill its accumulators (4 accumulators + 9 temporaries fit the 16 registers).
// kKind 2, 3 or kKindMxfp4 (GemmRow's kinds): MXFP4's codes are unpacked biased
// (UnpackInt4Row), their correction kMxfp4Bias x sum(q), their scales E8M0 / 2.
template <int kTokens, int kKind, bool kVnni>
void TileI4(const GemmRow& row, const uint8_t* unpacked, const TokenTile& tile, int64_t cols,
            int group_shift, float* result) {
  constexpr bool kZeroPoints = kKind == 3;
  constexpr bool kMxfp4 = kKind == kKindMxfp4;
  const int8_t* x_codes[kTokens];
  const float* x_scales[kTokens];
  const int32_t* x_sums[kTokens];
  __m256 acc[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x_codes[t] = tile.codes[t];
    x_scales[t] = tile.scales[t];
    x_sums[t] = tile.sums[t];
    acc[t] = _mm256_setzero_ps();
  }
  const __m256i ones = _mm256_set1_epi16(1);
  // One step of 8 blocks; kFull: all 8 present (every step but a row's last when K is no
  // multiple of 256), so that the step has no branches.
  auto step = [&](auto full, int64_t block, int64_t count) HWY_ATTR {
    constexpr bool kFull = decltype(full)::value;
    const __m256 weight_scales =
        kMxfp4 ? Mxfp4Scales8(row.exponents, block, kFull ? 8 : count)
               : ScaleLanes8(row.scales, block, kFull ? 8 : count, group_shift);
    __m256i zeros = _mm256_setzero_si256();
    if constexpr (kZeroPoints) {
      zeros = ZeroLanes8(row.zero_points, block, kFull ? 8 : count, group_shift);
    }
    const uint8_t* w = unpacked + block * kBlock;
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      __m256 activation_scales;
      __m256i activation_sums;
      if constexpr (kFull) {
        activation_scales = _mm256_loadu_ps(x_scales[t] + block);
        activation_sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x_sums[t] + block));
      } else {
        // The row's last blocks: zero scales and sums past them, as in the GEMV.
        alignas(32) float scale_lanes[8] = {};
        alignas(32) int32_t sum_lanes[8] = {};
        for (int64_t i = 0; i < count; ++i) {
          scale_lanes[i] = x_scales[t][block + i];
          sum_lanes[i] = x_sums[t][block + i];
        }
        activation_scales = _mm256_load_ps(scale_lanes);
        activation_sums = _mm256_load_si256(reinterpret_cast<const __m256i*>(sum_lanes));
      }
      // Past the row's last block codes and activations are zero (padding): zero sums.
      __m256i isums;
      if constexpr (kVnni) {
        if constexpr (LLMRT_QUANT_VNNI512) {
          isums = vnni::ChunkSumsUnpacked(w, x_codes[t] + block * kBlock);
        } else {
          isums = vnni::LaneSums8(w, x_codes[t] + block * kBlock);
        }
      } else {
        isums = LaneSums8<kMxfp4>(w, x_codes[t] + block * kBlock, ones);
      }
      // Symmetric codes have zero point 8: zero * sum(q) = sum(q) << 3.
      __m256i corrections;
      if constexpr (kZeroPoints) {
        corrections = _mm256_mullo_epi32(zeros, activation_sums);
      } else if constexpr (kMxfp4) {
        corrections = _mm256_mullo_epi32(_mm256_set1_epi32(kMxfp4Bias), activation_sums);
      } else {
        corrections = _mm256_slli_epi32(activation_sums, 3);
      }
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isums, corrections)),
                               _mm256_mul_ps(weight_scales, activation_scales), acc[t]);
    }
  };
  const int64_t blocks = cols / kBlock;
  int64_t block = 0;
  for (; block + 8 <= blocks; block += 8) step(std::true_type(), block, 8);
  if (block < blocks) step(std::false_type(), block, blocks - block);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) result[t] = SumLanes8(acc[t]);
}

#if LLMRT_QUANT_VNNI512
// ---- I4, MXFP4 and I8 on AVX512-VNNI: tiles of 4 rows x 8 tokens (4 at the end of a batch).
//
// Every (row, token) pair keeps TileI4's arithmetic, so the GEMV's (GemvInt4Avx2): per chunk of
// 8 blocks the exact int32 block sums, block j in lane j, minus the zero-point correction, one
// convert and one FMA with weight scale x activation scale per lane, one f32 chain of 8 lanes
// over the chunks. What differs is how the operands reach the registers:
// - two rows share each 512-bit vector: lanes 0-7 are row 2q's and 8-15 row 2q + 1's, so a
//   chain of 8 vpdpbusd per (row pair, token) and chunk, on LANE_CHUNKS slice v of the two rows
//   (one in each half; its low nibbles are lane-order vector 2v, its high nibbles 2v + 1)
//   against those vectors of the token broadcast to both halves, leaves each row's 8 block sums
//   in its own half; the f32 steps then run on both rows at once, each lane seeing TileI4's
//   operations on its own values (so the results are its bits). A pair of rows rather than a
//   pair of tokens (the tile's former layout, one row's 32 codes broadcast to both halves)
//   unpacks 64 distinct codes per mask instead of 32 twice: per chunk 64 vpdpbusd, 8 inserts and
//   24 nibble operations against 48, and the synthetic chunk 65 -> 58 cycles; measured in the
//   GEMM, 1 thread, I4 g32 symmetric M = 16 GMAC/s 118-130 -> 133-139 at 2560 / 11264 x 2048 and
//   136-141 -> 147-150 at 2048 x 5632 (a slower host than the figures below);
// - the codes come straight from the plan: one mask (low nibbles) or shift and mask (high) per
//   64 codes (a slice of two rows), shared by the tile's tokens; unpacking each panel once instead
//   (as TileI4's callers do) was 15-30% slower at 16 tokens: the unpack's stores, and an unpacked
//   panel of 16 x K bytes that no longer fits L1 next to the tokens;
// - each weight vector meets the tile's 8 tokens and each activation vector its 2 row pairs
//   (TileI4's 1 x 4 tile loaded 8 vectors per 4 vpdpbusd, and the load ports bounded it). The
//   16 int32 chains of 2 row pairs x 8 tokens fill half the registers, so the f32 chains live in
//   L1, loaded and stored once a chunk (Tile): per 4096 multiply-adds 4 inserts and 12 nibble
//   operations against 8 and 24 with 4 tokens and the chains in registers; measured, 1 thread,
//   M = 16 GMAC/s, I4 g32 symmetric 134-146 -> 150-167 at 2560 / 11264 x 2048 and 141-150 ->
//   150-167 at 2048 x 5632, I8 one scale per row 113-120 -> 120-132; the batch-16 decode step of
//   the TinyLlama-shaped int4 plan 73-74 -> 68-71 ms (2 threads). An earlier 2 rows x 8 tokens
//   tile of token pairs in registers (4 pairs) was slower than 4 x 4 (at 2048 x 5632, 172 against
//   273 GMAC/s on a faster host): 26 live vectors, and its loads from 8 x 5632 activation codes;
// - the high nibbles by one GFNI affine transform (vgf2p8affineqb) instead of a shift and a mask:
//   no change beyond the noise (M = 16 / 512: 268-272 / 292-297 against 265-269 / 288-300 at
//   11264 x 2048, 265-267 / 287 against 263-268 / 283-285 at 2048 x 5632): the operations
//   beside vpdpbusd are not what bounds the tile (its 64 vpdpbusd, 8 multiplies and 8 FMAs per
//   chunk share two pipes: >= 40 cycles, against ~57 measured); measured with the former 4 x 4
//   tile, and again in the present one (2026-11-29, Intel Xeon): no change either;
// - the activations of each token tile are copied once per call into lane order (a token pair's
//   vectors interleaved), next to their scales and the chains' starting values, and a panel's
//   weight scales are converted to f32 once per panel, so a chunk's loads are fixed offsets
//   from a few pointers (with a pointer per row and token the compiler spilled them) and the
//   tile converts no scale.
// I8 takes the same tile and arithmetic (its chains start at -128 x sum(q), its codes go in as
// code ^ 0x80): each panel row is laid out once per call in lane order, unsigned, the rows of a
// pair interleaved so that a pair's vector is one load (PackInt8Row),
// so that 4 vpdpbusd sum a block's 32 columns into one lane and a chunk of 8 blocks costs one
// convert and one FMA per (row, token) where the plan's natural order costs one per block pair.
// Measured on an Intel Xeon (Emerald Rapids; 512-bit integer and FP operations share ports 0
// and 5), 1 thread, I8 one scale per row, GMAC/s at M = 16 / 512: 57 / 57 -> 114 / 162 at
// 11264 x 2048 and 70 / 63 -> 110 / 128 at 2048 x 5632 (docs/performance.md).
namespace vnni512 {

// Prefetches kBytes bytes (whole cache lines) of each of kRows rows `stride` apart from `first`.
// Always inlined: as a function of its own GCC's pure-const analysis takes the prefetches for no
// effect and deletes the calls (the GEMM's next-panel prefetch was once lost that way).
template <int kRows, int64_t kBytes>
HWY_INLINE void PrefetchRows(const uint8_t* first, int64_t stride) {
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int64_t line = 0; line < kBytes; line += 64) {
      _mm_prefetch(first + r * stride + line, _MM_HINT_T0);
    }
  }
}

constexpr int kGroupRows = kGemmRowsVnni512;  // weight rows per register tile
constexpr int64_t kChunkCodes = 8 * kBlock;   // codes of a chunk (8 blocks)
// Per chunk and token pair: 16 f32 activation scales, then 16 int32 lanes (symmetric: the
// start of the pair's int32 chains, -8 x sum(q), so that they end at the block sums minus the
// correction zero x sum(q) of zero point 8 with no instruction of their own; with zero points:
// sum(q), for the tile to multiply by the row's zero points), tokens 2p and 2p + 1 in the two
// halves.
constexpr int64_t kPairMetaBytes = 128;

// Tags of the per-thread buffers.
struct PanelScales;
struct TokenTiles;

// A panel's weight scales and zero points as the tiles read them. A tile of `rows` rows
// (kGroupRows, or 1 for the panel's last rows) starting at panel row `first` keeps the 8 lanes
// of chunk c of its row r at lane 8 x (first * chunks + c * rows + r); I4: `tails` holds each
// row's last chunk expanded when it is shorter than 8 blocks (plan::ExpandInt4Chunk); I8:
// `codes` holds the rows' codes, chunks x kChunkCodes bytes a row (PackInt8Row).
struct PanelOperands {
  float* scales;
  int32_t* zeros;  // nullptr: symmetric
  uint8_t* tails;  // I4: kInt4ChunkBytes per panel row
  uint8_t* codes;  // I8; nullptr for the others
  int64_t chunks;
};

// Dword indices of PackInt8Row's two rounds of vpermt2d (permutex2var: index < 16 the first
// operand's dword, else the second's). Natural order: dword w of block j at 8 j + w, so a 64-byte
// vector k holds blocks 2k and 2k + 1. Round 1 takes vectors (0, 1) and (2, 3) to words 0-3 and
// 4-7 of their 4 blocks (position 4 x block + word); round 2 takes those to lane order, vector
// pair s (vectors 2s, 2s + 1) holding word 2s + p / 8 of block p % 8 at position p.
struct PackInt8Indices {
  alignas(64) int32_t round1[2][16];  // [words 0-3, words 4-7]
  alignas(64) int32_t round2[2][16];  // [vector pair 0 of a half, vector pair 1]
  PackInt8Indices() {
    for (int half = 0; half < 2; ++half) {
      for (int block = 0; block < 4; ++block) {
        for (int word = 0; word < 4; ++word) {
          round1[half][4 * block + word] = (block / 2) * 16 + (block % 2) * 8 + 4 * half + word;
        }
      }
      for (int p = 0; p < 16; ++p) {
        const int block = p % 8, word = 2 * half + p / 8;  // word within the round-1 half
        round2[half][p] = (block / 4) * 16 + (block % 4) * 4 + word;
      }
    }
  }
};
inline const PackInt8Indices kPackInt8Indices{};

// An I8 row's codes as the tiles read them: chunk by chunk in lane order (LaneOrderChunk's), each
// code as vpdpbusd's unsigned operand code ^ 0x80, past the row code 0 (never read: the end of
// the mapped plan may follow). 8 vpermt2d a chunk (LaneOrderWords' 24 256-bit shuffles made the
// layout a quarter of a 16-token GEMM on Intel, whose shuffles all take port 5). half < 0: the
// row alone, slice s of chunk c at out + c x kChunkCodes + 64 s as (low vector, high vector);
// half 0 or 1: the row of a pair whose 2 x chunks x kChunkCodes bytes start at `out`, slice s of
// chunk c at 2 c x kChunkCodes + 128 s as (low vector of row 0, of row 1, high of row 0, of row 1),
// so that a tile loads each pair's 64 bytes whole (Tile).
void PackInt8Row(const uint8_t* codes, int64_t cols, int64_t chunks, int half, uint8_t* out) {
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i words_low = _mm512_load_si512(kPackInt8Indices.round1[0]);
  const __m512i words_high = _mm512_load_si512(kPackInt8Indices.round1[1]);
  const __m512i pair_even = _mm512_load_si512(kPackInt8Indices.round2[0]);
  const __m512i pair_odd = _mm512_load_si512(kPackInt8Indices.round2[1]);
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const uint8_t* in = codes + chunk * kChunkCodes;
    __m512i v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int64_t present = std::clamp<int64_t>(cols - chunk * kChunkCodes - 64 * k, 0, 64);
      v[k] = present == 64 ? _mm512_loadu_si512(in + 64 * k)
                           : _mm512_maskz_loadu_epi8(
                                 present == 0 ? 0 : ~uint64_t{0} >> (64 - present), in + 64 * k);
    }
    // Words 0-3 / 4-7 of blocks 0-3 (vectors 0, 1) and of blocks 4-7 (vectors 2, 3).
    const __m512i low03 = _mm512_permutex2var_epi32(v[0], words_low, v[1]);
    const __m512i high03 = _mm512_permutex2var_epi32(v[0], words_high, v[1]);
    const __m512i low47 = _mm512_permutex2var_epi32(v[2], words_low, v[3]);
    const __m512i high47 = _mm512_permutex2var_epi32(v[2], words_high, v[3]);
    const __m512i pairs[4] = {_mm512_permutex2var_epi32(low03, pair_even, low47),
                              _mm512_permutex2var_epi32(low03, pair_odd, low47),
                              _mm512_permutex2var_epi32(high03, pair_even, high47),
                              _mm512_permutex2var_epi32(high03, pair_odd, high47)};
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m512i vectors = _mm512_xor_si512(pairs[s], bias);
      if (half < 0) {
        _mm512_store_si512(out + chunk * kChunkCodes + 64 * s, vectors);
      } else {
        // Beside the pair's other row: its low vector, then 32 bytes on its high one.
        uint8_t* at = out + 2 * chunk * kChunkCodes + 128 * s + 32 * half;
        _mm256_store_si256(reinterpret_cast<__m256i*>(at), _mm512_castsi512_si256(vectors));
        _mm256_store_si256(reinterpret_cast<__m256i*>(at + 64),
                           _mm512_extracti64x4_epi64(vectors, 1));
      }
    }
  }
}

// Fills panel row `panel_row`'s places in `panel` (the tile of `rows` rows starting at `first`):
// the f32 block scales of each chunk (MXFP4: Mxfp4Scales8's) and, with zero points, the zero
// points as int32 (lanes past the row's last block 0, as TileI4 gets them); I8: its codes
// (PackInt8Row).
void PreparePanelRow(const GemmRow& row, int64_t cols, int group_shift, int64_t first, int64_t rows,
                     int64_t panel_row, const PanelOperands& panel) {
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t base = first * panel.chunks + (panel_row - first);
  int64_t chunk = 0;
  if (row.exponents == nullptr && group_shift == 63) {
    // One scale (and zero point) per row, llmc's int8 default: the same 8 lanes for every whole
    // chunk (ScaleLanes8's), converted once.
    const __m256 lanes = ScaleLanes8(row.scales, 0, 8, group_shift);
    const __m256i zeros = panel.zeros != nullptr
                              ? _mm256_set1_epi32(static_cast<int32_t>(row.zero_points[0]))
                              : _mm256_setzero_si256();
    for (; chunk < blocks / 8; ++chunk) {
      _mm256_storeu_ps(panel.scales + (base + chunk * rows) * 8, lanes);
      if (panel.zeros != nullptr) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel.zeros + (base + chunk * rows) * 8),
                            zeros);
      }
    }
  } else if (row.exponents == nullptr && group_shift == 0) {
    // A scale per block (llmc's g32): 16 of them converted at once, two chunks' lanes (the same
    // F16C conversion as ScaleLanes8's); at 16 tokens the general loop below took ~7% of the GEMM.
    for (; chunk + 2 <= blocks / 8; chunk += 2) {
      const __m512 lanes = _mm512_cvtph_ps(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row.scales + chunk * 8)));
      _mm256_storeu_ps(panel.scales + (base + chunk * rows) * 8, _mm512_castps512_ps256(lanes));
      _mm256_storeu_ps(panel.scales + (base + (chunk + 1) * rows) * 8,
                       _mm512_extractf32x8_ps(lanes, 1));
      if (panel.zeros != nullptr) {
        const __m512i zeros = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row.zero_points + chunk * 8)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel.zeros + (base + chunk * rows) * 8),
                            _mm512_castsi512_si256(zeros));
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(panel.zeros + (base + (chunk + 1) * rows) * 8),
            _mm512_extracti64x4_epi64(zeros, 1));
      }
    }
  }
  for (; chunk < panel.chunks; ++chunk) {
    const int64_t block = chunk * 8;
    const int64_t count = std::min<int64_t>(8, blocks - block);
    const int64_t at = base + chunk * rows;
    _mm256_storeu_ps(panel.scales + at * 8,
                     row.exponents != nullptr ? Mxfp4Scales8(row.exponents, block, count)
                                              : ScaleLanes8(row.scales, block, count, group_shift));
    if (panel.zeros != nullptr) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(panel.zeros + at * 8),
                          ZeroLanes8(row.zero_points, block, count, group_shift));
    }
  }
  if (panel.codes != nullptr) {
    // A tile's rows in pairs (rows 2q and 2q + 1 interleaved), a single row alone.
    const int64_t row_codes = panel.chunks * kChunkCodes;
    if (rows == 1) {
      PackInt8Row(row.codes, cols, panel.chunks, -1, panel.codes + panel_row * row_codes);
    } else {
      const int64_t in_tile = panel_row - first;
      PackInt8Row(row.codes, cols, panel.chunks, static_cast<int>(in_tile % 2),
                  panel.codes + (first + in_tile / 2 * 2) * row_codes);
    }
  } else if (blocks % 8 != 0) {
    plan::ExpandInt4Chunk(row.codes, cols, blocks / 8 * 8,
                          panel.tails + panel_row * plan::kInt4ChunkBytes);
  }
}

// The activations of token tile `tile` (tokens [kGemmTokens * tile, + `tokens`)) as the tiles
// read them, per chunk c and token pair p (pairs: tokens rounded up to pairs, a missing token's
// codes, scales and sums zero): at codes[((c * pairs + p) * 8 + k) * 64] the lane-order vector k
// (32 codes, LaneOrderInt4Activations) of token 2p, then that of token 2p + 1; at
// meta[(c * pairs + p) * kPairMetaBytes] kPairMetaBytes's lanes (past the row's last block zero,
// as TileI4 sets them), the int32 lanes sum_factor x sum(q): 1 with zero points, -8 for symmetric
// I4, -kMxfp4Bias for MXFP4, -128 for I8. natural_order: x's codes are not in lane order yet
// (I8's), and each chunk is reordered on the way.
void LayOutTokenTile(const QuantizedActivationRows& x, int64_t blocks, int64_t chunks, int64_t tile,
                     int tokens, int32_t sum_factor, bool natural_order, uint8_t* codes,
                     uint8_t* meta) {
  const int pairs = (tokens + 1) / 2;
  const int64_t x_blocks = x.padded_cols / kBlock;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t block = chunk * 8;
    const int64_t count = std::min<int64_t>(8, blocks - block);
    for (int t = 0; t < 2 * pairs; ++t) {
      const int64_t pair = chunk * pairs + t / 2;
      const int64_t token = kGemmTokens * tile + t;
      const uint8_t* in =
          reinterpret_cast<const uint8_t*>(x.codes) + token * x.padded_cols + block * kBlock;
      alignas(32) uint8_t lane_order[kChunkCodes];
      if (natural_order && t < tokens) {
        std::copy_n(in, kChunkCodes, lane_order);
        LaneOrderChunk(lane_order);
        in = lane_order;
      }
      for (int k = 0; k < 8; ++k) {
        uint8_t* vector = codes + (pair * 8 + k) * 64 + 32 * (t % 2);
        if (t < tokens) {
          std::copy_n(in + 32 * k, 32, vector);
        } else {
          std::fill_n(vector, 32, uint8_t{0});
        }
      }
      float* scales = reinterpret_cast<float*>(meta + pair * kPairMetaBytes) + 8 * (t % 2);
      int32_t* sums = reinterpret_cast<int32_t*>(meta + pair * kPairMetaBytes + 64) + 8 * (t % 2);
      for (int64_t i = 0; i < 8; ++i) {
        const bool present = t < tokens && i < count;
        scales[i] = present ? x.scales[token * x_blocks + block + i] : 0.0f;
        const int32_t sum = present ? x.sums[token * x_blocks + block + i] : 0;
        sums[i] = sum_factor * sum;
      }
    }
  }
}

// A tile's results a row: up to 8 tokens (two token tiles of the layout, Tile's widest).
constexpr int kTileTokens = 2 * kGemmTokens;

// Lane order of TileLaneSums: lane 4 j + m holds the sum of block j of step 1's pair m (blocks:
// vector 2m's rows 2q and 2q + 1, then vector 2m + 1's), that is row 2 (m / 2) + j % 2 and token
// 2 (m % 2) + j / 2. StoreTileSums' vpermt2ps indices: rows 0-1 and 2-3 of tokens 0-3 (the first
// sums) and 4-7 (the second, index + 16), kTileTokens lanes a row.
struct TileSumIndices {
  alignas(64) int32_t rows[2][16] = {};
  constexpr TileSumIndices() {
    for (int half = 0; half < 2; ++half) {
      for (int p = 0; p < 16; ++p) {
        const int row = 2 * half + p / 8, token = p % 8 % 4;
        rows[half][p] =
            (p % 8 >= 4 ? 16 : 0) + 4 * (row % 2 + 2 * (token % 2)) + 2 * (row / 2) + token / 2;
      }
    }
  }
};
inline constexpr TileSumIndices kTileSumIndices{};

// SumLanes8 of every half of a tile's 2 row pairs x 4 tokens (acc[q][t]: rows 2q, 2q + 1 in its
// halves) at once, in TileSumIndices' lane order: the same additions in the same pairs as
// SumLanes8 (lanes i and i + 4, then 0 + 2 and 1 + 3 of those, then the two), 16 sums in 7 vector
// additions and 14 shuffles where SumLanes8 one at a time takes ~7 operations a sum, most of them
// shuffles on the one port.
HWY_INLINE __m512 TileLaneSums(const __m512 (&acc)[2][4]) {
  // Step 1, vectors v = acc[i / 4][i % 4] in pairs (2m, 2m + 1): 128-bit blocks 0 + 1 and 2 + 3
  // of each, giving pair m's four 256-bit halves as four 4-lane sums.
  __m512 fours[4];
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 a = acc[m / 2][2 * (m % 2)], b = acc[m / 2][2 * (m % 2) + 1];
    fours[m] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xdd));
  }
  // Step 2: lanes 0 + 2 and 1 + 3 of each block, pairs (0, 1) and (2, 3).
  __m512 twos[2];
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    const __m512 a = fours[2 * k], b = fours[2 * k + 1];
    twos[k] = _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xee));
  }
  // Step 3: lanes 0 + 1 of each half block.
  return _mm512_add_ps(_mm512_shuffle_ps(twos[0], twos[1], 0x88),
                       _mm512_shuffle_ps(twos[0], twos[1], 0xdd));
}

// result[r][t] for 4 rows and tokens 0-3 (`first`, TileLaneSums') and 4-7 (`second`; for a
// 4-token tile anything, those columns then unread).
HWY_INLINE void StoreTileSums(__m512 first, __m512 second, float (*result)[kTileTokens]) {
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    _mm512_storeu_ps(
        &result[2 * half][0],
        _mm512_permutex2var_ps(first, _mm512_load_si512(kTileSumIndices.rows[half]), second));
  }
}

// result[r][t] for kRows rows (kGroupRows, or 1) x kTokens tokens (2, 4, or 8 as two token
// tiles, the second `tile_x_bytes` / `tile_meta_bytes` past the first in the layout; a short
// token tile's missing tokens are zeros there), kKind 0 (I8, any scales), 2, 3 or kKindMxfp4
// (GemmRow's kinds; MXFP4: each nibble through the kMxfp4BiasedTable shuffle, the chains
// starting at -kMxfp4Bias x sum(q)). A 512-bit vector holds a pair of rows, row 2q in lanes 0-7
// and 2q + 1 in 8-15 (a single row: lanes 0-7 alone count), against one token's activations in
// both halves. packed: the tile's first row in the plan, rows `row_bytes` apart (I8: its first
// pair in PanelOperands::codes, PackInt8Row's layout); tails: I4's expanded last chunks
// (PanelOperands) when the rows end in a shorter one; scales, zeros: the tile's first lanes in
// the panel (PanelOperands); x, meta: its first token tile's (LayOutTokenTile). prefetch (nullptr:
// none): rows in the plan, `row_bytes` (I8: `cols`) apart, to prefetch (the same rows of the
// thread's next panel), spread over the `calls` tiles that pass over these rows, of which this is
// `call`: a chunk of the rows every `calls` chunk steps, so that the reads from memory keep pace
// with the compute rather than queue up at one tile.
// With 8 tokens the f32 chains live in memory (L1), each loaded and stored once a chunk: the 16
// int32 chains of 2 row pairs x 8 tokens take half the registers, and each unpacked weight vector
// then meets 8 tokens (per 4096 multiply-adds 4 inserts and 12 nibble operations against 8 and
// 24 at 4 tokens; measured in a synthetic panel with the weights streaming, 1 thread, 183 -> 203
// GMAC/s at K = 2048 and 186 -> 206 at 5632).
template <int kRows, int kTokens, int kKind>
void Tile(const uint8_t* packed, int64_t row_bytes, const uint8_t* tails, int64_t cols,
          const float* scales, const int32_t* zeros, const int8_t* x, const uint8_t* meta,
          int64_t tile_x_bytes, int64_t tile_meta_bytes, const uint8_t* prefetch, int64_t call,
          int64_t calls, float (*result)[kTileTokens]) {
  static_assert(kRows == kGroupRows || kRows == 1, "a tile is two row pairs or one row");
  static_assert(kTokens == 2 || kTokens == kGemmTokens || kTokens == kTileTokens,
                "a tile is a token pair, a token tile or two");
  constexpr int kRowPairs = kRows == 1 ? 1 : kRows / 2;
  // Token pairs a chunk of each token tile of the layout has (LayOutTokenTile).
  constexpr int kLayoutPairs = std::min(kTokens, kGemmTokens) / 2;
  constexpr bool kZeroPoints = kKind == 3;
  constexpr bool kMxfp4 = kKind == kKindMxfp4;
  constexpr bool kBytes = kKind < 2;  // I8: a byte per code, no nibbles
  constexpr bool kChainsInMemory = kTokens > kGemmTokens;
  const __m512i mask = _mm512_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4BiasedTable.bytes)));
  // The f32 chains: in registers, or (kChainsInMemory) in `chains`.
  __m512 acc[kRowPairs][kChainsInMemory ? 1 : kTokens];
  alignas(64) float chains[kChainsInMemory ? kRowPairs : 1][kChainsInMemory ? kTokens : 1][16];
#pragma GCC unroll 2
  for (int q = 0; q < kRowPairs; ++q) {
    if constexpr (kChainsInMemory) {
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) _mm512_store_ps(chains[q][t], _mm512_setzero_ps());
    } else {
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) acc[q][t] = _mm512_setzero_ps();
    }
  }
  // The 32 bytes at `at` in both halves of a vector.
  auto both_halves = [&](const uint8_t* at) HWY_ATTR {
    return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
  };
  // Token t's 32 bytes at `offset` in its pair's vectors or meta, in both halves.
  auto token_bytes = [&](const uint8_t* base, int64_t tile_bytes, int64_t offset, int t) HWY_ATTR {
    return both_halves(base + t / kGemmTokens * tile_bytes + offset + 32 * (t % 2));
  };
  // One chunk whose row r starts at codes + r * stride. Per (row pair, token) one chain of 8
  // vpdpbusd, vector k of the two rows (one in each half) against vector k of the token in both
  // halves, so that lanes j and 8 + j end at block j's sums of rows 2q and 2q + 1.
  auto chunk_step = [&](const uint8_t* codes, int64_t stride) HWY_ATTR {
    const auto* x_bytes = reinterpret_cast<const uint8_t*>(x);
    __m512i isums[kRowPairs][kTokens];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const __m512i start =
          kZeroPoints ? _mm512_setzero_si512()
                      : token_bytes(meta, tile_meta_bytes, t % 4 / 2 * kPairMetaBytes + 64, t);
#pragma GCC unroll 2
      for (int q = 0; q < kRowPairs; ++q) isums[q][t] = start;
    }
#pragma GCC unroll 4
    for (int slice = 0; slice < 4; ++slice) {
      // Lane-order vectors 2 slice (low nibbles) and 2 slice + 1 (high) of each row pair.
      __m512i low[kRowPairs], high[kRowPairs];
#pragma GCC unroll 2
      for (int q = 0; q < kRowPairs; ++q) {
        if constexpr (kBytes) {
          // PackInt8Row's layout: per slice the pair's low vectors, then its high ones.
          if constexpr (kRows == 1) {
            low[q] = both_halves(codes + 64 * slice);
            high[q] = both_halves(codes + 64 * slice + 32);
          } else {
            const uint8_t* vectors = codes + 2 * q * stride + 128 * slice;
            low[q] = _mm512_load_si512(vectors);
            high[q] = _mm512_load_si512(vectors + 64);
          }
        } else {
          const uint8_t* row = codes + 2 * q * stride + 32 * slice;
          const __m256i first = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row));
          const __m512i bytes =
              kRows == 1
                  ? _mm512_broadcast_i64x4(first)
                  : _mm512_inserti64x4(
                        _mm512_castsi256_si512(first),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + stride)), 1);
          low[q] = _mm512_and_si512(bytes, mask);
          high[q] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
          if constexpr (kMxfp4) {
            low[q] = _mm512_shuffle_epi8(table, low[q]);
            high[q] = _mm512_shuffle_epi8(table, high[q]);
          }
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const int64_t vector = (t % 4 / 2 * 8 + 2 * slice) * 64;
        const __m512i low_x = token_bytes(x_bytes, tile_x_bytes, vector, t);
        const __m512i high_x = token_bytes(x_bytes, tile_x_bytes, vector + 64, t);
#pragma GCC unroll 2
        for (int q = 0; q < kRowPairs; ++q) {
          isums[q][t] = vnni::DotBytes(vnni::DotBytes(isums[q][t], low[q], low_x), high[q], high_x);
        }
      }
    }
    // The pair's 16 lanes of weight scales (zero points): rows 2q and 2q + 1, or the row twice.
    auto pair_lanes = [&](const auto* lanes, int q) HWY_ATTR {
      return kRows == 1 ? both_halves(reinterpret_cast<const uint8_t*>(lanes))
                        : _mm512_loadu_si512(lanes + 16 * q);
    };
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const int64_t pair_meta = t % 4 / 2 * kPairMetaBytes;
      const __m512 activation_scales =
          _mm512_castsi512_ps(token_bytes(meta, tile_meta_bytes, pair_meta, t));
#pragma GCC unroll 2
      for (int q = 0; q < kRowPairs; ++q) {
        __m512i sums = isums[q][t];
        if constexpr (kZeroPoints) {
          sums = _mm512_sub_epi32(
              sums, _mm512_mullo_epi32(pair_lanes(zeros, q),
                                       token_bytes(meta, tile_meta_bytes, pair_meta + 64, t)));
        }
        const __m512 products =
            _mm512_mul_ps(_mm512_castsi512_ps(pair_lanes(scales, q)), activation_scales);
        if constexpr (kChainsInMemory) {
          _mm512_store_ps(chains[q][t], _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), products,
                                                        _mm512_load_ps(chains[q][t])));
        } else {
          acc[q][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), products, acc[q][t]);
        }
      }
    }
    scales += kRows * 8;
    if constexpr (kZeroPoints) zeros += kRows * 8;
    x += kLayoutPairs * 2 * kChunkCodes;
    meta += kLayoutPairs * kPairMetaBytes;
  };
  // A chunk's bytes in the plan: 256 I8 codes, or 128 bytes of I4 nibbles.
  constexpr int64_t kPlanChunkBytes = kBytes ? kChunkCodes : plan::kInt4ChunkBytes;
  const int64_t plan_row_bytes = kBytes ? cols : row_bytes;
  // Chunks read from `packed` (I4: the whole ones; a shorter last one comes from `tails`). I8's
  // pairs interleave their two rows chunk by chunk.
  const int64_t chunks = kBytes ? (cols + kChunkCodes - 1) / kChunkCodes : cols / kBlock / 8;
  const int64_t chunk_bytes = kBytes ? (kRows == 1 ? 1 : 2) * kChunkCodes : plan::kInt4ChunkBytes;
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    // Chunk step `step` of the rows' calls prefetches chunk step / calls of the next panel.
    const int64_t step = call * chunks + chunk;
    if (prefetch != nullptr && step % calls == 0) {
      PrefetchRows<kRows, kPlanChunkBytes>(prefetch + step / calls * kPlanChunkBytes,
                                           plan_row_bytes);
    }
    chunk_step(packed + chunk * chunk_bytes, row_bytes);
  }
  const int64_t blocks = kBytes ? 0 : cols / kBlock;
  if (blocks % 8 != 0) chunk_step(tails, plan::kInt4ChunkBytes);
  if constexpr (kRows == kGroupRows && kTokens >= kGemmTokens) {
    __m512 sums[2];
#pragma GCC unroll 2
    for (int half = 0; half < kTokens / kGemmTokens; ++half) {
      __m512 four[2][4];
#pragma GCC unroll 2
      for (int q = 0; q < 2; ++q) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          if constexpr (kChainsInMemory) {
            four[q][t] = _mm512_load_ps(chains[q][4 * half + t]);
          } else {
            four[q][t] = acc[q][t];
          }
        }
      }
      sums[half] = TileLaneSums(four);
    }
    StoreTileSums(sums[0], kTokens > kGemmTokens ? sums[1] : sums[0], result);
  } else {
#pragma GCC unroll 2
    for (int q = 0; q < kRowPairs; ++q) {
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t) {
        const __m512 chain = kChainsInMemory ? _mm512_load_ps(chains[q][t]) : acc[q][t];
        result[2 * q][t] = SumLanes8(_mm512_castps512_ps256(chain));
        if constexpr (kRows > 1) {
          result[2 * q + 1][t] = SumLanes8(_mm512_extractf32x8_ps(chain, 1));
        }
      }
    }
  }
}

}  // namespace vnni512
#endif  // LLMRT_QUANT_VNNI512

// kKind: GemmRow's kinds. kVnni: the VNNI arithmetic of this body (AVX-VNNI lanes in the AVX2
// tiles; AVX512-VNNI runs vnni512's tiles instead).
template <int kRows, int kTokens, int kKind, bool kVnni>
void Tile(const GemmRow* rows, const uint8_t* const* unpacked, const TokenTile& tile, int64_t cols,
          int group_shift, float (*result)[kGemmTokens]) {
  if constexpr (kKind >= 2) {
    for (int r = 0; r < kRows; ++r) {
      TileI4<kTokens, kKind, kVnni>(rows[r], unpacked[r], tile, cols, group_shift, result[r]);
    }
  } else {
    TileI8<kRows, kTokens, kKind == 1, kVnni>(rows, tile, cols, group_shift, result);
  }
}

// A tile of `num_rows` (kGemmRows, or 1 for a panel's last rows) x `tokens` (1 to kGemmTokens:
// the last token tile may be short).
template <int kKind, bool kVnni>
void RunTile(int num_rows, int tokens, const GemmRow* rows, const uint8_t* const* unpacked,
             const TokenTile& tile, int64_t cols, int group_shift, float (*result)[kGemmTokens]) {
#define LLMRT_GEMM_TILE(kTokens)                                                                 \
  (num_rows == kGemmRows                                                                         \
       ? Tile<kGemmRows, kTokens, kKind, kVnni>(rows, unpacked, tile, cols, group_shift, result) \
       : Tile<1, kTokens, kKind, kVnni>(rows, unpacked, tile, cols, group_shift, result))
  static_assert(kGemmTokens == 4, "one case per token count");
  switch (tokens) {
    case 1:
      LLMRT_GEMM_TILE(1);
      break;
    case 2:
      LLMRT_GEMM_TILE(2);
      break;
    case 3:
      LLMRT_GEMM_TILE(3);
      break;
    default:
      LLMRT_GEMM_TILE(4);
      break;
  }
#undef LLMRT_GEMM_TILE
}

// Bytes past a panel's rows to its thread's next panel (0 when this is the thread's last or the
// next one is shorter): the prefetch distance, so that the next panel's weights arrive from
// memory while this panel computes (at a batch of 16 tokens a panel's compute and its memory read
// take comparable time).
int64_t NextPanelOffset(int64_t panel, int64_t panel_end, int64_t row_end, int64_t rows,
                        int64_t row_bytes) {
  return panel + 1 < panel_end && row_end + kPanelRows <= rows ? kPanelRows * row_bytes : 0;
}

template <int kKind, bool kVnni>
void GemmTyped(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
               const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  constexpr bool kInt4 = kKind >= 2;
  const int64_t blocks = x.padded_cols / kBlock;
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = kInt4 ? w.cols / 2 : w.cols;
  // Unpacked I4 row: whole 8-block steps of one byte per code.
  const int64_t unpacked_bytes = (w.cols / kBlock + 7) / 8 * 8 * kBlock;
  const int group_shift = QuantGroupShift(w.group_size, w.cols);
  const int64_t num_panels = (w.rows + kPanelRows - 1) / kPanelRows;
  pool.ParallelFor(num_panels, [&](int64_t panel_begin, int64_t panel_end, int32_t) {
    // I4 panels unpacked (kPanelRows x K bytes: 88 KiB at K = 5632), kept per thread so that a
    // step allocates only when a matrix is wider than any before.
    uint8_t* unpacked_panel =
        kInt4 ? ThreadLocalBuffer<UnpackedPanels, uint8_t>(kPanelRows * unpacked_bytes) : nullptr;
    PanelColumns<kPanelRows> columns;
    int32_t output = 0;
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      const int64_t row_begin = panel * kPanelRows;
      const int64_t row_end = std::min(w.rows, row_begin + kPanelRows);
      // I4: the thread's next panel is prefetched while this one is unpacked.
      const int64_t next_panel_offset =
          NextPanelOffset(panel, panel_end, row_end, w.rows, row_bytes);
      columns.Resolve(outputs, num_outputs, &output, row_begin, row_end);
      if (kInt4) {
        for (int64_t n = row_begin; n < row_end; ++n) {
          UnpackInt4Row<kKind == kKindMxfp4>(w.data + n * row_bytes, w.cols,
                                             unpacked_panel + (n - row_begin) * unpacked_bytes,
                                             next_panel_offset);
        }
      }
      // Token tiles outside, weight rows inside: a tile's codes (4 x K bytes) stay in L1 while
      // the panel's rows stream through from L2.
      for (int64_t token = 0; token < x.num_rows; token += kGemmTokens) {
        const int tokens = static_cast<int>(std::min<int64_t>(kGemmTokens, x.num_rows - token));
        TokenTile tile;
        for (int t = 0; t < tokens; ++t) {
          tile.codes[t] = x.codes + (token + t) * x.padded_cols;
          tile.scales[t] = x.scales + (token + t) * blocks;
          tile.sums[t] = x.sums + (token + t) * blocks;
        }
        for (int64_t n = row_begin; n < row_end;) {
          const int num_rows = row_end - n >= kGemmRows ? kGemmRows : 1;
          GemmRow rows[kMaxGemmRows];
          const uint8_t* unpacked[kMaxGemmRows];
          for (int r = 0; r < num_rows; ++r) {
            rows[r] = GemmRowOf(w, n + r, row_bytes, groups);
            // I8 has no unpacked panel (null: no offset may be applied to it).
            unpacked[r] = unpacked_panel != nullptr
                              ? unpacked_panel + (n + r - row_begin) * unpacked_bytes
                              : nullptr;
          }
          float result[kMaxGemmRows][kGemmTokens];
          RunTile<kKind, kVnni>(num_rows, tokens, rows, unpacked, tile, w.cols, group_shift,
                                result);
          columns.Store(result, num_rows, tokens, row_begin, n - row_begin, token, bias);
          n += num_rows;
        }
      }
    }
  });
}

#if LLMRT_QUANT_VNNI512
// Prefetches the cache lines of [data, data + bytes).
HWY_INLINE void PrefetchLines(const void* data, int64_t bytes) {
  const char* begin = static_cast<const char*>(data);
  for (int64_t offset = 0; offset < bytes; offset += 64) {
    _mm_prefetch(begin + offset, _MM_HINT_T0);
  }
}

// QuantizedGemm on AVX512-VNNI (vnni512 above) for I8 (kKind 0, any scales), I4 and MXFP4 (2, 3,
// kKindMxfp4): the token tiles laid out once per call, then, per panel, its scales converted (I8:
// its codes laid out) and every token tile passed over its 4-row tiles (a panel's last rows one
// at a time).
template <int kKind>
void GemmVnni512(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                 const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  using vnni512::kChunkCodes;
  using vnni512::kGroupRows;
  using vnni512::kPairMetaBytes;
  constexpr bool kInt8 = kKind < 2;
  constexpr bool kZeroPoints = kKind == 3;
  constexpr int32_t kSumFactor = kInt8                 ? -128
                                 : kZeroPoints         ? 1
                                 : kKind == kKindMxfp4 ? -kMxfp4Bias
                                                       : -8;
  // I8 rows may end in a partial block (one scale per row), which the tiles take as a block.
  const int64_t blocks = (w.cols + kBlock - 1) / kBlock;
  const int64_t chunks = (blocks + 7) / 8;
  const int64_t groups = w.cols / w.group_size;
  const int64_t row_bytes = kInt8 ? w.cols : w.cols / 2;
  const int group_shift = QuantGroupShift(w.group_size, w.cols);
  const int64_t tiles = (x.num_rows + kGemmTokens - 1) / kGemmTokens;
  const int64_t tile_codes = chunks * kGemmTokens * kChunkCodes;
  const int64_t tile_meta = chunks * (kGemmTokens / 2) * kPairMetaBytes;
  // Read by every thread: the calling thread's buffer, which no panel uses.
  uint8_t* token_tiles =
      ThreadLocalBuffer<vnni512::TokenTiles, uint8_t>(tiles * (tile_codes + tile_meta));
  uint8_t* token_meta = token_tiles + tiles * tile_codes;
  auto tile_tokens = [&](int64_t tile) {
    return static_cast<int>(std::min<int64_t>(kGemmTokens, x.num_rows - tile * kGemmTokens));
  };
  // Whether tiles `tile` and `tile` + 1 are whole and pass as one 8-token tile (Tile).
  const int64_t wide_tiles = x.num_rows / kGemmTokens / 2;
  auto wide_tile = [&](int64_t tile) { return tile < 2 * wide_tiles; };
  // Tile calls over each row of a panel: the prefetch of the next panel is spread over them.
  const int64_t calls = wide_tiles + (tiles - 2 * wide_tiles);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    vnni512::LayOutTokenTile(x, blocks, chunks, tile, tile_tokens(tile), kSumFactor, kInt8,
                             token_tiles + tile * tile_codes, token_meta + tile * tile_meta);
  }
  const int64_t num_panels = (w.rows + kPanelRows - 1) / kPanelRows;
  pool.ParallelFor(num_panels, [&](int64_t panel_begin, int64_t panel_end, int32_t) {
    // Scales (and zero points) of 8 lanes a chunk, then I4's tails or I8's codes.
    const int64_t lanes = kPanelRows * chunks * 8;
    const int64_t lane_bytes = lanes * 4 * (kZeroPoints ? 2 : 1);
    const int64_t tail_bytes = kInt8 ? 0 : kPanelRows * plan::kInt4ChunkBytes;
    const int64_t code_bytes = kInt8 ? kPanelRows * chunks * kChunkCodes : 0;
    uint8_t* buffer =
        ThreadLocalBuffer<vnni512::PanelScales, uint8_t>(lane_bytes + tail_bytes + code_bytes);
    const vnni512::PanelOperands operands{
        reinterpret_cast<float*>(buffer),
        kZeroPoints ? reinterpret_cast<int32_t*>(buffer + lanes * 4) : nullptr, buffer + lane_bytes,
        kInt8 ? buffer + lane_bytes + tail_bytes : nullptr, chunks};
    PanelColumns<kPanelRows> columns;
    int32_t output = 0;
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      const int64_t row_begin = panel * kPanelRows;
      const int64_t rows = std::min(w.rows, row_begin + kPanelRows) - row_begin;
      // Rows [0, grouped) of the panel in tiles of kGroupRows, the rest one at a time.
      const int64_t grouped = rows / kGroupRows * kGroupRows;
      auto group_of = [&](int64_t row) {
        return row < grouped ? row / kGroupRows * kGroupRows : row;
      };
      auto group_rows = [&](int64_t first) { return first < grouped ? kGroupRows : 1; };
      const int64_t next_panel_offset =
          NextPanelOffset(panel, panel_end, row_begin + rows, w.rows, row_bytes);
      columns.Resolve(outputs, num_outputs, &output, row_begin, row_begin + rows);
      for (int64_t row = 0; row < rows; ++row) {
        const int64_t n = row_begin + row;
        vnni512::PreparePanelRow(GemmRowOf(w, n, row_bytes, groups), w.cols, group_shift,
                                 group_of(row), group_rows(group_of(row)), row, operands);
      }
      // Whole token tiles two at a time (8-token tiles), then the rest one at a time.
      for (int64_t tile = 0, call = 0; tile < tiles; tile += wide_tile(tile) ? 2 : 1, ++call) {
        const bool wide = wide_tile(tile);
        const int tokens = wide ? vnni512::kTileTokens : tile_tokens(tile);
        const int8_t* tile_x = reinterpret_cast<const int8_t*>(token_tiles + tile * tile_codes);
        const uint8_t* meta = token_meta + tile * tile_meta;
        for (int64_t first = 0; first < rows; first += group_rows(first)) {
          const int num_rows = static_cast<int>(group_rows(first));
          const float* scales = operands.scales + first * chunks * 8;
          const int32_t* zeros = kZeroPoints ? operands.zeros + first * chunks * 8 : nullptr;
          const int64_t stride = kInt8 ? chunks * kChunkCodes : row_bytes;
          const uint8_t* packed =
              kInt8 ? operands.codes + first * stride : w.data + (row_begin + first) * row_bytes;
          const uint8_t* tails = operands.tails + first * plan::kInt4ChunkBytes;
          const uint8_t* prefetch =
              next_panel_offset != 0 ? w.data + (row_begin + first) * row_bytes + next_panel_offset
                                     : nullptr;
          if (call == 0 && next_panel_offset != 0) {
            // The scales (MXFP4: E8M0 bytes) and zero points of the next panel's rows in this
            // group, which its PreparePanelRow reads first: not prefetched they cost ~8% of a
            // 16-token GEMM in waits on memory; prefetched a row group at a time beside the
            // first token tile rather than all at the panel's start. (Written out here: in a
            // lambda of its own GCC's pure-const analysis deleted the prefetches.)
            const int64_t next = (row_begin + kPanelRows + first) * groups;
            if constexpr (kKind == kKindMxfp4) {
              PrefetchLines(w.exponents + next, num_rows * groups);
            } else {
              PrefetchLines(w.scales + next, num_rows * groups * sizeof(uint16_t));
            }
            if (kZeroPoints) PrefetchLines(w.zero_points + next, num_rows * groups);
          }
          float result[kMaxGemmRows][vnni512::kTileTokens];
#define LLMRT_VNNI512_TILE(kRows, kTokens)                                                         \
  vnni512::Tile<kRows, kTokens, kKind>(packed, stride, tails, w.cols, scales, zeros, tile_x, meta, \
                                       tile_codes, tile_meta, prefetch, call, calls, result)
#define LLMRT_VNNI512_TILES(kRows)                                        \
  (tokens > kGemmTokens ? LLMRT_VNNI512_TILE(kRows, vnni512::kTileTokens) \
   : tokens > 2         ? LLMRT_VNNI512_TILE(kRows, kGemmTokens)          \
                        : LLMRT_VNNI512_TILE(kRows, 2))
          num_rows == kGroupRows ? LLMRT_VNNI512_TILES(kGroupRows) : LLMRT_VNNI512_TILES(1);
#undef LLMRT_VNNI512_TILES
#undef LLMRT_VNNI512_TILE
          columns.Store(result, num_rows, tokens, row_begin, first, tile * kGemmTokens, bias);
        }
      }
    }
  });
}
#endif  // LLMRT_QUANT_VNNI512

template <bool kVnni>
void GemmKinds(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
               const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  // AVX512-VNNI: the vnni512 tiles for every kind (its AVX2-form tiles are not even built).
#if LLMRT_QUANT_VNNI512
  if constexpr (kVnni) {
    if (w.dtype == plan::FP4_E2M1) {
      GemmVnni512<kKindMxfp4>(pool, x, w, bias, outputs, num_outputs);
    } else if (w.dtype == plan::I4) {
      w.zero_points != nullptr ? GemmVnni512<3>(pool, x, w, bias, outputs, num_outputs)
                               : GemmVnni512<2>(pool, x, w, bias, outputs, num_outputs);
    } else {
      GemmVnni512<0>(pool, x, w, bias, outputs, num_outputs);
    }
  } else
#endif
  {
    if (w.dtype == plan::FP4_E2M1) {
      GemmTyped<kKindMxfp4, kVnni>(pool, x, w, bias, outputs, num_outputs);
    } else if (w.dtype == plan::I4) {
      w.zero_points != nullptr ? GemmTyped<3, kVnni>(pool, x, w, bias, outputs, num_outputs)
                               : GemmTyped<2, kVnni>(pool, x, w, bias, outputs, num_outputs);
    } else {
      w.group_size == w.cols ? GemmTyped<1, kVnni>(pool, x, w, bias, outputs, num_outputs)
                             : GemmTyped<0, kVnni>(pool, x, w, bias, outputs, num_outputs);
    }
  }
}

#endif  // LLMRT_GEMM_AVX2

}  // namespace

void LaneOrderInt4ActivationsImpl(int8_t* codes, int64_t padded_cols) {
#if LLMRT_GEMM_AVX2
  for (int64_t chunk = 0; chunk < padded_cols; chunk += 8 * kBlock) {
    LaneOrderChunk(reinterpret_cast<uint8_t*>(codes + chunk));
  }
#else
  (void)codes, (void)padded_cols;
  HWY_ABORT("LaneOrderInt4Activations: no multi-row kernel for target %s",
            hwy::TargetName(HWY_TARGET));
#endif
}

void QuantizedGemmImpl(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                       const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
#if LLMRT_GEMM_AVX2
#if LLMRT_QUANT_VNNI
  if (vnni::Active()) {
    GemmKinds<true>(pool, x, w, bias, outputs, num_outputs);
    return;
  }
#endif
  GemmKinds<false>(pool, x, w, bias, outputs, num_outputs);
#else
  (void)pool, (void)x, (void)w, (void)bias, (void)outputs, (void)num_outputs;
  HWY_ABORT("QuantizedGemm: no multi-row kernel for target %s", hwy::TargetName(HWY_TARGET));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(QuantizedGemmImpl);
HWY_EXPORT(LaneOrderInt4ActivationsImpl);

void LaneOrderInt4Activations(int8_t* codes, int64_t padded_cols) {
  HWY_DYNAMIC_DISPATCH(LaneOrderInt4ActivationsImpl)(codes, padded_cols);
}

void QuantizedGemm(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                   const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  if (x.num_rows <= 0 || w.rows <= 0) return;
  if (QuantizedGemmOnAmx(pool, x, w, bias, outputs, num_outputs)) return;
  HWY_DYNAMIC_DISPATCH(QuantizedGemmImpl)(pool, x, w, bias, outputs, num_outputs);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
