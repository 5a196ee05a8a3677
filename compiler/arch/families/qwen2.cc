// Qwen2ForCausalLM (modeling_qwen2.py): Llama with biases on q/k/v (not o_proj).
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  config.set_attention_bias(true);
  // Qwen2 configs carry sliding_window with use_sliding_window false: full attention then.
  return json.RefuseTrue("use_sliding_window", "Qwen2 sliding-window layers");
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
