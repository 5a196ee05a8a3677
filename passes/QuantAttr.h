//===- QuantAttr.h - the llm.quant attribute ---------------------*- C++ -*-===//
//
// `llm.quant = {bits = 4 : i64, group_size = 32 : i64, scheme = "asymmetric", method = "rtn"}`
// on an llm.matmul, llm.expert_matmul or llm.logits: written by --llm-quantize-weights, read by
// --llm-tile-cpu (quantized weights stay row-major), by the AWQ weight rewrite and by codegen
// (which packs the codes per plan.proto's Quantization message). Header-only so codegen need not
// link the passes.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PASSES_QUANTATTR_H_
#define LLMC_PASSES_QUANTATTR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace llmc {

inline constexpr llvm::StringLiteral kQuantAttr = "llm.quant";

struct QuantSpec {
  int64_t bits = 0;      // 8 or 4
  int64_t groupSize = 0; // input columns per scale (== cols: per output channel)
  bool asymmetric = false;
  // MXFP4 (scheme "mxfp4"): E2M1 codes with an E8M0 scale per 32 columns; bits 4, group 32.
  bool mxfp4 = false;
  std::string method; // "rtn", "awq", "gptq", "mxfp4" (imported MXFP4 codes)

  const char *scheme() const { return mxfp4 ? "mxfp4" : asymmetric ? "asymmetric" : "symmetric"; }

  mlir::DictionaryAttr toAttr(mlir::Builder &builder) const {
    return builder.getDictionaryAttr({
        builder.getNamedAttr("bits", builder.getI64IntegerAttr(bits)),
        builder.getNamedAttr("group_size", builder.getI64IntegerAttr(groupSize)),
        builder.getNamedAttr("method", builder.getStringAttr(method)),
        builder.getNamedAttr("scheme", builder.getStringAttr(scheme())),
    });
  }
};

// The op's llm.quant, std::nullopt when it has none; an attribute that is present but malformed
// is reported through `error` (and also gives std::nullopt).
inline std::optional<QuantSpec> getQuantSpec(mlir::Operation *op, std::string *error = nullptr) {
  auto dict = op->getAttrOfType<mlir::DictionaryAttr>(kQuantAttr);
  if (!dict)
    return std::nullopt;
  auto bits = dict.getAs<mlir::IntegerAttr>("bits");
  auto groupSize = dict.getAs<mlir::IntegerAttr>("group_size");
  auto scheme = dict.getAs<mlir::StringAttr>("scheme");
  auto method = dict.getAs<mlir::StringAttr>("method");
  if (!bits || !groupSize || !scheme || !method || (bits.getInt() != 4 && bits.getInt() != 8) ||
      groupSize.getInt() <= 0 ||
      (scheme.getValue() != "symmetric" && scheme.getValue() != "asymmetric" &&
       scheme.getValue() != "mxfp4") ||
      (scheme.getValue() == "asymmetric" && bits.getInt() != 4) ||
      (scheme.getValue() == "mxfp4" && (bits.getInt() != 4 || groupSize.getInt() != 32))) {
    if (error)
      *error = "llm.quant must be {bits = 4|8, group_size > 0, scheme = \"symmetric\"|"
               "\"asymmetric\" (4 bits only)|\"mxfp4\" (4 bits, group_size 32), method = "
               "\"...\"}";
    return std::nullopt;
  }
  QuantSpec spec;
  spec.bits = bits.getInt();
  spec.groupSize = groupSize.getInt();
  spec.asymmetric = scheme.getValue() == "asymmetric";
  spec.mxfp4 = scheme.getValue() == "mxfp4";
  spec.method = method.getValue().str();
  return spec;
}

} // namespace llmc

#endif // LLMC_PASSES_QUANTATTR_H_
