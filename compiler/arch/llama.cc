// The Llama-family builder (Llama, Mistral, Qwen2); see arch.h.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/arch/arch.h"
#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

namespace llmc {
namespace {

using llmrt::plan::ModelConfig;

constexpr const char* kSupportedArchitectures[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                                   "Qwen2ForCausalLM"};

// The config with defaults resolved the way transformers resolves them.
struct Dims {
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t intermediate_size;
  int64_t num_layers;
  int64_t num_heads;
  int64_t num_kv_heads;  // num_key_value_heads; absent in old configs: = num_heads (MHA)
  int64_t head_dim;      // absent: hidden_size / num_heads
};

struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool per_layer;
};

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<Dims> CheckConfig(const ModelConfig& config) {
  bool supported = false;
  for (const char* architecture : kSupportedArchitectures)
    supported |= config.architecture() == architecture;
  if (!supported)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: architectures[0] is \"", config.architecture(),
                     "\"; supported: ", absl::StrJoin(kSupportedArchitectures, ", ")));
  Dims dims{config.vocab_size(), config.hidden_size(),         config.intermediate_size(),
            config.num_layers(), config.num_attention_heads(), config.num_kv_heads(),
            config.head_dim()};
  auto positive = [](const char* field, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", field, " must be positive, found ", value));
  };
  for (auto [field, value] : {std::pair<const char*, int64_t>{"vocab_size", dims.vocab_size},
                              {"hidden_size", dims.hidden_size},
                              {"intermediate_size", dims.intermediate_size},
                              {"num_hidden_layers", dims.num_layers},
                              {"num_attention_heads", dims.num_heads}}) {
    if (absl::Status status = positive(field, value); !status.ok()) return status;
  }
  if (dims.num_kv_heads == 0) dims.num_kv_heads = dims.num_heads;
  if (dims.head_dim == 0) {
    if (dims.hidden_size % dims.num_heads != 0)
      return absl::InvalidArgumentError(absl::StrCat("config.json: hidden_size (", dims.hidden_size,
                                                     ") is not a multiple of num_attention_heads (",
                                                     dims.num_heads, ") and no head_dim"));
    dims.head_dim = dims.hidden_size / dims.num_heads;
  }
  if (dims.num_kv_heads < 0 || dims.num_heads % dims.num_kv_heads != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_attention_heads (", dims.num_heads,
                     ") is not a multiple of num_key_value_heads (", dims.num_kv_heads, ")"));
  // Rotate-half pairs element i with i + head_dim / 2.
  if (dims.head_dim <= 0 || dims.head_dim % 2 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: head_dim must be positive and even, found ", dims.head_dim));
  if (!config.hidden_act().empty() && config.hidden_act() != "silu")
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: hidden_act is \"", config.hidden_act(), "\"; supported: silu"));
  if (!(config.rms_norm_eps() > 0))
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rms_norm_eps must be positive, found ", config.rms_norm_eps()));
  if (!(config.rope().theta() > 0))
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rope_theta must be positive, found ", config.rope().theta()));
  if (config.sliding_window() < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: sliding_window must not be negative, found ", config.sliding_window()));
  return dims;
}

std::string LayerPrefix(int64_t layer) { return absl::StrCat("model.layers.", layer, "."); }

// In the order the forward pass reads them.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config, const Dims& dims) {
  const int64_t hidden = dims.hidden_size, q_width = dims.num_heads * dims.head_dim,
                kv_width = dims.num_kv_heads * dims.head_dim, inter = dims.intermediate_size;
  std::vector<ExpectedTensor> expected;
  expected.push_back({"model.embed_tokens.weight", {dims.vocab_size, hidden}, false});
  for (int64_t layer = 0; layer < dims.num_layers; ++layer) {
    const std::string prefix = LayerPrefix(layer);
    auto add = [&](const std::string& suffix, std::vector<int64_t> shape) {
      expected.push_back({prefix + suffix, std::move(shape), true});
    };
    add("input_layernorm.weight", {hidden});
    add("self_attn.q_proj.weight", {q_width, hidden});
    add("self_attn.k_proj.weight", {kv_width, hidden});
    add("self_attn.v_proj.weight", {kv_width, hidden});
    if (config.attention_bias()) {
      add("self_attn.q_proj.bias", {q_width});
      add("self_attn.k_proj.bias", {kv_width});
      add("self_attn.v_proj.bias", {kv_width});
    }
    add("self_attn.o_proj.weight", {hidden, q_width});
    add("post_attention_layernorm.weight", {hidden});
    add("mlp.gate_proj.weight", {inter, hidden});
    add("mlp.up_proj.weight", {inter, hidden});
    add("mlp.down_proj.weight", {hidden, inter});
  }
  expected.push_back({"model.norm.weight", {hidden}, false});
  if (!config.tie_word_embeddings())
    expected.push_back({"lm_head.weight", {dims.vocab_size, hidden}, false});
  return expected;
}

