// Qwen2ForCausalLM (modeling_qwen2.py): Llama with biases on q/k/v (not o_proj), and with
// use_sliding_window a sliding window on the layers from max_window_layers on.
#include <vector>

#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  config.set_attention_bias(true);
  // Qwen2Config: the window is sliding_window (default 4096; null: none) only when
  // use_sliding_window; without layer_types, layers i >= max_window_layers (default 28) use it.
  // Real Qwen2 configs carry sliding_window with use_sliding_window false: full attention.
  absl::StatusOr<bool> use_sliding_window = json.BoolOr("use_sliding_window", false);
  if (!use_sliding_window.ok()) return use_sliding_window.status();
  int64_t window = 0;
  if (*use_sliding_window) {
    absl::StatusOr<int64_t> value = json.Has("sliding_window")
                                        ? json.PositiveIntOr("sliding_window", 0)
                                        : absl::StatusOr<int64_t>(4096);
    if (!value.ok()) return value.status();
    window = *value;
  }
  absl::StatusOr<int64_t> max_window_layers = json.NonNegativeIntOr("max_window_layers", 28);
  if (!max_window_layers.ok()) return max_window_layers.status();
  std::vector<bool> sliding(config.num_layers());
  for (int64_t layer = 0; layer < config.num_layers(); ++layer)
    sliding[layer] = window > 0 && layer >= *max_window_layers;
  return ReadLayerWindows(json, sliding, window, config);
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
