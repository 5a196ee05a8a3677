// Matmul kernels: x [M, K] f32 times w [N, K]^T in F32/F16/BF16, f32 accumulation.
//
// ROW_PANELS weights (the layout codegen packs; plan.proto Tensor.Layout) go through one
// register-blocked micro-kernel, PanelKernel<kTokens, kPanels>: for each of the K columns it
// widens the 16 weights of each of kPanels panels (one contiguous 32-byte f16 run per panel) to
// f32 vectors and FMAs them with broadcasts of kTokens activation values, so each weight load
// feeds kTokens FMAs and each broadcast feeds kPanels x 16 / lanes FMAs. Prefill (AVX2) runs
// 6 tokens x 1 panel = 12 accumulators, the classic 6x16 shape: 2 weight loads and 6 broadcasts
// per 12 FMAs, so the two FMA pipes, not the loads, bound it. Decode runs 1 token x 4 panels:
// 8 independent FMA chains (two FMA pipes x 4-cycle latency) over 4 weight streams.
//
// Prefill of F16/BF16 weights (64 rows or more) widens the panels to f32 once per chunk of rows,
// 1024 columns at a time, and runs the same tiles on the copy (SweepWidened): no conversion per
// token tile.
//
// Every output element is ONE f32 FMA chain over k = 0..K-1 in order, whatever kTokens and
// kPanels are: a token's result never depends on which tokens share its step (a sequence gives
// the same logits alone or batched, to the bit), and the ILP comes from independent outputs,
// never from splitting one dot product.
//
// Threads split the panels in whole panels (16 output columns = 64 bytes of f32 per row, so no
// two threads write one cache line of an aligned output): for decode, runs of panels from 4
// regions of the matrix claimed dynamically, each read as its own stream and prefetched ahead
// (ForEachRegionCall); for more rows, contiguous chunks of panel groups (see MatMulPanels), each
// thread sweeping all token rows over its panels, which stay in its L2 meanwhile. Either way
// the weights are read from memory exactly once per matmul.
//
// ROW_MAJOR weights (tied embeddings, hand-built test plans) use per-row dot products.
//
// BF16 ROW_PANELS weights on the avx3_zen4 tier (AVX512-BF16, dispatch.h; checked once per
// call) take MatMulPanelsBf16 instead: vdpbf16ps multiplies bf16 pairs and adds both products
// to an f32 lane, 32 multiply-adds per instruction against an FMA's 16, with no widening of the
// weights. The activations are rounded to bf16 once per call into a per-thread buffer of
// (x_k, x_k+1) pairs. Per pair of columns Bf16PanelKernel loads each panel's 64 bytes (column
// k's 16 weights, then column k+1's), interleaves them into per-row (w_k, w_k+1) pairs with one
// vpermw shared by the tile's tokens, and issues one vdpbf16ps per token and panel against the
// token's broadcast pair; an odd K ends with (w_K-1, 0) x (x_K-1, 0). Zen 5, 1 thread, M = 512:
// ~2.5x the f32 FMA path's GFLOPS (kernels_bench).
//
// Numerics of that tier: BF16 weights are exact; activations are rounded to bf16 (round to
// nearest even, relative error at most 2^-8; denormals flushed to zero), as transformers' bf16
// forward and llama.cpp's BF16 path do; each product of two bf16 values is exact in f32 and the
// products are summed in f32, two per lane per instruction, with vdpbf16ps's semantics (round
// to nearest even, denormal inputs and results flushed, MXCSR ignored). So an output is within
// K 2^-24 sum|w x| (the f32 accumulation) of the exact sum over the rounded activations, and
// within 2^-8 sum|w x| more of the f32-activation paths' result. Each output is still one chain
// over the column pairs in order whatever the tile, so batch invariance holds on the tier (a
// token's bits do not depend on its step's other tokens); results differ between tiers.
// F16 and F32 weights stay on the f32 FMA path on every tier: rounding F16 weights to bf16 would
// drop 3 of their 11 significand bits (and F32's 16 of 24), changing the weights themselves.
// ROW_MAJOR BF16 (tied embeddings) keeps the widening dot products.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "runtime/backend/cpu/cpu_features.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/region_schedule.h"
#include "runtime/backend/cpu/thread_buffer.h"
#include "runtime/plan/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr size_t kLanes = hn::MaxLanes(DF());
static_assert(kPanelRows % kLanes == 0, "a panel must be whole vectors");
constexpr int kVectorsPerPanel = static_cast<int>(kPanelRows / kLanes);

// Accumulator registers a micro-kernel may use: 12 of AVX2's/SSE4's 16 (the rest hold the
// broadcasts and one weight vector), 24 of AVX-512's/SVE's 32.
constexpr int kMaxAccumulators = kVectorsPerPanel == 1 ? 24 : 12;
// Token rows per micro-kernel call: AVX-512 8 (8 x 1 vector; more rows only add broadcast
// loads), AVX2 6 (6 x 2), SSE4/NEON 3 (3 x 4), SCALAR 1.
constexpr int kMaxTokens = std::max(1, std::min(8, kMaxAccumulators / kVectorsPerPanel));
// Panels per micro-kernel call at most: decode's 4 weight streams and 4 x 2 FMA chains on AVX2.
constexpr int kMaxPanels = 4;

// Panels one call covers for `tokens` rows: as many as the accumulators allow, up to 4.
constexpr int PanelsFor(int tokens) {
  return std::max(1, std::min(kMaxPanels, kMaxAccumulators / (tokens * kVectorsPerPanel)));
}

// Adjacent panels a prefill tile of kMaxTokens rows covers: AVX-512 2 (8 tokens x 2 panels = 16
// accumulators, 2 weight conversions and 8 broadcasts per 16 FMAs), every other target 1 (its
// accumulators are full at one panel). On AVX-512 one panel left 8 FMA chains, just enough for
// the FMA latency, and a vcvtph2ps (two of the FMA ports' uops on Intel) per 8 FMAs. Measured
// (llmrt_kernels_bench BM_MatMul<F16>, M = 512, 1 thread, Intel Xeon with AVX512-FP16, GFLOPS at
// 2560 x 2048 / 2048 x 5632): 1 panel 79-86 / 91-100, 2 panels 96-104 / 108-110, 3 panels
// 96 / 109 (and a larger L2 footprint: the thread's panels plus the next ones it prefetches).
constexpr int kPrefillPanels = std::min(2, PanelsFor(kMaxTokens));

