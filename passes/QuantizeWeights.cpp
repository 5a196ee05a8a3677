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
//   - the router of a mixture of experts and Qwen2-MoE's shared-expert gate: their outputs
//     choose experts (routingDecision);
//   - lm_head: the widest matrix of small models and the one whose error goes straight into
//     the logits (llama.cpp keeps it at Q6_K in Q4 files for the same reason); opt in with
//     lm-head-bits, which gives it its own format (an int8 lm_head in an int4 plan is the
//     like-for-like of llama.cpp's Q4_0 files). A tied lm_head is the embedding table, which
//     the embed kernel reads as float rows: the logits then read their own quantized copy, the
//     param "T[0:rows]" (a view of the checkpoint tensor, codegen/RowSlice.h), while the embed
//     keeps T. The plan holds both (+1 byte per weight at int8), and a decode step reads the
//     copy instead of the float table (Gemma-2-2B: 0.6 GB instead of 1.2 GB).
//
//===----------------------------------------------------------------------===//

#include "codegen/RowSlice.h"
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
      return module.emitError() << "llm-quantize-weights: bits must be 8 or 4, found "
                                << bits.getValue();
    if (groupSize != 0 && groupSize != 32 && groupSize != 64 && groupSize != 128)
      return module.emitError()
             << "llm-quantize-weights: group-size must be 32, 64 or 128 (or 0: per output "
                "channel), found "
             << groupSize.getValue();
    if (bits == 4 && groupSize == 0)
      return module.emitError() << "llm-quantize-weights: int4 needs a group-size (32, 64 or 128)";
    if (scheme != "symmetric" && scheme != "asymmetric" && scheme != "mxfp4")
      return module.emitError()
             << "llm-quantize-weights: scheme must be symmetric, asymmetric or mxfp4, found \""
             << scheme << "\"";
    if (scheme == "mxfp4" && (bits != 4 || groupSize != 32))
      return module.emitError() << "llm-quantize-weights: scheme mxfp4 needs bits=4 and "
                                   "group-size=32 (one E8M0 scale per 32 columns), found bits="
                                << bits.getValue() << " group-size=" << groupSize.getValue();
    if (scheme == "asymmetric" && bits != 4)
      return module.emitError()
             << "llm-quantize-weights: the asymmetric scheme (zero points) is int4 only";
    if (method != "rtn" && method != "awq" && method != "gptq" && method != "awq+gptq")
      return module.emitError()
             << "llm-quantize-weights: method must be rtn, awq, gptq or awq+gptq, found \""
             << method << "\"";
    if (lmHeadBits != 0 && lmHeadBits != 4 && lmHeadBits != 8)
      return module.emitError()
             << "llm-quantize-weights: lm-head-bits must be 0 (float), 8 or 4, found "
             << lmHeadBits.getValue();
    return success();
  }

  // The lm_head's own format (lm-head-bits), or failure (reported) when it cannot have it.
  // int8: symmetric, one scale per output channel, any width; int4: the body's group size
  // (32 when the body is int8 per channel, which has none) and scheme. Always "rtn": AWQ and
  // GPTQ need the inputs of the op from calibration, which records matmul inputs only
  // (compiler/quant/awq.h), and ApplyAwq rewrites llm.matmul ops only.
  FailureOr<QuantSpec> lmHeadSpec(llm::LogitsOp op) {
    llm::ParamOp param = llm::lookupParam(op, op.getWeightAttr());
    if (!param || param.getTensorType().getRank() != 2)
      return op->emitError() << "lm-head-bits: the lm_head @" << op.getWeight()
                             << " is not a 2-D llm.param";
    const int64_t cols = param.getTensorType().getShape()[1];
    QuantSpec spec;
    spec.bits = lmHeadBits;
    spec.method = "rtn";
    if (lmHeadBits == 8) {
      spec.groupSize = cols;
      return spec;
    }
    spec.groupSize = groupSize == 0 ? kColumnBlock : groupSize.getValue();
    spec.asymmetric = scheme == "asymmetric";
    if (cols % kColumnBlock != 0 || cols % spec.groupSize != 0)
      return op->emitError() << "lm-head-bits=4: the lm_head @" << op.getWeight() << " has " << cols
                             << " input columns, not a multiple of the group size "
                             << spec.groupSize;
    return spec;
  }

  // Whether some weight's name contains one of `patterns` (empty patterns match nothing).
  static bool anyNameContains(ArrayRef<FlatSymbolRefAttr> weights, ArrayRef<std::string> patterns) {
    return llvm::any_of(weights, [&](FlatSymbolRefAttr weight) {
      return llvm::any_of(patterns, [&](const std::string &pattern) {
        return !pattern.empty() && weight.getValue().contains(pattern);
      });
    });
  }

  // The spec for a weight set of `cols` input columns, or nullopt when it stays float.
  std::optional<QuantSpec> specFor(Operation *op, ArrayRef<FlatSymbolRefAttr> weights) {
    if (anyNameContains(weights, keepFloat))
      return std::nullopt;
    if (!only.empty() && !anyNameContains(weights, only))
      return std::nullopt;
    int64_t cols = -1;
    for (FlatSymbolRefAttr weight : weights) {
      llm::ParamOp param = llm::lookupParam(op, weight);
      if (!param || param.getTensorType().getRank() != 2)
        return std::nullopt;
      cols = param.getTensorType().getShape()[1];
    }
    QuantSpec spec;
    spec.bits = bits;
    spec.groupSize = groupSize == 0 ? cols : groupSize;
    spec.asymmetric = scheme == "asymmetric";
    spec.mxfp4 = scheme == "mxfp4";
    spec.method = method;
    bool perChannel = groupSize == 0;
    if (cols <= 0 || (!perChannel && (cols % kColumnBlock != 0 || cols % groupSize != 0))) {
      op->emitRemark() << "stays float: " << cols << " input columns are not a multiple of "
                       << (cols % kColumnBlock != 0 ? kColumnBlock : groupSize.getValue());
      return std::nullopt;
    }
    return spec;
  }

  // Why the matmul's outputs decide routing and so stay float, or null: the router's logits
  // (feeding llm.router) and Qwen2-MoE's shared-expert gate (llm.moe_combine's operand 3).
  // Rounding either can flip which experts a token uses or how much of the shared expert it
  // gets; both are [E or 1, hidden], a sliver of the model (llama.cpp keeps ffn_gate_inp
  // unquantized too).
  static const char *routingDecision(llm::MatmulOp matmul) {
    for (OpOperand &use : matmul->getUses()) {
      if (isa<llm::RouterOp>(use.getOwner()))
        return "its output is the router's logits (a routing decision)";
      if (isa<llm::MoeCombineOp>(use.getOwner()) && use.getOperandNumber() == 3)
        return "its output is the shared expert's gate (a routing decision)";
    }
    return nullptr;
  }

  // Points a logits op that reads embedding table T at the param "T[0:rows]" (created after
  // T's param once), so that quantizing the lm_head leaves the embed's table float.
  LogicalResult untieLmHead(llm::LogitsOp op) {
    llm::ParamOp table = llm::lookupParam(op, op.getWeightAttr());
    if (!table || table.getTensorType().getRank() != 2)
      return op->emitError() << "lm-head-bits: the lm_head @" << op.getWeight()
                             << " is not a 2-D llm.param";
    const std::string name =
        rowSliceName(table.getSymName().str(), 0, table.getTensorType().getShape()[0]);
    auto module = op->getParentOfType<ModuleOp>();
    if (!SymbolTable::lookupSymbolIn(module, name)) {
      OpBuilder builder(table);
      builder.setInsertionPointAfter(table);
      auto copy = cast<llm::ParamOp>(builder.clone(*table));
      copy.setSymName(name);
    }
    op.setWeightAttr(FlatSymbolRefAttr::get(op.getContext(), name));
    return success();
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
        if (const char *why = routingDecision(matmul)) {
          op->emitRemark() << "stays float: " << why;
          return WalkResult::advance();
        }
        if (std::optional<QuantSpec> spec = specFor(op, matmul.getWeightRefs()))
          op->setAttr(kQuantAttr, spec->toAttr(builder));
      } else if (auto expert = dyn_cast<llm::ExpertMatmulOp>(op)) {
        // Always round-to-nearest: calibration (AWQ, GPTQ) records llm.matmul inputs only.
        if (std::optional<QuantSpec> spec = specFor(op, expert.getAllWeightRefs())) {
          spec->method = "rtn";
          op->setAttr(kQuantAttr, spec->toAttr(builder));
        }
      } else if (auto logits = dyn_cast<llm::LogitsOp>(op); logits && lmHeadBits != 0) {
        if (embeddingTables.contains(logits.getWeight()) && failed(untieLmHead(logits)))
          return WalkResult::interrupt();
        FailureOr<QuantSpec> spec = lmHeadSpec(logits);
        if (failed(spec))
          return WalkResult::interrupt();
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
