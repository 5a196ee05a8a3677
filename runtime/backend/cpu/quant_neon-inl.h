// arm64 kernels of the quantized matmul (quant_matmul.h) for the NEON_DOTPROD and NEON_I8MM tiers
// (dispatch.h): the decode GEMV with sdot on both, the multi-row path (prefill, batched decode)
// with sdot on NEON_DOTPROD and smmla on NEON_I8MM, for I8 (one scale per row or per group) and
// I4 (LANE_CHUNKS, symmetric or with zero points).
//
// Fragment of quant_matmul.cc's NEON body, included there inside namespace HWY_NAMESPACE after
// the helpers it uses (WeightRow, ActivationTile, LoadBlockNeon, GemvOverRegions,
// RowTiledMatMul). The kernels are functions compiled with LLMRT_TARGET_DOTPROD / LLMRT_TARGET_I8MM
// (cpu_features.h), so the NEON body itself stays Armv8.0 and runs on CPUs without the
// extensions. Everything here is reached only through DotProductMatMul, which
// QuantizedMatMulImpl calls only when ActiveCpuExtensions() has them (GCC 12 inlines the tiles
// into TileKernel::Run, which therefore holds sdot / smmla too: it has no other caller).
//
// Numerics: every kernel here computes, per (weight row, token) and block of 32 columns, the
// block's exact int32 dot product as ONE integer (I4: codes minus the zero point in int8, |.| <=
// 15; I8: |code| <= 127; |q| <= 127, so 32 products fit easily), converts it to f32 and takes one
// FMA with weight_scale(group) * activation_scale(block) (one f32 rounding, the scalar kernel's
// product) into one of two f32 chains, even and odd blocks, summed once at the end. sdot leaves a
// block's sum in 4 lanes and a pairwise add of 4 rows' vectors brings them to one lane per row;
// smmla leaves it in one lane per (row, token) of a 2x2 tile. Either way each (row, token) is
// its own lane with the same operations in the same order, so the GEMV, the sdot tiles and the
// smmla tiles agree to the bit: a token's output is the same alone or in any batch, and the
// same on NEON_DOTPROD and NEON_I8MM. (The NEON tier accumulates 4 partial lane sums per block
// instead, so it differs from these by f32 rounding alone.)
//
// smmla multiplies a 2x8 int8 matrix (two weight rows' 8 columns, one 64-bit half each) by an 8x2
// one (two tokens' same 8 columns) into 2x2 int32 lanes (row 0 x token 0, row 0 x token 1, row 1
// x token 0, row 1 x token 1): a block is 4 such steps per (row pair, token pair), and a tile of
// 4 rows x 4 tokens holds 4 of those 2x2 tiles, each weight vector used twice and each activation
// vector twice.
#ifndef LLMRT_QUANT_NEON
#error "quant_neon-inl.h is a fragment of quant_matmul.cc's NEON body"
#endif

namespace neon {

// Weight rows and tokens per tile (the GEMV runs 4 rows of 1 token).
constexpr int kTileRows = 4;
static_assert(kTileRows <= kMaxRowsPerPass && kTokenTile == 4, "RowTiledMatMul's result tile");

// The weight scales of group `group` of the 4 rows (f16 to f32 is exact).
HWY_INLINE float32x4_t RowScales(const WeightRow* rows, int64_t group) {
  const uint16_t halves[kTileRows] = {rows[0].scales[group], rows[1].scales[group],
                                      rows[2].scales[group], rows[3].scales[group]};
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(halves)));
}

// The partial last blocks of the 4 rows, for LoadBlockNeon (I8 rows whose cols is no multiple of
// 32; nothing to copy otherwise).
template <bool kInt4>
HWY_INLINE void CopyI8Tails(const WeightRow* rows, int64_t cols, int8_t (*tails)[kQuantBlock]) {
  if (kInt4 || !HasI8Tail(cols)) return;
  for (int r = 0; r < kTileRows; ++r) CopyI8Tail(rows[r], cols, tails[r]);
}

// acc += float(sums) * scales, lane by lane: the one f32 step per (row, token) and block.
HWY_INLINE float32x4_t AccumulateBlock(float32x4_t acc, int32x4_t sums, float32x4_t scales) {
  return vfmaq_f32(acc, vcvtq_f32_s32(sums), scales);
}

