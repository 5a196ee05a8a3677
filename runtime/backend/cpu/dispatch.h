// Which SIMD target the CPU kernels run on.
//
// Highway compiles every kernel for SCALAR, SSE4, AVX2 and AVX3 (AVX-512) on x86 (NEON and SVE
// on arm64) and HWY_DYNAMIC_DISPATCH picks the best one the CPU supports. The environment
// variable LLMRT_CPU_TARGET=scalar|sse4|avx2|avx3 restricts the choice to one target so tests
// can run every code path on one machine; a target the CPU cannot run is an error, not a
// silent fallback.
//
// Thread-safety: the selection is process-wide; call SelectCpuTargetFromEnvironment before
// kernels run (CreateCpuBackend does).
#ifndef LLMRT_BACKEND_CPU_DISPATCH_H_
#define LLMRT_BACKEND_CPU_DISPATCH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace llmrt::cpu {

// Restricts dispatch to the target named `name` ("scalar", "sse4", "avx2", "avx3", "neon",
// "sve"); "" or "best" lifts the restriction. InvalidArgument for an unknown name,
// FailedPrecondition when this CPU (or this build) cannot run it.
absl::Status SelectCpuTarget(absl::string_view name);

// SelectCpuTarget(getenv("LLMRT_CPU_TARGET")) when the variable is set; OK otherwise.
absl::Status SelectCpuTargetFromEnvironment();

// The target the kernels dispatch to now, e.g. "AVX2".
std::string ActiveCpuTarget();

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_DISPATCH_H_
