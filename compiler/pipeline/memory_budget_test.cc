#include "compiler/pipeline/memory_budget.h"

#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/plan_reader.h"

namespace llmc {
namespace {

TEST(ParseMemorySizeTest, BinaryUnitsAndBytes) {
  EXPECT_EQ(*ParseMemorySize("4G"), int64_t{4} << 30);
  EXPECT_EQ(*ParseMemorySize("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(*ParseMemorySize("4gb"), int64_t{4} << 30);
  EXPECT_EQ(*ParseMemorySize("512M"), int64_t{512} << 20);
  EXPECT_EQ(*ParseMemorySize("1.5G"), int64_t{3} << 29);
  EXPECT_EQ(*ParseMemorySize("2T"), int64_t{2} << 40);
  EXPECT_EQ(*ParseMemorySize("300000000"), 300000000);
  for (const char* bad : {"", "G", "-1G", "0", "4X", "four", "1e30"}) {
    absl::StatusOr<int64_t> parsed = ParseMemorySize(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) EXPECT_NE(parsed.status().message().find("--max-memory"), std::string::npos);
  }
}

// A Llama-like meta: 100 MiB of weights, 4 KiB of activations per token, vocab 1000, 4 layers
// of 2 KV heads x 64 in f16.
llmrt::plan::PlanMeta Meta() {
  llmrt::plan::PlanMeta meta;
  meta.mutable_config()->set_vocab_size(1000);
  meta.mutable_config()->set_max_position_embeddings(4096);
  meta.add_tensors()->set_size_bytes(int64_t{100} << 20);
  meta.mutable_program()->set_arena_bytes_per_token(4096);
  llmrt::plan::KvCacheSpec* kv = meta.mutable_kv_cache();
  kv->set_num_layers(4);
  kv->set_num_kv_heads(2);
  kv->set_head_dim(64);
  kv->set_dtype(llmrt::plan::F16);
  kv->set_default_block_size(16);
  return meta;
}

TEST(ApplyMemoryBudgetTest, KvPoolFillsWhatWeightsAndWorkspaceLeave) {
  llmrt::plan::PlanMeta meta = Meta();
  const int64_t budget = int64_t{200} << 20;
  ASSERT_TRUE(ApplyMemoryBudget(budget, meta).ok());
  const llmrt::plan::MemoryBudget& out = meta.memory_budget();
  const int64_t per_token = llmrt::kv::KvBytesPerToken(4, 2, 64, llmrt::plan::F16);
  EXPECT_EQ(out.kv_bytes_per_token(), per_token);
  EXPECT_EQ(out.weight_bytes(), int64_t{100} << 20);
  EXPECT_EQ(out.workspace_bytes(),
            kBudgetTokensPerStep * (4096 + 2 * 1000 * 4) + kWorkspaceMarginBytes);
  const int64_t left = budget - out.weight_bytes() - out.workspace_bytes();
  EXPECT_EQ(out.kv_cache_tokens(), left / per_token / 16 * 16);
  EXPECT_LE(out.weight_bytes() + out.workspace_bytes() + out.kv_cache_tokens() * per_token, budget);
  EXPECT_EQ(out.max_context(), std::min<int64_t>(out.kv_cache_tokens(), 4096));
  EXPECT_EQ(out.max_memory_bytes(), budget);
}

// Expert grouping tables and attention partials live in kernel scratch, next to the arena
// (whose routed activations and expert ids arena_bytes_per_token already counts): the workspace
// holds the largest kernel's scratch for a full step.
TEST(ApplyMemoryBudgetTest, WorkspaceCountsTheLargestKernelScratch) {
  llmrt::plan::PlanMeta meta = Meta();
  llmrt::plan::KernelTable* table = meta.mutable_program()->add_kernel_tables();
  table->set_target("cuda:sm_80");
  table->add_kernels()->set_scratch_floats_per_token(100);
  llmrt::plan::KernelTable::Kernel* group = table->add_kernels();
  group->set_scratch_floats_per_token(16);
  group->set_scratch_floats_fixed(1 << 20);  // larger than 100 floats x 256 tokens
  ASSERT_TRUE(ApplyMemoryBudget(int64_t{200} << 20, meta).ok());
  EXPECT_EQ(meta.memory_budget().workspace_bytes(),
            kBudgetTokensPerStep * (4096 + 2 * 1000 * 4) +
                4 * (16 * kBudgetTokensPerStep + (1 << 20)) + kWorkspaceMarginBytes);
}

// A mixture of experts through the whole compile: the plan's arena holds a MoE layer's routed
// rows (top_k slots of the gate, up and down outputs per token), and the budget's workspace is
// that arena for a full step, the logits and the largest kernel scratch.
TEST(ApplyMemoryBudgetTest, MixtureOfExpertsCompile) {
  CompileOptions options;
  options.model_dir = LLMC_SOURCE_DIR "/tests/fixtures/qwen3_moe";
  options.output_path = ::testing::TempDir() + "/memory_budget_moe.plan";
  options.max_memory_bytes = int64_t{256} << 20;
  ASSERT_TRUE(Compile(options, nullptr).ok());
  absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> plan =
      llmrt::plan::Plan::Open(options.output_path, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const llmrt::plan::PlanMeta& meta = (*plan)->meta();
  const llmrt::plan::MoeConfig& moe = meta.config().moe();
  ASSERT_GT(moe.num_experts(), 0);
  const int64_t arena = meta.program().arena_bytes_per_token();
  EXPECT_GE(arena,
            4 * moe.top_k() * (2 * moe.expert_intermediate_size() + meta.config().hidden_size()));
  int64_t scratch = 0;
  for (const llmrt::plan::KernelTable& table : meta.program().kernel_tables()) {
    for (const llmrt::plan::KernelTable::Kernel& kernel : table.kernels()) {
      scratch = std::max(scratch, kernel.scratch_floats_per_token() * kBudgetTokensPerStep +
                                      kernel.scratch_floats_fixed());
    }
  }
  EXPECT_EQ(meta.memory_budget().workspace_bytes(),
            kBudgetTokensPerStep * (arena + 2 * meta.config().vocab_size() * 4) + 4 * scratch +
                kWorkspaceMarginBytes);
  EXPECT_GT(meta.memory_budget().kv_cache_tokens(), 0);
}

TEST(ApplyMemoryBudgetTest, TooSmallABudgetSaysWhatTakesTheMemory) {
  llmrt::plan::PlanMeta meta = Meta();
  absl::Status status = ApplyMemoryBudget(int64_t{120} << 20, meta);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("the weights take 100.0 MiB"), std::string::npos) << status;
  EXPECT_NE(status.message().find("--quant"), std::string::npos) << status;
  EXPECT_FALSE(meta.has_memory_budget());
}

TEST(ChooseWeightFormatTest, WidestFormatThatFits) {
  WeightEstimate weights;
  weights.quantizable_elements = int64_t{1} << 30;  // 1 G parameters in projections
  weights.quantizable_rows = 1 << 20;
  weights.other_elements = int64_t{64} << 20;
  const int64_t f16 = EstimateWeightBytes(weights, WeightFormat::kF16);
  const int64_t int8 = EstimateWeightBytes(weights, WeightFormat::kInt8);
  const int64_t int4 = EstimateWeightBytes(weights, WeightFormat::kInt4);
  EXPECT_EQ(f16, (int64_t{1} << 31) + (int64_t{128} << 20));
  EXPECT_LT(int4, int8);
  EXPECT_LT(int8, f16);
  const int64_t workspace = int64_t{100} << 20, kv = 1 << 16;
  const int64_t context = kMinContextTokens * kv;
  EXPECT_EQ(*ChooseWeightFormat(f16 + workspace + context, weights, workspace, kv),
            WeightFormat::kF16);
  EXPECT_EQ(*ChooseWeightFormat(f16 + workspace + context - 1, weights, workspace, kv),
            WeightFormat::kInt8);
  EXPECT_EQ(*ChooseWeightFormat(int8 - 1, weights, workspace, kv), WeightFormat::kInt4);
  absl::StatusOr<WeightFormat> none = ChooseWeightFormat(int4, weights, workspace, kv);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(none.status().message().find("int4 needs"), std::string::npos) << none.status();
}

}  // namespace
}  // namespace llmc