// What a micro-kernel prefetches besides the weights it loads (see PanelKernel).
enum class Prefetch { kNone, kNext, kAhead };

// What a kNext call prefetches: the thread's next panels, as the plan stores them (the widened
// prefill computes on f32 copies and prefetches F16/BF16).
struct NextPanels {
  const char* first = nullptr;  // column 0 of the first panel
  int64_t panel_bytes = 0;      // from one panel to the next
  int64_t column_bytes = 0;     // one column of a panel: 16 weights
};

// How far ahead of its loads a decode micro-kernel prefetches each weight stream. The weights'
// conversion and FMAs fill the scheduler with uops that wait for their loads, so the core alone
// keeps only ~1 KiB of each stream in flight and the hardware prefetcher does not make up the
// rest. Measured (llmrt_kernels_bench BM_DecodeGemvMemory, f16, 512 MiB from a file mapping,
// Zen 5, 1 thread, GB/s at K = 256 / 1024 / 2048 / 5632): none 27.3 / 28.9 / 30.5 / 33.9;
// 1 KiB 29.3 / 32.5 / 31.7 / 33.5; 2 KiB 30.4 / 34.4 / 35.3 / 35.9; 3 KiB 28.1 / 31.6 / 33.3 /
// 34.1; 4 KiB 27.9 / 30.9 / 30.6 / 32.3 (the avx2 tier on the same machine: none 26.4 / 26.7 /
// 29.6 / 33.0, 2 KiB 29.3 / 33.4 / 36.1 / 37.7).
constexpr int64_t kPrefetchAheadBytes = 2048;

HWY_INLINE VF LoadWeights(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadWeights(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, p));
}
HWY_INLINE VF LoadWeights(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::bfloat16_t, DF> db;
  return hn::PromoteTo(df, hn::LoadU(db, p));
}

HWY_INLINE float ToFloat(float value) { return value; }
HWY_INLINE float ToFloat(hwy::float16_t value) {
  uint16_t bits;
  std::memcpy(&bits, &value, 2);
  return plan::F16ToF32(bits);
}
HWY_INLINE float ToFloat(hwy::bfloat16_t value) {
  uint16_t bits;
  std::memcpy(&bits, &value, 2);
  return plan::Bf16ToF32(bits);
}

// tile[t * kPanels * kPanelRows + p * kPanelRows + r] = dot(x_rows[t], row r of panel p), for
// the kPanels panels starting at `panels` (panel_stride elements apart), each dot product one
// FMA chain in column order. The small loops are fully unrolled (pragmas) so the accumulators
// live in registers; without that GCC keeps them on the stack and every FMA becomes a
// load-FMA-store (measured: 3x slower). With many tokens the weights are loaded first and each
// broadcast is used at once (6 tokens: 12 accumulators + 2 weights + 1 broadcast = 15
// registers); with many panels the broadcasts come first and each weight vector is used at
// once (4 panels: 8 + 1 + 1).
//
// kPrefetch: kNext (prefill) also prefetches `next`, the next kPanels panels this thread
// will use, at the pace of the weight loads (one panel column per column), so that memory
// delivers them while this call computes on panels already in L2 (see MatMulPanels). kAhead
// (decode) prefetches each of its panels' own weights kPrefetchAheadBytes ahead of the loads
// (see ForEachRegionCall).
//
// resume (nullptr: none): a tile this kernel stored for the columns before these, whose chains
// continue here (the widened prefill's column slices, SweepWidened); f32 stores and loads are
// exact, so an output is still one chain in column order.
template <int kTokens, int kPanels, Prefetch kPrefetch, typename W>
HWY_NOINLINE void PanelKernel(const W* HWY_RESTRICT panels, int64_t panel_stride, int64_t cols,
                              const float* const* x_rows, const NextPanels& next,
                              const float* resume, float* tile) {
  const DF df;
  VF acc[kTokens][kPanels][kVectorsPerPanel];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 16
      for (int v = 0; v < kVectorsPerPanel; ++v) {
        acc[t][p][v] = resume == nullptr ? hn::Zero(df)
                                         : hn::LoadU(df, resume + (t * kPanels + p) * kPanelRows +
                                                             static_cast<int64_t>(v) * kLanes);
      }
    }
  }
  const float* x[kTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) x[t] = x_rows[t];
  for (int64_t col = 0; col < cols; ++col) {
    const W* HWY_RESTRICT weights = panels + col * kPanelRows;
    if constexpr (kPrefetch == Prefetch::kNext) {
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) {
        __builtin_prefetch(next.first + p * next.panel_bytes + col * next.column_bytes, /*rw=*/0,
                           /*locality=*/3);
      }
    }
    if constexpr (kPrefetch == Prefetch::kAhead) {
      // One 64-byte line per panel every 64 / (16 x sizeof(W)) columns.
      if (col % (64 / (kPanelRows * sizeof(W))) == 0) {
#pragma GCC unroll 16
        for (int p = 0; p < kPanels; ++p) {
          __builtin_prefetch(
              reinterpret_cast<const char*>(weights + p * panel_stride) + kPrefetchAheadBytes,
              /*rw=*/0, /*locality=*/3);
        }
      }
    }
    if constexpr (kTokens >= kPanels * kVectorsPerPanel) {
      VF w[kPanels][kVectorsPerPanel];
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 16
        for (int v = 0; v < kVectorsPerPanel; ++v) {
          w[p][v] = LoadWeights(df, weights + p * panel_stride + v * kLanes);
        }
      }
