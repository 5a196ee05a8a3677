//===- TileCpu.cpp - choose the CPU kernel layout of every matmul ----------===//
//
// Records on every llm.matmul, llm.expert_matmul and llm.logits the weight layout the CPU kernels
// read, as `llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}`; codegen packs the
// weights into exactly that layout and records it in the plan's tensor table, so the runtime never
// repacks.
//
// One layout serves every dispatch target: a panel of 16 rows stored column by column is one
// AVX-512 vector, two AVX2 vectors, four SSE4/NEON vectors or sixteen scalars of f32 per
// column, and each target's micro-kernel differs only in how many token rows it blocks.
// A plan therefore still runs on any CPU.
//
// Weights that an llm.embed also reads (a tied lm_head) stay row-major: the embedding gathers
// whole rows, and one tensor entry serves both ops. So do weights whose row count (summed over
// a fused matmul's weights) is not a multiple of 16 (a 50257-token vocabulary): panels are
// never padded, so a packed tensor has the same size as a row-major one. Such ops get
// `llm.cpu_tile = {layout = "row_major"}`, which the runtime runs with row-wise dot products.
// So do quantized weights (llm.quant, --llm-quantize-weights): plan.proto stores I8/I4 codes
// ROW_MAJOR only, with their own 32-column blocking. An expert matmul's 3-D weight is panelled
// per expert: when each expert's rows (gate's plus up's when fused) are a multiple of 16.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/QuantAttr.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"

namespace llmc {
#define GEN_PASS_DEF_TILECPUPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// 16 rows: the panel height of runtime/backend/cpu (kPanelRows). Reasons in the file comment.
constexpr int64_t kPanelRows = 16;

struct TileCpuPass : impl::TileCpuPassBase<TileCpuPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder builder(module.getContext());
    llvm::DenseSet<StringRef> embeddingTables;
    module.walk([&](llm::EmbedOp op) { embeddingTables.insert(op.getTable()); });

    auto tile = [&](Operation *op, ArrayRef<FlatSymbolRefAttr> weights) {
      bool sharedWithEmbed = llvm::any_of(weights, [&](FlatSymbolRefAttr weight) {
        return embeddingTables.contains(weight.getValue());
      });
      int64_t rows = 0;
      for (FlatSymbolRefAttr weight : weights) {
        llm::ParamOp param = llm::lookupParam(op, weight);
        // The verifier already rejects a missing or non-matrix param; be safe anyway.
        if (!param || param.getTensorType().getRank() != 2)
          return;
        rows += param.getTensorType().getShape()[0];
      }
      SmallVector<NamedAttribute> fields;
      bool quantized = op->hasAttr(kQuantAttr);
      if (sharedWithEmbed || quantized || rows % kPanelRows != 0) {
        fields.push_back(builder.getNamedAttr("layout", builder.getStringAttr("row_major")));
      } else {
        fields.push_back(builder.getNamedAttr("layout", builder.getStringAttr("row_panels")));
        fields.push_back(builder.getNamedAttr("panel_rows", builder.getI64IntegerAttr(kPanelRows)));
      }
      op->setAttr("llm.cpu_tile", builder.getDictionaryAttr(fields));
    };
    module.walk([&](Operation *op) {
      if (auto matmul = dyn_cast<llm::MatmulOp>(op)) {
        tile(op, matmul.getWeightRefs());
      } else if (auto logits = dyn_cast<llm::LogitsOp>(op)) {
        tile(op, {logits.getWeightAttr()});
      } else if (auto expert = dyn_cast<llm::ExpertMatmulOp>(op)) {
        // Every expert's matrices have the same shape (verifier): expert 0's rows, summed over
        // the fused projections, decide for all, so panels never straddle two experts.
        SmallVector<FlatSymbolRefAttr> firstExpert;
        for (unsigned i = 0; i < expert.getNumResults(); ++i)
          firstExpert.push_back(expert.getExpertWeightRefs(i).front());
        tile(op, firstExpert);
      }
    });
  }
};

} // namespace
} // namespace llmc
