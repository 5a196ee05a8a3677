//===- KernelLibrary.cuh - Device code shared by every generated kernel ---===//
//
// The generated source of a kernel is: LlmcKernelParams (runtime/backend/cuda/kernel_params.h),
// this library, then a few lines that EmitCuda writes per kernel, instantiating one template
// below with the model's constants (widths, heads, head_dim, tile shapes) baked in as literals
// and naming the `extern "C"` entry point.
//
// The same text compiles two ways:
//   - NVRTC (`__CUDACC_RTC__`): real device code; tensor-core MMA through inline PTX;
//   - g++ with codegen/cuda/emulation/CudaEmulation.h force-included (`LLMC_EMULATION`): blocks
//     run one after another and threads as fibers, so tests execute this very code on a CPU.
// Anything used here must therefore exist in the emulation header; if it does not, the
// emulation test fails to compile the source, which keeps the two in step.
//
// Conventions: activations are f32 rows [num_tokens, width]; weights are row-major [N, K] in
// f32/f16/bf16; every sum accumulates in f32. Kernels handle any width (no multiple-of-16
// assumption: stories260K's intermediate size is 172).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_EMULATION
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define LLMC_REGISTER_KERNEL(name)
#endif

namespace llmc {

typedef unsigned int u32;

__device__ __forceinline__ float toFloat(float value) { return value; }
__device__ __forceinline__ float toFloat(__half value) { return __half2float(value); }
__device__ __forceinline__ float toFloat(__nv_bfloat16 value) { return __bfloat162float(value); }

template <typename T> struct Convert;
template <> struct Convert<__half> {
  static __device__ __forceinline__ __half from(float value) { return __float2half_rn(value); }
  static __device__ __forceinline__ u32 bits(__half value) { return __half_as_ushort(value); }
};
template <> struct Convert<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 from(float value) {
    return __float2bfloat16_rn(value);
  }
  static __device__ __forceinline__ u32 bits(__nv_bfloat16 value) {
    return __bfloat16_as_ushort(value);
  }
};

// Two 16-bit elements in one register, the lower index in the low half (PTX's packing for
// .f16x2 / .bf16x2 fragments).
template <typename T> __device__ __forceinline__ u32 pack2(T low, T high) {
  return Convert<T>::bits(low) | (Convert<T>::bits(high) << 16);
}

#ifndef LLMC_EMULATION
// D = A * B + D for one warp, m16n8k16, A row-major, B column-major, f32 accumulators. The
// fragment layouts are PTX's (ISA section "Matrix Fragments for mma.m16n8k16"); the emulation
// header implements the same function from those layouts.
__device__ __forceinline__ void mmaM16N8K16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                            __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mmaM16N8K16(float (&d)[4], const u32 (&a)[4], const u32 (&b)[2],
                                            __nv_bfloat16) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#endif

// -inf without math.h (NVRTC has none): the IEEE bits of negative infinity.
__device__ __forceinline__ float negativeInfinity() { return __int_as_float((int)0xff800000u); }

__device__ __forceinline__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Sum over a block of kThreads (a multiple of 32). Every thread adds the per-warp sums in the
// same order, so all threads get the same bits. `partial` holds 32 floats of shared memory.
template <int kThreads> __device__ __forceinline__ float blockSum(float value, float *partial) {
  value = warpSum(value);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = value;
  __syncthreads();
  float total = 0.0f;
  for (int warp = 0; warp < kThreads / 32; ++warp)
    total += partial[warp];
  __syncthreads();
  return total;
}

// Element (row, col) of a [rows, kCols] weight matrix. kPanelRows 0: row-major. Otherwise the
// CPU's ROW_PANELS packing (plan.proto Tensor.Layout): panels of kPanelRows rows stored column
// by column. One blob serves both targets of a cpu+cuda plan, so the GPU reads that layout.
template <int kCols, int kPanelRows>
__device__ __forceinline__ long long weightIndex(long long row, int col) {
  if (kPanelRows == 0)
    return row * kCols + col;
  return (row / kPanelRows) * kPanelRows * kCols + (long long)col * kPanelRows + row % kPanelRows;
}

