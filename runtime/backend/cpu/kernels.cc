// Norm, elementwise, rope and attention kernels (matmul is in matmul.cc), compiled per SIMD
// target by Highway; the exported entry points dispatch once per op.
#include "runtime/backend/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "hwy/cache_control.h"
#include "runtime/backend/cpu/quant_kv_attention.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/program_check.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// After highway.h: per-target code, re-included for each target by foreach_target.h.
#include "hwy/contrib/math/math-inl.h"  // NOLINT(build/include_order)

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Below 64 Ki floats (256 KiB, a decode step's rows) an elementwise op takes ~10 us on one
// core, comparable to waking the other threads; only prefill-sized ops are split.
constexpr int64_t kParallelElements = 64 * 1024;
constexpr int64_t kElementGrain = 1024;

float SumOfSquares(const float* HWY_RESTRICT x, int64_t size) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= size; i += 2 * lanes) {
    const VF v0 = hn::LoadU(df, x + i);
    const VF v1 = hn::LoadU(df, x + i + lanes);
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
  }
  for (; i + lanes <= size; i += lanes) {
    const VF v = hn::LoadU(df, x + i);
    a0 = hn::MulAdd(v, v, a0);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < size; ++i) sum += x[i] * x[i];
  return sum;
}

// y = gamma * (x * inverse_rms), the order transformers' LlamaRMSNorm multiplies in.
void ScaleRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT gamma, float inverse_rms,
              int64_t size, float* y) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF scale = hn::Set(df, inverse_rms);
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(df, gamma + i), hn::Mul(hn::LoadU(df, x + i), scale)), df, y + i);
  }
  for (; i < size; ++i) y[i] = gamma[i] * (x[i] * inverse_rms);
}

float InverseRms(float sum_of_squares, int64_t width, float eps) {
  const float mean = sum_of_squares / static_cast<float>(width);
  return 1.0f / std::sqrt(mean + eps);
}

// cap * tanh(v / cap): Gemma 2's soft-capping of attention scores and logits.
HWY_INLINE VF SoftCapVector(DF df, VF v, float cap) {
  return hn::Mul(hn::Set(df, cap), hn::Tanh(df, hn::Mul(v, hn::Set(df, 1.0f / cap))));
}

// gelu's tanh approximation (torch's gelu(approximate="tanh"), transformers' gelu_pytorch_tanh
// and gelu_new): 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
HWY_INLINE VF GeluTanhVector(DF df, VF x) {
  const VF inner = hn::Mul(hn::Set(df, 0.7978845608028654f),
                           hn::MulAdd(hn::Mul(hn::Set(df, 0.044715f), hn::Mul(x, x)), x, x));
  return hn::Mul(hn::Mul(hn::Set(df, 0.5f), x), hn::Add(hn::Set(df, 1.0f), hn::Tanh(df, inner)));
}

// Soft-caps `count` scores (a multiple of the lane count) in place.
HWY_INLINE void SoftCapScores(float* HWY_RESTRICT scores, int64_t count, float cap) {
  const DF df;
  for (int64_t i = 0; i < count; i += static_cast<int64_t>(hn::Lanes(df)))
    hn::StoreU(SoftCapVector(df, hn::LoadU(df, scores + i), cap), df, scores + i);
}

// Every element goes through the vector code, the last partial vector too (through a
// one-vector buffer): hn::Exp and std::exp differ in the last bits, so a scalar tail would make
// an element's SiLU depend on where the flattened [tokens, width] array ends, i.e. on the other
// tokens of the step (the batch-invariance contract of kernels.h).
// OP_UNSPECIFIED is the soft-cap of a (cap in `cap`), which is no op kind of its own: LOGITS
// applies it to its output. CLAMPED_SWIGLU reads its alpha and limit.
void ElementwiseRange(plan::OpKind op, const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                      int64_t begin, int64_t end, float* out, float cap = 0.0f, float alpha = 0.0f,
                      float limit = 0.0f) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF one = hn::Set(df, 1.0f);
  auto silu = [&](VF v) { return hn::Div(v, hn::Add(one, hn::Exp(df, hn::Neg(v)))); };
  auto apply = [&](const float* a_lanes, const float* b_lanes, float* out_lanes) {
    const VF va = hn::LoadU(df, a_lanes);
    VF result;
    switch (op) {
      case plan::ADD:
        result = hn::Add(va, hn::LoadU(df, b_lanes));
        break;
      case plan::MUL:
        result = hn::Mul(va, hn::LoadU(df, b_lanes));
        break;
      case plan::SILU:
        result = silu(va);
        break;
      case plan::GELU_TANH_MUL:
        result = hn::Mul(GeluTanhVector(df, va), hn::LoadU(df, b_lanes));
        break;
      case plan::OP_UNSPECIFIED:
        result = SoftCapVector(df, va, cap);
        break;
      case plan::CLAMPED_SWIGLU: {
        // (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = min(gate, limit).
        const VF vlimit = hn::Set(df, limit);
        const VF g = hn::Min(va, vlimit);
        const VF up = hn::Min(hn::Max(hn::LoadU(df, b_lanes), hn::Neg(vlimit)), vlimit);
        const VF sigmoid_g = hn::Div(g, hn::Add(one, hn::Exp(df, hn::Mul(hn::Set(df, -alpha), g))));
        result = hn::Mul(hn::Add(up, one), sigmoid_g);
        break;
      }
      default:
        result = hn::Mul(silu(va), hn::LoadU(df, b_lanes));
        break;
    }
    hn::StoreU(result, df, out_lanes);
  };
  int64_t i = begin;
  for (; i + lanes <= end; i += lanes) apply(a + i, b != nullptr ? b + i : nullptr, out + i);
  if (i < end) {
    constexpr size_t kMaxLanes = hn::MaxLanes(DF());
    HWY_ALIGN float a_tail[kMaxLanes] = {};
    HWY_ALIGN float b_tail[kMaxLanes] = {};
    HWY_ALIGN float out_tail[kMaxLanes];
    const int64_t count = end - i;
    std::copy(a + i, a + end, a_tail);
    if (b != nullptr) std::copy(b + i, b + end, b_tail);
    apply(a_tail, b_tail, out_tail);
    std::copy(out_tail, out_tail + count, out + i);
  }
}

}  // namespace

void RmsNormImpl(ThreadPool& pool, const float* x, const float* gamma, float eps, int64_t num_rows,
                 int64_t width, float* y) {
  const int64_t grain = std::max<int64_t>(1, kParallelElements / std::max<int64_t>(width, 1));
  pool.ParallelFor(
      num_rows,
      [&](int64_t begin, int64_t end, int32_t) {
        for (int64_t row = begin; row < end; ++row) {
          const float* x_row = x + row * width;
          ScaleRow(x_row, gamma, InverseRms(SumOfSquares(x_row, width), width, eps), width,
                   y + row * width);
        }
      },
      grain);
}

void FusedAddRmsNormImpl(ThreadPool& pool, const float* a, const float* b, const float* gamma,
                         float eps, int64_t num_rows, int64_t width, float* sum, float* y) {
  const int64_t grain = std::max<int64_t>(1, kParallelElements / std::max<int64_t>(width, 1));
  pool.ParallelFor(
      num_rows,
      [&](int64_t begin, int64_t end, int32_t) {
        const DF df;
        const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
        for (int64_t row = begin; row < end; ++row) {
          const float* a_row = a + row * width;
          const float* b_row = b + row * width;
          float* sum_row = sum + row * width;
          // One pass: add, store and square while the rows are in registers.
          VF a0 = hn::Zero(df);
          int64_t i = 0;
          for (; i + lanes <= width; i += lanes) {
            const VF v = hn::Add(hn::LoadU(df, a_row + i), hn::LoadU(df, b_row + i));
            hn::StoreU(v, df, sum_row + i);
            a0 = hn::MulAdd(v, v, a0);
          }
          float squares = hn::GetLane(hn::SumOfLanes(df, a0));
          for (; i < width; ++i) {
            sum_row[i] = a_row[i] + b_row[i];
            squares += sum_row[i] * sum_row[i];
          }
          ScaleRow(sum_row, gamma, InverseRms(squares, width, eps), width, y + row * width);
        }
      },
      grain);
}

