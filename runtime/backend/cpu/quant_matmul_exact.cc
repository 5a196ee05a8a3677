#include "runtime/backend/cpu/quant_matmul_exact.h"

#include <algorithm>

#include "runtime/backend/cpu/quant_matmul.h"

namespace llmrt::cpu {
namespace {

// Independent partial sums of the dot product: lets the compiler keep one vector register of
// accumulators without -ffast-math reassociation, and halves the rounding error's growth.
constexpr int kLanes = 8;

float Dot(const float* a, const float* b, int64_t count) {
  float partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int lane = 0; lane < kLanes; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  for (; i < count; ++i) partial[i % kLanes] += a[i] * b[i];
  float sum = 0.0f;
  for (float value : partial) sum += value;
  return sum;
}

}  // namespace

int64_t QuantizedMatMulExactScratchBytes(int32_t num_threads, int64_t cols) {
  return static_cast<int64_t>(std::max(num_threads, 1)) * 2 * cols *
         static_cast<int64_t>(sizeof(float));
}

void QuantizedMatMulExact(ThreadPool& pool, const float* x, int64_t num_rows,
                          const int32_t* input_rows, const MatrixView& w, const float* bias,
                          const MatMulOutput* outputs, int32_t num_outputs, void* scratch) {
  const int64_t cols = w.cols;
  float* const scratch_rows = static_cast<float*>(scratch);
  pool.ParallelFor(w.rows, [&](int64_t begin, int64_t end, int32_t thread) {
    float* stored = scratch_rows + static_cast<int64_t>(thread) * 2 * cols;
    float* original = stored + cols;
    // Outputs are sorted by begin and cover [0, w.rows): walk them along with the rows.
    int32_t output = 0;
    for (int64_t n = begin; n < end; ++n) {
      QuantizedRowToF32(w, n, stored);
      const float* weights = stored;
      if (w.input_permutation != nullptr) {
        for (int64_t c = 0; c < cols; ++c) original[w.input_permutation[c]] = stored[c];
        weights = original;
      }
      while (output + 1 < num_outputs && n >= outputs[output].begin + outputs[output].width) {
        ++output;
      }
      const MatMulOutput& destination = outputs[output];
      const float offset = bias != nullptr ? bias[n] : 0.0f;
      for (int64_t r = 0; r < num_rows; ++r) {
        const int64_t source = input_rows != nullptr ? input_rows[r] : r;
        destination.data[r * destination.width + (n - destination.begin)] =
            Dot(weights, x + source * cols, cols) + offset;
      }
    }
  });
}

}  // namespace llmrt::cpu
