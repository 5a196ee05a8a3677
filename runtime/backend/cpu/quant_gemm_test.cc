// The multi-row quantized GEMM (quant_gemm.h) through QuantizedMatMul: each token's row of a
// 16- or 512-token matmul is bit-identical to the same token alone (M = 1, the decode GEMV),
// and all of them match an integer reference within f32 rounding, for I8 per row and per
// group and I4 symmetric and asymmetric, with and without an input permutation, on 1 and 2
// threads, at the dispatch target LLMRT_CPU_TARGET forces (registered once per target).
#include "runtime/backend/cpu/quant_gemm.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_test_util.h"

namespace llmrt::cpu {
namespace {

using testing::QuantizedMatrix;
using testing::QuantizeReference;
using testing::ReferenceDot;

struct Case {
  int bits;
  bool asymmetric;
  int32_t group_size;  // 0: one scale per row
};

std::string Name(const Case& c, int64_t cols, bool permuted) {
  return absl::StrFormat("i%d %s g%d cols %d%s", c.bits, c.asymmetric ? "asym" : "sym",
                         c.group_size, cols, permuted ? " permuted" : "");
}

// Activations with a wide spread of block magnitudes (so the scales differ per block and
// token) and some all-zero blocks (scale 0).
std::vector<float> Activations(int64_t rows, int64_t cols) {
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool zero_block = (r * 7 + c / 32) % 23 == 0;
      const float amplitude = std::ldexp(1.0f, static_cast<int>((r + c / 32) % 9) - 4);
      x[r * cols + c] =
          zero_block ? 0.0f : std::cos(0.37f * static_cast<float>(r * cols + c)) * amplitude;
    }
  }
  return x;
}

std::vector<int32_t> Permutation(int64_t cols) {
  std::vector<int32_t> permutation(cols);
  for (int64_t c = 0; c < cols; ++c) permutation[c] = static_cast<int32_t>((c * 37 + 11) % cols);
  return permutation;  // 37 is coprime with every cols used here
}

struct Scratch {
  explicit Scratch(int64_t bytes) : bytes(bytes + 32) {}
  void* aligned() {
    return bytes.data() + (32 - reinterpret_cast<uintptr_t>(bytes.data()) % 32) % 32;
  }
  std::vector<uint8_t> bytes;
};

// Every token of an M-token matmul (M = 16: batched decode; 512: prefill) against the same
// token through the M = 1 path (bit for bit) and the reference (within f32 rounding). Two
// destinations split at an odd column, as a fused matmul writes them, and a bias.
void CheckBatchedRowsMatchSingleRows(const Case& c, int64_t out_rows, int64_t cols, bool permuted,
                                     int64_t tokens) {
  const int32_t group = c.group_size == 0 ? static_cast<int32_t>(cols) : c.group_size;
  std::vector<float> weights(out_rows * cols);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = std::sin(0.71f * static_cast<float>(i) + 0.3f) * 0.2f + (c.asymmetric ? 0.05f : 0);
  }
  const QuantizedMatrix q =
      QuantizeReference(weights, out_rows, cols, c.bits, c.asymmetric, group,
                        permuted ? Permutation(cols) : std::vector<int32_t>{});
  const MatrixView w = q.View();
  const std::string name = Name(c, cols, permuted);
  const std::vector<float> x = Activations(tokens, cols);
  std::vector<float> bias(out_rows);
  for (int64_t n = 0; n < out_rows; ++n) bias[n] = 0.01f * static_cast<float>(n % 5) - 0.02f;
  const int64_t split = out_rows / 2 + 1;
  for (int32_t threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> first(tokens * split), second(tokens * (out_rows - split));
    const MatMulOutput outputs[2] = {{first.data(), 0, split},
                                     {second.data(), split, out_rows - split}};
    Scratch scratch(QuantizedActivationBytes(tokens, cols));
    QuantizedMatMul(pool, x.data(), tokens, nullptr, w, bias.data(), outputs, 2, scratch.aligned());
    std::vector<float> alone(out_rows);
    const MatMulOutput one{alone.data(), 0, out_rows};
    std::vector<int8_t> codes((cols + 31) / 32 * 32);
    std::vector<float> scales(codes.size() / 32);
    for (int32_t t = 0; t < tokens; ++t) {
      QuantizedMatMul(pool, x.data(), 1, &t, w, bias.data(), &one, 1, scratch.aligned());
      QuantizeActivationRow(x.data() + t * cols, w.input_permutation, cols, codes.data(),
                            scales.data());
      for (int64_t n = 0; n < out_rows; ++n) {
        const float batched =
            n < split ? first[t * split + n] : second[t * (out_rows - split) + n - split];
        ASSERT_EQ(batched, alone[n])
            << name << " M " << tokens << " threads " << threads << " token " << t << " row " << n;
        double magnitude = 0;
        const double expected = ReferenceDot(q, n, codes, scales, &magnitude) + bias[n];
        ASSERT_NEAR(batched, expected, 1e-5 * magnitude + 1e-6)
            << name << " M " << tokens << " token " << t << " row " << n;
      }
    }
  }
}

const Case kCases[] = {{8, false, 0}, {8, false, 32}, {8, false, 128}, {4, false, 32},
                       {4, true, 32}, {4, false, 64}, {4, true, 128}};

