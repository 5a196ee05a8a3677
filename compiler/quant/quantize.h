// Weight quantizers for plan.proto's Quantization encodings (I8 / I4 codes, F16 scales, U8 zero
// points; MXFP4: FP4_E2M1 codes with E8M0 block exponents), and the matching dequantizer.
//
// Round-to-nearest with a per-group clipping search: for each group of `group_size` columns of
// one row, a few candidate ranges are tried (the full range, and ranges shrunk by 2.5% steps down
// to 80%, plus for symmetric int4 the llama.cpp Q4_0 choice that maps the largest-magnitude value
// to code -8) and the one with the least squared error of the dequantized group wins. Clipping a
// few outliers lets the other values use finer steps: on Gaussian-like weights the best int4
// range is ~85-90% of the absolute maximum. Every error is computed with the scale rounded to
// f16, exactly as the runtime will read it. MXFP4 has its own rule (compiler/quant/mxfp4.h):
// QuantizeMatrix hands such formats to QuantizeMxfp4. QuantizeMatrix splits the rows across the
// cores (compile time: TinyLlama-1.1B's matrices took ~75 s with one thread and a libm call per
// candidate level; docs/quantization.md has the numbers).
//
// Thread-safety: pure functions.
#ifndef LLMC_COMPILER_QUANT_QUANTIZE_H_
#define LLMC_COMPILER_QUANT_QUANTIZE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace llmc::quant {

// kInteger: I8 / I4 codes times F16 group scales (minus U8 zero points when asymmetric).
// kMxfp4: OCP MX v1.0 MXFP4, FP4_E2M1 codes times 2^(e - 127) per 32 columns (bits 4, group 32,
// never asymmetric).
enum class QuantKind { kInteger, kMxfp4 };

struct QuantFormat {
  int bits = 8;             // 8 (I8) or 4 (I4, FP4_E2M1)
  int64_t group_size = 0;   // input columns per scale; == cols: one scale per output channel
  bool asymmetric = false;  // I4 only: a U8 zero point per group
  // Last, so that the {bits, group_size, asymmetric} initializers keep meaning an integer format.
  QuantKind kind = QuantKind::kInteger;

  static QuantFormat Mxfp4() { return QuantFormat{4, 32, false, QuantKind::kMxfp4}; }
  bool mxfp4() const { return kind == QuantKind::kMxfp4; }
  std::string ToString() const;  // "int4 g32 asymmetric", "mxfp4 g32"
};

// A quantized [rows, cols] matrix in the plan's layout (plan.proto, message Quantization).
struct QuantizedMatrix {
  QuantFormat format;
  int64_t rows = 0;
  int64_t cols = 0;
  // I8: rows * cols int8 codes (as bytes); I4 and MXFP4: rows * cols / 2 bytes, each row packed
  // in plan.proto's LANE_CHUNKS layout (runtime/plan/int4_layout.h: plan::PackInt4Row).
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;      // integer kinds: f16 bits, [rows, cols / group_size]
  std::vector<uint8_t> zero_points;  // asymmetric only, [rows, cols / group_size], 0..15
  // MXFP4 only (scales empty then): E8M0 bytes, [rows, cols / 32], byte e meaning 2^(e - 127);
  // 0..254 (255 is the format's NaN).
  std::vector<uint8_t> exponents;
  // Empty, or [cols]: stored column c multiplies input element input_permutation[c].
  std::vector<int32_t> input_permutation;

  int64_t groups_per_row() const { return cols / format.group_size; }
  // The code of (row, stored column): I8 in [-127, 127], I4 in [0, 15], MXFP4 the E2M1 code in
  // [0, 15] (runtime/plan/mxfp4.h: kE2M1Values).
  int Code(int64_t row, int64_t column) const;
};

// Checks that `format` can encode a matrix of `cols` columns (bits 4/8, group size dividing
// cols, I4 and grouped I8 multiples of 32, asymmetric only for I4; MXFP4: bits 4, group 32,
// cols a multiple of 32, symmetric); the message names `what`.
absl::Status CheckFormat(const QuantFormat& format, int64_t cols, const std::string& what);

struct ErrorFeedback;  // compiler/quant/gptq.h

// Quantizes `weights` ([rows, cols] f32, row-major) by round-to-nearest with the clipping
// search described above. With `feedback` (GPTQ, compiler/quant/gptq.h; its cols must equal
// `cols`), each row's columns are quantized in order and every column's rounding error is fed
// forward to the columns not yet quantized; each group's clipping search then runs on the
// updated values when the group starts. The encoding is the same either way. An MXFP4 format is
// quantized by QuantizeMxfp4 (no error feedback: refused).
absl::StatusOr<QuantizedMatrix> QuantizeMatrix(absl::Span<const float> weights, int64_t rows,
                                               int64_t cols, const QuantFormat& format,
                                               const ErrorFeedback* feedback = nullptr);

// Runs quantize_rows(begin, end) over contiguous chunks of [0, rows) of a [rows, cols] matrix,
// one thread per core but at least 64 Ki weights each; the quantizers' row split (each thread
// writes only its rows). Returns when every chunk is done.
void ForRowChunks(int64_t rows, int64_t cols,
                  const std::function<void(int64_t begin, int64_t end)>& quantize_rows);

// The f32 weights the codes stand for, [rows, cols] in ORIGINAL column order (an input
// permutation is undone), i.e. what x * W^T multiplies.
std::vector<float> DequantizeMatrix(const QuantizedMatrix& matrix);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_QUANTIZE_H_
