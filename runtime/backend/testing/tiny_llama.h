// Test support: a tiny random Llama-family model as a PlanMeta plus in-memory weights, and a
// plain reference forward pass written independently of the CPU backend's kernels (double
// accumulation, whole-sequence recompute, no KV cache), to compare a backend against.
//
// Not for production code; linked only by tests.
#ifndef LLMRT_BACKEND_TESTING_TINY_LLAMA_H_
#define LLMRT_BACKEND_TESTING_TINY_LLAMA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::testing {

struct TinyLlamaOptions {
  int32_t vocab_size = 40;
  int32_t hidden_size = 24;
  int32_t intermediate_size = 36;
  int32_t num_layers = 2;
  int32_t num_heads = 4;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 6;
  double rms_norm_eps = 1e-5;
  plan::RopeConfig rope;  // theta 0 means 10000
  int64_t sliding_window = 0;
  bool qkv_bias = false;
  // Qwen3's per-head RMS_NORM of q and k (gamma [head_dim]) between the projection and rope.
  bool qk_norm = false;
  bool tie_embeddings = false;
  // Fused: one q/k/v matmul, one gate/up matmul + SILU_MUL, FUSED_ADD_RMS_NORM. Unfused:
  // separate matmuls, SILU + MUL, ADD + RMS_NORM.
  bool fused = true;
  plan::DType weight_dtype = plan::F32;
  uint64_t seed = 1;
};

// A model: meta (program, tensors, config) and one blob per tensor.
struct TinyLlama {
  plan::PlanMeta meta;
  std::vector<std::vector<uint8_t>> blobs;

  BlobLookup Lookup() const;
  // Logits of every position of `tokens` (row-major [tokens, vocab]) from the reference
  // forward pass, with the weights as stored (f16/bf16 widened exactly).
  std::vector<float> ReferenceLogits(const std::vector<int32_t>& tokens) const;
};

TinyLlama BuildTinyLlama(const TinyLlamaOptions& options);

// Reference rotary inverse frequencies in double, following transformers' formulas.
std::vector<double> ReferenceInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim);

// Stores f32 values as `dtype` (F32, F16 or BF16) bytes and reads them back as f32.
std::vector<uint8_t> EncodeAs(plan::DType dtype, const std::vector<float>& values);
std::vector<float> DecodeFrom(plan::DType dtype, const std::vector<uint8_t>& bytes);

}  // namespace llmrt::testing

#endif  // LLMRT_BACKEND_TESTING_TINY_LLAMA_H_
