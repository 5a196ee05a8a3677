// The GPU kit's one program, llmrt-kit (one binary instead of three: each would carry its own
// copy of the CPU backend's kernels, and the kit has a size budget):
//   llmrt-kit test [gtest flags]   kit_gpu_test.cc: every plan on the device against the CPU
//   llmrt-kit bench PLAN ...       kit_bench.cc: copy bandwidth, MBU, CUDA-event kernel times
//   llmrt-kit probe                the GPU, or "no CUDA device: <reason>" (exit 3)
//   llmrt-kit plan strip|fill ...  kit_plan.cc: skeletons of the synthetic models
// Each entry point takes the arguments after "llmrt-kit" (argv[0] is the subcommand).
#ifndef LLMRT_TESTS_KIT_KIT_MAIN_H_
#define LLMRT_TESTS_KIT_KIT_MAIN_H_

namespace llmrt::kit {

int TestMain(int argc, char** argv);
int BenchMain(int argc, char** argv);
int ProbeMain();
int PlanMain(int argc, char** argv);

}  // namespace llmrt::kit

#endif  // LLMRT_TESTS_KIT_KIT_MAIN_H_
