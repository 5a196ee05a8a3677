// Matmul kernels: x [M, K] f32 times w [N, K]^T in F32/F16/BF16, f32 accumulation.
//
// ROW_PANELS weights (the layout codegen packs; plan.proto Tensor.Layout) go through a
// register-blocked micro-kernel: for each of the panel's K columns it loads the panel's 16
// weights (one contiguous 32- or 64-byte run), widens them to f32 vectors, and FMAs them with
// broadcasts of kTokens activation rows, so each weight load feeds kTokens FMAs and each
// broadcast feeds 16 / lanes FMAs. Decode (M = 1..2) is the same loop with the K loop split
// into independent accumulator sets, so the FMA latency never limits the weight stream.
// Threads split the panels; a thread's panels stay in its L2 while it sweeps all token rows,
// so the weights are read from memory exactly once per matmul.
//
// ROW_MAJOR weights (tied embeddings, hand-built test plans) use per-row dot products.
#include <algorithm>
#include <cstring>

#include "runtime/backend/cpu/kernels.h"
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

// Columns alternate between two accumulator sets, for every token count alike: a token's
// result then never depends on how many tokens share its micro-kernel call (a sequence gives
// the same logits alone or batched, to the bit), and a single decode token still has
// 2 x vectors-per-panel FMA chains in flight (4 on AVX2: one FMA per cycle at 4-cycle latency,
// 16 bytes of f16 weights per cycle, more than one core's DRAM bandwidth).
constexpr int kColumnSplit = 2;

// Token rows per micro-kernel call: as many accumulators (kColumnSplit x tokens x vectors) as
// the register file holds next to the weight vectors and one broadcast. AVX-512 (32
// registers, 1 vector per panel): 8 tokens = 16 accumulators. AVX2 (16 registers, 2 vectors
// per panel): 3 tokens = 12 accumulators, 5 loads per 6 FMAs per column. SSE4/NEON (4 vectors
// per panel) and SCALAR: 1.
constexpr int kMaxTokens = kVectorsPerPanel == 1 ? 8 : kVectorsPerPanel == 2 ? 3 : 1;

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

