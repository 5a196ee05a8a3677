//===- QuantizedKernelTest.cpp - int8/int4 GEMV and GEMM vs the contract --===//
//
// The quantized matmul kernels codegen/cuda emits (gemvQuant for decode, gemmMmaQuant for
// prefill), executed under emulation on small shapes and compared with a scalar reference
// written here from plan.proto's Quantization comment (code -> value mapping, f16 scales per
// group, U8 zero points, input permutation; I4 codes packed in LANE_CHUNKS by
// runtime/plan/int4_layout.h, the compiler's packer), not from the kernels. The expert variants
// of both (EXPERT_MATMUL over I8 / I4 / MXFP4 expert stacks) against the same contract, MXFP4
// from plan.proto's E2M1 / E8M0 text. The logits top-k prefilter on rows with ties and
// infinities, and the router's choices on tied logits against the CPU backend's.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "codegen/cuda/emulation/QuantizedMatmulMeta.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

// A quantized matrix as plan.proto stores it, plus its values dequantized by the contract.
struct QuantizedMatrix {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales; // f16 bits [n, k / group]
  std::vector<uint8_t> zeros;   // [n, k / group]
  std::vector<int32_t> permutation;
  std::vector<double> dequantized; // [n, k], stored column order
};

QuantizedMatrix makeMatrix(const QuantCase &c, std::mt19937 &random) {
  QuantizedMatrix m;
  const int64_t groups = c.k / c.group;
  std::uniform_real_distribution<float> scale(0.002f, 0.05f);
  for (int64_t i = 0; i < c.n * groups; ++i) {
    m.scales.push_back(plan::F32ToF16(scale(random)));
    m.zeros.push_back(static_cast<uint8_t>(random() % 16));
  }
  std::vector<int> code(c.n * c.k);
  for (int &value : code)
    value = c.dtype == plan::I8 ? static_cast<int>(random() % 255) - 127
                                : static_cast<int>(random() % 16);
  if (c.dtype == plan::I8) {
    for (int value : code)
      m.codes.push_back(static_cast<uint8_t>(static_cast<int8_t>(value)));
  } else {
    m.codes.resize(c.n * c.k / 2);
    std::vector<uint8_t> row(c.k);
    for (int64_t r = 0; r < c.n; ++r) {
      std::copy(code.begin() + r * c.k, code.begin() + (r + 1) * c.k, row.begin());
      plan::PackInt4Row(row.data(), c.k, m.codes.data() + r * c.k / 2);
    }
  }
  for (int64_t row = 0; row < c.n; ++row)
    for (int64_t col = 0; col < c.k; ++col) {
      const int64_t g = row * groups + col / c.group;
      const double s = plan::F16ToF32(m.scales[g]);
      const int value = code[row * c.k + col];
      double w;
      if (c.dtype == plan::I8)
        w = value * s;
      else if (c.asymmetric)
        w = (value - m.zeros[g]) * s;
      else
        w = (value - 8) * s;
      m.dequantized.push_back(w);
    }
  if (c.permuted) {
    m.permutation.resize(c.k);
    for (int64_t i = 0; i < c.k; ++i)
      m.permutation[i] = static_cast<int32_t>(i);
    std::shuffle(m.permutation.begin(), m.permutation.end(), random);
  }
  return m;
}

template <typename T> llmrt::cuda::DevicePointer upload(EmulatedDevice &device, const T &data) {
  auto pointer = device.Allocate(std::max<size_t>(1, data.size() * sizeof(data[0])));
  EXPECT_TRUE(pointer.ok());
  EXPECT_TRUE(device.CopyToDevice(*pointer, data.data(), data.size() * sizeof(data[0])).ok());
  return *pointer;
}

class QuantizedMatmulTest : public ::testing::TestWithParam<QuantCase> {};