void ElementwiseImpl(ThreadPool& pool, plan::OpKind op, const float* a, const float* b,
                     int64_t size, float* out) {
  if (size < kParallelElements) {
    ElementwiseRange(op, a, b, 0, size, out);
    return;
  }
  pool.ParallelFor(
      size,
      [&](int64_t begin, int64_t end, int32_t) { ElementwiseRange(op, a, b, begin, end, out); },
      kElementGrain);
}

void ClampedSwigluImpl(ThreadPool& pool, const float* gate, const float* up, int64_t size,
                       float alpha, float limit, float* out) {
  pool.ParallelFor(
      size,
      [&](int64_t begin, int64_t end, int32_t) {
        ElementwiseRange(plan::CLAMPED_SWIGLU, gate, up, begin, end, out, 0.0f, alpha, limit);
      },
      size < kParallelElements ? size : kElementGrain);
}

void SoftCapImpl(ThreadPool& pool, float* x, int64_t size, float cap) {
  pool.ParallelFor(
      size,
      [&](int64_t begin, int64_t end, int32_t) {
        ElementwiseRange(plan::OP_UNSPECIFIED, x, nullptr, begin, end, x, cap);
      },
      size < kParallelElements ? size : kElementGrain);
}

void RopeImpl(ThreadPool& pool, float* x, const int32_t* positions, int64_t num_rows,
              int32_t num_heads, int32_t head_dim, int32_t rotary_dim, const float* inv_freq,
              float cos_sin_scale, float* scratch) {
  const int32_t half = rotary_dim / 2;
  pool.ParallelFor(num_rows, [&](int64_t row_begin, int64_t row_end, int32_t thread) {
    const DF df;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
    float* cosines = scratch + static_cast<int64_t>(thread) * head_dim;
    float* sines = cosines + half;
    for (int64_t row = row_begin; row < row_end; ++row) {
      // transformers: freqs = inv_freq * position in f32, then cos/sin in f32.
      const float position = static_cast<float>(positions[row]);
      for (int32_t i = 0; i < half; ++i) {
        const float angle = position * inv_freq[i];
        cosines[i] = std::cos(angle);
        sines[i] = std::sin(angle);
      }
      // transformers multiplies cos and sin by the attention scaling in f32 (LongRoPE).
      if (cos_sin_scale != 1.0f) {
        for (int32_t i = 0; i < half; ++i) {
          cosines[i] *= cos_sin_scale;
          sines[i] *= cos_sin_scale;
        }
      }
      float* x_row = x + row * static_cast<int64_t>(num_heads) * head_dim;
      for (int32_t head = 0; head < num_heads; ++head) {
        float* first = x_row + static_cast<int64_t>(head) * head_dim;
        float* second = first + half;
        int64_t i = 0;
        for (; i + lanes <= half; i += lanes) {
          const VF a = hn::LoadU(df, first + i);
          const VF b = hn::LoadU(df, second + i);
          const VF c = hn::LoadU(df, cosines + i);
          const VF s = hn::LoadU(df, sines + i);
          hn::StoreU(hn::Sub(hn::Mul(a, c), hn::Mul(b, s)), df, first + i);
          hn::StoreU(hn::Add(hn::Mul(b, c), hn::Mul(a, s)), df, second + i);
        }
        for (; i < half; ++i) {
          const float a = first[i];
          const float b = second[i];
          first[i] = a * cosines[i] - b * sines[i];
          second[i] = b * cosines[i] + a * sines[i];
        }
      }
    }
  });
}

namespace {

// How a cached key/value row of element type T is read as f32: T is float for Attention's
// f32 cache (rows are read in place), or hwy::float16_t / hwy::bfloat16_t / int8_t for
// KvCacheAttention's reduced-precision caches (rows are widened into per-thread scratch, I8
// rows with a scale per (slot, kv head)).
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const float* HWY_RESTRICT p) {
  return hn::LoadU(d, p);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::float16_t, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(d, hn::LoadU(hn::Rebind<hwy::bfloat16_t, D>(), p));
}
template <class D>
HWY_INLINE hn::Vec<D> LoadRow(D d, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, D> di;
  return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, D>(), p)));
}

// out = row widened to f32 (f32: as it is), times `scale`.
template <typename T>
HWY_INLINE void Widen(const T* HWY_RESTRICT row, int64_t size, float scale,
                      float* HWY_RESTRICT out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF vs = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) hn::StoreU(hn::Mul(LoadRow(df, row + i), vs), df, out + i);
  // The tail one lane at a time, converted the same way.
  const hn::CappedTag<float, 1> d1;
  for (; i < size; ++i) hn::StoreU(hn::Mul(LoadRow(d1, row + i), hn::Set(d1, scale)), d1, out + i);
}

// The KV cache as rows of T: element offsets as for key_cache / value_cache, and for I8 a
// scale per (slot, kv head) (1 when `key_scales` is null).
template <typename T>
struct KvRows {
  const T* keys;
  const T* values;
  const float* key_scales;
  const float* value_scales;
  // Per-thread scratch past Attention's for one block of widened keys and values
  // (KvCacheAttentionScratchFloats); unused for f32.
  int64_t widened_offset;

  static constexpr bool kInPlace = std::is_same_v<T, float>;
  float KeyScale(const AttentionArgs& args, int64_t slot, int32_t kv_head) const {
    if constexpr (kInPlace) return 1.0f;
    return key_scales ? key_scales[slot * args.num_kv_heads + kv_head] : 1.0f;
  }
  float ValueScale(const AttentionArgs& args, int64_t slot, int32_t kv_head) const {
    if constexpr (kInPlace) return 1.0f;
    return value_scales ? value_scales[slot * args.num_kv_heads + kv_head] : 1.0f;
  }
};

// One block of a sequence's keys and values as f32 rows `stride` floats apart: `count` keys
// from position `key` on, to the end of its cache block or `last_key`.
struct KvBlockRows {
  const float* keys;
  const float* values;
  int64_t stride;
  int64_t count;
};

// The block from `key` (see KvBlockRows) of kv head `kv_head`: in the cache for f32, else widened
// (and scaled) into block_keys and block_values.
template <typename T>
HWY_INLINE KvBlockRows BlockAsF32(const AttentionArgs& args, const KvRows<T>& rows, int32_t kv_head,
                                  const int32_t* block_table, int64_t key, int64_t last_key,
                                  float* block_keys, float* block_values) {
  const int64_t head_dim = args.head_dim;
  const int32_t block_size = args.block_size;
  const int64_t offset = key % block_size;
  const int64_t count = std::min<int64_t>(block_size - offset, last_key - key + 1);
  const int64_t first_slot =
      static_cast<int64_t>(block_table[key / block_size]) * block_size + offset;
  const T* key_base = rows.keys + kv_head * head_dim;
  const T* value_base = rows.values + kv_head * head_dim;
  if constexpr (KvRows<T>::kInPlace) {
    return {key_base + first_slot * args.token_stride, value_base + first_slot * args.token_stride,
            args.token_stride, count};
  } else {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t slot = first_slot + j;
      Widen(key_base + slot * args.token_stride, head_dim, rows.KeyScale(args, slot, kv_head),
            block_keys + j * head_dim);
      Widen(value_base + slot * args.token_stride, head_dim, rows.ValueScale(args, slot, kv_head),
            block_values + j * head_dim);
    }
    return {block_keys, block_values, head_dim, count};
  }
}

// The sinks of query heads first_head .. first_head + heads - 1 in lanes (0 in the lanes past
// them, which hold no head).
HWY_INLINE VF SinkLanes(const AttentionArgs& args, int64_t first_head, int64_t heads) {
  const DF df;
  constexpr size_t kMaxLanes = hn::MaxLanes(DF());
  HWY_ALIGN float sinks[kMaxLanes] = {};
  std::copy(args.sinks + first_head, args.sinks + first_head + heads, sinks);
  return hn::Load(df, sinks);
}

