//===- CudaGpu_test.cpp - Generated kernels on a real GPU (ctest -L gpu) --===//
//
// The conformance and end-to-end suites on hardware: the step script of the emulation tests
// run by the CUDA backend (driver, NVRTC-compiled CUBIN for the GPU's SM) against the CPU
// backend, for tiny models of every op mix and for the transformers fixtures compiled by
// llmc with --target cpu,cuda:sm_XY; stories260K's greedy story. Without a driver or GPU,
// every test skips and prints why.
//
//===----------------------------------------------------------------------===//

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/NvrtcCompiler.h"
#include "codegen/cuda/emulation/StepScript.h"
#include "compiler/pipeline/compile.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_driver.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/plan_reader.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

class GpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    auto gpu = llmrt::cuda::ProbeGpu(0);
    if (!gpu.ok()) {
      std::printf("skipping: %s\n", std::string(gpu.status().message()).c_str());
      GTEST_SKIP() << gpu.status().message();
    }
    if (nvrtcVersion().empty())
      GTEST_SKIP() << "llmc was built without NVRTC";
    info = *gpu;
    std::printf("GPU: %s, sm_%d, driver %d\n", info.name.c_str(), info.sm_version,
                info.driver_version);
  }
  llmrt::cuda::GpuInfo info;
};

TEST_F(GpuTest, TinyModelsMatchTheCpuBackend) {
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    for (bool fused : {true, false}) {
      SCOPED_TRACE(absl::StrCat("dtype ", dtype, fused ? " fused" : " unfused"));
      llmrt::testing::TinyLlamaOptions options;
      options.weight_dtype = dtype;
      options.fused = fused;
      options.qkv_bias = !fused;
      options.sliding_window = fused ? 0 : 5;
      llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
      F32ActivationCpuReference reference(dtype);
      auto emission = emitCuda(model.meta);
      ASSERT_TRUE(emission.ok()) << emission.status();
      // Compile for this GPU and add the code as tensors, as addCudaKernelTables does.
      const std::string target = absl::StrCat("sm_", info.sm_version);
      std::vector<CompileRequest> requests;
      for (size_t i = 0; i < emission->kernels.size(); ++i)
        requests.push_back({emission->kernelSource(i), emission->kernels[i].info.name(), target});
      auto compiled = compileAll(requests, defaultCacheDir(), 0);
      ASSERT_TRUE(compiled.ok()) << compiled.status();
      plan::KernelTable table = emission->kernelTable("cuda:" + target);
      for (size_t i = 0; i < compiled->size(); ++i) {
        model.blobs.emplace_back((*compiled)[i].code.begin(), (*compiled)[i].code.end());
        plan::Tensor *tensor = model.meta.add_tensors();
        tensor->set_name("cuda." + table.kernels(i).name());
        tensor->set_dtype(plan::I32);
        tensor->add_shape(static_cast<int64_t>(model.blobs.back().size() / 4));
        tensor->set_size_bytes(model.blobs.back().size());
        table.mutable_kernels(i)->set_code_tensor(model.meta.tensors_size() - 1);
        table.mutable_kernels(i)->set_code_size((*compiled)[i].code.size());
      }
      llmrt::BackendOptions backendOptions;
      backendOptions.max_tokens_per_step = 32;
      auto device = llmrt::cuda::CreateCudaDriverDevice(model.meta, table, model.Lookup());
      ASSERT_TRUE(device.ok()) << device.status();
      auto gpu = llmrt::cuda::CreateKernelBackend(model.meta, table, model.Lookup(), backendOptions,
                                                  *std::move(device));
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      auto cpu = llmrt::cpu::CreateCpuBackend(model.meta, model.Lookup(), backendOptions);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      runStepScript(**cpu, **gpu);
    }
  }
}

TEST_F(GpuTest, FixturePlansRunOnTheGpu) {
  for (const char *fixture : {"llama_mha", "llama_gqa_tied", "mistral_sliding", "qwen2_bias"}) {
    for (plan::DType dtype : {plan::F16, plan::BF16}) {
      SCOPED_TRACE(absl::StrCat(fixture, " dtype ", dtype));
      F32ActivationCpuReference reference(dtype);
      CompileOptions options;
      options.model_dir = absl::StrCat(LLMC_SOURCE_DIR, "/tests/fixtures/", fixture);
      options.output_path = absl::StrCat(::testing::TempDir(), "/gpu_", fixture, ".plan");
      options.weight_dtype = dtype;
      options.cuda_sm_versions = {info.sm_version};
      ASSERT_TRUE(Compile(options, nullptr).ok());
      auto opened = plan::Plan::Open(options.output_path, plan::PlanOpenOptions());
      ASSERT_TRUE(opened.ok()) << opened.status();
      const plan::Plan *planPointer = opened->get();
      llmrt::BlobLookup blobs = [planPointer](int index) { return planPointer->blob(index); };
      llmrt::BackendOptions backendOptions;
      backendOptions.max_tokens_per_step = 32;
      auto gpu = llmrt::cuda::CreateCudaBackend((*opened)->meta(), blobs, backendOptions);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      auto cpu = llmrt::cpu::CreateCpuBackend((*opened)->meta(), blobs, backendOptions);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      runStepScript(**cpu, **gpu);
    }
  }
}

} // namespace
} // namespace llmc::cuda
