// The GPU kit's view of the CUDA backend: the same KernelBackend that llmrt runs, over the
// driver's Device wrapped in a RecordingDevice that counts every kernel launch (so a test can
// require that each kernel of the plan's table ran) and, when asked, brackets each launch with
// CUDA events (per-kernel device times for the bench).
//
// Runtime-only: links llmrt's plan, backends and the driver loader, never the compiler, so the
// kit's binaries run on a machine that has only the NVIDIA driver.
//
// Thread-safety: none; one thread drives a backend and its device.
#ifndef LLMRT_TESTS_KIT_KIT_DEVICE_H_
#define LLMRT_TESTS_KIT_KIT_DEVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/cuda/cuda_driver.h"
#include "runtime/backend/cuda/device.h"
#include "runtime/backend/cuda/kernel_backend.h"

namespace llmrt::kit {

// Device time of one kernel over the launches timed so far.
struct KernelTime {
  std::string name;
  int64_t launches = 0;
  double total_ms = 0;
};

class RecordingDevice final : public cuda::Device {
 public:
  // `kernel_names`: the table's entry names, by kernel index.
  RecordingDevice(std::unique_ptr<cuda::Device> inner, std::vector<std::string> kernel_names);
  ~RecordingDevice() override;

  std::string name() const override { return inner_->name(); }
  absl::StatusOr<cuda::DevicePointer> Allocate(uint64_t bytes) override {
    return inner_->Allocate(bytes);
  }
  void Free(cuda::DevicePointer pointer) override { inner_->Free(pointer); }
  absl::Status CopyToDevice(cuda::DevicePointer destination, const void* source,
                            uint64_t bytes) override {
    return inner_->CopyToDevice(destination, source, bytes);
  }
  absl::Status CopyToHost(void* destination, cuda::DevicePointer source, uint64_t bytes) override {
    return inner_->CopyToHost(destination, source, bytes);
  }
  absl::Status CopyOnDevice(cuda::DevicePointer destination, cuda::DevicePointer source,
                            uint64_t bytes) override {
    return inner_->CopyOnDevice(destination, source, bytes);
  }
  absl::Status Launch(int32_t kernel, const cuda::LaunchGeometry& geometry,
                      const LlmcKernelParams& params) override;
  absl::Status Synchronize() override;

  // Launches of each kernel (by index) since creation.
  const std::vector<int64_t>& launch_counts() const { return launch_counts_; }
  const std::vector<std::string>& kernel_names() const { return kernel_names_; }

  // Brackets every later launch with CUDA events until turned off; Synchronize() adds the
  // elapsed times to kernel_times(). The times include any wait for the host between the two
  // events, so where the GPU outruns the launches (small kernels at batch 1) they are upper
  // bounds. Fails when the driver lacks the event API.
  absl::Status EnableTiming(bool enabled);
  std::vector<KernelTime> kernel_times() const;
  void ResetTimes();

 private:
  struct Events;
  absl::Status CollectTimes();

  std::unique_ptr<cuda::Device> inner_;
  std::vector<std::string> kernel_names_;
  std::vector<int64_t> launch_counts_;
  bool timing_ = false;
  std::unique_ptr<Events> events_;
  std::vector<double> total_ms_;
  std::vector<int64_t> timed_launches_;
};

struct KitBackend {
  cuda::GpuInfo gpu;
  std::string table_target;  // "cuda:sm_90", ...
  std::unique_ptr<cuda::KernelStepBackend> backend;
  RecordingDevice* device = nullptr;  // owned by `backend`
};

// The plan's CUDA backend on GPU 0 through a RecordingDevice, with the kernel table llmrt
// would choose for the GPU or, when `target` is set ("cuda:compute_90"), that one (a PTX
// table the driver JIT-compiles); Unavailable ("CUDA backend unavailable: <reason>") without a
// driver or GPU, as CreateCudaBackend.
absl::StatusOr<KitBackend> CreateKitBackend(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                            const BackendOptions& options,
                                            const std::string& target = "");

// Device-to-device copy bandwidth of GPU 0 in bytes/s, counting both the bytes read and the
// bytes written (DRAM traffic): the best of `reps` copies of `bytes` after one warm-up.
absl::StatusOr<double> MeasureCopyBandwidth(uint64_t bytes, int reps);

}  // namespace llmrt::kit

#endif  // LLMRT_TESTS_KIT_KIT_DEVICE_H_
