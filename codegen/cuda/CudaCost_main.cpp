//===- CudaCost_main.cpp - llmc-cuda-cost: expected GPU time per kernel ---===//
//
// Usage: llmc-cuda-cost PLAN [--context N] [--prefill N] [--kv-cache f32|f16|bf16|int8]
// Prints, for the plan's model, the cost table of CostModel.h for a decode step (1 token at
// context N, default min(1024, max positions)) and a prefill step (N tokens, default 512):
// the numbers docs/cuda.md quotes, to judge a first GPU run against. --kv-cache: the costs
// with that KV cache dtype instead of the plan's (what `llmc compile --kv-cache` would give).
//
//===----------------------------------------------------------------------===//

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "codegen/cuda/CostModel.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/plan_reader.h"

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: llmc-cuda-cost PLAN [--context N] [--prefill N] "
                         "[--kv-cache f32|f16|bf16|int8]\n");
    return 1;
  }
  int context = 0, prefill = 512;
  std::optional<llmrt::plan::DType> kvDtype;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--kv-cache") {
      auto parsed = llmrt::kv::ParseKvDType(argv[i + 1]);
      if (!parsed.ok()) {
        std::fprintf(stderr, "llmc-cuda-cost: %s\n",
                     std::string(parsed.status().message()).c_str());
        return 1;
      }
      kvDtype = *parsed;
      continue;
    }
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
  llmrt::plan::PlanMeta meta = (*opened)->meta();
  if (kvDtype)
    meta.mutable_kv_cache()->set_dtype(*kvDtype);
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
