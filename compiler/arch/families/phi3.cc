// Phi3ForCausalLM (modeling_phi3.py; Phi-3 mini/medium, Phi-3.5-mini and Phi-4-mini share it):
// Llama's decoder with q/k/v stored as one qkv_proj and gate/up as one gate_up_proj (read as row
// slices, which the passes fuse back), a sliding window on every layer when sliding_window is
// set, LongRoPE, and partial rotary (Phi-4-mini rotates the first 3/4 of each head).
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/rope_config.h"

namespace llmc {
namespace {

using llmrt::plan::RopeConfig;

// Phi3Config's class default for the top-level original_max_position_embeddings, which
// standardize_rope_params gives priority over rope_parameters'.
constexpr int64_t kOriginalMaxPositions = 4096;

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  // sliding_window: absent or null, none; Phi3Model masks every layer with it otherwise.
  absl::StatusOr<int64_t> window = json.PositiveIntOr("sliding_window", 0);
  if (!window.ok()) return window.status();
  config.set_sliding_window(*window);

  RopeConfig& rope = *config.mutable_rope();
  if (absl::Status status = ReadPartialRotary(json, config.head_dim(), &rope); !status.ok())
    return status;
  const char* rope_field = json.HasValue("rope_scaling") ? "rope_scaling" : "rope_parameters";
  // Phi3Config.validate_rope allows default and longrope only, after renaming "su" and "yarn"
  // to longrope; those renamed configs would be read as other types here, so they are refused.
  if (rope.scaling() != RopeConfig::SCALING_NONE && rope.scaling() != RopeConfig::LONGROPE) {
    return json.Unsupported(
        rope_field,
        "Phi3ForCausalLM takes rope type default or longrope (transformers reads "
        "\"yarn\" and \"su\" as longrope: rename the type to \"longrope\")");
  }
  if (rope.scaling() == RopeConfig::LONGROPE &&
      !json.HasValue("original_max_position_embeddings") &&
      rope.original_max_position_embeddings() != kOriginalMaxPositions) {
    return json.Unsupported(
        "original_max_position_embeddings",
        "absent at the top level, where Phi3Config's default 4096 overrides the rope "
        "parameters' value: write the pretraining context there");
  }
  return absl::OkStatus();
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.fused_qkv = true;
  blocks::FfnOptions ffn;
  ffn.fused_gate_up = true;
  blocks::PreNormDecoder(graph, attention, ffn);
}

}  // namespace

extern const Family kPhi3Family{
    "Phi3ForCausalLM",
    {"phi3", std::nullopt, 4096, 1, 32000, std::nullopt, 1e-5, 10000.0, false, 32000},
    ReadConfig,
    Build};

}  // namespace llmc
