#include "compiler/pipeline/awq_rewrite.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/quant/gptq.h"
#include "ir/LlmDialect.h"
#include "mlir/IR/Builders.h"
#include "passes/QuantAttr.h"
#include "runtime/plan/dtype.h"

namespace llmc {
namespace {

namespace plan = llmrt::plan;

struct Part {
  std::string name;  // param of the rows to divide
  int64_t first_row = 0;
};

// A tensor's f32 values, for rewriting.
std::vector<float> ToF32(const WeightView& view) {
  const int64_t count = static_cast<int64_t>(view.sizeBytes / (view.dtype == plan::F32 ? 4 : 2));
  std::vector<float> values(count);
  for (int64_t i = 0; i < count; ++i) {
    if (view.dtype == plan::F32) {
      std::memcpy(&values[i], view.data + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, view.data + 2 * i, 2);
      values[i] = view.dtype == plan::F16 ? plan::F16ToF32(bits) : plan::Bf16ToF32(bits);
    }
  }
  return values;
}

// Makes the llm.param named `name` f32: its data is now served rewritten by the overlay.
void MarkF32(mlir::ModuleOp module, const std::string& name) {
  auto param = module.lookupSymbol<llm::ParamOp>(name);
  if (!param) return;
  mlir::RankedTensorType type = param.getTensorType();
  param.setTypeAttr(mlir::TypeAttr::get(
      mlir::RankedTensorType::get(type.getShape(), mlir::Float32Type::get(module.getContext()))));
}

}  // namespace

absl::StatusOr<WeightView> OverlayWeightSource::getWeight(const std::string& name) const {
  auto it = replaced_.find(name);
  if (it == replaced_.end()) return base_.getWeight(name);
  WeightView view;
  view.dtype = plan::F32;
  view.shape = it->second.shape;
  view.data = reinterpret_cast<const uint8_t*>(it->second.values.data());
  view.sizeBytes = it->second.values.size() * sizeof(float);
  view.file = "(AWQ-rewritten)";
  return view;
}

absl::StatusOr<std::vector<float>> OverlayWeightSource::Values(const std::string& name,
                                                               std::vector<int64_t>* shape) const {
  absl::StatusOr<WeightView> view = getWeight(name);
  if (!view.ok()) return view.status();
  *shape = view->shape;
  return ToF32(*view);
}

absl::StatusOr<const quant::QuantizedMatrix*> OverlayWeightSource::getQuantizedWeight(
    const std::string& name) const {
  auto it = quantized_.find(name);
  if (it == quantized_.end()) return base_.getQuantizedWeight(name);
  return &it->second.matrix;
}

std::string OverlayWeightSource::quantizationMethod(const std::string& name) const {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? base_.quantizationMethod(name) : it->second.method;
}

void OverlayWeightSource::SetQuantized(const std::string& name, quant::QuantizedMatrix matrix,
                                       std::string method) {
  quantized_[name] = Quantized{std::move(matrix), std::move(method)};
}

void OverlayWeightSource::Replace(const std::string& name, std::vector<int64_t> shape,
                                  std::vector<float> values) {
  replaced_[name] = Tensor{std::move(shape), std::move(values)};
}

absl::StatusOr<AwqSummary> ApplyAwq(mlir::ModuleOp module,
                                    const std::map<std::string, quant::Activations>& calibration,
                                    OverlayWeightSource& weights) {
  AwqSummary summary;
  mlir::Builder builder(module.getContext());
  std::vector<llm::MatmulOp> matmuls;
  module.walk([&](llm::MatmulOp op) { matmuls.push_back(op); });
  for (llm::MatmulOp op : matmuls) {
    std::optional<QuantSpec> spec = getQuantSpec(op);
    if (!spec || (spec->method != "awq" && spec->method != "gptq" && spec->method != "awq+gptq")) {
      continue;
    }
    bool scale = spec->method != "gptq";
    const bool feedback = spec->method != "awq";
    auto relabel = [&](const char* method) {
      spec->method = method;
      op->setAttr(kQuantAttr, spec->toAttr(builder));
    };
    std::vector<std::string> names;
    for (mlir::FlatSymbolRefAttr ref : op.getWeightRefs()) names.push_back(ref.getValue().str());
    const std::string fused = names.size() == 1 ? names[0] : fusedTensorName(names);

    // What produces x, and which rows of which param 1 / s goes into.
    mlir::Operation* producer = op.getX().getDefiningOp();
    std::string gamma;               // a norm's weight: divided element-wise
    std::vector<Part> divided_rows;  // a matmul part: rows divided (and its bias)
    std::string divided_bias;
    std::vector<int32_t> tie_groups;
    auto matmul_part = [&](mlir::Value value) -> bool {
      auto source = value.getDefiningOp<llm::MatmulOp>();
      // Only a value nothing else reads may be rescaled.
      if (!source || !value.hasOneUse()) return false;
      const unsigned index = mlir::cast<mlir::OpResult>(value).getResultNumber();
      divided_rows.push_back({source.getWeightRefs()[index].getValue().str(), 0});
      if (!source.getBiasRefs().empty())
        divided_bias = source.getBiasRefs()[index].getValue().str();
      return true;
    };
    bool foldable = false;
    if (!scale) {
      // GPTQ alone: nothing to fold.
    } else if (auto norm = mlir::dyn_cast_or_null<llm::RmsNormOp>(producer)) {
      // A per-head norm's weight is shared by every head: no per-column scale folds into it.
      // A weight offset (Gemma's 1 + w) would need the scale divided into 1 + w, not into w.
      gamma = norm.getWeight().str();
      foldable = norm.normalizesWholeRows() && norm.getWeightOffset().isZero();
    } else if (auto fused_norm = mlir::dyn_cast_or_null<llm::FusedAddRmsNormOp>(producer)) {
      foldable = op.getX() == fused_norm.getNormed() && fused_norm.getWeightOffset().isZero();
      gamma = fused_norm.getWeight().str();
    } else if (auto attention = mlir::dyn_cast_or_null<llm::AttentionOp>(producer)) {
      // o_proj only without grouped-query attention (AutoAWQ does the same): with GQA one v row
      // feeds the same channel of every query head of its group, so o_proj's scales must be tied
      // across those heads, and the tied scales made things worse end to end: stories260K (8
      // heads, 4 kv heads) int4 g32 mean KL 0.080 with the o_proj fold, 0.054 without (RTN
      // 0.061); see docs/quantization.md, "Diagnosis".
      foldable =
          attention.getNumHeads() == attention.getNumKvHeads() && matmul_part(attention.getV());
      const int64_t head_dim = attention.getHeadDim();
      const int64_t group = attention.getNumHeads() / attention.getNumKvHeads();
      for (int64_t c = 0; c < attention.getNumHeads() * head_dim; ++c) {
        tie_groups.push_back(
            static_cast<int32_t>((c / head_dim / group) * head_dim + c % head_dim));
      }
    } else if (auto silu_mul = mlir::dyn_cast_or_null<llm::SiluMulOp>(producer)) {
      foldable = matmul_part(silu_mul.getRhs());
    } else if (auto gelu_mul = mlir::dyn_cast_or_null<llm::GeluTanhMulOp>(producer)) {
      foldable = matmul_part(gelu_mul.getRhs());
    } else if (auto mul = mlir::dyn_cast_or_null<llm::MulOp>(producer)) {
      foldable = matmul_part(mul.getRhs());
    }
    auto samples = calibration.find(fused);
    if (samples == calibration.end()) {
      relabel("rtn");
      continue;
    }
    // A norm output read by several matmuls would get several scales folded into one gamma.
    if (scale && (!foldable || !op.getX().hasOneUse())) {
      scale = false;
      relabel(feedback ? "gptq" : "rtn");
      if (!feedback) continue;
    }

    // W: the op's parts concatenated along rows.
    std::vector<float> w;
    std::vector<std::vector<int64_t>> shapes;
    for (const std::string& name : names) {
      std::vector<int64_t> shape;
      absl::StatusOr<std::vector<float>> values = weights.Values(name, &shape);
      if (!values.ok()) return values.status();
      w.insert(w.end(), values->begin(), values->end());
      shapes.push_back(shape);
    }
    const int64_t cols = shapes[0][1];
    const int64_t rows = static_cast<int64_t>(w.size()) / cols;
    // Folds AWQ's scales: W diag(s) (already in w) part by part, 1 / s into the producer.
    auto fold = [&](const std::vector<float>& s) -> absl::Status {
      int64_t offset = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        const int64_t part_rows = shapes[i][0];
        std::vector<float> part(w.begin() + offset * cols, w.begin() + (offset + part_rows) * cols);
        weights.Replace(names[i], shapes[i], std::move(part));
        MarkF32(module, names[i]);
        offset += part_rows;
      }
      // 1 / s into the producer.
      auto divide = [&](const std::string& name, bool whole_rows) -> absl::Status {
        std::vector<int64_t> shape;
        absl::StatusOr<std::vector<float>> values = weights.Values(name, &shape);
        if (!values.ok()) return values.status();
        // Rows of the producer <-> input channels of this op; tied channels share one row.
        const int64_t row_count = shape[0];
        const int64_t row_width = whole_rows && shape.size() == 2 ? shape[1] : 1;
        std::vector<float> per_row(row_count, 0.0f);
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t row = tie_groups.empty() ? c : tie_groups[c];
          if (row >= row_count) {
            return absl::InternalError(absl::StrCat("AWQ: ", name, " has ", row_count,
                                                    " rows, channel ", c, " maps to row ", row));
          }
          per_row[row] = s[c];
        }
        for (int64_t r = 0; r < row_count; ++r) {
          if (per_row[r] == 0.0f) continue;
          for (int64_t k = 0; k < row_width; ++k) (*values)[r * row_width + k] /= per_row[r];
        }
        weights.Replace(name, shape, *std::move(values));
        MarkF32(module, name);
        return absl::OkStatus();
      };
      if (!gamma.empty()) {
        if (absl::Status status = divide(gamma, false); !status.ok()) return status;
      }
      for (const Part& part : divided_rows) {
        if (absl::Status status = divide(part.name, true); !status.ok()) return status;
      }
      if (!divided_bias.empty()) {
        if (absl::Status status = divide(divided_bias, false); !status.ok()) return status;
      }
      return absl::OkStatus();
    };
    const quant::QuantFormat format{static_cast<int>(spec->bits), spec->groupSize,
                                    spec->asymmetric};
    std::vector<float> s;  // AWQ's scales; empty: none
    if (scale) {
      absl::StatusOr<quant::AwqScales> scales =
          quant::SearchScales(w, rows, cols, samples->second, format, tie_groups);
      if (!scales.ok()) {
        return absl::Status(scales.status().code(),
                            absl::StrCat("AWQ for ", fused, ": ", scales.status().message()));
      }
      if (std::getenv("LLMC_AWQ_TRACE")) {
        std::fprintf(stderr, "awq %s alpha %.2f loss %.4g rtn %.4g\n", fused.c_str(), scales->alpha,
                     scales->loss, scales->rtn_loss);
      }
      summary.matmuls += 1;
      summary.rtn_loss += scales->rtn_loss;
      summary.awq_loss += scales->loss;
      s = scales->scales;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) w[r * cols + c] *= s[c];
      }
      if (absl::Status status = fold(s); !status.ok()) return status;
    }
    if (feedback) {
      // The op reads X / s after the fold: its Hessian is that of the divided inputs.
      absl::StatusOr<quant::ErrorFeedback> errors = quant::ComputeErrorFeedback(samples->second, s);
      if (!errors.ok()) {
        return absl::Status(errors.status().code(),
                            absl::StrCat("GPTQ for ", fused, ": ", errors.status().message()));
      }
      int64_t offset = 0;
      for (size_t i = 0; i < names.size(); ++i) {
        const int64_t part_rows = shapes[i][0];
        absl::StatusOr<quant::QuantizedMatrix> matrix =
            quant::QuantizeMatrix(absl::MakeConstSpan(w).subspan(offset * cols, part_rows * cols),
                                  part_rows, cols, format, &*errors);
        if (!matrix.ok()) return matrix.status();
        weights.SetQuantized(names[i], *std::move(matrix), spec->method);
        offset += part_rows;
      }
      summary.gptq_matmuls += 1;
    }
  }
  return summary;
}

}  // namespace llmc
