// ModelGraph emitting the llm dialect: BuildModule and ValidateTensors of arch.h.
#include <string>
#include <vector>

#include "compiler/arch/arch.h"
#include "compiler/arch/graph.h"
#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

namespace llmc {
namespace {

using llmrt::plan::ModelConfig;

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
    case llmrt::plan::RopeConfig::YARN:
      return "yarn";
    case llmrt::plan::RopeConfig::LONGROPE:
      return "longrope";
    case llmrt::plan::RopeConfig::DYNAMIC:
      return "dynamic";
    default:
      return "none";
  }
}

class MlirGraph final : public ModelGraph {
 public:
  MlirGraph(mlir::MLIRContext& context, const ModelConfig& config, const TensorMap& tensors)
      : ModelGraph(config, &tensors), context_(context), builder_(&context) {
    context.loadDialect<llm::LlmDialect, mlir::func::FuncDialect>();
    module_ = mlir::ModuleOp::create(builder_.getUnknownLoc());
    builder_.setInsertionPointToEnd(module_->getBody());
    auto token_vector =
        mlir::RankedTensorType::get({mlir::ShapedType::kDynamic}, builder_.getI32Type());
    function_ = builder_.create<mlir::func::FuncOp>(
        builder_.getUnknownLoc(), "forward",
        builder_.getFunctionType({token_vector, token_vector},
                                 {ActivationType(std::max<int64_t>(config.vocab_size(), 1))}));
    mlir::Block* body = function_.addEntryBlock();
    builder_.setInsertionPointToStart(body);
  }

  // The module once the family has built it, verified; params in the order they were declared.
  absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> TakeModule() {
    if (absl::Status status = Finish(); !status.ok()) return status;
    mlir::OpBuilder params(&context_);
    params.setInsertionPoint(function_);
    for (const std::string& name : declared()) {
      const TensorInfo* info = Tensor(name);
      // A tensor read through row slices is their params (a view each), not one of its own.
      const std::vector<std::string>& slices = SlicesOf(name);
      for (const std::string& param : slices.empty() ? std::vector<std::string>{name} : slices) {
        params.create<llm::ParamOp>(params.getFusedLoc({}, params.getStringAttr(info->file)),
                                    params.getStringAttr(param),
                                    mlir::TypeAttr::get(mlir::RankedTensorType::get(
                                        DeclaredShapeOf(param), ElementType(params, info->dtype))));
      }
    }
    if (mlir::failed(mlir::verify(*module_)))
      return absl::InternalError("llmc: the built module does not verify (a family builder bug)");
    return std::move(module_);
  }

  Activation Embed(const std::string& table, double scale) override {
    const std::vector<int64_t>& shape = DeclaredShape(table);
    const int64_t width = shape.size() == 2 ? shape[1] : 1;
    return Record(builder_.create<llm::EmbedOp>(
                      Loc("model.embed_tokens"), ActivationType(width), Tokens(), Symbol(table),
                      scale > 0 ? builder_.getF64FloatAttr(scale) : mlir::FloatAttr()),
                  width);
  }

  Activation RmsNorm(Activation x, const std::string& weight, double weight_offset) override {
    return Record(
        builder_.create<llm::RmsNormOp>(Loc(weight), Value(x).getType(), Value(x), Symbol(weight),
                                        builder_.getF64FloatAttr(config().rms_norm_eps()),
                                        builder_.getF64FloatAttr(weight_offset)),
        x.width);
  }

  Activation Matmul(Activation x, const std::string& weight, const std::string& bias) override {
    const std::vector<int64_t>& shape = DeclaredShape(weight);
    const int64_t width = shape.empty() ? 1 : shape[0];
    mlir::ArrayAttr biases;
    if (!bias.empty()) biases = builder_.getArrayAttr({Symbol(bias)});
    std::string name = weight;
    if (name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0)
      name.resize(name.size() - 7);
    auto op =
        builder_.create<llm::MatmulOp>(Loc(name), mlir::TypeRange{ActivationType(width)}, Value(x),
                                       builder_.getArrayAttr({Symbol(weight)}), biases);
    return Record(op.getResult(0), width);
  }

