#include "compiler/arch/blocks.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/arch/family_config.h"

namespace llmc::blocks {

Activation Embedding(ModelGraph& graph, double scale) {
  const ModelDims& dims = graph.dims();
  return graph.Embed(graph.Weight("model.embed_tokens.weight", {dims.vocab_size, dims.hidden_size}),
                     scale);
}

namespace {

// prefix + name + ".weight", and its bias when `bias` (else "").
struct Projection {
  std::string weight;
  std::string bias;
};

Projection DeclareProjection(ModelGraph& graph, const std::string& name, int64_t rows, int64_t cols,
                             bool bias, const char* because) {
  Projection projection;
  projection.weight = graph.Weight(name + ".weight", {rows, cols});
  if (bias) projection.bias = graph.Weight(name + ".bias", {rows}, because);
  return projection;
}

Activation Project(ModelGraph& graph, Activation x, const std::string& name, int64_t rows,
                   bool bias, const char* because) {
  Projection projection = DeclareProjection(graph, name, rows, x.width, bias, because);
  return graph.Matmul(x, projection.weight, projection.bias);
}

const char* AttentionBiasOption(const ModelGraph& graph) {
  return graph.config().attention_bias() ? "attention_bias=true" : "";
}

}  // namespace

Activation SelfAttention(ModelGraph& graph, Activation x, int64_t layer,
                         const AttentionOptions& options) {
  const ModelDims& dims = graph.dims();
  const std::string prefix = ModelGraph::LayerPrefix(layer) + "self_attn.";
  const char* because = AttentionBiasOption(graph);
  Activation q, k, v;
  if (options.fused_qkv) {
    // Three row slices of the checkpoint's qkv_proj, which FuseQkv fuses back into one matmul.
    const std::string qkv =
        graph.Weight(prefix + "qkv_proj.weight", {dims.q_width() + 2 * dims.kv_width(), x.width});
    q = graph.Matmul(x, graph.RowSlice(qkv, 0, dims.q_width()), "");
    k = graph.Matmul(x, graph.RowSlice(qkv, dims.q_width(), dims.kv_width()), "");
    v = graph.Matmul(x, graph.RowSlice(qkv, dims.q_width() + dims.kv_width(), dims.kv_width()), "");
  } else {
    q = Project(graph, x, prefix + "q_proj", dims.q_width(), options.qkv_bias, because);
    k = Project(graph, x, prefix + "k_proj", dims.kv_width(), options.qkv_bias, because);
    v = Project(graph, x, prefix + "v_proj", dims.kv_width(), options.qkv_bias, because);
  }
  if (options.qk_norm != QkNorm::kNone) {
    // RmsNorm normalizes each group of the weight's length: a head, or the whole row.
    const bool per_head = options.qk_norm == QkNorm::kPerHead;
    q = graph.RmsNorm(
        q, graph.Weight(prefix + "q_norm.weight", {per_head ? dims.head_dim : dims.q_width()}),
        options.norm_offset);
    k = graph.RmsNorm(
        k, graph.Weight(prefix + "k_norm.weight", {per_head ? dims.head_dim : dims.kv_width()}),
        options.norm_offset);
  }
  const llmrt::plan::ModelConfig& config = graph.config();
  AttentionAttrs attrs;
  attrs.layer = layer;
  attrs.sliding_window = LayerSlidingWindow(config, layer);
  // Gemma 3's sliding layers rotate with their own rope (rope_local_base_freq).
  const llmrt::plan::RopeConfig& rope = attrs.sliding_window > 0 && config.has_sliding_layer_rope()
                                            ? config.sliding_layer_rope()
                                            : config.rope();
  if (LayerHasRope(config, layer)) {
    q = graph.Rope(q, dims.num_heads, rope, prefix + "rope_q");
    k = graph.Rope(k, dims.num_kv_heads, rope, prefix + "rope_k");
  }
  const double scale_base = config.query_pre_attn_scalar() > 0 ? config.query_pre_attn_scalar()
                                                               : static_cast<double>(dims.head_dim);
  attrs.scale = 1.0 / std::sqrt(scale_base);
  attrs.logit_softcap = config.attn_logit_softcapping();
  // YaRN scales cos and sin, so q and k, by attention_factor: the logits by its square. A layer
  // without rope has no cos/sin to scale (SmolLM3's NoPE layers skip apply_rotary_pos_emb).
  if (rope.scaling() == llmrt::plan::RopeConfig::YARN && LayerHasRope(config, layer))
    attrs.scale *= rope.attention_factor() * rope.attention_factor();
  if (options.sinks) attrs.sinks = graph.Weight(prefix + "sinks", {dims.num_heads});
  Activation attention = graph.Attention(q, k, v, attrs, prefix.substr(0, prefix.size() - 1));
  return Project(graph, attention, prefix + "o_proj", dims.hidden_size, options.o_bias, because);
}

namespace {

// act(gate) * up with the config's hidden_act (hf_config.cc admits only these).
Activation GatedActivation(ModelGraph& graph, Activation gate, Activation up,
                           const std::string& prefix) {
  return graph.config().hidden_act() == "gelu_pytorch_tanh"
             ? graph.GeluTanhMul(gate, up, prefix + "act_mul")
             : graph.Mul(graph.Silu(gate, prefix + "act"), up, prefix + "mul");
}

// down_proj(act(gate_proj(x)) * up_proj(x)) with the projections under `prefix` ("...mlp.").
Activation GatedMlp(ModelGraph& graph, Activation x, const std::string& prefix,
                    int64_t intermediate, const FfnOptions& options) {
  const char* because = options.bias ? "mlp_bias=true" : "";
  Activation gate, up;
  if (options.fused_gate_up) {
    // transformers' chunk(2): the first half of the rows is gate, the second up.
    const std::string gate_up =
        graph.Weight(prefix + "gate_up_proj.weight", {2 * intermediate, x.width});
    gate = graph.Matmul(x, graph.RowSlice(gate_up, 0, intermediate), "");
    up = graph.Matmul(x, graph.RowSlice(gate_up, intermediate, intermediate), "");
  } else {
    gate = Project(graph, x, prefix + "gate_proj", intermediate, options.bias, because);
    up = Project(graph, x, prefix + "up_proj", intermediate, options.bias, because);
  }
  return Project(graph, GatedActivation(graph, gate, up, prefix), prefix + "down_proj",
                 graph.dims().hidden_size, options.bias, because);
}

// One expert projection's weights (and biases, or none): a name per expert.
struct ExpertProjection {
  std::vector<std::string> weights;
  std::vector<std::string> biases;
};

}  // namespace

Activation GatedFfn(ModelGraph& graph, Activation x, int64_t layer, const FfnOptions& options) {
  return GatedMlp(graph, x, ModelGraph::LayerPrefix(layer) + "mlp.", graph.dims().intermediate_size,
                  options);
}

Activation MoeFfn(ModelGraph& graph, Activation x, int64_t layer, const MoeOptions& options) {
  const llmrt::plan::MoeConfig& moe = graph.config().moe();
  const std::string prefix = ModelGraph::LayerPrefix(layer);
  const int64_t experts = moe.num_experts(), size = moe.expert_intermediate_size();
  const int64_t hidden = graph.dims().hidden_size;
  const std::string router = prefix + options.router;
  Activation logits = graph.Matmul(
      x, graph.Weight(router + ".weight", {experts, hidden}),
      moe.router_bias() ? graph.Weight(router + ".bias", {experts}, "a router bias") : "");
  RouterAttrs attrs;
  attrs.num_experts = experts;
  attrs.top_k = moe.top_k();
  attrs.scoring = moe.scoring();
  attrs.normalize = moe.normalize_top_k();
  Routing routing = graph.Router(logits, attrs, router);

  const std::string stem = prefix + options.experts;
  ExpertProjection gate, up, down;
  if (options.stacked) {
    const std::string gate_up = graph.Weight(stem + ".gate_up_proj", {experts, hidden, 2 * size});
    const std::string down_proj = graph.Weight(stem + ".down_proj", {experts, size, hidden});
    std::string gate_up_bias, down_bias;
    if (moe.expert_bias()) {
      gate_up_bias =
          graph.Weight(stem + ".gate_up_proj_bias", {experts, 2 * size}, "expert biases");
      down_bias = graph.Weight(stem + ".down_proj_bias", {experts, hidden}, "expert biases");
    }
    // x @ gate_up_proj[e]: the [N, K] matrices are its transpose; gate = columns 0::2, up 1::2.
    for (int64_t e = 0; e < experts; ++e) {
      gate.weights.push_back(graph.ExpertSlice(gate_up, e, true, 0, 2));
      up.weights.push_back(graph.ExpertSlice(gate_up, e, true, 1, 2));
      down.weights.push_back(graph.ExpertSlice(down_proj, e, true));
      if (!moe.expert_bias()) continue;
      gate.biases.push_back(graph.ExpertSlice(gate_up_bias, e, false, 0, 2));
      up.biases.push_back(graph.ExpertSlice(gate_up_bias, e, false, 1, 2));
      down.biases.push_back(graph.ExpertSlice(down_bias, e, false));
    }
  } else {
    const std::string because = absl::StrCat("num_experts=", experts);
    auto declare = [&](ExpertProjection& projection, const std::string& base,
                       const std::string& name, int64_t rows, int64_t cols) {
      projection.weights.push_back(graph.Weight(base + name + ".weight", {rows, cols}, because));
      if (moe.expert_bias())
        projection.biases.push_back(graph.Weight(base + name + ".bias", {rows}, "expert biases"));
    };
    for (int64_t e = 0; e < experts; ++e) {
      const std::string base = absl::StrCat(stem, ".", e, ".");
      declare(gate, base, options.gate, size, hidden);
      declare(up, base, options.up, size, hidden);
      declare(down, base, options.down, hidden, size);
    }
  }
  Activation gated = graph.ExpertMatmul(x, routing.ids, gate.weights, gate.biases, stem + ".gate");
  Activation upped = graph.ExpertMatmul(x, routing.ids, up.weights, up.biases, stem + ".up");
  Activation activated =
      moe.swiglu_limit() > 0
          ? graph.ClampedSwiglu(gated, upped, moe.swiglu_alpha(), moe.swiglu_limit(), stem + ".act")
          : GatedActivation(graph, gated, upped, stem + ".");
  Activation routed =
      graph.ExpertMatmul(activated, routing.ids, down.weights, down.biases, stem + ".down");
  Activation shared, shared_gate;
  if (options.shared_expert) {
    shared = GatedMlp(graph, x, prefix + "mlp.shared_expert.",
                      moe.shared_expert_intermediate_size(), {});
    shared_gate =
        graph.Matmul(x, graph.Weight(prefix + "mlp.shared_expert_gate.weight", {1, hidden}), "");
  }
  return graph.MoeCombine(routed, routing.weights, shared, shared_gate, prefix + "mlp");
}

Activation PreNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                               const AttentionOptions& attention, const FfnOptions& ffn,
                               const MoeOptions* moe) {
  const ModelDims& dims = graph.dims();
  const std::string prefix = ModelGraph::LayerPrefix(layer);
  Activation normed =
      graph.RmsNorm(x, graph.Weight(prefix + "input_layernorm.weight", {dims.hidden_size}));
  Activation h =
      graph.Add(x, SelfAttention(graph, normed, layer, attention), prefix + "residual_attn");
  Activation mlp_in = graph.RmsNorm(
      h, graph.Weight(prefix + "post_attention_layernorm.weight", {dims.hidden_size}));
  Activation mlp = moe != nullptr && LayerIsMoe(graph.config(), layer)
                       ? MoeFfn(graph, mlp_in, layer, *moe)
                       : GatedFfn(graph, mlp_in, layer, ffn);
  return graph.Add(h, mlp, prefix + "residual_mlp");
}

