// The quantized matmul kernels against integer references written here, for every (bits,
// scheme, group size, permutation, token count, thread count) at the dispatch target
// LLMRT_CPU_TARGET forces (CMake registers the tests once per runnable target).
#include "runtime/backend/cpu/quant_matmul.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/quant_test_util.h"
#include "runtime/backend/cpu/region_schedule.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"

namespace llmrt::cpu {
namespace {

using testing::QuantizedMatrix;
using testing::QuantizeReference;
using testing::ReferenceDot;

class SelectTarget : public ::testing::Environment {
 public:
  void SetUp() override {
    const absl::Status status = SelectCpuTargetFromEnvironment();
    ASSERT_TRUE(status.ok()) << status;
    std::printf("quantized kernels run at target %s\n", ActiveCpuTarget().c_str());
  }
};
const auto* const kSelectTarget = ::testing::AddGlobalTestEnvironment(new SelectTarget);

struct Scheme {
  int bits;
  bool asymmetric;
  int32_t group_size;  // 0: one group per row (cols)
};

std::string Name(const Scheme& scheme, int64_t cols, bool permuted) {
  return absl::StrFormat("i%d %s g%d cols %d%s", scheme.bits, scheme.asymmetric ? "asym" : "sym",
                         scheme.group_size, cols, permuted ? " permuted" : "");
}

std::vector<Scheme> AllSchemes() {
  std::vector<Scheme> schemes;
  for (int32_t group : {32, 64, 128, 0}) {
    schemes.push_back({8, false, group});
    if (group != 0) {
      schemes.push_back({4, false, group});
      schemes.push_back({4, true, group});
    }
  }
  return schemes;
}

std::vector<int32_t> Permutation(int64_t cols) {
  std::vector<int32_t> permutation(cols);
  for (int64_t c = 0; c < cols; ++c) permutation[c] = static_cast<int32_t>((c * 37 + 11) % cols);
  return permutation;  // 37 is coprime with every cols used here
}

std::vector<float> Weights(int64_t rows, int64_t cols, float offset, float amplitude = 0.2f) {
  std::vector<float> weights(rows * cols);
  for (size_t i = 0; i < weights.size(); ++i) {
    weights[i] = std::sin(0.71f * static_cast<float>(i) + 0.3f) * amplitude + offset;
  }
  return weights;
}

// Each 32-column block (in stored order: x[permutation[c]] for stored column c) has largest
// magnitude 127 * 2^-e (e = row % 4), so its activation scale is exactly 2^-e and every code
// an exact integer.
std::vector<float> PowerOfTwoActivations(int64_t rows, int64_t cols,
                                         const std::vector<int32_t>& permutation) {
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float unit = std::ldexp(1.0f, -static_cast<int>(r % 4));
    for (int64_t c = 0; c < cols; ++c) {
      const int level = static_cast<int>((r * 131 + c * 17) % 255) - 127;
      const int64_t source = permutation.empty() ? c : permutation[c];
      x[r * cols + source] = static_cast<float>(c % 32 == 5 ? 127 : level) * unit;
    }
  }
  return x;
}

std::vector<float> RandomActivations(int64_t rows, int64_t cols) {
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.37f * static_cast<float>(i)) * 2.5f;
  return x;
}