  Activation Rope(Activation x, int64_t num_heads, const llmrt::plan::RopeConfig& rope,
                  const std::string& name) override {
    return Record(
        builder_.create<llm::RopeOp>(
            Loc(name), Value(x).getType(), Value(x), Positions(),
            builder_.getI64IntegerAttr(num_heads), builder_.getI64IntegerAttr(dims().head_dim),
            builder_.getF64FloatAttr(rope.theta()),
            builder_.getStringAttr(ScalingName(rope.scaling())),
            builder_.getF64FloatAttr(
                rope.scaling() == llmrt::plan::RopeConfig::SCALING_NONE ? 1.0 : rope.factor()),
            builder_.getF64FloatAttr(rope.low_freq_factor()),
            builder_.getF64FloatAttr(rope.high_freq_factor()),
            builder_.getI64IntegerAttr(rope.original_max_position_embeddings()),
            builder_.getF64FloatAttr(
                rope.scaling() == llmrt::plan::RopeConfig::YARN ? rope.beta_fast() : 32.0),
            builder_.getF64FloatAttr(
                rope.scaling() == llmrt::plan::RopeConfig::YARN ? rope.beta_slow() : 1.0),
            builder_.getBoolAttr(rope.untruncated()), builder_.getI64IntegerAttr(rope.rotary_dim()),
            rope.ext_factors().empty() ? mlir::DenseF64ArrayAttr()
                                       : builder_.getDenseF64ArrayAttr(llvm::ArrayRef<double>(
                                             rope.ext_factors().data(), rope.ext_factors_size())),
            builder_.getBoolAttr(rope.long_factors()),
            builder_.getF64FloatAttr(rope.scaling() == llmrt::plan::RopeConfig::LONGROPE
                                         ? rope.attention_factor()
                                         : 1.0)),
        x.width);
  }

  Activation Attention(Activation q, Activation k, Activation v, const AttentionAttrs& attrs,
                       const std::string& name) override {
    return Record(
        builder_.create<llm::AttentionOp>(
            Loc(name), Value(q).getType(), Value(q), Value(k), Value(v),
            builder_.getI64IntegerAttr(attrs.layer), builder_.getI64IntegerAttr(dims().num_heads),
            builder_.getI64IntegerAttr(dims().num_kv_heads),
            builder_.getI64IntegerAttr(dims().head_dim),
            builder_.getI64IntegerAttr(attrs.sliding_window), builder_.getF64FloatAttr(attrs.scale),
            builder_.getF64FloatAttr(attrs.logit_softcap),
            attrs.sinks.empty() ? mlir::FlatSymbolRefAttr() : Symbol(attrs.sinks)),
        q.width);
  }