// --- EMBED: grid (num_tokens), any block size -------------------------------------------------
template <int kHidden, typename T, int kPanelRows>
__device__ void embed(const LlmcKernelParams &p) {
  const int row = blockIdx.x;
  const long long token = ((const int *)p.token_ids)[row];
  const T *table = (const T *)p.weight;
  float *out = (float *)p.output[0] + (long long)row * kHidden;
  for (int i = threadIdx.x; i < kHidden; i += blockDim.x)
    out[i] = toFloat(table[weightIndex<kHidden, kPanelRows>(token, i)]);
}

// --- RMS_NORM / FUSED_ADD_RMS_NORM: grid (num_tokens), block kThreads ------------------------
// Fused: output[0] = input[0] + input[1] (the residual stream), output[1] = norm of it. Each
// element is read and written by one thread, so outputs may alias inputs.
template <int kWidth, int kThreads, bool kFused>
__device__ void rmsNorm(const LlmcKernelParams &p, float eps) {
  __shared__ float partial[32];
  const long long base = (long long)blockIdx.x * kWidth;
  const float *a = (const float *)p.input[0] + base;
  const float *b = kFused ? (const float *)p.input[1] + base : a;
  float *sum = kFused ? (float *)p.output[0] + base : 0;
  float *y = (float *)p.output[kFused ? 1 : 0] + base;
  float squares = 0.0f;
  for (int i = threadIdx.x; i < kWidth; i += kThreads) {
    float x = a[i];
    if (kFused) {
      x += b[i];
      sum[i] = x;
    }
    squares += x * x;
  }
  const float inverseRms = 1.0f / sqrtf(blockSum<kThreads>(squares, partial) / kWidth + eps);
  const float *gamma = (const float *)p.weight;
  for (int i = threadIdx.x; i < kWidth; i += kThreads)
    y[i] = gamma[i] * ((kFused ? sum[i] : a[i]) * inverseRms);
}

// --- MATMUL / LOGITS, decode: GEMV ------------------------------------------------------------
// grid (ceil(N / kWarps)), block kWarps * 32. One warp per output column n; lanes stride K so a
// warp reads 32 consecutive weights (coalesced), and kRows activation rows share each weight
// load. `Store` splits column n into the fused outputs (emitted per kernel). kIndirect: LOGITS,
// output row r reads batch row row_index[r].
template <int kK, int kN, typename T, int kPanelRows, bool kBias, bool kIndirect, int kWarps,
          int kRows, typename Store>
__device__ void gemv(const LlmcKernelParams &p) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  if (n >= kN)
    return; // whole warps only: no barrier below
  const T *w = (const T *)p.weight;
  const float *x = (const float *)p.input[0];
  const int *rowIndex = (const int *)p.row_index;
  const int numRows = kIndirect ? p.num_rows : p.num_tokens;
  const float bias = kBias ? ((const float *)p.bias)[n] : 0.0f;
  for (int first = 0; first < numRows; first += kRows) {
    float acc[kRows];
    const float *rows[kRows];
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
      const int row = first + r < numRows ? first + r : first;
      rows[r] = x + (long long)(kIndirect ? rowIndex[row] : row) * kK;
    }
    for (int k = lane; k < kK; k += 32) {
      const float weight = toFloat(w[weightIndex<kK, kPanelRows>(n, k)]);
      for (int r = 0; r < kRows; ++r)
        acc[r] += rows[r][k] * weight;
    }
    for (int r = 0; r < kRows; ++r) {
      const float total = warpSum(acc[r]);
      if (lane == 0 && first + r < numRows)
        Store::store(p, first + r, n, total + bias);
    }
  }
}

