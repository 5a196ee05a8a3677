// Test support for the quantized kernels: a scalar reference quantizer written from the
// Quantization comment of plan.proto (not from the kernels), producing codes in the packed
// plan layout, F16 scales, U8 zero points and the dequantized f32 weights the codes stand for.
//
// Header-only; linked by tests and benchmarks, never by the runtime.
#ifndef LLMRT_BACKEND_CPU_QUANT_TEST_UTIL_H_
#define LLMRT_BACKEND_CPU_QUANT_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/cpu/amx_tiles.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/quant_gemm.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"

namespace llmrt::cpu::testing {

struct QuantizedMatrix {
  plan::DType dtype = plan::I8;
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t group_size = 0;
  std::vector<uint8_t> codes;        // plan layout (I4: LANE_CHUNKS)
  std::vector<uint16_t> scales;      // F16 bits [rows, cols / group_size]
  std::vector<uint8_t> zero_points;  // I4 asymmetric only
  std::vector<int32_t> permutation;  // empty: none
  std::vector<float> dequantized;    // [rows, cols] in stored-column order
  // Signed integer weight (code - zero) per [row, stored column], for exact checks.
  std::vector<int32_t> centered;

  MatrixView View() const {
    MatrixView view{codes.data(), dtype, rows, cols, 0};
    view.group_size = group_size;
    view.scales = scales.data();
    view.zero_points = zero_points.empty() ? nullptr : zero_points.data();
    view.input_permutation = permutation.empty() ? nullptr : permutation.data();
    return view;
  }
};

// Quantizes `weights` [rows, cols] (original column order) by round-to-nearest. With a
// permutation, stored column c holds original column permutation[c]. force_scale > 0 replaces
// every group's scale (tests pick powers of two so that all f32 arithmetic is exact).
inline QuantizedMatrix QuantizeReference(const std::vector<float>& weights, int64_t rows,
                                         int64_t cols, int bits, bool asymmetric,
                                         int32_t group_size, std::vector<int32_t> permutation,
                                         float force_scale = 0.0f) {
  QuantizedMatrix q;
  q.dtype = bits == 4 ? plan::I4 : plan::I8;
  q.rows = rows;
  q.cols = cols;
  q.group_size = group_size;
  q.permutation = std::move(permutation);
  const int64_t groups = cols / group_size;
  q.scales.resize(rows * groups);
  if (asymmetric) q.zero_points.resize(rows * groups);
  q.dequantized.resize(rows * cols);
  q.centered.resize(rows * cols);
  std::vector<int> codes(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      auto stored = [&](int64_t c) {
        const int64_t source = q.permutation.empty() ? c : q.permutation[c];
        return weights[r * cols + source];
      };
      float low = 0.0f, high = 0.0f, magnitude = 0.0f;
      for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c) {
        low = std::min(low, stored(c));
        high = std::max(high, stored(c));
        magnitude = std::max(magnitude, std::fabs(stored(c)));
      }
      float scale = bits == 8    ? magnitude / 127.0f
                    : asymmetric ? (high - low) / 15.0f
                                 : magnitude / 7.0f;
      if (force_scale > 0.0f) scale = force_scale;
      if (scale == 0.0f) scale = 1.0f;
      const uint16_t scale_bits = plan::F32ToF16(scale);
      const float stored_scale = plan::F16ToF32(scale_bits);
      q.scales[r * groups + g] = scale_bits;
      int zero = bits == 4 ? 8 : 0;
      if (asymmetric) {
        zero = static_cast<int>(std::clamp(std::nearbyint(-low / stored_scale), 0.0f, 15.0f));
        q.zero_points[r * groups + g] = static_cast<uint8_t>(zero);
      }
      for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c) {
        const float level = std::nearbyint(stored(c) / stored_scale);
        const int code = bits == 8 ? static_cast<int>(std::clamp(level, -127.0f, 127.0f))
                                   : static_cast<int>(std::clamp(level + zero, 0.0f, 15.0f));
        codes[r * cols + c] = code;
        q.centered[r * cols + c] = code - zero;
        q.dequantized[r * cols + c] = static_cast<float>(code - zero) * stored_scale;
      }
    }
  }
  if (bits == 8) {
    q.codes.resize(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) q.codes[i] = static_cast<uint8_t>(codes[i]);
  } else {
    q.codes.resize(rows * cols / 2);
    std::vector<uint8_t> row_codes(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) row_codes[c] = static_cast<uint8_t>(codes[r * cols + c]);
      plan::PackInt4Row(row_codes.data(), cols, q.codes.data() + r * cols / 2);
    }
  }
  return q;
}

