// GptOssForCausalLM (modeling_gpt_oss.py): attention with q/k/v/o biases and a learned sink
// logit per head, on sliding-window and full layers (layer_types; absent: the even layers
// slide); a mixture of experts whose router has a bias and picks the top num_experts_per_tok
// logits before a softmax over those alone (TOPK_SOFTMAX); the experts are stored stacked
// (gate_up_proj [E, H, 2I] used as x @ W with gate and up interleaved by column, down_proj
// [E, I, H], both with per-expert biases) and use the clamped SwiGLU
// (up + 1) * g * sigmoid(alpha g), g = min(gate, limit), up clamped to +-limit. hidden_act is
// not read by the experts; the common parser still checks it. Without rope_parameters /
// rope_scaling the class uses YaRN (factor 32 over 4096 positions, untruncated).
#include <vector>

#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"
#include "compiler/arch/rope_config.h"

namespace llmc {
namespace {

// GptOssConfig.__post_init__'s rope_parameters when the config has none.
const ConfigReader::Json& DefaultYarn() {
  static const ConfigReader::Json* yarn = new ConfigReader::Json{
      {"rope_type", "yarn"}, {"factor", 32.0},    {"beta_fast", 32.0},
      {"beta_slow", 1.0},    {"truncate", false}, {"original_max_position_embeddings", 4096}};
  return *yarn;
}

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  absl::StatusOr<bool> bias = json.BoolOr("attention_bias", true);
  if (!bias.ok()) return bias.status();
  config.set_attention_bias(*bias);
  // sliding_window: absent 128; null means no window (then no layer may slide).
  absl::StatusOr<int64_t> window = json.Has("sliding_window")
                                       ? json.PositiveIntOr("sliding_window", 0)
                                       : absl::StatusOr<int64_t>(128);
  if (!window.ok()) return window.status();
  std::vector<bool> sliding(config.num_layers());
  for (int64_t layer = 0; layer < config.num_layers(); ++layer) sliding[layer] = layer % 2 == 0;
  if (absl::Status status = ReadLayerWindows(json, sliding, *window, config); !status.ok())
    return status;
  if (!json.HasValue("rope_parameters") && !json.HasValue("rope_scaling")) {
    ConfigReader yarn(DefaultYarn(), json.path() + ": the default rope_parameters");
    if (absl::Status status = ParseRopeParameters(
            json, "rope_parameters", yarn, config.mutable_rope(), config.max_position_embeddings());
        !status.ok())
      return status;
  }
  if (absl::Status status = ReadExpertRouting(json, 128, 4, config); !status.ok()) return status;
  llmrt::plan::MoeConfig& moe = *config.mutable_moe();
  moe.set_scoring(llmrt::plan::RouterAttrs::TOPK_SOFTMAX);
  moe.set_expert_intermediate_size(config.intermediate_size());
  moe.set_router_bias(true);
  moe.set_expert_bias(true);
  absl::StatusOr<double> alpha = json.PositiveNumberOr("swiglu_alpha", 1.702);
  if (!alpha.ok()) return alpha.status();
  absl::StatusOr<double> limit = json.PositiveNumberOr("swiglu_limit", 7.0);
  if (!limit.ok()) return limit.status();
  moe.set_swiglu_alpha(*alpha);
  moe.set_swiglu_limit(*limit);
  config.set_attention_sinks(true);
  return absl::OkStatus();
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = graph.config().attention_bias();
  attention.o_bias = graph.config().attention_bias();
  attention.sinks = true;
  blocks::MoeOptions moe;
  moe.router = "mlp.router";
  moe.stacked = true;
  blocks::PreNormDecoder(graph, attention, {}, &moe);
}

}  // namespace

extern const Family kGptOssFamily{
    "GptOssForCausalLM", {"gpt_oss", 8, 131072, -1, -1, 64, 1e-5, 150000.0}, ReadConfig, Build};

}  // namespace llmc
