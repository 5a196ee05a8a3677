// The quantized matmul across dispatch tiers and group sizes:
// - the arm64 dot-product tiers against each other (dispatch.h): NEON_DOTPROD runs every row
//   count with sdot, NEON_I8MM runs several rows with smmla; quant_neon-inl.h computes each
//   (weight row, token) from the same exact integer block sums through the same f32 chain, so
//   the two agree to the bit for every scheme and shape, and match the integer reference for
//   every group size plan.proto allows (a multiple of 32 dividing the row, 96 and 256 included,
//   or one per row). Skipped, naming what is missing, where the CPU lacks either tier (x86, or
//   an arm64 CPU without dotprod or i8mm);
// - the group sizes llmc writes, at the target LLMRT_CPU_TARGET forces, against the reference.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_test_util.h"

namespace llmrt::cpu {
namespace {

using testing::QuantizedMatrix;
using testing::QuantizeReference;
using testing::ReferenceDot;

struct Scheme {
  int bits;
  bool asymmetric;
  int32_t group_size;  // 0: one group per row
};

std::string Name(const Scheme& s, int64_t rows, int64_t cols, int64_t tokens) {
  return absl::StrFormat("i%d %s g%d, %d x %d weights, %d tokens", s.bits,
                         s.asymmetric ? "asym" : "sym", s.group_size, rows, cols, tokens);
}

QuantizedMatrix Weights(const Scheme& s, int64_t rows, int64_t cols) {
  std::vector<float> weights(rows * cols);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = std::sin(0.53f * static_cast<float>(i) + 0.1f) * 0.3f + (s.asymmetric ? 0.07f : 0);
  }
  return QuantizeReference(weights, rows, cols, s.bits, s.asymmetric,
                           s.group_size == 0 ? static_cast<int32_t>(cols) : s.group_size, {});
}

// Activations with block magnitudes spread over 2^-4 .. 2^4 and some all-zero blocks.
std::vector<float> Activations(int64_t tokens, int64_t cols) {
  std::vector<float> x(tokens * cols);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      const bool zero_block = (t * 5 + c / 32) % 19 == 0;
      x[t * cols + c] = zero_block ? 0.0f
                                   : std::cos(0.29f * static_cast<float>(t * cols + c)) *
                                         std::ldexp(1.0f, static_cast<int>((t + c / 32) % 9) - 4);
    }
  }
  return x;
}

// out [tokens, w.rows] = QuantizedMatMul of `x` on 2 threads.
std::vector<float> MatMul(const MatrixView& w, const std::vector<float>& x, int64_t tokens) {
  ThreadPool pool(2);
  std::vector<float> out(tokens * w.rows);
  const MatMulOutput output{out.data(), 0, w.rows};
  std::vector<uint8_t> scratch(QuantizedActivationBytes(tokens, w.cols) + 32);
  void* aligned = scratch.data() + (32 - reinterpret_cast<uintptr_t>(scratch.data()) % 32) % 32;
  QuantizedMatMul(pool, x.data(), tokens, nullptr, w, nullptr, &output, 1, aligned);
  return out;
}

// Restores the selection LLMRT_CPU_TARGET asks for (the other suites of this binary run at it).
struct RestoreTarget {
  ~RestoreTarget() {
    const char* selected = std::getenv("LLMRT_CPU_TARGET");
    EXPECT_TRUE(SelectCpuTarget(selected != nullptr ? selected : "").ok());
  }
};

