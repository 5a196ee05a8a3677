// The one validator of a plan's program. Every consumer of a Program — the CPU backend, the
// CUDA backend and the CUDA emitter — calls CheckProgram before anything else and then relies
// on what it guarantees instead of checking again:
//
//   values:  positive widths; ACTIVATION values are F32 and EXPERT_IDS values I32, both fitting
//            arena_bytes_per_token;
//            TOKEN_IDS / POSITIONS have width 1; exactly one LOGITS width (the vocabulary).
//   ops:     per OpKind (plan.proto) the input, output and weight counts, the kinds and widths
//            of the values they name, the typed attributes (Op.attrs set for the kinds that
//            have them, with valid values), every weight's shape, dtype and layout against the
//            op, quantized matrices' companions (scales, zero points, permutation) and, when
//            the blobs are given, their contents (zero points 0..15, a true permutation, no
//            E8M0 NaN scale); a MATMUL's outputs never share arena bytes with its input, nor
//            do ROUTER / EXPERT_MATMUL / MOE_COMBINE outputs with any of their inputs; an
//            EXPERT_MATMUL's ids are output 0 of an earlier ROUTER with its num_experts (so
//            kernels index experts without a bounds check).
//   program: exactly one LOGITS op; ATTENTION ops agree on one KV shape, which matches
//            the plan's KvCacheSpec.
//
// What a backend's kernels additionally need (the CPU's panel height or group sizes, which
// dtypes each op reads, which kernels a CUDA table holds) each backend checks for itself.
// Errors name the op ("program op 12 (ROPE): …") or value and what was expected.
#ifndef LLMRT_PLAN_PROGRAM_CHECK_H_
#define LLMRT_PLAN_PROGRAM_CHECK_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::plan {

// Bounds on a program's attributes; llmc checks a checkpoint's config against them, so it never
// writes a plan the runtime refuses.
// 2^16 layers: far above any model, low enough that layer arithmetic cannot overflow.
inline constexpr int32_t kMaxLayers = 1 << 16;
// 2^30 keys: a window beyond any context, small enough for 32-bit index arithmetic.
inline constexpr int64_t kMaxSlidingWindow = int64_t{1} << 30;
// The most experts a ROUTER chooses among: the CUDA routing kernel keeps a per-expert histogram
// in shared memory (DeepSeek-V3's 256 fits).
inline constexpr int32_t kMaxExperts = 1024;

// The bytes of meta.tensors(index), or nullptr when there are none.
using BlobLookup = std::function<const uint8_t*(int tensor_index)>;

// What a valid program implies, for sizing a backend's state.
struct ProgramFacts {
  int64_t vocab_size = 0;  // the LOGITS value's width
  // Token ids must be below this: the smallest EMBED table's rows.
  int64_t max_token_id = std::numeric_limits<int64_t>::max();
  int32_t kv_layers = 0;  // 1 + the largest ATTENTION layer; 0 without attention
  int32_t kv_heads = 0;
  int32_t kv_head_dim = 0;
  int32_t max_rope_head_dim = 0;
  // ROUTER ops, and the most experts and top_k among them (for expert load tables and grouping
  // scratch); 0 without routers.
  int32_t num_routers = 0;
  int32_t max_experts = 0;
  int32_t max_top_k = 0;
};

// An ATTENTION op's softmax scale: AttentionAttrs.scale, or 1 / sqrt(head_dim) where it is 0
// (unset).
inline double SoftmaxScale(const AttentionAttrs& attention) {
  return attention.scale() > 0.0 ? attention.scale()
                                 : 1.0 / std::sqrt(static_cast<double>(attention.head_dim()));
}

// The dims a ROPE op rotates at the start of each head: RopeConfig.rotary_dim, or head_dim where
// it is 0 (unset). The rest of the head passes through.
inline int32_t RotaryDim(const RopeConfig& rope, int32_t head_dim) {
  return rope.rotary_dim() > 0 ? rope.rotary_dim() : head_dim;
}

// The factor a ROPE op multiplies the rotated dims by (transformers' cos/sin attention scaling):
// LONGROPE's attention_factor; 1 otherwise (YaRN's is folded into the attention scale).
inline double RopeCosSinScale(const RopeConfig& rope) {
  return rope.scaling() == RopeConfig::LONGROPE ? rope.attention_factor() : 1.0;
}

// What CheckProgram is asked to accept.
enum class ProgramScope {
  // A model a backend runs: additionally exactly one LOGITS op and value.
  kModel,
  // Ops whose kernels are emitted or tested one by one (the CUDA emitter, kernel tests): the
  // program need not end in logits.
  kOps,
};

// Checks meta.program() against meta's tensor table and KV spec. `blobs` empty: the tensors'
// sizes and contents are not checked (the CUDA emitter sees the meta only); otherwise every
// tensor an op reads must have data of the size its shape, dtype and layout need.
absl::StatusOr<ProgramFacts> CheckProgram(const PlanMeta& meta, const BlobLookup& blobs,
                                          ProgramScope scope = ProgramScope::kModel);

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_PROGRAM_CHECK_H_
