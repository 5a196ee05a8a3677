//===- QuantizedKernelTest.cpp - int8/int4 GEMV and GEMM vs the contract --===//
//
// The quantized matmul kernels codegen/cuda emits (gemvQuant for decode, gemmMmaQuant for
// prefill), executed under emulation on small shapes and compared with a scalar reference
// written here from plan.proto's Quantization comment (code -> value mapping, f16 scales per
// group, U8 zero points, input permutation; I4 codes packed in LANE_CHUNKS by
// runtime/plan/int4_layout.h, the compiler's packer), not from the kernels.
// And the logits top-k prefilter on rows with ties and infinities.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "codegen/cuda/emulation/QuantizedMatmulMeta.h"
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

} // namespace
} // namespace llmc::cuda
