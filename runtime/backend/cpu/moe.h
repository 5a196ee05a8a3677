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
  // Steps split into work items (see ExpertMatMul): one single-thread pool per thread of the
  // pool, and per thread `thread_scratch_bytes` of the multiply's scratch
  // (ExpertMatMulThreadScratchBytes). Null: experts one after another.
  ThreadPool* const* single_pools = nullptr;
  uint8_t* thread_scratch = nullptr;
  int64_t thread_scratch_bytes = 0;
};

int64_t ExpertMatMulScratchInts(int64_t num_tokens, int32_t top_k, int32_t num_experts);
// Sized for steps of up to num_tokens tokens on num_threads threads.
int64_t ExpertMatMulScratchFloats(int64_t num_tokens, int64_t rows_per_expert, int32_t num_threads);
// Per thread, for steps of up to max_tokens tokens: the quantized multiplies' scratch for the
// most rows one work item has, at `cols` columns.
int64_t ExpertMatMulThreadScratchBytes(int64_t max_tokens, int32_t num_threads, int64_t cols);

// EXPERT_MATMUL: groups the routed rows by expert and multiplies each chosen expert's rows with
// `multiply` into scratch, then scatters them to their (token, slot) places. Unchosen experts'
// bytes are never read. With several threads (and single_pools), the op is one
// ParallelForDynamic over work items, each an expert's rows or, for an expert with many rows,
// a block of them (about kItemsPerThread items per thread in all, moe.cc), claimed largest
// first and multiplied on the claiming thread's single-thread pool: one join per op instead of
// one per expert, decode and prefill alike. A multiply gives a row the same bits whatever rows
// and pool it runs with, so every split agrees with experts one after another to the bit.
void ExpertMatMul(ThreadPool& pool, const ExpertMatMulArgs& args, ExpertRowsMatMul multiply);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_MOE_H_