TEST(QuantTierTest, DotProductTiersAgreeBitForBit) {
  RestoreTarget restore;
  for (const char* tier : {"neon_dotprod", "neon_i8mm"}) {
    if (const absl::Status status = SelectCpuTarget(tier); !status.ok()) {
      GTEST_SKIP() << "the arm64 dot-product tiers cannot run here: " << status;
    }
  }
  const Scheme schemes[] = {{8, false, 0},   {8, false, 32}, {8, false, 64}, {8, false, 96},
                            {8, false, 256}, {4, false, 32}, {4, true, 32},  {4, true, 64},
                            {4, false, 96},  {4, true, 128}, {4, false, 256}};
  for (const Scheme& s : schemes) {
    for (int64_t rows : {1, 3, 17, 1000}) {
      // 2304 columns: 72 blocks, a LANE_CHUNKS chunk of one run at the end, every group size
      // divides it; one scale per row over 172 columns: a partial last block (I8); 768 for the
      // 1000 rows (emulated arm64 runs this test).
      const int64_t cols = rows == 1000 ? 768 : s.group_size == 0 && s.bits == 8 ? 172 : 2304;
      const QuantizedMatrix q = Weights(s, rows, cols);
      for (int64_t tokens : {1, 2, 3, 17}) {
        const std::vector<float> x = Activations(tokens, cols);
        ASSERT_TRUE(SelectCpuTarget("neon_dotprod").ok());
        const std::vector<float> dotprod = MatMul(q.View(), x, tokens);
        ASSERT_TRUE(SelectCpuTarget("neon_i8mm").ok());
        const std::vector<float> i8mm = MatMul(q.View(), x, tokens);
        std::vector<int8_t> codes(QuantizedActivationCols(cols));
        std::vector<float> scales(codes.size() / kQuantBlock);
        for (int64_t t = 0; t < tokens; ++t) {
          QuantizeActivationRow(x.data() + t * cols, nullptr, cols, codes.data(), scales.data());
          for (int64_t n = 0; n < rows; ++n) {
            const int64_t i = t * rows + n;
            ASSERT_EQ(dotprod[i], i8mm[i])
                << Name(s, rows, cols, tokens) << " token " << t << " row " << n;
            double magnitude = 0;
            const double expected = ReferenceDot(q, n, codes, scales, &magnitude);
            ASSERT_NEAR(i8mm[i], expected, 1e-5 * magnitude + 1e-6)
                << Name(s, rows, cols, tokens) << " token " << t << " row " << n;
          }
        }
      }
    }
  }
}

// The group sizes llmc writes (32, 64, 128 columns) and one per row (I8 also over a K that is no
// multiple of 32), at 1 token (decode) and 5 (several rows), against the integer reference within
// f32 rounding.
TEST(QuantTierTest, EveryGroupSizeMatchesReference) {
  const int64_t rows = 19;
  for (int bits : {8, 4}) {
    for (bool asymmetric : bits == 4 ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
      // 96 and 256: groups of 3 and 8 blocks (GPTQ / AWQ may carry them; QuantGroupShift).
      for (int32_t group : {32, 64, 96, 128, 256, 0}) {
        const Scheme s{bits, asymmetric, group};
        std::vector<int64_t> cols_list = {768, 1536};
        if (bits == 8 && group == 0) cols_list.push_back(172);
        for (int64_t cols : cols_list) {
          const QuantizedMatrix q = Weights(s, rows, cols);
          for (int64_t tokens : {1, 5}) {
            const std::vector<float> x = Activations(tokens, cols);
            const std::vector<float> out = MatMul(q.View(), x, tokens);
            std::vector<int8_t> codes(QuantizedActivationCols(cols));
            std::vector<float> scales(codes.size() / kQuantBlock);
            for (int64_t t = 0; t < tokens; ++t) {
              QuantizeActivationRow(x.data() + t * cols, nullptr, cols, codes.data(),
                                    scales.data());
              for (int64_t n = 0; n < rows; ++n) {
                double magnitude = 0;
                const double expected = ReferenceDot(q, n, codes, scales, &magnitude);
                ASSERT_NEAR(out[t * rows + n], expected, 1e-5 * magnitude + 1e-6)
                    << Name(s, rows, cols, tokens) << " at " << ActiveCpuTarget() << " token " << t
                    << " row " << n;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
