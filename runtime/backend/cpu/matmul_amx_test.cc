// The AMX-BF16 matmul (matmul_amx.cc) on emulated tiles where the CPU has no AMX (on the CPU's
// tiles at avx3_amx): F16 and BF16 panels, against exact dot products within the bound its
// operand split gives, and each token in one batch against the same token in another, bit for
// bit.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/quant_test_util.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/threading/thread_pool.h"

namespace llmrt::cpu {
namespace {

using ::llmrt::cpu::testing::AmxGemmScope;

struct Shape {
  int64_t tokens, cols, rows;
};

// Rows of 3 panels (a pair and one alone) and of 1; K below one block, odd, and a few blocks with
// a partial one; 64 tokens (whole tiles) and 83 (a padded last tile). 17 panels of K = 1100 are 9
// pairs, laid out 7 to a pass (kWeightTileBytesPerPass) for F16 on 1 thread: two passes.
const Shape kShapes[] = {
    {64, 24, 48}, {83, 75, 16}, {64, 2061, 48}, {83, 2061, 32}, {70, 1100, 272}};

// Why the AMX-BF16 path does not run on this tier, or "" (call with an AmxGemmScope alive).
std::string SkipReason() {
  if (std::string reason = AmxGemmScope::SkipReason(); !reason.empty()) return reason;
  if (!AmxMatMulActive()) {
    return "on the AVX512-BF16 tier (avx3_zen4) F16 / BF16 matmuls keep vdpbf16ps; the emulated "
           "tiles stand in for avx3_amx, which has no AVX512-BF16";
  }
  return "";
}

TEST(MatMulAmxTest, SplitOperandsMatchExactDotProductsInAnyBatch) {
  AmxGemmScope amx;
  if (const std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  for (plan::DType dtype : {plan::F16, plan::BF16}) {
    // Per product term summed in f32 (matmul_amx.cc): 5 per column for F16 (x_lo w_lo left out,
    // at most 2^-24 |x w|), 3 for BF16.
    const double terms = dtype == plan::F16 ? 5.0 : 3.0;
    for (const Shape& shape : kShapes) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " tokens " << shape.tokens << " K "
                                        << shape.cols << " N " << shape.rows);
      std::vector<float> w_values(shape.rows * shape.cols);
      for (size_t i = 0; i < w_values.size(); ++i) {
        w_values[i] = std::cos(0.61f * i) * (1.0f + static_cast<float>(i % 7));
      }
      const std::vector<uint8_t> encoded = ::llmrt::testing::EncodeAs(dtype, w_values);
      const std::vector<float> decoded = ::llmrt::testing::DecodeFrom(dtype, encoded);
      const std::vector<uint8_t> packed =
          ::llmrt::testing::PackPanels(encoded, shape.rows, shape.cols, 2, kPanelRows);
      const MatrixView w{packed.data(), dtype, shape.rows, shape.cols, kPanelRows};
      // Activations with all 24 significant bits in use and magnitudes over several octaves;
      // rows read through a permutation (input_rows).
      const int64_t stored_rows = shape.tokens + 2;
      std::vector<float> x(stored_rows * shape.cols);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = std::sin(0.3f * i + 0.1f) * std::ldexp(1.0f, static_cast<int>(i % 9) - 4);
      }
      std::vector<int32_t> input_rows(shape.tokens);
      for (int64_t t = 0; t < shape.tokens; ++t) {
        input_rows[t] = static_cast<int32_t>((t * 5 + 1) % stored_rows);
      }
      std::vector<float> bias(shape.rows);
      for (int64_t n = 0; n < shape.rows; ++n) bias[n] = 0.25f * static_cast<float>(n % 5);
      // Two destinations: the first 16 columns, then the rest.
      const int64_t split = 16;
      for (int32_t threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> first(shape.tokens * split), second(shape.tokens * (shape.rows - split));
        const MatMulOutput outputs[2] = {{first.data(), 0, split},
                                         {second.data(), split, shape.rows - split}};
        const int32_t num_outputs = shape.rows > split ? 2 : 1;
        const int64_t products_before = EmulatedAmxTileProducts();
        ASSERT_TRUE(MatMulOnAmx(pool, x.data(), shape.tokens, input_rows.data(), w, bias.data(),
                                outputs, num_outputs));
        EXPECT_TRUE(amx.Ran() &&
                    (EmulatedAmxTileProducts() > products_before || ActiveCpuExtensions().amx));
        auto at = [&](const std::vector<float>& a, const std::vector<float>& b, int64_t t,
                      int64_t n) {
          return n < split ? a[t * split + n] : b[t * (shape.rows - split) + n - split];
        };
        // The same tokens again in another batch: reversed, beside kAmxMinTokens others.
        std::vector<int32_t> other_rows(input_rows.rbegin(), input_rows.rend());
        for (int64_t t = 0; t < kAmxMinTokens; ++t) {
          other_rows.push_back(static_cast<int32_t>((t * 3) % stored_rows));
        }
        const int64_t other_tokens = static_cast<int64_t>(other_rows.size());
        std::vector<float> first_other(other_tokens * split),
            second_other(other_tokens * (shape.rows - split));
        const MatMulOutput others[2] = {{first_other.data(), 0, split},
                                        {second_other.data(), split, shape.rows - split}};
        ASSERT_TRUE(MatMulOnAmx(pool, x.data(), other_tokens, other_rows.data(), w, bias.data(),
                                others, num_outputs));
        for (int64_t t = 0; t < shape.tokens; ++t) {
          const float* x_row = x.data() + input_rows[t] * shape.cols;
          for (int64_t n = 0; n < shape.rows; ++n) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < shape.cols; ++k) {
              const double product = static_cast<double>(x_row[k]) * decoded[n * shape.cols + k];
              exact += product;
              magnitude += std::fabs(product);
            }
            const double bound = (terms * shape.cols + 1) * 0x1p-24 * magnitude + 1e-30;
            const float batched = at(first, second, t, n);
            ASSERT_NEAR(batched - bias[n], exact, bound) << "token " << t << " row " << n;
            ASSERT_EQ(at(first_other, second_other, shape.tokens - 1 - t, n), batched)
                << "token " << t << " row " << n << " in the other batch";
          }
        }
      }
    }
  }
}

