//===- CudaTarget_test.cpp - Emission and NVRTC compilation of every kernel ===//
//
// Every kernel emitted for the model shapes the tests know (unfused and fused programs, q/k/v
// bias, sliding window, GQA, head_dim 6, f32/f16/bf16 weights) compiles with NVRTC for sm_80
// and sm_90 and as compute_90 PTX, without register spills; the plan's kernel tables record
// what ptxas reported and the code reads back from the plan file.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaTarget.h"

#include <set>

#include "absl/strings/match.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/NvrtcCompiler.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/plan_writer.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

std::vector<llmrt::testing::TinyLlama> models() {
  std::vector<llmrt::testing::TinyLlama> result;
  llmrt::testing::TinyLlamaOptions options;
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    options.weight_dtype = dtype;
    options.fused = dtype != plan::F32;
    options.qkv_bias = dtype == plan::BF16;
    options.sliding_window = dtype == plan::F16 ? 4 : 0;
    result.push_back(llmrt::testing::BuildTinyLlama(options));
  }
  return result;
}

TEST(EmitCudaTest, BakesTheModelsConstantsIntoEachKernel) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  const llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  auto emission = emitCuda(model.meta);
  ASSERT_TRUE(emission.ok()) << emission.status();
  const std::string source = emission->moduleSource();
  // hidden 24, heads 4, kv heads 2, head_dim 6: as literals in the instantiations.
  EXPECT_TRUE(absl::StrContains(source, "llmc::rmsNorm<24, 32, true>")) << source;
  EXPECT_TRUE(absl::StrContains(source, "llmc::attentionSplit<4, 2, 6, ")) << source;
  EXPECT_TRUE(absl::StrContains(source, "llmc::gemmMma<24, ")) << source;
  EXPECT_TRUE(absl::StrContains(source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
  // One binding per op; every layer's identical kernels are emitted once, so more layers
  // add bindings but no kernels.
  ASSERT_EQ(emission->opKernels.size(), static_cast<size_t>(model.meta.program().ops_size()));
  options.num_layers = 5;
  auto deeper = emitCuda(llmrt::testing::BuildTinyLlama(options).meta);
  ASSERT_TRUE(deeper.ok()) << deeper.status();
  EXPECT_GT(deeper->opKernels.size(), emission->opKernels.size());
  EXPECT_EQ(deeper->kernels.size(), emission->kernels.size());
  std::set<std::string> names;
  for (const EmittedKernel &kernel : emission->kernels)
    EXPECT_TRUE(names.insert(kernel.info.name()).second) << kernel.info.name();
}

TEST(EmitCudaTest, RefusesAnOpWithoutKernel) {
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama({});
  model.meta.mutable_program()->mutable_ops(1)->set_kind(plan::OP_UNSPECIFIED);
  auto emission = emitCuda(model.meta);
  ASSERT_FALSE(emission.ok());
  EXPECT_TRUE(absl::StrContains(emission.status().message(), "program op 1")) << emission.status();
}

TEST(PtxasReportTest, ReadsRegistersSpillsAndSharedMemory) {
  CompiledCode code;
  parsePtxasReport("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
                   "ptxas         .     8 bytes stack frame, 12 bytes spill stores, 4 bytes spill "
                   "loads\n"
                   "ptxas info    : Used 72 registers, used 1 barriers, 7680 bytes smem, 560 "
                   "bytes cmem[0]\n",
                   code);
  EXPECT_EQ(code.registers, 72);
  EXPECT_EQ(code.spillStoreBytes, 12);
  EXPECT_EQ(code.spillLoadBytes, 4);
  EXPECT_EQ(code.sharedBytes, 7680);
}

class NvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (nvrtcVersion().empty())
      GTEST_SKIP() << "llmc was built without NVRTC (no CUDA toolkit at configure time)";
  }
};

