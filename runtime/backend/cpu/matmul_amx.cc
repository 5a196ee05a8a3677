// F16 / BF16 ROW_PANELS matmul on AMX-BF16 tiles (kernels.h, MatMulOnAmx), compiled per SIMD
// target by Highway; only the AVX3 body has a kernel, and it runs on the avx3_amx tier
// (dispatch.h) or with the tile instructions emulated (amx_tiles.h).
//
// Why split operands: tdpbf16ps multiplies bf16 pairs (8 significant bits) into f32 sums, 16x32
// by 32x16 per instruction, ~16x the f32 FMA path's multiply-adds per cycle. Rounding the
// activations to bf16 (what avx3_zen4's vdpbf16ps path does for BF16 weights) would move results
// by 2^-8, and F16 weights (11 significant bits) do not fit bf16 at all. Both are split exactly
// instead: an f32 activation is hi + mid + lo, three bf16 values (each the top 8 significant bits
// of what the ones before leave; the three hold all 24), and an F16 weight is hi + lo, two bf16
// (the top 8 bits and the last 3). Every product of two bf16 values is exact in f32, so
// x w = (x_hi + x_mid + x_lo)(w_hi + w_lo) is summed from exact terms, all but x_lo w_lo
// (|x_lo w_lo| <= 2^-24 |x w|): per 32-column block of K, the tile products x_hi w_hi,
// x_mid w_hi, x_hi w_lo, x_lo w_hi, x_mid w_lo into one f32 accumulator (BF16 weights: x_hi w,
// x_mid w, x_lo w). An output is then within (5K + 1) 2^-24 sum|x w| of the exact dot product
// (BF16: 3K 2^-24), the f32 FMA path's K 2^-24 class: f32 activations, weights as stored, no
// rounding beyond f32 accumulation. Five products for one cost a third of the tiles' rate.
//
// The path runs from kAmxMinTokens (64) tokens (amx_tiles.h); fewer take the f32 FMA kernels
// (matmul.cc), decode included: laying out F16 weights as split B tiles costs more per weight than
// the FMA GEMV does. Every output element here is one accumulation over the blocks in order, the
// same instructions whatever the tile, so among steps of 64 tokens or more a token's result does
// not depend on the others; between a step below 64 tokens and one above, a token's result moves
// by f32 rounding, at most (6K + 1) 2^-24 sum|x w| (this bound plus the FMA chain's K 2^-24). That
// is the avx3_amx tier's contract for F16 / BF16 weights, where every other tier keeps one FMA
// chain per output for every step.
//
// Layout, once per call: the activations of each tile of up to 16 tokens as A operands (per block
// three 16 x 32 bf16 tiles: hi, mid, lo); per pair of panels, once per panel, the weights as B
// operands (per block 16 rows of k-pairs, row j holding (w[n][2j], w[n][2j + 1]) for the 16
// weight rows n: hi, and lo for F16), split and interleaved in registers from the panel's
// column-major 16-weight runs.
//
// Tiles (palette 1): tmm0 / tmm1 the f32 sums C of two panels (tokens x 16 weight rows), tmm2 /
// tmm3 activation parts A, tmm4 / tmm5 the two panels' w_hi, tmm6 / tmm7 their w_lo.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/panel_columns.h"
#include "runtime/backend/cpu/thread_buffer.h"
#include "runtime/plan/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/matmul_amx.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3

constexpr int64_t kBlock = 32;       // columns of K per tile product (16 bf16 pairs)
constexpr int kTileTokens = 16;      // tokens of an A tile (rows)
constexpr int kTileBytes = 1024;     // every operand tile: 16 rows of 64 bytes
constexpr int kActivationParts = 3;  // hi, mid, lo
constexpr int kGroupPanels = 2;      // panels sharing each activation tile load
constexpr int kTileC = 0, kTileA = 2, kTileHi = 4, kTileLo = 6;