// power_of_two: weight scales 2^-3 and activation scales 2^-e, so every f32 product and sum is
// exact while |result| < 2^24 * 2^-6: weights of amplitude 4 (I8 codes up to 32) over 256
// columns reach at most 8 blocks x 32 x 32 x 127 x 8 = 8.3M units of 2^-6; `amplitude` 100
// saturates every code (I8 +-127, I4 0 / 15: the int16 pair sums' worst case) over 64 columns.
void CheckScheme(const Scheme& scheme, int64_t out_rows, int64_t cols, bool permuted,
                 bool power_of_two, float amplitude = 4.0f) {
  const int32_t group = scheme.group_size == 0 ? static_cast<int32_t>(cols) : scheme.group_size;
  const QuantizedMatrix q = QuantizeReference(
      Weights(out_rows, cols, scheme.asymmetric ? 0.05f : 0.0f, power_of_two ? amplitude : 0.2f),
      out_rows, cols, scheme.bits, scheme.asymmetric, group,
      permuted ? Permutation(cols) : std::vector<int32_t>{},
      power_of_two ? std::ldexp(1.0f, -3) : 0.0f);
  const MatrixView w = q.View();
  const std::string name = Name(scheme, cols, permuted);
  for (int64_t tokens : {1, 3, 18}) {  // 18: tiles of 4 and a last one of 2
    const std::vector<float> x = power_of_two ? PowerOfTwoActivations(tokens, cols, q.permutation)
                                              : RandomActivations(tokens, cols);
    std::vector<float> bias(out_rows);
    for (int64_t n = 0; n < out_rows; ++n) bias[n] = power_of_two ? 0.0f : 0.01f * n;
    for (int32_t threads : {1, 2}) {
      ThreadPool pool(threads);
      // Two destinations, split at an odd column, as a fused matmul writes them.
      const int64_t split = out_rows / 2 + 1;
      std::vector<float> first(tokens * split), second(tokens * (out_rows - split));
      const MatMulOutput outputs[2] = {{first.data(), 0, split},
                                       {second.data(), split, out_rows - split}};
      std::vector<uint8_t> scratch(QuantizedActivationBytes(tokens, cols) + 32);
      void* aligned = scratch.data() + (32 - reinterpret_cast<uintptr_t>(scratch.data()) % 32) % 32;
      QuantizedMatMul(pool, x.data(), tokens, nullptr, w, bias.data(), outputs, 2, aligned);
      const int64_t padded = (cols + 31) / 32 * 32;
      std::vector<int8_t> codes(padded);
      std::vector<float> scales(padded / 32);
      for (int64_t t = 0; t < tokens; ++t) {
        QuantizeActivationRow(x.data() + t * cols, w.input_permutation, cols, codes.data(),
                              scales.data());
        for (int64_t n = 0; n < out_rows; ++n) {
          double magnitude = 0;
          const double expected = ReferenceDot(q, n, codes, scales, &magnitude) + bias[n];
          const float actual =
              n < split ? first[t * split + n] : second[t * (out_rows - split) + n - split];
          if (power_of_two) {
            // Every term is an integer multiple of 2^-6 below 2^24 of them: f32 is exact.
            ASSERT_EQ(actual, expected) << name << " tokens " << tokens << " threads " << threads
                                        << " token " << t << " row " << n;
          } else {
            ASSERT_NEAR(actual, expected, 1e-5 * magnitude + 1e-6)
                << name << " tokens " << tokens << " threads " << threads << " token " << t
                << " row " << n;
          }
        }
      }
    }
  }
}

TEST(QuantMatMulTest, IntegerSumsAreExactForEveryScheme) {
  for (const Scheme& scheme : AllSchemes()) {
    for (bool permuted : {false, true}) CheckScheme(scheme, 37, 256, permuted, true);
  }
  // One scale per row over a K that is no multiple of 32 (I8 only): a partial last block.
  CheckScheme({8, false, 0}, 37, 172, false, true);
  CheckScheme({8, false, 0}, 37, 172, true, true);
  for (const Scheme& scheme : {Scheme{8, false, 32}, Scheme{4, false, 32}, Scheme{4, true, 64}}) {
    CheckScheme(scheme, 9, 64, false, true, /*amplitude=*/100.0f);
  }
}

TEST(QuantMatMulTest, RandomScalesMatchReferenceWithinF32Rounding) {
  for (const Scheme& scheme : AllSchemes()) {
    for (bool permuted : {false, true}) CheckScheme(scheme, 37, 384, permuted, false);
  }
  CheckScheme({8, false, 0}, 21, 172, true, false);
}

// Rows long enough for several chunks of precomputed scales (64 blocks for I8, 32 for I4) and
// an odd number of blocks (the I4 AVX2 kernel reads blocks in pairs), and enough rows for
// whole 4-row passes with the next rows prefetched, then a remainder of single rows.
TEST(QuantMatMulTest, LongRowsMatchReference) {
  for (const Scheme& scheme : AllSchemes()) {
    CheckScheme(scheme, 45, 2176, false, false);  // 68 blocks
    if (scheme.group_size == 32 || scheme.group_size == 0) {
      CheckScheme(scheme, 45, 2080, scheme.bits == 4, false);  // 65 blocks
    }
  }
}