// Both kernels on 3 tokens (the GEMV's case) and 70 (two GEMM row tiles, one partial): every
// output within 2e-5 of sum |w x| of the contract's value. That is f32-class: the GEMV sums in
// f32; the GEMM multiplies exact integer codes by activations split into two bf16 parts
// (relative error 2^-17 per product) and scales once per group.
TEST_P(QuantizedMatmulTest, GemvAndGemmMatchTheContractsDequantization) {
  const QuantCase &c = GetParam();
  std::mt19937 random(11);
  const QuantizedMatrix m = makeMatrix(c, random);
  auto emission = emitCuda(matmulMeta(c));
  ASSERT_TRUE(emission.ok()) << emission.status();
  ASSERT_EQ(emission->kernels.size(), 2u);
  auto module = EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  ASSERT_TRUE(module.ok()) << module.status();
  const plan::KernelTable table = emission->kernelTable("cuda:emulated");
  EmulatedDevice device(*module, table);

  std::vector<float> bias(c.n);
  for (float &b : bias)
    b = std::uniform_real_distribution<float>(-1, 1)(random);
  LlmcKernelParams params = {};
  params.weight = upload(device, m.codes);
  params.scales = upload(device, m.scales);
  if (c.asymmetric)
    params.zero_points = upload(device, m.zeros);
  if (c.permuted)
    params.input_permutation = upload(device, m.permutation);
  if (c.bias)
    params.bias = upload(device, bias);
  for (int tokens : {3, 70}) {
    SCOPED_TRACE(absl::StrCat(tokens, " tokens"));
    std::vector<float> x(tokens * c.k);
    for (float &value : x)
      value = std::uniform_real_distribution<float>(-2, 2)(random);
    params.input[0] = upload(device, x);
    params.output[0] = upload(device, std::vector<float>(tokens * c.n, NAN));
    params.num_tokens = tokens;
    for (int kernel = 0; kernel < 2; ++kernel) {
      const plan::KernelTable::Kernel &info = table.kernels(kernel);
      llmrt::cuda::LaunchGeometry geometry;
      geometry.block[0] = info.block_x();
      geometry.grid[0] = info.grid_x();
      if (info.grid_scaled_axis() == 1)
        geometry.grid[1] = (tokens + info.grid_rows_per_block() - 1) / info.grid_rows_per_block();
      ASSERT_TRUE(device.Launch(kernel, geometry, params).ok()) << info.name();
      std::vector<float> out(tokens * c.n);
      ASSERT_TRUE(device.CopyToHost(out.data(), params.output[0], out.size() * 4).ok());
      double worst = 0;
      for (int t = 0; t < tokens; ++t)
        for (int64_t row = 0; row < c.n; ++row) {
          double expected = c.bias ? bias[row] : 0.0, magnitude = 0;
          for (int64_t col = 0; col < c.k; ++col) {
            const double input = x[t * c.k + (c.permuted ? m.permutation[col] : col)];
            expected += m.dequantized[row * c.k + col] * input;
            magnitude += std::fabs(m.dequantized[row * c.k + col] * input);
          }
          const double error = std::fabs(out[t * c.n + row] - expected) / (magnitude + 1e-30);
          worst = std::isnan(error) ? INFINITY : std::max(worst, error);
        }
      EXPECT_LE(worst, 2e-5) << info.name();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Quant, QuantizedMatmulTest,
    ::testing::Values(QuantCase{plan::I8, false, 64, 40, 32, false, false},
                      // Per-channel int8 over K = 172 (stories260K's down_proj): one code per lane.
                      QuantCase{plan::I8, false, 172, 24, 172, false, true},
                      // I4 K = 96 and 128: one partial LANE_CHUNKS chunk (3 and 4 runs).
                      QuantCase{plan::I4, false, 96, 40, 32, false, false},
                      QuantCase{plan::I4, true, 128, 36, 64, true, true},
                      // K = 608: 2 full chunks + one of 3 runs. K = 1120: 35 runs, so lanes
                      // 0..2 take a second run (runs 32..34, the partial chunk).
                      QuantCase{plan::I4, false, 608, 24, 32, false, false},
                      QuantCase{plan::I4, true, 1120, 12, 32, true, true},
                      // Groups of 128 (no fixture has a 128-multiple input width) and int8 g32.
                      QuantCase{plan::I4, false, 256, 24, 128, false, false},
                      QuantCase{plan::I4, true, 256, 24, 128, false, true},
                      QuantCase{plan::I8, false, 256, 24, 128, false, false},
                      QuantCase{plan::I8, false, 96, 24, 32, true, true}),
    [](const ::testing::TestParamInfo<QuantCase> &info) {
      const QuantCase &c = info.param;
      return absl::StrCat(c.dtype == plan::I8 ? "i8" : "i4", c.asymmetric ? "_asym" : "_sym", "_g",
                          c.group, "_k", c.k, c.permuted ? "_perm" : "", c.bias ? "_bias" : "");
    });

// The kernels read I4 codes in LANE_CHUNKS and I8 codes in ROW_MAJOR; any other layout (e.g. a
// plan written before LANE_CHUNKS, with I4 runs contiguous) would decode to wrong values.
TEST(QuantizedMatmulTest, AWeightInTheWrongLayoutIsRefused) {
  struct Wrong {
    plan::DType dtype;
    plan::Tensor::Layout layout;
    const char *message;
  };
  for (const Wrong &wrong : {Wrong{plan::I4, plan::Tensor::ROW_MAJOR,
                                   "tensor w is I4 in layout ROW_MAJOR, expected LANE_CHUNKS"},
                             Wrong{plan::I8, plan::Tensor::LANE_CHUNKS,
                                   "tensor w is I8 in layout LANE_CHUNKS, expected ROW_MAJOR"}}) {
    plan::PlanMeta meta = matmulMeta(QuantCase{wrong.dtype, false, 96, 40, 32, false, false});
    meta.mutable_tensors(0)->set_layout(wrong.layout);
    auto emission = emitCuda(meta);
    ASSERT_FALSE(emission.ok());
    EXPECT_NE(emission.status().message().find(wrong.message), std::string::npos)
        << emission.status();
  }
}

TEST(QuantizedMatmulTest, AContractViolationNamesTheTensor) {
  QuantCase c{plan::I4, false, 96, 40, 48, false, false}; // I4 groups must be multiples of 32
  auto emission = emitCuda(matmulMeta(c));
  ASSERT_FALSE(emission.ok());
  EXPECT_NE(emission.status().message().find("tensor w: quantization.group_size 48"),
            std::string::npos)
      << emission.status();
}

// The prefilter on rows built to be hard: many equal values straddling the k-th place, -inf,
// +inf, negative zero, a vocabulary that is not a multiple of the block size.
TEST(LogitsTopKKernelTest, TiesInfinitiesAndOddVocabularies) {
  constexpr int64_t kVocab = 1000, kHidden = 8;
  plan::PlanMeta meta;
  plan::Program *program = meta.mutable_program();
  plan::Value *x = program->add_values();
  x->set_kind(plan::Value::ACTIVATION);
  x->set_width(kHidden);
  program->set_arena_bytes_per_token(kHidden * sizeof(float));
  plan::Value *logits = program->add_values();
  logits->set_kind(plan::Value::LOGITS);
  logits->set_width(kVocab);
  plan::Tensor *head = meta.add_tensors();
  head->set_name("lm_head");
  head->set_dtype(plan::F32);
  head->add_shape(kVocab);
  head->add_shape(kHidden);
  plan::Op *op = program->add_ops();
  op->set_kind(plan::LOGITS);
  op->add_inputs(0);
  op->add_outputs(1);
  op->add_weights(0);
  auto emission = emitCuda(meta);
  ASSERT_TRUE(emission.ok()) << emission.status();
  ASSERT_EQ(emission->opKernels[0].size(), 2u);
  const int32_t kernel = emission->opKernels[0][1];
  auto module = EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  ASSERT_TRUE(module.ok()) << module.status();
  const plan::KernelTable table = emission->kernelTable("cuda:emulated");
  EmulatedDevice device(*module, table);
  constexpr int kTopK = 64, kRows = 4;
  std::mt19937 random(5);
  std::vector<float> rows(kRows * kVocab);
  for (int r = 0; r < kRows; ++r) {
    float *row = rows.data() + r * kVocab;
    for (int64_t i = 0; i < kVocab; ++i)
      row[i] = std::uniform_real_distribution<float>(-5, 5)(random);
    if (r == 1) // 100 copies of one value across the cut, the rest below
      for (int64_t i = 0; i < kVocab; ++i)
        row[i] = i % 10 == 3 ? 7.0f : std::min(row[i], 6.0f);
    if (r == 2) { // mostly -inf (so -inf ties fill the last places), +inf, signed zeros
      for (int64_t i = 0; i < kVocab; ++i)
        row[i] = i % 20 ? -INFINITY : row[i];
      row[17] = INFINITY;
      row[500] = -0.0f;
      row[501] = 0.0f;
    }
    if (r == 3) // every value equal: the lowest 64 ids
      std::fill(row, row + kVocab, -1.5f);
  }
  LlmcKernelParams params = {};
  params.output[0] = upload(device, rows);
  params.output[1] = upload(device, std::vector<float>(kRows * kTopK));
  params.output[2] = upload(device, std::vector<int32_t>(kRows * kTopK));
  params.num_rows = kRows;
  llmrt::cuda::LaunchGeometry geometry;
  geometry.grid[0] = kRows;
  geometry.block[0] = table.kernels(kernel).block_x();
  ASSERT_TRUE(device.Launch(kernel, geometry, params).ok());
  std::vector<float> values(kRows * kTopK);
  std::vector<int32_t> ids(kRows * kTopK);
  ASSERT_TRUE(device.CopyToHost(values.data(), params.output[1], values.size() * 4).ok());
  ASSERT_TRUE(device.CopyToHost(ids.data(), params.output[2], ids.size() * 4).ok());
  for (int r = 0; r < kRows; ++r) {
    const float *row = rows.data() + r * kVocab;
    std::vector<int32_t> order(kVocab);
    for (int32_t i = 0; i < kVocab; ++i)
      order[i] = i;
    // -0.0 and 0.0 are ordered by their bits (the kernel's keys): -0.0 below 0.0.
    auto key = [&](int32_t i) {
      return row[i] == 0.0f ? (std::signbit(row[i]) ? -1e-45f : 0.0f) : row[i];
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return key(a) > key(b); });
    for (int j = 0; j < kTopK; ++j) {
      ASSERT_EQ(ids[r * kTopK + j], order[j]) << "row " << r << " rank " << j;
      ASSERT_EQ(std::memcmp(&values[r * kTopK + j], &row[order[j]], 4), 0) << "row " << r;
    }
  }
}

// --- Expert matmuls ------------------------------------------------------------------------

// E2M1 from plan.proto's text: bit 3 the sign, bits 2-1 the exponent, bit 0 the mantissa;
// exponent 0 is subnormal (m * 0.5), else (1 + m / 2) * 2^(exponent - 1).
double e2m1(int code) {
  const int exponent = (code >> 1) & 3, mantissa = code & 1;
  const double magnitude =
      exponent == 0 ? 0.5 * mantissa : (1.0 + 0.5 * mantissa) * std::ldexp(1.0, exponent - 1);
  return code & 8 ? -magnitude : magnitude;
}

// An expert stack as plan.proto stores it ([E N, K] rows), and its values by the contract.
struct ExpertStack {
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales; // f16 bits (2 bytes each) or E8M0 bytes, [E N, K / group]
  std::vector<uint8_t> zeros;
  std::vector<double> dequantized; // [E N, K]
};

// Codes random; scales random (F16 0.002..0.05; E8M0 `scaleByte(row, group)`).
ExpertStack makeStack(const ExpertQuantCase &c, std::mt19937 &random,
                      const std::function<uint8_t(int64_t, int64_t)> &scaleByte) {
  ExpertStack m;
  const int64_t rows = c.experts * c.n, groups = c.k / c.group;
  const bool fp4 = c.dtype == plan::FP4_E2M1;
  std::vector<int> code(rows * c.k);
  for (int &value : code)
    value = c.dtype == plan::I8 ? static_cast<int>(random() % 255) - 127
                                : static_cast<int>(random() % 16);
  std::vector<double> scale(rows * groups);
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = row * groups + g;
      if (fp4) {
        m.scales.push_back(scaleByte(row, g));
        scale[i] = std::ldexp(1.0, m.scales.back() - 127);
      } else {
        const uint16_t bits =
            plan::F32ToF16(std::uniform_real_distribution<float>(0.002f, 0.05f)(random));
        m.scales.push_back(bits & 255);
        m.scales.push_back(bits >> 8);
        scale[i] = plan::F16ToF32(bits);
      }
      m.zeros.push_back(static_cast<uint8_t>(random() % 16));
    }
  if (c.dtype == plan::I8) {
    for (int value : code)
      m.codes.push_back(static_cast<uint8_t>(static_cast<int8_t>(value)));
  } else {
    m.codes.resize(rows * c.k / 2);
    std::vector<uint8_t> row(c.k);
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(code.begin() + r * c.k, code.begin() + (r + 1) * c.k, row.begin());
      plan::PackInt4Row(row.data(), c.k, m.codes.data() + r * c.k / 2);
    }
  }
  for (int64_t row = 0; row < rows; ++row)
    for (int64_t col = 0; col < c.k; ++col) {
      const int64_t g = row * groups + col / c.group;
      const int value = code[row * c.k + col];
      double w;
      if (fp4)
        w = e2m1(value);
      else if (c.dtype == plan::I8)
        w = value;
      else
        w = value - (c.asymmetric ? m.zeros[g] : 8);
      m.dequantized.push_back(w * scale[g]);
    }
  return m;
}