absl::StatusOr<std::vector<ExpectedTensor>> Validate(const ModelConfig& config,
                                                     const TensorMap& tensors) {
  absl::StatusOr<Dims> dims = CheckConfig(config);
  if (!dims.ok()) return dims.status();
  std::vector<ExpectedTensor> expected = ExpectedTensors(config, *dims);
  std::map<std::string, const ExpectedTensor*> by_name;
  for (const ExpectedTensor& tensor : expected) by_name[tensor.name] = &tensor;

  for (const ExpectedTensor& want : expected) {
    auto it = tensors.find(want.name);
    if (it == tensors.end()) {
      std::string reason;
      if (want.per_layer) {
        reason = absl::StrCat("num_hidden_layers=", dims->num_layers);
        if (absl::EndsWith(want.name, ".bias")) reason += ", attention_bias=true";
      } else if (want.name == "lm_head.weight") {
        reason = "tie_word_embeddings=false";
      } else {
        reason = config.architecture();
      }
      return absl::InvalidArgumentError(
          absl::StrCat("missing tensor ", want.name, " expected by config.json (", reason, ")"));
    }
    const TensorInfo& found = it->second;
    if (found.shape != want.shape)
      return absl::InvalidArgumentError(
          absl::StrCat(found.file, ": tensor ", want.name, " has shape ", ShapeString(found.shape),
                       ", config.json implies ", ShapeString(want.shape)));
  }
  for (const auto& [name, info] : tensors) {
    if (absl::EndsWith(name, ".rotary_emb.inv_freq")) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings()) {
      const std::vector<int64_t> want = {dims->vocab_size, dims->hidden_size};
      if (info.shape != want)
        return absl::InvalidArgumentError(
            absl::StrCat(info.file, ": tensor ", name, " has shape ", ShapeString(info.shape),
                         ", config.json implies ", ShapeString(want)));
      continue;
    }
    if (!by_name.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat(info.file, ": unexpected tensor ", name, " (not part of ",
                       config.architecture(), " with num_hidden_layers=", dims->num_layers,
                       config.attention_bias() ? ", attention_bias=true" : "", ")"));
    if (info.dtype != llmrt::plan::F32 && info.dtype != llmrt::plan::F16 &&
        info.dtype != llmrt::plan::BF16)
      return absl::InvalidArgumentError(absl::StrCat(info.file, ": tensor ", name, " has dtype ",
                                                     llmrt::plan::DType_Name(info.dtype),
                                                     "; expected F32, F16 or BF16"));
  }
  return expected;
}

mlir::Type ElementType(mlir::Builder& builder, llmrt::plan::DType dtype) {
  switch (dtype) {
    case llmrt::plan::F16:
      return builder.getF16Type();
    case llmrt::plan::BF16:
      return builder.getBF16Type();
    default:
      return builder.getF32Type();
  }
}

const char* ScalingName(llmrt::plan::RopeConfig::Scaling scaling) {
  switch (scaling) {
    case llmrt::plan::RopeConfig::LINEAR:
      return "linear";
    case llmrt::plan::RopeConfig::LLAMA3:
      return "llama3";
    default:
      return "none";
  }
}

}  // namespace

