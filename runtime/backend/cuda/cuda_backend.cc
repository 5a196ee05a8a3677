#include "runtime/backend/cuda/cuda_backend.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_driver.h"
#include "runtime/backend/cuda/kernel_backend.h"

namespace llmrt::cuda {
namespace {

constexpr char kUnavailable[] = "CUDA backend unavailable: ";

absl::Status Unavailable(const absl::Status& status) {
  if (absl::StartsWith(status.message(), kUnavailable)) {
    return absl::UnavailableError(status.message());
  }
  return absl::UnavailableError(absl::StrCat(kUnavailable, status.message()));
}

}  // namespace

bool PlanTargetsCpu(const plan::PlanMeta& meta) {
  for (const plan::KernelTable& table : meta.program().kernel_tables()) {
    if (table.target() == "cpu") return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const plan::PlanMeta& meta,
                                                           const BlobLookup& blobs,
                                                           const BackendOptions& options) {
  absl::StatusOr<GpuInfo> gpu = ProbeGpu(0);
  if (!gpu.ok()) return Unavailable(gpu.status());
  absl::StatusOr<const plan::KernelTable*> table = SelectKernelTable(meta, gpu->sm_version);
  if (!table.ok()) return Unavailable(table.status());
  absl::StatusOr<std::unique_ptr<Device>> device = CreateCudaDriverDevice(meta, **table, blobs, 0);
  if (!device.ok()) return Unavailable(device.status());
  return CreateKernelBackend(meta, **table, blobs, options, *std::move(device));
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaOrCpuBackend(const plan::PlanMeta& meta,
                                                                const BlobLookup& blobs,
                                                                const BackendOptions& options,
                                                                std::string* fallback_reason) {
  if (fallback_reason != nullptr) fallback_reason->clear();
  absl::StatusOr<std::unique_ptr<Backend>> cuda = CreateCudaBackend(meta, blobs, options);
  if (cuda.ok() || !PlanTargetsCpu(meta)) return cuda;
  if (fallback_reason != nullptr) *fallback_reason = std::string(cuda.status().message());
  return cpu::CreateCpuBackend(meta, blobs, options);
}

}  // namespace llmrt::cuda
