// Folds AWQ scales into the weights of a module that went through --llm-quantize-weights with
// method "awq" (compiler/quant/awq.h explains the search).
//
// For every llm.matmul carrying llm.quant with method "awq", SearchScales picks per-input-
// channel scales s from the op's calibration rows; the op's weights become W diag(s) (codegen
// then quantizes those), and 1 / s is folded into the op producing its input:
//   - rms_norm / fused_add_rms_norm (q/k/v, gate/up): gamma / s;
//   - attention (o_proj): the v projection's rows (and bias) / s, only when every query head has
//     its own kv head (as AutoAWQ; with grouped-query attention the scales would have to be
//     tied across the heads of a group, which measurably hurt: awq_rewrite.cc);
//   - silu_mul / mul (down_proj): the up projection's rows / s.
// An op whose input comes from anything else keeps s = 1 and is relabelled "rtn". Rewritten
// params become f32 in the IR (their llm.param type follows), served by the OverlayWeightSource.
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
  absl::StatusOr<const quant::QuantizedMatrix*> getQuantizedWeight(
      const std::string& name) const override {
    return base_.getQuantizedWeight(name);
  }
  std::string quantizationMethod() const override { return base_.quantizationMethod(); }

  // The tensor as f32 values (rewritten or converted from the base).
  absl::StatusOr<std::vector<float>> Values(const std::string& name,
                                            std::vector<int64_t>* shape) const;
  void Replace(const std::string& name, std::vector<int64_t> shape, std::vector<float> values);

 private:
  struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  const WeightSource& base_;
  std::map<std::string, Tensor> replaced_;
};

struct AwqSummary {
  int matmuls = 0;      // ops with scales folded
  double rtn_loss = 0;  // summed calibration output error with s = 1
  double awq_loss = 0;  // the same with the chosen scales
};

absl::StatusOr<AwqSummary> ApplyAwq(mlir::ModuleOp module,
                                    const std::map<std::string, quant::Activations>& calibration,
                                    OverlayWeightSource& weights);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_AWQ_REWRITE_H_
