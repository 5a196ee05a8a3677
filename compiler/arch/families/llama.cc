// LlamaForCausalLM (transformers' modeling_llama.py): pre-norm decoder layers, GQA, rope
// (default, linear, llama3, yarn), SwiGLU MLP; attention_bias puts a bias on q/k/v/o.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  absl::StatusOr<bool> attention_bias = json.BoolOr("attention_bias", false);
  if (!attention_bias.ok()) return attention_bias.status();
  config.set_attention_bias(*attention_bias);
  return json.RefuseTrue("mlp_bias", "MLP biases");
}

void Build(ModelGraph& graph) {
  const llmrt::plan::ModelConfig& config = graph.config();
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = config.attention_bias();
  blocks::PreNormDecoder(graph, attention, {});
}

}  // namespace

extern const Family kLlamaFamily{
    "LlamaForCausalLM", {"llama", std::nullopt, 2048, 1, 2}, ReadConfig, Build};

}  // namespace llmc