// --- MATMUL, prefill: tensor-core GEMM (sm_80+) ----------------------------------------------
// grid (ceil(N / 32), ceil(num_tokens / 64)), block 128 = 4 warps. The block computes a 64-row
// x 32-column tile; warp w owns rows [16w, 16w + 16) and four 16x8 MMA tiles across the
// columns. K advances 16 at a time through shared memory, zero-padded at every edge.
// Activations are f32 but MMA inputs are 16-bit: each activation is split into hi = T(x) and
// lo = T(x - hi), and both are multiplied by the (exact) 16-bit weights, so the product keeps
// ~16 (bf16) or ~22 (f16) bits of the activation instead of 8 or 11: f32-class accuracy at twice
// the MMA work, which prefill has to spare (it is bound by reading weights once per 64 tokens).
template <int kK, int kN, typename T, int kPanelRows, bool kBias, typename Store>
__device__ void gemmMma(const LlmcKernelParams &p) {
  constexpr int kTileM = 64, kTileN = 32, kTileK = 16;
  // +8 elements per row: 48-byte rows spread fragment loads over more shared-memory banks.
  constexpr int kPitch = kTileK + 8;
  __shared__ T aHigh[kTileM * kPitch];
  __shared__ T aLow[kTileM * kPitch];
  __shared__ T b[kTileN * kPitch];
  const int m0 = blockIdx.y * kTileM, n0 = blockIdx.x * kTileN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane >> 2, thread = lane & 3;
  const float *x = (const float *)p.input[0];
  const T *w = (const T *)p.weight;
  const int numTokens = p.num_tokens;
  float acc[4][4];
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 4; ++i)
      acc[t][i] = 0.0f;
  for (int k0 = 0; k0 < kK; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTileM * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      const float value =
          (m0 + r < numTokens && k0 + c < kK) ? x[(long long)(m0 + r) * kK + k0 + c] : 0.0f;
      const T high = Convert<T>::from(value);
      aHigh[r * kPitch + c] = high;
      aLow[r * kPitch + c] = Convert<T>::from(value - toFloat(high));
    }
    for (int e = threadIdx.x; e < kTileN * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      b[r * kPitch + c] = (n0 + r < kN && k0 + c < kK)
                              ? w[weightIndex<kK, kPanelRows>(n0 + r, k0 + c)]
                              : Convert<T>::from(0.0f);
    }
    __syncthreads();
    const int rowTop = (warp * 16 + group) * kPitch, rowBottom = rowTop + 8 * kPitch;
    const int col = thread * 2;
    u32 high[4], low[4];
    high[0] = pack2(aHigh[rowTop + col], aHigh[rowTop + col + 1]);
    high[1] = pack2(aHigh[rowBottom + col], aHigh[rowBottom + col + 1]);
    high[2] = pack2(aHigh[rowTop + col + 8], aHigh[rowTop + col + 9]);
    high[3] = pack2(aHigh[rowBottom + col + 8], aHigh[rowBottom + col + 9]);
    low[0] = pack2(aLow[rowTop + col], aLow[rowTop + col + 1]);
    low[1] = pack2(aLow[rowBottom + col], aLow[rowBottom + col + 1]);
    low[2] = pack2(aLow[rowTop + col + 8], aLow[rowTop + col + 9]);
    low[3] = pack2(aLow[rowBottom + col + 8], aLow[rowBottom + col + 9]);
    for (int t = 0; t < 4; ++t) {
      const int bRow = (t * 8 + group) * kPitch;
      u32 fragment[2];
      fragment[0] = pack2(b[bRow + col], b[bRow + col + 1]);
      fragment[1] = pack2(b[bRow + col + 8], b[bRow + col + 9]);
      mmaM16N8K16(acc[t], high, fragment, T());
      mmaM16N8K16(acc[t], low, fragment, T());
    }
    __syncthreads();
  }
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + warp * 16 + group + (i >= 2 ? 8 : 0);
      const int n = n0 + t * 8 + thread * 2 + (i & 1);
      if (row < numTokens && n < kN)
        Store::store(p, row, n, acc[t][i] + (kBias ? ((const float *)p.bias)[n] : 0.0f));
    }
  }
}

