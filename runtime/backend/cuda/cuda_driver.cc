#include "runtime/backend/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llmrt::cuda {
namespace {

// The driver API's types, declared here so the runtime needs no CUDA headers to build.
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;

// The symbol table: every entry point this backend calls, by its exported (versioned) name.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoD)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

struct LoadedDriver {
  DriverApi api = {};
  absl::Status status;
};

const LoadedDriver& Driver() {
  static LoadedDriver* loaded = [] {
    auto* result = new LoadedDriver();
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      result->status = absl::UnavailableError(absl::StrCat(
          "CUDA backend unavailable: no CUDA driver (dlopen libcuda.so.1: ", dlerror(), ")"));
      return result;
    }
    std::vector<std::string> missing;
    auto resolve = [&](auto& function, const char* name) {
      function =
          reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
      if (function == nullptr) missing.push_back(name);
    };
    DriverApi& api = result->api;
    resolve(api.cuInit, "cuInit");
    resolve(api.cuDriverGetVersion, "cuDriverGetVersion");
    resolve(api.cuDeviceGetCount, "cuDeviceGetCount");
    resolve(api.cuDeviceGet, "cuDeviceGet");
    resolve(api.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    resolve(api.cuDeviceGetName, "cuDeviceGetName");
    resolve(api.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    resolve(api.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    resolve(api.cuCtxSetCurrent, "cuCtxSetCurrent");
    resolve(api.cuCtxSynchronize, "cuCtxSynchronize");
    resolve(api.cuModuleLoadData, "cuModuleLoadData");
    resolve(api.cuModuleUnload, "cuModuleUnload");
    resolve(api.cuModuleGetFunction, "cuModuleGetFunction");
    resolve(api.cuMemAlloc, "cuMemAlloc_v2");
    resolve(api.cuMemFree, "cuMemFree_v2");
    resolve(api.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    resolve(api.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    resolve(api.cuMemcpyDtoD, "cuMemcpyDtoD_v2");
    resolve(api.cuLaunchKernel, "cuLaunchKernel");
    resolve(api.cuGetErrorString, "cuGetErrorString");
    if (!missing.empty()) {
      result->status =
          absl::UnavailableError(absl::StrCat("CUDA backend unavailable: libcuda.so.1 lacks ",
                                              absl::StrJoin(missing, ", "), " (driver too old?)"));
      return result;
    }
    if (CUresult error = api.cuInit(0); error != CUDA_SUCCESS) {
      const char* text = nullptr;
      api.cuGetErrorString(error, &text);
      result->status = absl::UnavailableError(absl::StrFormat(
          "CUDA backend unavailable: cuInit failed with %d (%s)", error, text ? text : "?"));
    }
    return result;
  }();
  return *loaded;
}

// Checks a driver call; the message names the call and the driver's explanation.
absl::Status Check(CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  const char* text = nullptr;
  Driver().api.cuGetErrorString(result, &text);
  return absl::InternalError(
      absl::StrFormat("CUDA: %s failed with error %d (%s)", call, result, text ? text : "?"));
}
#define LLMRT_CU(call) Check(Driver().api.call, #call)

class CudaDriverDevice final : public Device {
 public:
  ~CudaDriverDevice() override {
    const DriverApi& api = Driver().api;
    if (context_ == nullptr) return;
    api.cuCtxSetCurrent(context_);
    for (CUmodule module : modules_) api.cuModuleUnload(module);
    api.cuDevicePrimaryCtxRelease(device_);
  }

  std::string name() const override { return "cuda"; }

  absl::Status Open(const plan::PlanMeta& meta, const plan::KernelTable& table,
                    const BlobLookup& blobs, int ordinal) {
    if (auto status = LLMRT_CU(cuDeviceGet(&device_, ordinal)); !status.ok()) return status;
    if (auto status = LLMRT_CU(cuDevicePrimaryCtxRetain(&context_, device_)); !status.ok()) {
      context_ = nullptr;
      return status;
    }
    if (auto status = LLMRT_CU(cuCtxSetCurrent(context_)); !status.ok()) return status;
    for (const plan::KernelTable::Kernel& kernel : table.kernels()) {
      if (kernel.code_tensor() < 0 || kernel.code_tensor() >= meta.tensors_size() ||
          kernel.code_size() > meta.tensors(kernel.code_tensor()).size_bytes()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "kernel table %s: kernel %s has code tensor %d of %d bytes, outside the tensor table "
            "or larger than its blob",
            table.target(), kernel.name(), kernel.code_tensor(), kernel.code_size()));
      }
      // PTX must be NUL-terminated for the driver; the blob is zero-padded, but a PTX blob whose
      // size is a multiple of 4 has no padding, so copy it with a terminator.
      const uint8_t* code = blobs(kernel.code_tensor());
      std::string image(reinterpret_cast<const char*>(code), kernel.code_size());
      image.push_back('\0');
      CUmodule module = nullptr;
      if (auto status = LLMRT_CU(cuModuleLoadData(&module, image.data())); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat(status.message(), " loading kernel ",
                                                        kernel.name(), " of ", table.target()));
      }
      modules_.push_back(module);
      CUfunction function = nullptr;
      if (auto status = LLMRT_CU(cuModuleGetFunction(&function, module, kernel.name().c_str()));
          !status.ok()) {
        return status;
      }
      functions_.push_back(function);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<DevicePointer> Allocate(uint64_t bytes) override {
    CUdeviceptr pointer = 0;
    if (auto status = LLMRT_CU(cuMemAlloc(&pointer, bytes)); !status.ok()) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("%s (allocating %d bytes)", status.message(), bytes));
    }
    return pointer;
  }
  void Free(DevicePointer pointer) override { Driver().api.cuMemFree(pointer); }
  absl::Status CopyToDevice(DevicePointer destination, const void* source,
                            uint64_t bytes) override {
    return LLMRT_CU(cuMemcpyHtoD(destination, source, bytes));
  }
  absl::Status CopyToHost(void* destination, DevicePointer source, uint64_t bytes) override {
    return LLMRT_CU(cuMemcpyDtoH(destination, source, bytes));
  }
  absl::Status CopyOnDevice(DevicePointer destination, DevicePointer source,
                            uint64_t bytes) override {
    return LLMRT_CU(cuMemcpyDtoD(destination, source, bytes));
  }
  absl::Status Launch(int32_t kernel, const LaunchGeometry& geometry,
                      const LlmcKernelParams& params) override {
    if (kernel < 0 || kernel >= static_cast<int32_t>(functions_.size())) {
      return absl::InvalidArgumentError(absl::StrFormat("kernel %d outside the table", kernel));
    }
    LlmcKernelParams copy = params;
    void* arguments[] = {&copy};
    return LLMRT_CU(cuLaunchKernel(functions_[kernel], geometry.grid[0], geometry.grid[1],
                                   geometry.grid[2], geometry.block[0], geometry.block[1],
                                   geometry.block[2], 0, nullptr, arguments, nullptr));
  }
  absl::Status Synchronize() override { return LLMRT_CU(cuCtxSynchronize()); }

 private:
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::vector<CUmodule> modules_;
  std::vector<CUfunction> functions_;
};

}  // namespace

absl::StatusOr<GpuInfo> ProbeGpu(int ordinal) {
  const LoadedDriver& driver = Driver();
  if (!driver.status.ok()) return driver.status;
  int count = 0;
  if (auto status = LLMRT_CU(cuDeviceGetCount(&count)); !status.ok()) {
    return absl::UnavailableError(absl::StrCat("CUDA backend unavailable: ", status.message()));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(absl::StrFormat(
        "CUDA backend unavailable: GPU %d requested, the driver sees %d", ordinal, count));
  }
  CUdevice device = 0;
  GpuInfo info;
  int major = 0, minor = 0;
  char name[256] = {0};
  if (auto status = LLMRT_CU(cuDeviceGet(&device, ordinal)); !status.ok()) return status;
  if (auto status = LLMRT_CU(
          cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device));
      !status.ok()) {
    return status;
  }
  if (auto status = LLMRT_CU(
          cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device));
      !status.ok()) {
    return status;
  }
  driver.api.cuDeviceGetName(name, sizeof(name) - 1, device);
  driver.api.cuDriverGetVersion(&info.driver_version);
  info.name = name;
  info.sm_version = major * 10 + minor;
  return info;
}

