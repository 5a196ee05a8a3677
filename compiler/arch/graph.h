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
  std::string sinks;           // a [num_heads] weight name (gpt-oss's sinks); empty: none
};

// Each token's top_k chosen experts ([tokens, top_k] i32), written by Router.
struct ExpertIds {
  int32_t id = -1;
  int64_t top_k = 0;
};

// A router's outputs: the ids and their weights ([tokens, top_k] f32).
struct Routing {
  ExpertIds ids;
  Activation weights;
};

// llm.router's attributes (plan.proto RouterAttrs).
struct RouterAttrs {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  llmrt::plan::RouterAttrs::Scoring scoring = llmrt::plan::RouterAttrs::SCORING_UNSPECIFIED;
  bool normalize = false;  // SOFTMAX_TOPK only
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
  // Expert `expert`'s view of the stacked (3-D [E, A, B] or 2-D [E, A]) weight `weight`,
  // declared before (codegen/ExpertSlice.h): the leading dim dropped, then the two others
  // swapped when `transpose`, then rows row_first, row_first + row_step, ... kept. Like a row
  // slice, a weight name for the op methods; the view's shape is declared from the weight's.
  std::string ExpertSlice(const std::string& weight, int64_t expert, bool transpose,
                          int64_t row_first = 0, int64_t row_step = 1);
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
  // Mixture of experts (llm.router, llm.expert_matmul, llm.moe_combine; ir/LlmOps.td).
  // The top_k experts of each token from the router logits ([tokens, num_experts]).
  virtual Routing Router(Activation logits, const RouterAttrs& attrs, const std::string& name) = 0;
  // Per routed row x_slot * W_e^T (+ b_e): one weight name per expert ([N, K] each, declared
  // weights or views), biases empty or one [N] per expert. x is [tokens, K] or [tokens,
  // top_k * K]; the result is [tokens, top_k * N].
  virtual Activation ExpertMatmul(Activation x, ExpertIds ids,
                                  const std::vector<std::string>& weights,
                                  const std::vector<std::string>& biases,
                                  const std::string& name) = 0;
  // The weighted sum of y's top_k slots, plus sigmoid(shared_gate) * shared when shared and
  // shared_gate are given (id -1: none).
  virtual Activation MoeCombine(Activation y, Activation weights, Activation shared,
                                Activation shared_gate, const std::string& name) = 0;
  // gpt-oss's (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit).
  virtual Activation ClampedSwiglu(Activation gate, Activation up, double alpha, double limit,
                                   const std::string& name) = 0;
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
  Routing Router(Activation logits, const RouterAttrs& attrs, const std::string& name) override;
  Activation ExpertMatmul(Activation x, ExpertIds ids, const std::vector<std::string>& weights,
                          const std::vector<std::string>& biases, const std::string& name) override;
  Activation MoeCombine(Activation y, Activation weights, Activation shared, Activation shared_gate,
                        const std::string& name) override;
  Activation ClampedSwiglu(Activation gate, Activation up, double alpha, double limit,
                           const std::string& name) override;

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