Activation PostNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                                const AttentionOptions& attention, const FfnOptions& ffn) {
  const ModelDims& dims = graph.dims();
  const std::string prefix = ModelGraph::LayerPrefix(layer);
  Activation attended =
      graph.RmsNorm(SelfAttention(graph, x, layer, attention),
                    graph.Weight(prefix + "post_attention_layernorm.weight", {dims.hidden_size}));
  Activation h = graph.Add(x, attended, prefix + "residual_attn");
  Activation mlp_out =
      graph.RmsNorm(GatedFfn(graph, h, layer, ffn),
                    graph.Weight(prefix + "post_feedforward_layernorm.weight", {dims.hidden_size}));
  return graph.Add(h, mlp_out, prefix + "residual_mlp");
}

Activation SandwichNormDecoderLayer(ModelGraph& graph, Activation x, int64_t layer,
                                    const AttentionOptions& attention, double norm_offset) {
  const ModelDims& dims = graph.dims();
  const std::string prefix = ModelGraph::LayerPrefix(layer);
  auto norm = [&](Activation input, const char* name) {
    return graph.RmsNorm(input, graph.Weight(prefix + name + ".weight", {dims.hidden_size}),
                         norm_offset);
  };
  Activation attended = norm(SelfAttention(graph, norm(x, "input_layernorm"), layer, attention),
                             "post_attention_layernorm");
  Activation h = graph.Add(x, attended, prefix + "residual_attn");
  Activation mlp_out = norm(GatedFfn(graph, norm(h, "pre_feedforward_layernorm"), layer, {}),
                            "post_feedforward_layernorm");
  return graph.Add(h, mlp_out, prefix + "residual_mlp");
}

