// Where the quantized GEMMs (quant_gemm.cc, quant_gemm_amx.cc) and the AMX-BF16 matmul
// (matmul_amx.cc) write a panel of weight rows'
// results: a matmul's outputs split its rows among destinations (a fused matmul's parts), each
// with its own row width.
//
// Thread-safety: one per thread (a cursor into the outputs).
#ifndef LLMRT_BACKEND_CPU_PANEL_COLUMNS_H_
#define LLMRT_BACKEND_CPU_PANEL_COLUMNS_H_

#include <cstdint>

#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// Output row n of the call lands at columns[n - row_begin] + token x strides[n - row_begin] for
// the kRows rows of a panel (`outputs` split the rows, sorted by begin; *output is the cursor
// into them, rising with the panels of a thread).
template <int kRows>
struct PanelColumns {
  float* columns[kRows];
  int64_t strides[kRows];

  void Resolve(const MatMulOutput* outputs, int32_t num_outputs, int32_t* output, int64_t row_begin,
               int64_t row_end) {
    for (int64_t n = row_begin; n < row_end; ++n) {
      while (*output + 1 < num_outputs && n >= outputs[*output + 1].begin) ++*output;
      columns[n - row_begin] = outputs[*output].data + (n - outputs[*output].begin);
      strides[n - row_begin] = outputs[*output].width;
    }
  }

  // Stores a tile's result[r][t] (+ bias) for panel rows [first, first + rows) and tokens
  // [token, token + tokens). A token's rows lie side by side in its output row, so they are
  // stored one token at a time: a token's rows fill its cache lines together, where a row at a
  // time touched a line of every token's row per store.
  template <int kWidth>
  void Store(const float (*result)[kWidth], int rows, int tokens, int64_t row_begin, int64_t first,
             int64_t token, const float* bias) const {
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        const float row_bias = bias != nullptr ? bias[row_begin + first + r] : 0.0f;
        columns[first + r][(token + t) * strides[first + r]] = result[r][t] + row_bias;
      }
    }
  }

  // The same for a tile whose rows are tokens, result[t][r] (AMX-BF16's C, matmul_amx.cc).
  template <int kWidth>
  void StoreTokenMajor(const float (*result)[kWidth], int rows, int tokens, int64_t row_begin,
                       int64_t first, int64_t token, const float* bias) const {
    for (int t = 0; t < tokens; ++t) {
      for (int r = 0; r < rows; ++r) {
        const float row_bias = bias != nullptr ? bias[row_begin + first + r] : 0.0f;
        columns[first + r][(token + t) * strides[first + r]] = result[t][r] + row_bias;
      }
    }
  }
};

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_PANEL_COLUMNS_H_
