//===- Passes.h - llm dialect passes and the default pipeline ---*- C++ -*-===//
//
// Pass constructors (createFuseQkvPass(), ...) and registerLlmPasses() for llmc-opt are
// generated from Passes.td. runPipeline() is what the llmc driver calls.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PASSES_PASSES_H_
#define LLMC_PASSES_PASSES_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "ir/LlmDialect.h"
#include "mlir/Pass/Pass.h"

namespace llmc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

// Called after each stage of runPipeline() with the stage's name and index: "import" (0, before
// any pass), then each pass's flag name ("llm-fuse-qkv" 1, ...). A non-OK status stops the
// pipeline and is returned.
using StageCallback =
    std::function<absl::Status(int stageIndex, const std::string &stageName, mlir::ModuleOp)>;

struct PipelineOptions {
  // When not empty, the module is written after each stage to
  // `dumpDir/NN-<stage>.mlir` (00-import.mlir, 01-llm-fuse-qkv.mlir, ...). The directory is
  // created if needed.
  std::string dumpDir;
  // Called after each stage (after the dump), when set.
  StageCallback afterStage;
  // When set, llm-quantize-weights runs with these options after the fusions (so a fused
  // matmul is quantized as one blob) and before llm-tile-cpu (which leaves quantized weights
  // row-major). Unset: a float plan, and the stage list above is unchanged.
  std::optional<QuantizeWeightsPassOptions> quantize;
};

// The default pipeline: llm-fuse-qkv, llm-fuse-gate-up, llm-fuse-add-rms-norm,
// [llm-quantize-weights when options.quantize is set,] llm-plan-memory, llm-tile-cpu. Verifies the
// module before and after each pass. Diagnostics are returned in the status message
// (InvalidArgument when a pass or the verifier fails).
absl::Status runPipeline(mlir::ModuleOp module, const PipelineOptions &options = {});

} // namespace llmc

#endif // LLMC_PASSES_PASSES_H_
