// QuantizedGemm on AMX-INT8 tiles (quant_gemm.h, QuantizedGemmOnAmx), compiled per SIMD target by
// Highway; only the AVX3 body has a kernel, and it runs on the avx3_amx tier (dispatch.h) or,
// for tests, with the tile instructions emulated (amx_tiles.h).
//
// Numerics: those of the avx3_vnni tier's decode GEMVs, to the bit. There I8, I4 and MXFP4 all
// reduce a chunk of 8 blocks to its 8 exact int32 block sums (block j in lane j), convert them,
// take one FMA each with weight scale x activation scale into an 8-lane f32 chain per (row,
// token), and end with SumLanes8 (quant_vnni-inl.h). A tdpbssd over one block (K = 32) gives
// the same exact block sums for 16 rows x 16 tokens at once, the weights signed (code - zero
// point, I4's zero 8, MXFP4's doubled E2M1 value: the integers the GEMV's corrections leave), so
// the tile then replays the GEMV's f32 steps: chain j of a (row, token) takes blocks j, j + 8,
// j + 16, ... in that order, each fma(float(sum), weight_scale * activation_scale, chain), and
// the 8 chains are added in SumLanes8's pairs. Blocks past the row's last (to whole chunks) add
// fma(0, 0, chain), as the GEMV's zero lanes do.
//
// Layout, once per call: each token tile of 16 tokens as tdpbssd's B operand (per block 8 rows
// of 64 bytes, row k holding columns 4k..4k+3 of the 16 tokens, natural column order), its
// activation scales per block; per panel of 16 weight rows, once per panel, the rows' codes as
// signed bytes in natural order, a block's 16 rows x 32 bytes contiguous (A, stride 32), and its
// f32 weight scales per block. I4 / MXFP4 rows leave LANE_CHUNKS lane order by an 8 x 8
// transpose of 32-bit words in registers; I8 codes are copied.
//
// Tiles (palette 1): tmm0 / tmm1 the int32 sums C of two blocks in flight (16 rows x 16
// tokens), tmm2 / tmm3 their weights A (16 x 32 bytes), tmm4 / tmm5 their activations B (8 x 64
// bytes). A block's sums are stored (1 KiB) and folded into the f32 chains by AVX-512 while the
// next block's tdpbssd runs.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/panel_columns.h"
#include "runtime/backend/cpu/quant_gemm.h"
#include "runtime/backend/cpu/thread_buffer.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/quant_gemm_amx.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "runtime/backend/cpu/quant_vnni-inl.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3

constexpr int64_t kBlock = 32;
constexpr int kTileRows = 16;                            // weight rows of a panel: tdpbssd's M
constexpr int kTileTokens = 16;                          // tokens of a token tile: N
constexpr int64_t kTileBlockBytes = kTileRows * kBlock;  // A or B of one block: 512 bytes

// Tiles 0-1 C, 2-3 A, 4-5 B (the file's comment).
AmxTileConfig MakeTileConfig() {
  AmxTileConfig config;
  for (int set = 0; set < 2; ++set) {
    config.Set(set, kTileRows, 4 * kTileTokens);       // C: 16 rows of 16 int32
    config.Set(2 + set, kTileRows, kBlock);            // A: 16 rows of a block's 32 codes
    config.Set(4 + set, kBlock / 4, 4 * kTileTokens);  // B: 8 rows of 16 tokens x 4 codes
  }
  return config;
}
const AmxTileConfig kTileConfig = MakeTileConfig();

// kKind as quant_gemm.cc's GemmRow kinds: 0 I8, 2 I4 symmetric, 3 I4 with zero points, 4 MXFP4.
constexpr int kKindI8 = 0;
constexpr int kKindZeroPoints = 3;
constexpr int kKindMxfp4 = 4;

