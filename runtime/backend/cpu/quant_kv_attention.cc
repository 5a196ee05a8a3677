// Attention over F16 / BF16 / I8 KV caches (quant_kv_attention.h), compiled per SIMD target.
// The loop structure follows AttentionImpl in kernels.cc; only the row reads differ, so the
// two stay separate files while that one is being tuned (a later change can template
// AttentionImpl on the row type and drop this copy of the loop).
#include "runtime/backend/cpu/quant_kv_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/plan/dtype.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/backend/cpu/quant_kv_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace llmrt::cpu {
namespace HWY_NAMESPACE {
namespace {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

HWY_INLINE VF LoadRow(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadRow(DF df, const hwy::float16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::float16_t, DF>(), p));
}
HWY_INLINE VF LoadRow(DF df, const hwy::bfloat16_t* HWY_RESTRICT p) {
  return hn::PromoteTo(df, hn::LoadU(hn::Rebind<hwy::bfloat16_t, DF>(), p));
}
HWY_INLINE VF LoadRow(DF df, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int32_t, DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(hn::Rebind<int8_t, DF>(), p)));
}

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
HWY_INLINE float ToFloat(int8_t value) { return static_cast<float>(value); }
HWY_INLINE float ToFloat(float value) { return value; }

// out = row widened to f32.
template <typename T>
HWY_INLINE void Widen(const T* HWY_RESTRICT row, int64_t size, float* HWY_RESTRICT out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) hn::StoreU(LoadRow(df, row + i), df, out + i);
  for (; i < size; ++i) out[i] = ToFloat(row[i]);
}

template <typename T>
HWY_INLINE float Dot(const float* HWY_RESTRICT q, const T* HWY_RESTRICT k, int64_t size) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF a0 = hn::Zero(df), a1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= size; i += 2 * lanes) {
    a0 = hn::MulAdd(hn::LoadU(df, q + i), LoadRow(df, k + i), a0);
    a1 = hn::MulAdd(hn::LoadU(df, q + i + lanes), LoadRow(df, k + i + lanes), a1);
  }
  for (; i + lanes <= size; i += lanes)
    a0 = hn::MulAdd(hn::LoadU(df, q + i), LoadRow(df, k + i), a0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
  for (; i < size; ++i) sum += q[i] * ToFloat(k[i]);
  return sum;
}

// acc = acc * scale + weight * value over `size` floats.
template <typename T>
HWY_INLINE void ScaleAndAccumulate(float* HWY_RESTRICT acc, float scale, float weight,
                                   const T* HWY_RESTRICT value, int64_t size) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF vs = hn::Set(df, scale);
  const VF vw = hn::Set(df, weight);
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) {
    hn::StoreU(hn::MulAdd(vw, LoadRow(df, value + i), hn::Mul(hn::LoadU(df, acc + i), vs)), df,
               acc + i);
  }
  for (; i < size; ++i) acc[i] = acc[i] * scale + weight * ToFloat(value[i]);
}

template <typename T>
HWY_INLINE void Accumulate(float* HWY_RESTRICT acc, float weight, const T* HWY_RESTRICT value,
                           int64_t size) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF vw = hn::Set(df, weight);
  int64_t i = 0;
  for (; i + lanes <= size; i += lanes) {
    hn::StoreU(hn::MulAdd(vw, LoadRow(df, value + i), hn::LoadU(df, acc + i)), df, acc + i);
  }
  for (; i < size; ++i) acc[i] += weight * ToFloat(value[i]);
}

