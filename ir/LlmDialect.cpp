//===- LlmDialect.cpp - the llm dialect: ops and verifiers -----------------===//

#include "ir/LlmDialect.h"

#include <cmath>
#include <optional>

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace llmc::llm;

#include "ir/LlmDialect.cpp.inc"

void LlmDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "ir/LlmOps.cpp.inc"
      >();
}

#define GET_OP_CLASSES
#include "ir/LlmOps.cpp.inc"

int64_t llmc::llm::getActivationWidth(Type type) {
  auto tensor = type.dyn_cast<RankedTensorType>();
  if (!tensor || tensor.getRank() != 2)
    return ShapedType::kDynamic;
  return tensor.getDimSize(1);
}

RankedTensorType llmc::llm::getActivationType(MLIRContext *context, int64_t width) {
  return RankedTensorType::get({ShapedType::kDynamic, width}, FloatType::getF32(context));
}

ParamOp llmc::llm::lookupParam(Operation *from, FlatSymbolRefAttr ref) {
  return SymbolTable::lookupNearestSymbolFrom<ParamOp>(from, ref);
}

namespace {

// Resolves `ref` to an llm.param of the expected shape; reports what was found otherwise.
FailureOr<ParamOp> verifyParam(Operation *op, SymbolTableCollection &symbolTable,
                               FlatSymbolRefAttr ref, StringRef role,
                               ArrayRef<int64_t> expectedShape) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(op, ref);
  if (!param)
    return op->emitOpError() << role << " " << ref << " does not name an llm.param";
  RankedTensorType type = param.getTensorType();
  if (type.getShape() != expectedShape) {
    InFlightDiagnostic diag = op->emitOpError()
                              << role << " " << ref << " has type " << type << ", expected shape [";
    llvm::interleaveComma(expectedShape, diag);
    diag << "]";
    return diag;
  }
  return param;
}

LogicalResult verifyWidth(Operation *op, Value value, StringRef what, int64_t expected) {
  int64_t width = getActivationWidth(value.getType());
  if (width != expected)
    return op->emitOpError() << what << " has width " << width << ", expected " << expected;
  return success();
}

} // namespace

LogicalResult EmbedOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getTableAttr());
  if (!param)
    return emitOpError() << "table " << getTableAttr() << " does not name an llm.param";
  RankedTensorType type = param.getTensorType();
  int64_t width = getActivationWidth(getType());
  if (type.getRank() != 2 || type.getDimSize(1) != width)
    return emitOpError() << "table " << getTableAttr() << " has type " << type
                         << ", expected [vocab, " << width << "]";
  if (std::optional<APFloat> scale = getScale();
      scale && !(scale->convertToDouble() > 0 && std::isfinite(scale->convertToDouble())))
    return emitOpError() << "scale must be finite and positive";
  return success();
}

LogicalResult RmsNormOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, getWeightAttr());
  if (!param)
    return emitOpError() << "weight " << getWeightAttr() << " does not name an llm.param";
  RankedTensorType type = param.getTensorType();
  int64_t width = getActivationWidth(getType());
  if (type.getRank() != 1 || type.getDimSize(0) <= 0 || width % type.getDimSize(0) != 0)
    return emitOpError() << "weight " << getWeightAttr() << " has type " << type
                         << ", expected [G] with G dividing the width " << width;
  return success();
}

int64_t RmsNormOp::getGroupWidth() {
  ParamOp param = lookupParam(*this, getWeightAttr());
  if (!param || param.getTensorType().getRank() != 1)
    return 0;
  return param.getTensorType().getDimSize(0);
}

bool RmsNormOp::normalizesWholeRows() { return getGroupWidth() == getActivationWidth(getType()); }

LogicalResult FusedAddRmsNormOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  return verifyParam(*this, symbolTable, getWeightAttr(), "weight",
                     {getActivationWidth(getA().getType())});
}

SmallVector<FlatSymbolRefAttr> MatmulOp::getWeightRefs() {
  return llvm::to_vector(getWeights().getAsRange<FlatSymbolRefAttr>());
}

SmallVector<FlatSymbolRefAttr> MatmulOp::getBiasRefs() {
  if (!getBiases())
    return {};
  return llvm::to_vector(getBiases()->getAsRange<FlatSymbolRefAttr>());
}

