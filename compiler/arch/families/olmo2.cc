// Olmo2ForCausalLM (modeling_olmo2.py): no norm before attention or the MLP, an RMSNorm on each
// of their outputs inside the residual (post_attention_layernorm, post_feedforward_layernorm),
// and q_norm / k_norm over the whole q and k projections (not per head) before rope.
// attention_bias puts a bias on q/k/v/o; the MLP never has one (Olmo2Config has no mlp_bias).
#include "compiler/arch/blocks.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"

namespace llmc {
namespace {

void Build(ModelGraph& graph) {
  blocks::AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  attention.qk_norm = blocks::QkNorm::kWholeProjection;
  blocks::PostNormDecoder(graph, attention, {});
}

}  // namespace

extern const Family kOlmo2Family{"Olmo2ForCausalLM",
                                 {"olmo2", std::nullopt, 2048, -1, 50279, std::nullopt,
                                  /*rms_norm_eps=*/1e-5, /*rope_theta=*/10000.0,
                                  /*tie_word_embeddings=*/false, /*pad_token_id=*/1},
                                 ReadAttentionBias,
                                 Build};

}  // namespace llmc
