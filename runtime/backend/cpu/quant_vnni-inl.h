// VNNI arithmetic of the quantized kernels (AVX512-VNNI in the AVX3 body, AVX-VNNI in the AVX2
// body) and the lane reduction of every x86 quantized kernel, shared by the decode GEMV
// (quant_matmul.cc) and the multi-row GEMM (quant_gemm.cc) so that a token's result is the same
// whichever runs it. Per-target header (Highway's -inl.h
// convention): included inside both files' HWY_NAMESPACE; the content exists only in the AVX3
// and AVX2 bodies.
//
// vpdpbusd is issued through inline assembly rather than the intrinsic: the intrinsic needs
// the function compiled for avx512vnni / avxvnni, and the same templates (the I4 tiles, the
// drivers) are instantiated for machines without VNNI, where the compiler must not use it
// anywhere. An asm statement puts the one instruction exactly where the VNNI path asks for it
// and nowhere else; callers reach it only when vnni::Active() (dispatch.h's tiers). In the AVX3
// body the "v" constraints allow ymm/zmm16-31, so the assembler emits the EVEX form
// (AVX512-VNNI), never the VEX form (AVX-VNNI, which Ice Lake and Zen 4 lack); in the AVX2 body
// "{vex}" asks for the VEX form of AVX2-only CPUs with AVX-VNNI (Sierra Forest, Alder Lake).
//
// Numerics (quant_matmul.h): the integer block sums are exact on every path.
// - I4: the 8 block sums of a chunk land in the same int32 lanes as the AVX2 kernels' and the f32
//   steps after them are the AVX2 kernels' own, so VNNI and AVX2 agree to the bit.
// - I8 on AVX2: per block the same 8 int32 lanes as maddubs + madd, then AVX2's own f32 steps:
//   AVX-VNNI and AVX2 agree to the bit.
// - I8 on AVX3: two blocks per 512-bit step (block b in lanes 0-7, block b + 1 in lanes 8-15,
//   4 columns a lane as on AVX2), one FMA with [scale b x 8, scale b+1 x 8] into a 16-lane
//   accumulator, then SumLanes16. The lane sums are AVX2's; only the f32 accumulation is
//   regrouped (even and odd blocks in separate halves), so results differ from AVX2's by f32
//   reassociation alone (~1e-7 relative to the sum of the terms' magnitudes) and GEMV = GEMM to
//   the bit.
// I8 codes are signed; vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
// code ^ 0x80 = code + 128 (unsigned) and each lane starts from -128 x (its 4 activation codes'
// sum), which leaves exactly sum(code x q) (|lane| <= 4 * 255 * 127 + 128 * 4 * 127: no overflow).

#if defined(LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#undef LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#else
#define LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/plan/mxfp4.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {

// LLMRT_QUANT_VNNI: this body has a VNNI path (AVX3: AVX512-VNNI, EVEX; AVX2: AVX-VNNI, VEX,
// 256-bit only). LLMRT_QUANT_VNNI512: it has the 512-bit kernels (AVX3).
#undef LLMRT_QUANT_VNNI
#undef LLMRT_QUANT_VNNI512
#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2)
#define LLMRT_QUANT_VNNI 1
#else
#define LLMRT_QUANT_VNNI 0
#endif
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
#define LLMRT_QUANT_VNNI512 1
#else
#define LLMRT_QUANT_VNNI512 0
#endif

#if LLMRT_QUANT_VNNI
// The 8 lanes summed in one fixed order, the one reduction of every x86 quantized kernel (GEMV
// and GEMM, with VNNI or without), so that a token's result cannot depend on which ran it.
HWY_INLINE float SumLanes8(__m256 v) {
  const __m128 sum4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 sum2 = _mm_add_ps(sum4, _mm_movehl_ps(sum4, sum4));
  return _mm_cvtss_f32(_mm_add_ss(sum2, _mm_movehdup_ps(sum2)));
}

