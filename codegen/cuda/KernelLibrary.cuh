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

// The int8 KV cache (KvCacheSpec.dtype I8, runtime/kv/kv_storage.h): signed codes in the same
// [slots, kv_heads * head_dim] layout as every other cache dtype, plus one f32 scale per (slot,
// kv head) in p.key_scales / p.value_scales. A cached value is code * scale.
typedef signed char i8;
__device__ __forceinline__ float toFloat(i8 value) { return (float)value; }
template <typename KvT> struct KvScaled { static constexpr bool value = false; };
template <> struct KvScaled<i8> { static constexpr bool value = true; };
// An f32 cache: the one whose values need all 24 significant bits (the prefill kernel's PV).
template <typename KvT> struct KvF32 { static constexpr bool value = false; };
template <> struct KvF32<float> { static constexpr bool value = true; };

// The scale of (slot, kv head) of an int8 cache, 1 (a no-op multiply) for the other dtypes.
template <typename KvT, int kKvHeads>
__device__ __forceinline__ float kvScale(unsigned long long scales, long long slot, int kvHead) {
  return KvScaled<KvT>::value ? ((const float *)scales)[slot * kKvHeads + kvHead] : 1.0f;
}

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

// f32 -> T for the storage types of activations-derived data (the KV cache).
template <typename T> __device__ __forceinline__ T fromFloat(float value) {
  return Convert<T>::from(value);
}
template <> __device__ __forceinline__ float fromFloat<float>(float value) { return value; }

// Two 16-bit elements in one register, the lower index in the low half (PTX's packing for
// .f16x2 / .bf16x2 fragments).
template <typename T> __device__ __forceinline__ u32 pack2(T low, T high) {
  return Convert<T>::bits(low) | (Convert<T>::bits(high) << 16);
}

// The A operand of one m16n8k16 MMA for this lane, in PTX's fragment order: rows rowTop and
// rowBottom (= rowTop + 8), columns col, col + 1 and col + 8, col + 9 of a shared tile.
template <typename T>
__device__ __forceinline__ void loadFragmentA(const T *tile, int rowTop, int rowBottom, int col,
                                              u32 (&fragment)[4]) {
  fragment[0] = pack2(tile[rowTop + col], tile[rowTop + col + 1]);
  fragment[1] = pack2(tile[rowBottom + col], tile[rowBottom + col + 1]);
  fragment[2] = pack2(tile[rowTop + col + 8], tile[rowTop + col + 9]);
  fragment[3] = pack2(tile[rowBottom + col + 8], tile[rowBottom + col + 9]);
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

__device__ __forceinline__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
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

// value rounded to T's precision (f32: unchanged).
template <typename T> __device__ __forceinline__ float roundTo(float value) {
  return toFloat(Convert<T>::from(value));
}
template <> __device__ __forceinline__ float roundTo<float>(float value) { return value; }

// cap * tanh(x / cap): Gemma 2's soft-cap of attention scores and logits.
__device__ __forceinline__ float softCap(float x, float cap) { return cap * tanhf(x / cap); }

// --- EMBED: grid (num_tokens), any block size -------------------------------------------------
// scale != 0 (plan.proto EmbedAttrs, already rounded to T by the emitter): each row times scale,
// the product rounded to T as transformers' multiplication in the table's dtype rounds it.
template <int kHidden, typename T, int kPanelRows>
__device__ void embed(const LlmcKernelParams &p, float scale) {
  const int row = blockIdx.x;
  const long long token = ((const int *)p.token_ids)[row];
  const T *table = (const T *)p.weight;
  float *out = (float *)p.output[0] + (long long)row * kHidden;
  for (int i = threadIdx.x; i < kHidden; i += blockDim.x) {
    const float value = toFloat(table[weightIndex<kHidden, kPanelRows>(token, i)]);
    out[i] = scale != 0.0f ? roundTo<T>(value * scale) : value;
  }
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

// --- Row maps: which activation rows a matmul block computes -----------------------------
// Row i of a block (0 <= i < count) multiplies activation row input(i) (of kK floats) by the
// weight rows weightBase + n and is stored as output row output(i). MATMUL: rows of the step
// (LOGITS, kIndirect: output row r reads batch row row_index[r]); EXPERT_MATMUL: the routed
// rows of one expert (ExpertRows below), so the same inner loops serve both.
template <bool kIndirect> struct StepRows {
  const int *index; // row_index (kIndirect only)
  int first, count;
  long long weightBase;
  __device__ __forceinline__ long long input(int i) const {
    return kIndirect ? index[first + i] : first + i;
  }
  __device__ __forceinline__ int output(int i) const { return first + i; }
};

// --- MATMUL / LOGITS, decode: GEMV ------------------------------------------------------------
// grid (ceil(N / kWarps)), block kWarps * 32. One warp per output column n; lanes stride K so a
// warp reads 32 consecutive weights (coalesced), and kRows activation rows share each weight
// load. `Store` splits column n into the fused outputs (emitted per kernel). kIndirect: LOGITS,
// output row r reads batch row row_index[r].
template <int kK, int kN, typename T, int kPanelRows, bool kBias, int kWarps, int kRows,
          typename Store, typename Rows>
__device__ void gemvRows(const LlmcKernelParams &p, const Rows &rows) {
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  if (n >= kN)
    return; // whole warps only: no barrier below
  const T *w = (const T *)p.weight;
  const float *x = (const float *)p.input[0];
  const long long weightRow = rows.weightBase + n;
  const float bias = kBias ? ((const float *)p.bias)[weightRow] : 0.0f;
  for (int first = 0; first < rows.count; first += kRows) {
    float acc[kRows];
    const float *in[kRows];
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
      const int row = first + r < rows.count ? first + r : first;
      in[r] = x + rows.input(row) * kK;
    }
    for (int k = lane; k < kK; k += 32) {
      const float weight = toFloat(w[weightIndex<kK, kPanelRows>(weightRow, k)]);
      for (int r = 0; r < kRows; ++r)
        acc[r] += in[r][k] * weight;
    }
    for (int r = 0; r < kRows; ++r) {
      const float total = warpSum(acc[r]);
      if (lane == 0 && first + r < rows.count)
        Store::store(p, rows.output(first + r), n, total + bias);
    }
  }
}

template <int kK, int kN, typename T, int kPanelRows, bool kBias, bool kIndirect, int kWarps,
          int kRows, typename Store>
__device__ void gemv(const LlmcKernelParams &p) {
  const StepRows<kIndirect> rows = {(const int *)p.row_index, 0,
                                    kIndirect ? p.num_rows : p.num_tokens, 0};
  gemvRows<kK, kN, T, kPanelRows, kBias, kWarps, kRows, Store>(p, rows);
}

// Splits of an f32 into bf16 parts (the MMA GEMMs' activations, the prefill attention's
// operands): high + low keeps ~16 significant bits, high + mid + low all 24.
__device__ __forceinline__ void splitBf16(float value, __nv_bfloat16 &high, __nv_bfloat16 &low) {
  high = __float2bfloat16_rn(value);
  low = __float2bfloat16_rn(value - __bfloat162float(high));
}

__device__ __forceinline__ void splitPack(float first, float second, u32 &high, u32 &low) {
  __nv_bfloat16 firstHigh, firstLow, secondHigh, secondLow;
  splitBf16(first, firstHigh, firstLow);
  splitBf16(second, secondHigh, secondLow);
  high = pack2(firstHigh, secondHigh);
  low = pack2(firstLow, secondLow);
}

// x = high + mid + low, each bf16: 24 significant bits in all.
__device__ __forceinline__ void splitBf16x3(float value, __nv_bfloat16 &high, __nv_bfloat16 &mid,
                                            __nv_bfloat16 &low) {
  high = __float2bfloat16_rn(value);
  const float rest = value - __bfloat162float(high);
  mid = __float2bfloat16_rn(rest);
  low = __float2bfloat16_rn(rest - __bfloat162float(mid));
}

__device__ __forceinline__ void splitPack3(float first, float second, u32 &high, u32 &mid,
                                           u32 &low) {
  __nv_bfloat16 h0, m0, l0, h1, m1, l1;
  splitBf16x3(first, h0, m0, l0);
  splitBf16x3(second, h1, m1, l1);
  high = pack2(h0, h1);
  mid = pack2(m0, m1);
  low = pack2(l0, l1);
}

// --- MATMUL, prefill: tensor-core GEMM (sm_80+) ----------------------------------------------
// grid (ceil(N / 32), ceil(num_tokens / 64)), block 128 = 4 warps. The block computes a 64-row
// x 32-column tile; warp w owns rows [16w, 16w + 16) and four 16x8 MMA tiles across the
// columns. K advances 16 at a time through shared memory, zero-padded at every edge.
// Activations are f32 but MMA inputs are 16-bit: each activation is split into hi = T(x) and
// lo = T(x - hi), and both are multiplied by the (exact) 16-bit weights, so the product keeps
// ~22 bits of the activation instead of 11 (f16); bf16 splits in three (hi, mid, lo: all 24
// bits, as hi + lo's 16 left a relative error of 2^-17 per product, enough to flip a MoE router's
// choice between logits 1e-5 apart that the CPU's f32 sums keep apart). f32-class accuracy at two
// or three times the MMA work, which prefill has to spare (it is bound by reading weights once
// per 64 tokens).
template <typename T> struct SplitInThree { static constexpr bool value = false; };
template <> struct SplitInThree<__nv_bfloat16> { static constexpr bool value = true; };
template <int kK, int kN, typename T, int kPanelRows, bool kBias, typename Store, typename Rows>
__device__ void gemmMmaRows(const LlmcKernelParams &p, const Rows &rows) {
  constexpr int kTileM = 64, kTileN = 32, kTileK = 16;
  // +8 elements per row: 48-byte rows spread fragment loads over more shared-memory banks.
  constexpr int kPitch = kTileK + 8;
  constexpr bool kThree = SplitInThree<T>::value;
  __shared__ T aHigh[kTileM * kPitch];
  __shared__ T aLow[kTileM * kPitch];
  __shared__ T aMid[kThree ? kTileM * kPitch : 1];
  __shared__ T b[kTileN * kPitch];
  const int n0 = blockIdx.x * kTileN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane >> 2, thread = lane & 3;
  const float *x = (const float *)p.input[0];
  const T *w = (const T *)p.weight;
  const int count = rows.count; // <= kTileM
  float acc[4][4];
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 4; ++i)
      acc[t][i] = 0.0f;
  for (int k0 = 0; k0 < kK; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTileM * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      const float value = (r < count && k0 + c < kK) ? x[rows.input(r) * kK + k0 + c] : 0.0f;
      if constexpr (kThree) {
        splitBf16x3(value, aHigh[r * kPitch + c], aMid[r * kPitch + c], aLow[r * kPitch + c]);
      } else {
        const T high = Convert<T>::from(value);
        aHigh[r * kPitch + c] = high;
        aLow[r * kPitch + c] = Convert<T>::from(value - toFloat(high));
      }
    }
    for (int e = threadIdx.x; e < kTileN * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      b[r * kPitch + c] = (n0 + r < kN && k0 + c < kK)
                              ? w[weightIndex<kK, kPanelRows>(rows.weightBase + n0 + r, k0 + c)]
                              : Convert<T>::from(0.0f);
    }
    __syncthreads();
    const int rowTop = (warp * 16 + group) * kPitch, rowBottom = rowTop + 8 * kPitch;
    const int col = thread * 2;
    u32 high[4], low[4], mid[4];
    loadFragmentA(aHigh, rowTop, rowBottom, col, high);
    loadFragmentA(aLow, rowTop, rowBottom, col, low);
    if constexpr (kThree)
      loadFragmentA(aMid, rowTop, rowBottom, col, mid);
    for (int t = 0; t < 4; ++t) {
      const int bRow = (t * 8 + group) * kPitch;
      u32 fragment[2];
      fragment[0] = pack2(b[bRow + col], b[bRow + col + 1]);
      fragment[1] = pack2(b[bRow + col + 8], b[bRow + col + 9]);
      mmaM16N8K16(acc[t], high, fragment, T());
      if constexpr (kThree)
        mmaM16N8K16(acc[t], mid, fragment, T());
      mmaM16N8K16(acc[t], low, fragment, T());
    }
    __syncthreads();
  }
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 4; ++i) {
      const int row = warp * 16 + group + (i >= 2 ? 8 : 0);
      const int n = n0 + t * 8 + thread * 2 + (i & 1);
      if (row < count && n < kN)
        Store::store(p, rows.output(row), n,
                     acc[t][i] + (kBias ? ((const float *)p.bias)[rows.weightBase + n] : 0.0f));
    }
  }
}