void FinalNormAndLogits(ModelGraph& graph, Activation x, double norm_offset) {
  const ModelDims& dims = graph.dims();
  Activation normed =
      graph.RmsNorm(x, graph.Weight("model.norm.weight", {dims.hidden_size}), norm_offset);
  const double softcap = graph.config().final_logit_softcapping();
  if (graph.config().tie_word_embeddings()) {
    graph.Ignore("lm_head.weight", {dims.vocab_size, dims.hidden_size});
    graph.Logits(normed, "model.embed_tokens.weight", softcap);
  } else {
    graph.Logits(normed,
                 graph.Weight("lm_head.weight", {dims.vocab_size, dims.hidden_size},
                              "tie_word_embeddings=false"),
                 softcap);
  }
}

namespace {

// Embedding, decoder_layer(x, layer) for every layer, final norm and logits.
template <typename DecoderLayer>
void Decoder(ModelGraph& graph, DecoderLayer decoder_layer) {
  Activation x = Embedding(graph);
  for (int64_t layer = 0; layer < graph.dims().num_layers; ++layer) x = decoder_layer(x, layer);
  FinalNormAndLogits(graph, x);
}

}  // namespace

void PreNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn,
                    const MoeOptions* moe) {
  Decoder(graph, [&](Activation x, int64_t layer) {
    return PreNormDecoderLayer(graph, x, layer, attention, ffn, moe);
  });
}