LogicalResult MatmulOp::verify() {
  size_t numWeights = getWeights().size();
  if (numWeights == 0)
    return emitOpError() << "needs at least one weight";
  if (getNumResults() != numWeights)
    return emitOpError() << "has " << getNumResults() << " results for " << numWeights
                         << " weights; expected one result per weight";
  size_t numBiases = getBiasRefs().size();
  if (numBiases != 0 && numBiases != numWeights)
    return emitOpError() << "has " << numBiases << " biases for " << numWeights
                         << " weights; expected none or one per weight";
  return success();
}

LogicalResult MatmulOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  int64_t inputWidth = getActivationWidth(getX().getType());
  SmallVector<FlatSymbolRefAttr> biases = getBiasRefs();
  for (auto [index, weight] : llvm::enumerate(getWeightRefs())) {
    int64_t outputWidth = getActivationWidth(getResult(index).getType());
    if (failed(verifyParam(*this, symbolTable, weight, "weight", {outputWidth, inputWidth})))
      return failure();
    if (!biases.empty() &&
        failed(verifyParam(*this, symbolTable, biases[index], "bias", {outputWidth})))
      return failure();
  }
  return success();
}

LogicalResult RopeOp::verify() {
  if (getHeadDim() <= 0 || getHeadDim() % 2 != 0)
    return emitOpError() << "head_dim must be positive and even, found " << getHeadDim();
  if (getNumHeads() <= 0)
    return emitOpError() << "num_heads must be positive, found " << getNumHeads();
  if (failed(verifyWidth(*this, getX(), "x", getNumHeads() * getHeadDim())))
    return failure();
  StringRef scaling = getScaling();
  if (scaling != "none" && scaling != "linear" && scaling != "llama3" && scaling != "yarn" &&
      scaling != "longrope" && scaling != "dynamic")
    return emitOpError() << "scaling must be none, linear, llama3, yarn, longrope or dynamic, "
                            "found \""
                         << scaling << "\"";
  const int64_t rotaryDim = getRotaryDim() > 0 ? getRotaryDim() : getHeadDim();
  if (getRotaryDim() < 0 || rotaryDim % 2 != 0 || rotaryDim > getHeadDim())
    return emitOpError() << "rotary_dim must be even and in [0, head_dim], found "
                         << getRotaryDim();
  const size_t extFactors = getExtFactors() ? getExtFactors()->size() : 0;
  if (scaling == "longrope" ? extFactors != static_cast<size_t>(rotaryDim / 2) : extFactors != 0)
    return emitOpError() << "ext_factors: longrope needs one per rotated pair (" << rotaryDim / 2
                         << "), other scalings none; found " << extFactors;
  if (scaling == "yarn" && rotaryDim != getHeadDim())
    return emitOpError() << "yarn scaling rotates all of head_dim (its attention factor is "
                            "folded into the attention scale)";
  if (!(getAttentionFactor().convertToDouble() > 0))
    return emitOpError() << "attention_factor must be positive";
  double theta = getTheta().convertToDouble(), factor = getFactor().convertToDouble();
  if (theta <= 0)
    return emitOpError() << "theta must be positive, found " << theta;
  if (scaling != "none" && factor <= 0)
    return emitOpError() << "factor must be positive, found " << factor;
  if (scaling == "llama3" &&
      (getOriginalMaxPositionEmbeddings() <= 0 ||
       getHighFreqFactor().convertToDouble() <= getLowFreqFactor().convertToDouble()))
    return emitOpError() << "llama3 scaling needs original_max_position_embeddings > 0 and "
                            "high_freq_factor > low_freq_factor";
  if (scaling == "yarn" &&
      (getOriginalMaxPositionEmbeddings() <= 0 || !(getBetaFast().convertToDouble() > 0) ||
       !(getBetaSlow().convertToDouble() > 0)))
    return emitOpError() << "yarn scaling needs original_max_position_embeddings, beta_fast and "
                            "beta_slow positive";
  return success();
}

LogicalResult AttentionOp::verify() {
  int64_t numHeads = getNumHeads(), numKvHeads = getNumKvHeads(), headDim = getHeadDim();
  if (numHeads <= 0 || numKvHeads <= 0 || headDim <= 0)
    return emitOpError() << "num_heads, num_kv_heads and head_dim must be positive";
  if (numHeads % numKvHeads != 0)
    return emitOpError() << "num_heads " << numHeads << " is not a multiple of num_kv_heads "
                         << numKvHeads;
  if (getLayer() < 0 || getSlidingWindow() < 0)
    return emitOpError() << "layer and sliding_window must not be negative";
  if (!(getLogitSoftcap().convertToDouble() >= 0) ||
      std::isinf(getLogitSoftcap().convertToDouble()))
    return emitOpError() << "logit_softcap must be finite and >= 0 (0: none)";
  if (failed(verifyWidth(*this, getQ(), "q", numHeads * headDim)) ||
      failed(verifyWidth(*this, getK(), "k", numKvHeads * headDim)) ||
      failed(verifyWidth(*this, getV(), "v", numKvHeads * headDim)))
    return failure();
  return success();
}