absl::StatusOr<const plan::KernelTable*> SelectKernelTable(const plan::PlanMeta& meta,
                                                           int sm_version) {
  const plan::KernelTable* best_cubin = nullptr;
  int best_cubin_version = -1;
  const plan::KernelTable* best_ptx = nullptr;
  int best_ptx_version = -1;
  std::vector<std::string> targets;
  for (const plan::KernelTable& table : meta.program().kernel_tables()) {
    targets.push_back(table.target());
    int version = 0;
    if (std::sscanf(table.target().c_str(), "cuda:sm_%d", &version) == 1) {
      // A CUBIN runs on GPUs of its major version with an equal or newer minor one.
      if (version / 10 == sm_version / 10 && version <= sm_version &&
          version > best_cubin_version) {
        best_cubin = &table;
        best_cubin_version = version;
      }
    } else if (std::sscanf(table.target().c_str(), "cuda:compute_%d", &version) == 1) {
      if (version <= sm_version && version > best_ptx_version) {
        best_ptx = &table;
        best_ptx_version = version;
      }
    }
  }
  if (best_cubin != nullptr) return best_cubin;
  if (best_ptx != nullptr) return best_ptx;
  return absl::NotFoundError(absl::StrFormat(
      "CUDA backend unavailable: the plan has no kernels for sm_%d (its targets: %s); compile "
      "it with llmc --target cuda:sm_%d",
      sm_version, targets.empty() ? "none" : absl::StrJoin(targets, ", "), sm_version));
}

absl::StatusOr<std::unique_ptr<Device>> CreateCudaDriverDevice(const plan::PlanMeta& meta,
                                                               const plan::KernelTable& table,
                                                               const BlobLookup& blobs,
                                                               int ordinal) {
  const LoadedDriver& driver = Driver();
  if (!driver.status.ok()) return driver.status;
  auto device = std::make_unique<CudaDriverDevice>();
  if (absl::Status status = device->Open(meta, table, blobs, ordinal); !status.ok()) {
    return status;
  }
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace llmrt::cuda
