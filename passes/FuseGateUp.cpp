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

// Rewrites mul(silu(matmul_g(x)), matmul_u(x)) with silu on either side. Returns whether it
// fired. The silu must have no other user: it disappears into silu_mul.
bool tryFuse(llm::MulOp mul, Value siluSide, Value upSide) {
  auto silu = siluSide.getDefiningOp<llm::SiluOp>();
  if (!silu || !silu->hasOneUse())
    return false;
  llm::MatmulOp gate = detail::getSingleWeightMatmul(silu.getX());
  llm::MatmulOp up = detail::getSingleWeightMatmul(upSide);
  if (!gate || !up)
    return false;
  llm::MatmulOp pair[] = {gate, up};
  if (!detail::areFusible(pair))
    return false;
  llm::MatmulOp fused = detail::fuseMatmuls(pair);
  OpBuilder builder(mul);
  auto siluMul =
      builder.create<llm::SiluMulOp>(builder.getFusedLoc({silu.getLoc(), mul.getLoc()}),
                                     mul.getType(), fused.getResult(0), fused.getResult(1));
  mul.replaceAllUsesWith(siluMul.getResult());
  mul.erase();
  silu.erase();
  return true;
}

// gelu_tanh_mul(matmul_g(x), matmul_u(x)): the gated activation is already one op (it is not
// commutative, so gate stays the first operand); only the two matmuls become one.
void tryFuseGated(llm::GeluTanhMulOp gated) {
  llm::MatmulOp gate = detail::getSingleWeightMatmul(gated.getLhs());
  llm::MatmulOp up = detail::getSingleWeightMatmul(gated.getRhs());
  if (!gate || !up || !gate->hasOneUse() || !up->hasOneUse())
    return;
  llm::MatmulOp pair[] = {gate, up};
  if (!detail::areFusible(pair))
    return;
  // The fused matmul's results replace gate's and up's in the gated op, in order.
  detail::fuseMatmuls(pair);
}

struct FuseGateUpPass : impl::FuseGateUpPassBase<FuseGateUpPass> {
  void runOnOperation() override {
    SmallVector<llm::GeluTanhMulOp> gatedOps;
    getOperation().walk([&](llm::GeluTanhMulOp op) { gatedOps.push_back(op); });
    for (llm::GeluTanhMulOp gated : gatedOps)
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