LogicalResult AttentionOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!getSinksAttr())
    return success();
  return verifyParam(*this, symbolTable, getSinksAttr(), "sinks",
                     {static_cast<int64_t>(getNumHeads())});
}

namespace {

bool isFinitePositive(double value) { return value > 0 && std::isfinite(value); }

} // namespace

LogicalResult ClampedSwigluOp::verify() {
  if (!isFinitePositive(getAlpha().convertToDouble()) ||
      !isFinitePositive(getLimit().convertToDouble()))
    return emitOpError() << "alpha and limit must be finite and > 0, found alpha "
                         << getAlpha().convertToDouble() << ", limit "
                         << getLimit().convertToDouble();
  return success();
}

// 1024: the CUDA routing kernel's shared-memory histogram (plan.proto RouterAttrs).
static constexpr int64_t kMaxExperts = 1024;

static LogicalResult verifyExpertCounts(Operation *op, int64_t numExperts, int64_t topK) {
  if (numExperts < 1 || numExperts > kMaxExperts || topK < 1 || topK > numExperts)
    return op->emitOpError() << "needs 1 <= top_k <= num_experts <= " << kMaxExperts
                             << ", found top_k " << topK << ", num_experts " << numExperts;
  return success();
}

LogicalResult RouterOp::verify() {
  const int64_t numExperts = getNumExperts(), topK = getTopK();
  if (failed(verifyExpertCounts(*this, numExperts, topK)))
    return failure();
  StringRef scoring = getScoring();
  if (scoring != "softmax_topk" && scoring != "topk_softmax")
    return emitOpError() << "scoring must be softmax_topk or topk_softmax, found \"" << scoring
                         << "\"";
  if (getNormalize() && scoring != "softmax_topk")
    return emitOpError() << "normalize applies to softmax_topk only (topk_softmax is "
                            "normalised by construction)";
  if (failed(verifyWidth(*this, getLogits(), "logits", numExperts)) ||
      failed(verifyWidth(*this, getIds(), "ids", topK)) ||
      failed(verifyWidth(*this, getWeights(), "weights", topK)))
    return failure();
  return success();
}

namespace {

// The symbols of entry `projection` of an expert_matmul's weights/biases (an ArrayAttr of
// ArrayAttrs); empty when absent or malformed (the verifier reports that).
SmallVector<FlatSymbolRefAttr> expertRefs(ArrayAttr all, unsigned projection) {
  if (!all || projection >= all.size())
    return {};
  auto refs = all[projection].dyn_cast<ArrayAttr>();
  if (!refs)
    return {};
  SmallVector<FlatSymbolRefAttr> result;
  for (Attribute ref : refs)
    if (auto symbol = ref.dyn_cast<FlatSymbolRefAttr>())
      result.push_back(symbol);
  return result;
}

SmallVector<FlatSymbolRefAttr> flatExpertRefs(ArrayAttr all) {
  SmallVector<FlatSymbolRefAttr> result;
  for (unsigned i = 0; all && i < all.size(); ++i)
    llvm::append_range(result, expertRefs(all, i));
  return result;
}

// `all` is an array of `projections` arrays of exactly `numExperts` FlatSymbolRefAttrs.
LogicalResult verifyExpertRefs(Operation *op, ArrayAttr all, StringRef what, size_t projections,
                               int64_t numExperts) {
  if (all.size() != projections)
    return op->emitOpError() << "has " << all.size() << " " << what << " entries for "
                             << projections << " results; expected one per result";
  for (auto [index, entry] : llvm::enumerate(all)) {
    auto refs = entry.dyn_cast<ArrayAttr>();
    if (!refs || static_cast<int64_t>(refs.size()) != numExperts ||
        !llvm::all_of(refs, [](Attribute ref) { return ref.isa<FlatSymbolRefAttr>(); }))
      return op->emitOpError() << what << "[" << index << "] must be an array of num_experts ("
                               << numExperts << ") symbols, found " << entry;
  }
  return success();
}

} // namespace

SmallVector<FlatSymbolRefAttr> ExpertMatmulOp::getExpertWeightRefs(unsigned projection) {
  return expertRefs(getWeights(), projection);
}

SmallVector<FlatSymbolRefAttr> ExpertMatmulOp::getExpertBiasRefs(unsigned projection) {
  return expertRefs(getBiasesAttr(), projection);
}

