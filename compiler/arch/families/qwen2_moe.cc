// Qwen2MoeForCausalLM (modeling_qwen2_moe.py): Qwen2's attention (q/k/v biases when qkv_bias,
// never o_proj) with a mixture of experts as Qwen3-MoE's plus a shared expert on every token,
// scaled by sigmoid(shared_expert_gate x) and added to the routed sum. Its sliding-window rule
// is not Qwen2's: with use_sliding_window, the even layers below max_window_layers slide.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  absl::StatusOr<bool> qkv_bias = json.BoolOr("qkv_bias", true);
  if (!qkv_bias.ok()) return qkv_bias.status();
  config.set_attention_bias(*qkv_bias);
  // Qwen2MoeConfig's layer_types default: (i + 1) % 2 and i < max_window_layers.
  if (absl::Status status = ReadQwen2LayerWindows(
          json,
          [](int64_t layer, int64_t max_window_layers) {
            return layer % 2 == 0 && layer < max_window_layers;
          },
          config);
      !status.ok())
    return status;
  // Qwen2MoeConfig: 60 experts, top 4, moe_intermediate_size 1408, shared expert 5632.
  if (absl::Status status = ReadMoeConfig(json, 60, 4, 1408, config); !status.ok()) return status;
  absl::StatusOr<int64_t> shared = json.PositiveIntOr("shared_expert_intermediate_size", 5632);
  if (!shared.ok()) return shared.status();
  config.mutable_moe()->set_shared_expert_intermediate_size(*shared);
  return absl::OkStatus();
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = graph.config().attention_bias();
  blocks::MoeOptions moe;
  moe.shared_expert = true;
  blocks::PreNormDecoder(graph, attention, {}, &moe);
}

}  // namespace

extern const Family kQwen2MoeFamily{
    "Qwen2MoeForCausalLM", {"qwen2_moe", 16, 32768, -1, -1}, ReadConfig, Build};

}  // namespace llmc
