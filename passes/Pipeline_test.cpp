//===- Pipeline_test.cpp - the default pipeline on one decoder layer ------===//

#include "passes/Passes.h"

#include <filesystem>
#include <map>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "gtest/gtest.h"

using namespace mlir;

namespace {

// One Llama decoder layer between embed and logits, as compiler/arch builds it.
constexpr const char *kLayerModule = R"mlir(
llm.param @embed : tensor<100x64xf16>
llm.param @ln1 : tensor<64xf16>
llm.param @q : tensor<64x64xf16>
llm.param @k : tensor<32x64xf16>
llm.param @v : tensor<32x64xf16>
llm.param @o : tensor<64x64xf16>
llm.param @ln2 : tensor<64xf16>
llm.param @gate : tensor<128x64xf16>
llm.param @up : tensor<128x64xf16>
llm.param @down : tensor<64x128xf16>
llm.param @norm : tensor<64xf16>
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x100xf32> {
  %x = llm.embed %tokens {table = @embed} : tensor<?xi32> -> tensor<?x64xf32>
  %n = llm.rms_norm %x {weight = @ln1, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  %q = llm.matmul %n {weights = [@q]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %k = llm.matmul %n {weights = [@k]} : tensor<?x64xf32> -> tensor<?x32xf32>
  %v = llm.matmul %n {weights = [@v]} : tensor<?x64xf32> -> tensor<?x32xf32>
  %qr = llm.rope %q, %pos {num_heads = 4, head_dim = 16, theta = 10000.0} : tensor<?x64xf32>, tensor<?xi32>
  %kr = llm.rope %k, %pos {num_heads = 2, head_dim = 16, theta = 10000.0} : tensor<?x32xf32>, tensor<?xi32>
  %a = llm.attention %qr, %kr, %v {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.matmul %a {weights = [@o]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %h = llm.add %x, %o : tensor<?x64xf32>
  %n2 = llm.rms_norm %h {weight = @ln2, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  %g = llm.matmul %n2 {weights = [@gate]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %u = llm.matmul %n2 {weights = [@up]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %s = llm.silu %g : tensor<?x128xf32>
  %m = llm.mul %s, %u : tensor<?x128xf32>
  %d = llm.matmul %m {weights = [@down]} : tensor<?x128xf32> -> tensor<?x64xf32>
  %y = llm.add %h, %d : tensor<?x64xf32>
  %f = llm.rms_norm %y {weight = @norm, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  %l = llm.logits %f {weight = @embed} : tensor<?x64xf32> -> tensor<?x100xf32>
  return %l : tensor<?x100xf32>
}
)mlir";

class PipelineTest : public ::testing::Test {
protected:
  PipelineTest() {
    context.loadDialect<llmc::llm::LlmDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(kLayerModule, &context);
  }
  std::map<std::string, int> countOps() {
    std::map<std::string, int> counts;
    module->walk([&](Operation *op) { ++counts[op->getName().getStringRef().str()]; });
    return counts;
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
};

TEST_F(PipelineTest, FusesAndDumpsEveryStage) {
  ASSERT_TRUE(module);
  std::filesystem::path dumpDir =
      std::filesystem::path(::testing::TempDir()) / "llmc_pipeline_test_dump";
  std::filesystem::remove_all(dumpDir);
  std::vector<std::string> stages;
  llmc::PipelineOptions options;
  options.dumpDir = dumpDir.string();
  options.afterStage = [&](int index, const std::string &name, ModuleOp) {
    EXPECT_EQ(index, static_cast<int>(stages.size()));
    stages.push_back(name);
    return absl::OkStatus();
  };
  absl::Status status = llmc::runPipeline(*module, options);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(stages,
            (std::vector<std::string>{"import", "llm-fuse-qkv", "llm-fuse-gate-up",
                                      "llm-fuse-add-rms-norm", "llm-plan-memory", "llm-tile-cpu"}));
  for (const char *file :
       {"00-import.mlir", "01-llm-fuse-qkv.mlir", "02-llm-fuse-gate-up.mlir",
        "03-llm-fuse-add-rms-norm.mlir", "04-llm-plan-memory.mlir", "05-llm-tile-cpu.mlir"})
    EXPECT_TRUE(std::filesystem::exists(dumpDir / file)) << file;
  // The first dump is the unfused module: it parses back with its 7 matmuls.
  OwningOpRef<ModuleOp> imported =
      parseSourceFile<ModuleOp>((dumpDir / "00-import.mlir").string(), &context);
  ASSERT_TRUE(imported);
  int importedMatmuls = 0;
  imported->walk([&](llmc::llm::MatmulOp) { ++importedMatmuls; });
  EXPECT_EQ(importedMatmuls, 7);

  std::map<std::string, int> counts = countOps();
  EXPECT_EQ(counts["llm.matmul"], 4); // qkv, o, gate_up, down
  EXPECT_EQ(counts["llm.silu_mul"], 1);
  EXPECT_EQ(counts["llm.silu"], 0);
  EXPECT_EQ(counts["llm.mul"], 0);
  EXPECT_EQ(counts["llm.add"], 0);
  EXPECT_EQ(counts["llm.rms_norm"], 1); // input_layernorm reads the embedding, not an add
  EXPECT_EQ(counts["llm.fused_add_rms_norm"], 2);
}

// Checks the memory plan's contract on the fused layer: an op's outputs do not overlap its
// inputs, and no two values live at the same time share bytes.
TEST_F(PipelineTest, MemoryPlanHasNoOverlapBetweenLiveValues) {
  ASSERT_TRUE(module);
  ASSERT_TRUE(llmc::runPipeline(*module).ok());
  auto function = *module->getOps<func::FuncOp>().begin();
  auto bytesAttr = function->getAttrOfType<IntegerAttr>(llmc::llm::kArenaBytesPerTokenAttr);
  ASSERT_TRUE(bytesAttr);
  int64_t arenaBytes = bytesAttr.getInt();

  struct Interval {
    int64_t begin, end; // bytes per token
    int64_t defined, lastUse;
  };
  std::vector<Interval> intervals;
  Block &block = function.getBody().front();
  std::map<Operation *, int64_t> position;
  for (auto [index, op] : llvm::enumerate(block))
    position[&op] = index;
  int returnedCount = 0;
  for (Operation &op : block.without_terminator()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(llmc::llm::kArenaOffsetsAttr);
    ASSERT_TRUE(offsets) << op.getName().getStringRef().str();
    ASSERT_EQ(offsets.size(), static_cast<int64_t>(op.getNumResults()));
    for (auto [result, offset] : llvm::zip(op.getResults(), offsets.asArrayRef())) {
      if (offset < 0) {
        ++returnedCount;
        continue;
      }
      int64_t width = llmc::llm::getActivationWidth(result.getType());
      EXPECT_EQ(offset % 64, 0);
      int64_t lastUse = position[&op];
      for (Operation *user : result.getUsers())
        lastUse = std::max(lastUse, position[user]);
      intervals.push_back({offset, offset + width * 4, position[&op], lastUse});
      EXPECT_LE(offset + width * 4, arenaBytes);
    }
  }
  EXPECT_EQ(returnedCount, 1); // the logits
  for (size_t i = 0; i < intervals.size(); ++i) {
    for (size_t j = i + 1; j < intervals.size(); ++j) {
      const Interval &a = intervals[i], &b = intervals[j];
      // Inclusive at both ends: an output defined where an input dies must not overlap it.
      bool liveTogether = a.defined <= b.lastUse && b.defined <= a.lastUse;
      bool shareBytes = a.begin < b.end && b.begin < a.end;
      EXPECT_FALSE(liveTogether && shareBytes) << "values " << i << " and " << j;
    }
  }
  // Reuse happened: the plan is smaller than giving every value its own slot.
  int64_t unshared = 0;
  for (const Interval &interval : intervals)
    unshared += interval.end - interval.begin;
  EXPECT_LT(arenaBytes, unshared);
}

TEST_F(PipelineTest, ReportsVerifierErrorsAsStatus) {
  ASSERT_TRUE(module);
  // Point the q projection at a weight of the wrong shape.
  module->walk([&](llmc::llm::MatmulOp op) {
    if (op.getWeightRefs()[0].getValue() == "q")
      op.setWeightsAttr(Builder(&context).getArrayAttr({FlatSymbolRefAttr::get(&context, "k")}));
  });
  absl::Status status = llmc::runPipeline(*module);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("@k"), std::string::npos) << status;
}

} // namespace
