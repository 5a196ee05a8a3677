//===- NvrtcCompiler.cpp - CUDA source -> CUBIN/PTX, parallel and cached ---===//

#include "codegen/cuda/NvrtcCompiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "xxhash.h"

#if LLMC_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace llmc::cuda {
namespace {

#if LLMC_HAVE_NVRTC
std::vector<std::string> options(const std::string &target) {
  // -Xptxas -v: registers, spills and shared memory in the log. No fast-math: the emulation
  // tests compare against the CPU with f32 expf/cosf semantics.
  std::vector<std::string> result = {"--gpu-architecture=" + target, "-std=c++17",
                                     "--include-path=" LLMC_CUDA_INCLUDE_DIR, "-default-device"};
  if (target.rfind("sm_", 0) == 0)
    result.push_back("-Xptxas=-v");
  return result;
}

absl::StatusOr<CompiledCode> compileOne(const CompileRequest &request) {
  nvrtcProgram program;
  nvrtcResult result = nvrtcCreateProgram(&program, request.source.c_str(),
                                          (request.entry + ".cu").c_str(), 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS)
    return absl::InternalError(absl::StrCat("nvrtcCreateProgram: ", nvrtcGetErrorString(result)));
  const std::vector<std::string> flags = options(request.target);
  std::vector<const char *> pointers;
  for (const std::string &flag : flags)
    pointers.push_back(flag.c_str());
  result = nvrtcCompileProgram(program, static_cast<int>(pointers.size()), pointers.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(program, &logSize);
  std::string log(logSize, '\0');
  if (logSize > 0)
    nvrtcGetProgramLog(program, log.data());
  if (result != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    return absl::InvalidArgumentError(
        absl::StrFormat("NVRTC failed to compile kernel %s for %s (%s):\n%s", request.entry,
                        request.target, nvrtcGetErrorString(result), log));
  }
  CompiledCode code;
  size_t size = 0;
  if (request.target.rfind("sm_", 0) == 0) {
    nvrtcGetCUBINSize(program, &size);
    code.code.resize(size);
    nvrtcGetCUBIN(program, code.code.data());
    parsePtxasReport(log, code);
  } else {
    nvrtcGetPTXSize(program, &size);
    code.code.resize(size);
    nvrtcGetPTX(program, code.code.data());
  }
  nvrtcDestroyProgram(&program);
  return code;
}
#endif

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return "";
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool writeFileAtomically(const std::string &path, const std::string &contents) {
  const std::string temporary = absl::StrFormat(
      "%s.%d.%x.tmp", path, ::getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(temporary, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out)
      return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

void makeDirectories(const std::string &path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1))
    ::mkdir(path.substr(0, slash).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

uint64_t cacheKey(const CompileRequest &request) {
  std::string key = absl::StrCat(nvrtcVersion(), "\n", request.target, "\n");
#if LLMC_HAVE_NVRTC
  for (const std::string &flag : options(request.target))
    absl::StrAppend(&key, flag, "\n");
#endif
  key += request.source;
  return XXH64(key.data(), key.size(), 0);
}

// Cache entry: "<registers> <spill stores> <spill loads> <shared>\n" then the code.
bool loadCached(const std::string &path, CompiledCode &code) {
  const std::string contents = readFile(path);
  const size_t newline = contents.find('\n');
  if (newline == std::string::npos)
    return false;
  if (std::sscanf(contents.c_str(), "%d %d %d %d", &code.registers, &code.spillStoreBytes,
                  &code.spillLoadBytes, &code.sharedBytes) != 4)
    return false;
  code.code = contents.substr(newline + 1);
  code.fromCache = true;
  return !code.code.empty();
}

} // namespace

std::string nvrtcVersion() {
#if LLMC_HAVE_NVRTC
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "";
  return absl::StrFormat("nvrtc %d.%d", major, minor);
#else
  return "";
#endif
}

std::string defaultCacheDir() {
  if (const char *dir = std::getenv("LLMC_CACHE_DIR"); dir != nullptr && *dir)
    return absl::StrCat(dir, "/cuda");
  if (const char *dir = std::getenv("XDG_CACHE_HOME"); dir != nullptr && *dir)
    return absl::StrCat(dir, "/llmc/cuda");
  if (const char *home = std::getenv("HOME"); home != nullptr && *home)
    return absl::StrCat(home, "/.cache/llmc/cuda");
  return "";
}

void parsePtxasReport(const std::string &log, CompiledCode &code) {
  // ptxas info    : Used 32 registers, used 0 barriers, 4608 bytes smem, 368 bytes cmem[0]
  // ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  static const std::regex registers(R"(Used (\d+) registers)");
  static const std::regex shared(R"((\d+) bytes smem)");
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::smatch match;
  if (std::regex_search(log, match, registers))
    code.registers = std::stoi(match[1]);
  if (std::regex_search(log, match, shared))
    code.sharedBytes = std::stoi(match[1]);
  if (std::regex_search(log, match, spills)) {
    code.spillStoreBytes = std::stoi(match[1]);
    code.spillLoadBytes = std::stoi(match[2]);
  }
}

absl::StatusOr<std::vector<CompiledCode>> compileAll(const std::vector<CompileRequest> &requests,
                                                     const std::string &cacheDir, int threads) {
#if !LLMC_HAVE_NVRTC
  (void)threads;
  (void)cacheDir;
  if (!requests.empty())
    return absl::FailedPreconditionError(
        "llmc was built without NVRTC (no CUDA toolkit found at configure time): cannot compile "
        "CUDA kernels");
  return std::vector<CompiledCode>();
#else
  // Identical requests compile once: the first of each key is the one that runs.
  std::vector<uint64_t> keys(requests.size());
  std::map<uint64_t, size_t> firstOfKey;
  std::vector<size_t> unique;
  for (size_t i = 0; i < requests.size(); ++i) {
    keys[i] = cacheKey(requests[i]);
    if (firstOfKey.emplace(keys[i], i).second)
      unique.push_back(i);
  }
  if (!cacheDir.empty())
    makeDirectories(cacheDir);
  std::vector<absl::StatusOr<CompiledCode>> results(requests.size(),
                                                    absl::UnknownError("not compiled"));
  std::atomic<size_t> next{0};
  auto worker = [&]() {
    for (size_t item = next++; item < unique.size(); item = next++) {
      const size_t index = unique[item];
      const std::string path =
          cacheDir.empty() ? "" : absl::StrFormat("%s/%016x.bin", cacheDir, keys[index]);
      CompiledCode cached;
      if (!path.empty() && loadCached(path, cached)) {
        results[index] = std::move(cached);
        continue;
      }
      results[index] = compileOne(requests[index]);
      if (results[index].ok() && !path.empty()) {
        const CompiledCode &code = *results[index];
        // A failed cache write only costs a recompile next time.
        writeFileAtomically(path,
                            absl::StrFormat("%d %d %d %d\n", code.registers, code.spillStoreBytes,
                                            code.spillLoadBytes, code.sharedBytes) +
                                code.code);
      }
    }
  };
  if (threads <= 0)
    threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min<int>(threads, static_cast<int>(unique.size()));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &thread : pool)
    thread.join();
  std::vector<CompiledCode> compiled(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const absl::StatusOr<CompiledCode> &result = results[firstOfKey[keys[i]]];
    if (!result.ok())
      return result.status();
    compiled[i] = *result;
  }
  return compiled;
#endif
}

} // namespace llmc::cuda