// MXFP4 (FP4_E2M1 codes, E8M0 scales) in the x86 kernels, the decode GEMV and the GEMM tiles
// alike: a chunk of 8 blocks gives 8 exact int32 block sums of 2 x e2m1(code) x q (one per lane,
// as I4's), then one convert and one FMA with weight x activation scale per lane into the
// (row, token)'s 8-lane f32 chain, and SumLanes8. The weight scale of a block is 2^(b - 127) / 2
// (exact: the halving undoes the doubling), so GEMV and GEMM agree to the bit whichever integer
// instructions produce the sums.
// The f32 weight scales of blocks [block, block + count) of an MXFP4 row (count <= 8; lanes past
// count 0, and nothing past the row is read).
// A whole chunk (the GEMV builds one per row and chunk): on AVX-512 one vscalefps, 0.5 x
// 2^(b - 127) for the 8 bytes at once, exact down to the denormal 2^-128 (b = 255, NaN in the
// table, is refused by program_check and never reaches a kernel); measured against the gather
// below, 1 thread, BM_ExpertMatMul MXFP4 gate/up: decode 75 -> 59 us, 16 tokens 845 -> 677 us.
// The AVX2 body gathers them from kMxfp4HalfScales.
struct Mxfp4HalfScales {
  float values[256] = {};
  Mxfp4HalfScales() {
    for (int b = 0; b < 256; ++b) values[b] = plan::E8M0ToF32(static_cast<uint8_t>(b)) * 0.5f;
  }
};
inline const Mxfp4HalfScales kMxfp4HalfScales{};
HWY_INLINE __m256 Mxfp4Scales8(const uint8_t* exponents, int64_t block, int64_t count) {
#if LLMRT_QUANT_VNNI512
  if (count == 8) {
    const __m256i bytes =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(exponents + block)));
    return _mm256_scalef_ps(_mm256_set1_ps(0.5f),
                            _mm256_cvtepi32_ps(_mm256_sub_epi32(bytes, _mm256_set1_epi32(127))));
  }
#endif
  if (count == 8) {
    return _mm256_i32gather_ps(
        kMxfp4HalfScales.values,
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(exponents + block))),
        4);
  }
  alignas(32) float scales[8] = {};
  for (int64_t i = 0; i < count; ++i) scales[i] = kMxfp4HalfScales.values[exponents[block + i]];
  return _mm256_load_ps(scales);
}

// The GEMM tiles multiply unsigned weight bytes (maddubs, vpdpbusd): an E2M1 code there becomes
// 2 x value + kMxfp4Bias, in 0..24, and a block's sum loses kMxfp4Bias x sum(q) in int32 (as
// I4's zero point 8), which leaves the exact sum of 2 x value x q.
inline constexpr int kMxfp4Bias = 12;
// Code -> 2 x value + kMxfp4Bias, twice (one 128-bit lane of a byte shuffle each half).
struct Mxfp4BiasedTable {
  alignas(32) int8_t bytes[32] = {};
  constexpr Mxfp4BiasedTable() {
    for (int i = 0; i < 32; ++i) bytes[i] = static_cast<int8_t>(plan::E2M1Doubled(i) + kMxfp4Bias);
  }
};
inline constexpr Mxfp4BiasedTable kMxfp4BiasedTable{};

namespace vnni {

// Whether this body's VNNI path may run now (dispatch.h's tiers avx3_vnni / avx2_vnni).
HWY_INLINE bool Active() {
#if LLMRT_QUANT_VNNI512
  return ActiveCpuExtensions().avx512_vnni;
#else
  return ActiveCpuExtensions().avx_vnni;
#endif
}

// acc[i] += sum_{j < 4} unsigned_bytes[4i + j] * signed_bytes[4i + j] (vpdpbusd, no saturation).
// AVX3: the EVEX form ("v" allows ymm16-31); AVX2: the VEX form of AVX-VNNI ("x": ymm0-15).
HWY_INLINE __m256i DotBytes(__m256i acc, __m256i unsigned_bytes, __m256i signed_bytes) {
#if LLMRT_QUANT_VNNI512
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(unsigned_bytes), "v"(signed_bytes));
#else
  asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(unsigned_bytes), "x"(signed_bytes));