// One (token, kv head) item over a group of at least one vector of query heads: the query
// heads of the group ride in the SIMD lanes (8 on AVX2, TinyLlama's group of 8 exactly), so
// every score, softmax step and value FMA is a full vector with no horizontal reduction.
// q . k for 8 heads is 64 broadcast-FMAs per key (head_dim 64) against the queries transposed
// once per item to [head_dim][lanes]; p . v accumulates a transposed [head_dim][lanes] output
// the same way. Keys go 4 at a time (4 independent FMA chains, each query vector load shared by
// 4 keys). A block's keys (16 x 64 f32 = 4 KiB) are read once for the scores and again, from
// L1, for the values; reduced-precision blocks are first widened (and scaled) to f32 once.
// Scratch: queries_t and acc_t [head_dim][lanes], scores [block][lanes].
template <typename T>
void AttendGroupVectorized(const AttentionArgs& args, const KvRows<T>& rows, const float* queries,
                           int32_t group, int64_t first_key, int64_t query_index,
                           const int32_t* block_table, int32_t kv_head, float* scratch,
                           float* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t head_dim = args.head_dim;
  const int32_t block_size = args.block_size;
  float* queries_t = scratch;
  float* acc_t = queries_t + head_dim * lanes;
  float* scores = acc_t + head_dim * lanes;
  float* block_keys = scratch + rows.widened_offset;
  float* block_values = block_keys + static_cast<int64_t>(block_size) * head_dim;
  for (int32_t first_head = 0; first_head < group; first_head += static_cast<int32_t>(lanes)) {
    const int64_t heads = std::min<int64_t>(lanes, group - first_head);
    // Scaled here, once per query, rather than once per score: (q * scale) . k.
    for (int64_t d = 0; d < head_dim; ++d) {
      for (int64_t i = 0; i < lanes; ++i) {
        queries_t[d * lanes + i] =
            i < heads ? queries[(first_head + i) * head_dim + d] * args.scale : 0.0f;
      }
    }
    std::fill(acc_t, acc_t + head_dim * lanes, 0.0f);
    VF running_max = hn::Zero(df);
    VF total = hn::Zero(df);
    bool first_block = true;
    if (args.sinks != nullptr) {
      // The sink is a score seen before every key: the running max starts at it, the total at
      // exp(sink - sink) = 1, and it adds nothing to the output.
      running_max = SinkLanes(args, kv_head * group + first_head, heads);
      total = hn::Set(df, 1.0f);
      first_block = false;
    }
    for (int64_t key = first_key; key <= query_index;) {
      const auto [keys, values, stride, count] =
          BlockAsF32(args, rows, kv_head, block_table, key, query_index, block_keys, block_values);
      int64_t j = 0;
      for (; j + 4 <= count; j += 4) {
        const float* k0 = keys + j * stride;
        const float* k1 = k0 + stride;
        const float* k2 = k1 + stride;
        const float* k3 = k2 + stride;
        VF s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df), s3 = hn::Zero(df);
        for (int64_t d = 0; d < head_dim; ++d) {
          const VF q = hn::LoadU(df, queries_t + d * lanes);
          s0 = hn::MulAdd(q, hn::Set(df, k0[d]), s0);
          s1 = hn::MulAdd(q, hn::Set(df, k1[d]), s1);
          s2 = hn::MulAdd(q, hn::Set(df, k2[d]), s2);
          s3 = hn::MulAdd(q, hn::Set(df, k3[d]), s3);
        }
        hn::StoreU(s0, df, scores + j * lanes);
        hn::StoreU(s1, df, scores + (j + 1) * lanes);
        hn::StoreU(s2, df, scores + (j + 2) * lanes);
        hn::StoreU(s3, df, scores + (j + 3) * lanes);
      }
      for (; j < count; ++j) {
        const float* k0 = keys + j * stride;
        VF s0 = hn::Zero(df);
        for (int64_t d = 0; d < head_dim; ++d) {
          s0 = hn::MulAdd(hn::LoadU(df, queries_t + d * lanes), hn::Set(df, k0[d]), s0);
        }
        hn::StoreU(s0, df, scores + j * lanes);
      }
      if (args.softcap > 0) SoftCapScores(scores, count * lanes, args.softcap);
      // Online softmax, one max/rescale per block and head (lane).
      VF block_max = hn::LoadU(df, scores);
      for (j = 1; j < count; ++j) block_max = hn::Max(block_max, hn::LoadU(df, scores + j * lanes));
      const VF new_max = first_block ? block_max : hn::Max(running_max, block_max);
      // Nothing accumulated before the first block: no rescale (and no exp(-inf)).
      const VF correction =
          first_block ? hn::Set(df, 1.0f) : hn::Exp(df, hn::Sub(running_max, new_max));
      running_max = new_max;
      first_block = false;
      VF block_total = hn::Zero(df);
      for (j = 0; j < count; ++j) {
        const VF p = hn::Exp(df, hn::Sub(hn::LoadU(df, scores + j * lanes), new_max));
        hn::StoreU(p, df, scores + j * lanes);
        block_total = hn::Add(block_total, p);
      }
      total = hn::MulAdd(total, correction, block_total);
      // acc_t[d] = acc_t[d] * correction + sum_j p_j * v_j[d], 8 dims at a time in registers.
      int64_t d = 0;
      for (; d + 8 <= head_dim; d += 8) {
        VF acc[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          acc[i] = hn::Mul(hn::LoadU(df, acc_t + (d + i) * lanes), correction);
        }
        for (j = 0; j < count; ++j) {
          const VF p = hn::LoadU(df, scores + j * lanes);
          const float* v = values + j * stride + d;
#pragma GCC unroll 8
          for (int i = 0; i < 8; ++i) acc[i] = hn::MulAdd(p, hn::Set(df, v[i]), acc[i]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) hn::StoreU(acc[i], df, acc_t + (d + i) * lanes);
      }
      for (; d < head_dim; ++d) {
        VF acc = hn::Mul(hn::LoadU(df, acc_t + d * lanes), correction);
        for (j = 0; j < count; ++j) {
          acc = hn::MulAdd(hn::LoadU(df, scores + j * lanes), hn::Set(df, values[j * stride + d]),
                           acc);
        }
        hn::StoreU(acc, df, acc_t + d * lanes);
      }
      key += count;
    }
    const VF inverse_total = hn::Div(hn::Set(df, 1.0f), total);
    for (int64_t d = 0; d < head_dim; ++d) {
      hn::StoreU(hn::Mul(hn::LoadU(df, acc_t + d * lanes), inverse_total), df, acc_t + d * lanes);
    }
    for (int64_t i = 0; i < heads; ++i) {
      for (int64_t d = 0; d < head_dim; ++d) {
        out[(first_head + i) * head_dim + d] = acc_t[d * lanes + i];
      }
    }
  }
}

// For each token t of a tile: first[t] += x * b0 and second[t] += x * b1, x = the vector at
// rows[t] + offset (one load shared by two FMAs, each broadcast by kTokens).
template <int kTokens>
HWY_INLINE void FmaTwoColumns(float* const* rows, int64_t offset, VF b0, VF b1, VF* first,
                              VF* second) {
  const DF df;
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    const VF x = hn::LoadU(df, rows[t] + offset);
    first[t] = hn::MulAdd(x, b0, first[t]);
    second[t] = hn::MulAdd(x, b1, second[t]);
  }
}

// For each token t of a tile: first[t] to rows[t] + first_offset, second[t] to rows[t] +
// second_offset.
template <int kTokens>
HWY_INLINE void StoreTwoRows(const VF* first, const VF* second, float* const* rows,
                             int64_t first_offset, int64_t second_offset) {
  const DF df;
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    hn::StoreU(first[t], df, rows[t] + first_offset);
    hn::StoreU(second[t], df, rows[t] + second_offset);
  }
}

