// KvCacheAttention's scratch size. The kernel itself is AttentionImpl's loop in kernels.cc,
// templated on the KV row type (f32 read in place; F16 / BF16 / I8 widened to f32), so f32 and
// the reduced-precision caches share one implementation.
#include "runtime/backend/cpu/quant_kv_attention.h"

namespace llmrt::cpu {

int64_t KvCacheAttentionScratchFloats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                      int32_t block_size) {
  // Attention's scratch, then one block of keys and values in f32.
  return AttentionScratchFloats(num_heads, num_kv_heads, head_dim, block_size) +
         (int64_t{2} * block_size * head_dim + 15) / 16 * 16;
}

}  // namespace llmrt::cpu