// The I8 decode GEMV (AVX2) takes each pass's 4 rows from the 4 quarters of the matrix, in work
// items of 128 KiB of each quarter (60 rows at K = 2176): 603 rows are quarters of 150 rows, 3
// items each (60, 60, 30), and 3 rows past the quarters; the second destination starts inside
// the third quarter's first item.
TEST(QuantMatMulTest, DecodeOverManyWorkItemsMatchesReference) {
  for (const Scheme& scheme : {Scheme{8, false, 0}, Scheme{8, false, 32}}) {
    CheckScheme(scheme, 603, 2176, false, false);
  }
}

// The I4 decode GEMV (one token; on AVX-512 VNNI two rows per 512-bit vector) against the same
// rows of a 5-token matmul (on x86 the GEMM tiles) bit for bit, and against the reference within
// f32 rounding, at row counts that leave every case of the GEMV's schedule (rows i, i + Q, i + 2Q,
// i + 3Q with Q = rows / 4, then rows / 4 * 4 .. rows one at a time): fewer rows than 4 regions
// (1, 2, 3), tails of 0 to 3 rows (8, 17, 38, 43), and regions of several 128 KiB work items
// (1030 and 1031 rows of 2080 or 2176 columns: 126 or 120 rows an item), for symmetric and
// zero-point codes and groups of 32, 64 and 128, with a last chunk of 1 (2080) or 4 (2176)
// blocks, a bias, and the outputs split at an odd column, on 1 and 2 threads.
TEST(QuantMatMulTest, Int4DecodeEqualsBatchedRowsAtEveryRowTail) {
  const Scheme schemes[] = {{4, false, 32}, {4, true, 32}, {4, false, 64}, {4, true, 128}};
  for (const Scheme& scheme : schemes) {
    const int64_t cols = scheme.group_size == 32 ? 2080 : 2176;
    for (int64_t rows : {1, 2, 3, 8, 17, 38, 43, 1030, 1031}) {
      const QuantizedMatrix q =
          QuantizeReference(Weights(rows, cols, scheme.asymmetric ? 0.05f : 0.0f), rows, cols,
                            scheme.bits, scheme.asymmetric, scheme.group_size, {});
      const MatrixView w = q.View();
      constexpr int64_t kTokens = 5;
      const std::vector<float> x = RandomActivations(kTokens, cols);
      std::vector<float> bias(rows);
      for (int64_t n = 0; n < rows; ++n) bias[n] = 0.01f * static_cast<float>(n % 7) - 0.03f;
      const int64_t split = rows / 2 + 1;
      const int32_t num_outputs = rows > split ? 2 : 1;
      std::vector<uint8_t> scratch(QuantizedActivationBytes(kTokens, cols) + 32);
      void* aligned = scratch.data() + (32 - reinterpret_cast<uintptr_t>(scratch.data()) % 32) % 32;
      std::vector<int8_t> codes(QuantizedActivationCols(cols));
      std::vector<float> scales(codes.size() / 32);
      for (int32_t threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<float> first(kTokens * split), second(kTokens * (rows - split));
        const MatMulOutput batched[2] = {{first.data(), 0, split},
                                         {second.data(), split, rows - split}};
        QuantizedMatMul(pool, x.data(), kTokens, nullptr, w, bias.data(), batched, num_outputs,
                        aligned);
        for (int32_t t = 0; t < kTokens; ++t) {
          std::vector<float> one_first(split), one_second(rows - split);
          const MatMulOutput one[2] = {{one_first.data(), 0, split},
                                       {one_second.data(), split, rows - split}};
          QuantizedMatMul(pool, x.data(), 1, &t, w, bias.data(), one, num_outputs, aligned);
          QuantizeActivationRow(x.data() + t * cols, nullptr, cols, codes.data(), scales.data());
          for (int64_t n = 0; n < rows; ++n) {
            const float alone = n < split ? one_first[n] : one_second[n - split];
            const float many =
                n < split ? first[t * split + n] : second[t * (rows - split) + n - split];
            ASSERT_EQ(alone, many) << Name(scheme, cols, false) << " rows " << rows << " threads "
                                   << threads << " token " << t << " row " << n;
            double magnitude = 0;
            const double expected = ReferenceDot(q, n, codes, scales, &magnitude) + bias[n];
            ASSERT_NEAR(alone, expected, 1e-5 * magnitude + 1e-6)
                << Name(scheme, cols, false) << " rows " << rows << " token " << t << " row " << n;
          }
        }
      }
    }
  }
}

