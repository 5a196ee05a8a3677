// KernelBackend: runs a plan's paged-KV step program by launching its generated CUDA kernels
// on a Device (a GPU through the driver, or the host emulator in tests).
//
// Creation validates the program with the CPU backend's rules (so both backends accept exactly
// the same plans), checks the CUDA kernel table against it (one OpKernels entry per op, kernel
// indices in range, geometry present), uploads every weight once and allocates the activation
// arena (max_tokens_per_step * arena_bytes_per_token, laid out per token exactly as on the
// CPU), the step metadata buffer, the attention scratch and, in AllocateKvCache, the paged KV
// cache: per layer K and V of [num_slots, kv_heads * head_dim] in KvCacheSpec.dtype (F32,
// F16, BF16, or I8 codes plus an f32 scale per slot and kv head, runtime/kv/kv_storage.h's
// layout).
//
// A step uploads its metadata (token ids, positions, slots, per-token sequence index and block
// table offset, logit rows, prefill query tiles, block tables) in one copy, launches each op's
// kernels in program order, and copies the logits back (or only each row's top-k candidates).
//
// Kernel choice per step (op bindings: plan.proto KernelTable.OpKernels): MATMUL runs its GEMM
// when the step has more than kGemvMaxTokens tokens; ATTENTION runs the tiled prefill kernel
// instead of split-K decoding + combine when some sequence brings more than kPrefillMinTokens
// tokens; a ROPE op bound to no kernel is fused into the ATTENTION op reading its output (the
// attention reads the ROPE's input instead); EXPERT_MATMUL launches its grouping kernel, then
// its GEMM for steps of more than kGemvMaxTokens tokens (when it has one), else its GEMV.
//
// Mixture of experts: EXPERT_IDS values live in the arena like activations; scratch is the
// largest of any kernel's scratch_floats_per_token * max_tokens + scratch_floats_fixed (the
// expert grouping tables); with BackendOptions::record_expert_load, each ROUTER kernel counts
// into its row of a device table that the step's metadata upload zeroes and one copy after the
// step reads back (LastStepExpertLoad).
//
// Ownership: owns the device and everything allocated on it; the blobs must outlive creation
// only (weights are copied to the device). Thread-safety: see backend.h.
#ifndef LLMRT_BACKEND_CUDA_KERNEL_BACKEND_H_
#define LLMRT_BACKEND_CUDA_KERNEL_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/cuda/device.h"

namespace llmrt::cuda {

// MATMUL launches the MMA GEMM (when the op has one) for steps of more than this many tokens;
// up to 8 tokens the GEMV reads each weight once for all rows, which is what bounds them.
inline constexpr int32_t kGemvMaxTokens = 8;
// ATTENTION launches the tiled prefill kernel (when the op has one) for steps in which some
// sequence brings more than this many tokens: below it a query tile would be mostly empty and
// split-K decoding spreads the keys over more blocks.
inline constexpr int32_t kPrefillMinTokens = 8;
// Query tokens per tile of the prefill attention kernel (4 warps x 16 MMA rows).
inline constexpr int32_t kPrefillTileTokens = 64;
// Candidates per logit row of the LOGITS top-k prefilter kernel (fewer when the vocabulary is
// smaller): a greedy or top-k (k <= 64) sampler needs nothing else from the row.
inline constexpr int32_t kLogitsTopK = 64;

// A Backend that can also return each logit row's top-k candidates, computed on the device.
class KernelStepBackend : public Backend {
 public:
  // Candidates per row; 0 when the plan's LOGITS op has no prefilter kernel.
  virtual int32_t top_k() const = 0;
  // Runs `batch` like RunStep but copies back, per logit row, only its top_k() largest logits
  // and their token ids, sorted by value descending (ties: lower id first): values and ids are
  // [batch.logit_rows.size(), top_k()]. Fails when top_k() is 0.
  virtual absl::Status RunStepTopK(const StepBatch& batch, float* values, int32_t* ids) = 0;
};

// `table` is the CUDA KernelTable whose kernels `device` was created with.
absl::StatusOr<std::unique_ptr<KernelStepBackend>> CreateKernelBackend(
    const plan::PlanMeta& meta, const plan::KernelTable& table, const BlobLookup& blobs,
    const BackendOptions& options, std::unique_ptr<Device> device);

}  // namespace llmrt::cuda

#endif  // LLMRT_BACKEND_CUDA_KERNEL_BACKEND_H_
