//===- DequantizedPlan.h - A quantized plan's f32 twin on the CPU -*- C++ -*-===//
//
// The CPU reference for kernels that keep f32 activations over I8 / I4 / MXFP4 weights: the plan
// with every quantized matrix replaced by its f32 values. Runtime-only (no compiler, no emulation),
// so the emulation tests and the GPU kit's test (tests/kit) share it.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_DEQUANTIZEDPLAN_H_
#define LLMC_CODEGEN_CUDA_EMULATION_DEQUANTIZEDPLAN_H_

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/testing/reference_program.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "gtest/gtest.h"

namespace llmc::cuda {

// The quantized plan with every I8 / I4 / FP4_E2M1 matrix (expert stacks too) replaced by its
// f32 values, dequantized here
// by the scalar reference (llmrt::testing::ReferenceTensor): the CPU backend runs it in exact
// f32, the reference for kernels that compute with f32 activations.
struct DequantizedPlan {
  llmrt::plan::PlanMeta meta;
  std::map<int, std::vector<float>> replaced; // tensor -> f32 values
};

inline DequantizedPlan dequantize(const llmrt::plan::PlanMeta &meta,
                                  const llmrt::BlobLookup &blobs) {
  DequantizedPlan result{meta, {}};
  for (int t = 0; t < meta.tensors_size(); ++t) {
    const llmrt::plan::Tensor &tensor = meta.tensors(t);
    if (tensor.dtype() != llmrt::plan::I8 && tensor.dtype() != llmrt::plan::I4 &&
        tensor.dtype() != llmrt::plan::FP4_E2M1)
      continue;
    std::vector<float> values = llmrt::testing::ReferenceTensor(meta, blobs, t);
    llmrt::plan::Tensor *out = result.meta.mutable_tensors(t);
    out->set_dtype(llmrt::plan::F32);
    out->clear_quantization();
    out->set_layout(llmrt::plan::Tensor::ROW_MAJOR);
    out->set_size_bytes(values.size() * 4);
    result.replaced[t] = std::move(values);
  }
  return result;
}

// The CPU backend over `reference` (a quantized plan's dequantized twin): the matrices
// `reference` replaced, every other blob from `quantized`. Both must outlive the backend.
inline std::unique_ptr<llmrt::Backend>
createDequantizedCpuBackend(const llmrt::plan::Plan &quantized, const DequantizedPlan &reference,
                            int32_t maxTokens) {
  llmrt::BlobLookup blobs = [&quantized, &reference](int index) -> const uint8_t * {
    auto it = reference.replaced.find(index);
    return it != reference.replaced.end() ? reinterpret_cast<const uint8_t *>(it->second.data())
                                          : quantized.blob(index);
  };
  llmrt::BackendOptions options;
  options.max_tokens_per_step = maxTokens;
  auto backend = llmrt::cpu::CreateCpuBackend(reference.meta, blobs, options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? std::move(*backend) : nullptr;
}

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_DEQUANTIZEDPLAN_H_
