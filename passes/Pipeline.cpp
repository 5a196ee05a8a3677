//===- Pipeline.cpp - the default llm pipeline with per-stage dumps --------===//

#include "passes/Passes.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace llmc {
namespace {

absl::Status writeModule(ModuleOp module, const std::string &path) {
  std::error_code error;
  llvm::raw_fd_ostream stream(path, error);
  if (error)
    return absl::InternalError(absl::StrCat(path, ": cannot write IR dump: ", error.message()));
  module.print(stream);
  stream << "\n";
  stream.close();
  if (stream.has_error())
    return absl::InternalError(absl::StrCat(path, ": cannot write IR dump"));
  return absl::OkStatus();
}

} // namespace

absl::Status runPipeline(ModuleOp module, const PipelineOptions &options) {
  MLIRContext *context = module.getContext();
  std::string diagnostics;
  llvm::raw_string_ostream diagnosticStream(diagnostics);
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diagnostic) {
    diagnosticStream << diagnostic.getLocation() << ": " << diagnostic << "\n";
    return success();
  });

  if (!options.dumpDir.empty()) {
    if (std::error_code error = llvm::sys::fs::create_directories(options.dumpDir))
      return absl::InternalError(
          absl::StrCat(options.dumpDir, ": cannot create IR dump directory: ", error.message()));
  }
  auto afterStage = [&](int index, StringRef name) -> absl::Status {
    if (!options.dumpDir.empty()) {
      llvm::SmallString<256> path(options.dumpDir);
      llvm::sys::path::append(path, absl::StrFormat("%02d-%s.mlir", index, name.str()));
      if (absl::Status status = writeModule(module, std::string(path)); !status.ok())
        return status;
    }
    if (options.afterStage)
      return options.afterStage(index, name.str(), module);
    return absl::OkStatus();
  };

  if (failed(verify(module)))
    return absl::InvalidArgumentError(absl::StrCat("imported module is invalid:\n", diagnostics));
  if (absl::Status status = afterStage(0, "import"); !status.ok())
    return status;

  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(createFuseQkvPass());
  passes.push_back(createFuseGateUpPass());
  passes.push_back(createFuseAddRmsNormPass());
  if (options.quantize)
    passes.push_back(createQuantizeWeightsPass(*options.quantize));
  passes.push_back(createPlanMemoryPass());
  passes.push_back(createTileCpuPass());
  for (auto [index, pass] : llvm::enumerate(passes)) {
    std::string name = pass->getArgument().str();
    // One pass manager per pass, so the module can be observed between passes.
    PassManager passManager(context);
    passManager.addPass(std::move(pass));
    if (failed(passManager.run(module)))
      return absl::InvalidArgumentError(absl::StrCat("pass ", name, " failed:\n", diagnostics));
    if (absl::Status status = afterStage(static_cast<int>(index) + 1, name); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

} // namespace llmc
