// ModelGraph: what a family's forward pass is written against. A family declares the
// checkpoint tensors it reads (checked here: present, the shape the config implies, a float
// dtype; left-over checkpoint tensors are an error) and builds ops whose semantics are those of
// the llm dialect (ir/LlmOps.td). Implementations: ValidatingGraph (checks only, no MLIR) and
// the MLIR builder behind BuildModule (arch.h).
//
// Errors do not stop a build midway: the first is kept, later ops get placeholder values, and
// Finish() returns it, so a family's build function needs no error plumbing.
#ifndef LLMC_COMPILER_ARCH_GRAPH_H_
#define LLMC_COMPILER_ARCH_GRAPH_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/importer/checkpoint.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

using TensorMap = std::map<std::string, TensorInfo>;

// One activation: [tokens, width] f32 rows of one engine step.
struct Activation {
  int32_t id = -1;
  int64_t width = 0;
};

// The config with transformers' fallbacks resolved.
struct ModelDims {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t q_width() const { return num_heads * head_dim; }
  int64_t kv_width() const { return num_kv_heads * head_dim; }
};

struct AttentionAttrs {
  int64_t layer = 0;
  int64_t sliding_window = 0;  // 0: full causal attention
  double scale = 0;            // softmax scale
  double logit_softcap = 0;    // > 0: scores = cap * tanh(scores / cap) before the softmax
};

class ModelGraph {
 public:
  // `tensors` null: no checkpoint, Weight() only records (FamilyTensors).
  ModelGraph(const llmrt::plan::ModelConfig& config, const TensorMap* tensors);
  virtual ~ModelGraph() = default;

  const llmrt::plan::ModelConfig& config() const { return config_; }
  const ModelDims& dims() const { return dims_; }
  bool ok() const { return status_.ok(); }

  // "model.layers.7." for layer 7.
  static std::string LayerPrefix(int64_t layer);

  // Declares that the forward pass reads checkpoint tensor `name`, of `shape`. `because` names
  // the config option that implies it ("attention_bias=true"), for the message when it is missing.
  // Returns `name`.
  const std::string& Weight(const std::string& name, std::vector<int64_t> shape,
                            std::string_view because = "");
  // Rows [first_row, first_row + rows) of weight `weight`, declared before: a weight name for
  // the op methods, read as a view of the checkpoint tensor (codegen/RowSlice.h). For checkpoints
  // that store projections fused (Phi-3's qkv_proj): the ops see the separate projections and
  // the passes fuse them as for every family. A weight read only through slices gets no param.
  std::string RowSlice(const std::string& weight, int64_t first_row, int64_t rows);
  // The slices taken of `weight`, in order (empty: none).
  const std::vector<std::string>& SlicesOf(const std::string& weight) const;

  // A tensor the checkpoint may hold and the forward pass does not read (the lm_head of a tied
  // model, HF's saved rope buffers): accepted when it has `shape`.
  void Ignore(const std::string& name, std::vector<int64_t> shape);