// A last token tile of fewer than 16 tokens is padded with zero rows.
AmxTileConfig MakeTileConfig() {
  AmxTileConfig config;
  for (int i = 0; i < 2; ++i) {
    config.Set(kTileC + i, kTileTokens, 64);  // C: 16 tokens x 16 f32
    config.Set(kTileA + i, kTileTokens, 64);  // A: 16 tokens x 32 bf16
    config.Set(kTileHi + i, 16, 64);          // B: 16 k-pairs x 16 weight rows x 2 bf16
    config.Set(kTileLo + i, 16, 64);
  }
  return config;
}
const AmxTileConfig kTileConfig = MakeTileConfig();

// The top 16 bits of each f32 lane (a bf16 value, exactly when the low 16 bits are zero).
HWY_INLINE __m256i UpperHalves(__m512 v) {
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(v), 16));
}

HWY_INLINE __m512 TruncateToBf16(__m512 v) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// One token's row of K activations as its row of the tile's hi, mid and lo A tiles, block by
// block (columns past K zero).
void SplitActivationRow(const float* HWY_RESTRICT x, int64_t cols, int64_t blocks, int token,
                        uint8_t* HWY_RESTRICT tiles) {
  for (int64_t block = 0; block < blocks; ++block) {
    uint8_t* parts = tiles + block * kActivationParts * kTileBytes + token * 64;
    for (int half = 0; half < 2; ++half) {
      const int64_t col = block * kBlock + half * 16;
      const int64_t valid = std::clamp<int64_t>(cols - col, 0, 16);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1u);
      const __m512 v = _mm512_maskz_loadu_ps(mask, x + std::min(col, cols));
      const __m512 hi = TruncateToBf16(v);
      const __m512 rest = _mm512_sub_ps(v, hi);
      const __m512 mid = TruncateToBf16(rest);
      const __m512 lo = _mm512_sub_ps(rest, mid);  // at most 8 significant bits: exact in bf16
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(parts + half * 32), UpperHalves(hi));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(parts + kTileBytes + half * 32),
                          UpperHalves(mid));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(parts + 2 * kTileBytes + half * 32),
                          UpperHalves(lo));
    }
  }
}

// Two bf16 vectors' worth (f32 lanes whose low 16 bits are zero, columns k and k + 1 of the 16
// weight rows) as one B row: dword n = (w[n][k + 1] << 16) | w[n][k].
HWY_INLINE __m512i InterleavePairs(__m512 even, __m512 odd) {
  return _mm512_or_si512(_mm512_castps_si512(odd),
                         _mm512_srli_epi32(_mm512_castps_si512(even), 16));
}

// Columns [32 block, 32 block + 32) of a panel (16 weight rows, stored column by column) as B
// tiles: hi (and lo for F16) at `hi` and `hi + kTileBytes`.
template <bool kF16>
void LayOutWeightBlock(const uint16_t* HWY_RESTRICT panel, int64_t cols, int64_t block,
                       uint8_t* HWY_RESTRICT hi) {
  for (int pair = 0; pair < kBlock / 2; ++pair) {
    const int64_t col = block * kBlock + 2 * pair;
    __m256i even_bits = _mm256_setzero_si256(), odd_bits = _mm256_setzero_si256();
    if (col < cols) {
      even_bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + col * kPanelRows));
    }
    if (col + 1 < cols) {
      odd_bits =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + (col + 1) * kPanelRows));
    }
    __m512i* out_hi = reinterpret_cast<__m512i*>(hi + pair * 64);
    if constexpr (kF16) {
      const __m512 even = _mm512_cvtph_ps(even_bits), odd = _mm512_cvtph_ps(odd_bits);
      const __m512 even_hi = TruncateToBf16(even), odd_hi = TruncateToBf16(odd);
      // w - w_hi has at most 3 significant bits: exact, and exact in bf16.
      const __m512 even_lo = _mm512_sub_ps(even, even_hi), odd_lo = _mm512_sub_ps(odd, odd_hi);
      _mm512_store_si512(out_hi, InterleavePairs(even_hi, odd_hi));
      _mm512_store_si512(reinterpret_cast<__m512i*>(hi + kTileBytes + pair * 64),
                         InterleavePairs(even_lo, odd_lo));
    } else {
      _mm512_store_si512(out_hi,
                         _mm512_or_si512(_mm512_cvtepu16_epi32(even_bits),
                                         _mm512_slli_epi32(_mm512_cvtepu16_epi32(odd_bits), 16)));
    }
  }
}

