#include "runtime/backend/testing/tiny_llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "runtime/backend/testing/reference_program.h"
#include "runtime/plan/dtype.h"

namespace llmrt::testing {

std::vector<uint8_t> EncodeAs(plan::DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  if (dtype == plan::F32) {
    bytes.resize(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  }
  std::vector<uint16_t> halves(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    halves[i] = dtype == plan::F16 ? plan::F32ToF16(values[i]) : plan::F32ToBf16(values[i]);
  }
  bytes.resize(halves.size() * 2);
  std::memcpy(bytes.data(), halves.data(), bytes.size());
  return bytes;
}

std::vector<float> DecodeFrom(plan::DType dtype, const std::vector<uint8_t>& bytes) {
  if (dtype == plan::F32) {
    std::vector<float> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), bytes.size());
    return values;
  }
  std::vector<uint16_t> halves(bytes.size() / 2);
  std::memcpy(halves.data(), bytes.data(), bytes.size());
  std::vector<float> values(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) {
    values[i] = dtype == plan::F16 ? plan::F16ToF32(halves[i]) : plan::Bf16ToF32(halves[i]);
  }
  return values;
}

std::vector<double> ReferenceInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim) {
  // The formulas run over the rotated dims (partial rotary: the first rotary_dim of a head).
  if (rope.rotary_dim() > 0) head_dim = rope.rotary_dim();
  std::vector<double> inv_freq(head_dim / 2);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = 1.0 / std::pow(rope.theta(), 2.0 * i / head_dim);
  }
  if (rope.scaling() == plan::RopeConfig::LONGROPE) {
    // LongRoPE (arXiv 2402.13753): each frequency divided by its searched rescale factor.
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] /= rope.ext_factors(i);
  } else if (rope.scaling() == plan::RopeConfig::LINEAR) {
    for (double& frequency : inv_freq) frequency /= rope.factor();
  } else if (rope.scaling() == plan::RopeConfig::LLAMA3) {
    const double old_context = static_cast<double>(rope.original_max_position_embeddings());
    const double low_wavelength = old_context / rope.low_freq_factor();
    const double high_wavelength = old_context / rope.high_freq_factor();
    for (double& frequency : inv_freq) {
      const double wavelength = 2.0 * M_PI / frequency;
      if (wavelength < high_wavelength) continue;  // high frequency: unchanged
      if (wavelength > low_wavelength) {
        frequency /= rope.factor();  // low frequency: fully scaled
        continue;
      }
      const double smooth = (old_context / wavelength - rope.low_freq_factor()) /
                            (rope.high_freq_factor() - rope.low_freq_factor());
      frequency = (1.0 - smooth) * frequency / rope.factor() + smooth * frequency;
    }
  } else if (rope.scaling() == plan::RopeConfig::YARN) {
    // YaRN (arXiv 2309.00071, section 3.2): dimension d rotates old_context * inv_freq[d] / 2pi
    // times over the original context; dimensions between beta_slow and beta_fast rotations
    // blend interpolation (divided by factor) into extrapolation linearly in d.
    const double old_context = static_cast<double>(rope.original_max_position_embeddings());
    auto dimension_of = [&](double rotations) {
      return head_dim * std::log(old_context / (rotations * 2.0 * M_PI)) /
             (2.0 * std::log(rope.theta()));
    };
    double low = dimension_of(rope.beta_fast()), high = dimension_of(rope.beta_slow());
    if (!rope.untruncated()) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, head_dim - 1.0);
    if (low == high) high += 0.001;
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      const double interpolation_weight = std::clamp((i - low) / (high - low), 0.0, 1.0);
      inv_freq[i] = interpolation_weight * inv_freq[i] / rope.factor() +
                    (1.0 - interpolation_weight) * inv_freq[i];
    }
  }
  return inv_freq;
}

namespace {

class Builder {
 public:
  explicit Builder(const TinyLlamaOptions& options) : options_(options), random_(options.seed) {}

  int32_t Value(plan::Value::Kind kind, int64_t width, const std::string& name) {
    plan::Value* value = model_.meta.mutable_program()->add_values();
    value->set_kind(kind);
    value->set_width(width);
    value->set_name(name);
    if (kind == plan::Value::ACTIVATION) {
      value->set_dtype(plan::F32);
      value->set_arena_offset_per_token(arena_per_token_);
      arena_per_token_ += width * 4;
    }
    return model_.meta.program().values_size() - 1;
  }