#pragma GCC unroll 16
      for (int t = 0; t < kTokens; ++t) {
        const VF broadcast = hn::Set(df, x[t][col]);
#pragma GCC unroll 16
        for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 16
          for (int v = 0; v < kVectorsPerPanel; ++v) {
            acc[t][p][v] = hn::MulAdd(w[p][v], broadcast, acc[t][p][v]);
          }
        }
      }
    } else {
      VF broadcast[kTokens];
#pragma GCC unroll 16
      for (int t = 0; t < kTokens; ++t) broadcast[t] = hn::Set(df, x[t][col]);
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 16
        for (int v = 0; v < kVectorsPerPanel; ++v) {
          const VF w = LoadWeights(df, weights + p * panel_stride + v * kLanes);
#pragma GCC unroll 16
          for (int t = 0; t < kTokens; ++t) {
            acc[t][p][v] = hn::MulAdd(w, broadcast[t], acc[t][p][v]);
          }
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p) {
#pragma GCC unroll 16
      for (int v = 0; v < kVectorsPerPanel; ++v) {
        hn::StoreU(acc[t][p][v], df,
                   tile + (t * kPanels + p) * kPanelRows + static_cast<int64_t>(v) * kLanes);
      }
    }
  }
}

// Where each of a panel's output columns goes.
struct PanelDestinations {
  float* column[kPanelRows];   // row 0 of the column (only [0] when contiguous)
  int64_t stride[kPanelRows];  // (only [0] when contiguous)
  float bias[kPanelRows];
  int count = 0;  // valid columns (the last group of a ROW_MAJOR matrix may be short)
  // All kPanelRows columns are adjacent in one output (column[c] == column[0] + c): the
  // common case (fused outputs are multiples of 16 wide), written with vector stores.
  bool contiguous = false;
};

void ResolvePanel(int64_t first_column, int64_t total_columns, const float* bias,
                  const MatMulOutput* outputs, int32_t num_outputs,
                  PanelDestinations* destinations) {
  destinations->count =
      static_cast<int>(std::min<int64_t>(kPanelRows, total_columns - first_column));
  // The common case first: a whole panel inside one output, written with vector stores, which
  // read only column[0], stride[0] and bias (decode resolves 4 panels per micro-kernel call:
  // the general loop below was 2.4% of a Mixtral-shape f16 decode step).
  if (destinations->count == kPanelRows) {
    int32_t first = 0;
    while (first + 1 < num_outputs && first_column >= outputs[first + 1].begin) ++first;
    const bool inside =
        first + 1 == num_outputs || first_column + kPanelRows <= outputs[first + 1].begin;
    if (inside) {
      destinations->column[0] = outputs[first].data + (first_column - outputs[first].begin);
      destinations->stride[0] = outputs[first].width;
      if (bias != nullptr) {
        std::memcpy(destinations->bias, bias + first_column, sizeof(destinations->bias));
      } else {
        std::fill(destinations->bias, destinations->bias + kPanelRows, 0.0f);
      }
      destinations->contiguous = true;
      return;
    }
  }
  int32_t output = 0;
  for (int c = 0; c < destinations->count; ++c) {
    const int64_t column = first_column + c;
    while (output + 1 < num_outputs && column >= outputs[output + 1].begin) ++output;
    destinations->column[c] = outputs[output].data + (column - outputs[output].begin);
    destinations->stride[c] = outputs[output].width;
    destinations->bias[c] = bias != nullptr ? bias[column] : 0.0f;
  }
  destinations->contiguous = destinations->count == kPanelRows;
  for (int c = 1; c < destinations->count && destinations->contiguous; ++c) {
    destinations->contiguous = destinations->column[c] == destinations->column[0] + c &&
                               destinations->stride[c] == destinations->stride[0];
  }
}

// out[row, panel's columns] = values[0..15] + bias.
HWY_INLINE void StorePanelRow(const PanelDestinations& destinations, int64_t row,
                              const float* HWY_RESTRICT values) {
  if (destinations.contiguous) {
    const DF df;
    float* out = destinations.column[0] + row * destinations.stride[0];
#pragma GCC unroll 16
    for (int v = 0; v < kVectorsPerPanel; ++v) {
      const size_t offset = static_cast<size_t>(v) * kLanes;
      hn::StoreU(hn::Add(hn::LoadU(df, values + offset), hn::LoadU(df, destinations.bias + offset)),
                 df, out + offset);
    }
    return;
  }
  for (int c = 0; c < destinations.count; ++c) {
    destinations.column[c][row * destinations.stride[c]] = values[c] + destinations.bias[c];
  }
}

// One prefill tile: PanelKernel with mode kNext or kNone.
template <int kTokens, int kPanels, typename W>
HWY_INLINE void PrefillTile(const W* panels, int64_t panel_stride, int64_t cols,
                            const float* const* x_rows, Prefetch mode, const NextPanels& next,
                            const float* resume, float* tile) {
  if (mode == Prefetch::kNext) {
    PanelKernel<kTokens, kPanels, Prefetch::kNext>(panels, panel_stride, cols, x_rows, next, resume,
                                                   tile);
  } else {
    PanelKernel<kTokens, kPanels, Prefetch::kNone>(panels, panel_stride, cols, x_rows, next, resume,
                                                   tile);
  }
}

// Rows [row, row + kTokens) of x times `count` panels first_panel, first_panel + spacing, ...,
// results stored through `destinations` (one per panel; nullptr: left in `tile`). Decode (mode
// kAhead) covers PanelsFor(kTokens) panels in one call, a shorter run one by one. Prefill
// (kNext, kNone) covers its group of up to kPrefillPanels adjacent panels in one call; with
// kNext, `next` is prefetched while these are computed; `resume`: see PanelKernel.
template <int kTokens, typename W>
HWY_INLINE void RunTokenGroup(const W* base, int64_t cols, int64_t first_panel, int64_t spacing,
                              int count, int64_t row, const float* const* x_rows, Prefetch mode,
                              const NextPanels& next, const float* resume,
                              const PanelDestinations* destinations, float* tile) {
  constexpr int kPanels = PanelsFor(kTokens);
  const int64_t panel_stride = kPanelRows * cols;
  const W* panels = base + first_panel * panel_stride;
  auto store = [&](int panels_in_tile) {
    if (destinations == nullptr) return;
    for (int t = 0; t < kTokens; ++t) {
      for (int p = 0; p < panels_in_tile; ++p) {
        StorePanelRow(destinations[p], row + t, tile + (t * panels_in_tile + p) * kPanelRows);
      }
    }
  };
  if (mode == Prefetch::kAhead) {
    if (count == kPanels) {
      PanelKernel<kTokens, kPanels, Prefetch::kAhead>(panels, spacing * panel_stride, cols, x_rows,
                                                      next, nullptr, tile);
      store(kPanels);
      return;
    }
    for (int p = 0; p < count; ++p) {
      PanelKernel<kTokens, 1, Prefetch::kAhead>(panels + p * spacing * panel_stride, panel_stride,
                                                cols, x_rows, next, nullptr, tile);
      for (int t = 0; t < kTokens; ++t) {
        StorePanelRow(destinations[p], row + t, tile + t * kPanelRows);
      }
    }
    return;
  }
  static_assert(kPrefillPanels <= 2, "prefill tiles are instantiated for 1 and 2 panels");
  if constexpr (kPrefillPanels == 2) {
    if (count == 2) {
      PrefillTile<kTokens, 2>(panels, spacing * panel_stride, cols, x_rows, mode, next, resume,
                              tile);
      store(2);
      return;
    }
  }
  PrefillTile<kTokens, 1>(panels, panel_stride, cols, x_rows, mode, next, resume, tile);
  store(1);
}