// kTokens consecutive query tokens of one sequence (indices first_index + t; no sliding window)
// and one kv head, heads in lanes as in AttendGroupVectorized, with the same arithmetic per
// token — each score one FMA chain over the dimensions, the same blocks, the same softmax steps,
// the values accumulated in key order — so a token's output does not depend on the tile around
// it. What the tile shares: each block of keys and values is widened once for all kTokens, and
// every key or value element is broadcast once for all of them (q . k: 2 keys x kTokens FMA
// chains; p . v: 2 dimensions x kTokens), where one token at a time spends a broadcast load per
// FMA. A block's keys past a token's own index are left out of its softmax, and their
// probabilities are 0 in the shared value loop. Scratch per token: queries_t and acc_t
// [head_dim][lanes], scores [block][lanes], running max and total [lanes].
template <typename T, int kTokens>
void AttendTileVectorized(const AttentionArgs& args, const KvRows<T>& rows,
                          const float* const* queries, int32_t group, int64_t first_index,
                          const int32_t* block_table, int32_t kv_head, float* scratch,
                          float* const* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t head_dim = args.head_dim;
  const int32_t block_size = args.block_size;
  const int64_t per_token =
      2 * head_dim * lanes + static_cast<int64_t>(block_size) * lanes + 2 * lanes;
  float* queries_t[kTokens];
  float* acc_t[kTokens];
  float* scores[kTokens];
  float* running_max[kTokens];
  float* total[kTokens];
#pragma GCC unroll 4
  for (int t = 0; t < kTokens; ++t) {
    queries_t[t] = scratch + t * per_token;
    acc_t[t] = queries_t[t] + head_dim * lanes;
    scores[t] = acc_t[t] + head_dim * lanes;
    running_max[t] = scores[t] + static_cast<int64_t>(block_size) * lanes;
    total[t] = running_max[t] + lanes;
  }
  float* block_keys = scratch + rows.widened_offset;
  float* block_values = block_keys + static_cast<int64_t>(block_size) * head_dim;
  const int64_t last_index = first_index + kTokens - 1;
  for (int32_t first_head = 0; first_head < group; first_head += static_cast<int32_t>(lanes)) {
    const int64_t heads = std::min<int64_t>(lanes, group - first_head);
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      for (int64_t d = 0; d < head_dim; ++d) {
        for (int64_t i = 0; i < lanes; ++i) {
          queries_t[t][d * lanes + i] =
              i < heads ? queries[t][(first_head + i) * head_dim + d] * args.scale : 0.0f;
        }
      }
      std::fill(acc_t[t], acc_t[t] + head_dim * lanes, 0.0f);
      std::fill(total[t], total[t] + lanes, 0.0f);
      if (args.sinks != nullptr) {  // as in AttendGroupVectorized
        hn::StoreU(SinkLanes(args, kv_head * group + first_head, heads), df, running_max[t]);
        std::fill(total[t], total[t] + lanes, 1.0f);
      }
    }
    bool first_block = args.sinks == nullptr;
    for (int64_t key = 0; key <= last_index;) {
      const auto [keys, values, stride, count] =
          BlockAsF32(args, rows, kv_head, block_table, key, last_index, block_keys, block_values);
      // Keys of this block each token sees (token t: up to its own index; at least key 0 of the
      // first block).
      int64_t seen[kTokens];
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        seen[t] = std::max<int64_t>(0, std::min<int64_t>(count, first_index + t - key + 1));
      }
      // Scores of every key of the block for every token (those a token does not see are
      // computed, then ignored).
      int64_t j = 0;
      for (; j + 2 <= count; j += 2) {
        const float* k0 = keys + j * stride;
        const float* k1 = k0 + stride;
        VF s0[kTokens], s1[kTokens];
#pragma GCC unroll 4
        for (int t = 0; t < kTokens; ++t) s0[t] = s1[t] = hn::Zero(df);
        for (int64_t d = 0; d < head_dim; ++d) {
          const VF b0 = hn::Set(df, k0[d]);
          const VF b1 = hn::Set(df, k1[d]);
          FmaTwoColumns<kTokens>(queries_t, d * lanes, b0, b1, s0, s1);
        }
        StoreTwoRows<kTokens>(s0, s1, scores, j * lanes, (j + 1) * lanes);
      }
      for (; j < count; ++j) {
        const float* k0 = keys + j * stride;
        VF s0[kTokens];
#pragma GCC unroll 4
        for (int t = 0; t < kTokens; ++t) s0[t] = hn::Zero(df);
        for (int64_t d = 0; d < head_dim; ++d) {
          const VF b0 = hn::Set(df, k0[d]);
#pragma GCC unroll 4
          for (int t = 0; t < kTokens; ++t) {
            s0[t] = hn::MulAdd(hn::LoadU(df, queries_t[t] + d * lanes), b0, s0[t]);
          }
        }
#pragma GCC unroll 4
        for (int t = 0; t < kTokens; ++t) hn::StoreU(s0[t], df, scores[t] + j * lanes);
      }
      if (args.softcap > 0) {
        for (int t = 0; t < kTokens; ++t) SoftCapScores(scores[t], count * lanes, args.softcap);
      }
      // Online softmax per token over the keys it sees, as AttendGroupVectorized; the rest get
      // probability 0.
      VF correction[kTokens];
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        correction[t] = hn::Set(df, 1.0f);
        if (seen[t] == 0) {
          for (j = 0; j < count; ++j) hn::StoreU(hn::Zero(df), df, scores[t] + j * lanes);
          continue;
        }
        VF block_max = hn::LoadU(df, scores[t]);
        for (j = 1; j < seen[t]; ++j) {
          block_max = hn::Max(block_max, hn::LoadU(df, scores[t] + j * lanes));
        }
        const VF old_max = hn::LoadU(df, running_max[t]);
        const VF new_max = first_block ? block_max : hn::Max(old_max, block_max);
        if (!first_block) correction[t] = hn::Exp(df, hn::Sub(old_max, new_max));
        hn::StoreU(new_max, df, running_max[t]);
        VF block_total = hn::Zero(df);
        for (j = 0; j < seen[t]; ++j) {
          const VF p = hn::Exp(df, hn::Sub(hn::LoadU(df, scores[t] + j * lanes), new_max));
          hn::StoreU(p, df, scores[t] + j * lanes);
          block_total = hn::Add(block_total, p);
        }
        for (; j < count; ++j) hn::StoreU(hn::Zero(df), df, scores[t] + j * lanes);
        hn::StoreU(hn::MulAdd(hn::LoadU(df, total[t]), correction[t], block_total), df, total[t]);
      }
      first_block = false;
      // acc_t[d] = acc_t[d] * correction + sum_j p_j * v_j[d], 2 dimensions x kTokens at a time.
      int64_t d = 0;
      for (; d + 2 <= head_dim; d += 2) {
        VF a0[kTokens], a1[kTokens];
#pragma GCC unroll 4
        for (int t = 0; t < kTokens; ++t) {
          a0[t] = hn::Mul(hn::LoadU(df, acc_t[t] + d * lanes), correction[t]);
          a1[t] = hn::Mul(hn::LoadU(df, acc_t[t] + (d + 1) * lanes), correction[t]);
        }
        for (j = 0; j < count; ++j) {
          const float* v = values + j * stride + d;
          const VF b0 = hn::Set(df, v[0]);
          const VF b1 = hn::Set(df, v[1]);
          FmaTwoColumns<kTokens>(scores, j * lanes, b0, b1, a0, a1);
        }
        StoreTwoRows<kTokens>(a0, a1, acc_t, d * lanes, (d + 1) * lanes);
      }
      for (; d < head_dim; ++d) {
#pragma GCC unroll 4
        for (int t = 0; t < kTokens; ++t) {
          VF acc = hn::Mul(hn::LoadU(df, acc_t[t] + d * lanes), correction[t]);
          for (j = 0; j < count; ++j) {
            acc = hn::MulAdd(hn::LoadU(df, scores[t] + j * lanes),
                             hn::Set(df, values[j * stride + d]), acc);
          }
          hn::StoreU(acc, df, acc_t[t] + d * lanes);
        }
      }
      key += count;
    }
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      alignas(64) float inverse_total[64];  // lanes <= 16
      hn::StoreU(hn::Div(hn::Set(df, 1.0f), hn::LoadU(df, total[t])), df, inverse_total);
      for (int64_t i = 0; i < heads; ++i) {
        for (int64_t d = 0; d < head_dim; ++d) {
          out[t][(first_head + i) * head_dim + d] = acc_t[t][d * lanes + i] * inverse_total[i];
        }
      }
    }
  }
}

// One token (row) and kv head of a group that fills the lanes: AttendGroupVectorized.
template <typename T>
void AttendRow(const AttentionArgs& args, const KvRows<T>& rows, int64_t row, int32_t kv_head,
               float* scratch) {
  const int32_t group = args.num_heads / args.num_kv_heads;
  const int64_t head_dim = args.head_dim;
  const int64_t q_width = static_cast<int64_t>(args.num_heads) * head_dim;
  const int64_t query_index = args.token_index[row];
  const int64_t first_key =
      args.sliding_window > 0 ? std::max<int64_t>(0, query_index - args.sliding_window + 1) : 0;
  // The group's queries are consumed before any output is written, so the output may share
  // their buffer.
  AttendGroupVectorized(args, rows, args.q + row * q_width + kv_head * group * head_dim, group,
                        first_key, query_index, args.token_block_table[row], kv_head, scratch,
                        args.out + row * q_width + kv_head * group * head_dim);
}

