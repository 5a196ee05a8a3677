// Device: memory and kernel launches of something that executes generated CUDA kernels.
//
// Two implementations: the CUDA driver (cuda_driver.h, a real GPU through libcuda.so.1) and
// the emulator of codegen/cuda/emulation (the same kernels compiled for the host, in tests).
// KernelBackend runs a plan's step program on either, so the emulation tests exercise the very
// launch sequence, arguments and buffer layout the GPU gets.
//
// Kernels are addressed by their index in the KernelTable the device was created with.
// Thread-safety: none; one thread drives a device.
#ifndef LLMRT_BACKEND_CUDA_DEVICE_H_
#define LLMRT_BACKEND_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/backend/cuda/kernel_params.h"

namespace llmrt::cuda {

// A device address; 0 is null.
using DevicePointer = uint64_t;

struct LaunchGeometry {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual absl::StatusOr<DevicePointer> Allocate(uint64_t bytes) = 0;
  virtual void Free(DevicePointer pointer) = 0;
  virtual absl::Status CopyToDevice(DevicePointer destination, const void* source,
                                    uint64_t bytes) = 0;
  virtual absl::Status CopyToHost(void* destination, DevicePointer source, uint64_t bytes) = 0;
  virtual absl::Status CopyOnDevice(DevicePointer destination, DevicePointer source,
                                    uint64_t bytes) = 0;
  // Enqueues kernel `kernel` of the device's table. Work runs in launch order.
  virtual absl::Status Launch(int32_t kernel, const LaunchGeometry& geometry,
                              const LlmcKernelParams& params) = 0;
  // Waits for all enqueued work; reports an error a kernel raised.
  virtual absl::Status Synchronize() = 0;
};

}  // namespace llmrt::cuda

#endif  // LLMRT_BACKEND_CUDA_DEVICE_H_
