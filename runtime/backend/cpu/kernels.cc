#include "runtime/backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "runtime/plan/dtype.h"

namespace llmrt::cpu {

const float* MatrixRow(const MatrixView& matrix, int64_t row, float* scratch) {
  const int64_t cols = matrix.cols;
  switch (matrix.dtype) {
    case plan::F16: {
      const uint16_t* source = reinterpret_cast<const uint16_t*>(matrix.data) + row * cols;
      for (int64_t col = 0; col < cols; ++col) scratch[col] = plan::F16ToF32(source[col]);
      return scratch;
    }
    case plan::BF16: {
      const uint16_t* source = reinterpret_cast<const uint16_t*>(matrix.data) + row * cols;
      for (int64_t col = 0; col < cols; ++col) scratch[col] = plan::Bf16ToF32(source[col]);
      return scratch;
    }
    default:
      return reinterpret_cast<const float*>(matrix.data) + row * cols;
  }
}

float Dot(const float* a, const float* b, int64_t size) {
  // 8 independent partial sums: breaks the add dependency chain and maps onto one 256-bit
  // register when the compiler vectorizes.
  float partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t index = 0;
  for (; index + 8 <= size; index += 8) {
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[index + lane] * b[index + lane];
  }
  float tail = 0.0f;
  for (; index < size; ++index) tail += a[index] * b[index];
  return ((partial[0] + partial[4]) + (partial[1] + partial[5])) +
         ((partial[2] + partial[6]) + (partial[3] + partial[7])) + tail;
}

void MatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
            const MatrixView& w, const float* bias, const MatMulOutput* outputs,
            int32_t num_outputs, float* scratch, int64_t scratch_stride) {
  const int64_t cols = w.cols;
  const int64_t num_tiles = (w.rows + kMatMulTileRows - 1) / kMatMulTileRows;
  pool.ParallelFor(num_tiles, [&](int64_t tile_begin, int64_t tile_end, int32_t thread) {
    float* thread_scratch = scratch + thread * scratch_stride;
    for (int64_t tile = tile_begin; tile < tile_end; ++tile) {
      const int64_t first = tile * kMatMulTileRows;
      const int64_t count = std::min(kMatMulTileRows, w.rows - first);
      const float* weight_rows[kMatMulTileRows];
      float* destinations[kMatMulTileRows];
      int64_t strides[kMatMulTileRows];
      for (int64_t i = 0; i < count; ++i) {
        const int64_t column = first + i;
        weight_rows[i] = MatrixRow(w, column, thread_scratch + i * cols);
        int32_t output = 0;
        while (output + 1 < num_outputs && column >= outputs[output + 1].begin) ++output;
        destinations[i] = outputs[output].data + (column - outputs[output].begin);
        strides[i] = outputs[output].width;
      }
      for (int64_t row = 0; row < num_rows; ++row) {
        const float* x_row = x + (input_rows ? input_rows[row] : row) * cols;
        for (int64_t i = 0; i < count; ++i) {
          float sum = Dot(x_row, weight_rows[i], cols);
          if (bias != nullptr) sum += bias[first + i];
          destinations[i][row * strides[i]] = sum;
        }
      }
    }
  });
}

void RmsNorm(const float* x, const float* gamma, float eps, int64_t num_rows, int64_t width,
             float* y) {
  for (int64_t row = 0; row < num_rows; ++row) {
    const float* x_row = x + row * width;
    float* y_row = y + row * width;
    // Double accumulation: closest to the exact mean, which torch's pairwise f32 sum is also
    // within an ulp or so of.
    double sum_of_squares = 0.0;
    for (int64_t i = 0; i < width; ++i) sum_of_squares += static_cast<double>(x_row[i]) * x_row[i];
    const float mean = static_cast<float>(sum_of_squares / static_cast<double>(width));
    const float inverse_rms = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < width; ++i) y_row[i] = gamma[i] * (x_row[i] * inverse_rms);
  }
}

void Rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t num_rows, int32_t num_heads,
          int32_t head_dim, const float* inv_freq, float* scratch) {
  const int32_t half = head_dim / 2;
  pool.ParallelFor(num_rows, [&](int64_t row_begin, int64_t row_end, int32_t thread) {
    float* cosines = scratch + static_cast<int64_t>(thread) * head_dim;
    float* sines = cosines + half;
    for (int64_t row = row_begin; row < row_end; ++row) {
      // transformers: freqs = inv_freq * position in f32, then cos/sin in f32.
      const float position = static_cast<float>(positions[row]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = position * inv_freq[i];
        cosines[i] = std::cos(angle);
        sines[i] = std::sin(angle);
      }
      float* x_row = x + row * static_cast<int64_t>(num_heads) * head_dim;
      for (int32_t head = 0; head < num_heads; ++head) {
        float* x_head = x_row + static_cast<int64_t>(head) * head_dim;
        for (int32_t i = 0; i < half; ++i) {
          const float first = x_head[i];
          const float second = x_head[i + half];
          x_head[i] = first * cosines[i] - second * sines[i];
          x_head[i + half] = second * cosines[i] + first * sines[i];
        }
      }
    }
  });
}

void RopeInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim, float* inv_freq) {
  const int32_t half = head_dim / 2;
  const float theta = static_cast<float>(rope.theta());
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (rope.scaling() == plan::RopeConfig::LINEAR) {
    const float factor = static_cast<float>(rope.factor());
    for (int32_t i = 0; i < half; ++i) inv_freq[i] /= factor;
  } else if (rope.scaling() == plan::RopeConfig::LLAMA3) {
    // transformers' _compute_llama3_parameters, elementwise, in f32.
    const float factor = static_cast<float>(rope.factor());
    const float low_freq_factor = static_cast<float>(rope.low_freq_factor());
    const float high_freq_factor = static_cast<float>(rope.high_freq_factor());
    const float old_context = static_cast<float>(rope.original_max_position_embeddings());
    const float low_freq_wavelength = old_context / low_freq_factor;
    const float high_freq_wavelength = old_context / high_freq_factor;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (int32_t i = 0; i < half; ++i) {
      const float wavelength = two_pi / inv_freq[i];
      float scaled = wavelength > low_freq_wavelength ? inv_freq[i] / factor : inv_freq[i];
      const bool medium =
          !(wavelength < high_freq_wavelength) && !(wavelength > low_freq_wavelength);
      if (medium) {
        const float smooth =
            (old_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      inv_freq[i] = scaled;
    }
  }
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace llmrt::cpu