// The decode schedule both weight-streaming GEMVs run on (region_schedule.h): every unit once,
// unit i of each of the `group` regions in one call (units i + k * Q, Q = num_units / group),
// items no longer than 128 KiB of each stream, and the units past the regions in the last item,
// whatever the thread count.
TEST(RegionScheduleTest, EveryUnitOnceInRegionsThenTheRest) {
  for (int32_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int group : {1, 4, 6}) {
      for (int64_t num_units : {0, 1, 3, 4, 7, 64, 1031}) {
        for (int64_t unit_bytes : {int64_t{128}, int64_t{4096}, int64_t{1} << 20}) {
          std::vector<std::atomic<int>> visits(num_units);
          const int64_t region = num_units / group;
          const int64_t per_item = std::max<int64_t>(1, kRegionStreamBytesPerItem / unit_bytes);
          std::atomic<int> rest_items{0};
          std::atomic<bool> ok{true};
          ForEachRegionItem(
              pool, num_units, group, unit_bytes,
              [&](int64_t begin, int64_t end, int64_t spacing) {
                if (spacing != region || begin >= end || end - begin > per_item ||
                    begin % per_item != 0 || end > region) {
                  ok = false;
                }
                for (int64_t i = begin; i < end; ++i) {
                  for (int k = 0; k < group; ++k) ++visits[i + k * spacing];
                }
              },
              [&](int64_t begin, int64_t end) {
                ++rest_items;
                if (begin != region * group || end != num_units) ok = false;
                for (int64_t unit = begin; unit < end; ++unit) ++visits[unit];
              });
          const std::string name = absl::StrFormat("%d threads, group %d, %d units of %d bytes",
                                                   threads, group, num_units, unit_bytes);
          EXPECT_TRUE(ok.load()) << name;
          EXPECT_EQ(rest_items.load(), region * group < num_units ? 1 : 0) << name;
          for (int64_t unit = 0; unit < num_units; ++unit) {
            ASSERT_EQ(visits[unit].load(), 1) << name << ": unit " << unit;
          }
        }
      }
    }
  }
}

// The activation quantizer follows its definition: per 32 columns, scale max|x| / 127 and
// codes round-to-nearest-even(x * 127 / max|x|), permuted order, zero padding.
TEST(QuantMatMulTest, ActivationQuantizerFollowsDefinition) {
  const int64_t cols = 70;  // two full blocks and a partial one
  std::vector<float> x(cols);
  for (int64_t c = 0; c < cols; ++c) x[c] = std::sin(0.9f * c) * (c < 32 ? 3.0f : 0.01f);
  x[40] = 0.0f;
  const std::vector<int32_t> permutation = Permutation(cols);
  std::vector<int8_t> codes(96, 99);
  std::vector<float> scales(3);
  QuantizeActivationRow(x.data(), permutation.data(), cols, codes.data(), scales.data());
  for (int64_t block = 0; block < 3; ++block) {
    float max_magnitude = 0;
    for (int64_t c = block * 32; c < std::min<int64_t>(cols, block * 32 + 32); ++c) {
      max_magnitude = std::max(max_magnitude, std::fabs(x[permutation[c]]));
    }
    EXPECT_EQ(scales[block], max_magnitude / 127.0f);
    for (int64_t c = block * 32; c < block * 32 + 32; ++c) {
      const float value = c < cols ? x[permutation[c]] : 0.0f;
      const int expected = static_cast<int>(std::nearbyint(value * (127.0f / max_magnitude)));
      EXPECT_EQ(codes[c], expected) << "column " << c;
      EXPECT_LE(std::abs(codes[c]), 127);
    }
  }
  std::vector<float> zeros(32, 0.0f);
  QuantizeActivationRow(zeros.data(), nullptr, 32, codes.data(), scales.data());
  EXPECT_EQ(scales[0], 0.0f);
  for (int c = 0; c < 32; ++c) EXPECT_EQ(codes[c], 0);
}