// The dword indices of the two rounds of vpermt2d that turn a LANE_CHUNKS chunk, unpacked as 4
// vectors s = (lane-order vector 2s, vector 2s + 1) with dword j of vector v holding columns
// 4v..4v+3 of block j, into natural order, vector o = (block 2o, block 2o + 1). Round 1 takes
// vectors (0, 1) (words 0-3) and (2, 3) (words 4-7) to blocks 4a..4a+3 at dword 4 (block - 4a)
// + word % 4; round 2 takes those of a = o / 2 to vector o.
struct NaturalOrderIndices {
  alignas(64) int32_t round1[2][16];
  alignas(64) int32_t round2[2][16];
  NaturalOrderIndices() {
    for (int a = 0; a < 2; ++a) {
      for (int lane = 0; lane < 16; ++lane) {
        const int block = 4 * a + lane / 4, word = lane % 4;
        round1[a][lane] = (word / 2) * 16 + (word % 2) * 8 + block;
      }
    }
    for (int odd = 0; odd < 2; ++odd) {
      for (int lane = 0; lane < 16; ++lane) {
        const int block_in_four = 2 * odd + lane / 8, word = lane % 8;
        round2[odd][lane] = (word >= 4 ? 16 : 0) + 4 * block_in_four + word % 4;
      }
    }
  }
};
const NaturalOrderIndices kNaturalOrder{};

// Panel row `r` of `panel` (blocks x 16 rows x 32 bytes): weight row `n`'s codes as signed
// bytes in natural order (I8 copied, zero past the row; I4 minus the zero point; MXFP4 doubled
// E2M1 values), and its f32 block scales at scales[block x 16 + r] (zero past the row's blocks).
template <int kKind>
void LayOutPanelRow(const MatrixView& w, int64_t n, int group_shift, int64_t blocks,
                    int64_t padded_blocks, int r, int8_t* panel, float* scales) {
  const int64_t groups = w.cols / w.group_size;
  for (int64_t block = 0; block < padded_blocks; ++block) {
    float scale = 0.0f;
    if (block < blocks) {
      if constexpr (kKind == kKindMxfp4) {
        scale = kMxfp4HalfScales.values[w.exponents[n * groups + block]];
      } else {
        const int64_t group = group_shift == 63 ? 0 : block >> group_shift;
        scale = _cvtsh_ss(w.scales[n * groups + group]);
      }
    }
    scales[block * kTileRows + r] = scale;
  }
  auto at = [&](int64_t block) HWY_ATTR { return panel + (block * kTileRows + r) * kBlock; };
  if constexpr (kKind == kKindI8) {
    const int8_t* codes = reinterpret_cast<const int8_t*>(w.data) + n * w.cols;
    for (int64_t block = 0; block < padded_blocks; ++block) {
      const int64_t present = std::clamp<int64_t>(w.cols - block * kBlock, 0, kBlock);
      const __mmask32 mask = present == kBlock ? ~__mmask32{0} : (__mmask32{1} << present) - 1;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(block)),
                          _mm256_maskz_loadu_epi8(mask, codes + block * kBlock));
    }
    return;
  }
  const int64_t row_bytes = w.cols / 2;
  const uint8_t* packed = w.data + n * row_bytes;
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_load_si128(reinterpret_cast<const __m128i*>(kMxfp4BiasedTable.bytes)));
  const __m512i round1[2] = {_mm512_load_si512(kNaturalOrder.round1[0]),
                             _mm512_load_si512(kNaturalOrder.round1[1])};
  const __m512i round2[2] = {_mm512_load_si512(kNaturalOrder.round2[0]),
                             _mm512_load_si512(kNaturalOrder.round2[1])};
  for (int64_t first = 0; first < padded_blocks; first += 8) {
    const uint8_t* chunk = packed + first * (kBlock / 2);
    alignas(32) uint8_t expanded[plan::kInt4ChunkBytes];
    if (first + 8 > blocks) {
      // The row's last, shorter chunk (nothing past the row is read: the mapped plan may end).
      plan::ExpandInt4Chunk(packed, w.cols, first, expanded);
      chunk = expanded;
    }
    __m512i lane_order[4];
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) {
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + 32 * s));
      lane_order[s] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(bytes, mask)),
                                         _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask), 1);
    }
    __m512i fours[2][2];  // [words 0-3, 4-7][blocks 0-3, 4-7]