// Groups narrower than half a vector (MHA's group of 1: Qwen2-MoE, Phi-3, OLMo2; 2 and 4 on
// AVX-512) put keys in lanes instead of query heads: a vector of L keys (L = 16 on AVX-512) gets
// one score per lane, so scores, softmax and masks are full vectors whatever the group. A score
// is one FMA chain over the dimensions, L at a time in the lanes (chunk c of the query times chunk
// c of the key), then a fixed pairwise tree over the L partial sums: adjacent lanes first, then
// adjacent pairs, ... (ConcatEven + ConcatOdd of two keys' partial-sum vectors halves both at
// once, so L keys need L - 1 such steps and land in lane order: key position p of the block in
// lane p % L). A key's score therefore depends on nothing but its query and key, and its lane on
// nothing but its position in the cache block, so decode (one token, the group's heads as rows)
// and a prefill tile (up to kKeyLaneRows rows: consecutive tokens x the group's heads) run this
// one function and give a token the same bits (batch invariance, kernels.h): the tile only
// shares each key and value load (and widening) among its rows. Softmax per row and block: max
// over the visible lanes, p = exp(s - max) (0 in masked lanes), block total by SumOfLanes over
// the block's vectors in order; values accumulate with d in lanes, in key order; masked keys add
// p = 0. Keys rather than tokens in lanes because decode has one token: a tile with tokens in
// lanes computes each score as one chain down the dimensions, which a lone token could only
// reproduce with its block's keys transposed (about 4 shuffles per FMA on AVX-512), where here
// the tree costs 2 permutes and an add per key pair per level (vpermt2ps: 3.5% of this kernel's
// samples in an f16-KV pp512). BM_Attention, 32 heads of 64, 1 thread on the Zen 5 (medians of 3,
// against the per-key Dot / std::exp path it replaces): MHA 512 tokens over 512 keys 76.1 ->
// 18.6 ms, 128 over 512 33.8 -> 7.6 ms, one token at 2048 keys 3.83 -> 2.12 ms; a group of 2,
// 512 over 512 61.3 -> 16.3 ms.
constexpr int64_t kMaxF32Lanes = static_cast<int64_t>(hn::MaxLanes(DF()));
// log2(lanes): the pairwise steps that reduce a key's partial sums to one lane.
constexpr int kKeyLaneLevels = kMaxF32Lanes >= 16  ? 4
                               : kMaxF32Lanes >= 8 ? 3
                               : kMaxF32Lanes >= 4 ? 2
                               : kMaxF32Lanes >= 2 ? 1
                                                   : 0;
static_assert(int64_t{1} << kKeyLaneLevels == kMaxF32Lanes, "lanes are a power of two");

// One query row of a keys-in-lanes item: a (token, query head).
struct KeyLaneRow {
  const float* query;  // head_dim floats
  float* out;          // head_dim floats; may be `query` (consumed before any output is written)
  int64_t first_key;   // keys [first_key, last_key] (sliding window, causal mask)
  int64_t last_key;
  float sink;  // args.sinks: the head's sink logit
};

// One cache block's key or value rows as f32 by position p in the block (key % block_size), at
// base + p * stride; positions [first, last] are loaded, the others read as `zeros`.
struct BlockPositions {
  const float* base;
  int64_t stride;
  int64_t first;
  int64_t last;
  const float* zeros;
  const float* Row(int64_t position) const {
    return position >= first && position <= last ? base + position * stride : zeros;
  }
};

// Two keys' partial-sum vectors (lo: the first key) halved into one: lanes [0, L/2) hold the
// first key's adjacent-lane sums, [L/2, L) the second's.
// (HWY_SCALAR's one lane needs no halving and has no ConcatEven.)
#if HWY_TARGET != HWY_SCALAR
HWY_INLINE VF PairwiseHalve(DF df, VF hi, VF lo) {
  return hn::Add(hn::ConcatEven(df, hi, lo), hn::ConcatOdd(df, hi, lo));
}
#endif

// scores[r] lane i = score of row r's query with the key at position + i, for the 2^kLevel keys
// from `position` (kLevel = kKeyLaneLevels: a whole vector, key i in lane i). Each level halves
// two sub-results; the leaves compute two keys' chains sharing every query load.
template <int kRows, int kLevel>
HWY_INLINE void ScoreKeys(const float* const* queries, int64_t chunks, const BlockPositions& keys,
                          int64_t position, VF* scores) {
  const DF df;
  constexpr int64_t kLanes = kMaxF32Lanes;
  constexpr int64_t kKeys = int64_t{1} << kLevel;
  if (position > keys.last || position + kKeys <= keys.first) {
    for (int r = 0; r < kRows; ++r) scores[r] = hn::Zero(df);
    return;
  }
  if constexpr (kLevel == 0) {  // one lane: the chain is the score
    const float* key = keys.Row(position);
    for (int r = 0; r < kRows; ++r) scores[r] = hn::Zero(df);
    for (int64_t c = 0; c < chunks; ++c) {
      const VF k = hn::LoadU(df, key + c * kLanes);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        scores[r] = hn::MulAdd(hn::LoadU(df, queries[r] + c * kLanes), k, scores[r]);
      }
    }
  }
#if HWY_TARGET != HWY_SCALAR
  else if constexpr (kLevel == 1) {
    const float* key0 = keys.Row(position);
    const float* key1 = keys.Row(position + 1);
    VF a0[kRows], a1[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) a0[r] = a1[r] = hn::Zero(df);
    for (int64_t c = 0; c < chunks; ++c) {
      const VF k0 = hn::LoadU(df, key0 + c * kLanes);
      const VF k1 = hn::LoadU(df, key1 + c * kLanes);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const VF q = hn::LoadU(df, queries[r] + c * kLanes);
        a0[r] = hn::MulAdd(q, k0, a0[r]);
        a1[r] = hn::MulAdd(q, k1, a1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) scores[r] = PairwiseHalve(df, a1[r], a0[r]);
  } else {
    VF low[kRows], high[kRows];
    ScoreKeys<kRows, kLevel - 1>(queries, chunks, keys, position, low);
    ScoreKeys<kRows, kLevel - 1>(queries, chunks, keys, position + kKeys / 2, high);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) scores[r] = PairwiseHalve(df, high[r], low[r]);
  }
#endif
}

// acc[r] = acc[r] * correction[r] + sum over loaded positions p (in order) of probs[r][p] *
// value p, for the kChunks vectors of dimensions from `chunk`: kRows x kChunks accumulators in
// registers, each value vector loaded once for all rows.
template <int kRows, int kChunks>
HWY_INLINE void AccumulateValues(float* const* acc, const float* const* probs,
                                 const float* correction, const BlockPositions& values,
                                 int64_t chunk) {
  const DF df;
  constexpr int64_t kLanes = kMaxF32Lanes;
  VF sums[kRows][kChunks];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    const VF scale = hn::Set(df, correction[r]);
#pragma GCC unroll 4
    for (int i = 0; i < kChunks; ++i) {
      sums[r][i] = hn::Mul(hn::LoadU(df, acc[r] + (chunk + i) * kLanes), scale);
    }
  }
  for (int64_t position = values.first; position <= values.last; ++position) {
    const float* value = values.base + position * values.stride + chunk * kLanes;
    VF v[kChunks];
#pragma GCC unroll 4
    for (int i = 0; i < kChunks; ++i) v[i] = hn::LoadU(df, value + i * kLanes);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const VF p = hn::Set(df, probs[r][position]);
#pragma GCC unroll 4
      for (int i = 0; i < kChunks; ++i) sums[r][i] = hn::MulAdd(p, v[i], sums[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < kChunks; ++i) {
      hn::StoreU(sums[r][i], df, acc[r] + (chunk + i) * kLanes);
    }
  }
}

// The state of one query row of AttendKeysInLanes in its scratch: the scaled query and the
// accumulator (head_dim rounded up to 16 floats, the widest vector), the current block's scores
// then probabilities (block_size rounded up to 16), the running max and total.
struct KeyLaneState {
  float* query;
  float* acc;
  float* probs;
  float running_max;
  float total;
};