template <int kK, int kN, typename T, int kPanelRows, bool kBias, typename Store>
__device__ void gemmMma(const LlmcKernelParams &p) {
  const int m0 = blockIdx.y * 64;
  const StepRows<false> rows = {0, m0, p.num_tokens - m0 < 64 ? p.num_tokens - m0 : 64, 0};
  gemmMmaRows<kK, kN, T, kPanelRows, kBias, Store>(p, rows);
}

// --- ROPE: grid (num_tokens), block kThreads ---------------------------------------------------
// Rotate-half over the first kRotaryDim dims of each of kHeads heads (the rest are copied:
// partial rotary); angle = position * invFreq[i] in f32 as transformers does, cos and sin
// multiplied by cosSinScale (LongRoPE's attention factor, 1 otherwise). Each thread owns a
// (first, second) pair or a passed-through element, so output may alias input.
template <int kHeads, int kHeadDim, int kThreads, int kRotaryDim = kHeadDim>
__device__ void rope(const LlmcKernelParams &p, const float *invFreq, float cosSinScale = 1.0f) {
  constexpr int kHalf = kRotaryDim / 2;
  constexpr int kPass = kHeadDim - kRotaryDim;
  const long long base = (long long)blockIdx.x * kHeads * kHeadDim;
  const float *in = (const float *)p.input[0] + base;
  float *out = (float *)p.output[0] + base;
  const float position = (float)((const int *)p.positions)[blockIdx.x];
  constexpr int kPassDivisor = kPass > 0 ? kPass : 1;
  if (kPass > 0 && in != out) {
    for (int e = threadIdx.x; e < kHeads * kPass; e += kThreads) {
      const int d = e / kPassDivisor * kHeadDim + kRotaryDim + e % kPassDivisor;
      out[d] = in[d];
    }
  }
  for (int e = threadIdx.x; e < kHeads * kHalf; e += kThreads) {
    const int head = e / kHalf, i = e % kHalf;
    const float angle = position * invFreq[i];
    float cosine = cosf(angle), sine = sinf(angle);
    if (cosSinScale != 1.0f)
      cosine *= cosSinScale, sine *= cosSinScale;
    const float first = in[head * kHeadDim + i], second = in[head * kHeadDim + i + kHalf];
    out[head * kHeadDim + i] = first * cosine - second * sine;
    out[head * kHeadDim + i + kHalf] = second * cosine + first * sine;
  }
}

// Element d of one head after rotate-half rope (the ROPE op's math, so a fused attention gives
// its results): x holds the head's unrotated values, angle = position * invFreq[d % half] in
// f32 as transformers computes it.
template <int kHeadDim>
__device__ __forceinline__ float ropeElement(const float *x, int d, float position,
                                             const float *invFreq) {
  constexpr int kHalf = kHeadDim / 2;
  const bool first = d < kHalf;
  const float angle = position * invFreq[first ? d : d - kHalf];
  const float cosine = cosf(angle), sine = sinf(angle);
  return first ? x[d] * cosine - x[d + kHalf] * sine : x[d] * cosine + x[d - kHalf] * sine;
}

// --- ATTENTION 1/3: KV-cache write. grid (num_tokens), block 128 ----------------------------
// kRope: the ROPE op of k is fused here (its op launches nothing): k is rotated on its way
// into the cache, so every later reader gets rotated keys. KvT: the cache's element type
// (KvCacheSpec.dtype F32, F16 or BF16), rounded to nearest even; or i8, quantized as
// runtime/kv/kv_storage.cc does, so both backends store the same codes for the same input:
// per (token, kv head) m = max|x| over head_dim, code = rint(x * (127 / m)) (IEEE division and
// product, round half to even), scale = m / 127; m = 0 gives codes 0 and scale 0.
template <int kKvWidth, int kHeadDim, bool kRope, typename KvT>
__device__ void writeKvCache(const LlmcKernelParams &p, const float *invFreq) {
  const long long slot = ((const int *)p.slot_mapping)[blockIdx.x];
  const float *k = (const float *)p.input[1] + (long long)blockIdx.x * kKvWidth;
  const float *v = (const float *)p.input[2] + (long long)blockIdx.x * kKvWidth;
  KvT *keyCache = (KvT *)p.key_cache + slot * kKvWidth;
  KvT *valueCache = (KvT *)p.value_cache + slot * kKvWidth;
  const float position = kRope ? (float)((const int *)p.positions)[blockIdx.x] : 0.0f;
  if constexpr (KvScaled<KvT>::value) {
    // The token's rotated k and its v go through shared memory (2 * kKvWidth floats: 4 KiB at 8
    // kv heads of 64), then one warp per (K or V, head) finds the head's max and writes codes.
    constexpr int kKvHeads = kKvWidth / kHeadDim;
    __shared__ float rows[2 * kKvWidth]; // K heads, then V heads
    for (int i = threadIdx.x; i < kKvWidth; i += blockDim.x) {
      const int head = i / kHeadDim, d = i % kHeadDim;
      rows[i] = kRope ? ropeElement<kHeadDim>(k + head * kHeadDim, d, position, invFreq) : k[i];
      rows[kKvWidth + i] = v[i];
    }
    __syncthreads();
    const int lane = threadIdx.x % 32;
    for (int item = threadIdx.x / 32; item < 2 * kKvHeads; item += blockDim.x / 32) {
      const float *x = rows + item * kHeadDim;
      float magnitude = 0.0f;
      for (int d = lane; d < kHeadDim; d += 32)
        magnitude = fmaxf(magnitude, fabsf(x[d]));
      magnitude = warpMax(magnitude);
      const float inverse = magnitude > 0.0f ? 127.0f / magnitude : 0.0f;
      const int head = item % kKvHeads;
      KvT *codes = (item < kKvHeads ? keyCache : valueCache) + head * kHeadDim;
      for (int d = lane; d < kHeadDim; d += 32)
        codes[d] = (KvT)rintf(x[d] * inverse);
      if (lane == 0)
        ((float *)(item < kKvHeads ? p.key_scales : p.value_scales))[slot * kKvHeads + head] =
            magnitude / 127.0f;
    }
  } else {
    for (int i = threadIdx.x; i < kKvWidth; i += blockDim.x) {
      const int head = i / kHeadDim, d = i % kHeadDim;
      keyCache[i] = fromFloat<KvT>(
          kRope ? ropeElement<kHeadDim>(k + head * kHeadDim, d, position, invFreq) : k[i]);
      valueCache[i] = fromFloat<KvT>(v[i]);
    }
  }
}