// The tiles' block loop: step(block, chains, std::false_type()) for every whole block of a row,
// even blocks into `even` and odd ones into `odd`, two blocks an iteration so that both chains
// stay in registers (an index block & 1 kept them in memory); then an I8 row's partial last block
// (CopyI8Tails) as step(block, chains, std::true_type()), outside the loop so that the loop
// never tests for it. A macro because `step` is a lambda compiled for the tile's extensions,
// which a helper function compiled without them could not inline.
#define LLMRT_NEON_FOR_EACH_BLOCK(kInt4, cols, step, even, odd)         \
  do {                                                                  \
    const int64_t full_blocks_ = (cols) / kQuantBlock;                  \
    int64_t block_ = 0;                                                 \
    for (; block_ + 2 <= full_blocks_; block_ += 2) {                   \
      step(block_, even, std::false_type());                            \
      step(block_ + 1, odd, std::false_type());                         \
    }                                                                   \
    if (block_ < full_blocks_) step(block_++, even, std::false_type()); \
    if (!(kInt4) && HasI8Tail(cols)) {                                  \
      step(block_, block_ % 2 == 0 ? even : odd, std::true_type());     \
    }                                                                   \
  } while (false)

// result[r][t] = dot(rows[r], token t) for 4 weight rows and kTokens (1..4) tokens, with sdot.
template <int kTokens, bool kInt4>
LLMRT_TARGET_DOTPROD void DotTile(const WeightRow* rows, int64_t cols, int64_t group_blocks,
                                  const ActivationTile& tile, float (*result)[kTokenTile]) {
  float32x4_t even[kTokens], odd[kTokens];  // lane r: row r
  for (int t = 0; t < kTokens; ++t) even[t] = odd[t] = vdupq_n_f32(0.0f);
  alignas(16) int8_t i8_tails[kTileRows][kQuantBlock];
  CopyI8Tails<kInt4>(rows, cols, i8_tails);
  int64_t group = -1, group_end = 0;
  float32x4_t weight_scales = vdupq_n_f32(0.0f);
  auto step = [&](int64_t block, float32x4_t * acc, auto is_tail) LLMRT_TARGET_DOTPROD
      __attribute__((always_inline)) {
    if (block == group_end) {
      weight_scales = RowScales(rows, ++group);
      group_end += group_blocks;
    }
    NeonBlock w[kTileRows];
    for (int r = 0; r < kTileRows; ++r) {
      w[r] = LoadBlockNeon<kInt4>(rows[r], cols, block, group,
                                  decltype(is_tail)::value ? i8_tails[r] : nullptr);
    }
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* x = tile.codes[t] + block * kQuantBlock;
      const int8x16_t x_low = vld1q_s8(x);
      const int8x16_t x_high = vld1q_s8(x + 16);
      int32x4_t lanes[kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        lanes[r] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w[r].low, x_low), w[r].high, x_high);
      }
      const int32x4_t sums =
          vpaddq_s32(vpaddq_s32(lanes[0], lanes[1]), vpaddq_s32(lanes[2], lanes[3]));
      acc[t] = AccumulateBlock(acc[t], sums, vmulq_n_f32(weight_scales, tile.scales[t][block]));
    }
  };
  LLMRT_NEON_FOR_EACH_BLOCK(kInt4, cols, step, even, odd);
  for (int t = 0; t < kTokens; ++t) {
    float lanes[kTileRows];
    vst1q_f32(lanes, vaddq_f32(even[t], odd[t]));
    for (int r = 0; r < kTileRows; ++r) result[r][t] = lanes[r];
  }
}