  int32_t Tensor(const std::string& name, plan::DType dtype, std::vector<int64_t> shape,
                 float scale, float center = 0.0f) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    std::uniform_real_distribution<float> uniform(-scale, scale);
    std::vector<float> values(count);
    for (float& value : values) value = center + uniform(random_);
    plan::Tensor* tensor = model_.meta.add_tensors();
    tensor->set_name(name);
    tensor->set_dtype(dtype);
    for (int64_t dim : shape) tensor->add_shape(dim);
    model_.blobs.push_back(EncodeAs(dtype, values));
    tensor->set_size_bytes(model_.blobs.back().size());
    return model_.meta.tensors_size() - 1;
  }

  plan::Op* AddOp(plan::OpKind kind, std::vector<int32_t> inputs, std::vector<int32_t> outputs,
                  std::vector<int32_t> weights) {
    plan::Op* op = model_.meta.mutable_program()->add_ops();
    op->set_kind(kind);
    for (int32_t id : inputs) op->add_inputs(id);
    for (int32_t id : outputs) op->add_outputs(id);
    for (int32_t id : weights) op->add_weights(id);
    return op;
  }

  TinyLlama Build() {
    const TinyLlamaOptions& o = options_;
    const plan::DType wd = o.weight_dtype;
    const int64_t q_width = int64_t{o.num_heads} * o.head_dim;
    const int64_t kv_width = int64_t{o.num_kv_heads} * o.head_dim;
    plan::RopeConfig rope = o.rope;
    if (rope.theta() == 0.0) rope.set_theta(10000.0);

    plan::ModelConfig* config = model_.meta.mutable_config();
    config->set_architecture("LlamaForCausalLM");
    config->set_model_type("llama");
    config->set_vocab_size(o.vocab_size);
    config->set_hidden_size(o.hidden_size);
    config->set_intermediate_size(o.intermediate_size);
    config->set_num_layers(o.num_layers);
    config->set_num_attention_heads(o.num_heads);
    config->set_num_kv_heads(o.num_kv_heads);
    config->set_head_dim(o.head_dim);
    config->set_max_position_embeddings(256);
    config->set_rms_norm_eps(o.rms_norm_eps);
    *config->mutable_rope() = rope;
    config->set_sliding_window(o.sliding_window);
    config->set_attention_bias(o.qkv_bias);
    config->set_tie_word_embeddings(o.tie_embeddings);
    config->set_hidden_act("silu");
    model_.meta.set_weight_dtype(wd);
    model_.meta.mutable_generation()->set_bos_token_id(1);
    model_.meta.mutable_generation()->add_eos_token_ids(2);
    plan::KvCacheSpec* kv = model_.meta.mutable_kv_cache();
    kv->set_num_layers(o.num_layers);
    kv->set_num_kv_heads(o.num_kv_heads);
    kv->set_head_dim(o.head_dim);
    kv->set_dtype(plan::F32);
    kv->set_default_block_size(16);

    const int32_t tokens = Value(plan::Value::TOKEN_IDS, 1, "token_ids");
    const int32_t positions = Value(plan::Value::POSITIONS, 1, "positions");
    const int32_t logits = Value(plan::Value::LOGITS, o.vocab_size, "logits");
    const int32_t embed_table =
        Tensor("model.embed_tokens.weight", wd, {o.vocab_size, o.hidden_size}, 1.0f);
    int32_t residual = Value(plan::Value::ACTIVATION, o.hidden_size, "embed");
    AddOp(plan::EMBED, {tokens}, {residual}, {embed_table});

    // Adds `delta` into the residual stream and normalizes: one fused op or ADD + RMS_NORM.
    auto add_norm = [&](int32_t delta, int32_t gamma, const std::string& name) {
      const int32_t sum = Value(plan::Value::ACTIVATION, o.hidden_size, name + ".residual");
      const int32_t normed = Value(plan::Value::ACTIVATION, o.hidden_size, name + ".normed");
      if (o.fused) {
        AddOp(plan::FUSED_ADD_RMS_NORM, {residual, delta}, {sum, normed}, {gamma})
            ->mutable_norm()
            ->set_eps(o.rms_norm_eps);
      } else {
        AddOp(plan::ADD, {residual, delta}, {sum}, {});
        AddOp(plan::RMS_NORM, {sum}, {normed}, {gamma})->mutable_norm()->set_eps(o.rms_norm_eps);
      }
      residual = sum;
      return normed;
    };

    int32_t mlp_out = -1;
    for (int32_t layer = 0; layer < o.num_layers; ++layer) {
      const std::string prefix = "model.layers." + std::to_string(layer) + ".";
      const int32_t input_norm =
          Tensor(prefix + "input_layernorm.weight", plan::F32, {o.hidden_size}, 0.2f, 1.0f);
      int32_t normed;
      if (layer == 0) {
        normed = Value(plan::Value::ACTIVATION, o.hidden_size, prefix + "normed");
        AddOp(plan::RMS_NORM, {residual}, {normed}, {input_norm})
            ->mutable_norm()
            ->set_eps(o.rms_norm_eps);
      } else {
        normed = add_norm(mlp_out, input_norm, prefix + "input");
      }
      const int32_t q = Value(plan::Value::ACTIVATION, q_width, prefix + "q");
      const int32_t k = Value(plan::Value::ACTIVATION, kv_width, prefix + "k");
      const int32_t v = Value(plan::Value::ACTIVATION, kv_width, prefix + "v");
      const float projection_scale = 1.0f / std::sqrt(static_cast<float>(o.hidden_size));
      if (o.fused) {
        std::vector<int32_t> weights = {Tensor(prefix + "self_attn.qkv_proj.weight", wd,
                                               {q_width + 2 * kv_width, o.hidden_size},
                                               2 * projection_scale)};
        if (o.qkv_bias) {
          weights.push_back(Tensor(prefix + "self_attn.qkv_proj.bias", plan::F32,
                                   {q_width + 2 * kv_width}, 0.3f));
        }
        AddOp(plan::MATMUL, {normed}, {q, k, v}, weights);
      } else {
        const char* names[3] = {"q", "k", "v"};
        const int32_t outs[3] = {q, k, v};
        const int64_t widths[3] = {q_width, kv_width, kv_width};
        for (int i = 0; i < 3; ++i) {
          std::vector<int32_t> weights = {Tensor(prefix + "self_attn." + names[i] + "_proj.weight",
                                                 wd, {widths[i], o.hidden_size},
                                                 2 * projection_scale)};
          if (o.qkv_bias) {
            weights.push_back(Tensor(prefix + "self_attn." + names[i] + "_proj.bias", plan::F32,
                                     {widths[i]}, 0.3f));
          }
          AddOp(plan::MATMUL, {normed}, {outs[i]}, weights);
        }
      }
      int32_t q_in = q, k_in = k;
      if (o.qk_norm) {
        q_in = Value(plan::Value::ACTIVATION, q_width, prefix + "q_normed");
        k_in = Value(plan::Value::ACTIVATION, kv_width, prefix + "k_normed");
        AddOp(plan::RMS_NORM, {q}, {q_in},
              {Tensor(prefix + "self_attn.q_norm.weight", plan::F32, {o.head_dim}, 0.2f, 1.0f)})
            ->mutable_norm()
            ->set_eps(o.rms_norm_eps);
        AddOp(plan::RMS_NORM, {k}, {k_in},
              {Tensor(prefix + "self_attn.k_norm.weight", plan::F32, {o.head_dim}, 0.2f, 1.0f)})
            ->mutable_norm()
            ->set_eps(o.rms_norm_eps);
      }
      const int32_t q_rotated = Value(plan::Value::ACTIVATION, q_width, prefix + "q_rope");
      const int32_t k_rotated = Value(plan::Value::ACTIVATION, kv_width, prefix + "k_rope");
      plan::Op* rope_q = AddOp(plan::ROPE, {q_in, positions}, {q_rotated}, {});
      rope_q->mutable_rope()->set_num_heads(o.num_heads);
      rope_q->mutable_rope()->set_head_dim(o.head_dim);
      *rope_q->mutable_rope()->mutable_config() = rope;
      plan::Op* rope_k = AddOp(plan::ROPE, {k_in, positions}, {k_rotated}, {});
      rope_k->mutable_rope()->set_num_heads(o.num_kv_heads);
      rope_k->mutable_rope()->set_head_dim(o.head_dim);
      *rope_k->mutable_rope()->mutable_config() = rope;
      const int32_t attention = Value(plan::Value::ACTIVATION, q_width, prefix + "attention");
      plan::Op* attend = AddOp(plan::ATTENTION, {q_rotated, k_rotated, v}, {attention}, {});
      attend->mutable_attention()->set_layer(layer);
      attend->mutable_attention()->set_num_heads(o.num_heads);
      attend->mutable_attention()->set_num_kv_heads(o.num_kv_heads);
      attend->mutable_attention()->set_head_dim(o.head_dim);
      attend->mutable_attention()->set_sliding_window(o.sliding_window);
      attend->mutable_attention()->set_scale(1.0 / std::sqrt(static_cast<double>(o.head_dim)));
      const int32_t attention_out = Value(plan::Value::ACTIVATION, o.hidden_size, prefix + "o");
      AddOp(plan::MATMUL, {attention}, {attention_out},
            {Tensor(prefix + "self_attn.o_proj.weight", wd, {o.hidden_size, q_width},
                    1.0f / std::sqrt(static_cast<float>(q_width)))});
      const int32_t post_norm = Tensor(prefix + "post_attention_layernorm.weight", plan::F32,
                                       {o.hidden_size}, 0.2f, 1.0f);
      const int32_t mlp_in = add_norm(attention_out, post_norm, prefix + "post_attention");
      const int32_t gate = Value(plan::Value::ACTIVATION, o.intermediate_size, prefix + "gate");
      const int32_t up = Value(plan::Value::ACTIVATION, o.intermediate_size, prefix + "up");
      const int32_t activated =
          Value(plan::Value::ACTIVATION, o.intermediate_size, prefix + "activated");
      if (o.fused) {
        AddOp(plan::MATMUL, {mlp_in}, {gate, up},
              {Tensor(prefix + "mlp.gate_up_proj.weight", wd,
                      {2 * o.intermediate_size, o.hidden_size}, 2 * projection_scale)});
        AddOp(plan::SILU_MUL, {gate, up}, {activated}, {});
      } else {
        AddOp(plan::MATMUL, {mlp_in}, {gate},
              {Tensor(prefix + "mlp.gate_proj.weight", wd, {o.intermediate_size, o.hidden_size},
                      2 * projection_scale)});
        AddOp(plan::MATMUL, {mlp_in}, {up},
              {Tensor(prefix + "mlp.up_proj.weight", wd, {o.intermediate_size, o.hidden_size},
                      2 * projection_scale)});
        const int32_t silu = Value(plan::Value::ACTIVATION, o.intermediate_size, prefix + "silu");
        AddOp(plan::SILU, {gate}, {silu}, {});
        AddOp(plan::MUL, {silu, up}, {activated}, {});
      }
      mlp_out = Value(plan::Value::ACTIVATION, o.hidden_size, prefix + "mlp_out");
      AddOp(plan::MATMUL, {activated}, {mlp_out},
            {Tensor(prefix + "mlp.down_proj.weight", wd, {o.hidden_size, o.intermediate_size},
                    1.0f / std::sqrt(static_cast<float>(o.intermediate_size)))});
    }
    const int32_t final_norm = Tensor("model.norm.weight", plan::F32, {o.hidden_size}, 0.2f, 1.0f);
    const int32_t final_normed = add_norm(mlp_out, final_norm, "model.norm");
    const int32_t lm_head = o.tie_embeddings
                                ? embed_table
                                : Tensor("lm_head.weight", wd, {o.vocab_size, o.hidden_size}, 1.0f);
    AddOp(plan::LOGITS, {final_normed}, {logits}, {lm_head});
    model_.meta.mutable_program()->set_arena_bytes_per_token(arena_per_token_);
    model_.meta.set_producer("tiny_llama test builder");
    return std::move(model_);
  }

 private:
  TinyLlamaOptions options_;
  std::mt19937 random_;
  TinyLlama model_;
  int64_t arena_per_token_ = 0;
};

}  // namespace

TinyLlama BuildTinyLlama(const TinyLlamaOptions& options) { return Builder(options).Build(); }

BlobLookup TinyLlama::Lookup() const {
  return [this](int index) -> const uint8_t* {
    if (index < 0 || index >= static_cast<int>(blobs.size()) || blobs[index].empty()) {
      return nullptr;
    }
    return blobs[index].data();
  };
}

std::vector<float> TinyLlama::ReferenceLogits(const std::vector<int32_t>& tokens) const {
  std::vector<int32_t> positions(tokens.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  const std::vector<double> logits = ReferenceProgram(meta, Lookup(), tokens, positions);
  return std::vector<float>(logits.begin(), logits.end());
}

}  // namespace llmrt::testing
