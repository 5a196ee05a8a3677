// CudaDriver: the CUDA driver API, loaded at run time from libcuda.so.1 through a symbol table.
//
// The runtime never links -lcuda: a binary linked against the driver (or its stub) does not
// even start on a machine without one (TOOLCHAIN.md). Load() dlopens the driver, resolves
// every entry point this backend uses by its versioned name (cuMemAlloc_v2, ...), and
// initializes it; anything missing is an Unavailable status naming what and why, so callers
// can print "CUDA backend unavailable: <reason>" and fall back.
//
// CudaDriverDevice is the Device over one GPU's primary context: it loads each kernel's code
// (CUBIN, or PTX the driver JIT-compiles) from the plan as its own module. Every driver call
// goes through one checking helper that records the call, so errors say which call failed
// and why (cuGetErrorString).
//
// Thread-safety: Load() is thread-safe (the driver is loaded once per process); a device is
// driven by one thread.
#ifndef LLMRT_BACKEND_CUDA_CUDA_DRIVER_H_
#define LLMRT_BACKEND_CUDA_CUDA_DRIVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/cuda/device.h"

namespace llmrt::cuda {

struct GpuInfo {
  std::string name;
  int sm_version = 0;      // 90 for compute capability 9.0
  int driver_version = 0;  // e.g. 12080
};

// Loads and initializes the driver and describes GPU `ordinal`; Unavailable with the reason
// (no libcuda.so.1, no device, ...) otherwise.
absl::StatusOr<GpuInfo> ProbeGpu(int ordinal = 0);

// The CUDA kernel table of `meta` for a GPU of `sm_version`: the CUBIN table of that SM, else
// the newest CUBIN of the same major version not newer than the GPU, else the newest PTX
// table not newer than the GPU. NotFound, listing what the plan has, when none fits.
absl::StatusOr<const plan::KernelTable*> SelectKernelTable(const plan::PlanMeta& meta,
                                                           int sm_version);

// A Device on GPU `ordinal` with the kernels of `table` loaded from `blobs`.
absl::StatusOr<std::unique_ptr<Device>> CreateCudaDriverDevice(const plan::PlanMeta& meta,
                                                               const plan::KernelTable& table,
                                                               const BlobLookup& blobs,
                                                               int ordinal = 0);

}  // namespace llmrt::cuda

#endif  // LLMRT_BACKEND_CUDA_CUDA_DRIVER_H_