// C_p += the products of one block for the group's panels, in the order the file's comment
// gives (every output the same sequence, whatever the tile).
template <class Tiles, bool kF16, int kPanels>
HWY_INLINE void BlockProducts(const uint8_t* activation_parts, const uint8_t* weight_block) {
  constexpr int64_t kWeightTiles = kF16 ? 2 : 1;
  for (int p = 0; p < kPanels; ++p) {
    const uint8_t* panel = weight_block + p * kWeightTiles * kTileBytes;
    if (p == 0) {
      Tiles::template Load<kTileHi>(panel, 64);
      if constexpr (kF16) Tiles::template Load<kTileLo>(panel + kTileBytes, 64);
    } else {
      Tiles::template Load<kTileHi + 1>(panel, 64);
      if constexpr (kF16) Tiles::template Load<kTileLo + 1>(panel + kTileBytes, 64);
    }
  }
  const uint8_t* x_hi = activation_parts;
  const uint8_t* x_mid = activation_parts + kTileBytes;
  const uint8_t* x_lo = activation_parts + 2 * kTileBytes;
  Tiles::template Load<kTileA>(x_hi, 64);
  Tiles::template Load<kTileA + 1>(x_mid, 64);
  // x_hi w_hi, x_mid w_hi
  Tiles::template DotBf16<kTileC, kTileA, kTileHi>();
  if constexpr (kPanels == 2) Tiles::template DotBf16<kTileC + 1, kTileA, kTileHi + 1>();
  Tiles::template DotBf16<kTileC, kTileA + 1, kTileHi>();
  if constexpr (kPanels == 2) Tiles::template DotBf16<kTileC + 1, kTileA + 1, kTileHi + 1>();
  if constexpr (kF16) {
    // x_hi w_lo, (x_lo w_hi below), x_mid w_lo
    Tiles::template DotBf16<kTileC, kTileA, kTileLo>();
    if constexpr (kPanels == 2) Tiles::template DotBf16<kTileC + 1, kTileA, kTileLo + 1>();
  }
  Tiles::template Load<kTileA>(x_lo, 64);
  Tiles::template DotBf16<kTileC, kTileA, kTileHi>();
  if constexpr (kPanels == 2) Tiles::template DotBf16<kTileC + 1, kTileA, kTileHi + 1>();
  if constexpr (kF16) {
    Tiles::template DotBf16<kTileC, kTileA + 1, kTileLo>();
    if constexpr (kPanels == 2) Tiles::template DotBf16<kTileC + 1, kTileA + 1, kTileLo + 1>();
  }
}

struct AmxBf16Activations;
struct AmxBf16Weights;

// The B tiles of panels [2 group, 2 group + kPanels), block by block.
template <bool kF16, int kPanels>
void LayOutGroup(const uint16_t* weights, int64_t cols, int64_t blocks, int64_t group,
                 uint8_t* weight_tiles) {
  constexpr int64_t kWeightTiles = kF16 ? 2 : 1;
  constexpr int64_t kBlockBytes = kPanels * kWeightTiles * kTileBytes;
  for (int p = 0; p < kPanels; ++p) {
    const uint16_t* panel = weights + (group * kGroupPanels + p) * kPanelRows * cols;
    for (int64_t block = 0; block < blocks; ++block) {
      LayOutWeightBlock<kF16>(panel, cols, block,
                              weight_tiles + block * kBlockBytes + p * kWeightTiles * kTileBytes);
    }
  }
}

