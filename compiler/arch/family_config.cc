#include "compiler/arch/family_config.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"

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

int64_t LayerSlidingWindow(const ModelConfig& config, int64_t layer) {
  if (config.layer_sliding_windows_size() == 0) return config.sliding_window();
  return config.layer_sliding_windows(static_cast<int>(layer));
}

bool LayerHasRope(const ModelConfig& config, int64_t layer) {
  const auto& without = config.layers_without_rope();
  return std::find(without.begin(), without.end(), layer) == without.end();
}

}  // namespace llmc