#pragma GCC unroll 2
    for (int a = 0; a < 2; ++a) {
      fours[0][a] = _mm512_permutex2var_epi32(lane_order[0], round1[a], lane_order[1]);
      fours[1][a] = _mm512_permutex2var_epi32(lane_order[2], round1[a], lane_order[3]);
    }
#pragma GCC unroll 4
    for (int o = 0; o < 4; ++o) {
      __m512i codes = _mm512_permutex2var_epi32(fours[0][o / 2], round2[o % 2], fours[1][o / 2]);
      __m512i zeros;
      if constexpr (kKind == kKindMxfp4) {
        codes = _mm512_shuffle_epi8(table, codes);
        zeros = _mm512_set1_epi8(static_cast<char>(kMxfp4Bias));
      } else if constexpr (kKind == kKindZeroPoints) {
        auto zero_of = [&](int64_t block) HWY_ATTR {
          if (block >= blocks) return 0;
          const int64_t group = group_shift == 63 ? 0 : block >> group_shift;
          return static_cast<int>(w.zero_points[n * groups + group]);
        };
        zeros = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(zero_of(first + 2 * o)))),
            _mm256_set1_epi8(static_cast<char>(zero_of(first + 2 * o + 1))), 1);
      } else {
        zeros = _mm512_set1_epi8(8);
      }
      codes = _mm512_sub_epi8(codes, zeros);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(first + 2 * o)),
                          _mm512_castsi512_si256(codes));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(first + 2 * o + 1)),
                          _mm512_extracti64x4_epi64(codes, 1));
    }
  }
}

// Token tile `tile` (tokens [16 tile, + tokens)) as tdpbssd's B operand: per block 8 rows of
// 64 bytes, row k holding columns 4k..4k+3 of each token (natural order), and its activation
// scales per block (tokens past the batch and blocks past the row: zero codes, zero scales).
// lane_order: x's codes are in I4's lane order (LaneOrderInt4Activations), where column 4k + i
// of block 8c + j lies at 256 c + 32 k + 4 j + i.
void LayOutTokenTile(const QuantizedActivationRows& x, int64_t tile, int tokens, int64_t blocks,
                     int64_t padded_blocks, bool lane_order, uint8_t* codes, float* scales) {
  const int64_t x_blocks = x.padded_cols / kBlock;
  for (int64_t block = 0; block < padded_blocks; ++block) {
    uint8_t* rows = codes + block * kTileBlockBytes;
    float* block_scales = scales + block * kTileTokens;
    for (int t = 0; t < kTileTokens; ++t) {
      const int64_t token = tile * kTileTokens + t;
      const bool present = t < tokens && block < blocks;
      block_scales[t] = present ? x.scales[token * x_blocks + block] : 0.0f;
      for (int k = 0; k < 8; ++k) {
        uint8_t* out = rows + 64 * k + 4 * t;
        if (!present) {
          std::memset(out, 0, 4);
          continue;
        }
        const int64_t offset =
            lane_order ? block / 8 * 256 + 32 * k + 4 * (block % 8) : block * kBlock + 4 * k;
        std::memcpy(out, reinterpret_cast<const uint8_t*>(x.codes) + token * x.padded_cols + offset,
                    4);
      }
    }
  }
}