// The CI check of issue 7: every kernel, every target, no spills in any (all are hot).
TEST_F(NvrtcTest, EveryKernelCompilesForEveryTargetWithoutSpills) {
  const std::string cache = ::testing::TempDir() + "/nvrtc_cache_all";
  for (const llmrt::testing::TinyLlama &model : models()) {
    auto emission = emitCuda(model.meta);
    ASSERT_TRUE(emission.ok()) << emission.status();
    std::vector<CompileRequest> requests;
    for (const char *target : {"sm_80", "sm_90", "compute_90"})
      for (size_t i = 0; i < emission->kernels.size(); ++i)
        requests.push_back({emission->kernelSource(i), emission->kernels[i].info.name(), target});
    auto compiled = compileAll(requests, cache, 0);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (size_t i = 0; i < requests.size(); ++i) {
      const CompiledCode &code = (*compiled)[i];
      SCOPED_TRACE(requests[i].entry + " for " + requests[i].target);
      ASSERT_FALSE(code.code.empty());
      if (requests[i].target == "compute_90") {
        EXPECT_TRUE(absl::StrContains(code.code, ".entry " + requests[i].entry));
        continue;
      }
      EXPECT_EQ(code.code.substr(0, 4), "\x7f"
                                        "ELF");
      EXPECT_GT(code.registers, 0);
      EXPECT_EQ(code.spillStoreBytes, 0);
      EXPECT_EQ(code.spillLoadBytes, 0);
    }
  }
}

TEST_F(NvrtcTest, IdenticalKernelsCompileOnceAndTheCacheServesTheSecondCompile) {
  const std::string cache = ::testing::TempDir() + "/nvrtc_cache_reuse";
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::BF16;
  options.seed = 99; // weights differ, kernels do not
  auto emission = emitCuda(llmrt::testing::BuildTinyLlama(options).meta);
  ASSERT_TRUE(emission.ok());
  std::vector<CompileRequest> requests = {
      {emission->kernelSource(0), emission->kernels[0].info.name(), "sm_86"},
      {emission->kernelSource(0), emission->kernels[0].info.name(), "sm_86"}};
  auto first = compileAll(requests, cache, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].code, (*first)[1].code);
  auto second = compileAll(requests, cache, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)[0].fromCache);
  EXPECT_EQ((*second)[0].code, (*first)[0].code);
  EXPECT_EQ((*second)[0].registers, (*first)[0].registers);
}

TEST_F(NvrtcTest, AKernelThatDoesNotCompileStopsWithNvrtcsLog) {
  auto compiled = compileAll(
      {{"extern \"C\" __global__ void broken() { undeclared_name(); }", "broken", "sm_80"}}, "", 1);
  ASSERT_FALSE(compiled.ok());
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "broken")) << compiled.status();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "undeclared_name"))
      << compiled.status();
}

TEST_F(NvrtcTest, KernelTablesAndCodeGoIntoThePlan) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  const std::string path = ::testing::TempDir() + "/cuda_tables.plan";
  auto writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  // The model's own weights first, as the pipeline writes them.
  for (int i = 0; i < model.meta.tensors_size(); ++i) {
    auto range = (*writer)->AddBlob(model.blobs[i].data(), model.blobs[i].size());
    ASSERT_TRUE(range.ok());
    model.meta.mutable_tensors(i)->set_offset(range->offset);
    model.meta.mutable_tensors(i)->set_checksum(range->checksum);
  }
  CudaTargetOptions cudaOptions;
  cudaOptions.smVersions = {90, 80, 80};
  cudaOptions.cacheDir = ::testing::TempDir() + "/nvrtc_cache_plan";
  ASSERT_TRUE(addCudaKernelTables(model.meta, **writer, cudaOptions).ok());
  ASSERT_TRUE((*writer)->Finish(model.meta).ok());

  auto opened = plan::Plan::Open(path, plan::PlanOpenOptions{true});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta &meta = (*opened)->meta();
  std::vector<std::string> targets;
  for (const plan::KernelTable &table : meta.program().kernel_tables())
    targets.push_back(table.target());
  EXPECT_EQ(targets, (std::vector<std::string>{"cuda:sm_80", "cuda:sm_90", "cuda:compute_90"}));
  for (const plan::KernelTable &table : meta.program().kernel_tables()) {
    EXPECT_EQ(table.op_kernels_size(), meta.program().ops_size());
    EXPECT_EQ(table.compiler_version(), nvrtcVersion());
    for (const plan::KernelTable::Kernel &kernel : table.kernels()) {
      SCOPED_TRACE(table.target() + " " + kernel.name());
      ASSERT_GE(kernel.code_tensor(), 0);
      const std::string code(reinterpret_cast<const char *>((*opened)->blob(kernel.code_tensor())),
                             kernel.code_size());
      if (table.target() == "cuda:compute_90") {
        EXPECT_TRUE(absl::StrContains(code, ".entry " + kernel.name()));
      } else {
        EXPECT_EQ(code.substr(0, 4), "\x7f"
                                     "ELF");
        EXPECT_GT(kernel.registers(), 0);
      }
      EXPECT_GT(kernel.block_x(), 0u);
    }
  }
}

} // namespace
} // namespace llmc::cuda