  Routing Router(Activation logits, const RouterAttrs& attrs, const std::string& name) override {
    auto op = builder_.create<llm::RouterOp>(
        Loc(name),
        mlir::TypeRange{mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, attrs.top_k},
                                                    builder_.getI32Type()),
                        ActivationType(attrs.top_k)},
        Value(logits), builder_.getI64IntegerAttr(attrs.num_experts),
        builder_.getI64IntegerAttr(attrs.top_k),
        builder_.getStringAttr(attrs.scoring == llmrt::plan::RouterAttrs::TOPK_SOFTMAX
                                   ? "topk_softmax"
                                   : "softmax_topk"),
        builder_.getBoolAttr(attrs.normalize));
    values_.push_back(op.getIds());
    const ExpertIds ids{static_cast<int32_t>(values_.size() - 1), attrs.top_k};
    return {ids, Record(op.getWeights(), attrs.top_k)};
  }

  Activation ExpertMatmul(Activation x, ExpertIds ids, const std::vector<std::string>& weights,
                          const std::vector<std::string>& biases,
                          const std::string& name) override {
    const std::vector<int64_t>& shape = DeclaredShape(weights.front());
    const int64_t width = ids.top_k * (shape.empty() ? 1 : shape[0]);
    auto symbols = [&](const std::vector<std::string>& names) {
      llvm::SmallVector<mlir::Attribute> refs;
      for (const std::string& weight : names) refs.push_back(Symbol(weight));
      return builder_.getArrayAttr({builder_.getArrayAttr(refs)});
    };
    auto op = builder_.create<llm::ExpertMatmulOp>(
        Loc(name), mlir::TypeRange{ActivationType(width)}, Value(x), values_.at(ids.id),
        builder_.getI64IntegerAttr(static_cast<int64_t>(weights.size())),
        builder_.getI64IntegerAttr(ids.top_k), symbols(weights),
        biases.empty() ? mlir::ArrayAttr() : symbols(biases));
    return Record(op.getResult(0), width);
  }

  Activation MoeCombine(Activation y, Activation weights, Activation shared, Activation shared_gate,
                        const std::string& name) override {
    const int64_t width = y.width / weights.width;
    llvm::SmallVector<mlir::Value> inputs = {Value(y), Value(weights)};
    if (shared.id >= 0) inputs.append({Value(shared), Value(shared_gate)});
    return Record(builder_.create<llm::MoeCombineOp>(Loc(name), ActivationType(width), inputs),
                  width);
  }

  Activation ClampedSwiglu(Activation gate, Activation up, double alpha, double limit,
                           const std::string& name) override {
    return Record(builder_.create<llm::ClampedSwigluOp>(
                      Loc(name), Value(gate).getType(), Value(gate), Value(up),
                      builder_.getF64FloatAttr(alpha), builder_.getF64FloatAttr(limit)),
                  gate.width);
  }

  Activation Silu(Activation x, const std::string& name) override {
    return Record(builder_.create<llm::SiluOp>(Loc(name), Value(x).getType(), Value(x)), x.width);
  }
  Activation Mul(Activation a, Activation b, const std::string& name) override {
    return Record(builder_.create<llm::MulOp>(Loc(name), Value(a).getType(), Value(a), Value(b)),
                  a.width);
  }
  Activation Add(Activation a, Activation b, const std::string& name) override {
    return Record(builder_.create<llm::AddOp>(Loc(name), Value(a).getType(), Value(a), Value(b)),
                  a.width);
  }

  Activation GeluTanhMul(Activation a, Activation b, const std::string& name) override {
    return Record(
        builder_.create<llm::GeluTanhMulOp>(Loc(name), Value(a).getType(), Value(a), Value(b)),
        a.width);
  }

  void Logits(Activation x, const std::string& weight, double softcap) override {
    mlir::Value logits =
        builder_.create<llm::LogitsOp>(Loc("lm_head"), ActivationType(dims().vocab_size), Value(x),
                                       Symbol(weight), builder_.getF64FloatAttr(softcap));
    builder_.create<mlir::func::ReturnOp>(builder_.getUnknownLoc(), logits);
  }

 private:
  mlir::Type ActivationType(int64_t width) { return llm::getActivationType(&context_, width); }
  mlir::Location Loc(const std::string& name) {
    return mlir::NameLoc::get(builder_.getStringAttr(name));
  }
  mlir::FlatSymbolRefAttr Symbol(const std::string& name) {
    return mlir::FlatSymbolRefAttr::get(&context_, name);
  }
  mlir::Value Tokens() { return function_.getArgument(0); }
  mlir::Value Positions() { return function_.getArgument(1); }
  mlir::Value Value(Activation activation) { return values_.at(activation.id); }
  Activation Record(mlir::Value value, int64_t width) {
    values_.push_back(value);
    return {static_cast<int32_t>(values_.size() - 1), width};
  }

  mlir::MLIRContext& context_;
  mlir::OpBuilder builder_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  mlir::func::FuncOp function_;
  std::vector<mlir::Value> values_;
};

}  // namespace

absl::Status ValidateTensors(const ModelConfig& config, const TensorMap& tensors) {
  ValidatingGraph graph(config, &tensors);
  return BuildFamily(graph);
}

absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(mlir::MLIRContext& context,
                                                              const ModelConfig& config,
                                                              const TensorMap& tensors) {
  // Validate first: the MLIR builder assumes consistent shapes (placeholder values after an
  // error would not type-check).
  if (absl::Status status = ValidateTensors(config, tensors); !status.ok()) return status;
  MlirGraph graph(context, config, tensors);
  if (absl::Status status = BuildFamily(graph); !status.ok()) return status;
  return graph.TakeModule();
}

}  // namespace llmc
