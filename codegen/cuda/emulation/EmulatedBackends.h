//===- EmulatedBackends.h - A plan on the CPU backend and under emulation -*- C++ -*-===//
//
// Test support shared by the emulation tests: compile a model directory with llmc, emit its
// CUDA kernels, build them under emulation and create both backends over the same plan.
// The dequantized twin of a quantized plan is in DequantizedPlan.h.
// Needs LLMC_SOURCE_DIR and LLMC_EMULATION_CACHE_DIR defined by the test target.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_EMULATEDBACKENDS_H_
#define LLMC_CODEGEN_CUDA_EMULATION_EMULATEDBACKENDS_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/DequantizedPlan.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "compiler/pipeline/compile.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "gtest/gtest.h"

namespace llmc::cuda {

struct Backends {
  std::unique_ptr<llmrt::plan::Plan> plan;
  CudaEmission emission;
  std::unique_ptr<llmrt::Backend> cpu;
  std::unique_ptr<llmrt::cuda::KernelStepBackend> emulated;
  const EmulatedDevice *device = nullptr; // owned by `emulated`

  // Whether a kernel whose entry name starts with llmc_<prefix> (and contains `part`) was
  // launched.
  bool launched(const std::string &prefix, const std::string &part = "") const {
    for (const std::string &name : device->launches())
      if (name.rfind("llmc_" + prefix, 0) == 0 && name.find(part) != std::string::npos)
        return true;
    return false;
  }
};

// llmc compile of `model` (a directory under the source tree) into the test's temporary
// directory; `cudaSmVersions` adds `--target cuda:sm_XX` kernel tables (NVRTC, cached in the
// build tree).
inline std::string compilePlan(const std::string &model, llmrt::plan::DType dtype,
                               std::optional<QuantizeOptions> quantize = std::nullopt,
                               std::optional<llmrt::plan::DType> kvDtype = std::nullopt,
                               const std::vector<int> &cudaSmVersions = {}) {
  CompileOptions options;
  options.quantize = quantize;
  options.model_dir = std::string(LLMC_SOURCE_DIR) + "/" + model;
  std::string name = model;
  for (char &c : name)
    if (c == '/')
      c = '_';
  options.output_path =
      ::testing::TempDir() + "/" + name + "_" + std::to_string(dtype) +
      (quantize ? absl::StrCat("_q", quantize->bits, "g", quantize->group_size,
                               quantize->asymmetric ? "a" : "", "h", quantize->lm_head_bits)
                : "") +
      (kvDtype ? "_kv" + std::to_string(*kvDtype) : "") + ".plan";
  options.weight_dtype = dtype;
  // A bf16 KV cache keeps 8 bits: CPU and GPU sum k and v in different orders before rounding,
  // so an element near a rounding boundary lands one bf16 ulp apart and logits move ~4e-3,
  // beyond the 1e-3 kernel tolerance. An f16 cache does the same wherever k and v are large
  // (Gemma's scaled embeddings and 1 + w gammas give |k| ~ 8-16, where an f16 ulp is 2^-7: logits
  // moved 5e-3). Compare the kernels over an f32 cache here; KvDtypeTest checks reduced-precision
  // caches against a tolerance derived from their format.
  if (dtype == llmrt::plan::BF16 || dtype == llmrt::plan::F16)
    options.kv_cache_dtype = llmrt::plan::F32;
  if (kvDtype)
    options.kv_cache_dtype = kvDtype;
  options.cuda_sm_versions = cudaSmVersions;
  options.cuda_cache_dir = std::string(LLMC_EMULATION_CACHE_DIR) + "/nvrtc";
  absl::Status status = Compile(options, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  return options.output_path;
}

// Emits `meta`'s kernels, builds them under emulation and creates both backends.
inline bool createBackends(Backends &result, const llmrt::plan::PlanMeta &meta,
                           const llmrt::BlobLookup &blobs, int32_t maxTokens) {
  auto emission = emitCuda(meta);
  EXPECT_TRUE(emission.ok()) << emission.status();
  if (!emission.ok())
    return false;
  result.emission = std::move(*emission);
  auto module = EmulatedModule::build(result.emission.moduleSource(), LLMC_EMULATION_CACHE_DIR);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok())
    return false;
  const llmrt::plan::KernelTable table = result.emission.kernelTable("cuda:emulated");
  llmrt::BackendOptions options;
  options.max_tokens_per_step = maxTokens;
  // MoE plans: both backends count each step's routing (runBoth compares the counts).
  options.record_expert_load =
      std::any_of(meta.program().ops().begin(), meta.program().ops().end(),
                  [](const llmrt::plan::Op &op) { return op.kind() == llmrt::plan::ROUTER; });
  auto cpu = llmrt::cpu::CreateCpuBackend(meta, blobs, options);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  auto device = std::make_unique<EmulatedDevice>(*module, table);
  result.device = device.get();
  auto emulated = llmrt::cuda::CreateKernelBackend(meta, table, blobs, options, std::move(device));
  EXPECT_TRUE(emulated.ok()) << emulated.status();
  if (!cpu.ok() || !emulated.ok())
    return false;
  result.cpu = std::move(*cpu);
  result.emulated = std::move(*emulated);
  return true;
}

inline std::unique_ptr<Backends>
makeBackends(const std::string &model, llmrt::plan::DType dtype, int32_t maxTokens = 64,
             std::optional<QuantizeOptions> quantize = std::nullopt,
             std::optional<llmrt::plan::DType> kvDtype = std::nullopt,
             const std::vector<int> &cudaSmVersions = {}) {
  auto result = std::make_unique<Backends>();
  const std::string path = compilePlan(model, dtype, quantize, kvDtype, cudaSmVersions);
  auto opened = llmrt::plan::Plan::Open(path, llmrt::plan::PlanOpenOptions());
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok())
    return nullptr;
  result->plan = std::move(*opened);
  const llmrt::plan::Plan *planPointer = result->plan.get();
  llmrt::BlobLookup blobs = [planPointer](int index) { return planPointer->blob(index); };
  if (!createBackends(*result, result->plan->meta(), blobs, maxTokens))
    return nullptr;
  return result;
}

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_EMULATEDBACKENDS_H_