// --- ATTENTION 2/3: split-K flash-decoding over the paged cache ------------------------------
// grid (num_tokens, kHeads, kSplits), block kWarps * 32. Block (t, h, s) takes the s-th of
// kSplits equal ranges of the keys query t sees (causal, kWindow > 0: only the last kWindow),
// its warps take every kWarps-th key of it, lanes split head_dim; each warp keeps an online
// softmax (running max m, sum l, weighted values). The warps merge in shared memory and write
// one partial [m, l, acc[kHeadDim]] per (t, h, s) to scratch; attentionCombine merges splits.
// Splitting keys is what keeps an H200's 132 SMs busy when a decode step has few queries.
// kRope: q's ROPE op is fused here (q is rotated as it is loaded). kSoftcap: the scaled scores
// are soft-capped at `softcap` (AttentionAttrs.logit_softcap); a template flag, so the kernels
// of models without it carry no tanh and no extra registers.
template <int kHeads, int kKvHeads, int kHeadDim, int kSplits, int kWindow, int kWarps, bool kRope,
          typename KvT, bool kSoftcap>
__device__ void attentionSplitCapped(const LlmcKernelParams &p, float scale, float softcap,
                                     const float *invFreq) {
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
  const float position = kRope ? (float)((const int *)p.positions)[row] : 0.0f;
  float query[kPerLane], acc[kPerLane];
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    query[j] = d >= kHeadDim ? 0.0f : kRope ? ropeElement<kHeadDim>(q, d, position, invFreq) : q[d];
    acc[j] = 0.0f;
  }
  const int *table = (const int *)p.block_tables + ((const int *)p.block_table)[row];
  const int blockSize = p.block_size;
  float runningMax = negativeInfinity(), runningSum = 0.0f;
  for (int key = begin + warp; key < end; key += kWarps) {
    const long long slot = (long long)table[key / blockSize] * blockSize + key % blockSize;
    const KvT *k = (const KvT *)p.key_cache + slot * kKvWidth + kvHead * kHeadDim;
    const KvT *v = (const KvT *)p.value_cache + slot * kKvWidth + kvHead * kHeadDim;
    float dot = 0.0f;
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < kHeadDim)
        dot += query[j] * toFloat(k[d]);
    }
    // int8 cache: the per-(slot, head) scales multiply the score and the weight once per key.
    float score = warpSum(dot) * kvScale<KvT, kKvHeads>(p.key_scales, slot, kvHead) * scale;
    if (kSoftcap)
      score = softCap(score, softcap);
    const float newMax = fmaxf(runningMax, score);
    const float correction = expf(runningMax - newMax);
    const float weight = expf(score - newMax);
    runningSum = runningSum * correction + weight;
    const float valueWeight = weight * kvScale<KvT, kKvHeads>(p.value_scales, slot, kvHead);
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      acc[j] = acc[j] * correction + (d < kHeadDim ? valueWeight * toFloat(v[d]) : 0.0f);
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

template <int kHeads, int kKvHeads, int kHeadDim, int kSplits, int kWindow, int kWarps, bool kRope,
          typename KvT>
__device__ void attentionSplit(const LlmcKernelParams &p, float scale, const float *invFreq) {
  attentionSplitCapped<kHeads, kKvHeads, kHeadDim, kSplits, kWindow, kWarps, kRope, KvT, false>(
      p, scale, 0.0f, invFreq);
}

