//===- LlmDialect.h - the llm dialect ---------------------------*- C++ -*-===//
//
// Ops are declared in LlmOps.td; see it for the semantics. Namespace ::llmc::llm.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_IR_LLMDIALECT_H_
#define LLMC_IR_LLMDIALECT_H_

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "ir/LlmDialect.h.inc"

#define GET_OP_CLASSES
#include "ir/LlmOps.h.inc"

namespace llmc::llm {

// Width (the static second dimension) of an activation type `tensor<?xWxf32>`.
int64_t getActivationWidth(mlir::Type type);

// An activation type `tensor<?x{width}xf32>`.
mlir::RankedTensorType getActivationType(mlir::MLIRContext *context, int64_t width);

// The `llm.param` a symbol names, or null.
ParamOp lookupParam(mlir::Operation *from, mlir::FlatSymbolRefAttr ref);

// Attribute names written by --llm-plan-memory and read by codegen.
inline constexpr llvm::StringLiteral kArenaOffsetsAttr = "llm.arena_offsets";
inline constexpr llvm::StringLiteral kArenaBytesPerTokenAttr = "llm.arena_bytes_per_token";

} // namespace llmc::llm

#endif // LLMC_IR_LLMDIALECT_H_