// MatMul itself takes the path: a whole F16 matmul through MatMul equals MatMulOnAmx's.
TEST(MatMulAmxTest, MatMulTakesTheAmxPath) {
  AmxGemmScope amx;
  if (const std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  constexpr int64_t kTokens = kAmxMinTokens + 6, kCols = 70, kRows = 32;
  std::vector<float> w_values(kRows * kCols), x(kTokens * kCols);
  for (size_t i = 0; i < w_values.size(); ++i) w_values[i] = std::cos(0.37f * i);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.53f * i);
  const std::vector<uint8_t> packed = ::llmrt::testing::PackPanels(
      ::llmrt::testing::EncodeAs(plan::F16, w_values), kRows, kCols, 2, kPanelRows);
  const MatrixView w{packed.data(), plan::F16, kRows, kCols, kPanelRows};
  ThreadPool pool(2);
  std::vector<float> via_matmul(kTokens * kRows), direct(kTokens * kRows);
  const MatMulOutput out_matmul{via_matmul.data(), 0, kRows}, out_direct{direct.data(), 0, kRows};
  const int64_t products_before = EmulatedAmxTileProducts();
  MatMul(pool, x.data(), kTokens, nullptr, w, nullptr, &out_matmul, 1);
  EXPECT_TRUE(EmulatedAmxTileProducts() > products_before || ActiveCpuExtensions().amx);
  ASSERT_TRUE(MatMulOnAmx(pool, x.data(), kTokens, nullptr, w, nullptr, &out_direct, 1));
  EXPECT_EQ(via_matmul, direct);
}

// Below kAmxMinTokens, for F32 weights, and without the tiles (no AMX, no emulation) the call
// declines and writes nothing: MatMul then takes its f32 FMA kernels.
TEST(MatMulAmxTest, DeclinesBelowItsTokensForOtherWeightsAndWithoutTiles) {
  AmxGemmScope amx;
  if (const std::string reason = SkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  constexpr int64_t kTokens = kAmxMinTokens, kCols = 8, kRows = 16;
  std::vector<float> values(kRows * kCols, 1.0f), x(kTokens * kCols, 1.0f);
  std::vector<float> out(kTokens * kRows, -1.0f);
  ThreadPool pool(1);
  const MatMulOutput output{out.data(), 0, kRows};
  const std::vector<uint8_t> f32 = ::llmrt::testing::PackPanels(
      ::llmrt::testing::EncodeAs(plan::F32, values), kRows, kCols, 4, kPanelRows);
  const MatrixView f32_panels{f32.data(), plan::F32, kRows, kCols, kPanelRows};
  EXPECT_FALSE(MatMulOnAmx(pool, x.data(), kTokens, nullptr, f32_panels, nullptr, &output, 1));
  const std::vector<uint8_t> f16 = ::llmrt::testing::PackPanels(
      ::llmrt::testing::EncodeAs(plan::F16, values), kRows, kCols, 2, kPanelRows);
  const MatrixView f16_panels{f16.data(), plan::F16, kRows, kCols, kPanelRows};
  EXPECT_FALSE(MatMulOnAmx(pool, x.data(), kTokens - 1, nullptr, f16_panels, nullptr, &output, 1));
  if (!ActiveCpuExtensions().amx) {
    const bool emulating = SetAmxTileEmulationForTesting(false);
    EXPECT_FALSE(MatMulOnAmx(pool, x.data(), kTokens, nullptr, f16_panels, nullptr, &output, 1));
    SetAmxTileEmulationForTesting(emulating);
  }
  EXPECT_EQ(out, std::vector<float>(kTokens * kRows, -1.0f));
  EXPECT_TRUE(MatMulOnAmx(pool, x.data(), kTokens, nullptr, f16_panels, nullptr, &output, 1));
  EXPECT_EQ(out, std::vector<float>(kTokens * kRows, static_cast<float>(kCols)));
}

}  // namespace
}  // namespace llmrt::cpu
