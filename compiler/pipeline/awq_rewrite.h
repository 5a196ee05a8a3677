// Applies the calibration-based quantization methods to a module that went through
// --llm-quantize-weights with method "awq", "gptq" or "awq+gptq" (compiler/quant/awq.h and
// compiler/quant/gptq.h explain them), using each matmul's calibration input rows.
//
// AWQ ("awq", "awq+gptq"): SearchScales picks per-input-channel scales s; the op's weights
// become W diag(s) (codegen then quantizes those), and 1 / s is folded into the op producing
// its input:
//   - rms_norm / fused_add_rms_norm (q/k/v, gate/up): gamma / s;
//   - attention (o_proj): the v projection's rows (and bias) / s, only when every query head has
//     its own kv head (as AutoAWQ; with grouped-query attention the scales would have to be
//     tied across the heads of a group, which measurably hurt: awq_rewrite.cc);
//   - silu_mul / mul (down_proj): the up projection's rows / s.
// An op whose input comes from anything else keeps s = 1 ("awq" is relabelled "rtn",
// "awq+gptq" "gptq"). Rewritten params become f32 in the IR (their llm.param type follows),
// served by the OverlayWeightSource.
//
// GPTQ ("gptq", "awq+gptq"): every such op with calibration rows is quantized here with error
// feedback from those rows (divided by s after AWQ, which is what the op then reads), and the
// codes are served to codegen as already quantized, in the usual encoding.
#ifndef LLMC_COMPILER_PIPELINE_AWQ_REWRITE_H_
#define LLMC_COMPILER_PIPELINE_AWQ_REWRITE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "codegen/EmitProgram.h"
#include "compiler/quant/awq.h"
#include "mlir/IR/BuiltinOps.h"

namespace llmc {

// A WeightSource that serves rewritten tensors as f32 and everything else from `base`, which
// must outlive it. Not thread-safe.
class OverlayWeightSource final : public WeightSource {
 public:
  explicit OverlayWeightSource(const WeightSource& base) : base_(base) {}

  absl::StatusOr<WeightView> getWeight(const std::string& name) const override;
  // The matrix SetQuantized stored, else the base's.
  absl::StatusOr<const quant::QuantizedMatrix*> getQuantizedWeight(
      const std::string& name) const override;
  // The method SetQuantized stored for `name`, else the base's.
  std::string quantizationMethod(const std::string& name) const override;
  // Forwarded to the base (its materialized expert views).
  void releaseWeights(llvm::ArrayRef<std::string> names) const override {
    base_.releaseWeights(names);
  }

  // The tensor as f32 values (rewritten or converted from the base).
  absl::StatusOr<std::vector<float>> Values(const std::string& name,
                                            std::vector<int64_t>* shape) const;
  void Replace(const std::string& name, std::vector<int64_t> shape, std::vector<float> values);
  // Serves `matrix` as the already quantized weight `name`, labelled `method` in the plan.
  void SetQuantized(const std::string& name, quant::QuantizedMatrix matrix, std::string method);

 private:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  struct Quantized {
    quant::QuantizedMatrix matrix;
    std::string method;
  };
  const WeightSource& base_;
  std::map<std::string, Tensor> replaced_;
  std::map<std::string, Quantized> quantized_;
};

struct AwqSummary {
  int matmuls = 0;       // ops with scales folded
  int gptq_matmuls = 0;  // ops quantized with error feedback
  double rtn_loss = 0;   // summed calibration output error with s = 1
  double awq_loss = 0;   // the same with the chosen scales
};

absl::StatusOr<AwqSummary> ApplyAwq(mlir::ModuleOp module,
                                    const std::map<std::string, quant::Activations>& calibration,
                                    OverlayWeightSource& weights);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_AWQ_REWRITE_H_
