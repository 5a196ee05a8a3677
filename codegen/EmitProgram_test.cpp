//===- EmitProgram_test.cpp - codegen to a real plan file, read back -------===//

#include "codegen/EmitProgram.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "passes/Passes.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"
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
  // Distinct, sign-mixed values, so every quantization group has its own range.
  void fillWithSines() {
    for (auto &[name, entry] : entries)
      for (size_t i = 0; i < entry.values.size(); ++i)
        entry.values[i] = std::sin(0.37f * static_cast<float>(i) + name.size());
  }
  void releaseWeights(llvm::ArrayRef<std::string> names) const override {
    released.insert(released.end(), names.begin(), names.end());
  }
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  std::map<std::string, Entry> entries;
  mutable std::vector<std::string> released; // releaseWeights' names, in order
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
  // 3-D expert weights: `row` counts the rows of all experts ([E * N, K]).
  const int64_t cols = tensor.shape(tensor.shape_size() - 1), groups = cols / q.group_size();
  const uint8_t *codes = opened.blob(index);
  float scale;
  if (tensor.dtype() == plan::FP4_E2M1) {
    // E8M0 byte b: 2^(b - 127).
    scale = std::ldexp(1.0f, opened.blob(q.scales())[row * groups + col / q.group_size()] - 127);
  } else {
    uint16_t scaleBits;
    std::memcpy(&scaleBits, opened.blob(q.scales()) + 2 * (row * groups + col / q.group_size()), 2);
    scale = plan::F16ToF32(scaleBits);
  }
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
  if (tensor.dtype() == plan::FP4_E2M1) {
    // E2M1: bit 3 the sign, then the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
    constexpr float kMagnitude[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    return (code & 8 ? -1.0f : 1.0f) * kMagnitude[code & 7] * scale;
  }
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
  weights.fillWithSines();
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

// A mixture of experts: attention with sinks, a router, two experts' gate/up/down and the
// combine. hidden 32, 2 heads of 16, expert size 16, top 2.
constexpr const char *kMoeModule = R"mlir(
llm.param @model.embed_tokens.weight : tensor<10x32xf32>
llm.param @model.layers.0.self_attn.sinks : tensor<2xf32>
llm.param @model.layers.0.mlp.gate.weight : tensor<2x32xf32>
llm.param @model.layers.0.mlp.experts.0.gate_proj.weight : tensor<16x32xf32>
llm.param @model.layers.0.mlp.experts.0.up_proj.weight : tensor<16x32xf32>
llm.param @model.layers.0.mlp.experts.0.down_proj.weight : tensor<32x16xf32>
llm.param @model.layers.0.mlp.experts.1.gate_proj.weight : tensor<16x32xf32>
llm.param @model.layers.0.mlp.experts.1.up_proj.weight : tensor<16x32xf32>
llm.param @model.layers.0.mlp.experts.1.down_proj.weight : tensor<32x16xf32>
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %x = llm.embed %tokens {table = @model.embed_tokens.weight} : tensor<?xi32> -> tensor<?x32xf32>
  %a = llm.attention %x, %x, %x {layer = 0, num_heads = 2, num_kv_heads = 2, head_dim = 16, scale = 0.25, sinks = @model.layers.0.self_attn.sinks} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %l = llm.matmul %a {weights = [@model.layers.0.mlp.gate.weight]} : tensor<?x32xf32> -> tensor<?x2xf32>
  %ids, %w = llm.router %l {num_experts = 2, top_k = 2, scoring = "softmax_topk", normalize = true} : tensor<?x2xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %g = llm.expert_matmul %a, %ids {num_experts = 2, top_k = 2, weights = [[@model.layers.0.mlp.experts.0.gate_proj.weight, @model.layers.0.mlp.experts.1.gate_proj.weight]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %u = llm.expert_matmul %a, %ids {num_experts = 2, top_k = 2, weights = [[@model.layers.0.mlp.experts.0.up_proj.weight, @model.layers.0.mlp.experts.1.up_proj.weight]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %s = llm.silu %g : tensor<?x32xf32>
  %m = llm.mul %s, %u : tensor<?x32xf32>
  %d = llm.expert_matmul %m, %ids {num_experts = 2, top_k = 2, weights = [[@model.layers.0.mlp.experts.0.down_proj.weight, @model.layers.0.mlp.experts.1.down_proj.weight]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x64xf32>
  %y = llm.moe_combine %d, %w : tensor<?x64xf32>, tensor<?x2xf32> -> tensor<?x32xf32>
  %f = llm.logits %y {weight = @model.embed_tokens.weight} : tensor<?x32xf32> -> tensor<?x10xf32>
  return %f : tensor<?x10xf32>
}
)mlir";

std::vector<int64_t> shapeOf(const plan::Tensor &tensor) {
  return std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end());
}

const plan::Op &opOfKind(const plan::Program &program, plan::OpKind kind) {
  for (const plan::Op &op : program.ops())
    if (op.kind() == kind)
      return op;
  ADD_FAILURE() << "no op " << plan::OpKind_Name(kind);
  return program.ops(0);
}

// Expert matmuls become one 3-D tensor per fused op: [E, gate rows + up rows, K], each expert's
// gate rows then up rows, panelled per expert; the router, ids, combine, sinks as plan.proto says.
TEST_F(EmitProgramTest, ExpertWeightsAre3dPerExpertPanels) {
  OwningOpRef<ModuleOp> moe = parseSourceString<ModuleOp>(kMoeModule, &context);
  ASSERT_TRUE(moe);
  ASSERT_TRUE(llmc::runPipeline(*moe).ok());
  MapWeightSource weights(*moe);
  absl::StatusOr<std::unique_ptr<plan::PlanWriter>> writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  std::vector<plan::Tensor> tensors;
  int64_t progressTotal = 0;
  absl::StatusOr<plan::Program> program =
      llmc::emitProgram(*moe, weights, plan::F16, **writer, &tensors,
                        [&](int64_t, int64_t total, uint64_t) { progressTotal = total; });
  ASSERT_TRUE(program.ok()) << program.status();
  // Embedding, router, gate_up, down, sinks.
  EXPECT_EQ(progressTotal, 5);
  plan::PlanMeta meta;
  *meta.mutable_program() = *program;
  for (plan::Tensor &tensor : tensors)
    *meta.add_tensors() = tensor;
  ASSERT_TRUE((*writer)->Finish(meta).ok());
  absl::StatusOr<std::unique_ptr<plan::Plan>> opened =
      plan::Plan::Open(path, {.verify_blob_checksums = true});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta &read = (*opened)->meta();

  int index = 0;
  const plan::Tensor &gateUp =
      tensorNamed(read, "model.layers.0.mlp.experts.gate_up_proj.weight", &index);
  EXPECT_EQ(shapeOf(gateUp), (std::vector<int64_t>{2, 32, 32}));
  EXPECT_EQ(gateUp.dtype(), plan::F16);
  ASSERT_EQ(gateUp.layout(), plan::Tensor::ROW_PANELS);
  ASSERT_EQ(gateUp.panel_rows(), 16);
  EXPECT_EQ(gateUp.size_bytes(), 2u * 32 * 32 * 2);
  // ROW_PANELS of the [E * 32, 32] matrix: row R, column c at (R / 16) * 16 * 32 + c * 16 + R % 16.
  const auto *packed = reinterpret_cast<const uint16_t *>((*opened)->blob(index));
  for (int expert = 0; expert < 2; ++expert)
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t c = 0; c < 32; ++c) {
        const std::string part = absl::StrCat("model.layers.0.mlp.experts.", expert,
                                              r < 16 ? ".gate_proj.weight" : ".up_proj.weight");
        const float expected = weights.entries[part].values[(r % 16) * 32 + c];
        const int64_t R = expert * 32 + r;
        ASSERT_EQ(packed[(R / 16) * 16 * 32 + c * 16 + R % 16], plan::F32ToF16(expected))
            << "expert " << expert << " row " << r << " col " << c;
      }
  const plan::Tensor &down =
      tensorNamed(read, "model.layers.0.mlp.experts.down_proj.weight", &index);
  EXPECT_EQ(shapeOf(down), (std::vector<int64_t>{2, 32, 16}));

  // Sinks are f32 in an f16 plan.
  const plan::Tensor &sinks = tensorNamed(read, "model.layers.0.self_attn.sinks", &index);
  EXPECT_EQ(sinks.dtype(), plan::F32);
  EXPECT_EQ(shapeOf(sinks), (std::vector<int64_t>{2}));
  const plan::Op &attention = opOfKind(read.program(), plan::ATTENTION);
  ASSERT_EQ(attention.weights_size(), 1);
  EXPECT_EQ(attention.weights(0), index);

  const plan::Op &router = opOfKind(read.program(), plan::ROUTER);
  EXPECT_EQ(router.router().num_experts(), 2);
  EXPECT_EQ(router.router().top_k(), 2);
  EXPECT_EQ(router.router().scoring(), plan::RouterAttrs::SOFTMAX_TOPK);
  EXPECT_TRUE(router.router().normalize());
  const plan::Value &ids = read.program().values(router.outputs(0));
  EXPECT_EQ(ids.kind(), plan::Value::EXPERT_IDS);
  EXPECT_EQ(ids.dtype(), plan::I32);
  EXPECT_EQ(ids.width(), 2);
  int experts = 0;
  for (const plan::Op &op : read.program().ops()) {
    if (op.kind() != plan::EXPERT_MATMUL)
      continue;
    ++experts;
    EXPECT_EQ(op.expert().num_experts(), 2);
    EXPECT_EQ(op.expert().top_k(), 2);
    EXPECT_EQ(op.inputs(1), router.outputs(0));
    EXPECT_EQ(read.program().kernel_tables(0).kernels(op.kernel()).name(), "cpu.expert_matmul.f16");
  }
  EXPECT_EQ(experts, 2); // gate/up fused
  EXPECT_EQ(opOfKind(read.program(), plan::MOE_COMBINE).inputs_size(), 2);
  // Every expert part is released once its tensor is written.
  EXPECT_EQ(std::set<std::string>(weights.released.begin(), weights.released.end()).size(), 6u);
  EXPECT_EQ(weights.released.front(), "model.layers.0.mlp.experts.0.gate_proj.weight");
  absl::StatusOr<plan::ProgramFacts> facts =
      plan::CheckProgram(read, [&](int tensor) { return (*opened)->blob(tensor); });
  EXPECT_TRUE(facts.ok()) << facts.status();
  std::filesystem::remove(path);
}

// Quantized experts: codes [E, N, K] with companions [E, N, groups]; int8 per channel, int4 g32
// and MXFP4 (FP4_E2M1 codes + E8M0 scales), each decoded from the plan by plan.proto's rules.
TEST_F(EmitProgramTest, QuantizedExpertsHave3dCompanions) {
  struct Case {
    int64_t bits, groupSize;
    const char *scheme;
    plan::DType codes, scales;
    const char *kernel;
  };
  for (const Case &c :
       {Case{8, 0, "symmetric", plan::I8, plan::F16, "cpu.expert_matmul.i8"},
        Case{4, 32, "asymmetric", plan::I4, plan::F16, "cpu.expert_matmul.i4"},
        Case{4, 32, "mxfp4", plan::FP4_E2M1, plan::E8M0, "cpu.expert_matmul.mxfp4"}}) {
    SCOPED_TRACE(c.scheme);
    OwningOpRef<ModuleOp> moe = parseSourceString<ModuleOp>(kMoeModule, &context);
    ASSERT_TRUE(moe);
    MapWeightSource weights(*moe);
    weights.fillWithSines();
    llmc::QuantizeWeightsPassOptions quantize;
    quantize.bits = c.bits;
    quantize.groupSize = c.groupSize;
    quantize.scheme = c.scheme;
    std::unique_ptr<plan::Plan> opened = emitQuantized(*moe, weights, quantize, path);
    ASSERT_TRUE(opened);
    const plan::PlanMeta &read = opened->meta();
    int index = 0;
    const plan::Tensor &gateUp =
        tensorNamed(read, "model.layers.0.mlp.experts.gate_up_proj.weight", &index);
    EXPECT_EQ(gateUp.dtype(), c.codes);
    EXPECT_EQ(shapeOf(gateUp), (std::vector<int64_t>{2, 32, 32}));
    const int64_t groups = c.groupSize == 0 ? 1 : 32 / c.groupSize;
    const plan::Tensor &scales = read.tensors(gateUp.quantization().scales());
    EXPECT_EQ(scales.name(), "model.layers.0.mlp.experts.gate_up_proj.weight.scales");
    EXPECT_EQ(scales.dtype(), c.scales);
    EXPECT_EQ(shapeOf(scales), (std::vector<int64_t>{2, 32, groups}));
    if (gateUp.quantization().has_zero_points())
      EXPECT_EQ(shapeOf(read.tensors(gateUp.quantization().zero_points())),
                (std::vector<int64_t>{2, 32, groups}));
    EXPECT_EQ(gateUp.quantization().method(), "rtn");
    // Expert e's rows of the plan decode (by plan.proto's rules) to exactly what the reference
    // quantizer makes of its gate, then its up matrix.
    const llmc::quant::QuantFormat format =
        c.codes == plan::FP4_E2M1
            ? llmc::quant::QuantFormat::Mxfp4()
            : llmc::quant::QuantFormat{static_cast<int>(c.bits),
                                       c.groupSize == 0 ? 32 : c.groupSize, c.codes == plan::I4};
    for (int expert = 0; expert < 2; ++expert)
      for (const char *projection : {"gate_proj", "up_proj"}) {
        const std::vector<float> &values =
            weights
                .entries[absl::StrCat("model.layers.0.mlp.experts.", expert, ".", projection,
                                      ".weight")]
                .values;
        absl::StatusOr<llmc::quant::QuantizedMatrix> reference =
            llmc::quant::QuantizeMatrix(values, 16, 32, format);
        ASSERT_TRUE(reference.ok()) << reference.status();
        const std::vector<float> expected = llmc::quant::DequantizeMatrix(*reference);
        const int64_t first = expert * 32 + (std::string(projection) == "up_proj" ? 16 : 0);
        for (int64_t r = 0; r < 16; ++r)
          for (int64_t col = 0; col < 32; ++col)
            ASSERT_EQ(dequantizedFromPlan(*opened, index, first + r, col), expected[r * 32 + col])
                << "expert " << expert << " " << projection << " row " << r << " col " << col;
      }
    EXPECT_EQ(read.program()
                  .kernel_tables(0)
                  .kernels(opOfKind(read.program(), plan::EXPERT_MATMUL).kernel())
                  .name(),
              c.kernel);
    // The router stays float (routing decisions are not quantized).
    EXPECT_EQ(tensorNamed(read, "model.layers.0.mlp.gate.weight", &index).dtype(), plan::F32);
    absl::StatusOr<plan::ProgramFacts> facts =
        plan::CheckProgram(read, [&](int tensor) { return opened->blob(tensor); });
    EXPECT_TRUE(facts.ok()) << facts.status();
    std::filesystem::remove(path);
  }
}

TEST(FusedTensorNameTest, NamesConcatenatedProjections) {
  EXPECT_EQ(llmc::fusedTensorName({"a.q_proj.weight", "a.k_proj.weight", "a.v_proj.weight"}),
            "a.qkv_proj.weight");
  EXPECT_EQ(llmc::fusedTensorName({"m.gate_proj.bias", "m.up_proj.bias"}), "m.gate_up_proj.bias");
  EXPECT_EQ(llmc::fusedTensorName({"x.w1", "y.w2"}), "x.w1+y.w2");
}

} // namespace
