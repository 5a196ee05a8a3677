// Gemma2ForCausalLM (modeling_gemma2.py): sandwich norms whose gammas are 1 + weight, embeddings
// scaled by sqrt(hidden_size) in their dtype, GeGLU with gelu_pytorch_tanh (hidden_activation),
// attention scale query_pre_attn_scalar^-0.5, tanh soft-capping of the attention scores and of
// the final logits, sliding-window and global layers alternating (layer_types, or even layers
// sliding), head_dim 256 and tied embeddings by default.
#include <tuple>
#include <vector>

#include "compiler/arch/blocks.h"
#include "compiler/arch/families/gemma.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {

absl::Status ReadGemmaConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config,
                             double attn_softcap, double final_softcap, int64_t pattern) {
  if (absl::Status status = ReadAttentionBias(json, config); !status.ok()) return status;
  if (absl::Status status =
          json.RefuseTrue("use_bidirectional_attention", "Gemma bidirectional attention masks");
      !status.ok())
    return status;
  absl::StatusOr<double> scalar = json.PositiveNumberOr("query_pre_attn_scalar", 256.0);
  if (!scalar.ok()) return scalar.status();
  config.set_query_pre_attn_scalar(*scalar);
  for (auto [field, fallback, set] :
       {std::tuple{"attn_logit_softcapping", attn_softcap,
                   &llmrt::plan::ModelConfig::set_attn_logit_softcapping},
        std::tuple{"final_logit_softcapping", final_softcap,
                   &llmrt::plan::ModelConfig::set_final_logit_softcapping}}) {
    // transformers tests `is not None`: an explicit null turns the cap off.
    double cap = json.Has(field) && json.Get(field).is_null() ? 0.0 : fallback;
    if (json.HasValue(field)) {
      absl::StatusOr<double> value = json.PositiveNumberOr(field, fallback);
      if (!value.ok()) return value.status();
      cap = *value;
    }
    (config.*set)(cap);
  }
  absl::StatusOr<int64_t> window = json.PositiveIntOr("sliding_window", 4096);
  if (!window.ok()) return window.status();
  std::vector<bool> sliding(config.num_layers());
  for (int64_t layer = 0; layer < config.num_layers(); ++layer)
    sliding[layer] = (layer + 1) % pattern != 0;
  return ReadLayerWindows(json, sliding, *window, config);
}

namespace {

absl::Status ReadConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config) {
  // Gemma2Config: layer_types default to sliding on even layers (pattern 2).
  return ReadGemmaConfig(json, config, 50.0, 30.0, 2);
}

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  blocks::GemmaDecoder(graph, attention, {});
}

}  // namespace

extern const Family kGemma2Family{
    "Gemma2ForCausalLM",
    {"gemma2", 4, 8192, 2, 1, /*head_dim=*/256,
     /*rms_norm_eps=*/1e-6, /*rope_theta=*/10000.0,
     /*tie_word_embeddings=*/true, /*pad_token_id=*/0, "hidden_activation", "gelu_pytorch_tanh"},
    ReadConfig,
    Build};

}  // namespace llmc