// --- ATTENTION 3/3: merge the splits. grid (num_tokens, kHeads), block 32 --------------------
// Writes output[0] only after every split read q, so the output may alias q. kSinks (gpt-oss,
// the ATTENTION op's sinks weight in p.weight, f32 [kHeads]): head h's softmax denominator
// gains exp(sink_h - m); the sink enters here, once, as a partial with max sink_h, sum 1 and no
// value (not in each split).
template <int kHeads, int kHeadDim, int kSplits, bool kSinks = false>
__device__ void attentionCombine(const LlmcKernelParams &p) {
  const long long item = (long long)blockIdx.x * kHeads + blockIdx.y;
  const float *partial = (const float *)p.scratch + item * kSplits * (kHeadDim + 2);
  const float sink = kSinks ? ((const float *)p.weight)[blockIdx.y] : negativeInfinity();
  float globalMax = sink;
  for (int s = 0; s < kSplits; ++s)
    globalMax = fmaxf(globalMax, partial[s * (kHeadDim + 2)]);
  float total = kSinks ? expf(sink - globalMax) : 0.0f;
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

// --- ATTENTION, prefill: tiled flash attention on tensor cores (sm_80+) ---------------------
// grid (ceil(num_tokens / 64), kHeads), block 128 = 4 warps. A query tile is up to 64
// consecutive tokens of one sequence; the backend lists the step's tiles in p.tiles as
// (first token, count) pairs, p.num_tiles of them, and block x takes tiles x, x + gridDim.x,
// ... (a step of one long prompt: one tile per block). Warp w owns the tile's query rows
// [16w, 16w + 16): its Q fragments (rope applied, kRope) stay in registers for the whole tile,
// K and V stream through shared memory kTileKeys keys at a time from the paged cache (each key
// read once per tile instead of once per query: 64x less traffic than the decode kernel at
// prefill), S = Q K^T and O += P V are m16n8k16 MMAs, and each query row (shared by the 4 lanes
// of a quad, as the MMA's C layout puts it) keeps an online softmax: running max m and
// per-lane partial sums l, reduced over the quad at the end. P goes from S's accumulator
// registers straight into PV's A fragments (the C layout of two n8 tiles is the A layout of
// one k16 step), so scores never touch shared memory.
// Precision: MMA operands are bf16 (f32's exponent range: no overflow or scaling concerns), with
// every operand split into bf16 parts accumulated in f32. Scores feed exp(), which turns an
// absolute score error into a relative probability error, so QK^T splits q and k in three
// (hi, mid, lo: 24 significant bits, f32's) and sums the six products above 2^-24 (hi*hi,
// hi*mid, mid*hi, mid*mid, hi*lo, lo*hi): f32-exact scores up to summation order. PV over an
// f16, bf16 or int8 cache splits P and V in two (16 bits: an f16 or bf16 V exactly) and sums
// three products (relative error ~2^-17 of the output, far below what the cache's own rounding
// moves it). Over an f32 cache nothing else rounds, and that 2^-17 put an f32 plan 1.04e-4 from
// transformers (llama_yarn_biases, logits up to 8; the bar is 1e-4, the CPU backend is within
// 1.8e-5): there PV splits P and V in three like QK^T (V pre-split in shared memory, 16-key
// tiles where 32 would pass the 48 KiB of static shared memory). A two-way QK^T split
// measurably failed the fixtures' 1e-3 logits tolerance (1.4e-3 on llama_mha bf16). Tensor
// work is 6 + 3 MMAs (6 + 6 over f32) per 16x8x16 step instead of 2, affordable because
// prefill attention is a small share of a prefill step (docs/cuda.md).
// d += a b over three-part operands: the six products above 2^-24 relative, small first.
__device__ __forceinline__ void mmaSplit3(float (&d)[4], const u32 (&aHigh)[4],
                                          const u32 (&aMid)[4], const u32 (&aLow)[4],
                                          const u32 (&bHigh)[2], const u32 (&bMid)[2],
                                          const u32 (&bLow)[2]) {
  mmaM16N8K16(d, aLow, bHigh, __nv_bfloat16());
  mmaM16N8K16(d, aHigh, bLow, __nv_bfloat16());
  mmaM16N8K16(d, aMid, bMid, __nv_bfloat16());
  mmaM16N8K16(d, aMid, bHigh, __nv_bfloat16());
  mmaM16N8K16(d, aHigh, bMid, __nv_bfloat16());
  mmaM16N8K16(d, aHigh, bHigh, __nv_bfloat16());
}

// d += (aHigh + aLow) (bHigh + bLow) without the lo*lo term; small terms first.
__device__ __forceinline__ void mmaSplit(float (&d)[4], const u32 (&aHigh)[4], const u32 (&aLow)[4],
                                         const u32 (&bHigh)[2], const u32 (&bLow)[2]) {
  mmaM16N8K16(d, aLow, bHigh, __nv_bfloat16());
  mmaM16N8K16(d, aHigh, bLow, __nv_bfloat16());
  mmaM16N8K16(d, aHigh, bHigh, __nv_bfloat16());
}

// kSoftcap as attentionSplitCapped's; kSinks as attentionCombine's.
template <int kHeads, int kKvHeads, int kHeadDim, int kWindow, bool kRope, typename KvT,
          bool kSoftcap, bool kSinks = false>
__device__ void attentionPrefillCapped(const LlmcKernelParams &p, float scale, float softcap,
                                       const float *invFreq) {
  constexpr int kDim = (kHeadDim + 15) / 16 * 16; // head_dim padded to the MMA's k of 16
  constexpr int kChunks = kDim / 16, kDimTiles = kDim / 8;
  constexpr int kPitch = kDim + 8; // +8 bf16 per row: fragment loads spread over more banks
  constexpr int kKvWidth = kKvHeads * kHeadDim;
  constexpr bool kExactValues = KvF32<KvT>::value; // P and V in three parts
  constexpr int kTileKeys = kExactValues ? 16 : 32;
  __shared__ __nv_bfloat16 keyHigh[kTileKeys * kPitch], keyMid[kTileKeys * kPitch],
      keyLow[kTileKeys * kPitch];
  __shared__ __nv_bfloat16 valueHigh[kTileKeys * kPitch], valueLow[kTileKeys * kPitch],
      valueMid[kExactValues ? kTileKeys * kPitch : 1];
  const int head = blockIdx.y, kvHead = head / (kHeads / kKvHeads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane >> 2, quad = lane & 3;
  const int *tiles = (const int *)p.tiles;
  const int blockSize = p.block_size;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x) {
    const int firstToken = tiles[2 * tile], count = tiles[2 * tile + 1];
    const int firstQuery = ((const int *)p.query_index)[firstToken];
    const int keyEnd = firstQuery + count; // causal: the last query sees keys < keyEnd
    int keyBegin = 0;
    if (kWindow > 0 && firstQuery - kWindow + 1 > 0)
      keyBegin = firstQuery - kWindow + 1;
    const int *table = (const int *)p.block_tables + ((const int *)p.block_table)[firstToken];
    // This lane's two query rows of the tile (the C layout's groupID and groupID + 8).
    const int rows[2] = {warp * 16 + group, warp * 16 + group + 8};
    const bool warpActive = warp * 16 < count; // uniform per warp: MMAs need all 32 lanes
    u32 qHigh[kChunks][4], qMid[kChunks][4], qLow[kChunks][4];
    if (warpActive) {
      for (int c = 0; c < kChunks; ++c) {
        for (int r = 0; r < 4; ++r) {
          // A fragment register r: row rows[r & 1], columns 2 * quad + {0, 1} (+8 for r >= 2).
          const int row = rows[r & 1], d = c * 16 + 2 * quad + (r >= 2 ? 8 : 0);
          float pair0 = 0.0f, pair1 = 0.0f;
          if (row < count) {
            const float *q = (const float *)p.input[0] +
                             ((long long)(firstToken + row) * kHeads + head) * kHeadDim;
            const float position =
                kRope ? (float)((const int *)p.positions)[firstToken + row] : 0.0f;
            // Not unrolled, and no per-thread array: every unrolled copy of sinf/cosf inlines
            // a slow-path argument reduction with its own local buffer, and with all of them
            // ptxas spilled (head_dim 6, sm_90). One copy per r costs nothing: Q loads once.
#pragma unroll 1
            for (int e = 0; e < 2; ++e) {
              if (d + e < kHeadDim) {
                const float value =
                    kRope ? ropeElement<kHeadDim>(q, d + e, position, invFreq) : q[d + e];
                if (e == 0)
                  pair0 = value;
                else
                  pair1 = value;
              }
            }
          }
          splitPack3(pair0, pair1, qHigh[c][r], qMid[c][r], qLow[c][r]);
        }
      }
    }
    float out[kDimTiles][4];
    for (int t = 0; t < kDimTiles; ++t)
      for (int i = 0; i < 4; ++i)
        out[t][i] = 0.0f;
    // kSinks (attentionCombine's): each row starts from the sink's max and weight 1 (counted
    // once: by the quad's lane 0, as the sums are reduced over the quad at the end).
    const float sink = kSinks ? ((const float *)p.weight)[head] : negativeInfinity();
    float runningMax[2] = {sink, sink};
    const float sinkShare = kSinks && quad == 0 ? 1.0f : 0.0f;
    float runningSum[2] = {sinkShare, sinkShare}; // this lane's share of its rows' sums
    for (int keyBase = keyBegin; keyBase < keyEnd; keyBase += kTileKeys) {
      __syncthreads(); // the previous key tile has been consumed
      for (int e = threadIdx.x; e < kTileKeys * kDim; e += 128) {
        const int key = keyBase + e / kDim, d = e % kDim;
        float keyValue = 0.0f, valueValue = 0.0f;
        if (key < keyEnd && d < kHeadDim) {
          const long long slot = (long long)table[key / blockSize] * blockSize + key % blockSize;
          const long long at = slot * kKvWidth + kvHead * kHeadDim + d;
          // int8 cache: dequantized here (code * scale in f32), before the bf16 split.
          keyValue = toFloat(((const KvT *)p.key_cache)[at]) *
                     kvScale<KvT, kKvHeads>(p.key_scales, slot, kvHead);
          valueValue = toFloat(((const KvT *)p.value_cache)[at]) *
                       kvScale<KvT, kKvHeads>(p.value_scales, slot, kvHead);
        }
        const int index = (e / kDim) * kPitch + d;
        splitBf16x3(keyValue, keyHigh[index], keyMid[index], keyLow[index]);
        if constexpr (kExactValues)
          splitBf16x3(valueValue, valueHigh[index], valueMid[index], valueLow[index]);
        else
          splitBf16(valueValue, valueHigh[index], valueLow[index]);
      }
      __syncthreads();
      if (!warpActive)
        continue;
      float score[kTileKeys / 8][4];
      for (int t = 0; t < kTileKeys / 8; ++t) {
        for (int i = 0; i < 4; ++i)
          score[t][i] = 0.0f;
        // B (k = dim, n = key) element (d, key) is K[key][d]: key row t * 8 + groupID.
        const int keyRow = (t * 8 + group) * kPitch + 2 * quad;
        for (int c = 0; c < kChunks; ++c) {
          const int at = keyRow + c * 16;
          const u32 bHigh[2] = {pack2(keyHigh[at], keyHigh[at + 1]),
                                pack2(keyHigh[at + 8], keyHigh[at + 9])};
          const u32 bMid[2] = {pack2(keyMid[at], keyMid[at + 1]),
                               pack2(keyMid[at + 8], keyMid[at + 9])};
          const u32 bLow[2] = {pack2(keyLow[at], keyLow[at + 1]),
                               pack2(keyLow[at + 8], keyLow[at + 9])};
          mmaSplit3(score[t], qHigh[c], qMid[c], qLow[c], bHigh, bMid, bLow);
        }
      }
      // Scale, mask (causal, window, past the end) and the online softmax of both rows.
      for (int h = 0; h < 2; ++h) {
        const int query = firstQuery + rows[h];
        float tileMax = negativeInfinity();
        for (int t = 0; t < kTileKeys / 8; ++t) {
          for (int e = 0; e < 2; ++e) {
            const int key = keyBase + t * 8 + 2 * quad + e;
            const bool visible = rows[h] < count && key < keyEnd && key <= query &&
                                 (kWindow == 0 || query - key < kWindow);
            float &value = score[t][2 * h + e];
            value = !visible   ? negativeInfinity()
                    : kSoftcap ? softCap(value * scale, softcap)
                               : value * scale;
            tileMax = fmaxf(tileMax, value);
          }
        }
        tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
        tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 2));
        const float newMax = fmaxf(runningMax[h], tileMax);
        // A row with no visible key yet keeps max -inf: exponents relative to 0 give 0s, not NaN.
        const float base = newMax == negativeInfinity() ? 0.0f : newMax;
        const float correction = expf(runningMax[h] - base);
        float sum = 0.0f;
        for (int t = 0; t < kTileKeys / 8; ++t) {
          for (int e = 0; e < 2; ++e) {
            float &value = score[t][2 * h + e];
            value = expf(value - base);
            sum += value;
          }
        }
        runningSum[h] = runningSum[h] * correction + sum;
        runningMax[h] = newMax;
        for (int t = 0; t < kDimTiles; ++t) {
          out[t][2 * h] *= correction;
          out[t][2 * h + 1] *= correction;
        }
      }
      // O += P V, 16 keys per MMA k-step. P's A fragment from score tiles 2s and 2s + 1.
      for (int s = 0; s < kTileKeys / 16; ++s) {
        // P's fragment r: score tile 2s + r / 2, its row pair r % 2.
        u32 pHigh[4], pMid[4], pLow[4];
        for (int r = 0; r < 4; ++r) {
          const float *pair = score[2 * s + r / 2] + 2 * (r % 2);
          if constexpr (kExactValues)
            splitPack3(pair[0], pair[1], pHigh[r], pMid[r], pLow[r]);
          else
            splitPack(pair[0], pair[1], pHigh[r], pLow[r]);
        }
        // B (k = key, n = dim) element (key, d) is V[key][d]: keys 16s + 2 * quad + {0, 1} (+8).
        const int keyRow = (16 * s + 2 * quad) * kPitch;
        for (int t = 0; t < kDimTiles; ++t) {
          const int at = keyRow + t * 8 + group;
          const u32 bHigh[2] = {pack2(valueHigh[at], valueHigh[at + kPitch]),
                                pack2(valueHigh[at + 8 * kPitch], valueHigh[at + 9 * kPitch])};
          const u32 bLow[2] = {pack2(valueLow[at], valueLow[at + kPitch]),
                               pack2(valueLow[at + 8 * kPitch], valueLow[at + 9 * kPitch])};
          if constexpr (kExactValues) {
            const u32 bMid[2] = {pack2(valueMid[at], valueMid[at + kPitch]),
                                 pack2(valueMid[at + 8 * kPitch], valueMid[at + 9 * kPitch])};
            mmaSplit3(out[t], pHigh, pMid, pLow, bHigh, bMid, bLow);
          } else {
            mmaSplit(out[t], pHigh, pLow, bHigh, bLow);
          }
        }
      }
    }
    if (warpActive) {
      for (int h = 0; h < 2; ++h) {
        float total = runningSum[h];
        total += __shfl_xor_sync(0xffffffffu, total, 1);
        total += __shfl_xor_sync(0xffffffffu, total, 2);
        if (rows[h] >= count)
          continue;
        // Q was read into registers before any write: the output may alias q.
        float *o =
            (float *)p.output[0] + ((long long)(firstToken + rows[h]) * kHeads + head) * kHeadDim;
        for (int t = 0; t < kDimTiles; ++t)
          for (int e = 0; e < 2; ++e) {
            const int d = t * 8 + 2 * quad + e;
            if (d < kHeadDim)
              o[d] = out[t][2 * h + e] / total;
          }
      }
    }
  }
}