// Two rows' (or tokens') 8 columns [8k, 8k + 8) of a block as smmla's operand: a in the low 64
// bits, b in the high.
HWY_INLINE int8x16_t PairLow(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
HWY_INLINE int8x16_t PairHigh(int8x16_t a, int8x16_t b) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

// The 4 smmla operands of one block of two rows (or tokens): columns 0-7, 8-15, 16-23, 24-31.
HWY_INLINE void PairBlocks(const NeonBlock& first, const NeonBlock& second, int8x16_t* out) {
  out[0] = PairLow(first.low, second.low);
  out[1] = PairHigh(first.low, second.low);
  out[2] = PairLow(first.high, second.high);
  out[3] = PairHigh(first.high, second.high);
}

// result[r][t] = dot(rows[r], token t) for 4 weight rows and 4 tokens, with smmla.
template <bool kInt4>
LLMRT_TARGET_I8MM void MmlaTile(const WeightRow* rows, int64_t cols, int64_t group_blocks,
                                const ActivationTile& tile, float (*result)[kTokenTile]) {
  // Chain 2p + q: lanes (row 2p, token 2q), (2p, 2q + 1), (2p + 1, 2q), (2p + 1, 2q + 1).
  float32x4_t even[4], odd[4];
  for (int i = 0; i < 4; ++i) even[i] = odd[i] = vdupq_n_f32(0.0f);
  alignas(16) int8_t i8_tails[kTileRows][kQuantBlock];
  CopyI8Tails<kInt4>(rows, cols, i8_tails);
  int64_t group = -1, group_end = 0;
  float32x4_t row_pair_scales[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  auto step = [&](int64_t block, float32x4_t * acc, auto is_tail) LLMRT_TARGET_I8MM
      __attribute__((always_inline)) {
    if (block == group_end) {
      const float32x4_t scales = RowScales(rows, ++group);
      row_pair_scales[0] = vzip1q_f32(scales, scales);  // rows 0, 0, 1, 1
      row_pair_scales[1] = vzip2q_f32(scales, scales);  // rows 2, 2, 3, 3
      group_end += group_blocks;
    }
    const float x_scales[kTokenTile] = {tile.scales[0][block], tile.scales[1][block],
                                        tile.scales[2][block], tile.scales[3][block]};
    const float32x4_t token_scales = vld1q_f32(x_scales);
    const float32x4_t token_pair_scales[2] = {
        vcombine_f32(vget_low_f32(token_scales), vget_low_f32(token_scales)),     // 0, 1, 0, 1
        vcombine_f32(vget_high_f32(token_scales), vget_high_f32(token_scales))};  // 2, 3, 2, 3
    int8x16_t weights[2][4];
    for (int p = 0; p < 2; ++p) {
      const int8_t* tails[2] = {nullptr, nullptr};
      if constexpr (decltype(is_tail)::value) {
        tails[0] = i8_tails[2 * p];
        tails[1] = i8_tails[2 * p + 1];
      }
      PairBlocks(LoadBlockNeon<kInt4>(rows[2 * p], cols, block, group, tails[0]),
                 LoadBlockNeon<kInt4>(rows[2 * p + 1], cols, block, group, tails[1]), weights[p]);
    }
    for (int q = 0; q < 2; ++q) {
      const int8_t* x0 = tile.codes[2 * q] + block * kQuantBlock;
      const int8_t* x1 = tile.codes[2 * q + 1] + block * kQuantBlock;
      int8x16_t activations[4];
      PairBlocks({vld1q_s8(x0), vld1q_s8(x0 + 16)}, {vld1q_s8(x1), vld1q_s8(x1 + 16)}, activations);
      for (int p = 0; p < 2; ++p) {
        int32x4_t sums = vmmlaq_s32(vdupq_n_s32(0), weights[p][0], activations[0]);
        for (int k = 1; k < 4; ++k) sums = vmmlaq_s32(sums, weights[p][k], activations[k]);
        acc[2 * p + q] = AccumulateBlock(acc[2 * p + q], sums,
                                         vmulq_f32(row_pair_scales[p], token_pair_scales[q]));
      }
    }
  };
  LLMRT_NEON_FOR_EACH_BLOCK(kInt4, cols, step, even, odd);
  for (int p = 0; p < 2; ++p) {
    for (int q = 0; q < 2; ++q) {
      float lanes[4];
      vst1q_f32(lanes, vaddq_f32(even[2 * p + q], odd[2 * p + q]));
      result[2 * p][2 * q] = lanes[0];
      result[2 * p][2 * q + 1] = lanes[1];
      result[2 * p + 1][2 * q] = lanes[2];
      result[2 * p + 1][2 * q + 1] = lanes[3];
    }
  }
}
#undef LLMRT_NEON_FOR_EACH_BLOCK

// RowTiledMatMul's kernel: 4 rows a pass (the last pass of an item takes what is left), short
// tiles padded with copies of their last row or token (computed and dropped: each (row, token) is
// its own lane, so the copies change nothing else).
template <bool kInt4, bool kMmla>
struct TileKernel {
  int64_t cols;
  int64_t group_blocks;
  int Rows(int, int64_t rows_left) const {
    return static_cast<int>(std::min<int64_t>(kTileRows, rows_left));
  }
  void Run(int count, int group, const WeightRow* rows, const ActivationTile& tile,
           float (*result)[kTokenTile]) const {
    WeightRow padded_rows[kTileRows];
    for (int r = 0; r < kTileRows; ++r) padded_rows[r] = rows[std::min(r, group - 1)];
    if constexpr (kMmla) {
      ActivationTile padded_tile;
      for (int t = 0; t < kTokenTile; ++t) {
        padded_tile.codes[t] = tile.codes[std::min(t, count - 1)];
        padded_tile.scales[t] = tile.scales[std::min(t, count - 1)];
      }
      MmlaTile<kInt4>(padded_rows, cols, group_blocks, padded_tile, result);
      return;
    }
    switch (count) {
      case 1:
        DotTile<1, kInt4>(padded_rows, cols, group_blocks, tile, result);
        break;
      case 2:
        DotTile<2, kInt4>(padded_rows, cols, group_blocks, tile, result);
        break;
      case 3:
        DotTile<3, kInt4>(padded_rows, cols, group_blocks, tile, result);
        break;
      default:
        DotTile<4, kInt4>(padded_rows, cols, group_blocks, tile, result);
        break;
    }
  }
};

// GemvOverRegions' kernel (decode, one token): DotTile over the 4 streams' rows, or over one row
// and three copies of it for the rows past the 4 regions.
template <bool kInt4>
struct GemvKernel {
  int64_t cols;
  int64_t group_blocks;
  const int8_t* x_codes;
  const float* x_scales;
  template <int kRows>
  void Run(const WeightRow* rows, float* result) const {
    static_assert(kRows == 1 || kRows == kTileRows, "GemvOverRegions runs 4 streams or 1 row");
    WeightRow padded_rows[kTileRows];
    for (int r = 0; r < kTileRows; ++r) padded_rows[r] = rows[kRows == 1 ? 0 : r];
    ActivationTile tile;
    tile.codes[0] = x_codes;
    tile.scales[0] = x_scales;
    float tile_result[kMaxRowsPerPass][kTokenTile];
    DotTile<1, kInt4>(padded_rows, cols, group_blocks, tile, tile_result);
    for (int r = 0; r < kRows; ++r) result[r] = tile_result[r][0];
  }
};

// QuantizedMatMul on NEON_DOTPROD (kMmla false) or NEON_I8MM (kMmla true) after the activation
// rows are quantized (natural column order): one row runs the GEMV over 4 streams, several the
// row tiles.
template <bool kInt4, bool kMmla>
void DotProductMatMul(ThreadPool& pool, int64_t num_rows, const MatrixView& w, const float* bias,
                      const MatMulOutput* outputs, int32_t num_outputs, const int8_t* codes,
                      const float* scales, int64_t padded_cols) {
  // Blocks per scale group: a multiple of 32 columns, or the whole row (cols may then be no
  // multiple of 32, and the partial last block is in the row's one group).
  const int64_t group_blocks = (w.group_size + kQuantBlock - 1) / kQuantBlock;
  if (num_rows == 1) {
    GemvOverRegions(pool, w, kInt4 ? w.cols / 2 : w.cols, bias, outputs, num_outputs,
                    GemvKernel<kInt4>{w.cols, group_blocks, codes, scales});
    return;
  }
  RowTiledMatMul(pool, num_rows, w, bias, outputs, num_outputs, codes, scales, padded_cols,
                 TileKernel<kInt4, kMmla>{w.cols, group_blocks});
}

}  // namespace neon
