#include "compiler/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/quant/gptq.h"
#include "compiler/quant/mxfp4.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/threading/thread_pool.h"

namespace llmc::quant {
namespace {

// I4 packs runs of 32 columns; grouped I8 uses the same blocking (plan.proto).
constexpr int64_t kColumnBlock = 32;
// Range shrink factors tried per group: 1.0 down to 0.8 in steps of 0.025 (9 candidates).
// Below 0.8 the clipped outliers cost more than the finer steps gain on every model we tried.
constexpr int kClipSteps = 9;
constexpr float kClipStep = 0.025f;

float RoundTripF16(float value) { return llmrt::plan::F16ToF32(llmrt::plan::F32ToF16(value)); }

struct GroupChoice {
  float scale = 0.0f;  // already rounded to f16
  int zero = 0;        // the code that means 0 (8 for symmetric I4, 0 for I8)
};

// Code range of a format: I8 [-127, 127] (symmetric: -128 unused so that -code never
// overflows), I4 [0, 15].
int MinCode(const QuantFormat& format) { return format.bits == 8 ? -127 : 0; }
int MaxCode(const QuantFormat& format) { return format.bits == 8 ? 127 : 15; }

// Round half to even of a float with |value| < 2^22, as std::nearbyint in the default rounding
// mode, without the libm call (GCC does not inline nearbyint below SSE4.1, and that call was
// most of the compile time: 10 candidates x every weight): adding 1.5 * 2^23 leaves no
// fraction bits, so the FPU's own round-to-nearest-even does the rounding.
constexpr float kRoundingMagic = 12582912.0f;  // 1.5 * 2^23
inline float RoundToNearestEven(float value) { return (value + kRoundingMagic) - kRoundingMagic; }

// std::clamp without its branches (ternaries GCC turns into minps / maxps), so the error loop
// vectorises; identical results for non-NaN input.
inline float Clamp(float value, float low, float high) {
  const float raised = value < low ? low : value;
  return raised > high ? high : raised;
}

// value / scale in levels, as value * (1 / scale): a multiply instead of a divide for each of the
// ~10 candidates x every weight (the search's cost; the two differ only in the last bit, i.e. in
// which way a value exactly between two levels rounds, and the codes use the same product).
// Clamped to a range where RoundToNearestEven is exact; every code range is far inside it.
constexpr float kLevelLimit = 4194304.0f;  // 2^22
inline float Levels(float value, float inverse_scale) {
  return Clamp(value * inverse_scale, -kLevelLimit, kLevelLimit);
}

int QuantizeValue(float value, const GroupChoice& choice, const QuantFormat& format) {
  if (choice.scale == 0.0f) return choice.zero;
  const float level =
      RoundToNearestEven(Levels(value, 1.0f / choice.scale)) + static_cast<float>(choice.zero);
  return static_cast<int>(
      std::clamp(level, static_cast<float>(MinCode(format)), static_cast<float>(MaxCode(format))));
}

// Independent partial sums of a group's squared error: the loop keeps them in one SIMD register
// (no -ffast-math reassociation needed); groups are 32..cols values, so f32 partials of
// at most cols / 8 terms lose nothing that matters for choosing between candidates.
constexpr int kErrorLanes = 8;

double GroupError(const float* values, int64_t count, const GroupChoice& choice,
                  const QuantFormat& format) {
  const float zero = static_cast<float>(choice.zero);
  const float low = static_cast<float>(MinCode(format)) - zero;
  const float high = static_cast<float>(MaxCode(format)) - zero;
  float partial[kErrorLanes] = {};
  if (choice.scale == 0.0f) {
    for (int64_t i = 0; i < count; ++i) partial[i % kErrorLanes] += values[i] * values[i];
  } else {
    // The same arithmetic as QuantizeValue (level + zero, clamped, - zero) with the zero folded
    // into the clamp bounds: exact, since levels and zero points are small integers.
    int64_t i = 0;
    // GCC / Clang vector extensions: 8 floats, two SSE or NEON registers (the compiler's
    // auto-vectoriser leaves this loop scalar). Element-wise the same operations as below.
    using Floats = float __attribute__((vector_size(kErrorLanes * sizeof(float))));
    Floats sums = {};
    const Floats magic = Floats{} + kRoundingMagic, limit = Floats{} + kLevelLimit;
    const float inverse = 1.0f / choice.scale;
    const Floats scale = Floats{} + choice.scale, inverse_scale = Floats{} + inverse,
                 low_level = Floats{} + low, high_level = Floats{} + high;
    for (; i + kErrorLanes <= count; i += kErrorLanes) {
      Floats value;
      std::memcpy(&value, values + i, sizeof(value));
      Floats level = value * inverse_scale;
      level = level < -limit ? -limit : level;
      level = level > limit ? limit : level;
      level = (level + magic) - magic;
      level = level < low_level ? low_level : level;
      level = level > high_level ? high_level : level;
      const Floats difference = value - level * scale;
      sums += difference * difference;
    }
    for (int lane = 0; lane < kErrorLanes; ++lane) partial[lane] = sums[lane];
    for (; i < count; ++i) {
      const float level = Clamp(RoundToNearestEven(Levels(values[i], inverse)), low, high);
      const float difference = values[i] - level * choice.scale;
      partial[i % kErrorLanes] += difference * difference;
    }
  }
  double error = 0.0;
  for (float value : partial) error += value;
  return error;
}

// Error feedback (GPTQ): columns per lazy-batch block (rounded up to whole groups), and rows
// per tile, which share each block's read of the coefficient rows (16 rows x 5632 columns of
// updated values, 360 KiB, stay in L2).
constexpr int64_t kFeedbackBlock = 128;
constexpr int64_t kRowsPerTile = 16;

// Candidates per group: kClipSteps shrunk ranges, plus Q4_0's for symmetric int4.
constexpr int kMaxCandidates = kClipSteps + 1;

GroupChoice ChooseGroup(const float* values, int64_t count, const QuantFormat& format) {
  float low = 0.0f, high = 0.0f, signed_max = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    low = std::min(low, values[i]);
    high = std::max(high, values[i]);
    if (std::fabs(values[i]) > std::fabs(signed_max)) signed_max = values[i];
  }
  // An all-zero group: every candidate has scale 0 and error 0.
  if (signed_max == 0.0f) return GroupChoice{0.0f, format.bits == 4 && !format.asymmetric ? 8 : 0};
  GroupChoice candidates[kMaxCandidates];
  int num_candidates = 0;
  for (int step = 0; step < kClipSteps; ++step) {
    const float shrink = 1.0f - kClipStep * static_cast<float>(step);
    GroupChoice choice;
    if (format.asymmetric) {
      // The range always contains 0 (low <= 0 <= high), so 0 is exactly representable
      // up to the zero point's rounding.
      choice.scale = RoundTripF16((high - low) * shrink / 15.0f);
      choice.zero =
          choice.scale == 0.0f
              ? 0
              : static_cast<int>(std::clamp(
                    RoundToNearestEven(Levels(-low * shrink, 1.0f / choice.scale)), 0.0f, 15.0f));
    } else if (format.bits == 8) {
      choice.scale = RoundTripF16(std::fabs(signed_max) * shrink / 127.0f);
    } else {
      choice.scale = RoundTripF16(std::fabs(signed_max) * shrink / 7.0f);
      choice.zero = 8;
    }
    candidates[num_candidates++] = choice;
  }
  if (!format.asymmetric && format.bits == 4) {
    // Q4_0's choice: the largest-magnitude value lands exactly on level -8, the one level
    // symmetric int4 has only on the negative side. For a positive maximum the scale is
    // negative, which flips every level; w = (code - 8) * scale holds for either sign.
    candidates[num_candidates++] = {RoundTripF16(signed_max / -8.0f), 8};
  }
  GroupChoice best = candidates[0];
  double best_error = GroupError(values, count, best, format);
  for (int i = 1; i < num_candidates; ++i) {
    const double error = GroupError(values, count, candidates[i], format);
    if (error < best_error) {
      best_error = error;
      best = candidates[i];
    }
  }
  return best;
}

}  // namespace

