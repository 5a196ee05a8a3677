// SmolLM3ForCausalLM (modeling_smollm3.py): Llama whose no_rope_layers apply no rope to q and k
// (NoPE layers), with attention_bias (q/k/v/o) and mlp_bias (gate/up/down) options and an
// optional sliding window on NoPE layers.
#include <vector>

#include "absl/strings/str_format.h"
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

// no_rope_layers: one 0 (NoPE) or 1 (rope) per layer; transformers indexes it by layer, so a
// longer list is accepted and its tail unused. Absent: every no_rope_layer_interval-th layer
// (default 4; layers 3, 7, ...) is NoPE.
absl::StatusOr<std::vector<bool>> ReadLayersWithRope(const ConfigReader& json, int64_t num_layers) {
  std::vector<bool> has_rope(num_layers);
  if (!json.HasValue("no_rope_layers")) {
    absl::StatusOr<int64_t> interval = json.PositiveIntOr("no_rope_layer_interval", 4);
    if (!interval.ok()) return interval.status();
    for (int64_t layer = 0; layer < num_layers; ++layer)
      has_rope[layer] = (layer + 1) % *interval != 0;
    return has_rope;
  }
  const ConfigReader::Json& flags = json.Get("no_rope_layers");
  const std::string expected = absl::StrFormat(
      "a list of at least num_hidden_layers (%d) entries, each 0 (no rope) or 1", num_layers);
  if (!flags.is_array() || static_cast<int64_t>(flags.size()) < num_layers)
    return json.Error("no_rope_layers", expected.c_str());
  for (int64_t layer = 0; layer < num_layers; ++layer) {
    const ConfigReader::Json& flag = flags[layer];
    if (!flag.is_number_integer() || (flag.get<int64_t>() != 0 && flag.get<int64_t>() != 1))
      return json.Error("no_rope_layers", expected.c_str());
    has_rope[layer] = flag.get<int64_t>() == 1;
  }
  return has_rope;
}

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  if (absl::Status status = ReadAttentionAndMlpBias(json, config); !status.ok()) return status;
  absl::StatusOr<std::vector<bool>> has_rope = ReadLayersWithRope(json, config.num_layers());
  if (!has_rope.ok()) return has_rope.status();
  config.clear_layers_without_rope();
  for (int64_t layer = 0; layer < config.num_layers(); ++layer) {
    if (!(*has_rope)[layer]) config.add_layers_without_rope(layer);
  }
  // SmolLM3Config: without layer_types, NoPE layers slide when use_sliding_window and
  // sliding_window is set. The mask of a sliding_attention layer (eager and sdpa attention) then
  // uses sliding_window whatever use_sliding_window says, and so do we.
  absl::StatusOr<bool> use_sliding_window = json.BoolOr("use_sliding_window", false);
  if (!use_sliding_window.ok()) return use_sliding_window.status();
  absl::StatusOr<int64_t> window = json.PositiveIntOr("sliding_window", 0);
  if (!window.ok()) return window.status();
  std::vector<bool> sliding(config.num_layers());
  for (int64_t layer = 0; layer < config.num_layers(); ++layer)
    sliding[layer] = *use_sliding_window && *window > 0 && !(*has_rope)[layer];
  return ReadLayerWindows(json, sliding, *window, config);
}

}  // namespace

extern const Family kSmolLM3Family{"SmolLM3ForCausalLM",
                                   {"smollm3", 4, 32768, 128000, 128001, std::nullopt,
                                    /*rms_norm_eps=*/1e-6, /*rope_theta=*/2000000.0,
                                    /*tie_word_embeddings=*/true, /*pad_token_id=*/128004},
                                   ReadConfig,
                                   blocks::LlamaDecoder};

}  // namespace llmc
