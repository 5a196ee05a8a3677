//===- CudaTarget.h - CUDA kernel tables of a plan -------------*- C++ -*-===//
//
// The CUDA part of `llmc compile --target cuda:sm_80,...`: emits every kernel the plan's
// program needs (EmitCuda), compiles each with NVRTC to a CUBIN per requested SM and to PTX
// for the newest one (NvrtcCompiler: parallel, cached, identical kernels once), writes the
// code as blobs through the PlanWriter and records, per target, a KernelTable: entry names,
// launch geometry, shared memory, registers, spills, op bindings, code tensors.
//
// Targets: "cuda:sm_80" ... (CUBIN, one per requested SM) and "cuda:compute_90" (PTX of the
// newest requested SM). Code blobs are tensor table entries named "cuda.<arch>.<entry>",
// dtype I32 (the plan has no byte dtype), zero-padded to 4 bytes.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_CUDATARGET_H_
#define LLMC_CODEGEN_CUDA_CUDATARGET_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/plan/plan_writer.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::cuda {

struct CudaTargetOptions {
  std::vector<int> smVersions; // e.g. {80, 86, 89, 90}
  std::string cacheDir;        // "" : no cache
  int threads = 0;             // compile threads; 0: hardware threads
};

// Parses "sm_80" or "80" (sm_75 ... sm_121, the range NVRTC 13 accepts).
absl::StatusOr<int> parseSmVersion(const std::string &text);

// Adds the CUDA kernel tables of `meta.program()` to it, and their code to the tensor table.
absl::Status addCudaKernelTables(llmrt::plan::PlanMeta &meta, llmrt::plan::PlanWriter &writer,
                                 const CudaTargetOptions &options);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_CUDATARGET_H_
