// KernelBackend: runs a plan's paged-KV step program by launching its generated CUDA kernels
// on a Device (a GPU through the driver, or the host emulator in tests).
//
// Creation validates the program with the CPU backend's rules (so both backends accept exactly
// the same plans), checks the CUDA kernel table against it (one OpKernels entry per op, kernel
// indices in range, geometry present), uploads every weight once and allocates the activation
// arena (max_tokens_per_step * arena_bytes_per_token, laid out per token exactly as on the
// CPU), the step metadata buffer, the attention scratch and, in AllocateKvCache, the paged KV
// cache: per layer K and V of [num_slots, kv_heads * head_dim] f32.
//
// A step uploads its metadata (token ids, positions, slots, per-token sequence index and block
// table offset, logit rows, block tables) in one copy, launches each op's kernels in program
// order, and copies the logits back.
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

// `table` is the CUDA KernelTable whose kernels `device` was created with.
absl::StatusOr<std::unique_ptr<Backend>> CreateKernelBackend(const plan::PlanMeta& meta,
                                                             const plan::KernelTable& table,
                                                             const BlobLookup& blobs,
                                                             const BackendOptions& options,
                                                             std::unique_ptr<Device> device);

}  // namespace llmrt::cuda

#endif  // LLMRT_BACKEND_CUDA_KERNEL_BACKEND_H_