template <typename W>
void RunTokens(int tokens, const W* base, int64_t cols, int64_t first_panel, int64_t spacing,
               int count, int64_t row, const float* const* x_rows, Prefetch mode,
               const NextPanels& next, const float* resume, const PanelDestinations* destinations,
               float* tile) {
  switch (tokens) {
#define LLMRT_TOKENS_CASE(n)                                                                     \
  case n:                                                                                        \
    if constexpr (n <= kMaxTokens) {                                                             \
      RunTokenGroup<n>(base, cols, first_panel, spacing, count, row, x_rows, mode, next, resume, \
                       destinations, tile);                                                      \
    }                                                                                            \
    break;
    LLMRT_TOKENS_CASE(1)
    LLMRT_TOKENS_CASE(2)
    LLMRT_TOKENS_CASE(3)
    LLMRT_TOKENS_CASE(4)
    LLMRT_TOKENS_CASE(5)
    LLMRT_TOKENS_CASE(6)
    LLMRT_TOKENS_CASE(7)
    LLMRT_TOKENS_CASE(8)
#undef LLMRT_TOKENS_CASE
    default:
      break;
  }
}

// 256 rows of x at K = 5632 are 5.5 MiB: they stay in L3 while each thread sweeps them once
// per panel, and a longer step is split so that remains true.
constexpr int64_t kChunkRows = 256;

// The decode schedule (a few token rows, each weight read once straight from memory;
// region_schedule.h): a micro-kernel call takes its `group` panels from `group` regions of the
// matrix (panels i, i + Q, i + 2Q, ... with Q = num_panels / group) rather than `group` adjacent
// panels (16 x K weights each, short streams the hardware prefetcher learns again at every call).
// Measured (llmrt_kernels_bench BM_DecodeGemvMemory, f16, Zen 5, 1 thread, 512 MiB from a file
// mapping): adjacent panels read 21.4 / 27.8 / 30.1 / 31.5 GB/s at K = 256 / 1024 / 2048 / 5632
// against the probe's 42; see docs/performance.md for regions. call(first_panel, spacing, count)
// computes `count` panels (`group`, or 1 for the panels past the regions) `spacing` apart.
template <typename Call>
void ForEachRegionCall(ThreadPool& pool, int64_t num_panels, int group, int64_t panel_bytes,
                       const Call& call) {
  ForEachRegionItem(
      pool, num_panels, group, panel_bytes,
      [&](int64_t begin, int64_t end, int64_t spacing) {
        for (int64_t i = begin; i < end; ++i) call(i, spacing, group);
      },
      [&](int64_t begin, int64_t end) {
        for (int64_t panel = begin; panel < end; ++panel) call(panel, 1, 1);
      });
}

// F16 and BF16 prefill widens each group of panels to f32 once per chunk of rows (per-thread
// buffers) and runs the f32 tiles on the copy: in the tiles every 16 weights took a widening
// (vcvtph2ps: two uops of the FMA ports on Intel) per 8 FMAs, now a panel column is widened
// once for all of the chunk's token tiles. The copy is made kWidenColumns columns at a time,
// each slice's tiles resuming the chains the previous slice stored (PanelKernel's `resume`),
// so that a slice of the group (kPrefillPanels x 16 x 1024 f32: 128 KiB on AVX-512) stays in
// L2 beside the next group being prefetched, whatever K. Measured (llmrt bench -p 512 on the
// synthetic TinyLlama f16 plan, Intel Xeon avx3_vnni, interleaved runs, tok/s): 1 thread
// 56.8-57.8 -> 68.0-69.3, 2 threads 109.6-115.0 -> 116.5-127.4; avx2 tier 32.4-34.9 ->
// 34.0-38.4 (1 thread), 63.8-68.9 -> 67.9-76.6 (2). Below kWidenMinRows rows a chunk's few
// tiles do not pay for the copy (M = 16, 1 thread, best of 4: 98-104 against 123-128 GFLOPS).
constexpr int64_t kWidenColumns = 1024;
constexpr int64_t kWidenMinRows = 64;

struct WidenedPanels;
struct WidenedTiles;

