// Attention over a paged KV cache kept in F16, BF16 or I8 (kv/kv_storage.h): the same
// computation as Attention (kernels.h) — causal, GQA-aware, online softmax one KV block at a
// time, f32 accumulation — with each KV block's rows widened to f32 in per-thread scratch as
// they are read (I8 rows' per-token, per-head scales folded into scores and weights, or into
// the widened rows), so the cache itself is never expanded. It is Attention's own loop
// (kernels.cc), templated on how a row is read.
//
// Thread-safety: like kernels.h.
#ifndef LLMRT_BACKEND_CPU_QUANT_KV_ATTENTION_H_
#define LLMRT_BACKEND_CPU_QUANT_KV_ATTENTION_H_

#include "runtime/backend/cpu/kernels.h"

namespace llmrt::cpu {

// Floats of per-thread scratch KvCacheAttention needs: Attention's, plus one block of keys and
// values widened to f32 (each row is widened once for all query heads of its group).
int64_t KvCacheAttentionScratchFloats(int32_t num_heads, int32_t num_kv_heads, int32_t head_dim,
                                      int32_t block_size);

// `args` as for Attention, with kv_dtype F16, BF16 or I8 and key_bytes / value_bytes (and
// key_scales / value_scales for I8) instead of key_cache / value_cache; scratch_stride at least
// KvCacheAttentionScratchFloats.
void KvCacheAttention(ThreadPool& pool, const AttentionArgs& args);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_QUANT_KV_ATTENTION_H_