template <int kHeads, int kKvHeads, int kHeadDim, int kWindow, bool kRope, typename KvT>
__device__ void attentionPrefill(const LlmcKernelParams &p, float scale, const float *invFreq) {
  attentionPrefillCapped<kHeads, kKvHeads, kHeadDim, kWindow, kRope, KvT, false>(p, scale, 0.0f,
                                                                                 invFreq);
}

// --- LOGITS top-k prefilter: grid (num_rows), block 256 --------------------------------------
// After the logits GEMV: output[1] [num_rows, kTopK] f32 and output[2] [num_rows, kTopK] i32
// receive each row's kTopK largest logits and their token ids, sorted by value descending
// (ties: lower id first), so a greedy or top-k sampler copies back kTopK pairs per row instead
// of the whole vocab row. The threshold (the kTopK-th largest value) comes from a 4-pass radix
// select over the order-preserving 32-bit keys of the values (8 bits per pass, 256-bin
// histogram in shared memory); candidates above it, then ties at it in id order, are compacted
// with per-thread contiguous segments and a block scan, which makes the selection
// deterministic; a rank sort of the kTopK candidates orders them.
__device__ __forceinline__ u32 orderKey(float value) {
  const u32 bits = (u32)__float_as_int(value);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

template <int kVocab, int kTopK> __device__ void logitsTopK(const LlmcKernelParams &p) {
  constexpr int kThreads = 256;
  constexpr int kSegment = (kVocab + kThreads - 1) / kThreads;
  __shared__ u32 histogram[256];
  __shared__ u32 selected[2]; // key prefix so far, candidates still to take at or below it
  __shared__ int greaterBefore[kThreads], equalBefore[kThreads];
  __shared__ float candidateValue[kTopK];
  __shared__ int candidateId[kTopK];
  const float *row = (const float *)p.output[0] + (long long)blockIdx.x * kVocab;
  const int tid = threadIdx.x;
  if (tid == 0) {
    selected[0] = 0;
    selected[1] = kTopK;
  }
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const u32 mask = pass == 0 ? 0u : 0xffffffffu << (shift + 8);
    histogram[tid] = 0;
    __syncthreads();
    const u32 prefix = selected[0];
    for (int i = tid; i < kVocab; i += kThreads) {
      const u32 key = orderKey(row[i]);
      if ((key & mask) == prefix)
        atomicAdd(&histogram[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      u32 above = 0, remaining = selected[1];
      int bin = 255;
      while (bin > 0 && above + histogram[bin] < remaining)
        above += histogram[bin--];
      selected[0] = prefix | ((u32)bin << shift);
      selected[1] = remaining - above;
    }
    __syncthreads();
  }
  const u32 threshold = selected[0];
  const int ties = (int)selected[1]; // taken at the threshold, lowest ids first
  const int begin = tid * kSegment;
  const int end = begin + kSegment < kVocab ? begin + kSegment : kVocab;
  int greater = 0, equal = 0;
  for (int i = begin; i < end; ++i) {
    const u32 key = orderKey(row[i]);
    greater += key > threshold;
    equal += key == threshold;
  }
  greaterBefore[tid] = greater;
  equalBefore[tid] = equal;
  __syncthreads();
  if (tid == 0) {
    int greaterTotal = 0, equalTotal = 0;
    for (int t = 0; t < kThreads; ++t) {
      const int g = greaterBefore[t], e = equalBefore[t];
      greaterBefore[t] = greaterTotal;
      equalBefore[t] = equalTotal;
      greaterTotal += g;
      equalTotal += e;
    }
  }
  __syncthreads();
  int nextGreater = greaterBefore[tid], nextEqual = equalBefore[tid];
  for (int i = begin; i < end; ++i) {
    const float value = row[i];
    const u32 key = orderKey(value);
    int slot = -1;
    if (key > threshold)
      slot = nextGreater++;
    else if (key == threshold && nextEqual < ties)
      slot = kTopK - ties + nextEqual++;
    if (slot >= 0) {
      candidateValue[slot] = value;
      candidateId[slot] = i;
    }
  }
  __syncthreads();
  if (tid < kTopK) {
    const u32 key = orderKey(candidateValue[tid]);
    const int id = candidateId[tid];
    int rank = 0;
    for (int j = 0; j < kTopK; ++j) {
      const u32 other = orderKey(candidateValue[j]);
      rank += other > key || (other == key && candidateId[j] < id);
    }
    ((float *)p.output[1])[(long long)blockIdx.x * kTopK + rank] = candidateValue[tid];
    ((int *)p.output[2])[(long long)blockIdx.x * kTopK + rank] = id;
  }
}

// --- Quantized weights (plan.proto Quantization): I8 / I4 codes, f16 scales per group ---------
// kBits 8: w = code * scale (signed codes). kBits 4: w = (code - zero) * scale, zero = 8
// (symmetric) or the U8 zero point of (row, group) (kAsymmetric). I4 codes are in layout
// LANE_CHUNKS: a row's runs of 32 columns form chunks of 8 runs (the last one the n <= 8 left);
// a chunk of n runs is 4 slices of 4n bytes, and in slice v the 4 bytes at 4j hold run j's
// columns 8v..8v+3 (low nibbles) and 8v+4..8v+7 (high nibbles). NVRTC sees no host headers, so
// int4RunsInChunk and quantCode repeat Int4RunsInChunk / Int4PositionOf of
// runtime/plan/int4_layout.h line for line (kInt4ChunkBytes = 128 bytes per full chunk).
// kPermuted: stored column c multiplies activation element input_permutation[c].
template <int kK> __device__ __forceinline__ int int4RunsInChunk(int run) {
  const int left = kK / 32 - run / 8 * 8;
  return left < 8 ? left : 8;
}

template <int kK, int kBits>
__device__ __forceinline__ int quantCode(const void *codes, long long row, int col) {
  if (kBits == 8)
    return ((const signed char *)codes)[row * kK + col];
  const int run = col / 32, offset = col % 32;
  const int byte =
      run / 8 * 128 + offset / 8 * 4 * int4RunsInChunk<kK>(run) + run % 8 * 4 + offset % 4;
  const unsigned char packed = ((const unsigned char *)codes)[row * (kK / 2) + byte];
  return offset % 8 < 4 ? (packed & 15) : (packed >> 4);
}

// MXFP4 (kFp4, plan.proto FP4_E2M1): the 4-bit codes sit where I4's do (LANE_CHUNKS) but mean
// an E2M1 value (bit 3 sign, bits 2-1 exponent, bit 0 mantissa), and each group of 32 columns
// has an E8M0 scale byte b meaning 2^(b - 127) in p.scales. Both decode through tables (the
// values of runtime/plan/mxfp4.h's kE2M1Values and E8M0ToF32), never by building float bits:
// every entry is exact, 2^-127 (b = 0) an f32 denormal. Byte 255 (NaN) is refused by
// plan::CheckProgram; its entry is 0.
static __constant__ float kE2M1Table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
static __constant__ float kE8M0Table[256] = {
    0x1p-127f, 0x1p-126f, 0x1p-125f, 0x1p-124f, 0x1p-123f, 0x1p-122f, 0x1p-121f, 0x1p-120f,
    0x1p-119f, 0x1p-118f, 0x1p-117f, 0x1p-116f, 0x1p-115f, 0x1p-114f, 0x1p-113f, 0x1p-112f,
    0x1p-111f, 0x1p-110f, 0x1p-109f, 0x1p-108f, 0x1p-107f, 0x1p-106f, 0x1p-105f, 0x1p-104f,
    0x1p-103f, 0x1p-102f, 0x1p-101f, 0x1p-100f, 0x1p-99f,  0x1p-98f,  0x1p-97f,  0x1p-96f,
    0x1p-95f,  0x1p-94f,  0x1p-93f,  0x1p-92f,  0x1p-91f,  0x1p-90f,  0x1p-89f,  0x1p-88f,
    0x1p-87f,  0x1p-86f,  0x1p-85f,  0x1p-84f,  0x1p-83f,  0x1p-82f,  0x1p-81f,  0x1p-80f,
    0x1p-79f,  0x1p-78f,  0x1p-77f,  0x1p-76f,  0x1p-75f,  0x1p-74f,  0x1p-73f,  0x1p-72f,
    0x1p-71f,  0x1p-70f,  0x1p-69f,  0x1p-68f,  0x1p-67f,  0x1p-66f,  0x1p-65f,  0x1p-64f,
    0x1p-63f,  0x1p-62f,  0x1p-61f,  0x1p-60f,  0x1p-59f,  0x1p-58f,  0x1p-57f,  0x1p-56f,
    0x1p-55f,  0x1p-54f,  0x1p-53f,  0x1p-52f,  0x1p-51f,  0x1p-50f,  0x1p-49f,  0x1p-48f,
    0x1p-47f,  0x1p-46f,  0x1p-45f,  0x1p-44f,  0x1p-43f,  0x1p-42f,  0x1p-41f,  0x1p-40f,
    0x1p-39f,  0x1p-38f,  0x1p-37f,  0x1p-36f,  0x1p-35f,  0x1p-34f,  0x1p-33f,  0x1p-32f,
    0x1p-31f,  0x1p-30f,  0x1p-29f,  0x1p-28f,  0x1p-27f,  0x1p-26f,  0x1p-25f,  0x1p-24f,
    0x1p-23f,  0x1p-22f,  0x1p-21f,  0x1p-20f,  0x1p-19f,  0x1p-18f,  0x1p-17f,  0x1p-16f,
    0x1p-15f,  0x1p-14f,  0x1p-13f,  0x1p-12f,  0x1p-11f,  0x1p-10f,  0x1p-9f,   0x1p-8f,
    0x1p-7f,   0x1p-6f,   0x1p-5f,   0x1p-4f,   0x1p-3f,   0x1p-2f,   0x1p-1f,   0x1p0f,
    0x1p1f,    0x1p2f,    0x1p3f,    0x1p4f,    0x1p5f,    0x1p6f,    0x1p7f,    0x1p8f,
    0x1p9f,    0x1p10f,   0x1p11f,   0x1p12f,   0x1p13f,   0x1p14f,   0x1p15f,   0x1p16f,
    0x1p17f,   0x1p18f,   0x1p19f,   0x1p20f,   0x1p21f,   0x1p22f,   0x1p23f,   0x1p24f,
    0x1p25f,   0x1p26f,   0x1p27f,   0x1p28f,   0x1p29f,   0x1p30f,   0x1p31f,   0x1p32f,
    0x1p33f,   0x1p34f,   0x1p35f,   0x1p36f,   0x1p37f,   0x1p38f,   0x1p39f,   0x1p40f,
    0x1p41f,   0x1p42f,   0x1p43f,   0x1p44f,   0x1p45f,   0x1p46f,   0x1p47f,   0x1p48f,
    0x1p49f,   0x1p50f,   0x1p51f,   0x1p52f,   0x1p53f,   0x1p54f,   0x1p55f,   0x1p56f,
    0x1p57f,   0x1p58f,   0x1p59f,   0x1p60f,   0x1p61f,   0x1p62f,   0x1p63f,   0x1p64f,
    0x1p65f,   0x1p66f,   0x1p67f,   0x1p68f,   0x1p69f,   0x1p70f,   0x1p71f,   0x1p72f,
    0x1p73f,   0x1p74f,   0x1p75f,   0x1p76f,   0x1p77f,   0x1p78f,   0x1p79f,   0x1p80f,
    0x1p81f,   0x1p82f,   0x1p83f,   0x1p84f,   0x1p85f,   0x1p86f,   0x1p87f,   0x1p88f,
    0x1p89f,   0x1p90f,   0x1p91f,   0x1p92f,   0x1p93f,   0x1p94f,   0x1p95f,   0x1p96f,
    0x1p97f,   0x1p98f,   0x1p99f,   0x1p100f,  0x1p101f,  0x1p102f,  0x1p103f,  0x1p104f,
    0x1p105f,  0x1p106f,  0x1p107f,  0x1p108f,  0x1p109f,  0x1p110f,  0x1p111f,  0x1p112f,
    0x1p113f,  0x1p114f,  0x1p115f,  0x1p116f,  0x1p117f,  0x1p118f,  0x1p119f,  0x1p120f,
    0x1p121f,  0x1p122f,  0x1p123f,  0x1p124f,  0x1p125f,  0x1p126f,  0x1p127f,  0.0f,
};

// The value a code stands for before its group scale: the integer code (I8, I4) or E2M1's.
template <bool kFp4> __device__ __forceinline__ float quantValue(int code) {
  return kFp4 ? kE2M1Table[code] : (float)code;
}

template <int kK, int kGroup, int kBits, bool kAsymmetric>
__device__ __forceinline__ int quantZero(const LlmcKernelParams &p, long long row, int group) {
  if (kBits == 8)
    return 0;
  if (!kAsymmetric)
    return 8;
  return ((const unsigned char *)p.zero_points)[row * (kK / kGroup) + group];
}

template <int kK, int kGroup, bool kFp4>
__device__ __forceinline__ float quantScale(const LlmcKernelParams &p, long long row, int group) {
  if (kFp4)
    return kE8M0Table[((const unsigned char *)p.scales)[row * (kK / kGroup) + group]];
  return __half2float(((const __half *)p.scales)[row * (kK / kGroup) + group]);
}

// --- MATMUL / LOGITS over quantized weights, decode: GEMV (W8 / W4, f32 activations) ----------
// The gemv above with dequantization in the inner loop: one warp per output column, each lane
// takes 32 I4 or 16 I8 columns at once (always inside one scale group as group sizes are
// multiples of 32), sums (code - zero) * x for its kRows activation rows in f32 and multiplies
// by the group's scale once per load. I8: one 16-byte load of contiguous codes. I4: lane l
// takes run l of the 32 runs in flight, i.e. run j = l % 8 of a LANE_CHUNKS chunk, and loads its
// 4-byte word of each of the chunk's 4 slices, so per slice the 8 lanes of a full chunk read 32
// contiguous bytes and the warp 4 x 32 (every 32-byte sector fully used, as the 16-byte loads
// of a run-contiguous layout). I8 matrices whose K is not a multiple of 16 (per-channel scales,
// e.g. stories260K's 172) read one code per lane instead. kFp4: I4's loads, E2M1 values, zero 0.
template <int kK, int kN, int kBits, bool kFp4, bool kAsymmetric, int kGroup, bool kPermuted,
          bool kBias, int kWarps, int kRows, typename Store, typename Rows>
__device__ void gemvQuantRows(const LlmcKernelParams &p, const Rows &rows) {
  constexpr int kVector = kBits == 4 ? 32 : (kK % 16 == 0 ? 16 : 1); // columns per lane load
  const int lane = threadIdx.x % 32;
  const int n = blockIdx.x * kWarps + threadIdx.x / 32;
  if (n >= kN)
    return; // whole warps only: no barrier below
  const float *x = (const float *)p.input[0];
  const int *permutation = (const int *)p.input_permutation;
  const long long weightRow = rows.weightBase + n;
  const float bias = kBias ? ((const float *)p.bias)[weightRow] : 0.0f;
  for (int first = 0; first < rows.count; first += kRows) {
    float acc[kRows];
    const float *in[kRows];
    for (int r = 0; r < kRows; ++r) {
      acc[r] = 0.0f;
      const int row = first + r < rows.count ? first + r : first;
      in[r] = x + rows.input(row) * kK;
    }
    for (int c0 = lane * kVector; c0 < kK; c0 += 32 * kVector) {
      float weight[kVector];
      if constexpr (kVector == 1) {
        weight[0] = (float)quantCode<kK, kBits>((const void *)p.weight, weightRow, c0);
      } else if constexpr (kBits == 8) {
        const uint4 packed = *(const uint4 *)((const signed char *)p.weight + weightRow * kK + c0);
        const u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
        for (int b = 0; b < 16; ++b)
          weight[b] = (float)(int)(signed char)((words[b / 4] >> (8 * (b % 4))) & 255u);
      } else {
        // Word v of run `run` (quantCode's byte of column 8v, 4-byte aligned: rows are
        // multiples of 16 bytes); its byte i holds columns 8v + i and 8v + 4 + i.
        const int run = c0 / 32;
        const int slice = 4 * int4RunsInChunk<kK>(run);
        const unsigned char *base =
            (const unsigned char *)p.weight + weightRow * (kK / 2) + run / 8 * 128 + run % 8 * 4;
        for (int v = 0; v < 4; ++v) {
          const u32 word = *(const u32 *)(base + v * slice);
          for (int i = 0; i < 4; ++i) {
            const u32 byte = (word >> (8 * i)) & 255u;
            weight[8 * v + i] = quantValue<kFp4>((int)(byte & 15u));
            weight[8 * v + 4 + i] = quantValue<kFp4>((int)(byte >> 4));
          }
        }
      }
      const int group = c0 / kGroup;
      const float zero =
          kFp4 ? 0.0f : (float)quantZero<kK, kGroup, kBits, kAsymmetric>(p, weightRow, group);
      const float scale = quantScale<kK, kGroup, kFp4>(p, weightRow, group);
      for (int r = 0; r < kRows; ++r) {
        float sum = 0.0f;
        for (int e = 0; e < kVector; ++e) {
          const int column = kPermuted ? permutation[c0 + e] : c0 + e;
          sum += (weight[e] - zero) * in[r][column];
        }
        acc[r] += sum * scale;
      }
    }
    for (int r = 0; r < kRows; ++r) {
      const float total = warpSum(acc[r]);
      if (lane == 0 && first + r < rows.count)
        Store::store(p, rows.output(first + r), n, total + bias);
    }
  }
}

template <int kK, int kN, int kBits, bool kFp4, bool kAsymmetric, int kGroup, bool kPermuted,
          bool kBias, bool kIndirect, int kWarps, int kRows, typename Store>
__device__ void gemvQuant(const LlmcKernelParams &p) {
  const StepRows<kIndirect> rows = {(const int *)p.row_index, 0,
                                    kIndirect ? p.num_rows : p.num_tokens, 0};
  gemvQuantRows<kK, kN, kBits, kFp4, kAsymmetric, kGroup, kPermuted, kBias, kWarps, kRows, Store>(
      p, rows);
}

// --- MATMUL over quantized weights, prefill: tensor-core GEMM ---------------------------------
// gemmMma's tiling (64 x 32 block tile, 4 warps x four m16n8k16 per k-step of 16) with the
// weight tile dequantized into shared memory as the integer (code - zero) in bf16, exact for
// |code - zero| <= 255 (kFp4: the E2M1 value, exact in bf16), and the activations split in three
// bf16 parts (f32's range and all 24 bits, as gemmMma's bf16). The MMA sums code x activation over
// one scale group into a group accumulator, which is scaled by the group's scale and added to the
// output accumulator when the group ends: the dequantization multiply runs once per group and
// column, and no precision is lost to rounding code * scale to 16 bits.
template <int kK, int kN, int kBits, bool kFp4, bool kAsymmetric, int kGroup, bool kPermuted,
          bool kBias, typename Store, typename Rows>
__device__ void gemmMmaQuantRows(const LlmcKernelParams &p, const Rows &rows) {
  constexpr int kTileM = 64, kTileN = 32, kTileK = 16;
  constexpr int kPitch = kTileK + 8;
  __shared__ __nv_bfloat16 aHigh[kTileM * kPitch];
  __shared__ __nv_bfloat16 aMid[kTileM * kPitch];
  __shared__ __nv_bfloat16 aLow[kTileM * kPitch];
  __shared__ __nv_bfloat16 b[kTileN * kPitch];
  const int n0 = blockIdx.x * kTileN;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane >> 2, thread = lane & 3;
  const float *x = (const float *)p.input[0];
  const int *permutation = (const int *)p.input_permutation;
  const int count = rows.count; // <= kTileM
  const long long weightBase = rows.weightBase;
  float acc[4][4], partial[4][4];
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 4; ++i)
      acc[t][i] = partial[t][i] = 0.0f;
  for (int k0 = 0; k0 < kK; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTileM * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      float value = 0.0f;
      if (r < count && k0 + c < kK)
        value = x[rows.input(r) * kK + (kPermuted ? permutation[k0 + c] : k0 + c)];
      splitBf16x3(value, aHigh[r * kPitch + c], aMid[r * kPitch + c], aLow[r * kPitch + c]);
    }
    for (int e = threadIdx.x; e < kTileN * kTileK; e += 128) {
      const int r = e / kTileK, c = e % kTileK;
      float value = 0.0f;
      if (n0 + r < kN && k0 + c < kK) {
        const long long row = weightBase + n0 + r;
        const int code = quantCode<kK, kBits>((const void *)p.weight, row, k0 + c);
        value = kFp4 ? quantValue<true>(code)
                     : (float)(code - quantZero<kK, kGroup, kBits, kAsymmetric>(p, row,
                                                                                (k0 + c) / kGroup));
      }
      b[r * kPitch + c] = __float2bfloat16_rn(value);
    }
    __syncthreads();
    const int rowTop = (warp * 16 + group) * kPitch, rowBottom = rowTop + 8 * kPitch;
    const int col = thread * 2;
    u32 high[4], mid[4], low[4];
    loadFragmentA(aHigh, rowTop, rowBottom, col, high);
    loadFragmentA(aMid, rowTop, rowBottom, col, mid);
    loadFragmentA(aLow, rowTop, rowBottom, col, low);
    for (int t = 0; t < 4; ++t) {
      const int bRow = (t * 8 + group) * kPitch;
      u32 fragment[2];
      fragment[0] = pack2(b[bRow + col], b[bRow + col + 1]);
      fragment[1] = pack2(b[bRow + col + 8], b[bRow + col + 9]);
      mmaM16N8K16(partial[t], low, fragment, __nv_bfloat16());
      mmaM16N8K16(partial[t], mid, fragment, __nv_bfloat16());
      mmaM16N8K16(partial[t], high, fragment, __nv_bfloat16());
    }
    __syncthreads();
    // Group sizes are multiples of 32 (or K itself), so a k-step never straddles two groups.
    if ((k0 + kTileK) % kGroup == 0 || k0 + kTileK >= kK) {
      for (int t = 0; t < 4; ++t)
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + t * 8 + thread * 2 + (i & 1);
          const float scale =
              n < kN ? quantScale<kK, kGroup, kFp4>(p, weightBase + n, k0 / kGroup) : 0.0f;
          acc[t][i] += partial[t][i] * scale;
          partial[t][i] = 0.0f;
        }
    }
  }
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 4; ++i) {
      const int row = warp * 16 + group + (i >= 2 ? 8 : 0);
      const int n = n0 + t * 8 + thread * 2 + (i & 1);
      if (row < count && n < kN)
        Store::store(p, rows.output(row), n,
                     acc[t][i] + (kBias ? ((const float *)p.bias)[weightBase + n] : 0.0f));
    }
  }
}