#endif
  return acc;
}

// The exact int32 lane sums of the I8 products w x x over one 32-column block, 4 columns a
// lane (the lanes of AVX2's maddubs + madd): weights as code ^ 0x80 (`bias` = 0x80 bytes),
// `start` = -128 x each lane's activation sum (BlockStart8), shared by the rows.
HWY_INLINE __m256i BlockStart8(__m256i activations, __m256i bias) {
  return _mm256_sub_epi32(_mm256_setzero_si256(),
                          DotBytes(_mm256_setzero_si256(), bias, activations));
}
HWY_INLINE __m256i BlockSums8(__m256i start, __m256i weights, __m256i activations, __m256i bias) {
  return DotBytes(start, _mm256_xor_si256(weights, bias), activations);
}

// The 8 exact sums of an I4 chunk, block j in lane j, from codes unpacked in lane order (8
// vectors of 32 bytes) and activations in the same order, 256 bits at a time in two chains: the
// AVX2 body's form of ChunkSumsUnpacked.
HWY_INLINE __m256i LaneSums8(const uint8_t* w, const int8_t* x) {
  __m256i even = _mm256_setzero_si256(), odd = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int v = 0; v < 8; v += 2) {
    even = DotBytes(even, _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * v)),
                    _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32 * v)));
    odd = DotBytes(odd, _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * v + 32)),
                   _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 32 * v + 32)));
  }
  return _mm256_add_epi32(even, odd);
}

}  // namespace vnni
#endif  // LLMRT_QUANT_VNNI

#if LLMRT_QUANT_VNNI512
namespace vnni {

HWY_INLINE __m512i DotBytes(__m512i acc, __m512i unsigned_bytes, __m512i signed_bytes) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(unsigned_bytes), "v"(signed_bytes));
  return acc;
}

