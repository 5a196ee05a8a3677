// Shared blocks that family files compose. Each reads the HF tensor names under
// model.layers.N. that transformers' Llama-style modeling code uses; a family whose checkpoint
// names differ gets an option here, not a copy of the block.
#ifndef LLMC_COMPILER_ARCH_BLOCKS_H_
#define LLMC_COMPILER_ARCH_BLOCKS_H_

#include <cstdint>
#include <string>

#include "compiler/arch/graph.h"

namespace llmc::blocks {

// Where q_norm / k_norm apply, after the projection and before rope.
enum class QkNorm {
  kNone,
  kPerHead,          // over each head of head_dim (Qwen3): weights [head_dim]
  kWholeProjection,  // over the whole q (heads * head_dim) and k projection (OLMo2)
};

// The sliding window and whether a layer rotates q and k are per layer and come from the config
// (LayerSlidingWindow, LayerHasRope in family_config.h).
struct AttentionOptions {
  bool qkv_bias = false;           // q/k/v projections carry a bias (Qwen2, Llama attention_bias)
  bool o_bias = false;             // o_proj carries a bias (Llama attention_bias)
  QkNorm qk_norm = QkNorm::kNone;  // weights self_attn.q_norm / k_norm
  // q, k and v are the rows of one self_attn.qkv_proj (Phi-3), read as row slices.
  bool fused_qkv = false;
  double norm_offset = 0;  // q/k norm gamma = norm_offset + weight (Gemma 3: 1)
  bool sinks = false;      // self_attn.sinks [num_heads]: a learned logit per head (gpt-oss)
};
// The attention's softmax scale (query_pre_attn_scalar^-0.5 or head_dim^-0.5), logit soft-cap
// and, on sliding layers, the rope (sliding_layer_rope) come from the config.

struct FfnOptions {
  bool bias = false;  // gate/up/down carry a bias (Llama mlp_bias)
  // gate and up are the two halves of the rows of one mlp.gate_up_proj (Phi-3), in that order.
  bool fused_gate_up = false;
};

// A mixture-of-experts FFN's checkpoint names, under model.layers.N.; its sizes and routing
// come from config.moe.
struct MoeOptions {
  std::string router = "mlp.gate";      // Mixtral "block_sparse_moe.gate", gpt-oss "mlp.router"
  std::string experts = "mlp.experts";  // Mixtral "block_sparse_moe.experts"
  // Per-expert projections <experts>.<e>.<gate|up|down>.weight (Mixtral: w1, w3, w2).
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  // gpt-oss: the experts are 3-D <experts>.gate_up_proj [E, H, 2I] (used transposed, gate and
  // up interleaved by column) and down_proj [E, I, H] (+ _bias), read through ExpertSlice views.
  bool stacked = false;
  // Qwen2-MoE: mlp.shared_expert.{gate,up,down}_proj (shared_expert_intermediate_size) on every
  // token, times sigmoid(mlp.shared_expert_gate [1, H] x), added to the routed sum.
  bool shared_expert = false;
};

// Gemma's decoder: every norm's gamma is 1 + weight, embeddings are scaled by sqrt(hidden_size).
struct GemmaOptions {
  double norm_offset = 1.0;
  bool scale_embeddings = true;
};

// model.embed_tokens: the token ids' rows, times `scale` in the table's dtype when > 0.
Activation Embedding(ModelGraph& graph, double scale = 0);

// o_proj(attention(rope(q), rope(k), v)) of x, which is already normalized.
Activation SelfAttention(ModelGraph& graph, Activation x, int64_t layer,
                         const AttentionOptions& options);

// down_proj(act(gate_proj(x)) * up_proj(x)), act the config's hidden_act: silu, or
// gelu_pytorch_tanh (gelu's tanh approximation, which gelu_new computes too).
Activation GatedFfn(ModelGraph& graph, Activation x, int64_t layer, const FfnOptions& options);

// A mixture of experts on x (already normalized): the router matmul (+ bias when
// config.moe.router_bias), ROUTER, each expert's gate and up, the activation (silu * up, or the
// clamped SwiGLU when config.moe.swiglu_limit > 0), down, and the weighted combine (+ the shared
// expert and its sigmoid gate).
Activation MoeFfn(ModelGraph& graph, Activation x, int64_t layer, const MoeOptions& options);

// transformers' LlamaDecoderLayer:
//   h  = x + self_attn(input_layernorm(x))
//   x' = h + mlp(post_attention_layernorm(h))
// With `moe`, mlp is MoeFfn on the layers where LayerIsMoe (family_config.h).
Activation PreNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                               const AttentionOptions& attention, const FfnOptions& ffn,
                               const MoeOptions* moe = nullptr);

// transformers' Olmo2DecoderLayer: no norm before the sublayers, one on each output inside the
// residual:
//   h  = x + post_attention_layernorm(self_attn(x))
//   x' = h + post_feedforward_layernorm(mlp(h))
Activation PostNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                                const AttentionOptions& attention, const FfnOptions& ffn);

// transformers' Gemma2DecoderLayer (sandwich norms, gammas 1 + weight):
//   h  = x + post_attention_layernorm(self_attn(input_layernorm(x)))
//   x' = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)))
Activation SandwichNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                                    const AttentionOptions& attention, double norm_offset);

// model.norm (gamma norm_offset + weight), then the lm_head (the embedding table when
// tie_word_embeddings), soft-capped by the config's final_logit_softcapping.
void FinalNormAndLogits(ModelGraph& graph, Activation x, double norm_offset = 0);

// The whole Llama-shaped model: embedding, num_hidden_layers pre-norm layers, final norm,
// logits; with `moe`, a mixture of experts on the layers where LayerIsMoe.
void PreNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn,
                    const MoeOptions* moe = nullptr);

// PreNormDecoder with Llama's bias options from the config: attention_bias on q/k/v/o, mlp_bias
// on gate/up/down.
void LlamaDecoder(ModelGraph& graph);

// The same with post-norm layers (OLMo2).
void PostNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn);

// Gemma 2 / 3: scaled embeddings, sandwich-norm layers, the final norm and soft-capped logits.
void GemmaDecoder(ModelGraph& graph, const AttentionOptions& attention, const GemmaOptions& gemma);

}  // namespace llmc::blocks

#endif  // LLMC_COMPILER_ARCH_BLOCKS_H_
