#include "runtime/backend/cuda/cuda_backend.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/backend/cuda/cuda_driver.h"
#include "runtime/backend/testing/tiny_llama.h"

namespace llmrt::cuda {
namespace {

plan::PlanMeta WithTables(std::vector<std::string> targets) {
  plan::PlanMeta meta;
  for (const std::string& target : targets) {
    meta.mutable_program()->add_kernel_tables()->set_target(target);
  }
  return meta;
}

TEST(SelectKernelTableTest, PrefersTheExactCubin) {
  const plan::PlanMeta meta =
      WithTables({"cpu", "cuda:sm_80", "cuda:sm_86", "cuda:sm_90", "cuda:compute_90"});
  auto table = SelectKernelTable(meta, 86);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)->target(), "cuda:sm_86");
}

TEST(SelectKernelTableTest, RunsAnOlderCubinOfTheSameMajorVersion) {
  const plan::PlanMeta meta = WithTables({"cuda:sm_80", "cuda:sm_86", "cuda:compute_86"});
  auto table = SelectKernelTable(meta, 89);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)->target(), "cuda:sm_86");
}

TEST(SelectKernelTableTest, JitsThePtxOnANewerMajorVersion) {
  // An sm_90 CUBIN cannot run on sm_100; the compute_90 PTX can, after the driver's JIT.
  const plan::PlanMeta meta = WithTables({"cuda:sm_80", "cuda:sm_90", "cuda:compute_90"});
  auto table = SelectKernelTable(meta, 100);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)->target(), "cuda:compute_90");
}

TEST(SelectKernelTableTest, NamesWhatThePlanHasWhenNothingFits) {
  const plan::PlanMeta meta = WithTables({"cpu", "cuda:sm_90", "cuda:compute_90"});
  auto table = SelectKernelTable(meta, 80);
  ASSERT_FALSE(table.ok());
  EXPECT_TRUE(absl::StrContains(table.status().message(), "no kernels for sm_80"))
      << table.status();
  EXPECT_TRUE(absl::StrContains(table.status().message(), "cpu, cuda:sm_90, cuda:compute_90"))
      << table.status();
}

// On a machine without a GPU (CI, this one) the reason is the missing driver; with a GPU it is
// that the tiny plan has no CUDA kernels. Either way: a clean status and the CPU fallback.
TEST(CudaBackendTest, FallsBackToTheCpuWithTheReason) {
  testing::TinyLlama model = testing::BuildTinyLlama({});
  model.meta.mutable_program()->add_kernel_tables()->set_target("cpu");
  BackendOptions options;
  options.max_tokens_per_step = 8;
  auto cuda = CreateCudaBackend(model.meta, model.Lookup(), options);
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable) << cuda.status();
  EXPECT_TRUE(absl::StartsWith(cuda.status().message(), "CUDA backend unavailable: "))
      << cuda.status();
  std::printf("reason: %s\n", std::string(cuda.status().message()).c_str());

  std::string reason;
  auto backend = CreateCudaOrCpuBackend(model.meta, model.Lookup(), options, &reason);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  EXPECT_EQ(reason, cuda.status().message());
}

TEST(CudaBackendTest, DoesNotFallBackWhenThePlanHasNoCpuTarget) {
  testing::TinyLlama model = testing::BuildTinyLlama({});
  model.meta.mutable_program()->clear_kernel_tables();
  model.meta.mutable_program()->add_kernel_tables()->set_target("cuda:sm_90");
  std::string reason = "stale";
  auto backend = CreateCudaOrCpuBackend(model.meta, model.Lookup(), {}, &reason);
  ASSERT_FALSE(backend.ok());
  EXPECT_TRUE(absl::StartsWith(backend.status().message(), "CUDA backend unavailable: "))
      << backend.status();
  EXPECT_EQ(reason, "");
}

}  // namespace
}  // namespace llmrt::cuda
