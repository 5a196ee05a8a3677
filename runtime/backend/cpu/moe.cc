#include "runtime/backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_matmul_exact.h"

namespace llmrt::cpu {
namespace {

// Tokens below which routing and combining run on the calling thread: a ParallelFor's join
// costs more than a few dozen tokens' work.
constexpr int64_t kSerialTokens = 64;

void RouteToken(const float* logits, int32_t num_experts, int32_t top_k,
                plan::RouterAttrs::Scoring scoring, bool normalize, int32_t* ids, float* weights) {
  // k passes of an arg-max over the experts not yet chosen; a strict > keeps the lower index
  // on ties. top_k is small (<= 8 in every model we know), so this beats a sort.
  for (int32_t j = 0; j < top_k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j; ++i) taken |= ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[j] = best;
  }
  const float top = logits[ids[0]];
  float chosen = 0.0f;
  for (int32_t j = 0; j < top_k; ++j) chosen += weights[j] = std::exp(logits[ids[j]] - top);
  float denominator = chosen;
  if (scoring == plan::RouterAttrs::SOFTMAX_TOPK && !normalize) {
    denominator = 0.0f;
    for (int32_t e = 0; e < num_experts; ++e) denominator += std::exp(logits[e] - top);
  }
  for (int32_t j = 0; j < top_k; ++j) weights[j] /= denominator;
}

}  // namespace

void RouteTokens(ThreadPool& pool, const float* logits, int64_t num_tokens, int32_t num_experts,
                 int32_t top_k, plan::RouterAttrs::Scoring scoring, bool normalize, int32_t* ids,
                 float* weights, int32_t* counts) {
  auto route = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t t = begin; t < end; ++t) {
      RouteToken(logits + t * num_experts, num_experts, top_k, scoring, normalize, ids + t * top_k,
                 weights + t * top_k);
    }
  };
  if (num_tokens < kSerialTokens) {
    route(0, num_tokens, 0);
  } else {
    pool.ParallelFor(num_tokens, route, 16);
  }
  if (counts != nullptr) {
    for (int64_t r = 0; r < num_tokens * top_k; ++r) ++counts[ids[r]];
  }
}

void GroupRoutedRows(const int32_t* ids, int64_t num_tokens, int32_t top_k, int32_t num_experts,
                     int32_t* offsets, int32_t* rows) {
  const int64_t routed = num_tokens * top_k;
  std::fill(offsets, offsets + num_experts + 1, 0);
  for (int64_t r = 0; r < routed; ++r) ++offsets[ids[r] + 1];
  for (int32_t e = 0; e < num_experts; ++e) offsets[e + 1] += offsets[e];
  // Place rows at a moving cursor per expert (offsets[e] advanced), then shift back.
  for (int64_t r = 0; r < routed; ++r) rows[offsets[ids[r]]++] = static_cast<int32_t>(r);
  for (int32_t e = num_experts; e > 0; --e) offsets[e] = offsets[e - 1];
  offsets[0] = 0;
}

void MoeCombine(ThreadPool& pool, const float* y, const float* weights, const float* shared,
                const float* shared_gate, int64_t num_tokens, int32_t top_k, int64_t hidden,
                float* out) {
  auto combine = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = out + t * hidden;
      const float* slots = y + t * top_k * hidden;
      const float* w = weights + t * top_k;
      for (int64_t i = 0; i < hidden; ++i) row[i] = w[0] * slots[i];
      for (int32_t j = 1; j < top_k; ++j) {
        for (int64_t i = 0; i < hidden; ++i) row[i] += w[j] * slots[j * hidden + i];
      }
      if (shared != nullptr) {
        const float gate = 1.0f / (1.0f + std::exp(-shared_gate[t]));
        for (int64_t i = 0; i < hidden; ++i) row[i] += gate * shared[t * hidden + i];
      }
    }
  };
  if (num_tokens < kSerialTokens) {
    combine(0, num_tokens, 0);
  } else {
    pool.ParallelFor(num_tokens, combine, 8);
  }
}

MatrixView ExpertMatrix(const MatrixView& stack, int64_t rows, int32_t expert) {
  MatrixView view = stack;
  view.rows = rows;
  const int64_t first_row = rows * expert;
  if (view.data != nullptr) {
    const int64_t row_bytes = IsQuantizedMatrix(stack.dtype)
                                  ? QuantizedMatrixBytes(stack.dtype, 1, stack.cols)
                                  : MatrixBytes(stack.dtype, 1, stack.cols);
    view.data += first_row * row_bytes;
  }
  if (stack.group_size > 0) {
    const int64_t groups = stack.cols / stack.group_size;
    if (view.scales != nullptr) view.scales += first_row * groups;
    if (view.zero_points != nullptr) view.zero_points += first_row * groups;
    if (view.exponents != nullptr) view.exponents += first_row * groups;
  }
  return view;
}