SmallVector<FlatSymbolRefAttr> ExpertMatmulOp::getAllWeightRefs() {
  return flatExpertRefs(getWeights());
}

SmallVector<FlatSymbolRefAttr> ExpertMatmulOp::getAllBiasRefs() {
  return flatExpertRefs(getBiasesAttr());
}

LogicalResult ExpertMatmulOp::verify() {
  const int64_t numExperts = getNumExperts(), topK = getTopK();
  if (failed(verifyExpertCounts(*this, numExperts, topK)))
    return failure();
  if (failed(verifyWidth(*this, getIds(), "ids", topK)))
    return failure();
  // Kernels index the experts by id without a bounds check: the router must choose among
  // exactly these experts.
  if (auto router = getIds().getDefiningOp<RouterOp>();
      router && static_cast<int64_t>(router.getNumExperts()) != numExperts)
    return emitOpError() << "num_experts " << numExperts << " differs from its router's "
                         << router.getNumExperts();
  if (getWeights().empty())
    return emitOpError() << "needs at least one weight entry";
  if (failed(verifyExpertRefs(*this, getWeights(), "weights", getNumResults(), numExperts)))
    return failure();
  if (getBiasesAttr() && !getBiasesAttr().empty() &&
      failed(verifyExpertRefs(*this, getBiasesAttr(), "biases", getNumResults(), numExperts)))
    return failure();
  for (auto [index, result] : llvm::enumerate(getResults()))
    if (getActivationWidth(result.getType()) % topK != 0)
      return emitOpError() << "result " << index << " has width "
                           << getActivationWidth(result.getType())
                           << ", expected a multiple of top_k " << topK;
  return success();
}

LogicalResult ExpertMatmulOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  const int64_t topK = getTopK();
  const int64_t inputWidth = getActivationWidth(getX().getType());
  // K from the first weight: x is [T, K] or [T, top_k * K].
  SmallVector<FlatSymbolRefAttr> first = getExpertWeightRefs(0);
  if (first.empty())
    return failure(); // verify() reported the malformed weights
  auto param = symbolTable.lookupNearestSymbolFrom<ParamOp>(*this, first.front());
  if (!param)
    return emitOpError() << "weight " << first.front() << " does not name an llm.param";
  if (param.getTensorType().getRank() != 2)
    return emitOpError() << "weight " << first.front() << " has type " << param.getTensorType()
                         << ", expected [N, K]";
  const int64_t cols = param.getTensorType().getDimSize(1);
  if (inputWidth != cols && inputWidth != topK * cols)
    return emitOpError() << "x has width " << inputWidth << ", expected K (" << cols
                         << ") or top_k * K (" << topK * cols << ")";
  for (auto [index, result] : llvm::enumerate(getResults())) {
    const int64_t rows = getActivationWidth(result.getType()) / topK;
    SmallVector<FlatSymbolRefAttr> biases = getExpertBiasRefs(index);
    for (auto [expert, weight] : llvm::enumerate(getExpertWeightRefs(index))) {
      if (failed(verifyParam(*this, symbolTable, weight, "weight", {rows, cols})))
        return failure();
      if (!biases.empty() &&
          failed(verifyParam(*this, symbolTable, biases[expert], "bias", {rows})))
        return failure();
    }
  }
  return success();
}

LogicalResult MoeCombineOp::verify() {
  const size_t numInputs = getInputs().size();
  if (numInputs != 2 && numInputs != 4)
    return emitOpError() << "takes (y, weights) or (y, weights, shared, shared_gate), found "
                         << numInputs << " operands";
  const int64_t hidden = getActivationWidth(getType());
  const int64_t topK = getActivationWidth(getInputs()[1].getType());
  if (topK <= 0)
    return emitOpError() << "weights must have a positive width";
  if (failed(verifyWidth(*this, getInputs()[0], "y", topK * hidden)))
    return failure();
  if (numInputs == 4 && (failed(verifyWidth(*this, getInputs()[2], "shared", hidden)) ||
                         failed(verifyWidth(*this, getInputs()[3], "shared_gate", 1))))
    return failure();
  return success();
}

LogicalResult LogitsOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  if (!(getSoftcap().convertToDouble() >= 0) || std::isinf(getSoftcap().convertToDouble()))
    return emitOpError() << "softcap must be finite and >= 0 (0: none)";
  return verifyParam(*this, symbolTable, getWeightAttr(), "weight",
                     {getActivationWidth(getType()), getActivationWidth(getX().getType())});
}