// Rows [chunk, chunk_end) times the `panels` panels at `group` (F16 or BF16), through f32
// copies of kWidenColumns-column slices; `next`: prefetched during each slice's first tile.
template <typename W, typename RowPointers>
void SweepWidened(const W* group, int panels, int64_t cols, const NextPanels& next, int64_t chunk,
                  int64_t chunk_end, const RowPointers& row_pointers,
                  const PanelDestinations* destinations) {
  constexpr int64_t kTileFloats = kMaxTokens * kPrefillPanels * kPanelRows;
  const int64_t panel_stride = kPanelRows * cols;
  float* widened =
      ThreadLocalBuffer<WidenedPanels, float>(kPrefillPanels * kPanelRows * kWidenColumns);
  // Each token tile's chains between slices.
  float* tiles = ThreadLocalBuffer<WidenedTiles, float>((kChunkRows + kMaxTokens - 1) / kMaxTokens *
                                                        kTileFloats);
  const DF df;
  for (int64_t begin = 0; begin < cols; begin += kWidenColumns) {
    const int64_t slice = std::min(kWidenColumns, cols - begin);
    const int64_t slice_stride = kPanelRows * slice;
    for (int p = 0; p < panels; ++p) {
      const W* HWY_RESTRICT in = group + p * panel_stride + begin * kPanelRows;
      float* HWY_RESTRICT out = widened + p * slice_stride;
      for (int64_t i = 0; i < slice_stride; i += static_cast<int64_t>(kLanes)) {
        hn::Store(LoadWeights(df, in + i), df, out + i);
      }
    }
    const bool last = begin + slice == cols;
    NextPanels slice_next = next;
    if (next.first != nullptr) slice_next.first += begin * next.column_bytes;
    const float* x_rows[kMaxTokens];
    for (int64_t row = chunk; row < chunk_end; row += kMaxTokens) {
      const int count = static_cast<int>(std::min<int64_t>(kMaxTokens, chunk_end - row));
      row_pointers(row, count, x_rows);
      for (int t = 0; t < count; ++t) x_rows[t] += begin;
      float* tile = tiles + (row - chunk) / kMaxTokens * kTileFloats;
      const bool prefetch = row == chunk && next.first != nullptr;
      RunTokens<float>(count, widened, slice, 0, 1, panels, row, x_rows,
                       prefetch ? Prefetch::kNext : Prefetch::kNone, slice_next,
                       begin == 0 ? nullptr : tile, last ? destinations : nullptr, tile);
    }
  }
}

// Two loop orders, by the number of token rows:
// - at most kMaxTokens (decode, small batches): ForEachRegionCall, PanelsFor(rows) weight
//   streams;
// - more (prefill, batched decode): each group of kPrefillPanels adjacent panels is swept by
//   ceil(rows / kMaxTokens) calls, so it must come from L2, not memory, after the first. The
//   first call over a group prefetches the thread's next group (a panel is 16 x K weights:
//   64 KiB at K = 2048, 176 KiB at K = 5632 in f16; two groups of two fit a 1 MiB L2 with room
//   for x), so memory streams the next group while the calls compute on this one, and no call
//   waits for DRAM. Without it the first 6-row call of every panel (a third of the work at 16
//   rows) ran at the speed of one DRAM stream (measured: M = 16 at ~60% of the FMA peak against
//   ~80% at M = 512).
template <typename W>
void MatMulPanels(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                  const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                  int32_t num_outputs) {
  const int64_t cols = w.cols;
  const int64_t num_panels = w.rows / kPanelRows;
  const int64_t panel_stride = kPanelRows * cols;
  const W* base = reinterpret_cast<const W*>(w.data);
  auto row_pointers = [&](int64_t row, int count, const float** x_rows) {
    for (int t = 0; t < count; ++t) {
      const int64_t source = input_rows != nullptr ? input_rows[row + t] : row + t;
      x_rows[t] = x + source * cols;
    }
  };
  if (num_rows <= kMaxTokens) {
    const int tokens = static_cast<int>(num_rows);
    const float* x_rows[kMaxTokens];
    row_pointers(0, tokens, x_rows);
    ForEachRegionCall(pool, num_panels, PanelsFor(tokens),
                      panel_stride * static_cast<int64_t>(sizeof(W)),
                      [&](int64_t first, int64_t spacing, int count) {
                        HWY_ALIGN float tile[kMaxTokens * kMaxPanels * kPanelRows];
                        PanelDestinations destinations[kMaxPanels];
                        for (int p = 0; p < count; ++p) {
                          ResolvePanel((first + p * spacing) * kPanelRows, w.rows, bias, outputs,
                                       num_outputs, &destinations[p]);
                        }
                        RunTokens<W>(tokens, base, cols, first, spacing, count, 0, x_rows,
                                     Prefetch::kAhead, NextPanels{}, nullptr, destinations, tile);
                      });
    return;
  }
  pool.ParallelFor(
      num_panels,
      [&](int64_t panel_begin, int64_t panel_end, int32_t) {
        const float* x_rows[kMaxTokens];
        HWY_ALIGN float tile[kMaxTokens * kMaxPanels * kPanelRows];
        PanelDestinations destinations[kMaxPanels];
        for (int64_t chunk = 0; chunk < num_rows; chunk += kChunkRows) {
          const int64_t chunk_end = std::min(num_rows, chunk + kChunkRows);
          for (int64_t group = panel_begin; group < panel_end; group += kPrefillPanels) {
            const int panels =
                static_cast<int>(std::min<int64_t>(kPrefillPanels, panel_end - group));
            for (int p = 0; p < panels; ++p) {
              ResolvePanel((group + p) * kPanelRows, w.rows, bias, outputs, num_outputs,
                           &destinations[p]);
            }
            NextPanels next;
            if (group + 2 * panels <= panel_end) {
              next = {reinterpret_cast<const char*>(base + (group + panels) * panel_stride),
                      panel_stride * static_cast<int64_t>(sizeof(W)), kPanelRows * sizeof(W)};
            }
            if constexpr (!std::is_same_v<W, float>) {
              if (chunk_end - chunk >= kWidenMinRows) {
                SweepWidened(base + group * panel_stride, panels, cols, next, chunk, chunk_end,
                             row_pointers, destinations);
                continue;
              }
            }
            for (int64_t row = chunk; row < chunk_end; row += kMaxTokens) {
              const int count = static_cast<int>(std::min<int64_t>(kMaxTokens, chunk_end - row));
              row_pointers(row, count, x_rows);
              const bool prefetch_next = row == chunk && next.first != nullptr;
              RunTokens<W>(count, base, cols, group, 1, panels, row, x_rows,
                           prefetch_next ? Prefetch::kNext : Prefetch::kNone, next, nullptr,
                           destinations, tile);
            }
          }
        }
      },
      kMaxPanels);
}

#if HWY_TARGET == HWY_AVX3
// ---- BF16 weights on AVX512-BF16 (the avx3_zen4 tier; see the file comment) ----