// A token's result must not depend on how many tokens share its step (kernels.h: the engine
// batches freely and a sequence gives the same logits alone or batched, to the bit).
TEST(QuantMatMulTest, BatchInvariant) {
  for (const Scheme& scheme : {Scheme{8, false, 64}, Scheme{4, true, 32}, Scheme{4, false, 128}}) {
    const int64_t rows = 19, cols = 256;
    const QuantizedMatrix q = QuantizeReference(Weights(rows, cols, 0.0f), rows, cols, scheme.bits,
                                                scheme.asymmetric, scheme.group_size, {});
    const std::vector<float> x = RandomActivations(11, cols);
    ThreadPool pool(2);
    alignas(32) static uint8_t scratch[64 * 1024];
    std::vector<float> batched(11 * rows);
    const MatMulOutput all{batched.data(), 0, rows};
    QuantizedMatMul(pool, x.data(), 11, nullptr, q.View(), nullptr, &all, 1, scratch);
    for (int32_t token = 0; token < 11; ++token) {
      std::vector<float> alone(rows);
      const MatMulOutput one{alone.data(), 0, rows};
      QuantizedMatMul(pool, x.data(), 1, &token, q.View(), nullptr, &one, 1, scratch);
      for (int64_t n = 0; n < rows; ++n) {
        ASSERT_EQ(alone[n], batched[token * rows + n]) << Name(scheme, cols, false);
      }
    }
  }
}

// Against the f32 matmul of the dequantized weights the only error is the activations'
// rounding: each element moves by at most half a step, scale / 2, so output n moves by at most
// sum_c |w[n, c]| * scale(block of c) / 2 (plus f32 rounding of the sums).
TEST(QuantMatMulTest, ActivationErrorIsWithinHalfAStep) {
  for (const Scheme& scheme : AllSchemes()) {
    const int64_t rows = 23, cols = 256, tokens = 3;
    const int32_t group = scheme.group_size == 0 ? cols : scheme.group_size;
    const QuantizedMatrix q = QuantizeReference(Weights(rows, cols, 0.01f), rows, cols, scheme.bits,
                                                scheme.asymmetric, group, Permutation(cols));
    const std::vector<float> x = RandomActivations(tokens, cols);
    ThreadPool pool(1);
    alignas(32) static uint8_t scratch[16 * 1024];
    std::vector<float> out(tokens * rows);
    const MatMulOutput all{out.data(), 0, rows};
    QuantizedMatMul(pool, x.data(), tokens, nullptr, q.View(), nullptr, &all, 1, scratch);
    std::vector<int8_t> codes(cols);
    std::vector<float> scales(cols / 32);
    for (int64_t t = 0; t < tokens; ++t) {
      QuantizeActivationRow(x.data() + t * cols, q.permutation.data(), cols, codes.data(),
                            scales.data());
      for (int64_t n = 0; n < rows; ++n) {
        double exact = 0, bound = 0, magnitude = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double w = q.dequantized[n * cols + c];
          exact += w * x[t * cols + q.permutation[c]];
          bound += std::fabs(w) * scales[c / 32] / 2;
          magnitude += std::fabs(w * x[t * cols + q.permutation[c]]);
        }
        EXPECT_LE(std::fabs(out[t * rows + n] - exact), bound + 1e-6 * magnitude)
            << Name(scheme, cols, true) << " token " << t << " row " << n;
      }
    }
  }
}

TEST(QuantMatMulTest, RowToF32MatchesReferenceDequantization) {
  for (const Scheme& scheme : AllSchemes()) {
    const int64_t rows = 5, cols = 128;
    const int32_t group = scheme.group_size == 0 ? cols : scheme.group_size;
    const QuantizedMatrix q = QuantizeReference(Weights(rows, cols, 0.02f), rows, cols, scheme.bits,
                                                scheme.asymmetric, group, {});
    std::vector<float> row(cols);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizedRowToF32(q.View(), r, row.data());
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(row[c], q.dequantized[r * cols + c]) << Name(scheme, cols, false);
      }
    }
  }
}

}  // namespace
}  // namespace llmrt::cpu