template <typename T>
void TypedAttention(ThreadPool& pool, const AttentionArgs& args) {
  const int32_t group = args.num_heads / args.num_kv_heads;
  const int64_t head_dim = args.head_dim;
  const int64_t q_width = static_cast<int64_t>(args.num_heads) * head_dim;
  const int32_t block_size = args.block_size;
  const T* keys = reinterpret_cast<const T*>(args.key_bytes);
  const T* values = reinterpret_cast<const T*>(args.value_bytes);
  // I8 rows carry a scale per (slot, kv head); the 16-bit floats need none.
  const bool scaled = args.key_scales != nullptr;
  pool.ParallelFor(args.num_tokens * args.num_kv_heads, [&](int64_t begin, int64_t end,
                                                            int32_t thread) {
    // Scratch: acc[group][head_dim], max[group], total[group], scores[group][block_size], then
    // the block's keys and values widened to f32, [block_size][head_dim] each.
    float* acc = args.scratch + thread * args.scratch_stride;
    float* running_max = acc + group * head_dim;
    float* total = running_max + group;
    float* scores = total + group;
    float* block_keys = scores + static_cast<int64_t>(group) * block_size;
    float* block_values = block_keys + static_cast<int64_t>(block_size) * head_dim;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / args.num_kv_heads;
      const int32_t kv_head = static_cast<int32_t>(item % args.num_kv_heads);
      const int64_t query_index = args.token_index[row];
      const int64_t first_key =
          args.sliding_window > 0 ? std::max<int64_t>(0, query_index - args.sliding_window + 1) : 0;
      const int32_t* block_table = args.token_block_table[row];
      const float* queries = args.q + row * q_width + kv_head * group * head_dim;
      std::fill(acc, acc + group * head_dim, 0.0f);
      for (int32_t g = 0; g < group; ++g) {
        running_max[g] = -std::numeric_limits<float>::infinity();
        total[g] = 0.0f;
      }
      auto key_scale = [&](int64_t slot) {
        return scaled ? args.key_scales[slot * args.num_kv_heads + kv_head] : 1.0f;
      };
      auto value_scale = [&](int64_t slot) {
        return scaled ? args.value_scales[slot * args.num_kv_heads + kv_head] : 1.0f;
      };
      for (int64_t key = first_key; key <= query_index;) {
        const int64_t offset = key % block_size;
        const int64_t count = std::min<int64_t>(block_size - offset, query_index - key + 1);
        const int64_t first_slot =
            static_cast<int64_t>(block_table[key / block_size]) * block_size + offset;
        // Each row is widened once and then serves all `group` query heads (8 for TinyLlama):
        // widening inside every dot product would convert it 8 times.
        for (int64_t j = 0; j < count; ++j) {
          const int64_t slot = first_slot + j;
          const int64_t offset_in_cache = slot * args.token_stride + kv_head * head_dim;
          Widen(keys + offset_in_cache, head_dim, block_keys + j * head_dim);
          Widen(values + offset_in_cache, head_dim, block_values + j * head_dim);
          const float factor = key_scale(slot) * args.scale;
          for (int32_t g = 0; g < group; ++g) {
            scores[g * block_size + j] =
                Dot(queries + g * head_dim, block_keys + j * head_dim, head_dim) * factor;
          }
        }
        for (int32_t g = 0; g < group; ++g) {
          float* group_scores = scores + g * block_size;
          float block_max = running_max[g];
          for (int64_t j = 0; j < count; ++j) block_max = std::max(block_max, group_scores[j]);
          // exp(-inf - finite) = 0 on the first block: nothing accumulated yet to rescale.
          const float correction = std::exp(running_max[g] - block_max);
          running_max[g] = block_max;
          float block_total = 0.0f;
          for (int64_t j = 0; j < count; ++j) {
            group_scores[j] = std::exp(group_scores[j] - block_max);
            block_total += group_scores[j];
          }
          total[g] = total[g] * correction + block_total;
          ScaleAndAccumulate(acc + g * head_dim, correction,
                             group_scores[0] * value_scale(first_slot), block_values, head_dim);
        }
        for (int64_t j = 1; j < count; ++j) {
          const float row_scale = value_scale(first_slot + j);
          for (int32_t g = 0; g < group; ++g) {
            Accumulate(acc + g * head_dim, scores[g * block_size + j] * row_scale,
                       block_values + j * head_dim, head_dim);
          }
        }
        key += count;
      }
      // The group's queries are consumed above, so the output may share their buffer.
      float* out = args.out + row * q_width + kv_head * group * head_dim;
      for (int32_t g = 0; g < group; ++g) {
        const float inverse_total = 1.0f / total[g];
        for (int64_t i = 0; i < head_dim; ++i) {
          out[g * head_dim + i] = acc[g * head_dim + i] * inverse_total;
        }
      }
    }
  });
}

}  // namespace

void KvCacheAttentionImpl(ThreadPool& pool, const AttentionArgs& args) {
  switch (args.kv_dtype) {
    case plan::F16:
      TypedAttention<hwy::float16_t>(pool, args);
      break;
    case plan::BF16:
      TypedAttention<hwy::bfloat16_t>(pool, args);
      break;
    default:
      TypedAttention<int8_t>(pool, args);
      break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace llmrt::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace llmrt::cpu {

HWY_EXPORT(KvCacheAttentionImpl);

int64_t KvCacheAttentionScratchFloats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                      int32_t block_size) {
  // Attention's scratch, then one block of keys and values in f32.
  return AttentionScratchFloats(num_heads, num_kv_heads, head_dim, block_size) +
         (int64_t{2} * block_size * head_dim + 15) / 16 * 16;
}

void KvCacheAttention(ThreadPool& pool, const AttentionArgs& args) {
  if (args.num_tokens <= 0) return;
  HWY_DYNAMIC_DISPATCH(KvCacheAttentionImpl)(pool, args);
}

}  // namespace llmrt::cpu
#endif  // HWY_ONCE