// One token tile against one panel: result[r][t] for the panel's 16 rows and the tile's 16
// tokens, in the GEMV's arithmetic (file comment). panel / weight_scales: LayOutPanelRow's;
// codes / activation_scales: LayOutTokenTile's; padded_blocks a multiple of 8.
template <class Tiles>
void PanelTile(const int8_t* panel, const float* weight_scales, const uint8_t* codes,
               const float* activation_scales, int64_t padded_blocks,
               float (*result)[kTileTokens]) {
  alignas(64) int32_t sums[2][kTileRows][kTileTokens];
  alignas(64) float chains[8][kTileRows][kTileTokens];
  // Starts block `block`'s sums in tile set kSet (C kSet, A 2 + kSet, B 4 + kSet).
  auto start = [&](auto set, int64_t block) HWY_ATTR {
    constexpr int kSet = decltype(set)::value;
    Tiles::template Zero<kSet>();
    Tiles::template Load<2 + kSet>(panel + block * kTileBlockBytes, kBlock);
    Tiles::template Load<4 + kSet>(codes + block * kTileBlockBytes, 4 * kTileTokens);
    Tiles::template DotSigned<kSet, 2 + kSet, 4 + kSet>();
  };
  __m512 acc[kTileRows];
  // Stores set kSet's sums of block `block` and folds them into the chains.
  auto finish = [&](auto set, int64_t block) HWY_ATTR {
    constexpr int kSet = decltype(set)::value;
    Tiles::template Store<kSet>(sums[kSet], 4 * kTileTokens);
    const __m512 scales = _mm512_load_ps(activation_scales + block * kTileTokens);
    const float* row_scales = weight_scales + block * kTileRows;
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) {
      const __m512 products = _mm512_mul_ps(_mm512_set1_ps(row_scales[r]), scales);
      acc[r] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums[kSet][r])), products, acc[r]);
    }
  };
  using Set0 = std::integral_constant<int, 0>;
  using Set1 = std::integral_constant<int, 1>;
  const int64_t steps = padded_blocks / 8;  // blocks a chain takes
  for (int chain = 0; chain < 8; ++chain) {
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) acc[r] = _mm512_setzero_ps();
    // Blocks chain, chain + 8, ... in order, two in flight: tile set 0 the even steps, 1 the odd.
    start(Set0(), chain);
    for (int64_t step = 0; step < steps; step += 2) {
      const int64_t block = chain + 8 * step;
      if (step + 1 < steps) start(Set1(), block + 8);
      finish(Set0(), block);
      if (step + 2 < steps) start(Set0(), block + 16);
      if (step + 1 < steps) finish(Set1(), block + 8);
    }
#pragma GCC unroll 16
    for (int r = 0; r < kTileRows; ++r) _mm512_store_ps(chains[chain][r], acc[r]);
  }
  // SumLanes8's additions, lanes being chains: (0 + 4) + (2 + 6), then (1 + 5) + (3 + 7).
  for (int r = 0; r < kTileRows; ++r) {
    auto chain = [&](int j) HWY_ATTR { return _mm512_load_ps(chains[j][r]); };
    const __m512 even =
        _mm512_add_ps(_mm512_add_ps(chain(0), chain(4)), _mm512_add_ps(chain(2), chain(6)));
    const __m512 odd =
        _mm512_add_ps(_mm512_add_ps(chain(1), chain(5)), _mm512_add_ps(chain(3), chain(7)));
    _mm512_storeu_ps(result[r], _mm512_add_ps(even, odd));
  }
}

struct AmxTokenTiles;
struct AmxPanel;

