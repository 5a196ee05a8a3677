// MXFP4 weight quantization (OCP Microscaling Formats v1.0): each block of 32 columns of a row
// gets one E8M0 exponent byte e (scale 2^(e - 127)) and 32 FP4_E2M1 codes
// (runtime/plan/mxfp4.h has the value tables every decoder uses).
//
// The OCP rule sets e so that the block's largest magnitude amax lands in [4, 8) times the
// scale: e = floor(log2 amax) - 2 + 127, clamped to [0, 254], and rounds each w / 2^(e - 127) to
// the nearest E2M1 value with ties to the even mantissa, saturating at +-6. Values whose ratio
// lands in (6, 8) are clipped to 6 by that rule, so we also try e + 1 (amax in [2, 4): no
// clipping, half the resolution) and keep the candidate with the smaller squared error of the
// block (ties: the OCP one). An all-zero block gets e = 127 and zero codes.
//
// Thread-safety: pure functions.
#ifndef LLMC_COMPILER_QUANT_MXFP4_H_
#define LLMC_COMPILER_QUANT_MXFP4_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/quant/quantize.h"

namespace llmc::quant {

// The OCP MX v1.0 exponent byte of a block whose largest magnitude is `amax` (finite, >= 0):
// 127 for 0, else clamp(floor(log2 amax) - 2 + 127, 0, 254).
uint8_t Mxfp4OcpExponent(float amax);

// The E2M1 code (0..15, bit 3 the sign) nearest to `ratio` (= w / scale): ties to the even
// mantissa, magnitudes above 6 saturate to 6, the sign of a value that rounds to 0 is kept
// (code 8 for -0.25 .. -0).
int E2M1Code(float ratio);

// One block quantized with a given exponent: its codes (one per value, unpacked) and the
// squared error of the decoded values.
double QuantizeMxfp4Block(const float* values, int64_t count, uint8_t exponent, uint8_t* codes);

// Quantizes `weights` ([rows, cols] f32, row-major; cols a multiple of 32, every value finite)
// into a QuantizedMatrix of format QuantFormat::Mxfp4(), choosing each block's exponent as
// described above. Errors name the row and column of a non-finite weight.
absl::StatusOr<QuantizedMatrix> QuantizeMxfp4(absl::Span<const float> weights, int64_t rows,
                                              int64_t cols);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_MXFP4_H_