namespace llmrt::cpu {
namespace {

// QuantizedMatMul's scratch: `bytes`, 32-byte aligned (quant_matmul.h).
struct AlignedScratch {
  explicit AlignedScratch(int64_t bytes) : storage(bytes + 32) {}
  void* get() {
    return storage.data() + (32 - reinterpret_cast<uintptr_t>(storage.data()) % 32) % 32;
  }
  std::vector<uint8_t> storage;
};

// MXFP4 (FP4_E2M1 codes in LANE_CHUNKS, E8M0 scales): rows of `cols` random codes, the scale of
// block i being exponents[i % size].
struct Mxfp4Weights {
  std::vector<uint8_t> codes, exponents;
  MatrixView View(int64_t rows, int64_t cols) const {
    MatrixView w;
    w.data = codes.data();
    w.dtype = plan::FP4_E2M1;
    w.rows = rows;
    w.cols = cols;
    w.group_size = static_cast<int32_t>(plan::kMxfp4Block);
    w.exponents = exponents.data();
    return w;
  }
};

Mxfp4Weights MakeMxfp4(int64_t rows, int64_t cols, const std::vector<uint8_t>& exponents,
                       uint32_t seed) {
  Mxfp4Weights w;
  w.codes.resize(rows * cols / 2);
  w.exponents.resize(rows * cols / plan::kMxfp4Block);
  std::vector<uint8_t> row(cols);
  uint32_t state = seed;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      row[c] = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 28);
    plan::PackInt4Row(row.data(), cols, w.codes.data() + r * cols / 2);
  }
  for (size_t i = 0; i < w.exponents.size(); ++i) w.exponents[i] = exponents[i % exponents.size()];
  return w;
}

// The result plan.proto's comment defines, given the kernels' int8 activations: per block,
// sum_c e2m1(code_c) * 2^(b - 127) * d * q_c, in double; and the sum of the blocks'
// magnitudes (the scale of the kernel's f32 rounding when blocks cancel).
std::pair<double, double> Mxfp4Reference(const Mxfp4Weights& w, int64_t row, int64_t cols,
                                         const int8_t* codes, const float* scales) {
  double sum = 0, magnitude = 0;
  for (int64_t block = 0; block < cols / 32; ++block) {
    double block_sum = 0;
    for (int64_t c = block * 32; c < block * 32 + 32; ++c) {
      const int code = plan::Int4CodeAt(w.codes.data() + row * cols / 2, cols, c);
      const double scale = std::ldexp(1.0, w.exponents[row * cols / 32 + block] - 127);
      block_sum += plan::kE2M1Values[code] * scale * scales[block] * codes[c];
    }
    sum += block_sum;
    magnitude += std::fabs(block_sum);
  }
  return {sum, magnitude};
}