// One block (from key `block_start`) of keys and values, at the positions `keys` and `values`
// load, for kRows rows (KeyLaneRow, KeyLaneState): scores, the online-softmax step, and the
// values. Only the positions some row of these sees are read; a row that sees none of them is
// left as it is.
template <int kRows>
HWY_INLINE void KeyLaneBlockStep(const AttentionArgs& args, const KeyLaneRow* query_rows,
                                 KeyLaneState* states, int64_t block_start, BlockPositions keys,
                                 BlockPositions values) {
  const DF df;
  constexpr int64_t kLanes = kMaxF32Lanes;
  const int64_t block_size = args.block_size;
  const int64_t chunks = (args.head_dim + kLanes - 1) / kLanes;
  int64_t first_seen = block_size, last_seen = -1;
  for (int r = 0; r < kRows; ++r) {
    first_seen = std::min(first_seen, query_rows[r].first_key - block_start);
    last_seen = std::max(last_seen, query_rows[r].last_key - block_start);
  }
  keys.first = values.first = std::max(keys.first, first_seen);
  keys.last = values.last = std::min(keys.last, last_seen);
  if (keys.first > keys.last) return;
  const float* queries[kRows];
  float* acc[kRows];
  float* probs[kRows];
  float correction[kRows];
  for (int r = 0; r < kRows; ++r) {
    queries[r] = states[r].query;
    acc[r] = states[r].acc;
    probs[r] = states[r].probs;
  }
  for (int64_t position = keys.first - keys.first % kLanes; position <= keys.last;
       position += kLanes) {
    VF scores[kRows];
    ScoreKeys<kRows, kKeyLaneLevels>(queries, chunks, keys, position, scores);
    for (int r = 0; r < kRows; ++r) hn::StoreU(scores[r], df, probs[r] + position);
  }
  const VF negative_infinity = hn::Set(df, -std::numeric_limits<float>::infinity());
  // hn::Exp is 0 below -104; arguments are floored at -200 (same result) so that -inf (a masked
  // lane, the first block's -inf running max) never reaches its float-to-int conversion.
  constexpr float kExpFloor = -200.0f;
  const VF floor_lanes = hn::Set(df, kExpFloor);
  const int64_t first_vector = keys.first - keys.first % kLanes;
  for (int r = 0; r < kRows; ++r) {
    KeyLaneState& state = states[r];
    // The row's own keys in this block, as positions.
    const int64_t low = std::max<int64_t>(query_rows[r].first_key - block_start, 0);
    const int64_t high = std::min(query_rows[r].last_key - block_start, block_size - 1);
    if (low > high) {  // none: no rescale, and p = 0 for the shared value loop
      correction[r] = 1.0f;
      std::fill(probs[r] + keys.first, probs[r] + keys.last + 1, 0.0f);
      continue;
    }
    const VF low_lanes = hn::Set(df, static_cast<float>(low));
    const VF high_lanes = hn::Set(df, static_cast<float>(high));
    VF block_max = negative_infinity;
    for (int64_t position = first_vector; position <= keys.last; position += kLanes) {
      VF s = hn::LoadU(df, probs[r] + position);
      if (args.softcap > 0) s = SoftCapVector(df, s, args.softcap);
      const VF lane_position = hn::Iota(df, static_cast<float>(position));
      const auto seen =
          hn::And(hn::Ge(lane_position, low_lanes), hn::Le(lane_position, high_lanes));
      s = hn::IfThenElse(seen, s, negative_infinity);
      hn::StoreU(s, df, probs[r] + position);
      block_max = hn::Max(block_max, s);
    }
    const float new_max = std::max(state.running_max, hn::GetLane(hn::MaxOfLanes(df, block_max)));
    correction[r] =
        hn::GetLane(hn::Exp(df, hn::Set(df, std::max(state.running_max - new_max, kExpFloor))));
    state.running_max = new_max;
    const VF max_lanes = hn::Set(df, new_max);
    VF block_total = hn::Zero(df);
    for (int64_t position = first_vector; position <= keys.last; position += kLanes) {
      // Masked lanes: exp(-inf - max), floored, is 0.
      const VF p =
          hn::Exp(df, hn::Max(hn::Sub(hn::LoadU(df, probs[r] + position), max_lanes), floor_lanes));
      hn::StoreU(p, df, probs[r] + position);
      block_total = hn::Add(block_total, p);
    }
    state.total = state.total * correction[r] + hn::GetLane(hn::SumOfLanes(df, block_total));
  }
  // Values, d in lanes: 4 vectors of dimensions x kRows accumulators at a time where 32
  // registers hold them (AVX-512), 2 where 16 do.
  constexpr int64_t kChunks = kLanes >= 16 ? 4 : 2;
  int64_t chunk = 0;
  for (; chunk + kChunks <= chunks; chunk += kChunks) {
    AccumulateValues<kRows, kChunks>(acc, probs, correction, values, chunk);
  }
  for (; chunk < chunks; ++chunk) AccumulateValues<kRows, 1>(acc, probs, correction, values, chunk);
}

// Up to kKeyLaneRows query rows of one sequence (the same block table) over one kv head, keys in
// lanes (see above). The rows' key ranges may differ (a tile's tokens, a sliding window): the
// blocks of their union are walked once, each widened once, and each row's softmax sees only its
// own keys, block by block as it would alone (a block with none of its keys leaves the row
// untouched). Rows go through KeyLaneBlockStep 4 at a time (4 x 4 accumulators of the values
// fill AVX-512's registers), each group reading only the keys its rows see, so a tile of 16
// consecutive tokens shares the widening of every block but computes no more scores than 4
// tiles of 4. Scratch (floats, from the start of the thread's): KeyLaneState's rows for each
// query row; a zero row; then one block of keys and one of values, widened (reduced-precision
// caches) or copied (f32 rows not a whole number of vectors long) into rows of the rounded
// head_dim, so every row is read in whole vectors.
template <typename T>
void AttendKeysInLanes(const AttentionArgs& args, const KvRows<T>& rows,
                       const KeyLaneRow* query_rows, int64_t num_rows, const int32_t* block_table,
                       int32_t kv_head, float* scratch) {
  constexpr int64_t kLanes = kMaxF32Lanes;
  const int64_t head_dim = args.head_dim;
  const int64_t block_size = args.block_size;
  const int64_t row_floats = (head_dim + 15) / 16 * 16;
  const int64_t score_floats = (block_size + 15) / 16 * 16;
  KeyLaneState states[kKeyLaneRows];
  int64_t first = query_rows[0].first_key, last = query_rows[0].last_key;
  for (int64_t r = 0; r < num_rows; ++r) {
    KeyLaneState& state = states[r];
    state.query = scratch + r * (2 * row_floats + score_floats);
    state.acc = state.query + row_floats;
    state.probs = state.acc + row_floats;
    // Scaled here, once per query, rather than once per score: (q * scale) . k.
    Widen(query_rows[r].query, head_dim, args.scale, state.query);
    std::fill(state.query + head_dim, state.query + row_floats, 0.0f);
    std::fill(state.acc, state.acc + row_floats, 0.0f);
    // A sink is a score seen before every key with no value: the running max starts at it and
    // the total at exp(sink - sink) = 1. Without one, the first block's correction is
    // exp(-inf) = 0, rescaling the zero accumulator.
    const bool sink = args.sinks != nullptr;
    state.running_max = sink ? query_rows[r].sink : -std::numeric_limits<float>::infinity();
    state.total = sink ? 1.0f : 0.0f;
    first = std::min(first, query_rows[r].first_key);
    last = std::max(last, query_rows[r].last_key);
  }
  float* zeros = scratch + kKeyLaneRows * (2 * row_floats + score_floats);
  float* block_keys = zeros + row_floats;
  float* block_values = block_keys + block_size * row_floats;
  std::fill(zeros, zeros + row_floats, 0.0f);
  // f32 rows of whole vectors are read in the cache; others go through block_keys / values,
  // whose padding past head_dim stays 0 (the padded queries are 0 there too).
  bool in_place = false;
  if constexpr (KvRows<T>::kInPlace) in_place = head_dim % kLanes == 0;
  if (!in_place && head_dim < row_floats) {
    for (int64_t position = 0; position < block_size; ++position) {
      std::fill(block_keys + position * row_floats + head_dim,
                block_keys + (position + 1) * row_floats, 0.0f);
      std::fill(block_values + position * row_floats + head_dim,
                block_values + (position + 1) * row_floats, 0.0f);
    }
  }
  for (int64_t key = first; key <= last;) {
    const int64_t block_start = key - key % block_size;
    const int64_t first_position = key - block_start;
    const int64_t last_position = std::min(block_size - 1, last - block_start);
    const int64_t first_slot = static_cast<int64_t>(block_table[key / block_size]) * block_size;
    BlockPositions keys{block_keys, row_floats, first_position, last_position, zeros};
    BlockPositions values{block_values, row_floats, first_position, last_position, zeros};
    if constexpr (KvRows<T>::kInPlace) {
      if (in_place) {
        keys.base = rows.keys + first_slot * args.token_stride + kv_head * head_dim;
        values.base = rows.values + first_slot * args.token_stride + kv_head * head_dim;
        keys.stride = values.stride = args.token_stride;
      }
    }
    if (!in_place) {
      for (int64_t position = first_position; position <= last_position; ++position) {
        const int64_t slot = first_slot + position;
        const int64_t offset = slot * args.token_stride + kv_head * head_dim;
        Widen(rows.keys + offset, head_dim, rows.KeyScale(args, slot, kv_head),
              block_keys + position * row_floats);
        Widen(rows.values + offset, head_dim, rows.ValueScale(args, slot, kv_head),
              block_values + position * row_floats);
      }
    }
    const int64_t next_block = block_start + block_size;
    if (next_block <= last) {
      // The next block's key and value rows start coming in while this one is computed: its
      // rows are token_stride apart in a block the table may put anywhere, which the hardware
      // prefetcher does not follow.
      const int64_t next_slot =
          static_cast<int64_t>(block_table[next_block / block_size]) * block_size;
      const int64_t count = std::min(block_size, last - next_block + 1);
      constexpr int64_t kRowBytesPerLine = 64;
      for (int64_t position = 0; position < count; ++position) {
        const int64_t offset = (next_slot + position) * args.token_stride + kv_head * head_dim;
        for (int64_t byte = 0; byte < head_dim * static_cast<int64_t>(sizeof(T));
             byte += kRowBytesPerLine) {
          hwy::Prefetch(reinterpret_cast<const uint8_t*>(rows.keys + offset) + byte);
          hwy::Prefetch(reinterpret_cast<const uint8_t*>(rows.values + offset) + byte);
        }
      }
    }
    for (int64_t r = 0; r < num_rows; r += 4) {
      static_assert(kKeyLaneRows % 4 == 0, "row groups of 4, then the rest");
      switch (std::min<int64_t>(4, num_rows - r)) {
        case 1:
          KeyLaneBlockStep<1>(args, query_rows + r, states + r, block_start, keys, values);
          break;
        case 2:
          KeyLaneBlockStep<2>(args, query_rows + r, states + r, block_start, keys, values);
          break;
        case 3:
          KeyLaneBlockStep<3>(args, query_rows + r, states + r, block_start, keys, values);
          break;
        default:
          KeyLaneBlockStep<4>(args, query_rows + r, states + r, block_start, keys, values);
          break;
      }
    }
    key = block_start + last_position + 1;
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    Widen(states[r].acc, head_dim, 1.0f / states[r].total, query_rows[r].out);
  }
}

