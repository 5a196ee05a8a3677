// QuantizedMatMulExact against MatMul (kernels.h) over the f32 weights the codes stand for,
// dequantized by the reference quantizer in quant_test_util.h (written from plan.proto, not
// from the kernels): every (bits, scheme, group size, permutation, token count, thread count),
// two fused destinations and gathered input rows, as the LOGITS op reads them.
#include "runtime/backend/cpu/quant_matmul_exact.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/quant_test_util.h"

namespace llmrt::cpu {
namespace {

using testing::QuantizedMatrix;
using testing::QuantizeReference;

struct Scheme {
  int bits;
  bool asymmetric;
  int32_t group_size;  // 0: one group per row (cols)
};

std::vector<float> Sine(int64_t count, float frequency, float amplitude, float offset) {
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) {
    values[i] = std::sin(frequency * static_cast<float>(i) + 0.3f) * amplitude + offset;
  }
  return values;
}

// The dequantized weights in ORIGINAL column order, as an f32 plan would store them.
std::vector<float> OriginalOrder(const QuantizedMatrix& q) {
  std::vector<float> weights(q.rows * q.cols);
  for (int64_t r = 0; r < q.rows; ++r) {
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t original = q.permutation.empty() ? c : q.permutation[c];
      weights[r * q.cols + original] = q.dequantized[r * q.cols + c];
    }
  }
  return weights;
}

void CheckScheme(const Scheme& scheme, int64_t out_rows, int64_t cols, bool permuted) {
  const int32_t group = scheme.group_size == 0 ? static_cast<int32_t>(cols) : scheme.group_size;
  std::vector<int32_t> permutation;
  if (permuted) {
    for (int64_t c = 0; c < cols; ++c)
      permutation.push_back(static_cast<int32_t>((c * 37 + 11) % cols));
  }
  const QuantizedMatrix q =
      QuantizeReference(Sine(out_rows * cols, 0.71f, 0.2f, scheme.asymmetric ? 0.05f : 0.0f),
                        out_rows, cols, scheme.bits, scheme.asymmetric, group, permutation);
  const std::vector<float> float_weights = OriginalOrder(q);
  const MatrixView f32_view{reinterpret_cast<const uint8_t*>(float_weights.data()), plan::F32,
                            out_rows, cols, 0};
  const std::string name =
      absl::StrFormat("i%d %s g%d cols %d%s", scheme.bits, scheme.asymmetric ? "asym" : "sym",
                      group, cols, permuted ? " permuted" : "");
  const std::vector<float> bias = Sine(out_rows, 0.3f, 0.5f, 0.0f);
  for (int64_t tokens : {1, 3, 17}) {
    // Activations of magnitude ~2.5 with no block structure: the int8 path would be off by
    // ~1e-2 relative here; the exact one must not be.
    const std::vector<float> x = Sine(tokens * cols, 0.37f, 2.5f, 0.1f);
    // Every other row, backwards (LOGITS gathers the rows it needs).
    std::vector<int32_t> input_rows;
    for (int64_t r = tokens - 1; r >= 0; r -= 2) input_rows.push_back(static_cast<int32_t>(r));
    for (bool gathered : {false, true}) {
      const int64_t rows_out = gathered ? static_cast<int64_t>(input_rows.size()) : tokens;
      const int32_t* rows = gathered ? input_rows.data() : nullptr;
      for (int32_t threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        const int64_t split = out_rows / 2 + 1;  // two destinations split at an odd column
        std::vector<float> first(rows_out * split), second(rows_out * (out_rows - split));
        std::vector<float> expect_first(first.size()), expect_second(second.size());
        const MatMulOutput outputs[2] = {{first.data(), 0, split},
                                         {second.data(), split, out_rows - split}};
        const MatMulOutput expected[2] = {{expect_first.data(), 0, split},
                                          {expect_second.data(), split, out_rows - split}};
        std::vector<uint8_t> scratch(QuantizedMatMulExactScratchBytes(threads, cols));
        QuantizedMatMulExact(pool, x.data(), rows_out, rows, q.View(), bias.data(), outputs, 2,
                             scratch.data());
        MatMul(pool, x.data(), rows_out, rows, f32_view, bias.data(), expected, 2);
        for (int part = 0; part < 2; ++part) {
          const std::vector<float>& got = part == 0 ? first : second;
          const std::vector<float>& want = part == 0 ? expect_first : expect_second;
          for (size_t i = 0; i < got.size(); ++i) {
            // Only the f32 summation order differs: ~1e-7 x sum |term| <= ~1e-7 x cols x 0.2 x 2.6.
            ASSERT_NEAR(got[i], want[i], 2e-5f * std::sqrt(static_cast<float>(cols)))
                << name << " tokens " << tokens << " gathered " << gathered << " threads "
                << threads << " part " << part << " index " << i;
          }
        }
      }
    }
  }
}

TEST(QuantizedMatMulExactTest, EqualsMatMulOverDequantizedWeights) {
  for (int32_t group : {32, 64, 128, 0}) {
    std::vector<Scheme> schemes = {{8, false, group}};
    if (group != 0) {
      schemes.push_back({4, false, group});
      schemes.push_back({4, true, group});
    }
    for (const Scheme& scheme : schemes) {
      for (bool permuted : {false, true}) {
        CheckScheme(scheme, /*out_rows=*/37, /*cols=*/256, permuted);
      }
    }
  }
  // Per-channel int8 over a width that is not a multiple of 32 (stories260K's down_proj, 172).
  CheckScheme({8, false, 0}, 21, 172, false);
}

// A wrong nibble order or zero point must show: the exact kernel against weights that differ
// from the codes' meaning in one nibble of one row.
TEST(QuantizedMatMulExactTest, SeesOneWrongNibble) {
  QuantizedMatrix q = QuantizeReference(Sine(8 * 64, 0.71f, 0.2f, 0.0f), 8, 64, 4, false, 32, {});
  std::vector<float> x(64, 1.0f);
  std::vector<float> out(8), corrupted_out(8);
  ThreadPool pool(1);
  std::vector<uint8_t> scratch(QuantizedMatMulExactScratchBytes(1, 64));
  MatMulOutput output{out.data(), 0, 8};
  QuantizedMatMulExact(pool, x.data(), 1, nullptr, q.View(), nullptr, &output, 1, scratch.data());
  q.codes[3 * 32 + 5] ^= 0x10;  // row 3, column 21's nibble
  MatMulOutput corrupted{corrupted_out.data(), 0, 8};
  QuantizedMatMulExact(pool, x.data(), 1, nullptr, q.View(), nullptr, &corrupted, 1,
                       scratch.data());
  for (int n = 0; n < 8; ++n) {
    if (n == 3) {
      EXPECT_GT(std::fabs(out[n] - corrupted_out[n]), 1e-3f);
    } else {
      EXPECT_EQ(out[n], corrupted_out[n]);
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu
