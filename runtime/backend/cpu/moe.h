// Mixture-of-experts kernels of the CPU backend (plan.proto ROUTER, EXPERT_MATMUL, MOE_COMBINE).
//
// Routed activations keep (token, slot) order (routed row r = t * top_k + j); grouping the rows
// by expert is private to ExpertMatMul, which sorts them per op (GroupRoutedRows: O(T k + E)).
// Every (weight row, routed row) result is computed by the same per-row arithmetic as a MATMUL
// of that row alone (the GEMV / GEMM bit-equality of matmul.cc and quant_gemm.h), and routing
// and combining are per token, so a token's MoE output does not depend on the other tokens of
// its step, nor on the thread count.
//
// Thread-safety: like kernels.h.
#ifndef LLMRT_BACKEND_CPU_MOE_H_
#define LLMRT_BACKEND_CPU_MOE_H_

#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// ROUTER (plan.proto): per token, the top_k largest of `num_experts` logits (ties to the lower
// index) in descending order into ids [T, top_k], and their weights [T, top_k]. With `counts`
// ([num_experts]), adds each token's choices to it.
void RouteTokens(ThreadPool& pool, const float* logits, int64_t num_tokens, int32_t num_experts,
                 int32_t top_k, plan::RouterAttrs::Scoring scoring, bool normalize, int32_t* ids,
                 float* weights, int32_t* counts);

// Counting sort of the routed rows r = t * top_k + j (r < num_tokens * top_k) by expert
// ids[r]: expert e's rows are rows[offsets[e] .. offsets[e + 1]), ascending. offsets has
// num_experts + 1 entries.
void GroupRoutedRows(const int32_t* ids, int64_t num_tokens, int32_t top_k, int32_t num_experts,
                     int32_t* offsets, int32_t* rows);

// out[t] = sum_{j < top_k, in order} weights[t, j] * y[t, j H .. (j + 1) H), then
// + sigmoid(shared_gate[t]) * shared[t] when shared is not null.
void MoeCombine(ThreadPool& pool, const float* y, const float* weights, const float* shared,
                const float* shared_gate, int64_t num_tokens, int32_t top_k, int64_t hidden,
                float* out);

// How EXPERT_MATMUL multiplies the rows of one expert: the backend's MatMul, QuantizedMatMul or
// exact quantized matmul over `w` (one expert's [N, K]), rows gathered through input_rows.
using ExpertRowsMatMul = void (*)(ThreadPool& pool, const float* x, int64_t num_rows,
                                  const int32_t* input_rows, const MatrixView& w, const float* bias,
                                  const MatMulOutput* outputs, int32_t num_outputs, void* scratch);

// Expert e's [rows, K] matrix (its companions offset alike) of an expert stack viewed as the
// [E rows, K] matrix `stack`.
MatrixView ExpertMatrix(const MatrixView& stack, int64_t rows, int32_t expert);

struct ExpertMatMulArgs {
  const float* x = nullptr;  // [T, K] (sliced = false) or [T, top_k K] (sliced)
  bool sliced = false;
  const int32_t* ids = nullptr;  // [T, top_k]
  int64_t num_tokens = 0;
  int32_t top_k = 0;
  int32_t num_experts = 0;
  MatrixView weights;           // [E N, K]
  int64_t rows_per_expert = 0;  // N
  const float* bias = nullptr;  // [E, N] or null
  // outputs[i] = {[T, top_k * width], begin, width}: slot j of token t at columns
  // [j width, (j + 1) width) of row t, i.e. row t * top_k + j of a [T top_k, width] view.
  const MatMulOutput* outputs = nullptr;
  int32_t num_outputs = 0;
  // ExpertMatMulScratchInts(T, top_k, E) ints and ExpertMatMulScratchFloats(T, N, threads)
  // floats.
  int32_t* int_scratch = nullptr;
  float* float_scratch = nullptr;
  void* matmul_scratch = nullptr;  // the multiply's own scratch (quantized activations)
  // Decode-sized steps (see ExpertMatMul): one single-thread pool per thread of the pool, and
  // per thread `thread_scratch_bytes` of the multiply's scratch for kExpertParallelRows rows
  // (ExpertMatMulThreadScratchBytes). Null: experts one after another.
  ThreadPool* const* single_pools = nullptr;
  uint8_t* thread_scratch = nullptr;
  int64_t thread_scratch_bytes = 0;
};

// Experts with at most this many routed rows (decode, small batches) are multiplied one per
// thread rather than one after another with every thread.
inline constexpr int32_t kExpertParallelRows = 4;

int64_t ExpertMatMulScratchInts(int64_t num_tokens, int32_t top_k, int32_t num_experts);
int64_t ExpertMatMulScratchFloats(int64_t num_tokens, int64_t rows_per_expert, int32_t num_threads);
// Per thread: the quantized multiplies' scratch for kExpertParallelRows rows of `cols`.
int64_t ExpertMatMulThreadScratchBytes(int64_t cols);

// EXPERT_MATMUL: groups the routed rows by expert and multiplies each chosen expert's rows with
// `multiply` into scratch, then scatters them to their (token, slot) places. Unchosen experts'
// bytes are never read. When every chosen expert has at most kExpertParallelRows rows and the
// pool has several threads, the experts are work items of one ParallelForDynamic (largest
// first), each multiplied on its thread's single-thread pool: one join per op instead of one
// per expert, and each thread streams whole experts. The multiplies give the same bits on any
// pool, so both schedules agree to the bit.
void ExpertMatMul(ThreadPool& pool, const ExpertMatMulArgs& args, ExpertRowsMatMul multiply);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_MOE_H_
