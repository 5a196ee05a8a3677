// Configure-time probe (CMake try_run): prints the LLMRT_CPU_TARGET names this machine can run,
// separated by ';', so ctest runs the kernel tests once per runnable target.
#include <cstdio>

#include "hwy/highway.h"

int main() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  const char* separator = "";
  struct {
    const char* name;
    int64_t mask;
  } targets[] = {
    {"scalar", HWY_SCALAR | HWY_EMU128},
#if HWY_ARCH_X86
    {"sse4", HWY_SSE4},
    {"avx2", HWY_AVX2},
    {"avx3", HWY_AVX3},
#elif HWY_ARCH_ARM
    {"neon", HWY_NEON},
    {"sve", HWY_SVE},
#endif
  };
  for (const auto& target : targets) {
    if ((supported & target.mask) == 0) continue;
    std::printf("%s%s", separator, target.name);
    separator = ";";
  }
  return 0;
}