// The (token, query head) rows of tokens [first_row, end_row) for kv head `kv_head`, in
// AttendKeysInLanes calls of up to kKeyLaneRows rows that share a block table.
template <typename T>
void AttendRowsKeysInLanes(const AttentionArgs& args, const KvRows<T>& rows, int64_t first_row,
                           int64_t end_row, int32_t kv_head, float* scratch) {
  const int32_t group = args.num_heads / args.num_kv_heads;
  const int64_t head_dim = args.head_dim;
  const int64_t q_width = static_cast<int64_t>(args.num_heads) * head_dim;
  KeyLaneRow batch[kKeyLaneRows];
  int64_t count = 0;
  const int32_t* batch_table = nullptr;
  auto flush = [&] {
    if (count > 0) AttendKeysInLanes(args, rows, batch, count, batch_table, kv_head, scratch);
    count = 0;
  };
  for (int64_t row = first_row; row < end_row; ++row) {
    const int32_t* table = args.token_block_table[row];
    if (table != batch_table) flush();
    batch_table = table;
    const int64_t index = args.token_index[row];
    const int64_t first_key =
        args.sliding_window > 0 ? std::max<int64_t>(0, index - args.sliding_window + 1) : 0;
    for (int32_t g = 0; g < group; ++g) {
      if (count == kKeyLaneRows) flush();
      const int64_t head = static_cast<int64_t>(kv_head) * group + g;
      batch[count++] = {args.q + row * q_width + head * head_dim,
                        args.out + row * q_width + head * head_dim, first_key, index,
                        args.sinks != nullptr ? args.sinks[head] : 0.0f};
    }
  }
  flush();
}

// Attention and KvCacheAttention: the one loop over (token, kv head) items, with rows of T.
template <typename T>
void AttentionOverRows(ThreadPool& pool, const AttentionArgs& args, const KvRows<T>& rows) {
  const int32_t group = args.num_heads / args.num_kv_heads;
  const int64_t head_dim = args.head_dim;
  const int64_t q_width = static_cast<int64_t>(args.num_heads) * head_dim;
  // Query heads in lanes pay off once they fill half a vector (AVX2: groups of 4 or more);
  // narrower groups (MHA's 1 would use one lane in 8) put keys in lanes (AttendKeysInLanes).
  const bool vectorized = 2 * group >= static_cast<int32_t>(hn::Lanes(DF()));
  // An item is (tile of rows, kv head). Heads in lanes: a tile of consecutive tokens of one
  // sequence runs through AttendTileVectorized, any other tile one row at a time. Keys in lanes:
  // a tile is as many tokens as fill kKeyLaneRows rows with their group's heads.
  const int64_t tile_rows = !vectorized                ? std::max<int64_t>(1, kKeyLaneRows / group)
                            : args.sliding_window == 0 ? kAttentionTile
                                                       : 1;
  const int64_t num_tiles = (args.num_tokens + tile_rows - 1) / tile_rows;
  // Items are claimed dynamically, the last tokens first: under a causal mask a prefill's later
  // tokens attend to more keys, so two fixed halves of the tokens would give one thread ~3/4 of
  // the work; claimed one at a time, heaviest first, the threads finish within an item of each
  // other (and a decode step's few items still spread over the threads).
  const int64_t num_items = num_tiles * args.num_kv_heads;
  auto attend = [&](int64_t begin, int64_t end, int32_t thread) {
    // This thread's scratch (AttentionScratchFloats + rows.widened_offset's block).
    float* acc = args.scratch + thread * args.scratch_stride;
    for (int64_t claimed = begin; claimed < end; ++claimed) {
      const int64_t item = num_items - 1 - claimed;
      const int64_t first_row = item / args.num_kv_heads * tile_rows;
      const int32_t kv_head = static_cast<int32_t>(item % args.num_kv_heads);
      const int64_t end_row = std::min(args.num_tokens, first_row + tile_rows);
      if (!vectorized) {
        AttendRowsKeysInLanes(args, rows, first_row, end_row, kv_head, acc);
        continue;
      }
      bool one_sequence = end_row - first_row > 1;
      for (int64_t row = first_row + 1; row < end_row && one_sequence; ++row) {
        one_sequence = args.token_block_table[row] == args.token_block_table[first_row] &&
                       args.token_index[row] == args.token_index[first_row] + (row - first_row);
      }
      if (one_sequence) {
        const float* queries[kAttentionTile];
        float* outs[kAttentionTile];
        for (int64_t row = first_row; row < end_row; ++row) {
          queries[row - first_row] = args.q + row * q_width + kv_head * group * head_dim;
          outs[row - first_row] = args.out + row * q_width + kv_head * group * head_dim;
        }
        const int64_t first_index = args.token_index[first_row];
        const int32_t* block_table = args.token_block_table[first_row];
        static_assert(kAttentionTile == 4, "one case per tile size");
        switch (end_row - first_row) {
          case 2:
            AttendTileVectorized<T, 2>(args, rows, queries, group, first_index, block_table,
                                       kv_head, acc, outs);
            break;
          case 3:
            AttendTileVectorized<T, 3>(args, rows, queries, group, first_index, block_table,
                                       kv_head, acc, outs);
            break;
          default:
            AttendTileVectorized<T, 4>(args, rows, queries, group, first_index, block_table,
                                       kv_head, acc, outs);
            break;
        }
        continue;
      }
      for (int64_t row = first_row; row < end_row; ++row) {
        AttendRow(args, rows, row, kv_head, acc);
      }
    }
  };
  pool.ParallelForDynamic(num_items, attend, /*grain=*/1);
}

