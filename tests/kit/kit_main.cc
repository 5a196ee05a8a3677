#include "tests/kit/kit_main.h"

#include <cstdio>
#include <cstring>

namespace {

constexpr char kUsage[] =
    "usage: llmrt-kit test [gtest flags]      every kit plan on the device against the CPU\n"
    "       llmrt-kit bench PLAN [flags]      device bandwidth, MBU, kernel times\n"
    "       llmrt-kit probe                   the GPU, or \"no CUDA device\" (exit 3)\n"
    "       llmrt-kit plan strip|fill ...     synthetic models' skeletons\n";

}  // namespace

int main(int argc, char** argv) {
  const char* command = argc > 1 ? argv[1] : "";
  if (std::strcmp(command, "test") == 0) return llmrt::kit::TestMain(argc - 1, argv + 1);
  if (std::strcmp(command, "bench") == 0) return llmrt::kit::BenchMain(argc - 1, argv + 1);
  if (std::strcmp(command, "probe") == 0) return llmrt::kit::ProbeMain();
  if (std::strcmp(command, "plan") == 0) return llmrt::kit::PlanMain(argc - 1, argv + 1);
  std::fputs(kUsage, stderr);
  return 2;
}