// 37 rows: two 16-row panels (one per thread) and a short one ending in a lone row; 2080
// columns (groups of 32 or one per row): 65 blocks, more than one 64-block chunk and a last
// step of one block (I4: a LANE_CHUNKS chunk of one run); 2176 (larger groups): 68 blocks, a
// last step of 4.
TEST(QuantGemmTest, BatchOf16MatchesSingleRowsBitForBit) {
  for (const Case& c : kCases) {
    const int64_t cols = c.group_size > 32 ? 2176 : 2080;
    for (bool permuted : {false, true}) CheckBatchedRowsMatchSingleRows(c, 37, cols, permuted, 16);
  }
}

TEST(QuantGemmTest, PrefillOf512MatchesSingleRowsBitForBit) {
  for (const Case& c :
       {Case{8, false, 0}, Case{8, false, 32}, Case{4, false, 32}, Case{4, true, 32}}) {
    for (bool permuted : {false, true}) CheckBatchedRowsMatchSingleRows(c, 21, 256, permuted, 512);
  }
}

// Enough rows for several work items per quarter of the I8 decode GEMV (see quant_matmul_test's
// DecodeOverManyWorkItemsMatchesReference) and 3 rows past the quarters.
TEST(QuantGemmTest, BatchMatchesSingleRowsOverManyDecodeWorkItems) {
  for (const Case& c : {Case{8, false, 0}, Case{8, false, 32}}) {
    CheckBatchedRowsMatchSingleRows(c, 603, 2176, false, 16);
  }
}

// Token counts that leave short token tiles (1 to 3 tokens) and the smallest batch the GEMM
// takes; one scale per row over a K that is no multiple of 32 (I8: a partial last block).
TEST(QuantGemmTest, ShortTilesAndPartialBlocksMatchSingleRows) {
  for (int64_t tokens : {kQuantGemmMinRows, int64_t{5}, int64_t{7}, int64_t{18}}) {
    for (const Case& c : kCases) CheckBatchedRowsMatchSingleRows(c, 19, 384, false, tokens);
    CheckBatchedRowsMatchSingleRows({8, false, 0}, 19, 172, true, tokens);
  }
}

// Odd shapes at every scheme: 1 and 3 weight rows (short of a register tile), 17 (a panel and a
// lone row), 1000 (many panels, the last one short), by 3 and 17 tokens (short token tiles),
// permuted and not, against single rows (bit for bit) and the reference.
TEST(QuantGemmTest, OddShapesMatchSingleRowsAndReference) {
  for (const Case& c : kCases) {
    for (int64_t out_rows : {1, 3, 17, 1000}) {
      const int64_t cols = out_rows == 1000 ? 384 : c.group_size > 32 ? 2176 : 2080;
      for (int64_t tokens : {3, 17}) {
        CheckBatchedRowsMatchSingleRows(c, out_rows, cols, /*permuted=*/out_rows % 2 == 1, tokens);
      }
    }
  }
}

// The AMX tiles (quant_gemm_amx.cc; emulated where the CPU has none): every scheme against single
// rows (bit for bit) and the reference, at the smallest batch they take, a batch ending in a short
// token tile, a prefill of 512, and an I8 row ending in a partial block; panels of 16 rows, a
// short one and a lone row; permuted and not.
TEST(QuantGemmTest, AmxTilesMatchSingleRowsBitForBit) {
  if (const std::string reason = testing::AmxGemmScope::SkipReason(); !reason.empty()) {
    GTEST_SKIP() << reason;
  }
  testing::AmxGemmScope amx;
  for (const Case& c : kCases) {
    const int64_t cols = c.group_size > 32 ? 2176 : 2080;
    CheckBatchedRowsMatchSingleRows(c, 37, cols, /*permuted=*/c.bits == 4, kAmxMinTokens);
    CheckBatchedRowsMatchSingleRows(c, 17, 384, /*permuted=*/c.bits == 8, kAmxMinTokens + 7);
  }
  CheckBatchedRowsMatchSingleRows({4, false, 32}, 21, 256, false, 512);
  CheckBatchedRowsMatchSingleRows({8, false, 0}, 19, 172, true, kAmxMinTokens + 1);
  EXPECT_TRUE(amx.Ran()) << "the AMX path never ran";
}

// The odd shapes of OddShapesMatchSingleRowsAndReference on the AMX tiles: 1 and 3 weight rows (a
// panel of mostly missing rows), 17 (a panel and a lone row), 1000 (many panels, the last short).
TEST(QuantGemmTest, AmxTilesAtOddShapesMatchSingleRowsAndReference) {
  if (const std::string reason = testing::AmxGemmScope::SkipReason(); !reason.empty()) {
    GTEST_SKIP() << reason;
  }
  testing::AmxGemmScope amx;
  for (const Case& c : kCases) {
    for (int64_t out_rows : {1, 3, 17, 1000}) {
      const int64_t cols = out_rows == 1000 ? 384 : c.group_size > 32 ? 2176 : 2080;
      CheckBatchedRowsMatchSingleRows(c, out_rows, cols, /*permuted=*/out_rows % 2 == 1,
                                      kAmxMinTokens + 3);
    }
  }
  EXPECT_TRUE(amx.Ran()) << "the AMX path never ran";
}

}  // namespace
}  // namespace llmrt::cpu
