//===- EmitCuda.h - CUDA C for every kernel a plan's program needs -*- C++ -*-===//
//
// Input is the plan's Program (with its tensor table and model config), not the MLIR module:
// the Program already carries every constant a kernel needs (widths, heads, head_dim, eps,
// scale, rope, window, weight dtypes), the same emitter can re-emit for a plan read back from
// disk, and the tests need no MLIR.
//
// Each kernel is one `extern "C" __global__` entry that instantiates a template of
// KernelLibrary.cuh with the model's constants as literals; its full source is
// `emission.prelude + kernel.body`. Identical kernels (the same rms_norm in every layer) are
// emitted once; ops refer to them through `opKernels`.
//
// Tile shapes are chosen here (there is no CUDA tiling pass yet): GEMV 8 warps x 4 rows,
// MMA GEMM tiles of 64 tokens x 32 columns x 16, attention splits so that one decode token
// gives about 264 blocks (two waves on an H200's 132 SMs), capped at 16.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMITCUDA_H_
#define LLMC_CODEGEN_CUDA_EMITCUDA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::cuda {

struct EmittedKernel {
  std::string body; // the lines after the prelude: constants, store helper, entry point
  // Name, launch geometry and scratch; the compiler fills code and ptxas' numbers.
  llmrt::plan::KernelTable::Kernel info;
};

struct CudaEmission {
  std::string prelude; // LlmcKernelParams + KernelLibrary.cuh
  std::vector<EmittedKernel> kernels;
  std::vector<std::vector<int32_t>> opKernels; // per program op, indices into `kernels`

  // One kernel's complete source (what NVRTC compiles).
  std::string kernelSource(size_t index) const { return prelude + kernels[index].body; }
  // Every kernel in one translation unit (what the emulation tests compile).
  std::string moduleSource() const;
  // A KernelTable for `target` with names, geometry and op bindings; no code yet.
  llmrt::plan::KernelTable kernelTable(const std::string &target) const;
};

// Emits the kernels of `meta.program()`. Fails, naming the op, when an op or weight dtype has
// no CUDA kernel.
absl::StatusOr<CudaEmission> emitCuda(const llmrt::plan::PlanMeta &meta);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMITCUDA_H_
