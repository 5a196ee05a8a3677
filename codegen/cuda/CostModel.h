//===- CostModel.h - Bytes, FLOPs and expected GPU time per kernel -*- C++ -*-===//
//
// What each generated kernel of a plan should cost on a GPU, so the first run on real hardware
// can be judged at once: for a step of `tokens` new tokens of one sequence whose context
// (those tokens included) is `context`, the kernels the CUDA backend would launch for the
// embedding, the first decoder layer and the logits, each with the DRAM bytes it moves as
// written (weights once per GEMM row tile, K/V once per query tile and kv head, activations in
// f32) and its FLOPs (tensor-core MMA FLOPs count every hi/lo product the kernel issues), and
// time = max(bytes / bandwidth, FLOPs / peak) on an H200 and an A100. Launch overhead (~3 us
// per kernel without CUDA graphs) is not included.
//
// The kernel choice mirrors KernelBackend (runtime/backend/cuda/kernel_backend.h): GEMM above
// kGemvMaxTokens tokens, tiled prefill attention above kPrefillMinTokens.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_COSTMODEL_H_
#define LLMC_CODEGEN_CUDA_COSTMODEL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::cuda {

struct GpuSpec {
  const char *name;
  double bandwidth;   // bytes / s (HBM)
  double mmaFlops;    // dense f16 / bf16 tensor-core FLOP / s
  double vectorFlops; // f32 FMA FLOP / s (CUDA cores)
};

// H200 SXM: 4.8 TB/s, 989 TFLOP/s dense f16, 67 TFLOP/s f32. A100 SXM 80 GB: 2.04 TB/s,
// 312 TFLOP/s, 19.5 TFLOP/s.
inline constexpr GpuSpec kH200 = {"H200", 4.8e12, 989e12, 67e12};
inline constexpr GpuSpec kA100 = {"A100", 2.039e12, 312e12, 19.5e12};

struct KernelCost {
  std::string what; // op and kernel, e.g. "qkv_proj: gemv"
  int count = 1;    // launches per step of this row (layers for per-layer kernels)
  double bytes = 0; // per launch
  double flops = 0; // per launch
  bool mma = false; // FLOPs run on tensor cores
  double seconds(const GpuSpec &gpu) const;
};

// The kernels of one step (see the file comment). Fails when the plan's program has no CUDA
// kernel for an op (as emitCuda does).
absl::StatusOr<std::vector<KernelCost>> estimateStep(const llmrt::plan::PlanMeta &meta, int tokens,
                                                     int context);

// The same as a Markdown table with per-kernel and whole-step (all layers) times.
absl::StatusOr<std::string> costTable(const llmrt::plan::PlanMeta &meta, int tokens, int context);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_COSTMODEL_H_
