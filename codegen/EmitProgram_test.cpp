//===- EmitProgram_test.cpp - codegen to a real plan file, read back -------===//

#include "codegen/EmitProgram.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "passes/Passes.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "gtest/gtest.h"

using namespace mlir;
namespace plan = llmrt::plan;

namespace {

// One Qwen2-style layer (q/k/v biases), tied lm_head, hidden 8, 2 query heads, 1 kv head of
// width 4, intermediate 16, vocab 10. The checkpoint is f32.
constexpr const char *kModule = R"mlir(
llm.param @model.embed_tokens.weight : tensor<10x8xf32>
llm.param @model.layers.0.input_layernorm.weight : tensor<8xf32>
llm.param @model.layers.0.self_attn.q_proj.weight : tensor<8x8xf32>
llm.param @model.layers.0.self_attn.k_proj.weight : tensor<4x8xf32>
llm.param @model.layers.0.self_attn.v_proj.weight : tensor<4x8xf32>
llm.param @model.layers.0.self_attn.q_proj.bias : tensor<8xf32>
llm.param @model.layers.0.self_attn.k_proj.bias : tensor<4xf32>
llm.param @model.layers.0.self_attn.v_proj.bias : tensor<4xf32>
llm.param @model.layers.0.self_attn.o_proj.weight : tensor<8x8xf32>
llm.param @model.layers.0.post_attention_layernorm.weight : tensor<8xf32>
llm.param @model.layers.0.mlp.gate_proj.weight : tensor<16x8xf32>
llm.param @model.layers.0.mlp.up_proj.weight : tensor<16x8xf32>
llm.param @model.layers.0.mlp.down_proj.weight : tensor<8x16xf32>
llm.param @model.norm.weight : tensor<8xf32>
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %x = llm.embed %tokens {table = @model.embed_tokens.weight} : tensor<?xi32> -> tensor<?x8xf32>
  %n = llm.rms_norm %x {weight = @model.layers.0.input_layernorm.weight, eps = 1.0e-06 : f64} : tensor<?x8xf32>
  %q = llm.matmul %n {weights = [@model.layers.0.self_attn.q_proj.weight], biases = [@model.layers.0.self_attn.q_proj.bias]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %k = llm.matmul %n {weights = [@model.layers.0.self_attn.k_proj.weight], biases = [@model.layers.0.self_attn.k_proj.bias]} : tensor<?x8xf32> -> tensor<?x4xf32>
  %v = llm.matmul %n {weights = [@model.layers.0.self_attn.v_proj.weight], biases = [@model.layers.0.self_attn.v_proj.bias]} : tensor<?x8xf32> -> tensor<?x4xf32>
  %qr = llm.rope %q, %pos {num_heads = 2, head_dim = 4, theta = 500000.0, scaling = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192} : tensor<?x8xf32>, tensor<?xi32>
  %kr = llm.rope %k, %pos {num_heads = 1, head_dim = 4, theta = 500000.0, scaling = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_position_embeddings = 8192} : tensor<?x4xf32>, tensor<?xi32>
  %a = llm.attention %qr, %kr, %v {layer = 0, num_heads = 2, num_kv_heads = 1, head_dim = 4, sliding_window = 32, scale = 0.5} : tensor<?x8xf32>, tensor<?x4xf32>, tensor<?x4xf32>
  %o = llm.matmul %a {weights = [@model.layers.0.self_attn.o_proj.weight]} : tensor<?x8xf32> -> tensor<?x8xf32>
  %h = llm.add %x, %o : tensor<?x8xf32>
  %n2 = llm.rms_norm %h {weight = @model.layers.0.post_attention_layernorm.weight, eps = 1.0e-06 : f64} : tensor<?x8xf32>
  %g = llm.matmul %n2 {weights = [@model.layers.0.mlp.gate_proj.weight]} : tensor<?x8xf32> -> tensor<?x16xf32>
  %u = llm.matmul %n2 {weights = [@model.layers.0.mlp.up_proj.weight]} : tensor<?x8xf32> -> tensor<?x16xf32>
  %s = llm.silu %g : tensor<?x16xf32>
  %m = llm.mul %s, %u : tensor<?x16xf32>
  %d = llm.matmul %m {weights = [@model.layers.0.mlp.down_proj.weight]} : tensor<?x16xf32> -> tensor<?x8xf32>
  %y = llm.add %h, %d : tensor<?x8xf32>
  %f = llm.rms_norm %y {weight = @model.norm.weight, eps = 1.0e-06 : f64} : tensor<?x8xf32>
  %l = llm.logits %f {weight = @model.embed_tokens.weight} : tensor<?x8xf32> -> tensor<?x10xf32>
  return %l : tensor<?x10xf32>
}
)mlir";

