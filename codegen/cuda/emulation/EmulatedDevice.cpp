//===- EmulatedDevice.cpp - Generated kernels executed on the CPU ---------===//

#include "codegen/cuda/emulation/EmulatedDevice.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_format.h"
#include "xxhash.h"

// Set by CMake: the host compiler and this folder's emulation header.
#ifndef LLMC_EMULATION_CXX
#define LLMC_EMULATION_CXX "c++"
#endif
#ifndef LLMC_EMULATION_HEADER
#error "LLMC_EMULATION_HEADER must name CudaEmulation.h"
#endif

namespace llmc::cuda {

absl::StatusOr<std::shared_ptr<EmulatedModule>> EmulatedModule::build(const std::string &source,
                                                                      const std::string &cacheDir) {
  ::mkdir(cacheDir.c_str(), 0755);
  // The header is part of what the library depends on: hash it with the source.
  std::ifstream headerFile(LLMC_EMULATION_HEADER);
  std::string header((std::istreambuf_iterator<char>(headerFile)),
                     std::istreambuf_iterator<char>());
  const std::string key = header + source;
  const std::string stem =
      absl::StrFormat("%s/emulated_%016x", cacheDir, XXH64(key.data(), key.size(), 0));
  const std::string library = stem + ".so";
  if (::access(library.c_str(), R_OK) != 0) {
    const std::string sourcePath = stem + ".cc";
    {
      std::ofstream out(sourcePath);
      out << source;
      if (!out)
        return absl::InternalError("cannot write " + sourcePath);
    }
    // -O1: an -O2 build of a module takes twice as long and the kernels run on tiny shapes.
    // Written to a temporary name and renamed, so a concurrent test never loads half a file.
    const std::string temporary = absl::StrFormat("%s.%d.tmp.so", stem, ::getpid());
    const std::string logPath = stem + ".log";
    const std::string command = absl::StrFormat(
        "%s -std=c++17 -O1 -g0 -fPIC -shared -w -include %s -x c++ %s -o %s > %s 2>&1",
        LLMC_EMULATION_CXX, LLMC_EMULATION_HEADER, sourcePath, temporary, logPath);
    const int status = std::system(command.c_str());
    if (status != 0) {
      std::ifstream logFile(logPath);
      std::string log((std::istreambuf_iterator<char>(logFile)), std::istreambuf_iterator<char>());
      if (log.size() > 8000)
        log = log.substr(0, 8000) + "\n...";
      return absl::FailedPreconditionError(absl::StrFormat(
          "the generated CUDA source %s does not compile under emulation (it uses something "
          "CudaEmulation.h lacks, or is wrong): %s\n%s",
          sourcePath, command, log));
    }
    if (std::rename(temporary.c_str(), library.c_str()) != 0)
      return absl::InternalError("cannot rename " + temporary + " to " + library);
  }
  auto module = std::shared_ptr<EmulatedModule>(new EmulatedModule());
  // Every module includes CudaEmulation.h, whose kernel registry and scheduler are function-local
  // statics of inline functions: GCC binds them STB_GNU_UNIQUE, so all modules of the process
  // share one registry, holding pointers into whichever module registered a name last. Unloading
  // a module would leave those dangling (a later plan whose kernel has the same name, and so the
  // same code, jumped into unmapped text: two fixtures of one shape in one test process), so
  // modules stay mapped until the process ends.
  module->handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (module->handle == nullptr)
    return absl::InternalError(absl::StrFormat("dlopen %s: %s", library, ::dlerror()));
  module->launchFunction =
      reinterpret_cast<LaunchFunction>(::dlsym(module->handle, "llmc_emu_launch"));
  if (module->launchFunction == nullptr)
    return absl::InternalError(library + " has no llmc_emu_launch");
  return module;
}

EmulatedModule::~EmulatedModule() {
  if (handle != nullptr)
    ::dlclose(handle);
}

absl::Status EmulatedModule::launch(const std::string &name,
                                    const llmrt::cuda::LaunchGeometry &geometry,
                                    const LlmcKernelParams &params) const {
  char error[1024] = {0};
  if (launchFunction(name.c_str(), geometry.grid, geometry.block, &params, error, sizeof(error)) !=
      0)
    return absl::InternalError(error);
  return absl::OkStatus();
}

EmulatedDevice::EmulatedDevice(std::shared_ptr<EmulatedModule> module,
                               const llmrt::plan::KernelTable &table)
    : module(std::move(module)) {
  for (const auto &kernel : table.kernels())
    kernelNames.push_back(kernel.name());
}

EmulatedDevice::~EmulatedDevice() {
  for (void *allocation : allocations)
    std::free(allocation);
}

absl::StatusOr<llmrt::cuda::DevicePointer> EmulatedDevice::Allocate(uint64_t bytes) {
  // 256 bytes, as cuMemAlloc aligns; calloc-like zeroing is not promised by CUDA, so fill with
  // a NaN pattern: a kernel reading memory nobody wrote shows up as NaN in the tests.
  const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + 255) / 256 * 256;
  void *memory = std::aligned_alloc(256, rounded);
  if (memory == nullptr)
    return absl::ResourceExhaustedError(absl::StrFormat("cannot allocate %d bytes", bytes));
  std::memset(memory, 0xff, rounded);
  allocations.push_back(memory);
  return reinterpret_cast<llmrt::cuda::DevicePointer>(memory);
}

void EmulatedDevice::Free(llmrt::cuda::DevicePointer pointer) {
  auto it = std::find(allocations.begin(), allocations.end(), reinterpret_cast<void *>(pointer));
  if (it == allocations.end())
    return;
  std::free(*it);
  allocations.erase(it);
}

absl::Status EmulatedDevice::CopyToDevice(llmrt::cuda::DevicePointer destination,
                                          const void *source, uint64_t bytes) {
  std::memcpy(reinterpret_cast<void *>(destination), source, bytes);
  return absl::OkStatus();
}

absl::Status EmulatedDevice::CopyToHost(void *destination, llmrt::cuda::DevicePointer source,
                                        uint64_t bytes) {
  std::memcpy(destination, reinterpret_cast<const void *>(source), bytes);
  return absl::OkStatus();
}

absl::Status EmulatedDevice::CopyOnDevice(llmrt::cuda::DevicePointer destination,
                                          llmrt::cuda::DevicePointer source, uint64_t bytes) {
  std::memmove(reinterpret_cast<void *>(destination), reinterpret_cast<const void *>(source),
               bytes);
  return absl::OkStatus();
}

absl::Status EmulatedDevice::Launch(int32_t kernel, const llmrt::cuda::LaunchGeometry &geometry,
                                    const LlmcKernelParams &params) {
  if (kernel < 0 || kernel >= static_cast<int32_t>(kernelNames.size()))
    return absl::InvalidArgumentError(absl::StrFormat("kernel %d outside the table", kernel));
  launchLog.push_back(kernelNames[kernel]);
  return module->launch(kernelNames[kernel], geometry, params);
}

} // namespace llmc::cuda