int64_t ExpertMatMulScratchInts(int64_t num_tokens, int32_t top_k, int32_t num_experts) {
  // Offsets, the chosen experts, the grouped rows and their input rows.
  return 2 * num_experts + 1 + 2 * num_tokens * top_k;
}

int64_t ExpertMatMulScratchFloats(int64_t num_tokens, int64_t rows_per_expert,
                                  int32_t num_threads) {
  // One expert at a time: a token chooses an expert at most once, so an expert has at most
  // num_tokens rows. One per thread: kExpertParallelRows rows each.
  return std::max<int64_t>(num_tokens, int64_t{kExpertParallelRows} * num_threads) *
         rows_per_expert;
}

int64_t ExpertMatMulThreadScratchBytes(int64_t cols) {
  // 64-byte multiples keep each thread's scratch aligned like the one it replaces.
  const int64_t bytes = std::max(QuantizedActivationBytes(kExpertParallelRows, cols),
                                 QuantizedMatMulExactScratchBytes(1, cols));
  return (bytes + 63) / 64 * 64;
}

namespace {

// Expert e's rows (routed, count of them) multiplied on `pool` into `rows_out`, then scattered.
void MultiplyExpert(ThreadPool& pool, const ExpertMatMulArgs& args, ExpertRowsMatMul multiply,
                    int32_t expert, const int32_t* routed, int32_t count, int32_t* input_rows,
                    float* rows_out, void* scratch) {
  // Gate/up read row t of x for every slot of token t; down reads its slot's own row of the
  // [T top_k, K] view.
  for (int32_t i = 0; i < count; ++i) {
    input_rows[i] = args.sliced ? routed[i] : routed[i] / args.top_k;
  }
  MatMulOutput parts[8];
  std::vector<MatMulOutput> many;
  MatMulOutput* outputs = parts;
  if (args.num_outputs > 8) {
    many.resize(args.num_outputs);
    outputs = many.data();
  }
  for (int32_t o = 0; o < args.num_outputs; ++o) {
    outputs[o] = {rows_out + count * args.outputs[o].begin, args.outputs[o].begin,
                  args.outputs[o].width};
  }
  const int64_t n = args.rows_per_expert;
  multiply(pool, args.x, count, input_rows, ExpertMatrix(args.weights, n, expert),
           args.bias != nullptr ? args.bias + expert * n : nullptr, outputs, args.num_outputs,
           scratch);
  for (int32_t o = 0; o < args.num_outputs; ++o) {
    const int64_t width = args.outputs[o].width;
    for (int32_t i = 0; i < count; ++i) {
      std::memcpy(args.outputs[o].data + routed[i] * width, outputs[o].data + i * width,
                  width * sizeof(float));
    }
  }
}

}  // namespace

void ExpertMatMul(ThreadPool& pool, const ExpertMatMulArgs& args, ExpertRowsMatMul multiply) {
  int32_t* offsets = args.int_scratch;
  int32_t* chosen = offsets + args.num_experts + 1;
  int32_t* rows = chosen + args.num_experts;
  int32_t* input_rows = rows + args.num_tokens * args.top_k;
  GroupRoutedRows(args.ids, args.num_tokens, args.top_k, args.num_experts, offsets, rows);
  int32_t num_chosen = 0, most_rows = 0;
  for (int32_t e = 0; e < args.num_experts; ++e) {
    const int32_t count = offsets[e + 1] - offsets[e];
    if (count == 0) continue;
    chosen[num_chosen++] = e;
    most_rows = std::max(most_rows, count);
  }
  const int32_t threads = pool.num_threads();
  if (threads > 1 && num_chosen > 1 && most_rows <= kExpertParallelRows &&
      args.single_pools != nullptr) {
    // Largest experts first, so the last items to be claimed are the shortest.
    std::stable_sort(chosen, chosen + num_chosen, [&](int32_t a, int32_t b) {
      return offsets[a + 1] - offsets[a] > offsets[b + 1] - offsets[b];
    });
    pool.ParallelForDynamic(
        num_chosen,
        [&](int64_t begin, int64_t end, int32_t thread) {
          for (int64_t i = begin; i < end; ++i) {
            const int32_t e = chosen[i];
            MultiplyExpert(*args.single_pools[thread], args, multiply, e, rows + offsets[e],
                           offsets[e + 1] - offsets[e], input_rows + offsets[e],
                           args.float_scratch + thread * kExpertParallelRows * args.rows_per_expert,
                           args.thread_scratch + thread * args.thread_scratch_bytes);
          }
        },
        1);
    return;
  }
  for (int32_t i = 0; i < num_chosen; ++i) {
    const int32_t e = chosen[i];
    MultiplyExpert(pool, args, multiply, e, rows + offsets[e], offsets[e + 1] - offsets[e],
                   input_rows + offsets[e], args.float_scratch, args.matmul_scratch);
  }
}

}  // namespace llmrt::cpu
