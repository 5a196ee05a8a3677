// config.json reads that several families share, for their read_config functions (family.h):
// options whose field name and meaning are the same wherever transformers has them.
#ifndef LLMC_COMPILER_ARCH_FAMILY_CONFIG_H_
#define LLMC_COMPILER_ARCH_FAMILY_CONFIG_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "compiler/importer/config_reader.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// "attention_bias" (absent: false): biases on q, k, v and o_proj.
absl::Status ReadAttentionBias(const ConfigReader& json, llmrt::plan::ModelConfig& config);

// ReadAttentionBias, and "mlp_bias" (absent: false): biases on gate_proj, up_proj and down_proj.
absl::Status ReadAttentionAndMlpBias(const ConfigReader& json, llmrt::plan::ModelConfig& config);

// Which layers attend through a sliding window, as transformers' masks decide it: config.json's
// "layer_types" when present (transformers >= 4.53 writes it), else `derived_sliding` (the
// family's rule, one entry per layer). Every "sliding_attention" layer uses `window`, which must
// then be positive (transformers raises for a sliding layer without a window). Sets
// config.sliding_window (the window, or 0 when no layer uses it) and
// config.layer_sliding_windows (one entry per layer when the layers differ, else empty).
absl::Status ReadLayerWindows(const ConfigReader& json, const std::vector<bool>& derived_sliding,
                              int64_t window, llmrt::plan::ModelConfig& config);

// Qwen2's and Qwen2-MoE's layer windows: the window is sliding_window (absent: 4096; null:
// none) when use_sliding_window (absent: false), else there is none (real configs carry
// sliding_window with use_sliding_window false); without layer_types, layer i uses it when
// slides(i, max_window_layers) (absent: 28). Then as ReadLayerWindows.
absl::Status ReadQwen2LayerWindows(const ConfigReader& json,
                                   bool (*slides)(int64_t layer, int64_t max_window_layers),
                                   llmrt::plan::ModelConfig& config);

// Mixture of experts. num_experts (or its alias num_local_experts: transformers' attribute_map;
// both present must agree, absent: `default_experts`) and num_experts_per_tok (absent:
// `default_top_k`; 1..num_experts) into config.moe, with SOFTMAX_TOPK scoring.
absl::Status ReadExpertRouting(const ConfigReader& json, int64_t default_experts,
                               int64_t default_top_k, llmrt::plan::ModelConfig& config);

// Qwen2-MoE's and Qwen3-MoE's fields: ReadExpertRouting, moe_intermediate_size,
// norm_topk_prob (false), decoder_sparse_step (1) and mlp_only_layers ([]).
absl::Status ReadMoeConfig(const ConfigReader& json, int64_t default_experts, int64_t default_top_k,
                           int64_t default_expert_size, llmrt::plan::ModelConfig& config);

// Whether `layer` has a mixture of experts (else a dense FFN): num_experts > 0, (layer + 1) a
// multiple of decoder_sparse_step (0: 1) and layer not in dense_layers (mlp_only_layers).
bool LayerIsMoe(const llmrt::plan::ModelConfig& config, int64_t layer);

// The window of `layer` (0: full causal attention), from the fields ReadLayerWindows sets.
int64_t LayerSlidingWindow(const llmrt::plan::ModelConfig& config, int64_t layer);

// Whether `layer` rotates q and k (false for the layers in config.layers_without_rope).
bool LayerHasRope(const llmrt::plan::ModelConfig& config, int64_t layer);

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_FAMILY_CONFIG_H_
