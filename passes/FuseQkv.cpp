//===- FuseQkv.cpp - one matmul for the q/k/v projections ------------------===//

#include "passes/FusionUtils.h"
#include "passes/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEQKVPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// q and k reach attention through rope, and before that through a per-head norm in some
// families (Qwen3's q_norm / k_norm); v directly. The producer must be a single-weight matmul.
llm::MatmulOp findProjection(Value attentionOperand) {
  if (auto rope = attentionOperand.getDefiningOp<llm::RopeOp>())
    attentionOperand = rope.getX();
  if (auto norm = attentionOperand.getDefiningOp<llm::RmsNormOp>())
    attentionOperand = norm.getX();
  return detail::getSingleWeightMatmul(attentionOperand);
}

struct FuseQkvPass : impl::FuseQkvPassBase<FuseQkvPass> {
  void runOnOperation() override {
    SmallVector<llm::AttentionOp> attentions;
    getOperation().walk([&](llm::AttentionOp op) { attentions.push_back(op); });
    for (llm::AttentionOp attention : attentions) {
      llm::MatmulOp projections[] = {findProjection(attention.getQ()),
                                     findProjection(attention.getK()),
                                     findProjection(attention.getV())};
      if (llvm::is_contained(projections, llm::MatmulOp()))
        continue;
      if (!detail::areFusible(projections))
        continue;
      detail::fuseMatmuls(projections);
    }
  }
};

} // namespace
} // namespace llmc
