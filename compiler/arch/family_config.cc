#include "compiler/arch/family_config.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "runtime/plan/program_check.h"

namespace llmc {

using llmrt::plan::ModelConfig;

namespace {

absl::Status ReadBool(const ConfigReader& json, const char* field, ModelConfig& config,
                      void (ModelConfig::*set)(bool)) {
  absl::StatusOr<bool> value = json.BoolOr(field, false);
  if (!value.ok()) return value.status();
  (config.*set)(*value);
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadAttentionBias(const ConfigReader& json, ModelConfig& config) {
  return ReadBool(json, "attention_bias", config, &ModelConfig::set_attention_bias);
}

absl::Status ReadAttentionAndMlpBias(const ConfigReader& json, ModelConfig& config) {
  if (absl::Status status = ReadAttentionBias(json, config); !status.ok()) return status;
  return ReadBool(json, "mlp_bias", config, &ModelConfig::set_mlp_bias);
}

absl::Status ReadLayerWindows(const ConfigReader& json, const std::vector<bool>& derived_sliding,
                              int64_t window, ModelConfig& config) {
  std::vector<bool> sliding = derived_sliding;
  if (json.HasValue("layer_types")) {
    const ConfigReader::Json& types = json.Get("layer_types");
    const std::string expected =
        absl::StrFormat("a list of num_hidden_layers (%d) layer types", config.num_layers());
    if (!types.is_array() || static_cast<int64_t>(types.size()) != config.num_layers())
      return json.Error("layer_types", expected.c_str());
    for (size_t layer = 0; layer < types.size(); ++layer) {
      const std::string type = types[layer].is_string() ? types[layer].get<std::string>() : "";
      // "attention" is the legacy name transformers still maps to full_attention.
      if (type == "full_attention" || type == "attention") {
        sliding[layer] = false;
      } else if (type == "sliding_attention") {
        sliding[layer] = true;
      } else {
        return json.Unsupported(
            "layer_types",
            absl::StrFormat("entry %d is %s; supported: \"full_attention\", \"sliding_attention\"",
                            layer, types[layer].dump()));
      }
    }
  }
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  if (any_sliding && window <= 0)
    return json.Error("sliding_window",
                      "a positive integer (layer_types has sliding_attention "
                      "layers, which need a window)");
  config.set_sliding_window(any_sliding ? window : 0);
  config.clear_layer_sliding_windows();
  if (std::find(sliding.begin(), sliding.end(), false) != sliding.end() && any_sliding) {
    for (bool layer_slides : sliding) config.add_layer_sliding_windows(layer_slides ? window : 0);
  }
  return absl::OkStatus();
}

absl::Status ReadQwen2LayerWindows(const ConfigReader& json,
                                   bool (*slides)(int64_t layer, int64_t max_window_layers),
                                   ModelConfig& config) {
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
    sliding[layer] = window > 0 && slides(layer, *max_window_layers);
  return ReadLayerWindows(json, sliding, window, config);
}

absl::Status ReadExpertRouting(const ConfigReader& json, int64_t default_experts,
                               int64_t default_top_k, ModelConfig& config) {
  llmrt::plan::MoeConfig& moe = *config.mutable_moe();
  absl::StatusOr<int64_t> experts = json.PositiveIntOr("num_experts", default_experts);
  if (!experts.ok()) return experts.status();
  absl::StatusOr<int64_t> local = json.PositiveIntOr("num_local_experts", *experts);
  if (!local.ok()) return local.status();
  if (json.HasValue("num_experts") && *local != *experts)
    return json.Error(
        "num_local_experts",
        absl::StrFormat("the same as num_experts (%d): both name the expert count", *experts)
            .c_str());
  absl::StatusOr<int64_t> top_k = json.PositiveIntOr("num_experts_per_tok", default_top_k);
  if (!top_k.ok()) return top_k.status();
  if (*local > llmrt::plan::kMaxExperts)
    return json.Error(json.HasValue("num_local_experts") ? "num_local_experts" : "num_experts",
                      "at most 1024 experts (the plan format's bound)");
  if (*top_k > *local)
    return json.Error("num_experts_per_tok",
                      absl::StrFormat("at most the number of experts (%d)", *local).c_str());
  moe.set_num_experts(*local);
  moe.set_top_k(*top_k);
  moe.set_scoring(llmrt::plan::RouterAttrs::SOFTMAX_TOPK);
  return absl::OkStatus();
}

absl::Status ReadMoeConfig(const ConfigReader& json, int64_t default_experts, int64_t default_top_k,
                           int64_t default_expert_size, ModelConfig& config) {
  if (absl::Status status = ReadExpertRouting(json, default_experts, default_top_k, config);
      !status.ok())
    return status;
  llmrt::plan::MoeConfig& moe = *config.mutable_moe();
  absl::StatusOr<int64_t> expert_size =
      json.PositiveIntOr("moe_intermediate_size", default_expert_size);
  if (!expert_size.ok()) return expert_size.status();
  moe.set_expert_intermediate_size(*expert_size);
  absl::StatusOr<bool> normalize = json.BoolOr("norm_topk_prob", false);
  if (!normalize.ok()) return normalize.status();
  moe.set_normalize_top_k(*normalize);
  absl::StatusOr<int64_t> step = json.PositiveIntOr("decoder_sparse_step", 1);
  if (!step.ok()) return step.status();
  moe.set_decoder_sparse_step(*step);
  if (json.HasValue("mlp_only_layers")) {
    const ConfigReader::Json& layers = json.Get("mlp_only_layers");
    if (!layers.is_array()) return json.Error("mlp_only_layers", "a list of layer indices");
    // transformers tests membership only, so an index past the last layer is harmless.
    for (const ConfigReader::Json& layer : layers) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0)
        return json.Error("mlp_only_layers", "a list of non-negative layer indices");
      moe.add_dense_layers(layer.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

bool LayerIsMoe(const ModelConfig& config, int64_t layer) {
  const llmrt::plan::MoeConfig& moe = config.moe();
  if (moe.num_experts() <= 0) return false;
  const int64_t step = std::max<int64_t>(moe.decoder_sparse_step(), 1);
  const auto& dense = moe.dense_layers();
  return (layer + 1) % step == 0 && std::find(dense.begin(), dense.end(), layer) == dense.end();
}

int64_t LayerSlidingWindow(const ModelConfig& config, int64_t layer) {
  const int64_t window = config.layer_sliding_windows_size() == 0
                             ? config.sliding_window()
                             : config.layer_sliding_windows(static_cast<int>(layer));
  // A window wider than any context never slides: full attention, which a plan writes as 0.
  return window > llmrt::plan::kMaxSlidingWindow ? 0 : window;
}

bool LayerHasRope(const ModelConfig& config, int64_t layer) {
  const auto& without = config.layers_without_rope();
  return std::find(without.begin(), without.end(), layer) == without.end();
}

}  // namespace llmc