// --- ROPE: grid (num_tokens), block kThreads ---------------------------------------------------
// Rotate-half over kHeads heads; angle = position * invFreq[i] in f32 as transformers does.
// Each thread owns a (first, second) pair, so output may alias input.
template <int kHeads, int kHeadDim, int kThreads>
__device__ void rope(const LlmcKernelParams &p, const float *invFreq) {
  constexpr int kHalf = kHeadDim / 2;
  const long long base = (long long)blockIdx.x * kHeads * kHeadDim;
  const float *in = (const float *)p.input[0] + base;
  float *out = (float *)p.output[0] + base;
  const float position = (float)((const int *)p.positions)[blockIdx.x];
  for (int e = threadIdx.x; e < kHeads * kHalf; e += kThreads) {
    const int head = e / kHalf, i = e % kHalf;
    const float angle = position * invFreq[i];
    const float cosine = cosf(angle), sine = sinf(angle);
    const float first = in[head * kHeadDim + i], second = in[head * kHeadDim + i + kHalf];
    out[head * kHeadDim + i] = first * cosine - second * sine;
    out[head * kHeadDim + i + kHalf] = second * cosine + first * sine;
  }
}

// --- ATTENTION 1/3: KV-cache write. grid (num_tokens), block 128 ----------------------------
template <int kKvWidth> __device__ void writeKvCache(const LlmcKernelParams &p) {
  const long long slot = ((const int *)p.slot_mapping)[blockIdx.x];
  const float *k = (const float *)p.input[1] + (long long)blockIdx.x * kKvWidth;
  const float *v = (const float *)p.input[2] + (long long)blockIdx.x * kKvWidth;
  float *keyCache = (float *)p.key_cache + slot * kKvWidth;
  float *valueCache = (float *)p.value_cache + slot * kKvWidth;
  for (int i = threadIdx.x; i < kKvWidth; i += blockDim.x) {
    keyCache[i] = k[i];
    valueCache[i] = v[i];
  }
}

// --- ATTENTION 2/3: split-K flash-decoding over the paged cache ------------------------------
// grid (num_tokens, kHeads, kSplits), block kWarps * 32. Block (t, h, s) takes the s-th of
// kSplits equal ranges of the keys query t sees (causal, kWindow > 0: only the last kWindow),
// its warps take every kWarps-th key of it, lanes split head_dim; each warp keeps an online
// softmax (running max m, sum l, weighted values). The warps merge in shared memory and write
// one partial [m, l, acc[kHeadDim]] per (t, h, s) to scratch; attentionCombine merges splits.
// Splitting keys is what keeps an H200's 132 SMs busy when a decode step has few queries.
template <int kHeads, int kKvHeads, int kHeadDim, int kSplits, int kWindow, int kWarps>
__device__ void attentionSplit(const LlmcKernelParams &p, float scale) {
  constexpr int kPerLane = (kHeadDim + 31) / 32;
  constexpr int kKvWidth = kKvHeads * kHeadDim;
  __shared__ float warpMax[kWarps], warpSumExp[kWarps];
  __shared__ float warpAcc[kWarps * kHeadDim];
  const int row = blockIdx.x, head = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int kvHead = head / (kHeads / kKvHeads);
  const int queryIndex = ((const int *)p.query_index)[row];
  int firstKey = 0;
  if (kWindow > 0 && queryIndex - kWindow + 1 > 0)
    firstKey = queryIndex - kWindow + 1;
  const int count = queryIndex + 1 - firstKey;
  const int perSplit = (count + kSplits - 1) / kSplits;
  const int begin = firstKey + split * perSplit;
  const int end = begin + perSplit < queryIndex + 1 ? begin + perSplit : queryIndex + 1;
  const float *q = (const float *)p.input[0] + ((long long)row * kHeads + head) * kHeadDim;
  float query[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    query[j] = d < kHeadDim ? q[d] : 0.0f;
    acc[j] = 0.0f;
  }
  const int *table = (const int *)p.block_tables + ((const int *)p.block_table)[row];
  const int blockSize = p.block_size;
  float runningMax = negativeInfinity(), runningSum = 0.0f;
  for (int key = begin + warp; key < end; key += kWarps) {
    const long long slot = (long long)table[key / blockSize] * blockSize + key % blockSize;
    const float *k = (const float *)p.key_cache + slot * kKvWidth + kvHead * kHeadDim;
    const float *v = (const float *)p.value_cache + slot * kKvWidth + kvHead * kHeadDim;
    float dot = 0.0f;
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < kHeadDim)
        dot += query[j] * k[d];
    }
    const float score = warpSum(dot) * scale;
    const float newMax = fmaxf(runningMax, score);
    const float correction = expf(runningMax - newMax);
    const float weight = expf(score - newMax);
    runningSum = runningSum * correction + weight;
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < kHeadDim ? weight * v[d] : 0.0f);
    }
    runningMax = newMax;
  }
  if (lane == 0) {
    warpMax[warp] = runningMax;
    warpSumExp[warp] = runningSum;
  }
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    if (d < kHeadDim)
      warpAcc[warp * kHeadDim + d] = acc[j];
  }
  __syncthreads();
  float blockMax = negativeInfinity();
  for (int w = 0; w < kWarps; ++w)
    blockMax = fmaxf(blockMax, warpMax[w]);
  float *partial =
      (float *)p.scratch + (((long long)row * kHeads + head) * kSplits + split) * (kHeadDim + 2);
  // A warp (or the whole split) with no keys has max -inf and contributes factor 0.
  float blockSumExp = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    if (warpMax[w] != negativeInfinity())
      blockSumExp += warpSumExp[w] * expf(warpMax[w] - blockMax);
  for (int d = threadIdx.x; d < kHeadDim; d += kWarps * 32) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w)
      if (warpMax[w] != negativeInfinity())
        total += warpAcc[w * kHeadDim + d] * expf(warpMax[w] - blockMax);
    partial[2 + d] = total;
  }
  if (threadIdx.x == 0) {
    partial[0] = blockMax;
    partial[1] = blockSumExp;
  }
}

