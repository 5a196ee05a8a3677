// Qwen3MoeForCausalLM (modeling_qwen3_moe.py): Qwen3's attention (an RMSNorm over each head of
// q and k, biases only with attention_bias) with a mixture of experts: softmax over the router
// logits, the top num_experts_per_tok, renormalised when norm_topk_prob. Layers in
// mlp_only_layers, or off decoder_sparse_step, keep a dense FFN of intermediate_size. Unlike
// Qwen3, head_dim has no class default (hidden_size / num_attention_heads).
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  if (absl::Status status = ReadAttentionBias(json, config); !status.ok()) return status;
  // Qwen3MoeConfig drops sliding_window unless use_sliding_window.
  if (absl::Status status =
          json.RefuseTrue("use_sliding_window", "Qwen3-MoE sliding-window layers");
      !status.ok())
    return status;
  // Qwen3MoeConfig: 128 experts, top 8, moe_intermediate_size 768.
  return ReadMoeConfig(json, 128, 8, 768, config);
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  attention.qk_norm = blocks::QkNorm::kPerHead;
  const blocks::MoeOptions moe;
  blocks::PreNormDecoder(graph, attention, {}, &moe);
}

}  // namespace

extern const Family kQwen3MoeFamily{
    "Qwen3MoeForCausalLM", {"qwen3_moe", 4, 32768, -1, -1}, ReadConfig, Build};

}  // namespace llmc
