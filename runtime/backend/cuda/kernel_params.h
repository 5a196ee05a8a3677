// LlmcKernelParams: the one argument every generated CUDA kernel takes.
//
// Shared verbatim by the host (the CUDA backend fills it) and the device: codegen/cuda pastes
// this file's text into every kernel's source, so the two layouts cannot drift apart. Plain C,
// fixed-width fields, no pointers (device addresses are 64-bit integers whatever the host's
// pointer size), 8-byte fields first so no padding differs between compilers (fields added
// later go at the end, 8-byte aligned). 224 bytes: far under CUDA's 4 KiB kernel-parameter
// limit, and one layout for all kernels keeps the launch code free of per-kernel argument lists.
//
// Which fields a kernel reads depends on the op it implements (see codegen/cuda/KernelLibrary.cuh).
#ifndef LLMRT_BACKEND_CUDA_KERNEL_PARAMS_H_
#define LLMRT_BACKEND_CUDA_KERNEL_PARAMS_H_

struct LlmcKernelParams {
  unsigned long long input[3];  // f32 activations [num_tokens, width]
  // f32 activations. LOGITS: [0] logits [num_rows, vocab]; [1] top-k values f32 and [2] top-k
  // token ids i32, [num_rows, k] each, when the op has a prefilter kernel
  unsigned long long output[3];
  unsigned long long weight;        // the op's matrix (quantized: its codes) or norm gamma
  unsigned long long bias;          // f32 [N] or 0
  unsigned long long token_ids;     // i32 [num_tokens]
  unsigned long long positions;     // i32 [num_tokens], rope positions
  unsigned long long slot_mapping;  // i32 [num_tokens], KV cache slot of each token
  unsigned long long query_index;   // i32 [num_tokens], the token's index in its sequence
  unsigned long long block_table;  // i32 [num_tokens], offset of its sequence's row in block_tables
  unsigned long long block_tables;  // i32, every sequence's block table, concatenated
  unsigned long long row_index;     // i32 [num_rows], LOGITS: batch rows to compute
  unsigned long long key_cache;    // KvCacheSpec.dtype [num_slots, kv_heads * head_dim], this layer
  unsigned long long value_cache;  // same shape as key_cache
  unsigned long long scratch;      // f32 attention partials
  // Quantized matrices (plan.proto Quantization): f16 [N, K / group] scales, U8 zero points of
  // the same shape (asymmetric only), i32 [K] input permutation (or 0).
  unsigned long long scales;
  unsigned long long zero_points;
  unsigned long long input_permutation;
  // i32 pairs (first token, count): the step's query tiles for the prefill attention kernel,
  // each up to 64 consecutive tokens of one sequence
  unsigned long long tiles;
  int num_tokens;
  int num_rows;    // LOGITS rows
  int block_size;  // KV tokens per block
  int num_tiles;   // pairs in tiles
  // Added after the first 192 bytes, so kernels compiled against the older layout read every
  // field they know at the same offset (still 8-byte aligned: 192 = 24 * 8).
  // KvCacheSpec.dtype I8 only: f32 [num_slots, kv_heads] scales of key_cache's (value_cache's)
  // codes, this layer (runtime/kv/kv_storage.h's layout); 0 for other dtypes
  unsigned long long key_scales;
  unsigned long long value_scales;
  // Added after 208 bytes (26 * 8), for mixture of experts. MOE_COMBINE: its fourth input (the
  // shared expert's gate, [num_tokens, 1]); the first three are input[0..2] (ROUTER's ids travel
  // in input[1] of EXPERT_MATMUL, ATTENTION's sinks in weight).
  unsigned long long input3;
  // ROUTER: i32 [num_experts] tokens of the step that chose each expert at this router (the
  // backend zeroes it before the step and reads it back for Backend::LastStepExpertLoad), or 0
  // when the backend does not record expert load.
  unsigned long long expert_counts;
};

// The elementwise kernel's operation (its kOp template argument): plan.proto's OpKind numbers,
// so the plan, the CPU kernels and the CUDA kernels share one encoding (codegen/cuda/EmitCuda.cpp
// checks the numbers against plan.proto).
enum LlmcElementwiseOp {
  LLMC_OP_SILU = 7,
  LLMC_OP_MUL = 8,
  LLMC_OP_ADD = 9,
  LLMC_OP_SILU_MUL = 10,
  LLMC_OP_GELU_TANH_MUL = 12,
  LLMC_OP_CLAMPED_SWIGLU = 16,
};

#endif  // LLMRT_BACKEND_CUDA_KERNEL_PARAMS_H_
