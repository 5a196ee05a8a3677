//===- FuseAddRmsNorm.cpp - residual add + rms_norm in one op --------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace llmc {
#define GEN_PASS_DEF_FUSEADDRMSNORMPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

struct FuseAddRmsNormPass : impl::FuseAddRmsNormPassBase<FuseAddRmsNormPass> {
  void runOnOperation() override {
    SmallVector<llm::RmsNormOp> norms;
    getOperation().walk([&](llm::RmsNormOp op) { norms.push_back(op); });
    for (llm::RmsNormOp norm : norms) {
      auto add = norm.getX().getDefiningOp<llm::AddOp>();
      // The fused op normalizes whole rows only.
      if (!add || !norm.normalizesWholeRows())
        continue;
      // Created where the add was: its operands dominate that point and every user of the add
      // (the norm included) comes after it.
      OpBuilder builder(add);
      auto fused = builder.create<llm::FusedAddRmsNormOp>(
          builder.getFusedLoc({add.getLoc(), norm.getLoc()}), add.getType(), add.getType(),
          add.getLhs(), add.getRhs(), norm.getWeightAttr(), norm.getEpsAttr(),
          norm.getWeightOffsetAttr());
      norm.replaceAllUsesWith(fused.getNormed());
      norm.erase();
      add.replaceAllUsesWith(fused.getSum());
      add.erase();
    }
  }
};

} // namespace
} // namespace llmc
