// Activation-aware weight quantization (AWQ, Lin et al. 2023), the compiler's part:
//
//   1. CollectActivations (compiler/quant/calibration.h, its own library: it runs the real
//      runtime) keeps, per matmul weight tensor, up to kMaxCalibrationRows of its input rows
//      (SearchScales uses kAwqSearchRows);
//   2. SearchScales finds per-input-channel scales s = mean|x|^alpha / mean|w~|^(1 - alpha)
//      (w~: weights relative to their group's maximum, AutoAWQ's "duo scaling"; s normalised so
//      that max(s) * min(s) = 1), alpha from a grid over [0, 1], minimising
//      || X W^T - (X / s) Q(W diag(s))^T ||^2 over those rows. s = 1 (plain round-to-nearest)
//      is always a candidate, so the chosen scales never do worse than RTN on those rows;
//   3. the caller folds 1 / s into the op that produces X (compiler/pipeline/awq_rewrite.h), so
//      the plan and the runtime never see s.
//
// Thread-safety: pure functions. This library is the quantization numerics only: it links no
// runtime engine, so codegen can use it.
#ifndef LLMC_COMPILER_QUANT_AWQ_H_
#define LLMC_COMPILER_QUANT_AWQ_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/quant/quantize.h"

namespace llmc::quant {

// Calibration tokens, and so rows kept per matmul: GPTQ's Hessian (compiler/quant/gptq.h) uses
// them all. Memory: rows x the model's summed matmul input widths x 4 bytes (TinyLlama-1.1B:
// 2,048 x 259,072 x 4 = 2.1 GB at most; its tokenizer makes ~450 tokens of the built-in text).
inline constexpr int64_t kMaxCalibrationRows = 2048;
// Rows SearchScales uses (evenly subsampled): enough for stable per-channel means (the AWQ
// paper uses 128 sequences of 512 tokens on 7B+ models, but finds results saturate early); the
// search's cost grows linearly with it (rows x weights x grid points).
inline constexpr int64_t kAwqSearchRows = 256;
// alpha in {0, 0.1, ..., 1}: the AWQ paper's grid is 20 points; 11 loses < 1% of the gain on
// the models we measured and halves the search time.
inline constexpr int kAlphaGridPoints = 11;

// A matmul's calibration input rows (compiler/quant/calibration.h collects them).
struct Activations {
  int64_t width = 0;
  int64_t num_rows = 0;
  std::vector<float> rows;  // [num_rows, width]
};

// Rows [0, num_rows) subsampled evenly down to `keep` rows.
Activations Subsample(const Activations& all, int64_t keep);

struct AwqScales {
  std::vector<float> scales;  // [cols]; divide X by it, multiply W's columns by it
  double alpha = 0;
  double loss = 0;      // squared output error with these scales
  double rtn_loss = 0;  // the same with s = 1 (plain round-to-nearest)
};

// `weights` [rows, cols] f32; `activations` of width cols (kAwqSearchRows of them, evenly
// subsampled, are used). `tie_groups`, when not empty, maps
// each column to a group whose columns must share one scale (the o_proj inputs of query heads
// that read the same kv head: their 1/s is folded into one v_proj row).
absl::StatusOr<AwqScales> SearchScales(absl::Span<const float> weights, int64_t rows, int64_t cols,
                                       const Activations& activations, const QuantFormat& format,
                                       absl::Span<const int32_t> tie_groups);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_AWQ_H_
