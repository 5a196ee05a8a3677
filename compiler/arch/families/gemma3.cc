// Gemma3ForCausalLM with a Gemma3TextConfig (modeling_gemma3.py): Gemma 2's decoder (see
// gemma2.cc) with per-head q/k norms (gammas 1 + weight, before rope), five sliding-window layers
// to one global (layer_types, else sliding_window_pattern, default 6), the sliding layers'
// own rope (rope_local_base_freq, default 10000, unscaled) and rope scaling on the global layers
// only (rope_theta default 1e6), no soft-capping unless the config sets it.
#include "compiler/arch/blocks.h"
#include "compiler/arch/families/gemma.h"
#include "compiler/arch/family.h"
#include "compiler/arch/rope_config.h"

namespace llmc {

namespace {

// transformers >= 5 writes rope_parameters per layer type ({"full_attention": {...},
// "sliding_attention": {...}}); older configs rope_theta, rope_scaling (the global layers') and
// rope_local_base_freq, which the common parser and this read.
absl::Status ReadRopes(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  llmrt::plan::RopeConfig* local = config.mutable_sliding_layer_rope();
  local->set_scaling(llmrt::plan::RopeConfig::SCALING_NONE);
  const bool per_type = json.HasValue("rope_parameters") &&
                        json.Get("rope_parameters").is_object() &&
                        (json.Get("rope_parameters").contains("full_attention") ||
                         json.Get("rope_parameters").contains("sliding_attention"));
  if (!per_type) {
    absl::StatusOr<double> theta = json.PositiveNumberOr("rope_local_base_freq", 10000.0);
    if (!theta.ok()) return theta.status();
    local->set_theta(*theta);
    return absl::OkStatus();
  }
  const ConfigReader types(json.Get("rope_parameters"),
                           json.path() + ": field \"rope_parameters\"");
  for (auto [type, rope, theta] : {std::tuple{"full_attention", config.mutable_rope(), 1000000.0},
                                   std::tuple{"sliding_attention", local, 10000.0}}) {
    rope->Clear();
    rope->set_theta(theta);
    if (!types.HasValue(type)) continue;
    if (!types.Get(type).is_object()) return types.Error(type, "an object of rope parameters");
    const ConfigReader parameters(types.Get(type),
                                  json.path() + ": field \"rope_parameters." + type + "\"");
    absl::StatusOr<double> value = parameters.PositiveNumberOr("rope_theta", theta);
    if (!value.ok()) return value.status();
    rope->set_theta(*value);
    if (absl::Status status = ParseRopeParameters(json, "rope_parameters", parameters, rope);
        !status.ok())
      return status;
  }
  return absl::OkStatus();
}

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  absl::StatusOr<int64_t> pattern = json.PositiveIntOr("sliding_window_pattern", 6);
  if (!pattern.ok()) return pattern.status();
  if (absl::Status status = ReadGemmaConfig(json, config, 0.0, 0.0, *pattern); !status.ok())
    return status;
  return ReadRopes(json, config);
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  attention.qk_norm = blocks::QkNorm::kPerHead;
  attention.norm_offset = 1.0;
  blocks::GemmaDecoder(graph, attention, {});
}

}  // namespace

extern const Family kGemma3Family{
    "Gemma3ForCausalLM",
    {"gemma3_text", 4, 131072, 2, 1, /*head_dim=*/256,
     /*rms_norm_eps=*/1e-6, /*rope_theta=*/1000000.0,
     /*tie_word_embeddings=*/true, /*pad_token_id=*/0, "hidden_activation", "gelu_pytorch_tanh"},
    ReadConfig,
    Build};

}  // namespace llmc