// The register tile: prefill 8 token rows x 2 panels = 16 accumulators (2 weight loads and
// vpermws and 8 broadcasts per 16 vdpbf16ps), decode 1 token x 4 panels (4 weight streams, as
// PanelKernel). Measured on Zen 5 (kernels_bench, M = 512, 1 thread; GFLOPS at 2048 x 2048 and
// 2048 x 5632): 8 x 2 537 / 532, 4 x 4 527 / 450, 8 x 3 528 / 432, 12 x 2 454 / 502,
// 6 x 4 466 / 407. Every tile runs near the vdpbf16ps throughput; 8 x 2 was best or tied at
// M = 16, 64 and 512.
constexpr int kBf16Accumulators = 16;
constexpr int kBf16MaxPanels = 4;
constexpr int kBf16Tokens = 8;

// Panels one call covers for `tokens` rows: as many as the accumulators allow, up to 4.
constexpr int Bf16PanelsFor(int tokens) {
  return std::max(1, std::min(kBf16MaxPanels, kBf16Accumulators / tokens));
}

// Lane r of the result takes elements r (row r of column k) and 16 + r (row r of column k + 1)
// of a panel's 64-byte column pair: the (k, k + 1) pair of output row r that vdpbf16ps
// multiplies with the activations' (x_k, x_k+1) pair.
alignas(64) constexpr uint16_t kInterleaveColumnPair[32] = {
    0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Tag of the per-thread buffer of one call's rounded activations ([rows, ceil(K / 2)] bf16
// pairs: 5.5 MiB at 512 x 5632).
struct Bf16Activations;

// Rows [row_begin, row_end) of x (through input_rows) rounded to bf16 (vcvtne2ps2bf16: round to
// nearest even, denormals flushed) as (x_k, x_k+1) pairs, ceil(cols / 2) pairs per row; an odd
// row ends in (x_K-1, 0).
LLMRT_TARGET_BF16 HWY_NOINLINE void RoundRowsToBf16(const float* x, const int32_t* input_rows,
                                                    int64_t cols, int64_t row_begin,
                                                    int64_t row_end, uint32_t* x_pairs) {
  const int64_t pairs = (cols + 1) / 2;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const float* source = x + (input_rows != nullptr ? input_rows[row] : row) * cols;
    uint32_t* destination = x_pairs + row * pairs;
    int64_t col = 0;
    for (; col + 32 <= cols; col += 32) {
      const __m512bh rounded =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(source + col + 16), _mm512_loadu_ps(source + col));
      _mm512_storeu_si512(destination + col / 2, reinterpret_cast<__m512i>(rounded));
    }
    if (col < cols) {
      const int64_t left = cols - col;  // 1..31; masked lanes read nothing and become 0
      const __mmask16 low = static_cast<__mmask16>(left >= 16 ? 0xFFFFu : (1u << left) - 1);
      const __mmask16 high = static_cast<__mmask16>(left > 16 ? (1u << (left - 16)) - 1 : 0u);
      const __m512bh rounded = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high, source + col + 16),
                                                   _mm512_maskz_loadu_ps(low, source + col));
      const __mmask16 store = static_cast<__mmask16>((1u << ((left + 1) / 2)) - 1);
      _mm512_mask_storeu_epi32(destination + col / 2, store, reinterpret_cast<__m512i>(rounded));
    }
  }
}

// acc[i] += a[2i] * b[2i] + a[2i + 1] * b[2i + 1] over bf16 pairs (vdpbf16ps). Inline assembly
// rather than _mm512_dpbf16_ps: clang 16 (the sanitizer build's compiler) crashes compiling that
// intrinsic. The "v" constraints allow zmm16-31 (EVEX, as the instruction is).
HWY_INLINE __m512 DotBf16Pairs(__m512 acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// tile[t * kPanels * kPanelRows + p * kPanelRows + r] = dot(x_pairs[t], row r of panel p) for
// the kPanels panels at `panels` (panel_stride elements apart): per column pair one 64-byte load
// and one vpermw per panel, shared by the kTokens broadcasts, then kTokens x kPanels vdpbf16ps.
// Each output is one chain over the pairs in order. kPrefetch: as PanelKernel (one cache line
// per panel per pair).
template <int kTokens, int kPanels, Prefetch kPrefetch>
HWY_NOINLINE void Bf16PanelKernel(const uint16_t* HWY_RESTRICT panels, int64_t panel_stride,
                                  int64_t cols, const uint32_t* const* x_pairs,
                                  const uint16_t* prefetch, float* HWY_RESTRICT tile) {
  const __m512i interleave = _mm512_load_si512(kInterleaveColumnPair);
  __m512 acc[kTokens][kPanels];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p) acc[t][p] = _mm512_setzero_ps();
  }
  const uint32_t* x[kTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) x[t] = x_pairs[t];
  const int64_t full_pairs = cols / 2;
  for (int64_t pair = 0; pair < full_pairs; ++pair) {
    const uint16_t* HWY_RESTRICT weights = panels + pair * 2 * kPanelRows;
    if constexpr (kPrefetch == Prefetch::kNext) {
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) {
        __builtin_prefetch(prefetch + p * panel_stride + pair * 2 * kPanelRows, /*rw=*/0,
                           /*locality=*/3);
      }
    } else if constexpr (kPrefetch == Prefetch::kAhead) {
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) {
        __builtin_prefetch(
            reinterpret_cast<const char*>(weights + p * panel_stride) + kPrefetchAheadBytes,
            /*rw=*/0, /*locality=*/3);
      }
    }
    __m512i w[kPanels];
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p) {
      w[p] = _mm512_permutexvar_epi16(interleave, _mm512_loadu_si512(weights + p * panel_stride));
    }
#pragma GCC unroll 16
    for (int t = 0; t < kTokens; ++t) {
      const __m512i broadcast = _mm512_set1_epi32(static_cast<int32_t>(x[t][pair]));
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) acc[t][p] = DotBf16Pairs(acc[t][p], w[p], broadcast);
    }
  }
  if (cols % 2 != 0) {
    // The last column alone: each row's weight zero-extended to a (w, 0) pair (never reading
    // past the panel), against the (x_K-1, 0) pair.
    const uint16_t* HWY_RESTRICT weights = panels + full_pairs * 2 * kPanelRows;
    __m512i w[kPanels];
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p) {
      w[p] = _mm512_cvtepu16_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + p * panel_stride)));
    }
