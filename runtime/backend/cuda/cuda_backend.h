// The CUDA backend: a plan's generated kernels on a GPU.
//
// CreateCudaBackend probes the driver (dlopen, never -lcuda), picks the plan's kernel table for
// the GPU's SM (CUBIN, or PTX the driver JIT-compiles), loads the kernels and runs the step
// program through KernelBackend. Every reason it cannot is an Unavailable status whose message
// starts "CUDA backend unavailable: ".
//
// CreateCudaOrCpuBackend is what a runtime that prefers the GPU calls: the CUDA backend when
// it works, else the CPU backend if the plan targets the CPU (has a "cpu" kernel table), with
// the reason returned in `fallback_reason` for the caller to print.
#ifndef LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_
#define LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"

namespace llmrt::cuda {

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const plan::PlanMeta& meta,
                                                           const BlobLookup& blobs,
                                                           const BackendOptions& options);

// `fallback_reason` (may be null) is set to why CUDA was not used, or cleared.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaOrCpuBackend(const plan::PlanMeta& meta,
                                                                const BlobLookup& blobs,
                                                                const BackendOptions& options,
                                                                std::string* fallback_reason);

// Whether the plan carries CPU kernels (a "cpu" kernel table).
bool PlanTargetsCpu(const plan::PlanMeta& meta);

}  // namespace llmrt::cuda

#endif  // LLMRT_BACKEND_CUDA_CUDA_BACKEND_H_