void LlamaDecoder(ModelGraph& graph) {
  AttentionOptions attention;
  attention.qkv_bias = attention.o_bias = graph.config().attention_bias();
  FfnOptions ffn;
  ffn.bias = graph.config().mlp_bias();
  PreNormDecoder(graph, attention, ffn);
}

void PostNormDecoder(ModelGraph& graph, const AttentionOptions& attention, const FfnOptions& ffn) {
  Decoder(graph, [&](Activation x, int64_t layer) {
    return PostNormDecoderLayer(graph, x, layer, attention, ffn);
  });
}

void GemmaDecoder(ModelGraph& graph, const AttentionOptions& attention, const GemmaOptions& gemma) {
  // transformers multiplies by torch.tensor(hidden_size ** 0.5) cast to the embedding dtype;
  // EMBED rounds the scale to the table's dtype the same way (plan.proto EmbedAttrs).
  Activation x = Embedding(
      graph, gemma.scale_embeddings ? std::sqrt(static_cast<double>(graph.dims().hidden_size)) : 0);
  for (int64_t layer = 0; layer < graph.dims().num_layers; ++layer)
    x = SandwichNormDecoderLayer(graph, x, layer, attention, gemma.norm_offset);
  FinalNormAndLogits(graph, x, gemma.norm_offset);
}

}  // namespace llmc::blocks
