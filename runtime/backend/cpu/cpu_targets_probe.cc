// Configure-time probe (CMake try_run): prints the LLMRT_CPU_TARGET names this machine can run,
// separated by ';', so ctest runs the kernel tests once per runnable target (dispatch.h).
#include <cstdio>

#include "hwy/highway.h"
#include "runtime/backend/cpu/cpu_features.h"

int main() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const llmrt::cpu::CpuExtensions extensions = llmrt::cpu::DetectCpuExtensions();
  const char* separator = "";
  struct {
    const char* name;
    int64_t mask;
    bool runnable;
  } targets[] = {
    {"scalar", HWY_SCALAR | HWY_EMU128, true},
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4, true},
    {"avx2", HWY_AVX2, true},
    {"avx2_vnni", HWY_AVX2, extensions.avx_vnni},
    {"avx3", HWY_AVX3, true},
    {"avx3_vnni", HWY_AVX3, extensions.avx512_vnni},
    {"avx3_zen4", HWY_AVX3, extensions.avx512_vnni && extensions.avx512_bf16},
    {"avx3_amx", HWY_AVX3, extensions.avx512_vnni && extensions.amx},
#elif HWY_ARCH_ARM
    {"neon", HWY_NEON, true},
    {"neon_dotprod", HWY_NEON, extensions.neon_dotprod},
    {"neon_i8mm", HWY_NEON, extensions.neon_dotprod && extensions.neon_i8mm},
    {"sve", HWY_SVE, true},
#endif
  };
  for (const auto& target : targets) {
    if ((supported & target.mask) == 0 || !target.runnable) continue;
    std::printf("%s%s", separator, target.name);
    separator = ";";
  }
  return 0;
}