// Every llm.param of the module as f32 data; element i of the t-th tensor is distinct.
class MapWeightSource : public llmc::WeightSource {
public:
  explicit MapWeightSource(ModuleOp module) {
    int tensorNumber = 0;
    for (auto param : module.getOps<llmc::llm::ParamOp>()) {
      Entry &entry = entries[param.getSymName().str()];
      entry.shape = param.getTensorType().getShape().vec();
      for (int64_t i = 0; i < param.getTensorType().getNumElements(); ++i)
        entry.values.push_back(0.01f * static_cast<float>(tensorNumber * 1000 + i) + 0.3333f);
      ++tensorNumber;
    }
  }
  absl::StatusOr<llmc::WeightView> getWeight(const std::string &name) const override {
    auto it = entries.find(name);
    if (it == entries.end())
      return absl::NotFoundError("no tensor " + name);
    llmc::WeightView view;
    view.dtype = plan::F32;
    view.shape = it->second.shape;
    view.data = reinterpret_cast<const uint8_t *>(it->second.values.data());
    view.sizeBytes = it->second.values.size() * sizeof(float);
    view.file = "test.safetensors";
    return view;
  }
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, Entry> entries;
};

class EmitProgramTest : public ::testing::Test {
protected:
  EmitProgramTest() {
    context.loadDialect<llmc::llm::LlmDialect, func::FuncDialect>();
    module = parseSourceString<ModuleOp>(kModule, &context);
    path = (std::filesystem::path(::testing::TempDir()) / "llmc_emit_program_test.plan").string();
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::string path;
};

const plan::Tensor &tensorNamed(const plan::PlanMeta &meta, const std::string &name, int *index) {
  for (int i = 0; i < meta.tensors_size(); ++i)
    if (meta.tensors(i).name() == name) {
      *index = i;
      return meta.tensors(i);
    }
  ADD_FAILURE() << "no tensor " << name;
  *index = 0;
  return meta.tensors(0);
}

TEST_F(EmitProgramTest, WritesPlanThatReadsBack) {
  ASSERT_TRUE(module);
  ASSERT_TRUE(llmc::runPipeline(*module).ok());
  MapWeightSource weights(*module);

  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  plan::PlanMeta meta;
  std::vector<plan::Tensor> tensors;
  std::vector<int64_t> progressDone;
  uint64_t lastBytes = 0;
  absl::StatusOr<plan::Program> program =
      llmc::emitProgram(*module, weights, plan::F16, **writer, &tensors,
                        [&](int64_t done, int64_t total, uint64_t bytes) {
                          EXPECT_EQ(total, 9);
                          EXPECT_GT(bytes, lastBytes);
                          lastBytes = bytes;
                          progressDone.push_back(done);
                        });
  ASSERT_TRUE(program.ok()) << program.status();
  EXPECT_EQ(progressDone, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  *meta.mutable_program() = *program;
  for (plan::Tensor &tensor : tensors)
    *meta.add_tensors() = tensor;
  meta.set_weight_dtype(plan::F16);
  ASSERT_TRUE((*writer)->Finish(meta).ok());

  absl::StatusOr<std::unique_ptr<plan::Plan>> opened =
      plan::Plan::Open(path, {.verify_blob_checksums = true});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta &read = (*opened)->meta();
  const plan::Program &readProgram = read.program();

  // Ops, in order, after fusion.
  std::vector<plan::OpKind> kinds;
  for (const plan::Op &op : readProgram.ops())
    kinds.push_back(op.kind());
  EXPECT_EQ(kinds, (std::vector<plan::OpKind>{
                       plan::EMBED, plan::RMS_NORM, plan::MATMUL, plan::ROPE, plan::ROPE,
                       plan::ATTENTION, plan::MATMUL, plan::FUSED_ADD_RMS_NORM, plan::MATMUL,
                       plan::SILU_MUL, plan::MATMUL, plan::FUSED_ADD_RMS_NORM, plan::LOGITS}));

  // Values: inputs, then activations at the memory plan's offsets, logits last.
  ASSERT_GE(readProgram.values_size(), 3);
  EXPECT_EQ(readProgram.values(0).kind(), plan::Value::TOKEN_IDS);
  EXPECT_EQ(readProgram.values(1).kind(), plan::Value::POSITIONS);
  const plan::Value &logits = readProgram.values(readProgram.values_size() - 1);
  EXPECT_EQ(logits.kind(), plan::Value::LOGITS);
  EXPECT_EQ(logits.width(), 10);
  auto function = *module->getOps<func::FuncOp>().begin();
  EXPECT_EQ(readProgram.arena_bytes_per_token(),
            function->getAttrOfType<IntegerAttr>(llmc::llm::kArenaBytesPerTokenAttr).getInt());
  std::vector<int64_t> irOffsets;
  function.walk([&](Operation *op) {
    if (auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(llmc::llm::kArenaOffsetsAttr))
      for (int64_t offset : offsets.asArrayRef())
        irOffsets.push_back(offset);
  });
  ASSERT_EQ(static_cast<int>(irOffsets.size()), readProgram.values_size() - 2);
  for (int i = 2; i < readProgram.values_size() - 1; ++i) {
    EXPECT_EQ(readProgram.values(i).kind(), plan::Value::ACTIVATION);
    EXPECT_EQ(readProgram.values(i).arena_offset_per_token(), irOffsets[i - 2]);
    EXPECT_LE(readProgram.values(i).arena_offset_per_token() + readProgram.values(i).width() * 4,
              readProgram.arena_bytes_per_token());
  }

  // The fused qkv matmul: one concatenated f16 weight [8+4+4, 8] and one f32 bias [16].
  const plan::Op &qkv = readProgram.ops(2);
  ASSERT_EQ(qkv.weights_size(), 2);
  ASSERT_EQ(qkv.outputs_size(), 3);
  EXPECT_EQ(readProgram.values(qkv.outputs(0)).width(), 8);
  EXPECT_EQ(readProgram.values(qkv.outputs(1)).width(), 4);
  EXPECT_EQ(readProgram.values(qkv.outputs(2)).width(), 4);
  int weightIndex = 0, biasIndex = 0;
  const plan::Tensor &qkvWeight =
      tensorNamed(read, "model.layers.0.self_attn.qkv_proj.weight", &weightIndex);
  const plan::Tensor &qkvBias =
      tensorNamed(read, "model.layers.0.self_attn.qkv_proj.bias", &biasIndex);
  EXPECT_EQ(qkv.weights(0), weightIndex);
  EXPECT_EQ(qkv.weights(1), biasIndex);
  EXPECT_EQ(qkvWeight.dtype(), plan::F16);
  EXPECT_EQ(std::vector<int64_t>(qkvWeight.shape().begin(), qkvWeight.shape().end()),
            (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(qkvBias.dtype(), plan::F32);
  EXPECT_EQ(qkvBias.size_bytes(), 16u * 4);

  std::vector<float> expectedWeight, expectedBias;
  for (const char *part : {"q", "k", "v"}) {
    std::string prefix = std::string("model.layers.0.self_attn.") + part + "_proj.";
    for (float value : weights.entries[prefix + "weight"].values)
      expectedWeight.push_back(value);
    for (float value : weights.entries[prefix + "bias"].values)
      expectedBias.push_back(value);
  }
  ASSERT_EQ(qkvWeight.size_bytes(), expectedWeight.size() * 2);
  // The pipeline's llm-tile-cpu packed the 16 x 8 matrix as one 16-row panel stored column by
  // column: element (r, c) at c * 16 + r (plan.proto, ROW_PANELS).
  EXPECT_EQ(qkvWeight.layout(), plan::Tensor::ROW_PANELS);
  EXPECT_EQ(qkvWeight.panel_rows(), 16);
  const uint8_t *weightBlob = (*opened)->blob(weightIndex);
  for (size_t i = 0; i < expectedWeight.size(); ++i) {
    const size_t row = i / 8, col = i % 8;
    uint16_t bits;
    std::memcpy(&bits, weightBlob + 2 * (col * 16 + row), 2);
    ASSERT_EQ(bits, plan::F32ToF16(expectedWeight[i])) << "row " << row << " col " << col;
  }
  EXPECT_EQ(std::memcmp((*opened)->blob(biasIndex), expectedBias.data(), qkvBias.size_bytes()), 0);

  // Norm weights stay f32 exactly; gate/up are concatenated too.
  int normIndex = 0, gateUpIndex = 0;
  const plan::Tensor &norm = tensorNamed(read, "model.norm.weight", &normIndex);
  EXPECT_EQ(norm.dtype(), plan::F32);
  EXPECT_EQ(std::memcmp((*opened)->blob(normIndex),
                        weights.entries["model.norm.weight"].values.data(), 8 * 4),
            0);
  tensorNamed(read, "model.layers.0.mlp.gate_up_proj.weight", &gateUpIndex);
  EXPECT_EQ(readProgram.ops(8).weights(0), gateUpIndex);

  // Tied lm_head: logits reuse the embedding's entry; nothing is written twice.
  EXPECT_EQ(readProgram.ops(0).weights(0), readProgram.ops(12).weights(0));
  std::set<std::string> names;
  for (const plan::Tensor &tensor : read.tensors())
    EXPECT_TRUE(names.insert(tensor.name()).second) << tensor.name();
  // embed, 3 norms, qkv w+b, o, gate_up, down.
  EXPECT_EQ(read.tensors_size(), 9);

  // Op attributes.
  const plan::Op &rope = readProgram.ops(3);
  EXPECT_EQ(rope.rope().num_heads(), 2);
  EXPECT_EQ(rope.rope().head_dim(), 4);
  EXPECT_EQ(rope.rope().config().scaling(), plan::RopeConfig::LLAMA3);
  EXPECT_EQ(rope.rope().config().original_max_position_embeddings(), 8192);
  EXPECT_DOUBLE_EQ(rope.rope().config().theta(), 500000.0);
  EXPECT_EQ(rope.inputs(1), 1); // positions
  const plan::Op &attention = readProgram.ops(5);
  EXPECT_EQ(attention.attention().num_kv_heads(), 1);
  EXPECT_EQ(attention.attention().sliding_window(), 32);
  EXPECT_DOUBLE_EQ(attention.attention().scale(), 0.5);
  EXPECT_DOUBLE_EQ(readProgram.ops(1).norm().eps(), 1e-6);

  // Kernels: one CPU table, names shared between ops of the same kind and dtype.
  ASSERT_EQ(readProgram.kernel_tables_size(), 1);
  const plan::KernelTable &table = readProgram.kernel_tables(0);
  EXPECT_EQ(table.target(), "cpu");
  EXPECT_EQ(table.kernels(qkv.kernel()).name(), "cpu.matmul.f16");
  EXPECT_EQ(readProgram.ops(10).kernel(), qkv.kernel());
  EXPECT_EQ(table.kernels(rope.kernel()).name(), "cpu.rope.f32");
  std::set<std::string> kernelNames;
  for (const auto &kernel : table.kernels())
    EXPECT_TRUE(kernelNames.insert(kernel.name()).second) << kernel.name();
  std::filesystem::remove(path);
}

TEST_F(EmitProgramTest, RejectsWeightWhoseShapeDisagreesWithIr) {
  ASSERT_TRUE(module);
  ASSERT_TRUE(llmc::runPipeline(*module).ok());
  MapWeightSource weights(*module);
  weights.entries["model.layers.0.mlp.down_proj.weight"].shape = {16, 8};
  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  std::vector<plan::Tensor> tensors;
  absl::StatusOr<plan::Program> program =
      llmc::emitProgram(*module, weights, plan::BF16, **writer, &tensors);
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().message(),
            "test.safetensors: tensor model.layers.0.mlp.down_proj.weight has shape [16, 8], the "
            "IR's llm.param expects [8, 16]");
}

TEST_F(EmitProgramTest, RequiresMemoryPlan) {
  ASSERT_TRUE(module);
  MapWeightSource weights(*module);
  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  std::vector<plan::Tensor> tensors;
  absl::StatusOr<plan::Program> program =
      llmc::emitProgram(*module, weights, plan::F32, **writer, &tensors);
  EXPECT_EQ(program.status().code(), absl::StatusCode::kFailedPrecondition);
}

// Reads (row, col) of a quantized plan tensor straight from plan.proto's Quantization comment,
// independently of compiler/quant: the codes' byte layout, the scales and zero points.
float dequantizedFromPlan(const plan::Plan &opened, int index, int64_t row, int64_t col) {
  const plan::Tensor &tensor = opened.meta().tensors(index);
  const plan::Quantization &q = tensor.quantization();
  const int64_t cols = tensor.shape(1), groups = cols / q.group_size();
  const uint8_t *codes = opened.blob(index);
  uint16_t scaleBits;
  std::memcpy(&scaleBits, opened.blob(q.scales()) + 2 * (row * groups + col / q.group_size()), 2);
  const float scale = plan::F16ToF32(scaleBits);
  if (tensor.dtype() == plan::I8)
    return static_cast<float>(static_cast<int8_t>(codes[row * cols + col])) * scale;
  // LANE_CHUNKS: chunks of 8 runs of 32 columns (the last holds the rest); in slice v of a chunk
  // of n runs, byte 4j + i holds columns 8v + i (low nibble) and 8v + 4 + i (high) of run j.
  EXPECT_EQ(tensor.layout(), plan::Tensor::LANE_CHUNKS) << tensor.name();
  const int64_t run = col / 32, offset = col % 32, first = run / 8 * 8;
  const int64_t chunkRuns = std::min<int64_t>(8, cols / 32 - first);
  const uint8_t byte =
      codes[row * cols / 2 + first * 16 + offset / 8 * 4 * chunkRuns + run % 8 * 4 + offset % 4];
  const int code = offset % 8 < 4 ? byte & 15 : byte >> 4;
  const int zero = q.scheme() == plan::Quantization::ASYMMETRIC
                       ? opened.blob(q.zero_points())[row * groups + col / q.group_size()]
                       : 8;
  return static_cast<float>(code - zero) * scale;
}

// Emits `module` after the pipeline with `quantize`, and returns the opened plan.
std::unique_ptr<plan::Plan> emitQuantized(ModuleOp module, const llmc::WeightSource &weights,
                                          const llmc::QuantizeWeightsPassOptions &quantize,
                                          const std::string &path) {
  llmc::PipelineOptions options;
  options.quantize = quantize;
  absl::Status pipeline = llmc::runPipeline(module, options);
  EXPECT_TRUE(pipeline.ok()) << pipeline;
  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
  EXPECT_TRUE(writer.ok());
  std::vector<plan::Tensor> tensors;
  absl::StatusOr<plan::Program> program =
      llmc::emitProgram(module, weights, plan::F32, **writer, &tensors);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok())
    return nullptr;
  plan::PlanMeta meta;
  *meta.mutable_program() = *program;
  for (plan::Tensor &tensor : tensors)
    *meta.add_tensors() = tensor;
  meta.set_weight_dtype(plan::F32);
  EXPECT_TRUE((*writer)->Finish(meta).ok());
  absl::StatusOr<std::unique_ptr<plan::Plan>> opened =
      plan::Plan::Open(path, {.verify_blob_checksums = true});
  EXPECT_TRUE(opened.ok()) << opened.status();
  return opened.ok() ? *std::move(opened) : nullptr;
}

TEST_F(EmitProgramTest, Int8PerChannelConcatenatesFusedParts) {
  ASSERT_TRUE(module);
  MapWeightSource weights(*module);
  llmc::QuantizeWeightsPassOptions quantize; // int8, one scale per output channel
  std::unique_ptr<plan::Plan> opened = emitQuantized(*module, weights, quantize, path);
  ASSERT_TRUE(opened);
  const plan::PlanMeta &read = opened->meta();
  int qkvIndex = 0;
  const plan::Tensor &qkv =
      tensorNamed(read, "model.layers.0.self_attn.qkv_proj.weight", &qkvIndex);
  EXPECT_EQ(qkv.dtype(), plan::I8);
  EXPECT_EQ(qkv.layout(), plan::Tensor::ROW_MAJOR);
  EXPECT_EQ(qkv.size_bytes(), 16u * 8);
  EXPECT_EQ(qkv.quantization().bits(), 8);
  EXPECT_EQ(qkv.quantization().group_size(), 8);
  EXPECT_EQ(qkv.quantization().scheme(), plan::Quantization::SYMMETRIC);
  EXPECT_EQ(qkv.quantization().method(), "rtn");
  EXPECT_FALSE(qkv.quantization().has_zero_points());
  const plan::Tensor &scales = read.tensors(qkv.quantization().scales());
  EXPECT_EQ(scales.name(), "model.layers.0.self_attn.qkv_proj.weight.scales");
  EXPECT_EQ(scales.dtype(), plan::F16);
  EXPECT_EQ(std::vector<int64_t>(scales.shape().begin(), scales.shape().end()),
            (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(read.program().kernel_tables(0).kernels(read.program().ops(2).kernel()).name(),
            "cpu.matmul.i8");
  // Rows q (8), k (4), v (4): each within half a step (absmax / 127 / 2) of the float weight.
  int row = 0;
  for (const char *part : {"q", "k", "v"}) {
    const auto &entry =
        weights.entries[std::string("model.layers.0.self_attn.") + part + "_proj.weight"];
    for (int64_t r = 0; r < entry.shape[0]; ++r, ++row) {
      float magnitude = 0;
      for (int64_t c = 0; c < 8; ++c)
        magnitude = std::max(magnitude, std::fabs(entry.values[r * 8 + c]));
      for (int64_t c = 0; c < 8; ++c)
        EXPECT_NEAR(dequantizedFromPlan(*opened, qkvIndex, row, c), entry.values[r * 8 + c],
                    magnitude / 127 / 2 * 1.01)
            << part << " row " << r << " col " << c;
    }
  }
  // Embedding (tied lm_head) and norms stay float.
  int embedIndex = 0;
  EXPECT_EQ(tensorNamed(read, "model.embed_tokens.weight", &embedIndex).dtype(), plan::F32);
  std::filesystem::remove(path);
}

constexpr const char *kInt4Module = R"mlir(
llm.param @table : tensor<16x64xf32>
llm.param @w : tensor<48x64xf32>
llm.param @head : tensor<16x48xf32>
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x16xf32> {
  %x = llm.embed %tokens {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  %y = llm.matmul %x {weights = [@w]} : tensor<?x64xf32> -> tensor<?x48xf32>
  %l = llm.logits %y {weight = @head} : tensor<?x48xf32> -> tensor<?x16xf32>
  return %l : tensor<?x16xf32>
}
)mlir";

TEST_F(EmitProgramTest, Int4AsymmetricMatchesReferenceQuantizer) {
  OwningOpRef<ModuleOp> int4 = parseSourceString<ModuleOp>(kInt4Module, &context);
  ASSERT_TRUE(int4);
  MapWeightSource weights(*int4);
  // Distinct, sign-mixed values, so every group has its own range.
  for (auto &[name, entry] : weights.entries)
    for (size_t i = 0; i < entry.values.size(); ++i)
      entry.values[i] = std::sin(0.37f * static_cast<float>(i) + name.size());
  llmc::QuantizeWeightsPassOptions quantize;
  quantize.bits = 4;
  quantize.groupSize = 32;
  quantize.scheme = "asymmetric";
  std::unique_ptr<plan::Plan> opened = emitQuantized(*int4, weights, quantize, path);
  ASSERT_TRUE(opened);
  const plan::PlanMeta &read = opened->meta();
  int wIndex = 0;
  const plan::Tensor &w = tensorNamed(read, "w", &wIndex);
  ASSERT_EQ(w.dtype(), plan::I4);
  EXPECT_EQ(w.size_bytes(), 48u * 64 / 2);
  ASSERT_EQ(w.quantization().scheme(), plan::Quantization::ASYMMETRIC);
  const plan::Tensor &zeros = read.tensors(w.quantization().zero_points());
  EXPECT_EQ(zeros.dtype(), plan::U8);
  EXPECT_EQ(std::vector<int64_t>(zeros.shape().begin(), zeros.shape().end()),
            (std::vector<int64_t>{48, 2}));
  // The plan holds exactly what the reference quantizer produces for these weights.
  absl::StatusOr<llmc::quant::QuantizedMatrix> reference =
      llmc::quant::QuantizeMatrix(weights.entries["w"].values, 48, 64, {4, 32, true});
  ASSERT_TRUE(reference.ok());
  const std::vector<float> expected = llmc::quant::DequantizeMatrix(*reference);
  double error = 0, energy = 0;
  for (int64_t r = 0; r < 48; ++r)
    for (int64_t c = 0; c < 64; ++c) {
      const float value = dequantizedFromPlan(*opened, wIndex, r, c);
      ASSERT_EQ(value, expected[r * 64 + c]) << r << ", " << c;
      const float original = weights.entries["w"].values[r * 64 + c];
      error += (value - original) * (value - original);
      energy += original * original;
    }
  EXPECT_LT(std::sqrt(error / energy), 0.1); // int4 on a sine: ~4-6%
  // The lm_head (48 columns, not a multiple of 32) and the embedding stay float.
  int headIndex = 0;
  EXPECT_EQ(tensorNamed(read, "head", &headIndex).dtype(), plan::F32);
  EXPECT_EQ(read.program().kernel_tables(0).kernels(read.program().ops(1).kernel()).name(),
            "cpu.matmul.i4");
  std::filesystem::remove(path);
}

TEST(FusedTensorNameTest, NamesConcatenatedProjections) {
  EXPECT_EQ(llmc::fusedTensorName({"a.q_proj.weight", "a.k_proj.weight", "a.v_proj.weight"}),
            "a.qkv_proj.weight");
  EXPECT_EQ(llmc::fusedTensorName({"m.gate_proj.bias", "m.up_proj.bias"}), "m.gate_up_proj.bias");
  EXPECT_EQ(llmc::fusedTensorName({"x.w1", "y.w2"}), "x.w1+y.w2");
}

} // namespace