// Runs the expert op's kernels (group, then `kernel`: 1 the GEMV, 2 the GEMM) over `ids`
// [T, topK] and `x`; returns the output [T, topK N].
std::vector<float> runExpertKernels(const ExpertQuantCase &c, const ExpertStack &m,
                                    const std::vector<int32_t> &ids, const std::vector<float> &x,
                                    int tokens, int kernel) {
  auto emission = emitCuda(expertMeta(c));
  EXPECT_TRUE(emission.ok()) << emission.status();
  if (!emission.ok())
    return {};
  EXPECT_EQ(emission->opKernels[1].size(), 3u);
  auto module = EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok())
    return {};
  const plan::KernelTable table = emission->kernelTable("cuda:emulated");
  EmulatedDevice device(*module, table);
  LlmcKernelParams params = {};
  params.input[0] = upload(device, x);
  params.input[1] = upload(device, ids);
  params.weight = upload(device, m.codes);
  params.scales = upload(device, m.scales);
  if (c.asymmetric)
    params.zero_points = upload(device, m.zeros);
  params.output[0] = upload(device, std::vector<float>(tokens * c.topK * c.n, NAN));
  params.num_tokens = tokens;
  int64_t scratch = 0;
  for (const plan::KernelTable::Kernel &info : table.kernels())
    scratch =
        std::max(scratch, info.scratch_floats_per_token() * tokens + info.scratch_floats_fixed());
  params.scratch = upload(device, std::vector<float>(scratch, NAN));
  for (int32_t index : {emission->opKernels[1][0], emission->opKernels[1][kernel]}) {
    const plan::KernelTable::Kernel &info = table.kernels(index);
    llmrt::cuda::LaunchGeometry geometry;
    geometry.block[0] = info.block_x();
    geometry.grid[0] = info.grid_x();
    if (info.grid_scaled_axis() == 1)
      geometry.grid[1] = (tokens * info.grid_row_multiplier() + info.grid_rows_per_block() - 1) /
                             info.grid_rows_per_block() +
                         info.grid_extra_blocks();
    EXPECT_TRUE(device.Launch(index, geometry, params).ok()) << info.name();
  }
  std::vector<float> out(tokens * c.topK * c.n);
  EXPECT_TRUE(device.CopyToHost(out.data(), params.output[0], out.size() * 4).ok());
  return out;
}

