//===- FuseGateUp.cpp - one matmul for gate/up, then silu_mul --------------===//

#include "passes/FusionUtils.h"
#include "passes/Passes.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEGATEUPPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// The gate and up projections of gate and up as one op with two results (gate's, up's), or
// null when they cannot be fused: two dense matmuls, or two expert matmuls of one routing.
Operation *fuseGateAndUp(Value gateValue, Value upValue) {
  if (llm::MatmulOp gate = detail::getSingleWeightMatmul(gateValue)) {
    llm::MatmulOp up = detail::getSingleWeightMatmul(upValue);
    llm::MatmulOp pair[] = {gate, up};
    if (!up || !detail::areFusible(pair))
      return nullptr;
    return detail::fuseMatmuls(pair);
  }
  llm::ExpertMatmulOp gate = detail::getSingleProjectionExpertMatmul(gateValue);
  llm::ExpertMatmulOp up = detail::getSingleProjectionExpertMatmul(upValue);
  if (!gate || !up || !detail::areExpertFusible(gate, up))
    return nullptr;
  return detail::fuseExpertMatmuls(gate, up);
}

// Rewrites mul(silu(matmul_g(x)), matmul_u(x)) with silu on either side (dense or expert
// matmuls). Returns whether it fired. The silu must have no other user: it disappears into
// silu_mul.
bool tryFuse(llm::MulOp mul, Value siluSide, Value upSide) {
  auto silu = siluSide.getDefiningOp<llm::SiluOp>();
  if (!silu || !silu->hasOneUse())
    return false;
  Operation *fused = fuseGateAndUp(silu.getX(), upSide);
  if (!fused)
    return false;
  OpBuilder builder(mul);
  auto siluMul =
      builder.create<llm::SiluMulOp>(builder.getFusedLoc({silu.getLoc(), mul.getLoc()}),
                                     mul.getType(), fused->getResult(0), fused->getResult(1));
  mul.replaceAllUsesWith(siluMul.getResult());
  mul.erase();
  silu.erase();
  return true;
}

// gelu_tanh_mul(matmul_g(x), matmul_u(x)) and clamped_swiglu(expert_matmul_g,
// expert_matmul_u): the gated activation is already one op (not commutative, so gate stays the
// first operand); only the two matmuls become one, whose results replace gate's and up's.
void tryFuseGated(Operation *gated) {
  Value gate = gated->getOperand(0), up = gated->getOperand(1);
  if (!gate.getDefiningOp() || !up.getDefiningOp() || !gate.hasOneUse() || !up.hasOneUse())
    return;
  fuseGateAndUp(gate, up);
}

struct FuseGateUpPass : impl::FuseGateUpPassBase<FuseGateUpPass> {
  void runOnOperation() override {
    SmallVector<Operation *> gatedOps;
    getOperation().walk([&](Operation *op) {
      if (isa<llm::GeluTanhMulOp, llm::ClampedSwigluOp>(op))
        gatedOps.push_back(op);
    });
    for (Operation *gated : gatedOps)
      tryFuseGated(gated);
    SmallVector<llm::MulOp> muls;
    getOperation().walk([&](llm::MulOp op) { muls.push_back(op); });
    for (llm::MulOp mul : muls) {
      Value lhs = mul.getLhs(), rhs = mul.getRhs();
      if (!tryFuse(mul, lhs, rhs))
        tryFuse(mul, rhs, lhs);
    }
  }
};

} // namespace
} // namespace llmc
