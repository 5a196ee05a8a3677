// MistralForCausalLM (modeling_mistral.py): Llama with a sliding attention window on every
// layer.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  // MistralConfig defaults sliding_window to 4096 when the key is absent; null disables it.
  // MistralModel ignores layer_types (transformers warns and windows every layer).
  int64_t window = 4096;
  if (json.Has("sliding_window")) {
    absl::StatusOr<int64_t> value = json.PositiveIntOr("sliding_window", 0);
    if (!value.ok()) return value.status();
    window = *value;
  }
  config.set_sliding_window(window);
  return absl::OkStatus();
}

void Build(ModelGraph& graph) { blocks::PreNormDecoder(graph, {}, {}); }

}  // namespace

extern const Family kMistralFamily{
    "MistralForCausalLM", {"mistral", 8, 4096 * 32, 1, 2}, ReadConfig, Build};

}  // namespace llmc
