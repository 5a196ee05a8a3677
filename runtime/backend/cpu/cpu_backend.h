// CpuBackend: executes a plan's program on the host CPU in f32.
//
// Creation validates the program completely (value kinds and widths, arena offsets, every
// op's inputs, outputs and weights, tensor shapes and dtypes) and resolves every weight to a
// pointer, so RunStep only checks the batch and runs kernels. Weights are read in place from
// the blob lookup (the mmapped plan); nothing is repacked.
//
// Supported: all OpKinds of plan.proto; weights F32, F16, BF16 (norm weights and biases F32),
// matmul and lm_head weights ROW_MAJOR or ROW_PANELS of 16 rows (what codegen packs after
// --llm-tile-cpu), embedding tables ROW_MAJOR; quantized I8 / I4 matmul, lm_head and
// embedding weights I8 ROW_MAJOR or I4 LANE_CHUNKS (plan.proto Quantization; quant_matmul.h);
// activations F32; the KV cache in F32, F16, BF16 or I8 (BackendOptions.kv_cache_dtype, else
// KvCacheSpec.dtype; kv/kv_storage.h). Kernels are Highway code dispatched at run time to the best
// SIMD target of the CPU, or to the one LLMRT_CPU_TARGET names (dispatch.h); creation fails when
// that target cannot run here.
//
// Threads: BackendOptions.num_threads (0, the default: one per allowed CPU) share every op through
// one runtime/threading pool, spinning between ops.
//
// Memory: the arena (max_tokens_per_step * arena_bytes_per_token), per-thread scratch, and
// the KV cache are allocated at creation / AllocateKvCache; RunStep does not allocate.
//
// Ownership: the backend keeps pointers into the blobs; they must outlive it. Not thread-safe
// (see backend.h).
#ifndef LLMRT_BACKEND_CPU_CPU_BACKEND_H_
#define LLMRT_BACKEND_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/backend/backend.h"

namespace llmrt::cpu {

// `meta` is copied as far as needed; the blobs behind `blobs` must outlive the backend.
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const plan::PlanMeta& meta,
                                                          const BlobLookup& blobs,
                                                          const BackendOptions& options);

// Whether the CPU kernels run op `op_index` of a program that plan::CheckProgram accepts, with
// its shapes, dtypes and layouts: OK or UNIMPLEMENTED naming what they lack (see
// Backend::Supports).
absl::Status CpuSupports(const plan::PlanMeta& meta, int op_index);

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_CPU_BACKEND_H_
