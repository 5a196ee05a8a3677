#include "tests/kit/kit_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt::kit {
namespace {

constexpr char kUnavailable[] = "CUDA backend unavailable: ";

// The driver's event API, resolved from the libcuda.so.1 that cuda_driver.cc already loaded
// (dlopen of a loaded library returns the same handle). Events are recorded on the legacy
// default stream, the one KernelBackend launches on, so they order with its kernels.
using CUresult = int;
using CUevent = struct CUevent_st*;
using CUstream = struct CUstream_st*;

struct EventApi {
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
};

absl::StatusOr<EventApi> LoadEventApi() {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return absl::UnavailableError(absl::StrCat("dlopen: ", dlerror()));
  EventApi api;
  std::string missing;
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
    if (function == nullptr) absl::StrAppend(&missing, " ", name);
  };
  resolve(api.cuEventCreate, "cuEventCreate");
  resolve(api.cuEventRecord, "cuEventRecord");
  resolve(api.cuEventSynchronize, "cuEventSynchronize");
  resolve(api.cuEventElapsedTime, "cuEventElapsedTime");
  resolve(api.cuEventDestroy, "cuEventDestroy_v2");
  if (!missing.empty()) {
    return absl::UnavailableError(absl::StrCat("libcuda.so.1 lacks", missing));
  }
  return api;
}

absl::Status Check(CUresult result, const char* call) {
  if (result == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s failed with CUresult %d", call, result));
}

}  // namespace

// One (start, end) event pair per launch of the current step; the pairs are reused across
// steps, so timing allocates only while a step has more launches than any before it.
struct RecordingDevice::Events {
  EventApi api;
  std::vector<std::pair<CUevent, CUevent>> pairs;
  std::vector<int32_t> kernels;  // kernel of pair i in the current step
  ~Events() {
    for (auto& [start, end] : pairs) {
      api.cuEventDestroy(start);
      api.cuEventDestroy(end);
    }
  }
};

RecordingDevice::RecordingDevice(std::unique_ptr<cuda::Device> inner,
                                 std::vector<std::string> kernel_names)
    : inner_(std::move(inner)),
      kernel_names_(std::move(kernel_names)),
      launch_counts_(kernel_names_.size(), 0),
      total_ms_(kernel_names_.size(), 0.0),
      timed_launches_(kernel_names_.size(), 0) {}

RecordingDevice::~RecordingDevice() = default;

absl::Status RecordingDevice::Launch(int32_t kernel, const cuda::LaunchGeometry& geometry,
                                     const LlmcKernelParams& params) {
  if (kernel >= 0 && kernel < static_cast<int32_t>(launch_counts_.size())) {
    ++launch_counts_[kernel];
  }
  if (!timing_) return inner_->Launch(kernel, geometry, params);
  const size_t index = events_->kernels.size();
  if (index == events_->pairs.size()) {
    CUevent start = nullptr, end = nullptr;
    if (auto status = Check(events_->api.cuEventCreate(&start, 0), "cuEventCreate"); !status.ok()) {
      return status;
    }
    if (auto status = Check(events_->api.cuEventCreate(&end, 0), "cuEventCreate"); !status.ok()) {
      events_->api.cuEventDestroy(start);
      return status;
    }
    events_->pairs.emplace_back(start, end);
  }
  events_->kernels.push_back(kernel);
  auto [start, end] = events_->pairs[index];
  if (auto status = Check(events_->api.cuEventRecord(start, nullptr), "cuEventRecord");
      !status.ok()) {
    return status;
  }
  if (auto status = inner_->Launch(kernel, geometry, params); !status.ok()) return status;
  return Check(events_->api.cuEventRecord(end, nullptr), "cuEventRecord");
}

absl::Status RecordingDevice::Synchronize() {
  if (auto status = inner_->Synchronize(); !status.ok()) return status;
  return timing_ ? CollectTimes() : absl::OkStatus();
}

