// Shared setup of the attention micro-benchmarks (kernels_bench.cc, quant_bench.cc): decode
// attention at TinyLlama's shape (32 query heads, 4 kv heads, head_dim 64, blocks of 16).
#ifndef LLMRT_BENCH_KERNELS_ATTENTION_BENCH_H_
#define LLMRT_BENCH_KERNELS_ATTENTION_BENCH_H_

#include <cstdint>
#include <vector>

#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

inline constexpr int32_t kBenchHeads = 32, kBenchKvHeads = 4, kBenchHeadDim = 64, kBenchBlock = 16;

// AttentionArgs for `tokens` new tokens at the end of a `context`-long sequence whose blocks
// are `block_table`, with the per-token tables, positions and `scratch_stride` floats of
// scratch per thread of `pool` it points to. The caller sets the cache fields.
class AttentionBench {
 public:
  AttentionBench(ThreadPool& pool, int64_t tokens, int64_t context,
                 const std::vector<int32_t>& block_table, int64_t scratch_stride, const float* q,
                 float* out)
      : tables_(tokens, block_table.data()),
        index_(tokens),
        scratch_(scratch_stride * pool.num_threads()) {
    for (int64_t t = 0; t < tokens; ++t) index_[t] = context - tokens + t;
    args_.q = q;
    args_.out = out;
    args_.num_heads = kBenchHeads;
    args_.num_kv_heads = kBenchKvHeads;
    args_.head_dim = kBenchHeadDim;
    args_.block_size = kBenchBlock;
    args_.scale = 0.125f;
    args_.num_tokens = tokens;
    args_.token_block_table = tables_.data();
    args_.token_index = index_.data();
    args_.scratch = scratch_.data();
    args_.scratch_stride = scratch_stride;
  }
  AttentionBench(const AttentionBench&) = delete;
  AttentionBench& operator=(const AttentionBench&) = delete;

  AttentionArgs& args() { return args_; }

 private:
  std::vector<const int32_t*> tables_;
  std::vector<int64_t> index_;
  std::vector<float> scratch_;
  AttentionArgs args_;
};

}  // namespace llmrt::cpu

#endif  // LLMRT_BENCH_KERNELS_ATTENTION_BENCH_H_