// The 16 lanes summed in one fixed order (halves, then SumLanes8).
HWY_INLINE float SumLanes16(__m512 v) {
  return SumLanes8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// [a x 8, b x 8] for a block pair.
HWY_INLINE __m512 PairLanes(float a, float b) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

// The 8 exact sums of an I4 chunk (8 blocks), block j in lane j, from codes unpacked to one byte
// each in lane order (quant_gemm.h's LaneOrderInt4Activations layout: 8 vectors of 32 bytes) and
// activations in the same order: 4 x 64 bytes, lanes j and 8 + j both hold block j and are
// added at the end. The same integers as the AVX2 LaneSums8 / ChunkSumsInt4.
HWY_INLINE __m256i ChunkSumsUnpacked(const uint8_t* w, const int8_t* x) {
  // Two chains of two vpdpbusd each rather than one of four: a tile's few (row, token) pairs
  // would otherwise wait on the instruction's latency.
  const __m512i zero = _mm512_setzero_si512();
  __m512i even = DotBytes(zero, _mm512_loadu_si512(w), _mm512_loadu_si512(x));
  __m512i odd = DotBytes(zero, _mm512_loadu_si512(w + 64), _mm512_loadu_si512(x + 64));
  even = DotBytes(even, _mm512_loadu_si512(w + 128), _mm512_loadu_si512(x + 128));
  odd = DotBytes(odd, _mm512_loadu_si512(w + 192), _mm512_loadu_si512(x + 192));
  const __m512i sums = _mm512_add_epi32(even, odd);
  return _mm256_add_epi32(_mm512_castsi512_si256(sums), _mm512_extracti64x4_epi64(sums, 1));
}

// result[r * result_stride + t] = the I8 dot product of weight row r (row_codes[r], its F16
// scales row_scales[r]) with activation row t (x_codes[t], its block scales x_scales[t]) over
// `cols` columns, for kRows x kTokens pairs; the arithmetic of the file comment. kRowScale: one
// weight scale per row (group_shift 63), applied to the lane sum at the end; else each block's
// FMA takes weight x activation scale. Activation rows are padded with zero blocks to whole
// chunks (QuantizedActivationCols), so a pair step may read the block after a row's last one;
// weight rows are not, and a row's odd last block is loaded with a mask (zero codes past it,
// which with the -128 x sum(q) start contribute exactly 0). prefetch_offset (0: none): bytes
// past each weight row to prefetch at the pace of the loads, e.g. the same row of the GEMM's next
// panel, which then arrives from memory while this panel computes.
template <int kRows, int kTokens, bool kRowScale>
void TileI8(const uint8_t* const* row_codes, const uint16_t* const* row_scales,
            const int8_t* const* x_codes, const float* const* x_scales, int64_t cols,
            int group_shift, float* result, int result_stride, int64_t prefetch_offset) {
  const int8_t* x[kTokens];
  const float* xs[kTokens];
  const uint8_t* w[kRows];
  __m512 acc[kRows][kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) {
    x[t] = x_codes[t];
    xs[t] = x_scales[t];
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w[r] = row_codes[r];
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  const int64_t full_blocks = cols / 32;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  auto step = [&](int64_t block, bool pair) HWY_ATTR {
    __m512i weights[kRows];
    __m512 weight_scales[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* codes = w[r] + block * 32;
      if (prefetch_offset != 0) _mm_prefetch(codes + prefetch_offset, _MM_HINT_T0);
      weights[r] = _mm512_xor_si512(
          bias, pair ? _mm512_loadu_si512(codes) : _mm512_maskz_loadu_epi8(0xffffffffull, codes));
      if constexpr (!kRowScale) {
        const uint16_t* scales = row_scales[r];
        weight_scales[r] = PairLanes(_cvtsh_ss(scales[block >> group_shift]),
                                     pair ? _cvtsh_ss(scales[(block + 1) >> group_shift]) : 0.0f);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const __m512i activations = _mm512_loadu_si512(x[t] + block * 32);
      // -128 x the sum of each lane's 4 activation codes.
      const __m512i start = _mm512_sub_epi32(_mm512_setzero_si512(),
                                             DotBytes(_mm512_setzero_si512(), bias, activations));
      const __m512 activation_scales = PairLanes(xs[t][block], xs[t][block + 1]);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const __m512 sums = _mm512_cvtepi32_ps(DotBytes(start, weights[r], activations));
        acc[r][t] = _mm512_fmadd_ps(
            sums,
            kRowScale ? activation_scales : _mm512_mul_ps(weight_scales[r], activation_scales),
            acc[r][t]);
      }
    }
  };
  int64_t block = 0;
  for (; block + 2 <= full_blocks; block += 2) step(block, true);
  if (block < full_blocks) step(block, false);
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const float row_scale = kRowScale ? _cvtsh_ss(row_scales[r][0]) : 1.0f;
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      float value = SumLanes16(acc[r][t]);
      if constexpr (kRowScale) value *= row_scale;
      // One scale per row and cols not a multiple of 32: the partial last block.
      if (full_blocks * 32 < cols) {
        int32_t isum = 0;
        for (int64_t c = full_blocks * 32; c < cols; ++c) {
          isum += static_cast<int8_t>(w[r][c]) * x[t][c];
        }
        value += row_scale * xs[t][full_blocks] * static_cast<float>(isum);
      }
      result[r * result_stride + t] = value;
    }
  }
}

}  // namespace vnni
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
// The AVX2 body shares the kernels' templates with AVX3 but never takes their 512-bit branches
// (`if constexpr`): declarations only, so those branches name something.
namespace vnni {
__m256i ChunkSumsUnpacked(const uint8_t* w, const int8_t* x);
template <int kRows, int kTokens, bool kRowScale>
void TileI8(const uint8_t* const* row_codes, const uint16_t* const* row_scales,
            const int8_t* const* x_codes, const float* const* x_scales, int64_t cols,
            int group_shift, float* result, int result_stride, int64_t prefetch_offset);
}  // namespace vnni
#endif  // LLMRT_QUANT_VNNI512

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#endif  // LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