std::string QuantFormat::ToString() const {
  if (mxfp4()) return absl::StrCat("mxfp4 g", group_size);
  std::string text = absl::StrCat("int", bits);
  if (bits == 4 || group_size % kColumnBlock == 0) absl::StrAppend(&text, " g", group_size);
  absl::StrAppend(&text, asymmetric ? " asymmetric" : " symmetric");
  return text;
}

int QuantizedMatrix::Code(int64_t row, int64_t column) const {
  if (format.bits == 8 && !format.mxfp4()) return static_cast<int8_t>(codes[row * cols + column]);
  return llmrt::plan::Int4CodeAt(codes.data() + row * (cols / 2), cols, column);
}

absl::Status CheckFormat(const QuantFormat& format, int64_t cols, const std::string& what) {
  if (format.mxfp4()) {
    // One E8M0 exponent per 32 columns is the format itself (OCP MX v1.0), not a choice.
    if (format.bits != 4 || format.group_size != llmrt::plan::kMxfp4Block || format.asymmetric) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: mxfp4 is 4 bits, group size 32, symmetric; found bits %d, group size %d%s", what,
          format.bits, format.group_size, format.asymmetric ? ", asymmetric" : ""));
    }
    if (cols <= 0 || cols % llmrt::plan::kMxfp4Block != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: mxfp4 needs input columns that are a multiple of 32, found %d", what, cols));
    }
    return absl::OkStatus();
  }
  if (format.bits != 8 && format.bits != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bits must be 8 or 4, found ", format.bits));
  }
  if (format.asymmetric && format.bits != 4) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the asymmetric scheme is int4 only"));
  }
  if (cols <= 0 || format.group_size <= 0 || cols % format.group_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: group size %d does not divide the %d input columns", what, format.group_size, cols));
  }
  const bool per_channel = format.group_size == cols;
  if ((format.bits == 4 || !per_channel) &&
      (cols % kColumnBlock != 0 || format.group_size % kColumnBlock != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s needs input columns (%d) and group size (%d) that are multiples of 32", what,
        format.ToString(), cols, format.group_size));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantizedMatrix> QuantizeMatrix(absl::Span<const float> weights, int64_t rows,
                                               int64_t cols, const QuantFormat& format,
                                               const ErrorFeedback* feedback) {
  if (format.mxfp4()) {
    if (feedback != nullptr) {
      return absl::InvalidArgumentError(
          "quantize: mxfp4 has no error-feedback (GPTQ) variant; its blocks are rounded to "
          "nearest");
    }
    if (absl::Status status = CheckFormat(format, cols, "quantize"); !status.ok()) return status;
    return QuantizeMxfp4(weights, rows, cols);
  }
  if (absl::Status status = CheckFormat(format, cols, "quantize"); !status.ok()) return status;
  if (static_cast<int64_t>(weights.size()) != rows * cols) {
    return absl::InvalidArgumentError(
        absl::StrFormat("quantize: %d weights for a [%d, %d] matrix", weights.size(), rows, cols));
  }
  QuantizedMatrix matrix;
  matrix.format = format;
  matrix.rows = rows;
  matrix.cols = cols;
  const int64_t groups = cols / format.group_size;
  matrix.scales.resize(rows * groups);
  if (format.asymmetric) matrix.zero_points.resize(rows * groups);
  matrix.codes.resize(format.bits == 8 ? rows * cols : rows * cols / 2);
  if (feedback != nullptr && feedback->cols != cols) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "quantize: error feedback for %d columns, the matrix has %d", feedback->cols, cols));
  }
  // With error feedback, columns are processed in blocks: within a block each error goes to the
  // block's later columns at once, at the block's end all of them go to the rest of the row in
  // one AddProducts (the paper's "lazy batch" updates: the coefficient rows are read once per
  // tile of rows and block instead of once per row and column). Blocks hold whole groups.
  const int64_t block = feedback == nullptr        ? cols
                        : format.group_size < cols ? (kFeedbackBlock + format.group_size - 1) /
                                                         format.group_size * format.group_size
                                                   : kFeedbackBlock;
  // Rows are independent: split them across the cores in contiguous chunks (each thread
  // writes only its rows' codes, scales and zero points).
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> row_codes(kRowsPerTile * cols);
    std::vector<float> target, errors;  // error feedback: updated values, a block's errors
    if (feedback != nullptr) {
      target.resize(kRowsPerTile * cols);
      errors.resize(kRowsPerTile * block);
    }
    GroupChoice choices[kRowsPerTile];
    for (int64_t first = begin; first < end; first += kRowsPerTile) {
      const int64_t tile = std::min(kRowsPerTile, end - first);
      const float* original = weights.data() + first * cols;
      if (feedback != nullptr) std::copy(original, original + tile * cols, target.begin());
      const float* values = feedback != nullptr ? target.data() : original;
      for (int64_t b0 = 0; b0 < cols; b0 += block) {
        const int64_t b1 = std::min(cols, b0 + block);
        for (int64_t r = 0; r < tile; ++r) {
          const int64_t row = first + r;
          for (int64_t j = b0; j < b1; ++j) {
            if (j % format.group_size == 0) {
              // The group's scale from its values as they are now (updated by the feedback).
              choices[r] = ChooseGroup(values + r * cols + j, format.group_size, format);
              const int64_t group = row * groups + j / format.group_size;
              matrix.scales[group] = llmrt::plan::F32ToF16(choices[r].scale);
              if (format.asymmetric) matrix.zero_points[group] = choices[r].zero;
            }
            const int code = QuantizeValue(values[r * cols + j], choices[r], format);
            row_codes[r * cols + j] = static_cast<uint8_t>(code);
            if (feedback == nullptr) continue;
            const float error = original[r * cols + j] -
                                static_cast<float>(code - choices[r].zero) * choices[r].scale;
            errors[r * block + j - b0] = error;
            const float* coefficients = feedback->coefficients.data() + j * cols;
            float* row_target = target.data() + r * cols;
            for (int64_t k = j + 1; k < b1; ++k) row_target[k] += coefficients[k] * error;
          }
        }
        if (feedback != nullptr && b1 < cols) {
          AddProducts(errors.data(), block, feedback->coefficients.data() + b0 * cols + b1, cols,
                      target.data() + b1, cols, tile, b1 - b0, cols - b1, 1.0f);
        }
      }
      for (int64_t r = 0; r < tile; ++r) {
        if (format.bits == 8) {
          std::copy_n(row_codes.begin() + r * cols, cols,
                      matrix.codes.begin() + (first + r) * cols);
        } else {
          llmrt::plan::PackInt4Row(row_codes.data() + r * cols, cols,
                                   matrix.codes.data() + (first + r) * cols / 2);
        }
      }
    }
  };
  ForRowChunks(rows, cols, quantize_rows);
  return matrix;
}