template <class Tiles, int kKind>
void GemmAmx(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
             const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  const int64_t blocks = (w.cols + kBlock - 1) / kBlock;
  const int64_t padded_blocks = (blocks + 7) / 8 * 8;
  const int group_shift = QuantGroupShift(w.group_size, w.cols);
  const int64_t tiles = (x.num_rows + kTileTokens - 1) / kTileTokens;
  const int64_t tile_code_bytes = padded_blocks * kTileBlockBytes;
  const int64_t tile_scale_floats = padded_blocks * kTileTokens;
  // Read by every thread: the calling thread's buffer, which no panel uses; its token tiles laid
  // out by all threads.
  uint8_t* token_codes =
      ThreadLocalBuffer<AmxTokenTiles, uint8_t>(tiles * (tile_code_bytes + 4 * tile_scale_floats));
  float* token_scales = reinterpret_cast<float*>(token_codes + tiles * tile_code_bytes);
  pool.ParallelFor(tiles, [&](int64_t tile_begin, int64_t tile_end, int32_t) {
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int tokens =
          static_cast<int>(std::min<int64_t>(kTileTokens, x.num_rows - tile * kTileTokens));
      LayOutTokenTile(x, tile, tokens, blocks, padded_blocks, /*lane_order=*/kKind != kKindI8,
                      token_codes + tile * tile_code_bytes,
                      token_scales + tile * tile_scale_floats);
    }
  });
  const int64_t num_panels = (w.rows + kTileRows - 1) / kTileRows;
  pool.ParallelFor(num_panels, [&](int64_t panel_begin, int64_t panel_end, int32_t) {
    uint8_t* buffer = ThreadLocalBuffer<AmxPanel, uint8_t>(padded_blocks * kTileBlockBytes +
                                                           padded_blocks * kTileRows * 4);
    auto* panel_codes = reinterpret_cast<int8_t*>(buffer);
    auto* panel_scales = reinterpret_cast<float*>(buffer + padded_blocks * kTileBlockBytes);
    Tiles::Configure(kTileConfig.bytes);
    PanelColumns<kTileRows> columns;
    int32_t output = 0;
    for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
      const int64_t row_begin = panel * kTileRows;
      const int rows = static_cast<int>(std::min<int64_t>(kTileRows, w.rows - row_begin));
      columns.Resolve(outputs, num_outputs, &output, row_begin, row_begin + rows);
      for (int r = 0; r < kTileRows; ++r) {
        // Rows past the matrix repeat its last row with zero scales: results 0, never stored.
        LayOutPanelRow<kKind>(w, std::min<int64_t>(row_begin + r, w.rows - 1), group_shift, blocks,
                              padded_blocks, r, panel_codes, panel_scales);
      }
      for (int r = rows; r < kTileRows; ++r) {
        for (int64_t block = 0; block < padded_blocks; ++block) {
          panel_scales[block * kTileRows + r] = 0.0f;
        }
      }
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int tokens =
            static_cast<int>(std::min<int64_t>(kTileTokens, x.num_rows - tile * kTileTokens));
        alignas(64) float result[kTileRows][kTileTokens];
        PanelTile<Tiles>(panel_codes, panel_scales, token_codes + tile * tile_code_bytes,
                         token_scales + tile * tile_scale_floats, padded_blocks, result);
        columns.Store(result, rows, tokens, row_begin, 0, tile * kTileTokens, bias);
      }
    }
    Tiles::Release();
  });
}

template <class Tiles>
void GemmAmxKinds(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                  const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  if (w.dtype == plan::FP4_E2M1) {
    GemmAmx<Tiles, kKindMxfp4>(pool, x, w, bias, outputs, num_outputs);
  } else if (w.dtype == plan::I4) {
    w.zero_points != nullptr
        ? GemmAmx<Tiles, kKindZeroPoints>(pool, x, w, bias, outputs, num_outputs)
        : GemmAmx<Tiles, 2>(pool, x, w, bias, outputs, num_outputs);
  } else {
    GemmAmx<Tiles, kKindI8>(pool, x, w, bias, outputs, num_outputs);
  }
}

#endif  // HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3

}  // namespace

bool QuantizedGemmOnAmxImpl(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                            const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  // The GEMV whose bits the tiles reproduce is the VNNI one (block sums in every kind).
  const CpuExtensions extensions = ActiveCpuExtensions();
  if (!extensions.avx512_vnni || x.num_rows < kAmxMinTokens) return false;
  if (AmxTileEmulation()) {
    GemmAmxKinds<EmulatedTiles>(pool, x, w, bias, outputs, num_outputs);
    return true;
  }
  if (!extensions.amx) return false;
  GemmAmxKinds<HardwareTiles>(pool, x, w, bias, outputs, num_outputs);
  return true;
#else
  (void)pool, (void)x, (void)w, (void)bias, (void)outputs, (void)num_outputs;
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(QuantizedGemmOnAmxImpl);

bool QuantizedGemmOnAmx(ThreadPool& pool, const QuantizedActivationRows& x, const MatrixView& w,
                        const float* bias, const MatMulOutput* outputs, int32_t num_outputs) {
  return HWY_DYNAMIC_DISPATCH(QuantizedGemmOnAmxImpl)(pool, x, w, bias, outputs, num_outputs);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