class ExpertQuantizedMatmulTest : public ::testing::TestWithParam<ExpertQuantCase> {};

// Both expert kernels on 3 tokens and 70 (more routed rows than a 64-row tile) with skewed
// routing (~80% of the tokens put the same expert first: several tiles of one expert), each
// output within 2e-5 of sum |w x| of the contract's value, as QuantizedMatmulTest.
TEST_P(ExpertQuantizedMatmulTest, GemvAndGemmMatchTheContractsDequantization) {
  const ExpertQuantCase &c = GetParam();
  std::mt19937 random(13);
  const ExpertStack m = makeStack(c, random, [&](int64_t, int64_t) {
    return static_cast<uint8_t>(118 + random() % 7); // |w| <~ 0.05, as a checkpoint's
  });
  const int hot = c.experts / 3;
  for (int tokens : {3, 70}) {
    std::vector<int32_t> ids;
    for (int t = 0; t < tokens; ++t) {
      std::vector<int32_t> chosen;
      if (random() % 5 != 0)
        chosen.push_back(hot);
      while (static_cast<int>(chosen.size()) < c.topK) {
        const int32_t e = static_cast<int32_t>(random() % c.experts);
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end())
          chosen.push_back(e);
      }
      ids.insert(ids.end(), chosen.begin(), chosen.end());
    }
    const int64_t width = c.sliced ? c.topK * c.k : c.k;
    std::vector<float> x(tokens * width);
    for (float &value : x)
      value = std::uniform_real_distribution<float>(-2, 2)(random);
    for (int kernel : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(tokens, " tokens, ", kernel == 1 ? "gemv" : "gemm"));
      const std::vector<float> out = runExpertKernels(c, m, ids, x, tokens, kernel);
      ASSERT_EQ(out.size(), static_cast<size_t>(tokens * c.topK * c.n));
      double worst = 0;
      for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < c.topK; ++j) {
          const int64_t e = ids[t * c.topK + j];
          const float *input = x.data() + t * width + (c.sliced ? j * c.k : 0);
          for (int64_t n = 0; n < c.n; ++n) {
            double expected = 0, magnitude = 0;
            for (int64_t col = 0; col < c.k; ++col) {
              const double product = m.dequantized[(e * c.n + n) * c.k + col] * input[col];
              expected += product;
              magnitude += std::fabs(product);
            }
            const double error =
                std::fabs(out[(t * c.topK + j) * c.n + n] - expected) / (magnitude + 1e-30);
            worst = std::isnan(error) ? INFINITY : std::max(worst, error);
          }
        }
      EXPECT_LE(worst, 2e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Quant, ExpertQuantizedMatmulTest,
    ::testing::Values(ExpertQuantCase{plan::I8, false, 32, 8, 2, 64, 40, false},
                      ExpertQuantCase{plan::I8, false, 32, 64, 8, 96, 24, true},
                      ExpertQuantCase{plan::I4, false, 32, 8, 8, 96, 36, true},
                      ExpertQuantCase{plan::I4, false, 32, 64, 2, 608, 16, false},
                      ExpertQuantCase{plan::I4, true, 64, 8, 2, 128, 24, true},
                      ExpertQuantCase{plan::I4, true, 64, 64, 8, 256, 16, false},
                      ExpertQuantCase{plan::FP4_E2M1, false, 32, 8, 2, 608, 24, false},
                      ExpertQuantCase{plan::FP4_E2M1, false, 32, 64, 8, 64, 40, true}),
    [](const ::testing::TestParamInfo<ExpertQuantCase> &info) {
      const ExpertQuantCase &c = info.param;
      return absl::StrCat(c.dtype == plan::I8   ? "i8"
                          : c.dtype == plan::I4 ? "i4"
                                                : "mxfp4",
                          c.asymmetric ? "_asym" : "", "_g", c.group, "_e", c.experts, "_top",
                          c.topK, "_k", c.k, "_n", c.n, c.sliced ? "_sliced" : "");
    });

