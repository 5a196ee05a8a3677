//===- FusionUtils.h - helpers shared by the matmul fusions -----*- C++ -*-===//

#ifndef LLMC_PASSES_FUSIONUTILS_H_
#define LLMC_PASSES_FUSIONUTILS_H_

#include "ir/LlmDialect.h"
#include "mlir/IR/Builders.h"

namespace llmc::detail {

// The matmul with exactly one weight that defines `value`, or null.
inline llm::MatmulOp getSingleWeightMatmul(mlir::Value value) {
  auto matmul = value.getDefiningOp<llm::MatmulOp>();
  if (!matmul || matmul.getWeights().size() != 1)
    return {};
  return matmul;
}

inline mlir::Type getParamElementType(mlir::Operation *from, mlir::FlatSymbolRefAttr ref) {
  llm::ParamOp param = llm::lookupParam(from, ref);
  return param ? param.getTensorType().getElementType() : mlir::Type();
}

// Single-weight matmuls can share one op (and one concatenated weight blob) when they read the
// same input in the same block, all or none have a bias, and all weights (and all biases) have
// one dtype.
inline bool areFusible(llvm::ArrayRef<llm::MatmulOp> matmuls) {
  llm::MatmulOp first = matmuls.front();
  bool hasBias = !first.getBiasRefs().empty();
  mlir::Type weightType = getParamElementType(first, first.getWeightRefs()[0]);
  mlir::Type biasType = hasBias ? getParamElementType(first, first.getBiasRefs()[0]) : mlir::Type();
  if (!weightType || (hasBias && !biasType))
    return false;
  for (llm::MatmulOp matmul : matmuls.drop_front()) {
    if (matmul == first || matmul.getX() != first.getX() || matmul->getBlock() != first->getBlock())
      return false;
    if (llvm::count(matmuls, matmul) != 1)
      return false;
    if (!matmul.getBiasRefs().empty() != hasBias)
      return false;
    if (getParamElementType(matmul, matmul.getWeightRefs()[0]) != weightType)
      return false;
    if (hasBias && getParamElementType(matmul, matmul.getBiasRefs()[0]) != biasType)
      return false;
  }
  return true;
}

// Replaces `matmuls` (checked with areFusible) by one matmul whose weights and results are theirs
// in order. It is created before the first of them in the block: the shared input dominates that
// point, and every user of every old result comes after it.
inline llm::MatmulOp fuseMatmuls(llvm::ArrayRef<llm::MatmulOp> matmuls) {
  llm::MatmulOp earliest = matmuls.front();
  for (llm::MatmulOp matmul : matmuls)
    if (matmul->isBeforeInBlock(earliest))
      earliest = matmul;
  llvm::SmallVector<mlir::Attribute> weights, biases;
  llvm::SmallVector<mlir::Type> resultTypes;
  llvm::SmallVector<mlir::Location> locations;
  for (llm::MatmulOp matmul : matmuls) {
    weights.push_back(matmul.getWeightRefs()[0]);
    for (mlir::FlatSymbolRefAttr bias : matmul.getBiasRefs())
      biases.push_back(bias);
    resultTypes.push_back(matmul.getResult(0).getType());
    locations.push_back(matmul.getLoc());
  }
  mlir::OpBuilder builder(earliest);
  mlir::ArrayAttr biasesAttr = biases.empty() ? mlir::ArrayAttr() : builder.getArrayAttr(biases);
  auto fused = builder.create<llm::MatmulOp>(builder.getFusedLoc(locations), resultTypes,
                                             llm::MatmulOp(matmuls.front()).getX(),
                                             builder.getArrayAttr(weights), biasesAttr);
  for (auto [index, constMatmul] : llvm::enumerate(matmuls)) {
    llm::MatmulOp matmul = constMatmul;
    matmul.getResult(0).replaceAllUsesWith(fused.getResult(index));
    matmul.erase();
  }
  return fused;
}

// The expert_matmul with exactly one projection that defines `value`, or null.
inline llm::ExpertMatmulOp getSingleProjectionExpertMatmul(mlir::Value value) {
  auto matmul = value.getDefiningOp<llm::ExpertMatmulOp>();
  if (!matmul || matmul.getWeights().size() != 1)
    return {};
  return matmul;
}

// Two single-projection expert matmuls can become one (one 3-D blob, per expert gate rows then
// up rows) when they read the same x with the same ids, route alike (num_experts, top_k), all
// or none have biases, and their first expert's weights (and biases) have one dtype: the
// verifier and the builders give every expert of a projection the same dtype.
inline bool areExpertFusible(llm::ExpertMatmulOp a, llm::ExpertMatmulOp b) {
  if (a == b || a.getX() != b.getX() || a.getIds() != b.getIds() ||
      a.getNumExperts() != b.getNumExperts() || a.getTopK() != b.getTopK() ||
      a->getBlock() != b->getBlock())
    return false;
  llvm::SmallVector<mlir::FlatSymbolRefAttr> biasA = a.getAllBiasRefs(), biasB = b.getAllBiasRefs();
  if (biasA.empty() != biasB.empty())
    return false;
  if (!biasA.empty() &&
      getParamElementType(a, biasA.front()) != getParamElementType(b, biasB.front()))
    return false;
  mlir::Type weightType = getParamElementType(a, a.getAllWeightRefs().front());
  return weightType && weightType == getParamElementType(b, b.getAllWeightRefs().front());
}

// Replaces gate and up (checked with areExpertFusible) by one expert_matmul with their
// projections and results in that order, created before the earlier of the two.
inline llm::ExpertMatmulOp fuseExpertMatmuls(llm::ExpertMatmulOp gate, llm::ExpertMatmulOp up) {
  llm::ExpertMatmulOp pair[] = {gate, up};
  mlir::OpBuilder builder(up->isBeforeInBlock(gate) ? up : gate);
  llvm::SmallVector<mlir::Attribute> weights, biases;
  for (llm::ExpertMatmulOp matmul : pair) {
    weights.push_back(matmul.getWeights()[0]);
    if (matmul.getBiasesAttr() && !matmul.getBiasesAttr().empty())
      biases.push_back(matmul.getBiasesAttr()[0]);
  }
  auto fused = builder.create<llm::ExpertMatmulOp>(
      builder.getFusedLoc({gate.getLoc(), up.getLoc()}),
      mlir::TypeRange{gate.getResult(0).getType(), up.getResult(0).getType()}, gate.getX(),
      gate.getIds(), gate.getNumExpertsAttr(), gate.getTopKAttr(), builder.getArrayAttr(weights),
      biases.empty() ? mlir::ArrayAttr() : builder.getArrayAttr(biases));
  for (auto [index, matmul] : llvm::enumerate(pair)) {
    matmul.getResult(0).replaceAllUsesWith(fused.getResult(index));
    matmul.erase();
  }
  return fused;
}

} // namespace llmc::detail

#endif // LLMC_PASSES_FUSIONUTILS_H_