  // The ops; `name` becomes the op's location. Weights are names returned by Weight().
  // `scale` > 0 multiplies the rows in the table's dtype (Gemma's sqrt(hidden_size)); 0: none.
  virtual Activation Embed(const std::string& table, double scale) = 0;
  Activation Embed(const std::string& table) { return Embed(table, 0.0); }
  // RMSNorm with eps = config.rms_norm_eps over groups of weight-length elements: the whole row,
  // or each head when the weight has head_dim elements. The gamma is weight_offset + weight
  // (Gemma's 1 + weight).
  virtual Activation RmsNorm(Activation x, const std::string& weight, double weight_offset) = 0;
  Activation RmsNorm(Activation x, const std::string& weight) { return RmsNorm(x, weight, 0.0); }
  // x W^T (+ bias); `bias` empty for none. The result's width is W's rows.
  virtual Activation Matmul(Activation x, const std::string& weight, const std::string& bias) = 0;
  // `rope` over x's `num_heads` heads of head_dim.
  virtual Activation Rope(Activation x, int64_t num_heads, const llmrt::plan::RopeConfig& rope,
                          const std::string& name) = 0;
  virtual Activation Attention(Activation q, Activation k, Activation v,
                               const AttentionAttrs& attrs, const std::string& name) = 0;
  virtual Activation Silu(Activation x, const std::string& name) = 0;
  virtual Activation Mul(Activation a, Activation b, const std::string& name) = 0;
  virtual Activation Add(Activation a, Activation b, const std::string& name) = 0;
  // gelu_tanh(a) * b (gelu_pytorch_tanh / gelu_new gating).
  virtual Activation GeluTanhMul(Activation a, Activation b, const std::string& name) = 0;
  // The program's output: x times the lm_head (or the tied embedding table), soft-capped as
  // cap * tanh(logits / cap) when softcap > 0.
  virtual void Logits(Activation x, const std::string& weight, double softcap) = 0;
  void Logits(Activation x, const std::string& weight) { Logits(x, weight, 0.0); }

  // The first error of the build, or of the checkpoint's tensors the build never declared.
  absl::Status Finish();

 protected:
  // Records `status` unless an earlier error is recorded.
  void Fail(absl::Status status);
  // The declared shape of a weight (after Weight() succeeded), or empty.
  const std::vector<int64_t>& DeclaredShape(const std::string& name) const;
  const TensorInfo* Tensor(const std::string& name) const;

 public:
  // Declared weights, in declaration order.
  const std::vector<std::string>& declared() const { return declared_order_; }
  const std::vector<int64_t>& DeclaredShapeOf(const std::string& name) const {
    return DeclaredShape(name);
  }

 protected:
 private:
  absl::Status CheckConfig();

  const llmrt::plan::ModelConfig& config_;
  const TensorMap* tensors_;
  ModelDims dims_;
  absl::Status status_;
  std::map<std::string, std::vector<int64_t>> declared_;
  std::map<std::string, std::vector<int64_t>> slice_shapes_;
  std::map<std::string, std::vector<std::string>> slices_;  // weight -> its slices
  std::vector<std::string> declared_order_;
  std::set<std::string> ignored_;
};

// Checks a family's config and checkpoint tensors without building anything.
class ValidatingGraph final : public ModelGraph {
 public:
  using ModelGraph::ModelGraph;
  Activation Embed(const std::string& table, double scale) override;
  Activation RmsNorm(Activation x, const std::string& weight, double weight_offset) override;
  Activation Matmul(Activation x, const std::string& weight, const std::string& bias) override;
  Activation Rope(Activation x, int64_t num_heads, const llmrt::plan::RopeConfig& rope,
                  const std::string& name) override;
  Activation Attention(Activation q, Activation k, Activation v, const AttentionAttrs& attrs,
                       const std::string& name) override;
  Activation Silu(Activation x, const std::string& name) override;
  Activation Mul(Activation a, Activation b, const std::string& name) override;
  Activation Add(Activation a, Activation b, const std::string& name) override;
  Activation GeluTanhMul(Activation a, Activation b, const std::string& name) override;
  void Logits(Activation x, const std::string& weight, double softcap) override;

 private:
  Activation Next(int64_t width) { return {next_id_++, width}; }
  int32_t next_id_ = 0;
};

// The checkpoint tensors the config's family reads, with their shapes, in the order its forward
// pass declares them (llmc synth writes exactly these).
struct FamilyTensor {
  std::string name;
  std::vector<int64_t> shape;
};
absl::StatusOr<std::vector<FamilyTensor>> FamilyTensors(const llmrt::plan::ModelConfig& config);

// Runs the config's family on `graph` (an error when no family has the architecture) and
// returns graph.Finish().
absl::Status BuildFamily(ModelGraph& graph);

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_GRAPH_H_