// Every E8M0 byte 0..254 (denormal 2^-127 to 2^127) scales some block, and each result matches
// the definition to f32 rounding.
TEST(Mxfp4MatMulTest, EveryScaleByteMatchesTheDefinition) {
  constexpr int64_t kRows = 255, kCols = 64;
  std::vector<uint8_t> exponents(2 * kRows);
  for (int64_t r = 0; r < kRows; ++r) {
    exponents[2 * r] = exponents[2 * r + 1] = static_cast<uint8_t>(r);
  }
  const Mxfp4Weights w = MakeMxfp4(kRows, kCols, exponents, 3);
  std::vector<float> x(kCols);
  // Activations of ~1e-3, so that rows scaled by 2^127 stay below f32's maximum.
  for (int64_t c = 0; c < kCols; ++c) x[c] = 1e-3f * std::sin(0.37f * c + 1.0f);
  std::vector<int8_t> codes(kCols);
  std::vector<float> scales(kCols / 32);
  QuantizeActivationRow(x.data(), nullptr, kCols, codes.data(), scales.data());
  ThreadPool pool(2);
  AlignedScratch scratch(QuantizedActivationBytes(1, kCols));
  std::vector<float> out(kRows);
  const MatMulOutput output{out.data(), 0, kRows};
  const MatrixView view = w.View(kRows, kCols);
  QuantizedMatMul(pool, x.data(), 1, nullptr, view, nullptr, &output, 1, scratch.get());
  for (int64_t r = 0; r < kRows; ++r) {
    const auto [expected, magnitude] = Mxfp4Reference(w, r, kCols, codes.data(), scales.data());
    // A few f32 roundings of each block's term; the rows scaled by 2^-127.. land in f32's
    // denormals, whose spacing (1.4e-45) times the integer block sums (<= 2 * 12 * 127 * 32)
    // bounds their error.
    EXPECT_NEAR(out[r], expected, 1e-6 * magnitude + 2e-40) << "row " << r;
  }
  // The dequantized rows (QuantizedRowToF32) are the definition's exactly.
  std::vector<float> dequantized(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    QuantizedRowToF32(view, r, dequantized.data());
    for (int64_t c = 0; c < kCols; ++c) {
      const int code = plan::Int4CodeAt(w.codes.data() + r * kCols / 2, kCols, c);
      EXPECT_EQ(dequantized[c],
                static_cast<float>(plan::kE2M1Values[code] *
                                   std::ldexp(1.0, exponents[2 * r + c / 32] - 127)));
    }
  }
}

// A row's result is the same to the bit computed alone (GEMV), among 16 or among 512 rows, on
// any thread count.
void CheckOneRowEqualsManyRows() {
  constexpr int64_t kRows = 40, kCols = 608;
  const Mxfp4Weights w = MakeMxfp4(kRows, kCols, {118, 119, 120, 121, 122, 123, 124}, 9);
  const MatrixView view = w.View(kRows, kCols);
  constexpr int64_t kTokens = 512;
  std::vector<float> x(kTokens * kCols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.011f * static_cast<float>(i * i % 977));
  AlignedScratch scratch(QuantizedActivationBytes(kTokens, kCols));
  std::vector<float> all(kTokens * kRows);
  for (int32_t threads : {1, 3}) {
    ThreadPool pool(threads);
    const MatMulOutput all_output{all.data(), 0, kRows};
    QuantizedMatMul(pool, x.data(), kTokens, nullptr, view, nullptr, &all_output, 1, scratch.get());
    std::vector<float> sixteen(16 * kRows), one(kRows);
    std::vector<int32_t> rows(16);
    for (int32_t i = 0; i < 16; ++i) rows[i] = 31 * i + 5;
    const MatMulOutput sixteen_output{sixteen.data(), 0, kRows};
    QuantizedMatMul(pool, x.data(), 16, rows.data(), view, nullptr, &sixteen_output, 1,
                    scratch.get());
    for (int32_t i = 0; i < 16; ++i) {
      const MatMulOutput one_output{one.data(), 0, kRows};
      QuantizedMatMul(pool, x.data(), 1, &rows[i], view, nullptr, &one_output, 1, scratch.get());
      for (int64_t n = 0; n < kRows; ++n) {
        ASSERT_EQ(one[n], all[rows[i] * kRows + n]) << "token " << rows[i] << " row " << n;
        ASSERT_EQ(sixteen[i * kRows + n], all[rows[i] * kRows + n]) << "token " << rows[i];
      }
    }
  }
}

TEST(Mxfp4MatMulTest, OneRowEqualsManyRowsBitForBit) { CheckOneRowEqualsManyRows(); }

// The same on the AMX tiles (quant_gemm_amx.cc; emulated where the CPU has none), which take the
// 512-row matmul.
TEST(Mxfp4MatMulTest, OneRowEqualsManyRowsOnAmxTilesBitForBit) {
  if (const std::string reason = testing::AmxGemmScope::SkipReason(); !reason.empty()) {
    GTEST_SKIP() << reason;
  }
  testing::AmxGemmScope amx;
  CheckOneRowEqualsManyRows();
  EXPECT_TRUE(amx.Ran()) << "the AMX path never ran";
}

