#include "runtime/backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/backend/cpu/quant_matmul.h"
#include "runtime/backend/cpu/quant_matmul_exact.h"

namespace llmrt::cpu {
namespace {

// Tokens below which routing and combining run on the calling thread: a ParallelFor's join
// costs more than a few dozen tokens' work.
constexpr int64_t kSerialTokens = 64;

// The top_k largest logits in descending order, ties to the lower index: k passes of an
// arg-max over the experts not yet chosen (a strict > keeps the lower index). The definition
// for every input, NaN included (a NaN is then chosen only where the comparisons leave it).
void TopKByPasses(const float* logits, int32_t num_experts, int32_t top_k, int32_t* ids) {
  for (int32_t j = 0; j < top_k; ++j) {
    int32_t best = -1;
    for (int32_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j; ++i) taken |= ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
    }
    ids[j] = best;
  }
}

void RouteToken(const float* logits, int32_t num_experts, int32_t top_k,
                plan::RouterAttrs::Scoring scoring, bool normalize, int32_t* ids, float* weights) {
  // One pass keeping the best so far sorted: an expert enters only when strictly greater than
  // the k-th and moves up past strictly smaller ones, so equal logits keep index order — the
  // same ids as TopKByPasses on NaN-free logits, in O(E + insertions x k) instead of O(k^2 E):
  // BM_RouteTokens (64 experts, top-8, Zen 5) 0.82 -> 0.11 us a token. A NaN makes the order
  // depend on the comparisons' path, so such a token takes the passes.
  int32_t filled = 0;
  bool nan = false;
  for (int32_t e = 0; e < num_experts; ++e) {
    const float value = logits[e];
    nan |= value != value;
    if (filled == top_k && !(value > logits[ids[top_k - 1]])) continue;
    int32_t position = filled < top_k ? filled++ : top_k - 1;
    for (; position > 0 && value > logits[ids[position - 1]]; --position) {
      ids[position] = ids[position - 1];
    }
    ids[position] = e;
  }
  if (nan) TopKByPasses(logits, num_experts, top_k, ids);
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
  // Each output element is w[0] y[0] + w[1] y[1] + ... (+ gate shared), summed in slot order.
  // kCombineColumns columns at a time go through a local accumulator: a fixed trip count and
  // no aliasing let the compiler vectorize, and each element still sees the scalar loop's
  // multiplies and adds in slot order, so the bits are that loop's. BM_MoeCombine (top-8,
  // hidden 1024, Zen 5): 2.8 -> 0.7 us a token.
  constexpr int64_t kCombineColumns = 64;
  auto combine_columns = [&](int64_t t, int64_t column, auto count) {
    const float* slots = y + t * top_k * hidden + column;
    const float* w = weights + t * top_k;
    float acc[kCombineColumns];
    for (int64_t i = 0; i < count; ++i) acc[i] = w[0] * slots[i];
    for (int32_t j = 1; j < top_k; ++j) {
      for (int64_t i = 0; i < count; ++i) acc[i] += w[j] * slots[j * hidden + i];
    }
    if (shared != nullptr) {
      const float gate = 1.0f / (1.0f + std::exp(-shared_gate[t]));
      const float* s = shared + t * hidden + column;
      for (int64_t i = 0; i < count; ++i) acc[i] += gate * s[i];
    }
    std::memcpy(out + t * hidden + column, acc, count * sizeof(float));
  };
  auto combine = [&](int64_t begin, int64_t end, int32_t) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t column = 0;
      for (; column + kCombineColumns <= hidden; column += kCombineColumns) {
        combine_columns(t, column, std::integral_constant<int64_t, kCombineColumns>());
      }
      if (column < hidden) combine_columns(t, column, hidden - column);
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

namespace {

// Rows below which an expert is never cut into several work items: each piece reads the
// expert's whole weights, which a decode-sized expert (a few rows) streams from memory once.
constexpr int64_t kMinItemRows = 4;

// Rows of an expert that one work item multiplies at most, per thread's scratch: an even share
// of the step's tokens (a token chooses an expert at most once, so no expert has more rows),
// and at least kMinItemRows.
int64_t ItemRowCapacity(int64_t num_tokens, int32_t num_threads) {
  return std::max<int64_t>(kMinItemRows, (num_tokens + num_threads - 1) / std::max(num_threads, 1));
}

// Work items per thread that the split of large experts aims at: with items claimed largest
// first, the threads meet at the op's join within about one of the smallest items. At the
// presets' prefill (512 tokens) it cuts nothing of Qwen3-MoE's 64 experts (~64 rows each,
// blocks up to 256) and halves Mixtral's 8 (~128 rows, blocks of 64).
constexpr int64_t kItemsPerThread = 8;

}  // namespace

int64_t ExpertMatMulScratchInts(int64_t num_tokens, int32_t top_k, int32_t num_experts) {
  // Offsets, the grouped rows and their input rows, then the work items' first rows, row
  // counts and order: every item has at least one row, so there are at most routed of them.
  return num_experts + 1 + 5 * num_tokens * top_k;
}

int64_t ExpertMatMulScratchFloats(int64_t num_tokens, int64_t rows_per_expert,
                                  int32_t num_threads) {
  // One expert at a time: at most num_tokens rows; work items: ItemRowCapacity rows per thread,
  // which together cover num_tokens.
  return std::max<int64_t>(num_tokens, num_threads * ItemRowCapacity(num_tokens, num_threads)) *
         rows_per_expert;
}

int64_t ExpertMatMulThreadScratchBytes(int64_t max_tokens, int32_t num_threads, int64_t cols) {
  // 64-byte multiples keep each thread's scratch aligned like the one it replaces.
  const int64_t bytes =
      std::max(QuantizedActivationBytes(ItemRowCapacity(max_tokens, num_threads), cols),
               QuantizedMatMulExactScratchBytes(1, cols));
  return (bytes + 63) / 64 * 64;
}

namespace {

// Rows routed[0 .. count) of `expert` multiplied on `pool` into `rows_out`, then scattered.
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
  const int64_t routed = args.num_tokens * args.top_k;
  int32_t* offsets = args.int_scratch;
  int32_t* rows = offsets + args.num_experts + 1;
  int32_t* input_rows = rows + routed;
  // Work item i: grouped rows [item_first[i], + item_count[i]), all of one expert.
  int32_t* item_first = input_rows + routed;
  int32_t* item_count = item_first + routed;
  int32_t* order = item_count + routed;
  GroupRoutedRows(args.ids, args.num_tokens, args.top_k, args.num_experts, offsets, rows);
  const int32_t threads = pool.num_threads();
  // Items of at most `block` rows: an expert with more is cut into near-equal blocks.
  const int64_t capacity = ItemRowCapacity(args.num_tokens, threads);
  const int64_t block =
      std::min(capacity, std::max<int64_t>(kMinItemRows, (routed + threads * kItemsPerThread - 1) /
                                                             (threads * kItemsPerThread)));
  int32_t num_items = 0;
  int32_t largest_item = 0;
  for (int32_t e = 0; e < args.num_experts; ++e) {
    const int32_t count = offsets[e + 1] - offsets[e];
    if (count == 0) continue;
    const int32_t pieces = static_cast<int32_t>((count + block - 1) / block);
    for (int32_t piece = 0; piece < pieces; ++piece) {
      const int32_t begin = static_cast<int32_t>(int64_t{count} * piece / pieces);
      const int32_t end = static_cast<int32_t>(int64_t{count} * (piece + 1) / pieces);
      item_first[num_items] = offsets[e] + begin;
      item_count[num_items] = end - begin;
      largest_item = std::max(largest_item, end - begin);
      order[num_items] = num_items;
      ++num_items;
    }
  }
  // Items on single threads only where they are many against the threads: whole items cannot
  // share a thread's idle time, so a thread may finish up to one item after the others, and
  // with fewer rows than 4 largest items per thread (a 1-token decode of a top-2 model on 2 or
  // more threads: one expert per thread, or none) that wait outweighs the joins it saves;
  // there each expert runs over the whole pool instead.
  // A 1-token decode whose experts split evenly among the threads, at least 2 each (top-4 or
  // top-8 on 2 threads), leaves no thread waiting either: every item is one row of an expert of
  // the same shape. There whole experts per thread save a join per expert (Qwen2-MoE int4, top-4
  // of 60 small experts, 2 threads, Intel Xeon, alternating runs: 59-64 -> 76-81 tok/s). Top-2 on
  // 2 threads, one expert each, keeps the whole pool per expert, as chosen above.
  const bool even_decode =
      largest_item == 1 && routed % threads == 0 && routed >= int64_t{2} * threads;
  const bool items_per_thread = threads > 1 && args.single_pools != nullptr &&
                                (routed >= int64_t{4} * threads * largest_item || even_decode);
  if (items_per_thread) {
    // One ParallelForDynamic over every item of the op, each multiplied on its thread's
    // single-thread pool: one join per op instead of one per expert (in a 512-token Qwen3-MoE
    // prefill, 128 per layer, each waiting for the slower half of a ~64-row GEMM). Largest
    // first (every item of an op costs rows x N x K), so the last items claimed are the
    // shortest; ties in expert order. std::sort: in place, no allocation in the step.
    // Measured against experts one after another over the pool (llmrt bench -p 512 -t 2,
    // Zen 5, alternating runs, medians of 3): Qwen3-MoE I4 825 -> 908 tok/s, I8 454 -> 581
    // (586 -> 613 in a quieter minute), f16 529 -> 564; Mixtral f16 477 -> 474 (8 large
    // experts: its joins were already few).
    std::sort(order, order + num_items, [&](int32_t a, int32_t b) {
      if (item_count[a] != item_count[b]) return item_count[a] > item_count[b];
      return a < b;
    });
    pool.ParallelForDynamic(
        num_items,
        [&](int64_t begin, int64_t end, int32_t thread) {
          for (int64_t i = begin; i < end; ++i) {
            const int32_t first = item_first[order[i]];
            MultiplyExpert(*args.single_pools[thread], args, multiply, args.ids[rows[first]],
                           rows + first, item_count[order[i]], input_rows + first,
                           args.float_scratch + thread * capacity * args.rows_per_expert,
                           args.thread_scratch + thread * args.thread_scratch_bytes);
          }
        },
        1);
    return;
  }
  for (int32_t e = 0; e < args.num_experts; ++e) {
    const int32_t count = offsets[e + 1] - offsets[e];
    if (count == 0) continue;
    MultiplyExpert(pool, args, multiply, e, rows + offsets[e], count, input_rows + offsets[e],
                   args.float_scratch, args.matmul_scratch);
  }
}

}  // namespace llmrt::cpu
