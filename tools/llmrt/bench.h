// `llmrt bench`: prompt-processing and generation throughput, peak RSS and memory-bandwidth
// utilization of a plan, and the machine's read bandwidth (`llmrt bench --bandwidth`).
#ifndef LLMRT_TOOLS_LLMRT_BENCH_H_
#define LLMRT_TOOLS_LLMRT_BENCH_H_

namespace llmrt {

// argv[1] is "bench"; returns the process exit status (0, 1 error, 2 usage error).
int Bench(int argc, char** argv);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_BENCH_H_
