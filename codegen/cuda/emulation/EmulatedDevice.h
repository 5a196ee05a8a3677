//===- EmulatedDevice.h - Generated kernels executed on the CPU -*- C++ -*-===//
//
// EmulatedModule compiles a generated CUDA source (CudaEmission::moduleSource()) as host C++
// with CudaEmulation.h force-included, into a shared library, and loads it. A compile error
// (the source uses something the emulator lacks) is returned with the compiler's log.
// Libraries are cached in `cacheDir` by the xxh64 of the source, so identical sources across
// tests compile once.
//
// EmulatedDevice is an llmrt::cuda::Device over such a module: "device memory" is host memory
// and a launch runs the kernel on the emulator, synchronously. With it, KernelBackend runs a
// plan's whole step program on the CPU with the very kernels a GPU would run.
//
// Thread-safety: none (the emulator's scheduler is process-global).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_EMULATEDDEVICE_H_
#define LLMC_CODEGEN_CUDA_EMULATION_EMULATEDDEVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/backend/cuda/device.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::cuda {

class EmulatedModule {
public:
  // Compiles (or finds in `cacheDir`) and loads `source`.
  static absl::StatusOr<std::shared_ptr<EmulatedModule>> build(const std::string &source,
                                                               const std::string &cacheDir);
  ~EmulatedModule();

  // Runs kernel `name` synchronously.
  absl::Status launch(const std::string &name, const llmrt::cuda::LaunchGeometry &geometry,
                      const LlmcKernelParams &params) const;

private:
  using LaunchFunction = int (*)(const char *, const unsigned *, const unsigned *, const void *,
                                 char *, size_t);
  void *handle = nullptr;
  LaunchFunction launchFunction = nullptr;
};

class EmulatedDevice final : public llmrt::cuda::Device {
public:
  EmulatedDevice(std::shared_ptr<EmulatedModule> module, const llmrt::plan::KernelTable &table);
  ~EmulatedDevice() override;

  std::string name() const override { return "cuda-emulated"; }
  absl::StatusOr<llmrt::cuda::DevicePointer> Allocate(uint64_t bytes) override;
  void Free(llmrt::cuda::DevicePointer pointer) override;
  absl::Status CopyToDevice(llmrt::cuda::DevicePointer destination, const void *source,
                            uint64_t bytes) override;
  absl::Status CopyToHost(void *destination, llmrt::cuda::DevicePointer source,
                          uint64_t bytes) override;
  absl::Status CopyOnDevice(llmrt::cuda::DevicePointer destination,
                            llmrt::cuda::DevicePointer source, uint64_t bytes) override;
  absl::Status Launch(int32_t kernel, const llmrt::cuda::LaunchGeometry &geometry,
                      const LlmcKernelParams &params) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  // Launches so far, for tests that check which kernels ran.
  const std::vector<std::string> &launches() const { return launchLog; }

private:
  std::shared_ptr<EmulatedModule> module;
  std::vector<std::string> kernelNames;
  std::vector<void *> allocations;
  std::vector<std::string> launchLog;
};

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_EMULATEDDEVICE_H_
