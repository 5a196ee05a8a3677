// MixtralForCausalLM (modeling_mixtral.py): Mistral's decoder (a sliding window on every layer
// when sliding_window is set) with a mixture of experts in block_sparse_moe: softmax over the
// router logits, the top num_experts_per_tok, always renormalised; expert e's w1 (gate), w3
// (up) and w2 (down) of intermediate_size. router_jitter_noise only perturbs training.
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  // MixtralConfig's sliding_window defaults to None (unlike Mistral's 4096).
  absl::StatusOr<int64_t> window = json.PositiveIntOr("sliding_window", 0);
  if (!window.ok()) return window.status();
  config.set_sliding_window(*window);
  if (absl::Status status = ReadExpertRouting(json, 8, 2, config); !status.ok()) return status;
  config.mutable_moe()->set_expert_intermediate_size(config.intermediate_size());
  config.mutable_moe()->set_normalize_top_k(true);
  return absl::OkStatus();
}

void Build(ModelGraph& graph) {
  blocks::MoeOptions moe;
  moe.router = "block_sparse_moe.gate";
  moe.experts = "block_sparse_moe.experts";
  moe.gate = "w1";
  moe.up = "w3";
  moe.down = "w2";
  blocks::PreNormDecoder(graph, {}, {}, &moe);
}

}  // namespace

extern const Family kMixtralFamily{"MixtralForCausalLM",
                                   {"mixtral", 8, 4096 * 32, 1, 2, std::nullopt, 1e-5, 1e6},
                                   ReadConfig,
                                   Build};

}  // namespace llmc