// Every E8M0 byte 0..254 scales some block (row r of the stack: byte min(r, 254)), read through
// one-hot activations so each output is one E2M1 value times 2^(b - 127), exact in f32 (2^-127
// and 2^-128 are denormals; 6 * 2^127 overflows to infinity, as the double rounded to f32 does):
// the kernels' tables must give the exact power of two for every byte, in both kernels.
TEST(ExpertQuantizedMatmulTest, EveryE8m0ScaleIsExact) {
  const ExpertQuantCase c{plan::FP4_E2M1, false, 32, 8, 2, 64, 32, false};
  std::mt19937 random(17);
  const ExpertStack m = makeStack(c, random, [](int64_t row, int64_t) {
    return static_cast<uint8_t>(std::min<int64_t>(row, 254));
  });
  for (int tokens : {4, 70}) {
    std::vector<int32_t> ids;
    std::vector<float> x(tokens * c.k, 0.0f);
    for (int t = 0; t < tokens; ++t) {
      ids.push_back((2 * t) % c.experts);
      ids.push_back((2 * t + 1) % c.experts);
      x[t * c.k + (t * 7) % c.k] = 1.0f;
    }
    for (int kernel : {1, 2}) {
      SCOPED_TRACE(absl::StrCat(tokens, " tokens, ", kernel == 1 ? "gemv" : "gemm"));
      const std::vector<float> out = runExpertKernels(c, m, ids, x, tokens, kernel);
      ASSERT_EQ(out.size(), static_cast<size_t>(tokens * c.topK * c.n));
      std::set<int64_t> bytes;
      for (int t = 0; t < tokens; ++t)
        for (int j = 0; j < c.topK; ++j)
          for (int64_t n = 0; n < c.n; ++n) {
            const int64_t row = ids[t * c.topK + j] * c.n + n;
            const float expected = static_cast<float>(m.dequantized[row * c.k + (t * 7) % c.k]);
            const float got = out[(t * c.topK + j) * c.n + n];
            ASSERT_TRUE(got == expected || (got == 0 && expected == 0))
                << "row " << row << " (E8M0 byte " << std::min<int64_t>(row, 254) << "): " << got
                << ", expected " << expected;
            bytes.insert(std::min<int64_t>(row, 254));
          }
      EXPECT_EQ(bytes.size(), 255u);
    }
  }
}