absl::Status RecordingDevice::CollectTimes() {
  for (size_t i = 0; i < events_->kernels.size(); ++i) {
    auto [start, end] = events_->pairs[i];
    if (auto status = Check(events_->api.cuEventSynchronize(end), "cuEventSynchronize");
        !status.ok()) {
      return status;
    }
    float ms = 0;
    if (auto status = Check(events_->api.cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
        !status.ok()) {
      return status;
    }
    const int32_t kernel = events_->kernels[i];
    if (kernel >= 0 && kernel < static_cast<int32_t>(total_ms_.size())) {
      total_ms_[kernel] += ms;
      ++timed_launches_[kernel];
    }
  }
  events_->kernels.clear();
  return absl::OkStatus();
}

absl::Status RecordingDevice::EnableTiming(bool enabled) {
  if (enabled && events_ == nullptr) {
    absl::StatusOr<EventApi> api = LoadEventApi();
    if (!api.ok()) return api.status();
    events_ = std::make_unique<Events>();
    events_->api = *api;
  }
  timing_ = enabled;
  return absl::OkStatus();
}

std::vector<KernelTime> RecordingDevice::kernel_times() const {
  std::vector<KernelTime> times;
  for (size_t i = 0; i < kernel_names_.size(); ++i) {
    if (timed_launches_[i] > 0)
      times.push_back({kernel_names_[i], timed_launches_[i], total_ms_[i]});
  }
  std::sort(times.begin(), times.end(),
            [](const KernelTime& a, const KernelTime& b) { return a.total_ms > b.total_ms; });
  return times;
}

void RecordingDevice::ResetTimes() {
  std::fill(total_ms_.begin(), total_ms_.end(), 0.0);
  std::fill(timed_launches_.begin(), timed_launches_.end(), 0);
}

absl::StatusOr<KitBackend> CreateKitBackend(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                            const BackendOptions& options,
                                            const std::string& target) {
  KitBackend result;
  absl::StatusOr<cuda::GpuInfo> gpu = cuda::ProbeGpu(0);
  if (!gpu.ok()) return gpu.status();
  result.gpu = *gpu;
  const plan::KernelTable* table = nullptr;
  if (target.empty()) {
    absl::StatusOr<const plan::KernelTable*> selected =
        cuda::SelectKernelTable(meta, gpu->sm_version);
    if (!selected.ok()) return selected.status();
    table = *selected;
  } else {
    for (const plan::KernelTable& candidate : meta.program().kernel_tables()) {
      if (candidate.target() == target) table = &candidate;
    }
    if (table == nullptr) {
      return absl::NotFoundError(absl::StrCat("the plan has no kernel table ", target));
    }
  }
  result.table_target = table->target();
  absl::StatusOr<std::unique_ptr<cuda::Device>> inner =
      cuda::CreateCudaDriverDevice(meta, *table, blobs, 0);
  if (!inner.ok()) {
    return absl::UnavailableError(absl::StrCat(kUnavailable, inner.status().message()));
  }
  std::vector<std::string> names;
  for (const plan::KernelTable::Kernel& kernel : table->kernels()) names.push_back(kernel.name());
  auto device = std::make_unique<RecordingDevice>(*std::move(inner), std::move(names));
  result.device = device.get();
  absl::StatusOr<std::unique_ptr<cuda::KernelStepBackend>> backend =
      cuda::CreateKernelBackend(meta, *table, blobs, options, std::move(device));
  if (!backend.ok()) return backend.status();
  result.backend = *std::move(backend);
  return result;
}

absl::StatusOr<double> MeasureCopyBandwidth(uint64_t bytes, int reps) {
  plan::PlanMeta meta;
  plan::KernelTable table;
  absl::StatusOr<std::unique_ptr<cuda::Device>> device = cuda::CreateCudaDriverDevice(
      meta, table, [](int) { return nullptr; }, 0);
  if (!device.ok()) return device.status();
  absl::StatusOr<cuda::DevicePointer> source = (*device)->Allocate(bytes);
  if (!source.ok()) return source.status();
  absl::StatusOr<cuda::DevicePointer> destination = (*device)->Allocate(bytes);
  if (!destination.ok()) {
    (*device)->Free(*source);
    return destination.status();
  }
  double best = 0;
  absl::Status status;
  for (int rep = -1; rep < reps && status.ok(); ++rep) {  // rep -1: warm-up
    const auto start = std::chrono::steady_clock::now();
    status = (*device)->CopyOnDevice(*destination, *source, bytes);
    if (status.ok()) status = (*device)->Synchronize();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep >= 0 && seconds > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
  }
  (*device)->Free(*source);
  (*device)->Free(*destination);
  if (!status.ok()) return status;
  return best;
}

}  // namespace llmrt::kit