// One token tile against one group's panels: C over every block, then the outputs.
template <class Tiles, bool kF16, int kPanels>
void GroupTile(const uint8_t* weight_tiles, int64_t blocks, int64_t row_begin,
               const uint8_t* tile_parts, int tokens, int64_t first_token, const float* bias,
               const PanelColumns<kGroupPanels * kPanelRows>& columns) {
  constexpr int64_t kBlockBytes = kPanels * (kF16 ? 2 : 1) * kTileBytes;
  Tiles::template Zero<kTileC>();
  if constexpr (kPanels == 2) Tiles::template Zero<kTileC + 1>();
  for (int64_t block = 0; block < blocks; ++block) {
    BlockProducts<Tiles, kF16, kPanels>(tile_parts + block * kActivationParts * kTileBytes,
                                        weight_tiles + block * kBlockBytes);
  }
  alignas(64) float result[kGroupPanels][kTileTokens][kPanelRows];
  Tiles::template Store<kTileC>(result[0], 64);
  if constexpr (kPanels == 2) Tiles::template Store<kTileC + 1>(result[1], 64);
  for (int p = 0; p < kPanels; ++p) {
    columns.StoreTokenMajor(result[p], kPanelRows, tokens, row_begin, p * kPanelRows, first_token,
                            bias);
  }
}

// How many pairs of panels one pass of a thread lays out and keeps (in L2) while every token tile
// meets them, so that the activation tiles stream from the shared cache once per pass, not once
// per pair: with tile loads that read memory and no tile products (Emerald Rapids, 1 thread, f16
// 2560 x 2048, 512 tokens) one pair per pass took 26-28 ms, the loads of the activations
// re-read ~80 times from L3.
constexpr int64_t kWeightTileBytesPerPass = int64_t{1} << 20;
constexpr int64_t kMaxGroupsPerPass = 16;

template <class Tiles, bool kF16>
void MatMulAmx(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
               const MatrixView& w, const float* bias, const MatMulOutput* outputs,
               int32_t num_outputs) {
  const int64_t cols = w.cols;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
  const int64_t tiles = (num_rows + kTileTokens - 1) / kTileTokens;
  const int64_t tile_bytes = blocks * kActivationParts * kTileBytes;
  // Read by every thread: the calling thread's buffer. Rows past the last token stay zero.
  uint8_t* activations = ThreadLocalBuffer<AmxBf16Activations, uint8_t>(tiles * tile_bytes);
  auto split_tiles = [&](int64_t tile_begin, int64_t tile_end) {
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      uint8_t* tile_parts = activations + tile * tile_bytes;
      const int tokens =
          static_cast<int>(std::min<int64_t>(kTileTokens, num_rows - tile * kTileTokens));
      if (tokens < kTileTokens) std::memset(tile_parts, 0, tile_bytes);
      for (int t = 0; t < tokens; ++t) {
        const int64_t row = tile * kTileTokens + t;
        const float* x_row = x + (input_rows != nullptr ? input_rows[row] : row) * cols;
        SplitActivationRow(x_row, cols, blocks, t, tile_parts);
      }
    }
  };
  pool.ParallelFor(tiles, [&](int64_t begin, int64_t end, int32_t) { split_tiles(begin, end); });
  const uint16_t* weights = reinterpret_cast<const uint16_t*>(w.data);
  const int64_t num_panels = w.rows / kPanelRows;
  const int64_t num_groups = (num_panels + kGroupPanels - 1) / kGroupPanels;
  const int64_t group_bytes = blocks * kGroupPanels * (kF16 ? 2 : 1) * kTileBytes;
  const int64_t groups_per_pass =
      std::clamp<int64_t>(kWeightTileBytesPerPass / group_bytes, 1, kMaxGroupsPerPass);
  pool.ParallelFor(num_groups, [&](int64_t group_begin, int64_t group_end, int32_t) {
    uint8_t* weight_tiles =
        ThreadLocalBuffer<AmxBf16Weights, uint8_t>(groups_per_pass * group_bytes);
    Tiles::Configure(kTileConfig.bytes);
    PanelColumns<kGroupPanels * kPanelRows> columns[kMaxGroupsPerPass];
    for (int64_t first = group_begin; first < group_end; first += groups_per_pass) {
      const int64_t last = std::min(group_end, first + groups_per_pass);
      auto whole = [&](int64_t group) { return (group + 1) * kGroupPanels <= num_panels; };
      for (int64_t group = first; group < last; ++group) {
        uint8_t* tiles_of_group = weight_tiles + (group - first) * group_bytes;
        whole(group) ? LayOutGroup<kF16, 2>(weights, cols, blocks, group, tiles_of_group)
                     : LayOutGroup<kF16, 1>(weights, cols, blocks, group, tiles_of_group);
        const int64_t row_begin = group * kGroupPanels * kPanelRows;
        int32_t output = 0;
        columns[group - first].Resolve(outputs, num_outputs, &output, row_begin,
                                       std::min(w.rows, row_begin + kGroupPanels * kPanelRows));
      }
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int tokens =
            static_cast<int>(std::min<int64_t>(kTileTokens, num_rows - tile * kTileTokens));
        const uint8_t* tile_parts = activations + tile * tile_bytes;
        for (int64_t group = first; group < last; ++group) {
          const uint8_t* tiles_of_group = weight_tiles + (group - first) * group_bytes;
          const int64_t row_begin = group * kGroupPanels * kPanelRows;
          if (whole(group)) {
            GroupTile<Tiles, kF16, 2>(tiles_of_group, blocks, row_begin, tile_parts, tokens,
                                      tile * kTileTokens, bias, columns[group - first]);
          } else {
            GroupTile<Tiles, kF16, 1>(tiles_of_group, blocks, row_begin, tile_parts, tokens,
                                      tile * kTileTokens, bias, columns[group - first]);
          }
        }
      }
    }
    Tiles::Release();
  });
}

