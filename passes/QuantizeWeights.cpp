//===- QuantizeWeights.cpp - which weights become int8/int4 codes ----------===//
//
// The quantization decision is made here, on the IR, so it can be dumped, tested with lit and
// overridden by flags; the arithmetic (scales, codes, packing) is codegen's. Policy and the
// attribute are documented in Passes.td and QuantAttr.h.
//
// Why the defaults keep these float:
//   - embeddings: a gather reads one row per token, so int codes save no bandwidth per step
//     and the table is read by the embed kernel, which only handles float rows;
//   - norms and biases: a few KiB in all, and their error is not averaged over a dot product;
//   - lm_head: the widest matrix of small models and the one whose error goes straight into
//     the logits (llama.cpp keeps it at Q6_K in Q4 files for the same reason); opt in with
//     quantize-lm-head. A tied lm_head is the embedding table and always stays float.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/QuantAttr.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace llmc {
#define GEN_PASS_DEF_QUANTIZEWEIGHTSPASS
#include "passes/Passes.h.inc"
} // namespace llmc

using namespace mlir;

namespace llmc {
namespace {

// I4 packs runs of 32 columns (plan.proto), and I8 groups are multiples of 32 so the kernels'
// blocks of 32 activations never straddle two scales.
constexpr int64_t kColumnBlock = 32;

struct QuantizeWeightsPass : impl::QuantizeWeightsPassBase<QuantizeWeightsPass> {
  using QuantizeWeightsPassBase::QuantizeWeightsPassBase;

  LogicalResult checkOptions(ModuleOp module) {
    if (bits != 4 && bits != 8)
      return module.emitError() << "llm-quantize-weights: bits must be 8 or 4, found " << bits;
    if (groupSize != 0 && groupSize != 32 && groupSize != 64 && groupSize != 128)
      return module.emitError()
             << "llm-quantize-weights: group-size must be 32, 64 or 128 (or 0: per output "
                "channel), found "
             << groupSize;
    if (bits == 4 && groupSize == 0)
      return module.emitError() << "llm-quantize-weights: int4 needs a group-size (32, 64 or 128)";
    if (scheme != "symmetric" && scheme != "asymmetric")
      return module.emitError()
             << "llm-quantize-weights: scheme must be symmetric or asymmetric, found \"" << scheme
             << "\"";
    if (scheme == "asymmetric" && bits != 4)
      return module.emitError()
             << "llm-quantize-weights: the asymmetric scheme (zero points) is int4 only";
    if (method != "rtn" && method != "awq" && method != "gptq" && method != "awq+gptq")
      return module.emitError()
             << "llm-quantize-weights: method must be rtn, awq, gptq or awq+gptq, found \""
             << method << "\"";
    return success();
  }

  // The spec for a weight set of `cols` input columns, or nullopt when it stays float.
  std::optional<QuantSpec> specFor(Operation *op, ArrayRef<FlatSymbolRefAttr> weights) {
    int64_t cols = -1;
    for (FlatSymbolRefAttr weight : weights) {
      for (const std::string &pattern : keepFloat)
        if (!pattern.empty() && weight.getValue().contains(pattern))
          return std::nullopt;
      llm::ParamOp param = llm::lookupParam(op, weight);
      if (!param || param.getTensorType().getRank() != 2)
        return std::nullopt;
      cols = param.getTensorType().getShape()[1];
    }
    QuantSpec spec;
    spec.bits = bits;
    spec.groupSize = groupSize == 0 ? cols : groupSize;
    spec.asymmetric = scheme == "asymmetric";
    spec.method = method;
    bool perChannel = groupSize == 0;
    if (cols <= 0 || (!perChannel && (cols % kColumnBlock != 0 || cols % groupSize != 0))) {
      op->emitRemark() << "stays float: " << cols << " input columns are not a multiple of "
                       << (cols % kColumnBlock != 0 ? kColumnBlock : groupSize.getValue());
      return std::nullopt;
    }
    return spec;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (failed(checkOptions(module)))
      return signalPassFailure();
    Builder builder(module.getContext());
    llvm::DenseSet<StringRef> embeddingTables;
    module.walk([&](llm::EmbedOp op) { embeddingTables.insert(op.getTable()); });

    WalkResult result = module.walk([&](Operation *op) {
      if (auto matmul = dyn_cast<llm::MatmulOp>(op)) {
        if (std::optional<QuantSpec> spec = specFor(op, matmul.getWeightRefs()))
          op->setAttr(kQuantAttr, spec->toAttr(builder));
      } else if (auto logits = dyn_cast<llm::LogitsOp>(op); logits && quantizeLmHead) {
        if (embeddingTables.contains(logits.getWeight())) {
          op->emitError() << "quantize-lm-head: the lm_head is tied to the embedding table @"
                          << logits.getWeight() << ", which stays float";
          return WalkResult::interrupt();
        }
        if (std::optional<QuantSpec> spec = specFor(op, {logits.getWeightAttr()}))
          op->setAttr(kQuantAttr, spec->toAttr(builder));
      }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
} // namespace llmc