template <int kK, int kN, int kBits, bool kFp4, bool kAsymmetric, int kGroup, bool kPermuted,
          bool kBias, typename Store>
__device__ void gemmMmaQuant(const LlmcKernelParams &p) {
  const int m0 = blockIdx.y * 64;
  const StepRows<false> rows = {0, m0, p.num_tokens - m0 < 64 ? p.num_tokens - m0 : 64, 0};
  gemmMmaQuantRows<kK, kN, kBits, kFp4, kAsymmetric, kGroup, kPermuted, kBias, Store>(p, rows);
}

// --- Elementwise: grid (ceil(num_tokens * kWidth / 256)), block 256 --------------------------
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// gelu's tanh approximation (gelu_pytorch_tanh, gelu_new).
__device__ __forceinline__ float geluTanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// kOp: an LlmcElementwiseOp. CLAMPED_SWIGLU (gpt-oss) takes SwigluAttrs' alpha and limit, as
// exact literals from the emitter: (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g),
// g = min(gate, limit).
template <int kWidth, int kOp>
__device__ void elementwise(const LlmcKernelParams &p, float alpha = 0.0f, float limit = 0.0f) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (long long)p.num_tokens * kWidth)
    return;
  const float a = ((const float *)p.input[0])[i];
  const float b = kOp == LLMC_OP_SILU ? 0.0f : ((const float *)p.input[1])[i];
  float result;
  if (kOp == LLMC_OP_SILU_MUL) {
    result = silu(a) * b;
  } else if (kOp == LLMC_OP_GELU_TANH_MUL) {
    result = geluTanh(a) * b;
  } else if (kOp == LLMC_OP_CLAMPED_SWIGLU) {
    const float gate = fminf(a, limit);
    const float up = fminf(fmaxf(b, -limit), limit);
    result = (up + 1.0f) * (gate * sigmoid(alpha * gate));
  } else if (kOp == LLMC_OP_SILU) {
    result = silu(a);
  } else if (kOp == LLMC_OP_MUL) {
    result = a * b;
  } else {
    result = a + b;
  }
  ((float *)p.output[0])[i] = result;
}