// The exact result of one row of an M-token quantized matmul, in double, from the matrix's
// integer weights and the activation codes and scales of QuantizeActivationRow: per block the
// exact integer sum times the f32 product of the two scales (as the kernels form it);
// `magnitude` receives sum |term| for a relative tolerance.
inline double ReferenceDot(const QuantizedMatrix& q, int64_t row, const std::vector<int8_t>& codes,
                           const std::vector<float>& scales, double* magnitude) {
  const int64_t groups = q.cols / q.group_size;
  double sum = 0;
  *magnitude = 0;
  for (int64_t block = 0; block * 32 < q.cols; ++block) {
    int64_t isum = 0;
    for (int64_t c = block * 32; c < std::min<int64_t>(q.cols, block * 32 + 32); ++c) {
      isum += static_cast<int64_t>(q.centered[row * q.cols + c]) * codes[c];
    }
    const float weight_scale = plan::F16ToF32(q.scales[row * groups + block * 32 / q.group_size]);
    const double term = static_cast<double>(weight_scale * scales[block]) * isum;
    sum += term;
    *magnitude += std::fabs(term);
  }
  return sum;
}

// While it lives, QuantizedGemm takes its AMX path (quant_gemm_amx.cc) from kAmxMinTokens rows on:
// on the CPU's tiles where the active tier is avx3_amx, elsewhere on tiles emulated in C++. The
// path reproduces the AVX512-VNNI GEMVs, so it exists on AVX3 tiers with VNNI alone:
// SkipReason() says why not where it does not. Ran() tells whether emulated tiles did work
// meanwhile (on hardware tiles: whether the tier is avx3_amx), so that a test shows the path ran.
class AmxGemmScope {
 public:
  AmxGemmScope() {
    const bool available = SkipReason().empty();  // first: it selects the forced tier
    hardware_ = ActiveCpuExtensions().amx;
    products_before_ = EmulatedAmxTileProducts();
    emulating_before_ = SetAmxTileEmulationForTesting(!hardware_ && available);
  }
  ~AmxGemmScope() { SetAmxTileEmulationForTesting(emulating_before_); }
  AmxGemmScope(const AmxGemmScope&) = delete;
  AmxGemmScope& operator=(const AmxGemmScope&) = delete;

  static std::string SkipReason() {
    // The tier LLMRT_CPU_TARGET forces, as the backend would select it (its errors are the
    // backend's to report).
    (void)SelectCpuTargetFromEnvironment();
    const std::string target = ActiveCpuTarget();
    if (target.rfind("AVX3", 0) != 0 || !ActiveCpuExtensions().avx512_vnni) {
      return "the AMX GEMM reproduces the AVX512-VNNI GEMVs, and target " + target +
             " has no AVX512-VNNI";
    }
    return "";
  }
  bool Ran() const { return hardware_ || EmulatedAmxTileProducts() > products_before_; }

 private:
  bool hardware_ = false;
  bool emulating_before_ = false;
  int64_t products_before_ = 0;
};

}  // namespace llmrt::cpu::testing

#endif  // LLMRT_BACKEND_CPU_QUANT_TEST_UTIL_H_