absl::Status ValidateTensors(const ModelConfig& config, const TensorMap& tensors) {
  return Validate(config, tensors).status();
}

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(mlir::MLIRContext& context,
                                                              const ModelConfig& config,
                                                              const TensorMap& tensors) {
  absl::StatusOr<std::vector<ExpectedTensor>> expected = Validate(config, tensors);
  if (!expected.ok()) return expected.status();
  const Dims dims = *CheckConfig(config);
  context.loadDialect<llm::LlmDialect, mlir::func::FuncDialect>();

  mlir::OpBuilder builder(&context);
  mlir::Location unknown = builder.getUnknownLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(unknown);
  builder.setInsertionPointToEnd(module->getBody());
  for (const ExpectedTensor& tensor : *expected) {
    const TensorInfo& info = tensors.at(tensor.name);
    builder.create<llm::ParamOp>(builder.getFusedLoc({}, builder.getStringAttr(info.file)),
                                 builder.getStringAttr(tensor.name),
                                 mlir::TypeAttr::get(mlir::RankedTensorType::get(
                                     info.shape, ElementType(builder, info.dtype))));
  }

  auto token_vector =
      mlir::RankedTensorType::get({mlir::ShapedType::kDynamic}, builder.getI32Type());
  auto activation = [&](int64_t width) { return llm::getActivationType(&context, width); };
  auto function = builder.create<mlir::func::FuncOp>(
      unknown, "forward",
      builder.getFunctionType({token_vector, token_vector}, {activation(dims.vocab_size)}));
  mlir::Block* body = function.addEntryBlock();
  builder.setInsertionPointToStart(body);
  mlir::Value tokens = body->getArgument(0), positions = body->getArgument(1);

  auto symbol = [&](const std::string& name) {
    return mlir::FlatSymbolRefAttr::get(&context, name);
  };
  auto loc = [&](const std::string& name) {
    return mlir::NameLoc::get(builder.getStringAttr(name));
  };
  const mlir::FloatAttr eps = builder.getF64FloatAttr(config.rms_norm_eps());
  auto rms_norm = [&](mlir::Value x, const std::string& weight) -> mlir::Value {
    return builder.create<llm::RmsNormOp>(loc(weight), x.getType(), x, symbol(weight), eps);
  };
  auto matmul = [&](mlir::Value x, const std::string& projection, int64_t width) -> mlir::Value {
    mlir::ArrayAttr biases;
    if (config.attention_bias() && absl::StrContains(projection, "self_attn.") &&
        !absl::StrContains(projection, "o_proj"))
      biases = builder.getArrayAttr({symbol(projection + ".bias")});
    auto op = builder.create<llm::MatmulOp>(loc(projection), mlir::TypeRange{activation(width)}, x,
                                            builder.getArrayAttr({symbol(projection + ".weight")}),
                                            biases);
    return op.getResult(0);
  };
  const llmrt::plan::RopeConfig& rope_config = config.rope();
  auto rope = [&](mlir::Value x, int64_t num_heads, const std::string& name) -> mlir::Value {
    return builder.create<llm::RopeOp>(
        loc(name), x.getType(), x, positions, builder.getI64IntegerAttr(num_heads),
        builder.getI64IntegerAttr(dims.head_dim), builder.getF64FloatAttr(rope_config.theta()),
        builder.getStringAttr(ScalingName(rope_config.scaling())),
        builder.getF64FloatAttr(rope_config.scaling() == llmrt::plan::RopeConfig::SCALING_NONE
                                    ? 1.0
                                    : rope_config.factor()),
        builder.getF64FloatAttr(rope_config.low_freq_factor()),
        builder.getF64FloatAttr(rope_config.high_freq_factor()),
        builder.getI64IntegerAttr(rope_config.original_max_position_embeddings()));
  };

  const int64_t hidden = dims.hidden_size, q_width = dims.num_heads * dims.head_dim,
                kv_width = dims.num_kv_heads * dims.head_dim;
  mlir::Value x = builder.create<llm::EmbedOp>(loc("model.embed_tokens"), activation(hidden),
                                               tokens, symbol("model.embed_tokens.weight"));
  for (int64_t layer = 0; layer < dims.num_layers; ++layer) {
    const std::string prefix = LayerPrefix(layer);
    mlir::Value normed = rms_norm(x, prefix + "input_layernorm.weight");
    mlir::Value q = matmul(normed, prefix + "self_attn.q_proj", q_width);
    mlir::Value k = matmul(normed, prefix + "self_attn.k_proj", kv_width);
    mlir::Value v = matmul(normed, prefix + "self_attn.v_proj", kv_width);
    q = rope(q, dims.num_heads, prefix + "self_attn.rope_q");
    k = rope(k, dims.num_kv_heads, prefix + "self_attn.rope_k");
    mlir::Value attention = builder.create<llm::AttentionOp>(
        loc(prefix + "self_attn"), q.getType(), q, k, v, builder.getI64IntegerAttr(layer),
        builder.getI64IntegerAttr(dims.num_heads), builder.getI64IntegerAttr(dims.num_kv_heads),
        builder.getI64IntegerAttr(dims.head_dim),
        builder.getI64IntegerAttr(config.sliding_window()),
        builder.getF64FloatAttr(1.0 / std::sqrt(static_cast<double>(dims.head_dim))));
    mlir::Value attention_out = matmul(attention, prefix + "self_attn.o_proj", hidden);
    mlir::Value h =
        builder.create<llm::AddOp>(loc(prefix + "residual_attn"), x.getType(), x, attention_out);
    mlir::Value mlp_in = rms_norm(h, prefix + "post_attention_layernorm.weight");
    mlir::Value gate = matmul(mlp_in, prefix + "mlp.gate_proj", dims.intermediate_size);
    mlir::Value up = matmul(mlp_in, prefix + "mlp.up_proj", dims.intermediate_size);
    mlir::Value activated =
        builder.create<llm::SiluOp>(loc(prefix + "mlp.act"), gate.getType(), gate);
    mlir::Value product =
        builder.create<llm::MulOp>(loc(prefix + "mlp.mul"), up.getType(), activated, up);
    mlir::Value down = matmul(product, prefix + "mlp.down_proj", hidden);
    x = builder.create<llm::AddOp>(loc(prefix + "residual_mlp"), h.getType(), h, down);
  }
  mlir::Value final_norm = rms_norm(x, "model.norm.weight");
  const std::string lm_head =
      config.tie_word_embeddings() ? "model.embed_tokens.weight" : "lm_head.weight";
  mlir::Value logits = builder.create<llm::LogitsOp>(loc("lm_head"), activation(dims.vocab_size),
                                                     final_norm, symbol(lm_head));
  builder.create<mlir::func::ReturnOp>(unknown, logits);

  if (mlir::failed(mlir::verify(*module)))
    return absl::InternalError("llmc: the built module does not verify (a builder bug)");
  return module;
}

}  // namespace llmc
