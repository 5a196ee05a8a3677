// Qwen2ForCausalLM (modeling_qwen2.py): Llama with biases on q/k/v (not o_proj), and with
// use_sliding_window a sliding window on the layers from max_window_layers on.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  config.set_attention_bias(true);
  // Qwen2Config: without layer_types, layers i >= max_window_layers use the window.
  return ReadQwen2LayerWindows(
      json, [](int64_t layer, int64_t max_window_layers) { return layer >= max_window_layers; },
      config);
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = true;
  blocks::PreNormDecoder(graph, attention, {});
}

}  // namespace

extern const Family kQwen2Family{
    "Qwen2ForCausalLM", {"qwen2", 32, 32768, -1, -1}, ReadConfig, Build};

}  // namespace llmc
