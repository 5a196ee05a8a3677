//===- llmc-opt.cpp - mlir-opt for the llm dialect --------------------------===//
//
// Registers only the dialects the compiler emits (llm, func) and the llm passes: the full
// InitAllDialects set would cost a 25 s translation unit for nothing.
//
//===----------------------------------------------------------------------===//

#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "passes/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<llmc::llm::LlmDialect, mlir::func::FuncDialect>();
  llmc::registerLlmPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "llmc-opt: llm dialect driver\n", registry));
}
