//===- CudaCost_main.cpp - llmc-cuda-cost: expected GPU time per kernel ---===//
//
// Usage: llmc-cuda-cost PLAN [--context N] [--prefill N]
// Prints, for the plan's model, the cost table of CostModel.h for a decode step (1 token at
// context N, default min(1024, max positions)) and a prefill step (N tokens, default 512):
// the numbers docs/cuda.md quotes, to judge a first GPU run against.
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <cstdlib>
#include <string>

#include "codegen/cuda/CostModel.h"
#include "runtime/plan/plan_reader.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: llmc-cuda-cost PLAN [--context N] [--prefill N]\n");
    return 1;
  }
  int context = 0, prefill = 512;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (value <= 0 || (flag != "--context" && flag != "--prefill")) {
      std::fprintf(stderr, "llmc-cuda-cost: bad argument %s %s\n", argv[i], argv[i + 1]);
      return 1;
    }
    (flag == "--context" ? context : prefill) = value;
  }
  auto opened = llmrt::plan::Plan::Open(argv[1], llmrt::plan::PlanOpenOptions());
  if (!opened.ok()) {
    std::fprintf(stderr, "llmc-cuda-cost: %s\n", std::string(opened.status().message()).c_str());
    return 1;
  }
  const llmrt::plan::PlanMeta &meta = (*opened)->meta();
  if (context == 0) {
    const int64_t positions = meta.config().max_position_embeddings();
    context = static_cast<int>(positions > 0 && positions < 1024 ? positions : 1024);
  }
  for (auto [tokens, length] : {std::pair<int, int>{1, context}, {prefill, prefill}}) {
    auto table = llmc::cuda::costTable(meta, tokens, length);
    if (!table.ok()) {
      std::fprintf(stderr, "llmc-cuda-cost: %s\n", std::string(table.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", table->c_str());
  }
  return 0;
}