template <typename T>
void TypedKvCacheAttention(ThreadPool& pool, const AttentionArgs& args) {
  const KvRows<T> rows{
      reinterpret_cast<const T*>(args.key_bytes), reinterpret_cast<const T*>(args.value_bytes),
      args.key_scales, args.value_scales,
      AttentionScratchFloats(args.num_heads, args.num_kv_heads, args.head_dim, args.block_size)};
  AttentionOverRows(pool, args, rows);
}

}  // namespace

void AttentionImpl(ThreadPool& pool, const AttentionArgs& args) {
  AttentionOverRows(pool, args,
                    KvRows<float>{args.key_cache, args.value_cache, nullptr, nullptr, 0});
}

void KvCacheAttentionImpl(ThreadPool& pool, const AttentionArgs& args) {
  switch (args.kv_dtype) {
    case plan::F16:
      TypedKvCacheAttention<hwy::float16_t>(pool, args);
      break;
    case plan::BF16:
      TypedKvCacheAttention<hwy::bfloat16_t>(pool, args);
      break;
    default:
      TypedKvCacheAttention<int8_t>(pool, args);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(FusedAddRmsNormImpl);
HWY_EXPORT(ElementwiseImpl);
HWY_EXPORT(RopeImpl);
HWY_EXPORT(SoftCapImpl);
HWY_EXPORT(ClampedSwigluImpl);
HWY_EXPORT(AttentionImpl);
HWY_EXPORT(KvCacheAttentionImpl);

void RmsNorm(ThreadPool& pool, const float* x, const float* gamma, float eps, int64_t num_rows,
             int64_t width, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(pool, x, gamma, eps, num_rows, width, y);
}

void FusedAddRmsNorm(ThreadPool& pool, const float* a, const float* b, const float* gamma,
                     float eps, int64_t num_rows, int64_t width, float* sum, float* y) {
  HWY_DYNAMIC_DISPATCH(FusedAddRmsNormImpl)(pool, a, b, gamma, eps, num_rows, width, sum, y);
}

void ElementwiseOp(ThreadPool& pool, plan::OpKind op, const float* a, const float* b, int64_t size,
                   float* out) {
  HWY_DYNAMIC_DISPATCH(ElementwiseImpl)(pool, op, a, b, size, out);
}

void SoftCap(ThreadPool& pool, float* x, int64_t size, float cap) {
  HWY_DYNAMIC_DISPATCH(SoftCapImpl)(pool, x, size, cap);
}

void ClampedSwiglu(ThreadPool& pool, const float* gate, const float* up, int64_t size, float alpha,
                   float limit, float* out) {
  HWY_DYNAMIC_DISPATCH(ClampedSwigluImpl)(pool, gate, up, size, alpha, limit, out);
}

void Rope(ThreadPool& pool, float* x, const int32_t* positions, int64_t num_rows, int32_t num_heads,
          int32_t head_dim, int32_t rotary_dim, const float* inv_freq, float cos_sin_scale,
          float* scratch) {
  HWY_DYNAMIC_DISPATCH(RopeImpl)
  (pool, x, positions, num_rows, num_heads, head_dim, rotary_dim, inv_freq, cos_sin_scale, scratch);
}

// The head counts do not size anything: heads in lanes hold up to 16 heads per token of a tile,
// and kKeyLaneRows bounds the rows of a keys-in-lanes call.
int64_t AttentionScratchFloats(int32_t /*num_heads*/, int32_t /*num_kv_heads*/, int32_t head_dim,
                               int32_t block_size) {
  // Heads in lanes (AttendGroupVectorized, AttendTileVectorized): per token of a tile,
  // queries_t, acc_t, scores, running max and total of up to 16 lanes (AVX-512). Keys in lanes
  // (AttendKeysInLanes): per row query, accumulator and block scores, a zero row, a block of keys
  // and of values, rows rounded up to 16 floats.
  const int64_t row = (int64_t{head_dim} + 15) / 16 * 16;
  const int64_t key_lanes =
      kKeyLaneRows * (2 * row + (block_size + 15) / 16 * 16) + row + 2 * int64_t{block_size} * row;
  const int64_t floats =
      std::max(kAttentionTile * 16 * (2 * int64_t{head_dim} + block_size + 2), key_lanes);
  // Rounded to 16 floats so threads do not share cache lines.
  return (floats + 15) / 16 * 16;
}

void Attention(ThreadPool& pool, const AttentionArgs& args) {
  if (args.num_tokens <= 0) return;
  HWY_DYNAMIC_DISPATCH(AttentionImpl)(pool, args);
}

void KvCacheAttention(ThreadPool& pool, const AttentionArgs& args) {
  if (args.num_tokens <= 0) return;
  HWY_DYNAMIC_DISPATCH(KvCacheAttentionImpl)(pool, args);
}

void MatrixRowToF32(const MatrixView& matrix, int64_t row, float* out) {
  const int64_t cols = matrix.cols;
  switch (matrix.dtype) {
    case plan::F16: {
      const uint16_t* source = reinterpret_cast<const uint16_t*>(matrix.data) + row * cols;
      for (int64_t col = 0; col < cols; ++col) out[col] = plan::F16ToF32(source[col]);
      break;
    }
    case plan::BF16: {
      const uint16_t* source = reinterpret_cast<const uint16_t*>(matrix.data) + row * cols;
      for (int64_t col = 0; col < cols; ++col) out[col] = plan::Bf16ToF32(source[col]);
      break;
    }
    default: {
      const float* source = reinterpret_cast<const float*>(matrix.data) + row * cols;
      std::copy(source, source + cols, out);
      break;
    }
  }
}

void RopeInverseFrequencies(const plan::RopeConfig& rope, int32_t head_dim, float* inv_freq) {
  // Every scaling computes its frequencies over the rotated dims (transformers' `dim`).
  head_dim = plan::RotaryDim(rope, head_dim);
  const int32_t half = head_dim / 2;
  const float theta = static_cast<float>(rope.theta());
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (rope.scaling() == plan::RopeConfig::LONGROPE) {
    // _compute_longrope_parameters: 1 / (ext_factors * base ** (arange(0, dim, 2) / dim)) in f32.
    for (int32_t i = 0; i < half; ++i) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      inv_freq[i] = 1.0f / (static_cast<float>(rope.ext_factors(i)) * std::pow(theta, exponent));
    }
  } else if (rope.scaling() == plan::RopeConfig::LINEAR) {
    const float factor = static_cast<float>(rope.factor());
    for (int32_t i = 0; i < half; ++i) inv_freq[i] /= factor;
  } else if (rope.scaling() == plan::RopeConfig::LLAMA3) {
    // transformers' _compute_llama3_parameters, elementwise, in f32.
    const float factor = static_cast<float>(rope.factor());
    const float low_freq_factor = static_cast<float>(rope.low_freq_factor());
    const float high_freq_factor = static_cast<float>(rope.high_freq_factor());
    const float old_context = static_cast<float>(rope.original_max_position_embeddings());
    const float low_freq_wavelength = old_context / low_freq_factor;
    const float high_freq_wavelength = old_context / high_freq_factor;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (int32_t i = 0; i < half; ++i) {
      const float wavelength = two_pi / inv_freq[i];
      float scaled = wavelength > low_freq_wavelength ? inv_freq[i] / factor : inv_freq[i];
      const bool medium =
          !(wavelength < high_freq_wavelength) && !(wavelength > low_freq_wavelength);
      if (medium) {
        const float smooth =
            (old_context / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      inv_freq[i] = scaled;
    }
  } else if (rope.scaling() == plan::RopeConfig::YARN) {
    // transformers' _compute_yarn_parameters: the ramp bounds in double as Python computes
    // them, the blend in f32. attention_factor is folded into the attention scale (plan.proto).
    const double dim = head_dim, base = rope.theta();
    const double old_context = static_cast<double>(rope.original_max_position_embeddings());
    auto correction_dim = [&](double rotations) {
      return dim * std::log(old_context / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
    };
    double low = correction_dim(rope.beta_fast()), high = correction_dim(rope.beta_slow());
    if (!rope.untruncated()) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;  // as transformers: no division by zero
    const float factor = static_cast<float>(rope.factor());
    for (int32_t i = 0; i < half; ++i) {
      const float ramp =
          std::clamp(static_cast<float>((static_cast<float>(i) - low) / (high - low)), 0.0f, 1.0f);
      const float extrapolation = 1.0f - ramp;
      const float interpolated = inv_freq[i] / factor;
      inv_freq[i] = interpolated * (1.0f - extrapolation) + inv_freq[i] * extrapolation;
    }
  }
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
