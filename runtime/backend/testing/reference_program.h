// Test support: the scalar reference for every plan op — an interpreter of a whole program in
// double precision, written from plan.proto's definitions and transformers' formulas rather
// than from any backend's kernels. Every backend is compared against it: the op conformance
// matrix (tests/conformance) one op at a time, the tiny-model tests whole programs.
//
// Not for production code; linked only by tests.
#ifndef LLMRT_BACKEND_TESTING_REFERENCE_PROGRAM_H_
#define LLMRT_BACKEND_TESTING_REFERENCE_PROGRAM_H_

#include <cstdint>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::testing {

// The values of matrix or vector meta.tensors(index) as f32, row-major: F32 / F16 / BF16
// widened exactly, ROW_PANELS unpacked, I8 / I4 dequantized by plan.proto's Quantization
// comment (w = (code - zero) * scale per group, I4 codes in LANE_CHUNKS, the input permutation
// folded into the column order).
std::vector<float> ReferenceTensor(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                   int32_t index);

// Runs meta.program() over one sequence of `tokens` at rope `positions` (token i attends to
// tokens 0..i, within a sliding window by index). Returns the LOGITS op's rows for every token,
// row-major [tokens, vocab]; the KV cache dtype is ignored (keys and values stay exact).
std::vector<double> ReferenceProgram(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                     const std::vector<int32_t>& tokens,
                                     const std::vector<int32_t>& positions);

}  // namespace llmrt::testing

#endif  // LLMRT_BACKEND_TESTING_REFERENCE_PROGRAM_H_