// The router kernel chooses what the CPU backend chooses on logits with ties (every expert
// equal, pairs and runs of equal values, +0 and -0), huge and tiny magnitudes: ids read out
// through an EXPERT_MATMUL whose expert e adds bias e to zero weights, so a slot's output is
// its id exactly; the weights within 1e-6.
TEST(RouterKernelTest, TiesChooseWhatTheCpuBackendChooses) {
  constexpr int32_t kExperts = 40, kTopK = 6;
  std::vector<std::vector<float>> rows;
  rows.push_back(std::vector<float>(kExperts, 0.25f)); // all tied: experts 0..5
  std::vector<float> row(kExperts);
  for (int32_t e = 0; e < kExperts; ++e)
    row[e] = static_cast<float>(e % 4); // runs of 10 equal values at the top
  rows.push_back(row);
  for (int32_t e = 0; e < kExperts; ++e)
    row[e] = e % 2 ? -0.0f : 0.0f; // signed zeros compare equal
  row[33] = 1e-30f;
  rows.push_back(row);
  for (int32_t e = 0; e < kExperts; ++e)
    row[e] = e % 7 == 3 ? 3e38f : -3e38f; // the largest finite floats, tied
  rows.push_back(row);
  std::mt19937 random(3);
  for (int r = 0; r < 8; ++r) { // random rows with a few duplicated values
    for (float &value : row)
      value = static_cast<float>(static_cast<int>(random() % 9) - 4) * 0.5f;
    rows.push_back(row);
  }
  for (auto [scoring, normalize] : {std::pair{plan::RouterAttrs::SOFTMAX_TOPK, true},
                                    std::pair{plan::RouterAttrs::SOFTMAX_TOPK, false},
                                    std::pair{plan::RouterAttrs::TOPK_SOFTMAX, false}}) {
    for (bool readIds : {true, false}) {
      SCOPED_TRACE(absl::StrCat(plan::RouterAttrs::Scoring_Name(scoring),
                                normalize ? " normalized" : "", readIds ? " ids" : " weights"));
      llmrt::testing::OpProgram program;
      const int32_t logits = program.InputRows(rows);
      const auto [ids, weights] = program.Router(logits, kExperts, kTopK, scoring, normalize);
      if (readIds) {
        std::vector<float> bias(kExperts);
        for (int32_t e = 0; e < kExperts; ++e)
          bias[e] = static_cast<float>(e);
        const int32_t slots = program.Activation(kTopK);
        plan::ExpertAttrs *expert =
            program
                .AddOp(plan::EXPERT_MATMUL, {logits, ids}, {slots},
                       {program.Tensor(plan::F32, {kExperts, 1, kExperts},
                                       std::vector<float>(kExperts * kExperts, 0.0f)),
                        program.Tensor(plan::F32, {kExperts, 1}, bias)})
                ->mutable_expert();
        expert->set_num_experts(kExperts);
        expert->set_top_k(kTopK);
        program.ReadOut(slots);
      } else {
        program.ReadOut(weights);
      }
      const plan::PlanMeta &meta = program.meta();
      const int32_t tokens = static_cast<int32_t>(rows.size());
      llmrt::BackendOptions options;
      options.max_tokens_per_step = tokens;
      options.record_expert_load = readIds;
      auto cpu = llmrt::cpu::CreateCpuBackend(meta, program.Lookup(), options);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      auto emission = emitCuda(meta);
      ASSERT_TRUE(emission.ok()) << emission.status();
      auto module = EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
      ASSERT_TRUE(module.ok()) << module.status();
      const plan::KernelTable table = emission->kernelTable("cuda:emulated");
      auto emulated = llmrt::cuda::CreateKernelBackend(
          meta, table, program.Lookup(), options, std::make_unique<EmulatedDevice>(*module, table));
      ASSERT_TRUE(emulated.ok()) << emulated.status();
      llmrt::ExpertLoad load;
      const absl::Status before = (*emulated)->LastStepExpertLoad(load);
      EXPECT_EQ(before.code(), absl::StatusCode::kFailedPrecondition) << before;
      std::vector<int32_t> positions(tokens);
      for (int32_t t = 0; t < tokens; ++t)
        positions[t] = t;
      const std::vector<float> expected =
          llmrt::testing::RunSteps(**cpu, {tokens}, positions, kTopK);
      const std::vector<float> got =
          llmrt::testing::RunSteps(**emulated, {tokens}, positions, kTopK);
      for (int32_t t = 0; t < tokens; ++t)
        for (int j = 0; j < kTopK; ++j) {
          if (readIds)
            EXPECT_EQ(got[t * kTopK + j], expected[t * kTopK + j]) << "row " << t << " slot " << j;
          else
            EXPECT_NEAR(got[t * kTopK + j], expected[t * kTopK + j], 1e-6)
                << "row " << t << " slot " << j;
        }
      // Row 0 (all tied) takes experts 0..5 in order.
      for (int j = 0; j < kTopK && readIds; ++j)
        EXPECT_EQ(got[j], static_cast<float>(j));
      // The step's expert load: the CPU's counts (recorded only when asked for).
      const absl::Status after = (*emulated)->LastStepExpertLoad(load);
      if (!readIds) {
        EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
        continue;
      }
      ASSERT_TRUE(after.ok()) << after;
      llmrt::ExpertLoad cpuLoad;
      ASSERT_TRUE((*cpu)->LastStepExpertLoad(cpuLoad).ok());
      EXPECT_EQ(load.num_routers, 1);
      EXPECT_EQ(load.num_experts, kExperts);
      EXPECT_EQ(load.counts, cpuLoad.counts);
      int64_t total = 0;
      for (int32_t count : load.counts)
        total += count;
      EXPECT_EQ(total, int64_t{tokens} * kTopK);
    }
  }
}

} // namespace
} // namespace llmc::cuda