// tile[t * kPanelRows + r] = dot(x_rows[t], panel row r) over `cols` columns, even and odd
// columns in separate accumulators (kColumnSplit). The small loops are fully unrolled (pragmas)
// so the accumulator array lives in registers; without that GCC keeps it on the stack and
// every FMA becomes a load-FMA-store (measured: 3x slower).
template <int kTokens, typename W>
HWY_NOINLINE void PanelKernel(const W* HWY_RESTRICT panel, int64_t cols, const float* const* x_rows,
                              float* HWY_RESTRICT tile) {
  const DF df;
  constexpr int kSplit = kColumnSplit;
  VF acc[kSplit][kTokens][kVectorsPerPanel];
#pragma GCC unroll 16
  for (int s = 0; s < kSplit; ++s) {
#pragma GCC unroll 16
    for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
      for (int v = 0; v < kVectorsPerPanel; ++v) acc[s][t][v] = hn::Zero(df);
    }
  }
  const float* x[kTokens];
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) x[t] = x_rows[t];
  int64_t col = 0;
  for (; col + kSplit <= cols; col += kSplit) {
#pragma GCC unroll 16
    for (int s = 0; s < kSplit; ++s) {
      const W* HWY_RESTRICT weights = panel + (col + s) * kPanelRows;
      VF w[kVectorsPerPanel];
#pragma GCC unroll 16
      for (int v = 0; v < kVectorsPerPanel; ++v) w[v] = LoadWeights(df, weights + v * kLanes);
#pragma GCC unroll 16
      for (int t = 0; t < kTokens; ++t) {
        const VF broadcast = hn::Set(df, x[t][col + s]);
#pragma GCC unroll 16
        for (int v = 0; v < kVectorsPerPanel; ++v) {
          acc[s][t][v] = hn::MulAdd(w[v], broadcast, acc[s][t][v]);
        }
      }
    }
  }
  for (; col < cols; ++col) {
    const W* HWY_RESTRICT weights = panel + col * kPanelRows;
#pragma GCC unroll 16
    for (int v = 0; v < kVectorsPerPanel; ++v) {
      const VF w = LoadWeights(df, weights + v * kLanes);
#pragma GCC unroll 16
      for (int t = 0; t < kTokens; ++t) {
        acc[0][t][v] = hn::MulAdd(w, hn::Set(df, x[t][col]), acc[0][t][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int t = 0; t < kTokens; ++t) {
#pragma GCC unroll 16
    for (int v = 0; v < kVectorsPerPanel; ++v) {
      VF sum = acc[0][t][v];
#pragma GCC unroll 16
      for (int s = 1; s < kSplit; ++s) sum = hn::Add(sum, acc[s][t][v]);
      hn::StoreU(sum, df, tile + t * kPanelRows + v * kLanes);
    }
  }
}

template <typename W>
void RunPanelKernel(int count, const W* panel, int64_t cols, const float* const* x_rows,
                    float* tile) {
  switch (count) {
#define LLMRT_PANEL_CASE(n)                                                   \
  case n:                                                                     \
    if constexpr (n <= kMaxTokens) PanelKernel<n>(panel, cols, x_rows, tile); \
    break;
    LLMRT_PANEL_CASE(1)
    LLMRT_PANEL_CASE(2)
    LLMRT_PANEL_CASE(3)
    LLMRT_PANEL_CASE(4)
    LLMRT_PANEL_CASE(5)
    LLMRT_PANEL_CASE(6)
    LLMRT_PANEL_CASE(7)
    LLMRT_PANEL_CASE(8)
#undef LLMRT_PANEL_CASE
    default:
      break;
  }
}

// Where each of a panel's output columns goes.
struct PanelDestinations {
  float* column[kPanelRows];  // row 0 of the column
  int64_t stride[kPanelRows];
  float bias[kPanelRows];
  int count = 0;  // valid columns (the last panel may be short)
};

void ResolvePanel(int64_t first_column, int64_t total_columns, const float* bias,
                  const MatMulOutput* outputs, int32_t num_outputs,
                  PanelDestinations* destinations) {
  destinations->count =
      static_cast<int>(std::min<int64_t>(kPanelRows, total_columns - first_column));
  int32_t output = 0;
  for (int c = 0; c < destinations->count; ++c) {
    const int64_t column = first_column + c;
    while (output + 1 < num_outputs && column >= outputs[output + 1].begin) ++output;
    destinations->column[c] = outputs[output].data + (column - outputs[output].begin);
    destinations->stride[c] = outputs[output].width;
    destinations->bias[c] = bias != nullptr ? bias[column] : 0.0f;
  }
}

// 256 rows of x at K = 5632 are 5.5 MiB: they stay in L3 while each thread sweeps them once
// per panel, and a longer step is split so that remains true.
constexpr int64_t kChunkRows = 256;

template <typename W>
void MatMulPanels(ThreadPool& pool, const float* x, int64_t num_rows, const int32_t* input_rows,
                  const MatrixView& w, const float* bias, const MatMulOutput* outputs,
                  int32_t num_outputs) {
  const int64_t cols = w.cols;
  const int64_t num_panels = (w.rows + kPanelRows - 1) / kPanelRows;
  const W* base = reinterpret_cast<const W*>(w.data);
  pool.ParallelFor(num_panels, [&](int64_t panel_begin, int64_t panel_end, int32_t) {
    const float* x_rows[kMaxTokens];
    HWY_ALIGN float tile[kMaxTokens * kPanelRows];
    PanelDestinations destinations;
    for (int64_t chunk = 0; chunk < num_rows; chunk += kChunkRows) {
      const int64_t chunk_end = std::min(num_rows, chunk + kChunkRows);
      for (int64_t panel = panel_begin; panel < panel_end; ++panel) {
        const W* panel_data = base + panel * kPanelRows * cols;
        ResolvePanel(panel * kPanelRows, w.rows, bias, outputs, num_outputs, &destinations);
        for (int64_t row = chunk; row < chunk_end; row += kMaxTokens) {
          const int count = static_cast<int>(std::min<int64_t>(kMaxTokens, chunk_end - row));
          for (int t = 0; t < count; ++t) {
            const int64_t source = input_rows != nullptr ? input_rows[row + t] : row + t;
            x_rows[t] = x + source * cols;
          }
          RunPanelKernel(count, panel_data, cols, x_rows, tile);
          for (int t = 0; t < count; ++t) {
            for (int c = 0; c < destinations.count; ++c) {
              destinations.column[c][(row + t) * destinations.stride[c]] =
                  tile[t * kPanelRows + c] + destinations.bias[c];
            }
          }
        }
      }
    }
  });
}

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
        for (int c = 0; c < destinations.count; ++c) {
          const W* w_row = base + (group * kPanelRows + c) * cols;
          destinations.column[c][row * destinations.stride[c]] =
              DotRow(x_row, w_row, cols) + destinations.bias[c];
        }
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
            int32_t num_outputs) {
  if (num_rows <= 0 || w.rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(pool, x, num_rows, input_rows, w, bias, outputs, num_outputs);
}

int64_t MatrixBytes(plan::DType dtype, int64_t rows, int64_t cols) {
  return rows * cols * (dtype == plan::F32 ? 4 : 2);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
