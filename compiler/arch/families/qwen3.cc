// Qwen3ForCausalLM (modeling_qwen3.py): Llama with an RMSNorm over each head of q and k
// (q_norm / k_norm, before rope), no q/k/v biases unless attention_bias (then o_proj too), and
// an explicit head_dim (default 128).
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  if (absl::Status status = ReadAttentionBias(json, config); !status.ok()) return status;
  // Qwen3 configs carry sliding_window with use_sliding_window false: full attention then.
  return json.RefuseTrue("use_sliding_window", "Qwen3 sliding-window layers");
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  attention.qk_norm = blocks::QkNorm::kPerHead;
  blocks::PreNormDecoder(graph, attention, {});
}

}  // namespace

extern const Family kQwen3Family{
    "Qwen3ForCausalLM", {"qwen3", 32, 32768, -1, -1, /*head_dim=*/128}, ReadConfig, Build};

}  // namespace llmc
