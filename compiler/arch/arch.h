// Checkpoint tensors + ModelConfig -> the llm MLIR module, through the config's family
// (family.h: one file per family under families/, composed of the blocks in blocks.h).
//
// The module holds one `llm.param` per checkpoint tensor it uses (type = shape and checkpoint
// dtype) and `func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>)
// -> tensor<?x{vocab}xf32>`, unfused: the passes fuse it.
//
// Every error is one line naming the file or config field, what was expected and what was
// found. Thread-safety: free functions without shared state; an MLIRContext is not thread-safe,
// so callers use one context per thread.
#ifndef LLMC_COMPILER_ARCH_ARCH_H_
#define LLMC_COMPILER_ARCH_ARCH_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/arch/graph.h"
#include "compiler/importer/checkpoint.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// Checks the config (a registered architecture, consistent head counts, silu activation) and
// that every tensor the family reads is present with the shape the config implies and a float
// dtype, and that there are no others. Tolerated: `lm_head.weight` when tie_word_embeddings
// (unused), `*.rotary_emb.inv_freq` (recomputed from the rope config).
absl::Status ValidateTensors(const llmrt::plan::ModelConfig& config, const TensorMap& tensors);

// Validates, then builds the unfused module in `context` (loading the llm and func dialects).
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(
    mlir::MLIRContext& context, const llmrt::plan::ModelConfig& config, const TensorMap& tensors);

// Overloads for an opened checkpoint; header-only so this library does not link the importer.
inline absl::Status ValidateTensors(const llmrt::plan::ModelConfig& config,
                                    const Checkpoint& checkpoint) {
  return ValidateTensors(config, checkpoint.tensors());
}
inline absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(
    mlir::MLIRContext& context, const llmrt::plan::ModelConfig& config,
    const Checkpoint& checkpoint) {
  return BuildModule(context, config, checkpoint.tensors());
}

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_ARCH_H_
