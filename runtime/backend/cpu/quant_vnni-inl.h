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
// - I8 on AVX3: per chunk of 8 blocks the exact int32 block sums, one convert and one FMA with
//   weight scale x activation scale per lane into an 8-lane f32 chain, then SumLanes8: I4's
//   arithmetic, in the decode GEMV (GemvI8, from the plan's codes) and the GEMM (quant_gemm.cc,
//   from panels in lane order) alike, so GEMV = GEMM to the bit. AVX2 instead converts and
//   scales each block's 8 lane sums of 4 columns, so the two differ by f32 rounding alone
//   (~1e-7 relative to the sum of the terms' magnitudes).
// I8 codes are signed; vpdpbusd multiplies unsigned by signed bytes, so the weights go in as
// code ^ 0x80 = code + 128 (unsigned) and each lane starts from -128 x (its 4 activation codes'
// sum), which leaves exactly sum(code x q) (a lane of a block's 32 columns stays within
// 32 * 255 * 127 + 128 * 32 * 127: no overflow).

#if defined(LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#undef LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#else
#define LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
#endif

#include <algorithm>
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

// The f32 weight scales of blocks [block, block + count) of a row whose F16 scales are `scales`
// (groups of 32 << group_shift, 63: one per row; count <= 8): lanes past count 0, nothing past
// the row read. F16C is exact, so every kernel that takes a row's scales this way agrees.
HWY_INLINE __m256 ScaleLanes8(const uint16_t* scales, int64_t block, int64_t count,
                              int group_shift) {
  if (group_shift == 0 && count == 8) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + block)));
  }
  if (group_shift == 63) {
    // Not through memory: 16-bit stores read back as one vector stall the store forwarding.
    const __m256i present = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(count)),
                                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_and_ps(_mm256_set1_ps(_cvtsh_ss(scales[0])), _mm256_castsi256_ps(present));
  }
  alignas(16) uint16_t halves[8] = {};
  for (int64_t i = 0; i < count; ++i) halves[i] = scales[(block + i) >> group_shift];
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(halves)));
}

// The zero points of blocks [block, block + count) of a row as int32 lanes (as ScaleLanes8).
HWY_INLINE __m256i ZeroLanes8(const uint8_t* zero_points, int64_t block, int64_t count,
                              int group_shift) {
  if (group_shift == 0 && count == 8) {
    return _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(zero_points + block)));
  }
  alignas(32) int32_t zeros[8] = {};
  for (int64_t i = 0; i < count; ++i) zeros[i] = zero_points[(block + i) >> group_shift];
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(zeros));
}

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

// The 8 exact int32 block sums of a chunk from 4 vectors of lane sums in natural order (vector
// k: blocks 2k and 2k + 1 in lanes 0-7 and 8-15, 4 columns a lane), block j in lane j: three
// rounds of adding even lanes to odd ones, each halving the lanes per block.
HWY_INLINE __m256i ReduceBlockLanes(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  auto fold = [&](__m512i a, __m512i b) HWY_ATTR {
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b),
                            _mm512_permutex2var_epi32(a, odd, b));
  };
  // 4 lanes a block for blocks 0-3 and 4-7, then 2 lanes a block for blocks 0-7.
  const __m512i pairs = fold(fold(s0, s1), fold(s2, s3));
  return _mm512_cvtepi64_epi32(_mm512_add_epi32(pairs, _mm512_srli_epi64(pairs, 32)));
}

// The I8 decode GEMV on AVX512-VNNI: result[r] = the dot product of weight row r (row_codes[r],
// its F16 scales row_scales[r], groups of 32 << group_shift or one per row at 63) with one
// activation row (x_codes in natural order, padded with zero blocks to whole chunks; x_scales
// zero past the row's blocks), in the I8 GEMM's arithmetic (quant_gemm.cc, GemmVnni512): per
// chunk of 8 blocks the exact int32 block sums, one convert and one FMA with weight scale x
// activation scale per lane into an 8-lane f32 chain, then SumLanes8. The sums come from 4
// vpdpbusd per row and chunk on the plan's codes (code ^ 0x80, the lanes started at -128 x
// their activations' sum) and ReduceBlockLanes; a row's last chunk is loaded with a mask, so
// nothing past the row is read and a partial last block sums its columns alone.
// prefetch_offset (0: none): bytes past each row's loads to prefetch.
template <int kRows>
void GemvI8(const uint8_t* const* row_codes, const uint16_t* const* row_scales,
            const int8_t* x_codes, const float* x_scales, int64_t cols, int group_shift,
            float* result, int64_t prefetch_offset) {
  const uint8_t* w[kRows];
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    w[r] = row_codes[r];
    acc[r] = _mm256_setzero_ps();
  }
  const int64_t blocks = (cols + 31) / 32;
  // One scale per row: its 8 lanes converted once.
  __m256 row_scales8[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    row_scales8[r] = group_shift == 63 ? ScaleLanes8(row_scales[r], 0, 8, 63) : _mm256_setzero_ps();
  }
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t block = 0; block < blocks; block += 8) {
    const int64_t count = std::min<int64_t>(8, blocks - block);
    const int64_t column = block * 32;
    // Bytes of the row in each of the chunk's 4 vectors.
    __mmask64 masks[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const int64_t present = std::clamp<int64_t>(cols - column - 64 * k, 0, 64);
      masks[k] = present == 64 ? ~__mmask64{0} : (__mmask64{1} << present) - 1;
    }
    __m512i x[4], start[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      x[k] = _mm512_loadu_si512(x_codes + column + 64 * k);
      start[k] =
          _mm512_sub_epi32(_mm512_setzero_si512(), DotBytes(_mm512_setzero_si512(), bias, x[k]));
    }
    const __m256 activation_scales = _mm256_loadu_ps(x_scales + block);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* codes = w[r] + column;
      __m512i lanes[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        if (prefetch_offset != 0) _mm_prefetch(codes + 64 * k + prefetch_offset, _MM_HINT_T0);
        lanes[k] = DotBytes(
            start[k], _mm512_xor_si512(bias, _mm512_maskz_loadu_epi8(masks[k], codes + 64 * k)),
            x[k]);
      }
      const __m256i sums = ReduceBlockLanes(lanes[0], lanes[1], lanes[2], lanes[3]);
      acc[r] = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(sums),
          _mm256_mul_ps(group_shift == 63 ? _mm256_maskz_mov_ps((1u << count) - 1, row_scales8[r])
                                          : ScaleLanes8(row_scales[r], block, count, group_shift),
                        activation_scales),
          acc[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) result[r] = SumLanes8(acc[r]);
}

}  // namespace vnni
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
// The AVX2 body shares the kernels' templates with AVX3 but never takes their 512-bit branches
// (`if constexpr`): declarations only, so those branches name something.
namespace vnni {
__m256i ChunkSumsUnpacked(const uint8_t* w, const int8_t* x);
template <int kRows>
void GemvI8(const uint8_t* const* row_codes, const uint16_t* const* row_scales,
            const int8_t* x_codes, const float* x_scales, int64_t cols, int group_shift,
            float* result, int64_t prefetch_offset);
}  // namespace vnni
#endif  // LLMRT_QUANT_VNNI512

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#endif  // LLMRT_BACKEND_CPU_QUANT_VNNI_INL_H_
