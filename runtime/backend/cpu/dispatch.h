// Which SIMD target the CPU kernels run on.
//
// Highway compiles every kernel for SCALAR, SSE4, AVX2 and AVX3 (AVX-512) on x86 (NEON and SVE
// on arm64) and HWY_DYNAMIC_DISPATCH picks the best one the CPU supports. Tiers add instructions
// that Highway 1.0.3 has no target for (cpu_features.h says why): above AVX3, AVX3_VNNI
// (AVX512-VNNI int8 dot products), AVX3_ZEN4 (VNNI and AVX512-BF16; Highway's later name for
// that level) and AVX3_AMX (VNNI and the AMX tiles: AMX-INT8 for the quantized GEMM, AMX-BF16 for
// the F16 / BF16 matmul); above AVX2,
// AVX2_VNNI (the VEX AVX-VNNI of AVX2-only CPUs such as Sierra Forest); on arm64 above NEON,
// NEON_DOTPROD (sdot) and NEON_I8MM (smmla and sdot). Kernels in AVX3 / AVX2 / NEON bodies branch
// on ActiveCpuExtensions() once per call.
//
// The environment variable LLMRT_CPU_TARGET=scalar|sse4|avx2|avx2_vnni|avx3|avx3_vnni|avx3_zen4|
// avx3_amx (x86) or scalar|neon|neon_dotprod|neon_i8mm|sve (arm64) restricts the choice to one
// target (avx2, avx3, neon: without the extensions) so tests can run every code path on one
// machine; a target the CPU cannot run is an error naming what is missing, not a silent fallback.
//
// Thread-safety: the selection is process-wide; call SelectCpuTargetFromEnvironment before
// kernels run (CreateCpuBackend does).
#ifndef LLMRT_BACKEND_CPU_DISPATCH_H_
#define LLMRT_BACKEND_CPU_DISPATCH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "runtime/backend/cpu/cpu_features.h"

namespace llmrt::cpu {

// Restricts dispatch to the target named `name` ("scalar", "sse4", "avx2", "avx2_vnni", "avx3",
// "avx3_vnni", "avx3_zen4", "avx3_amx", "neon", "neon_dotprod", "neon_i8mm", "sve"); "" or "best"
// lifts the restriction. InvalidArgument for an unknown name, FailedPrecondition when this CPU (or
// this build) cannot run it.
absl::Status SelectCpuTarget(absl::string_view name);

// SelectCpuTarget(getenv("LLMRT_CPU_TARGET")) when the variable is set; OK otherwise.
absl::Status SelectCpuTargetFromEnvironment();

// The target the kernels dispatch to now, e.g. "AVX2", "AVX3_ZEN4", "NEON_I8MM".
std::string ActiveCpuTarget();

// The extensions kernels in AVX2 / AVX3 / NEON bodies may use now: the CPU's, restricted by the
// selected target (none at "avx2", "avx3" or "neon"). The default selection leaves out
// AVX512-BF16 where its matmul is the slower path (cpu_features.h, Bf16DotOutrunsFma): on Intel
// CPUs the best target is avx3_vnni, and only LLMRT_CPU_TARGET=avx3_zen4 uses vdpbf16ps.
CpuExtensions ActiveCpuExtensions();

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_DISPATCH_H_