template <class Tiles>
void MatMulAmxTyped(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                    const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                    int32_t num_outputs) {
  if (w.dtype == plan::F16) {
    MatMulAmx<Tiles, true>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  } else {
    MatMulAmx<Tiles, false>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  }
}

#endif  // HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3

}  // namespace

bool MatMulOnAmxImpl(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                     const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                     int32_t num_outputs, int64_t amx_min_rows) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  if (num_rows < amx_min_rows || w.panel_rows != kPanelRows ||
      (w.dtype != plan::F16 && w.dtype != plan::BF16)) {
    return false;
  }
  if (!AmxMatMulActive()) return false;
  if (ActiveCpuExtensions().amx) {
    MatMulAmxTyped<HardwareTiles>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  } else {
    MatMulAmxTyped<EmulatedTiles>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  }
  return true;
#else
  (void)pool, (void)x, (void)num_rows, (void)input_rows, (void)w, (void)bias, (void)outputs,
      (void)num_outputs, (void)amx_min_rows;
  return false;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(MatMulOnAmxImpl);

bool AmxMatMulActive() {
#if HWY_ARCH_X86
  // The emulated tiles stand in for avx3_amx's: on AVX3 tiers with AVX512-VNNI, as the quantized
  // GEMM's do, but not on avx3_zen4, whose BF16 matmul is vdpbf16ps (no real tier has both). The
  // extensions imply the AVX3 target (dispatch.cc: a tier's extensions come with its target).
  const CpuExtensions extensions = ActiveCpuExtensions();
  return extensions.avx512_vnni &&
         (extensions.amx || (AmxTileEmulation() && !extensions.avx512_bf16));
#else
  return false;
#endif
}

bool MatMulOnAmx(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                 const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                 int32_t num_outputs, int64_t amx_min_rows) {
  return HWY_DYNAMIC_DISPATCH(MatMulOnAmxImpl)(pool, x, num_rows, input_rows, w, bias, outputs,
                                               num_outputs, amx_min_rows);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