// --- ATTENTION 3/3: merge the splits. grid (num_tokens, kHeads), block 32 --------------------
// Writes output[0] only after every split read q, so the output may alias q.
template <int kHeads, int kHeadDim, int kSplits>
__device__ void attentionCombine(const LlmcKernelParams &p) {
  const long long item = (long long)blockIdx.x * kHeads + blockIdx.y;
  const float *partial = (const float *)p.scratch + item * kSplits * (kHeadDim + 2);
  float globalMax = negativeInfinity();
  for (int s = 0; s < kSplits; ++s)
    globalMax = fmaxf(globalMax, partial[s * (kHeadDim + 2)]);
  float total = 0.0f;
  for (int s = 0; s < kSplits; ++s) {
    const float splitMax = partial[s * (kHeadDim + 2)];
    if (splitMax != negativeInfinity())
      total += partial[s * (kHeadDim + 2) + 1] * expf(splitMax - globalMax);
  }
  float *out = (float *)p.output[0] + item * kHeadDim;
  for (int d = threadIdx.x; d < kHeadDim; d += blockDim.x) {
    float value = 0.0f;
    for (int s = 0; s < kSplits; ++s) {
      const float splitMax = partial[s * (kHeadDim + 2)];
      if (splitMax != negativeInfinity())
        value += partial[s * (kHeadDim + 2) + 2 + d] * expf(splitMax - globalMax);
    }
    out[d] = value / total;
  }
}

// --- Elementwise: grid (ceil(num_tokens * kWidth / 256)), block 256 --------------------------
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// kOp: 0 silu_mul(a, b), 1 silu(a), 2 a * b, 3 a + b.
template <int kWidth, int kOp> __device__ void elementwise(const LlmcKernelParams &p) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)p.num_tokens * kWidth)
    return;
  const float a = ((const float *)p.input[0])[i];
  const float b = kOp == 1 ? 0.0f : ((const float *)p.input[1])[i];
  float result;
  if (kOp == 0)
    result = silu(a) * b;
  else if (kOp == 1)
    result = silu(a);
  else if (kOp == 2)
    result = a * b;
  else
    result = a + b;
  ((float *)p.output[0])[i] = result;
}

} // namespace llmc