void ForRowChunks(int64_t rows, int64_t cols,
                  const std::function<void(int64_t begin, int64_t end)>& quantize_rows) {
  // A thread per core, but at least kMinWeightsPerThread weights each: starting a thread costs
  // ~50 us, the time to quantize ~50k weights.
  constexpr int64_t kMinWeightsPerThread = int64_t{1} << 16;
  const int64_t num_threads = std::clamp<int64_t>(
      rows * cols / kMinWeightsPerThread, 1, llmrt::threading::ThreadPool::DefaultThreadCount());
  std::vector<std::thread> workers;
  for (int64_t thread = 1; thread < num_threads; ++thread) {
    workers.emplace_back(quantize_rows, rows * thread / num_threads,
                         rows * (thread + 1) / num_threads);
  }
  quantize_rows(0, rows / num_threads);
  for (std::thread& worker : workers) worker.join();
}

std::vector<float> DequantizeMatrix(const QuantizedMatrix& matrix) {
  std::vector<float> weights(matrix.rows * matrix.cols);
  const int64_t groups = matrix.groups_per_row();
  for (int64_t row = 0; row < matrix.rows; ++row) {
    for (int64_t column = 0; column < matrix.cols; ++column) {
      const int64_t group = row * groups + column / matrix.format.group_size;
      float value;
      if (matrix.format.mxfp4()) {
        // A power-of-two scale times an E2M1 value: exact in f32 (denormals included).
        value = llmrt::plan::kE2M1Values[matrix.Code(row, column)] *
                llmrt::plan::E8M0ToF32(matrix.exponents[group]);
      } else {
        const int zero = matrix.format.bits == 8    ? 0
                         : matrix.format.asymmetric ? matrix.zero_points[group]
                                                    : 8;
        value = static_cast<float>(matrix.Code(row, column) - zero) *
                llmrt::plan::F16ToF32(matrix.scales[group]);
      }
      const int64_t original =
          matrix.input_permutation.empty() ? column : matrix.input_permutation[column];
      weights[row * matrix.cols + original] = value;
    }
  }
  return weights;
}

}  // namespace llmc::quant
