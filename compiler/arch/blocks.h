// Shared blocks that family files compose. Each reads the HF tensor names under
// model.layers.N. that transformers' Llama-style modeling code uses; a family whose checkpoint
// names differ gets an option here, not a copy of the block.
#ifndef LLMC_COMPILER_ARCH_BLOCKS_H_
#define LLMC_COMPILER_ARCH_BLOCKS_H_

#include <cstdint>

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
};

struct FfnOptions {
  bool bias = false;  // gate/up/down carry a bias (Llama mlp_bias)
};

// model.embed_tokens: the token ids' rows.
Activation Embedding(ModelGraph& graph);

// o_proj(attention(rope(q), rope(k), v)) of x, which is already normalized.
Activation SelfAttention(ModelGraph& graph, Activation x, int64_t layer,
                         const AttentionOptions& options);

// down_proj(silu(gate_proj(x)) * up_proj(x)).
Activation GatedFfn(ModelGraph& graph, Activation x, int64_t layer, const FfnOptions& options);

// transformers' LlamaDecoderLayer:
//   h  = x + self_attn(input_layernorm(x))
//   x' = h + mlp(post_attention_layernorm(h))
Activation PreNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                               const AttentionOptions& attention, const FfnOptions& ffn);

// transformers' Olmo2DecoderLayer: no norm before the sublayers, one on each output inside the
// residual:
//   h  = x + post_attention_layernorm(self_attn(x))
//   x' = h + post_feedforward_layernorm(mlp(h))
Activation PostNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                                const AttentionOptions& attention, const FfnOptions& ffn);

// model.norm, then the lm_head (the embedding table when tie_word_embeddings).
void FinalNormAndLogits(ModelGraph& graph, Activation x);

// The whole Llama-shaped model: embedding, num_hidden_layers pre-norm layers, final norm,
// logits.
void PreNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn);

// PreNormDecoder with Llama's bias options from the config: attention_bias on q/k/v/o, mlp_bias
// on gate/up/down.
void LlamaDecoder(ModelGraph& graph);

// The same with post-norm layers (OLMo2).
void PostNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn);

}  // namespace llmc::blocks

#endif  // LLMC_COMPILER_ARCH_BLOCKS_H_
