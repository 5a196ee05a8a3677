//===- NvrtcCompiler.h - CUDA source -> CUBIN/PTX, parallel and cached -*- C++ -*-===//
//
// Compiles kernel sources with NVRTC: "sm_XY" gives a CUBIN (NVRTC runs ptxas inside, and its
// `-Xptxas -v` report gives registers, spills and shared memory), "compute_XY" gives PTX, the
// forward-compatible fallback a newer GPU's driver JIT-compiles.
//
// Requests run on a pool of threads (NVRTC programs are independent). Results are cached on
// disk under `cacheDir` keyed by xxh64(source, target, options, NVRTC version): a second
// compile of the same model, or another model with the same kernel shapes, costs file reads.
// Identical requests in one call compile once.
//
// A source that fails to compile is an error carrying NVRTC's log. Without NVRTC (llmc built
// without the CUDA toolkit) every call fails with a message saying so.
//
// Thread-safety: compileAll may be called concurrently; the cache uses write-then-rename.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_NVRTCCOMPILER_H_
#define LLMC_CODEGEN_CUDA_NVRTCCOMPILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llmc::cuda {

struct CompileRequest {
  std::string source;
  std::string entry;  // for messages and the program name
  std::string target; // "sm_80" (CUBIN) or "compute_90" (PTX)
};

struct CompiledCode {
  std::string code;   // CUBIN bytes, or PTX text
  int registers = -1; // -1: unknown (PTX)
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int sharedBytes = 0;
  bool fromCache = false;
};

// "nvrtc 13.0", or "" when llmc was built without NVRTC.
std::string nvrtcVersion();

// Compiles every request. `cacheDir` empty: no cache. `threads` <= 0: hardware threads.
absl::StatusOr<std::vector<CompiledCode>> compileAll(const std::vector<CompileRequest> &requests,
                                                     const std::string &cacheDir, int threads);

// The default cache directory: $LLMC_CACHE_DIR/cuda, else $XDG_CACHE_HOME/llmc/cuda, else
// $HOME/.cache/llmc/cuda; "" when none of them is set.
std::string defaultCacheDir();

// Parses ptxas' verbose report (as NVRTC's log carries it) into `code`. Exposed for tests.
void parsePtxasReport(const std::string &log, CompiledCode &code);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_NVRTCCOMPILER_H_