// Odd shapes through the multi-row path (QuantizedGemm on x86): 1 and 3 weight rows (short of a
// register tile), 17 (a 16-row panel and a lone row), 37 (two panels and a short one); K = 64 (one
// chunk of 2 blocks) and 608 (two chunks of 8 and one of 3); 2 to 17 tokens (every short token
// tile; the token counts are the caller's). Each token's row equals the same token alone (the
// decode GEMV) to the bit and the definition to f32 rounding, with a bias and the outputs split at
// an odd column, on 1 and 2 threads.
void CheckManyRowsEqualOneRowAtOddShapes(const std::vector<int64_t>& token_counts) {
  for (int64_t rows : {1, 3, 17, 37}) {
    for (int64_t cols : {64, 608}) {
      const Mxfp4Weights w =
          MakeMxfp4(rows, cols, {119, 127, 121, 130, 116}, static_cast<uint32_t>(5 + rows));
      const MatrixView view = w.View(rows, cols);
      const int64_t kTokens = token_counts.back();
      std::vector<float> x(kTokens * cols);
      for (size_t i = 0; i < x.size(); ++i) {
        // Some all-zero blocks (activation scale 0) among blocks of spread magnitudes.
        const int64_t block = static_cast<int64_t>(i) / 32;
        x[i] = block % 7 == 3 ? 0.0f
                              : std::ldexp(std::sin(0.29f * static_cast<float>(i) + 0.5f),
                                           static_cast<int>(block % 5) - 2);
      }
      std::vector<float> bias(rows);
      for (int64_t n = 0; n < rows; ++n) bias[n] = 0.125f * static_cast<float>(n % 3) - 0.1f;
      const int64_t split = rows / 2 + 1;
      AlignedScratch scratch(QuantizedActivationBytes(kTokens, cols));
      std::vector<int8_t> codes(QuantizedActivationCols(cols));
      std::vector<float> scales(codes.size() / 32);
      std::vector<float> one(rows);
      for (int32_t threads : {1, 2}) {
        ThreadPool pool(threads);
        for (int64_t tokens : token_counts) {
          std::vector<float> first(tokens * split), second(tokens * (rows - split));
          const MatMulOutput outputs[2] = {{first.data(), 0, split},
                                           {second.data(), split, rows - split}};
          QuantizedMatMul(pool, x.data(), tokens, nullptr, view, bias.data(), outputs,
                          rows > split ? 2 : 1, scratch.get());
          for (int32_t t = 0; t < tokens; ++t) {
            const MatMulOutput one_output{one.data(), 0, rows};
            QuantizedMatMul(pool, x.data(), 1, &t, view, bias.data(), &one_output, 1,
                            scratch.get());
            QuantizeActivationRow(x.data() + t * cols, nullptr, cols, codes.data(), scales.data());
            for (int64_t n = 0; n < rows; ++n) {
              const float many =
                  n < split ? first[t * split + n] : second[t * (rows - split) + n - split];
              ASSERT_EQ(many, one[n]) << rows << " x " << cols << ", " << tokens << " tokens, "
                                      << threads << " threads, token " << t << " row " << n;
              const auto [expected, magnitude] =
                  Mxfp4Reference(w, n, cols, codes.data(), scales.data());
              ASSERT_NEAR(many, expected + bias[n], 1e-6 * magnitude + 1e-6)
                  << rows << " x " << cols << ", token " << t << " row " << n;
            }
          }
        }
      }
    }
  }
}

TEST(Mxfp4MatMulTest, ManyRowsEqualOneRowAtOddShapes) {
  CheckManyRowsEqualOneRowAtOddShapes({2, 3, 5, 17});
}

// The same on the AMX tiles (quant_gemm_amx.cc; emulated where the CPU has none): the smallest
// batch they take and one ending in a short token tile.
TEST(Mxfp4MatMulTest, ManyRowsEqualOneRowAtOddShapesOnAmxTiles) {
  if (const std::string reason = testing::AmxGemmScope::SkipReason(); !reason.empty()) {
    GTEST_SKIP() << reason;
  }
  testing::AmxGemmScope amx;
  CheckManyRowsEqualOneRowAtOddShapes({kAmxMinTokens, kAmxMinTokens + 5});
  EXPECT_TRUE(amx.Ran()) << "the AMX path never ran";
}

}  // namespace
}  // namespace llmrt::cpu