#pragma GCC unroll 16
    for (int t = 0; t < kTokens; ++t) {
      const __m512i broadcast = _mm512_set1_epi32(static_cast<int32_t>(x[t][full_pairs]));
#pragma GCC unroll 16
      for (int p = 0; p < kPanels; ++p) acc[t][p] = DotBf16Pairs(acc[t][p], w[p], broadcast);
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
    for (int p = 0; p < kPanels; ++p)
      _mm512_storeu_ps(tile + (t * kPanels + p) * kPanelRows, acc[t][p]);
  }
}

using Bf16KernelFn = void (*)(const uint16_t*, int64_t, int64_t, const uint32_t* const*,
                              const uint16_t*, float*);

template <int kTokens, int kPanels>
Bf16KernelFn Bf16KernelOf(Prefetch prefetch) {
  if constexpr (kPanels <= Bf16PanelsFor(kTokens)) {
    switch (prefetch) {
      case Prefetch::kNext:
        return &Bf16PanelKernel<kTokens, kPanels, Prefetch::kNext>;
      case Prefetch::kAhead:
        return &Bf16PanelKernel<kTokens, kPanels, Prefetch::kAhead>;
      case Prefetch::kNone:
        return &Bf16PanelKernel<kTokens, kPanels, Prefetch::kNone>;
    }
  }
  return nullptr;
}

template <int kTokens>
Bf16KernelFn Bf16KernelOf(int panels, Prefetch prefetch) {
  switch (panels) {
    case 1:
      return Bf16KernelOf<kTokens, 1>(prefetch);
    case 2:
      return Bf16KernelOf<kTokens, 2>(prefetch);
    case 3:
      return Bf16KernelOf<kTokens, 3>(prefetch);
    case 4:
      return Bf16KernelOf<kTokens, 4>(prefetch);
    default:
      return nullptr;
  }
}

// The micro-kernel for `tokens` (1..kBf16Tokens) x `panels` (1..Bf16PanelsFor(tokens)).
Bf16KernelFn Bf16KernelOf(int tokens, int panels, Prefetch prefetch) {
  switch (tokens) {
#define LLMRT_BF16_TOKENS_CASE(n)               \
  case n:                                       \
    if constexpr (n <= kBf16Tokens) {           \
      return Bf16KernelOf<n>(panels, prefetch); \
    }                                           \
    break;
    LLMRT_BF16_TOKENS_CASE(1)
    LLMRT_BF16_TOKENS_CASE(2)
    LLMRT_BF16_TOKENS_CASE(3)
    LLMRT_BF16_TOKENS_CASE(4)
    LLMRT_BF16_TOKENS_CASE(5)
    LLMRT_BF16_TOKENS_CASE(6)
    LLMRT_BF16_TOKENS_CASE(7)
    LLMRT_BF16_TOKENS_CASE(8)
#undef LLMRT_BF16_TOKENS_CASE
    default:
      break;
  }
  return nullptr;
}

// What every micro-kernel call of one MatMul shares.
struct Bf16MatMul {
  const uint16_t* weights;
  int64_t rows;             // of w: output columns
  int64_t cols;             // K
  const uint32_t* x_pairs;  // [num_rows, ceil(K / 2)], from RoundRowsToBf16
  const float* bias;
  const MatMulOutput* outputs;
  int32_t num_outputs;
};

// Token rows [row_begin, row_end) times panels [panel_begin, panel_end): groups of
// Bf16PanelsFor(kBf16Tokens or fewer rows) panels, each swept by tiles of up to kBf16Tokens
// rows. With `prefetch`, a group's first tile prefetches the next group (see MatMulPanels).
void Bf16Sweep(const Bf16MatMul& m, int64_t panel_begin, int64_t panel_end, int64_t row_begin,
               int64_t row_end, bool prefetch) {
  const int64_t panel_stride = kPanelRows * m.cols;
  const int64_t pairs = (m.cols + 1) / 2;
  const int tile_tokens = static_cast<int>(std::min<int64_t>(kBf16Tokens, row_end - row_begin));
  const int group_panels = Bf16PanelsFor(tile_tokens);
  HWY_ALIGN float tile[kBf16Accumulators * kPanelRows];
  PanelDestinations destinations[kBf16MaxPanels];
  const uint32_t* x_rows[kBf16Tokens];
  for (int64_t group = panel_begin; group < panel_end; group += group_panels) {
    const int panels = static_cast<int>(std::min<int64_t>(group_panels, panel_end - group));
    for (int p = 0; p < panels; ++p) {
      ResolvePanel((group + p) * kPanelRows, m.rows, m.bias, m.outputs, m.num_outputs,
                   &destinations[p]);
    }
    const uint16_t* next = prefetch && group + 2 * panels <= panel_end
                               ? m.weights + (group + panels) * panel_stride
                               : nullptr;
    for (int64_t row = row_begin; row < row_end; row += kBf16Tokens) {
      const int tokens = static_cast<int>(std::min<int64_t>(kBf16Tokens, row_end - row));
      for (int t = 0; t < tokens; ++t) x_rows[t] = m.x_pairs + (row + t) * pairs;
      const bool prefetch_now = next != nullptr && row == row_begin;
      Bf16KernelOf(tokens, panels, prefetch_now ? Prefetch::kNext : Prefetch::kNone)(
          m.weights + group * panel_stride, panel_stride, m.cols, x_rows, next, tile);
      for (int t = 0; t < tokens; ++t) {
        for (int p = 0; p < panels; ++p) {
          StorePanelRow(destinations[p], row + t, tile + (t * panels + p) * kPanelRows);
        }
      }
    }
  }
}