// --- Mixture of experts -----------------------------------------------------------------------
// Routed values keep (token, slot) order (plan.proto): routed row r = t * kTopK + j is slot j of
// token t. Grouping rows by expert is the EXPERT_MATMUL kernels' own business, through tables in
// p.scratch that expertGroup writes and the GEMV / GEMM of the same op read.

// --- ROUTER: grid (ceil(num_tokens / kWarps)), block kWarps * 32 ------------------------------
// One warp per token: lane l holds logits l, l + 32, ...; kTopK rounds of a warp arg-max (ties
// to the lower expert index) choose ids in descending logit order, then the weights:
// kScoring 1 (SOFTMAX_TOPK): softmax over all experts, the chosen probabilities (kNormalize:
// divided by their sum); 2 (TOPK_SOFTMAX): softmax over the chosen logits. p.expert_counts
// (when set) counts the tokens choosing each expert.
template <int kExperts, int kTopK, int kScoring, bool kNormalize, int kWarps>
__device__ void router(const LlmcKernelParams &p) {
  constexpr int kPerLane = (kExperts + 31) / 32; // <= 32: num_experts <= 1024
  const int lane = threadIdx.x % 32;
  const int token = blockIdx.x * kWarps + threadIdx.x / 32;
  if (token >= p.num_tokens)
    return; // whole warps only: no barrier below
  const float *logits = (const float *)p.input[0] + (long long)token * kExperts;
  float value[kPerLane];
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    value[i] = e < kExperts ? logits[e] : negativeInfinity();
  }
  u32 chosen = 0; // bit i: expert lane + 32 i taken
  int ids[kTopK];
  float top[kTopK];
  for (int j = 0; j < kTopK; ++j) {
    float best = negativeInfinity();
    int bestId = 0x7fffffff;
    for (int i = 0; i < kPerLane; ++i) {
      const int e = lane + 32 * i;
      if (e < kExperts && !(chosen >> i & 1u) && (value[i] > best || bestId == 0x7fffffff)) {
        best = value[i];
        bestId = e;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float otherBest = __shfl_xor_sync(0xffffffffu, best, offset);
      const int otherId = __shfl_xor_sync(0xffffffffu, bestId, offset);
      if (otherBest > best || (otherBest == best && otherId < bestId)) {
        best = otherBest;
        bestId = otherId;
      }
    }
    ids[j] = bestId;
    top[j] = best;
    if (bestId % 32 == lane)
      chosen |= 1u << (bestId / 32);
  }
  float weight[kTopK];
  if (kScoring == 1) {
    // top[0] is the largest logit: exp(l - max) over all experts.
    float sum = 0.0f;
    for (int i = 0; i < kPerLane; ++i)
      if (lane + 32 * i < kExperts)
        sum += expf(value[i] - top[0]);
    sum = warpSum(sum);
    float chosenSum = 0.0f;
    for (int j = 0; j < kTopK; ++j) {
      weight[j] = expf(top[j] - top[0]) / sum;
      chosenSum += weight[j];
    }
    if (kNormalize)
      for (int j = 0; j < kTopK; ++j)
        weight[j] /= chosenSum;
  } else {
    float sum = 0.0f;
    for (int j = 0; j < kTopK; ++j) {
      weight[j] = expf(top[j] - top[0]);
      sum += weight[j];
    }
    for (int j = 0; j < kTopK; ++j)
      weight[j] /= sum;
  }
  // Lane j writes slot j (kTopK <= kExperts; slots past 32 by the lanes in turn).
  for (int j = lane; j < kTopK; j += 32) {
    int id = ids[0];
    float w = weight[0];
    for (int s = 1; s < kTopK; ++s)
      if (s == j)
        id = ids[s], w = weight[s];
    ((int *)p.output[0])[(long long)token * kTopK + j] = id;
    ((float *)p.output[1])[(long long)token * kTopK + j] = w;
    if (p.expert_counts)
      atomicAdd((int *)p.expert_counts + id, 1);
  }
}

