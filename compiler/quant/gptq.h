// GPTQ-style error feedback (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization for
// Generative Pre-trained Transformers"), written from the paper's description.
//
// Per linear layer the objective is the output error on calibration inputs X (rows = tokens):
// ||X W^T - X Q^T||^2 = sum over output rows n of (w_n - q_n)^T H (w_n - q_n), H = X^T X. Rows
// are independent; within a row the columns are quantized in order, and after column j is
// fixed, the columns k > j not yet quantized move to the values that minimise the objective
// given the codes chosen so far ("push the error onto the remaining columns"). Each group's
// scale (and zero point) is chosen by the usual clipping search when the group starts, from
// the updated values (QuantizeMatrix with an ErrorFeedback, compiler/quant/quantize.h).
//
// The paper pushes e_j = (w'_j - q_j) / U_jj along row j of U, the upper Cholesky factor of
// H^-1 (w' the updated weights). This file computes the same updates without inverting H:
// with H = M^T M, M lower triangular (the Cholesky factor of H with its index order
// reversed), the objective is ||M (w - q)||^2 and the optimal continuation given q_0..q_{k-1}
// makes rows k.. of M (w - q) zero, so column k's updated value is
//   w'_k = w_k + sum_{j<k} (M_kj / M_kk) (w_j - q_j)
// in terms of the ORIGINAL weights w. These are the same values as the paper's (both are the
// unique minimiser given the fixed codes; gptq_test.cc checks it against a textbook
// implementation with H^-1), at one Cholesky (n^3/3) instead of a Cholesky, an inverse and a
// second Cholesky (~4n^3/3): the cubic term dominates compile time for TinyLlama's down_proj
// (n = 5632).
//
// H is damped as in the paper: 1% of its mean diagonal added to the diagonal (more, x10 per
// retry, if the factorisation still finds a non-positive pivot), and inputs that are always 0
// in the calibration (H_jj = 0) get H_jj = 1, so nothing is pushed to or from them.
//
// Thread-safety: pure functions (they start their own threads).
#ifndef LLMC_COMPILER_QUANT_GPTQ_H_
#define LLMC_COMPILER_QUANT_GPTQ_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/quant/awq.h"

namespace llmc::quant {

// Fraction of H's mean diagonal added to its diagonal (the paper's "percdamp" default).
inline constexpr double kGptqDamping = 0.01;

// What QuantizeMatrix needs to feed errors forward along a row: an upper triangular
// [cols, cols] row-major matrix; coefficients[j * cols + k] (j < k) is the part of column j's
// rounding error (original value - dequantized value) added to column k before it is
// quantized. The diagonal and lower triangle are 0.
struct ErrorFeedback {
  int64_t cols = 0;
  std::vector<float> coefficients;
};

// The error feedback for a linear layer whose inputs are `activations` (its rows), each input
// column divided by `input_divisors[c]` when that is not empty (the AWQ scales s: the layer then
// reads X / s). InvalidArgument when the widths disagree or there are no rows; Internal when H
// cannot be factorised even with 10^4 times the damping (never seen: H + damping is positive
// definite in exact arithmetic).
absl::StatusOr<ErrorFeedback> ComputeErrorFeedback(const Activations& activations,
                                                   absl::Span<const float> input_divisors = {});

// c[i * ldc + j] += alpha * sum_{p < depth} a[i * lda + p] * b[p * ldb + j] for i < rows and
// j < cols, or, when `lower`, only for j <= i + lower_offset (a few more columns past that
// bound, up to the next multiple of 8 and never beyond cols, may be written with the same
// formula). The one dense kernel of GPTQ: Gram matrix, Cholesky trailing updates and the
// batched error feedback. Single-threaded; the callers split rows.
void AddProducts(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                 int64_t rows, int64_t depth, int64_t cols, float alpha, bool lower = false,
                 int64_t lower_offset = 0);

// The squared output error sum_t sum_n (x_t . (w_n - q_n))^2 of quantized weights `restored`
// against `weights` (both [rows, cols]) on `activations`: the objective AWQ and GPTQ minimise.
double LinearOutputError(absl::Span<const float> weights, absl::Span<const float> restored,
                         int64_t rows, int64_t cols, const Activations& activations);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_GPTQ_H_