// MatMulPanels for BF16 weights with vdpbf16ps: the activations rounded to bf16 once (on the
// pool when there are many), then the same two loop orders.
void MatMulPanelsBf16(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                      const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                      int32_t num_outputs) {
  const int64_t cols = w.cols;
  const int64_t pairs = (cols + 1) / 2;
  uint32_t* x_pairs = ThreadLocalBuffer<Bf16Activations, uint32_t>(num_rows * pairs);
  // Rounding streams 20-50 elements per ns on one Zen 5 core (64 Ki: 1.8 us, about a fork/join;
  // 512 x 2048: 48 us, 0.6% of that matmul), so only larger calls split it across the pool.
  if (num_rows * cols <= (int64_t{1} << 16)) {
    RoundRowsToBf16(x, input_rows, cols, 0, num_rows, x_pairs);
  } else {
    pool.ParallelFor(num_rows, [&](int64_t begin, int64_t end, int32_t) {
      RoundRowsToBf16(x, input_rows, cols, begin, end, x_pairs);
    });
  }
  const Bf16MatMul m{
      reinterpret_cast<const uint16_t*>(w.data), w.rows, cols, x_pairs, bias, outputs, num_outputs};
  const int64_t num_panels = w.rows / kPanelRows;
  if (num_rows <= kBf16Tokens) {
    const int tokens = static_cast<int>(num_rows);
    const uint32_t* x_rows[kBf16Tokens];
    for (int t = 0; t < tokens; ++t) x_rows[t] = x_pairs + t * pairs;
    const int64_t panel_stride = kPanelRows * cols;
    ForEachRegionCall(pool, num_panels, Bf16PanelsFor(tokens), panel_stride * 2,
                      [&](int64_t first, int64_t spacing, int count) {
                        HWY_ALIGN float tile[kBf16Accumulators * kPanelRows];
                        PanelDestinations destinations[kBf16MaxPanels];
                        for (int p = 0; p < count; ++p) {
                          ResolvePanel((first + p * spacing) * kPanelRows, w.rows, bias, outputs,
                                       num_outputs, &destinations[p]);
                        }
                        Bf16KernelOf(tokens, count, Prefetch::kAhead)(
                            m.weights + first * panel_stride, spacing * panel_stride, cols, x_rows,
                            nullptr, tile);
                        for (int t = 0; t < tokens; ++t) {
                          for (int p = 0; p < count; ++p) {
                            StorePanelRow(destinations[p], t, tile + (t * count + p) * kPanelRows);
                          }
                        }
                      });
    return;
  }
  pool.ParallelFor(
      num_panels,
      [&](int64_t panel_begin, int64_t panel_end, int32_t) {
        for (int64_t chunk = 0; chunk < num_rows; chunk += kChunkRows) {
          Bf16Sweep(m, panel_begin, panel_end, chunk, std::min(num_rows, chunk + kChunkRows),
                    /*prefetch=*/true);
        }
      },
      kMaxPanels);
}
#endif  // HWY_TARGET == HWY_AVX3

template <typename W>
HWY_INLINE float DotRow(const float* HWY_RESTRICT x, const W* HWY_RESTRICT w, int64_t cols) {
  const DF df;
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  int64_t col = 0;
  for (; col + 4 * static_cast<int64_t>(kLanes) <= cols; col += 4 * kLanes) {
    a0 = hn::MulAdd(LoadWeights(df, w + col), hn::LoadU(df, x + col), a0);
    a1 = hn::MulAdd(LoadWeights(df, w + col + kLanes), hn::LoadU(df, x + col + kLanes), a1);
    a2 = hn::MulAdd(LoadWeights(df, w + col + 2 * kLanes), hn::LoadU(df, x + col + 2 * kLanes), a2);
    a3 = hn::MulAdd(LoadWeights(df, w + col + 3 * kLanes), hn::LoadU(df, x + col + 3 * kLanes), a3);
  }
  for (; col + static_cast<int64_t>(kLanes) <= cols; col += kLanes) {
    a0 = hn::MulAdd(LoadWeights(df, w + col), hn::LoadU(df, x + col), a0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; col < cols; ++col) sum += x[col] * ToFloat(w[col]);
  return sum;
}

template <typename W>
void MatMulRowMajor(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                    const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                    int32_t num_outputs) {
  const int64_t cols = w.cols;
  const W* base = reinterpret_cast<const W*>(w.data);
  // Groups of 16 weight rows, like a panel: the rows stay in L1/L2 while every token uses them.
  const int64_t num_groups = (w.rows + kPanelRows - 1) / kPanelRows;
  pool.ParallelFor(num_groups, [&](int64_t group_begin, int64_t group_end, int32_t) {
    PanelDestinations destinations;
    for (int64_t group = group_begin; group < group_end; ++group) {
      ResolvePanel(group * kPanelRows, w.rows, bias, outputs, num_outputs, &destinations);
      for (int64_t row = 0; row < num_rows; ++row) {
        const float* x_row = x + (input_rows != nullptr ? input_rows[row] : row) * cols;
        float values[kPanelRows];
        for (int c = 0; c < destinations.count; ++c) {
          values[c] = DotRow(x_row, base + (group * kPanelRows + c) * cols, cols);
        }
        StorePanelRow(destinations, row, values);
      }
    }
  });
}

template <typename W>
void MatMulTyped(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                 const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                 int32_t num_outputs) {
  if (w.panel_rows == kPanelRows) {
    MatMulPanels<W>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  } else {
    MatMulRowMajor<W>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
  }
}

}  // namespace

void MatMulImpl(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                int32_t num_outputs) {
  switch (w.dtype) {
    case plan::F16:
      MatMulTyped<hwy::float16_t>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
      break;
    case plan::BF16:
#if HWY_TARGET == HWY_AVX3
      if (w.panel_rows == kPanelRows && ActiveCpuExtensions().avx512_bf16) {
        MatMulPanelsBf16(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
        break;
      }
#endif
      MatMulTyped<hwy::bfloat16_t>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
      break;
    default:
      MatMulTyped<float>(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(MatMulImpl);

void MatMul(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
            const MatrixView& w, const float* bias, const MatMulOutput* outputs,
            int32_t num_outputs, int64_t amx_min_rows) {
  if (num_rows <= 0 || w.rows <= 0) return;
  if (MatMulOnAmx(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs, amx_min_rows)) {
    return;
  }
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
}

int64_t MatrixBytes(plan::DType dtype, int64_t rows, int64_t cols) {
  return rows * cols * (dtype == plan::F32 ? 4 : 2);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