// --- MOE_COMBINE: grid (num_tokens), block kThreads -------------------------------------------
// out[t] = sum over slots j in order of weights[t, j] * y[t, slot j] (+ sigmoid(shared_gate[t])
// * shared[t] last, kShared). Element i reads y's elements i of each slot only, so out may
// alias y's first slot.
template <int kHidden, int kTopK, bool kShared, int kThreads>
__device__ void moeCombine(const LlmcKernelParams &p) {
  const long long token = blockIdx.x;
  const float *y = (const float *)p.input[0] + token * kTopK * kHidden;
  const float *weights = (const float *)p.input[1] + token * kTopK;
  const float *shared = kShared ? (const float *)p.input[2] + token * kHidden : 0;
  const float gate = kShared ? sigmoid(((const float *)p.input3)[token]) : 0.0f;
  float *out = (float *)p.output[0] + token * kHidden;
  for (int i = threadIdx.x; i < kHidden; i += kThreads) {
    float sum = 0.0f;
    for (int j = 0; j < kTopK; ++j)
      sum += weights[j] * y[j * kHidden + i];
    if (kShared)
      sum += gate * shared[i];
    out[i] = sum;
  }
}

// --- EXPERT_MATMUL 1/2: group the routed rows by expert. grid (1), block kThreads -------------
// Tables in p.scratch (i32): [0] the tile count, [1, E + 2) the offsets of each expert's rows
// (exclusive scan of the per-expert counts), then up to ceil(T k / 64) + E tiles of 3 ints
// (expert, first, count: at most 64 rows of one expert, so the GEMM takes one per block and the
// extra E blocks cover each expert's partial tile), then the routed rows r = t k + j sorted by
// expert (the order within an expert is the atomics', irrelevant: every output element is
// computed alone).
template <int kExperts, int kTopK> struct ExpertTables {
  int *base;
  int rowCount;
  __device__ __forceinline__ ExpertTables(const LlmcKernelParams &p)
      : base((int *)p.scratch), rowCount(p.num_tokens * kTopK) {}
  __device__ __forceinline__ int *offsets() const { return base + 1; }
  __device__ __forceinline__ int *tiles() const { return base + 2 + kExperts; }
  __device__ __forceinline__ int *rows() const {
    return tiles() + 3 * ((rowCount + 63) / 64 + kExperts);
  }
};

template <int kExperts, int kTopK, int kThreads>
__device__ void expertGroup(const LlmcKernelParams &p) {
  __shared__ int cursor[kExperts];
  const ExpertTables<kExperts, kTopK> tables(p);
  const int *ids = (const int *)p.input[1];
  for (int e = threadIdx.x; e < kExperts; e += kThreads)
    cursor[e] = 0;
  __syncthreads();
  for (int r = threadIdx.x; r < tables.rowCount; r += kThreads)
    atomicAdd(&cursor[ids[r]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int *offsets = tables.offsets(), *tiles = tables.tiles();
    int total = 0, numTiles = 0;
    for (int e = 0; e < kExperts; ++e) {
      const int count = cursor[e];
      offsets[e] = total;
      cursor[e] = total;
      for (int first = 0; first < count; first += 64) {
        tiles[3 * numTiles] = e;
        tiles[3 * numTiles + 1] = total + first;
        tiles[3 * numTiles + 2] = count - first < 64 ? count - first : 64;
        ++numTiles;
      }
      total += count;
    }
    offsets[kExperts] = total;
    tables.base[0] = numTiles;
  }
  __syncthreads();
  int *rows = tables.rows();
  for (int r = threadIdx.x; r < tables.rowCount; r += kThreads)
    rows[atomicAdd(&cursor[ids[r]], 1)] = r;
}

// The routed rows of one expert, as a row map: routed row rows[i] reads activation row
// rows[i] / kTopK (x [T, K]: gate/up) or rows[i] (kSlotInput, x [T, kTopK K] viewed as
// [T kTopK, K]: down), and is stored as row rows[i] of the output viewed as [T kTopK, N_i].
template <int kTopK, bool kSlotInput> struct ExpertRows {
  const int *rows;
  int count;
  long long weightBase; // expert * N: the expert's rows of the [E N, K] matrix
  __device__ __forceinline__ long long input(int i) const {
    return kSlotInput ? rows[i] : rows[i] / kTopK;
  }
  __device__ __forceinline__ int output(int i) const { return rows[i]; }
};

// Tile blockIdx.y of the grouping as a row map; false past the last tile (the whole block
// returns: no barrier was reached).
template <int kExperts, int kTopK, bool kSlotInput, int kN>
__device__ __forceinline__ bool expertTile(const LlmcKernelParams &p,
                                           ExpertRows<kTopK, kSlotInput> &rows) {
  const ExpertTables<kExperts, kTopK> tables(p);
  if ((int)blockIdx.y >= tables.base[0])
    return false;
  const int *tile = tables.tiles() + 3 * blockIdx.y;
  rows.rows = tables.rows() + tile[1];
  rows.count = tile[2];
  rows.weightBase = (long long)tile[0] * kN;
  return true;
}

// --- EXPERT_MATMUL 2/2 ------------------------------------------------------------------------
// Decode (expertGemv*): grid (ceil(N / kWarps), ceil(T k / 64) + E), block y takes tile y of the
// grouping and runs the GEMV's inner loop over its rows (each chosen expert's weights read once
// per step). Prefill (expertGemmMma*): grid (ceil(N / 32), ceil(T k / 64) + E), the GEMM's tile
// loop with its A rows gathered through the tile and its stores scattered. Unchosen experts'
// bytes are never read.
template <int kExperts, int kTopK, bool kSlotInput, int kK, int kN, typename T, int kPanelRows,
          bool kBias, int kWarps, int kRows, typename Store>
__device__ void expertGemv(const LlmcKernelParams &p) {
  ExpertRows<kTopK, kSlotInput> rows;
  if (expertTile<kExperts, kTopK, kSlotInput, kN>(p, rows))
    gemvRows<kK, kN, T, kPanelRows, kBias, kWarps, kRows, Store>(p, rows);
}

template <int kExperts, int kTopK, bool kSlotInput, int kK, int kN, typename T, int kPanelRows,
          bool kBias, typename Store>
__device__ void expertGemmMma(const LlmcKernelParams &p) {
  ExpertRows<kTopK, kSlotInput> rows;
  if (expertTile<kExperts, kTopK, kSlotInput, kN>(p, rows))
    gemmMmaRows<kK, kN, T, kPanelRows, kBias, Store>(p, rows);
}

// Quantized weights: no input permutation (plan.proto refuses one on expert weights).
template <int kExperts, int kTopK, bool kSlotInput, int kK, int kN, int kBits, bool kFp4,
          bool kAsymmetric, int kGroup, bool kBias, int kWarps, int kRows, typename Store>
__device__ void expertGemvQuant(const LlmcKernelParams &p) {
  ExpertRows<kTopK, kSlotInput> rows;
  if (expertTile<kExperts, kTopK, kSlotInput, kN>(p, rows))
    gemvQuantRows<kK, kN, kBits, kFp4, kAsymmetric, kGroup, false, kBias, kWarps, kRows, Store>(
        p, rows);
}

template <int kExperts, int kTopK, bool kSlotInput, int kK, int kN, int kBits, bool kFp4,
          bool kAsymmetric, int kGroup, bool kBias, typename Store>
__device__ void expertGemmMmaQuant(const LlmcKernelParams &p) {
  ExpertRows<kTopK, kSlotInput> rows;
  if (expertTile<kExperts, kTopK, kSlotInput, kN>(p, rows))
    gemmMmaQuantRows<kK, kN, kBits, kFp4, kAsymmetric, kGroup, false, kBias, Store>(p, rows);
}

} // namespace llmc
