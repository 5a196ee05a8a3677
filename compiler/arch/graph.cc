#include "compiler/arch/graph.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/ExpertSlice.h"
#include "codegen/RowSlice.h"
#include "compiler/arch/family.h"

namespace llmc {
namespace {

using llmrt::plan::ModelConfig;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

ModelGraph::ModelGraph(const ModelConfig& config, const TensorMap* tensors)
    : config_(config), tensors_(tensors) {
  status_ = CheckConfig();
}

std::string ModelGraph::LayerPrefix(int64_t layer) {
  return absl::StrCat("model.layers.", layer, ".");
}

// The parser (hf_config.cc) already checks all of this for config.json; a ModelConfig built by
// hand (tests, llmc synth) reaches the builder directly.
absl::Status ModelGraph::CheckConfig() {
  const ModelConfig& config = config_;
  dims_ = {config.vocab_size(), config.hidden_size(),         config.intermediate_size(),
           config.num_layers(), config.num_attention_heads(), config.num_kv_heads(),
           config.head_dim()};
  for (auto [field, value] : {std::pair<const char*, int64_t>{"vocab_size", dims_.vocab_size},
                              {"hidden_size", dims_.hidden_size},
                              {"intermediate_size", dims_.intermediate_size},
                              {"num_hidden_layers", dims_.num_layers},
                              {"num_attention_heads", dims_.num_heads}}) {
    if (value <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", field, " must be positive, found ", value));
  }
  if (dims_.num_kv_heads == 0) dims_.num_kv_heads = dims_.num_heads;
  if (dims_.head_dim == 0) {
    if (dims_.hidden_size % dims_.num_heads != 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: hidden_size (", dims_.hidden_size,
          ") is not a multiple of num_attention_heads (", dims_.num_heads, ") and no head_dim"));
    dims_.head_dim = dims_.hidden_size / dims_.num_heads;
  }
  if (dims_.num_kv_heads < 0 || dims_.num_heads % dims_.num_kv_heads != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_attention_heads (", dims_.num_heads,
                     ") is not a multiple of num_key_value_heads (", dims_.num_kv_heads, ")"));
  // Rotate-half pairs element i with i + head_dim / 2.
  if (dims_.head_dim <= 0 || dims_.head_dim % 2 != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: head_dim must be positive and even, found ", dims_.head_dim));
  if (!config.hidden_act().empty() && config.hidden_act() != "silu" &&
      config.hidden_act() != "gelu_pytorch_tanh")
    return absl::InvalidArgumentError(absl::StrCat("config.json: hidden_act is \"",
                                                   config.hidden_act(),
                                                   "\"; supported: silu, gelu_pytorch_tanh"));
  if (!(config.rms_norm_eps() > 0))
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rms_norm_eps must be positive, found ", config.rms_norm_eps()));
  if (!(config.rope().theta() > 0))
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: rope_theta must be positive, found ", config.rope().theta()));
  if (config.sliding_window() < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: sliding_window must not be negative, found ", config.sliding_window()));
  if (config.layer_sliding_windows_size() != 0 &&
      config.layer_sliding_windows_size() != dims_.num_layers)
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: layer windows: expected one per layer (", dims_.num_layers,
                     "), found ", config.layer_sliding_windows_size()));
  for (int64_t window : config.layer_sliding_windows()) {
    if (window < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: a layer's sliding window must not be negative, found ", window));
  }
  for (int64_t layer : config.layers_without_rope()) {
    if (layer < 0 || layer >= dims_.num_layers)
      return absl::InvalidArgumentError(absl::StrCat("config.json: a layer without rope is ", layer,
                                                     ", outside [0, ", dims_.num_layers, ")"));
  }
  return absl::OkStatus();
}

void ModelGraph::Fail(absl::Status status) {
  if (status_.ok()) status_ = std::move(status);
}

const TensorInfo* ModelGraph::Tensor(const std::string& name) const {
  if (tensors_ == nullptr) return nullptr;
  auto it = tensors_->find(name);
  return it == tensors_->end() ? nullptr : &it->second;
}

const std::vector<int64_t>& ModelGraph::DeclaredShape(const std::string& name) const {
  static const std::vector<int64_t> kNone;
  auto it = declared_.find(name);
  if (it != declared_.end()) return it->second;
  it = slice_shapes_.find(name);
  return it == slice_shapes_.end() ? kNone : it->second;
}

std::string ModelGraph::RowSlice(const std::string& weight, int64_t first_row, int64_t rows) {
  const std::string name = rowSliceName(weight, first_row, first_row + rows);
  const std::vector<int64_t>& shape = DeclaredShape(weight);
  if (shape.size() != 2 || first_row < 0 || rows <= 0 || first_row + rows > shape[0]) {
    Fail(absl::InternalError(absl::StrCat("llmc: rows [", first_row, ", ", first_row + rows,
                                          ") of ", weight, " (a family builder bug)")));
    return name;
  }
  if (!slice_shapes_.count(name)) slices_[weight].push_back(name);
  slice_shapes_[name] = {rows, shape[1]};
  return name;
}

std::string ModelGraph::ExpertSlice(const std::string& weight, int64_t expert, bool transpose,
                                    int64_t row_first, int64_t row_step) {
  llmc::ExpertSlice slice{weight, expert, transpose, row_first, row_step};
  const std::string name = expertSliceName(slice);
  const std::vector<int64_t> shape = row_step >= 1 && expert >= 0 && row_first >= 0
                                         ? expertSliceShape(slice, DeclaredShape(weight))
                                         : std::vector<int64_t>{};
  if (shape.empty()) {
    Fail(absl::InternalError(absl::StrCat("llmc: view ", name, " of ", weight, " ",
                                          ShapeString(DeclaredShape(weight)),
                                          " (a family builder bug)")));
    return name;
  }
  if (!slice_shapes_.count(name)) slices_[weight].push_back(name);
  slice_shapes_[name] = shape;
  return name;
}

const std::vector<std::string>& ModelGraph::SlicesOf(const std::string& weight) const {
  static const std::vector<std::string> kNone;
  auto it = slices_.find(weight);
  return it == slices_.end() ? kNone : it->second;
}

const std::string& ModelGraph::Weight(const std::string& name, std::vector<int64_t> shape,
                                      std::string_view because) {
  if (!declared_.count(name)) declared_order_.push_back(name);
  declared_[name] = shape;
  if (!ok() || tensors_ == nullptr) return name;
  const TensorInfo* found = Tensor(name);
  if (found == nullptr) {
    std::vector<std::string> reasons;
    if (absl::StartsWith(name, "model.layers."))
      reasons.push_back(absl::StrCat("num_hidden_layers=", dims_.num_layers));
    if (!because.empty()) reasons.push_back(std::string(because));
    if (reasons.empty()) reasons.push_back(config_.architecture());
    Fail(absl::InvalidArgumentError(absl::StrCat(
        "missing tensor ", name, " expected by config.json (", absl::StrJoin(reasons, ", "), ")")));
  } else if (found->shape != shape) {
    Fail(absl::InvalidArgumentError(absl::StrCat(found->file, ": tensor ", name, " has shape ",
                                                 ShapeString(found->shape),
                                                 ", config.json implies ", ShapeString(shape))));
  } else if (found->dtype != llmrt::plan::F32 && found->dtype != llmrt::plan::F16 &&
             found->dtype != llmrt::plan::BF16) {
    Fail(absl::InvalidArgumentError(absl::StrCat(found->file, ": tensor ", name, " has dtype ",
                                                 llmrt::plan::DType_Name(found->dtype),
                                                 "; expected F32, F16 or BF16")));
  }
  return name;
}

void ModelGraph::Ignore(const std::string& name, std::vector<int64_t> shape) {
  const TensorInfo* found = Tensor(name);
  if (found == nullptr) return;
  ignored_.insert(name);
  if (found->shape != shape)
    Fail(absl::InvalidArgumentError(absl::StrCat(found->file, ": tensor ", name, " has shape ",
                                                 ShapeString(found->shape),
                                                 ", config.json implies ", ShapeString(shape))));
}

absl::Status ModelGraph::Finish() {
  if (!ok() || tensors_ == nullptr) return status_;
  for (const auto& [name, info] : *tensors_) {
    if (declared_.count(name) || ignored_.count(name)) continue;
    // transformers recomputes these buffers from the rope config, and so do we.
    if (absl::EndsWith(name, ".rotary_emb.inv_freq")) continue;
    std::string options;
    if (config_.attention_bias()) options += ", attention_bias=true";
    if (config_.mlp_bias()) options += ", mlp_bias=true";
    return absl::InvalidArgumentError(absl::StrCat(
        info.file, ": unexpected tensor ", name, " (not part of ", config_.architecture(),
        " with num_hidden_layers=", dims_.num_layers, options, ")"));
  }
  return absl::OkStatus();
}

Activation ValidatingGraph::Embed(const std::string& table, double) {
  return Next(DeclaredShape(table).size() == 2 ? DeclaredShape(table)[1] : 0);
}
Activation ValidatingGraph::RmsNorm(Activation x, const std::string&, double) {
  return Next(x.width);
}
Activation ValidatingGraph::Matmul(Activation, const std::string& weight, const std::string&) {
  return Next(DeclaredShape(weight).empty() ? 0 : DeclaredShape(weight)[0]);
}
Activation ValidatingGraph::Rope(Activation x, int64_t, const llmrt::plan::RopeConfig&,
                                 const std::string&) {
  return Next(x.width);
}
Activation ValidatingGraph::Attention(Activation q, Activation, Activation, const AttentionAttrs&,
                                      const std::string&) {
  return Next(q.width);
}
Activation ValidatingGraph::Silu(Activation x, const std::string&) { return Next(x.width); }
Activation ValidatingGraph::Mul(Activation a, Activation, const std::string&) {
  return Next(a.width);
}
Activation ValidatingGraph::Add(Activation a, Activation, const std::string&) {
  return Next(a.width);
}
Activation ValidatingGraph::GeluTanhMul(Activation a, Activation, const std::string&) {
  return Next(a.width);
}
void ValidatingGraph::Logits(Activation, const std::string&, double) {}
Routing ValidatingGraph::Router(Activation, const RouterAttrs& attrs, const std::string&) {
  return {{next_id_++, attrs.top_k}, Next(attrs.top_k)};
}
Activation ValidatingGraph::ExpertMatmul(Activation, ExpertIds ids,
                                         const std::vector<std::string>& weights,
                                         const std::vector<std::string>&, const std::string&) {
  const std::vector<int64_t>& shape =
      weights.empty() ? DeclaredShape("") : DeclaredShape(weights.front());
  return Next(shape.empty() ? 0 : ids.top_k * shape[0]);
}
Activation ValidatingGraph::MoeCombine(Activation y, Activation weights, Activation, Activation,
                                       const std::string&) {
  return Next(weights.width > 0 ? y.width / weights.width : 0);
}
Activation ValidatingGraph::ClampedSwiglu(Activation gate, Activation, double, double,
                                          const std::string&) {
  return Next(gate.width);
}

absl::StatusOr<std::vector<FamilyTensor>> FamilyTensors(const ModelConfig& config) {
  ValidatingGraph graph(config, nullptr);
  if (absl::Status status = BuildFamily(graph); !status.ok()) return status;
  std::vector<FamilyTensor> tensors;
  for (const std::string& name : graph.declared())
    tensors.push_back({name, graph.DeclaredShapeOf(name)});
  return tensors;
}

absl::Status BuildFamily(ModelGraph& graph) {
  const Family* family = FindFamily(graph.config().architecture());
  if (family == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("config.json: architectures[0] is \"",
                                                   graph.config().architecture(),
                                                   "\"; supported: ", SupportedArchitectures()));
  if (graph.ok()) family->build(graph);
  return graph.Finish();
}

}  // namespace llmc
