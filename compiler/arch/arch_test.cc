#include "compiler/arch/arch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/arch/family.h"
#include "compiler/arch/family_config.h"
#include "compiler/arch/weight_source.h"
#include "compiler/importer/checkpoint.h"
#include "compiler/importer/hf_config.h"
#include "gtest/gtest.h"
#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "nlohmann/json.hpp"
#include "passes/Passes.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"

namespace llmc {
namespace {

namespace plan = llmrt::plan;

// vocab 32, hidden 16, 4 query heads and 2 kv heads of 4, intermediate 24, 2 layers.
plan::ModelConfig SmallConfig(const std::string& architecture) {
  plan::ModelConfig config;
  config.set_architecture(architecture);
  config.set_vocab_size(32);
  config.set_hidden_size(16);
  config.set_intermediate_size(24);
  config.set_num_layers(2);
  config.set_num_attention_heads(4);
  config.set_num_kv_heads(2);
  config.set_head_dim(4);
  config.set_rms_norm_eps(1e-5);
  config.mutable_rope()->set_theta(10000);
  config.set_hidden_act("silu");
  config.set_tie_word_embeddings(true);
  if (architecture == "Qwen2ForCausalLM") config.set_attention_bias(true);
  if (architecture == "Qwen3ForCausalLM") config.set_tie_word_embeddings(false);
  if (architecture == "MistralForCausalLM") config.set_sliding_window(8);
  if (architecture == "Olmo2ForCausalLM") config.set_tie_word_embeddings(false);
  return config;
}

// Entry `name` of `map`: `shape` elements of `dtype`, `bytes` at `data` (borrowed).
void AddTensor(TensorMap& map, const std::string& name, std::vector<int64_t> shape,
               plan::DType dtype, const void* data, uint64_t bytes) {
  TensorInfo& info = map[name];
  info.name = name;
  info.file = "model.safetensors";
  info.dtype = dtype;
  info.shape = std::move(shape);
  info.data = static_cast<const uint8_t*>(data);
  info.size_bytes = bytes;
}

// A checkpoint's tensors, F16 with real data so codegen can read them.
class FakeCheckpoint {
 public:
  void Add(const std::string& name, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    std::vector<uint16_t>& data = storage_[name];
    for (int64_t i = 0; i < count; ++i) data.push_back(static_cast<uint16_t>(0x3c00 + i % 512));
    AddTensor(tensors_, name, std::move(shape), plan::F16, data.data(), data.size() * 2);
  }
  void Remove(const std::string& name) { tensors_.erase(name); }
  TensorInfo& at(const std::string& name) { return tensors_.at(name); }
  const TensorMap& tensors() const { return tensors_; }

 private:
  std::map<std::string, std::vector<uint16_t>> storage_;
  TensorMap tensors_;
};

FakeCheckpoint MakeCheckpoint(const plan::ModelConfig& config) {
  FakeCheckpoint checkpoint;
  const int64_t hidden = 16, q = 16, kv = 8, inter = 24;
  checkpoint.Add("model.embed_tokens.weight", {32, hidden});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    const bool olmo2 = config.architecture() == "Olmo2ForCausalLM";
    // OLMo2 has no pre-norms; its norms follow attention and the MLP.
    checkpoint.Add(p + (olmo2 ? "post_feedforward_layernorm.weight" : "input_layernorm.weight"),
                   {hidden});
    const bool phi3 = config.architecture() == "Phi3ForCausalLM";  // fused projections on disk
    if (phi3) {
      checkpoint.Add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, hidden});
    } else {
      checkpoint.Add(p + "self_attn.q_proj.weight", {q, hidden});
      checkpoint.Add(p + "self_attn.k_proj.weight", {kv, hidden});
      checkpoint.Add(p + "self_attn.v_proj.weight", {kv, hidden});
    }
    if (config.attention_bias()) {
      checkpoint.Add(p + "self_attn.q_proj.bias", {q});
      checkpoint.Add(p + "self_attn.k_proj.bias", {kv});
      checkpoint.Add(p + "self_attn.v_proj.bias", {kv});
      // Llama's and Qwen3's attention_bias covers o_proj too; Qwen2's biases are q/k/v only.
      if (config.architecture() != "Qwen2ForCausalLM")
        checkpoint.Add(p + "self_attn.o_proj.bias", {hidden});
    }
    const std::string& family = config.architecture();
    if (family == "Qwen3ForCausalLM" || family == "Gemma3ForCausalLM") {
      checkpoint.Add(p + "self_attn.q_norm.weight", {4});
      checkpoint.Add(p + "self_attn.k_norm.weight", {4});
    }
    if (family == "Gemma2ForCausalLM" || family == "Gemma3ForCausalLM") {  // sandwich norms
      checkpoint.Add(p + "pre_feedforward_layernorm.weight", {hidden});
      checkpoint.Add(p + "post_feedforward_layernorm.weight", {hidden});
    }
    if (olmo2) {  // over the whole projection
      checkpoint.Add(p + "self_attn.q_norm.weight", {q});
      checkpoint.Add(p + "self_attn.k_norm.weight", {kv});
    }
    if (config.mlp_bias()) {
      checkpoint.Add(p + "mlp.gate_proj.bias", {inter});
      checkpoint.Add(p + "mlp.up_proj.bias", {inter});
      checkpoint.Add(p + "mlp.down_proj.bias", {hidden});
    }
    checkpoint.Add(p + "self_attn.o_proj.weight", {hidden, q});
    checkpoint.Add(p + "post_attention_layernorm.weight", {hidden});
    if (phi3) {
      checkpoint.Add(p + "mlp.gate_up_proj.weight", {2 * inter, hidden});
    } else {
      checkpoint.Add(p + "mlp.gate_proj.weight", {inter, hidden});
      checkpoint.Add(p + "mlp.up_proj.weight", {inter, hidden});
    }
    checkpoint.Add(p + "mlp.down_proj.weight", {hidden, inter});
    checkpoint.Add(p + "self_attn.rotary_emb.inv_freq", {2});
  }
  checkpoint.Add("model.norm.weight", {hidden});
  if (!config.tie_word_embeddings()) checkpoint.Add("lm_head.weight", {32, hidden});
  return checkpoint;
}

// What ValidateTensors says once `name` is removed from the checkpoint.
std::string ErrorWithout(const plan::ModelConfig& config, FakeCheckpoint& checkpoint,
                         const std::string& name) {
  checkpoint.Remove(name);
  return std::string(ValidateTensors(config, checkpoint.tensors()).message());
}

// Codegen of a module that went through the pipeline: an f16 plan at `path`, opened.
absl::StatusOr<std::unique_ptr<plan::Plan>> WriteF16Plan(mlir::ModuleOp module,
                                                         const FakeCheckpoint& checkpoint,
                                                         const std::string& path) {
  auto writer = plan::PlanWriter::Create(path);
  if (!writer.ok()) return writer.status();
  TensorMapWeightSource weights(checkpoint.tensors());
  std::vector<plan::Tensor> tensors;
  auto program = emitProgram(module, weights, plan::F16, **writer, &tensors);
  if (!program.ok()) return program.status();
  plan::PlanMeta meta;
  *meta.mutable_program() = *program;
  for (const plan::Tensor& tensor : tensors) *meta.add_tensors() = tensor;
  if (absl::Status status = (*writer)->Finish(meta); !status.ok()) return status;
  return plan::Plan::Open(path, {.verify_blob_checksums = true});
}

std::map<std::string, int> CountOps(mlir::ModuleOp module) {
  std::map<std::string, int> counts;
  module.walk([&](mlir::Operation* op) { ++counts[op->getName().getStringRef().str()]; });
  return counts;
}

TEST(ValidateTensorsTest, AcceptsEverySupportedArchitecture) {
  for (const char* architecture : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM",
                                   "Qwen3ForCausalLM", "SmolLM3ForCausalLM", "Olmo2ForCausalLM",
                                   "Phi3ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM"}) {
    plan::ModelConfig config = SmallConfig(architecture);
    FakeCheckpoint checkpoint = MakeCheckpoint(config);
    EXPECT_TRUE(ValidateTensors(config, checkpoint.tensors()).ok()) << architecture;
  }
}

TEST(ValidateTensorsTest, RejectsUnsupportedArchitecture) {
  plan::ModelConfig config = SmallConfig("Foo");
  EXPECT_EQ(ValidateTensors(config, MakeCheckpoint(config).tensors()).message(),
            "config.json: architectures[0] is \"Foo\"; supported: " + SupportedArchitectures());
  EXPECT_NE(SupportedArchitectures().find("Phi3ForCausalLM"), std::string::npos);
}

TEST(ValidateTensorsTest, NamesWrongShape) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  checkpoint.Add("model.layers.1.mlp.up_proj.weight", {24, 15});
  EXPECT_EQ(ValidateTensors(config, checkpoint.tensors()).message(),
            "model.safetensors: tensor model.layers.1.mlp.up_proj.weight has shape [24, 15], "
            "config.json implies [24, 16]");
}

TEST(ValidateTensorsTest, NamesMissingTensor) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  EXPECT_EQ(ErrorWithout(config, checkpoint, "model.layers.1.mlp.down_proj.weight"),
            "missing tensor model.layers.1.mlp.down_proj.weight expected by config.json "
            "(num_hidden_layers=2)");
}

TEST(ValidateTensorsTest, Qwen2NeedsBiases) {
  plan::ModelConfig config = SmallConfig("Qwen2ForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  EXPECT_EQ(ErrorWithout(config, checkpoint, "model.layers.0.self_attn.k_proj.bias"),
            "missing tensor model.layers.0.self_attn.k_proj.bias expected by config.json "
            "(num_hidden_layers=2, attention_bias=true)");
}

TEST(ValidateTensorsTest, NamesUnexpectedTensor) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  checkpoint.Add("model.layers.2.mlp.up_proj.weight", {24, 16});
  EXPECT_EQ(ValidateTensors(config, checkpoint.tensors()).message(),
            "model.safetensors: unexpected tensor model.layers.2.mlp.up_proj.weight (not part of "
            "LlamaForCausalLM with num_hidden_layers=2)");
}

TEST(ValidateTensorsTest, LmHeadOptionalOnlyWhenTied) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  checkpoint.Add("lm_head.weight", {32, 16});  // tied and present: accepted, unused
  EXPECT_TRUE(ValidateTensors(config, checkpoint.tensors()).ok());
  config.set_tie_word_embeddings(false);
  EXPECT_EQ(ErrorWithout(config, checkpoint, "lm_head.weight"),
            "missing tensor lm_head.weight expected by config.json (tie_word_embeddings=false)");
}

TEST(ValidateTensorsTest, RejectsInconsistentHeads) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  config.set_num_kv_heads(3);
  EXPECT_EQ(
      ValidateTensors(config, MakeCheckpoint(SmallConfig("LlamaForCausalLM")).tensors()).message(),
      "config.json: num_attention_heads (4) is not a multiple of num_key_value_heads (3)");
}

TEST(BuildModuleTest, BuildsLlamaLayers) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  config.mutable_rope()->set_scaling(plan::RopeConfig::LLAMA3);
  config.mutable_rope()->set_factor(8);
  config.mutable_rope()->set_low_freq_factor(1);
  config.mutable_rope()->set_high_freq_factor(4);
  config.mutable_rope()->set_original_max_position_embeddings(8192);
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(mlir::succeeded(mlir::verify(**module)));
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.param"], 1 + 2 * 9 + 1);  // tied: no lm_head param
  EXPECT_EQ(counts["llm.embed"], 1);
  EXPECT_EQ(counts["llm.rms_norm"], 2 * 2 + 1);
  EXPECT_EQ(counts["llm.matmul"], 2 * 7);
  EXPECT_EQ(counts["llm.rope"], 2 * 2);
  EXPECT_EQ(counts["llm.attention"], 2);
  EXPECT_EQ(counts["llm.add"], 2 * 2);
  EXPECT_EQ(counts["llm.silu"], 2);
  EXPECT_EQ(counts["llm.mul"], 2);
  EXPECT_EQ(counts["llm.logits"], 1);

  auto param = llvm::cast<llm::ParamOp>(
      mlir::SymbolTable::lookupSymbolIn(**module, "model.layers.1.self_attn.k_proj.weight"));
  EXPECT_EQ(param.getTensorType().getShape(), llvm::ArrayRef<int64_t>({8, 16}));
  EXPECT_TRUE(param.getTensorType().getElementType().isF16());

  int layer = 0;
  (*module)->walk([&](llm::AttentionOp op) {
    EXPECT_EQ(op.getLayer(), layer++);
    EXPECT_EQ(op.getNumHeads(), 4);
    EXPECT_EQ(op.getNumKvHeads(), 2);
    EXPECT_EQ(op.getSlidingWindow(), 0);
    EXPECT_DOUBLE_EQ(op.getScale().convertToDouble(), 0.5);
  });
  (*module)->walk([&](llm::RopeOp op) {
    EXPECT_EQ(op.getScaling(), "llama3");
    EXPECT_EQ(op.getOriginalMaxPositionEmbeddings(), 8192);
  });
  (*module)->walk(
      [&](llm::LogitsOp op) { EXPECT_EQ(op.getWeight(), "model.embed_tokens.weight"); });
}

TEST(BuildModuleTest, MistralSlidingWindowAndQwen2Biases) {
  mlir::MLIRContext context;
  plan::ModelConfig mistral = SmallConfig("MistralForCausalLM");
  auto mistral_module = BuildModule(context, mistral, MakeCheckpoint(mistral).tensors());
  ASSERT_TRUE(mistral_module.ok()) << mistral_module.status();
  (*mistral_module)->walk([&](llm::AttentionOp op) { EXPECT_EQ(op.getSlidingWindow(), 8); });

  plan::ModelConfig qwen = SmallConfig("Qwen2ForCausalLM");
  qwen.set_tie_word_embeddings(false);
  FakeCheckpoint qwen_checkpoint = MakeCheckpoint(qwen);
  auto qwen_module = BuildModule(context, qwen, qwen_checkpoint.tensors());
  ASSERT_TRUE(qwen_module.ok()) << qwen_module.status();
  int with_bias = 0;
  (*qwen_module)->walk([&](llm::MatmulOp op) { with_bias += !op.getBiasRefs().empty(); });
  EXPECT_EQ(with_bias, 2 * 3);  // q, k, v; not o_proj or the MLP
  (*qwen_module)->walk([&](llm::LogitsOp op) { EXPECT_EQ(op.getWeight(), "lm_head.weight"); });
}

// Qwen3: a per-head rms_norm (weight [head_dim]) between each of the q/k projections and rope,
// and the q/k/v projections still fuse into one matmul through it.
TEST(BuildModuleTest, Qwen3NormsEachHeadOfQAndKAndStillFusesQkv) {
  plan::ModelConfig config = SmallConfig("Qwen3ForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.rms_norm"], 2 * 4 + 1);
  EXPECT_EQ(counts["llm.param"], 1 + 2 * 11 + 1 + 1);
  (*module)->walk([&](llm::RopeOp rope) {
    auto norm = rope.getX().getDefiningOp<llm::RmsNormOp>();
    ASSERT_TRUE(norm) << "rope without a q/k norm before it";
    EXPECT_EQ(norm.getGroupWidth(), 4);
    EXPECT_FALSE(norm.normalizesWholeRows());
  });
  ASSERT_TRUE(runPipeline(**module).ok());
  counts = CountOps(**module);
  int qkv = 0;
  (*module)->walk([&](llm::MatmulOp op) { qkv += op.getWeights().size() == 3; });
  EXPECT_EQ(qkv, 2);
  // The per-head norms are never fused into an add; layer 0's input norm has no add before it.
  EXPECT_EQ(counts["llm.rms_norm"], 2 * 2 + 1);
  EXPECT_EQ(counts["llm.fused_add_rms_norm"], 2 * 2);
}

// Llama's attention_bias puts a bias on o_proj too (LlamaAttention), unlike Qwen2.
TEST(BuildModuleTest, LlamaAttentionBiasCoversOProj) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  config.set_attention_bias(true);
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  int with_bias = 0;
  (*module)->walk([&](llm::MatmulOp op) { with_bias += !op.getBiasRefs().empty(); });
  EXPECT_EQ(with_bias, 2 * 4);
  EXPECT_EQ(ErrorWithout(config, checkpoint, "model.layers.0.self_attn.o_proj.bias"),
            "missing tensor model.layers.0.self_attn.o_proj.bias expected by config.json "
            "(num_hidden_layers=2, attention_bias=true)");
}

// mlp_bias: biases on gate/up/down, kept when the passes fuse gate and up into one matmul.
TEST(BuildModuleTest, LlamaMlpBiasSurvivesGateUpFusion) {
  plan::ModelConfig config = SmallConfig("LlamaForCausalLM");
  config.set_mlp_bias(true);
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  ASSERT_TRUE(runPipeline(**module).ok());
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.silu_mul"], 2);
  int gate_up = 0, down = 0;
  (*module)->walk([&](llm::MatmulOp op) {
    if (op.getWeights().size() == 2) {
      ++gate_up;
      ASSERT_EQ(op.getBiasRefs().size(), 2u);
      EXPECT_TRUE(op.getBiasRefs()[0].getValue().ends_with("mlp.gate_proj.bias"));
      EXPECT_TRUE(op.getBiasRefs()[1].getValue().ends_with("mlp.up_proj.bias"));
    }
    for (mlir::FlatSymbolRefAttr bias : op.getBiasRefs())
      down += bias.getValue().ends_with("mlp.down_proj.bias");
  });
  EXPECT_EQ(gate_up, 2);
  EXPECT_EQ(down, 2);
  EXPECT_EQ(ErrorWithout(config, checkpoint, "model.layers.1.mlp.up_proj.bias"),
            "missing tensor model.layers.1.mlp.up_proj.bias expected by config.json "
            "(num_hidden_layers=2, mlp_bias=true)");
}

// SmolLM3's NoPE layers have no rope op, and a per-layer window reaches only its layer's
// attention. YaRN's attention factor scales only the layers that rotate.
TEST(BuildModuleTest, PerLayerRopeAndWindow) {
  plan::ModelConfig config = SmallConfig("SmolLM3ForCausalLM");
  config.add_layers_without_rope(1);
  config.set_sliding_window(8);
  config.add_layer_sliding_windows(0);
  config.add_layer_sliding_windows(8);
  config.mutable_rope()->set_scaling(plan::RopeConfig::YARN);
  config.mutable_rope()->set_factor(4);
  config.mutable_rope()->set_original_max_position_embeddings(16);
  config.mutable_rope()->set_beta_fast(32);
  config.mutable_rope()->set_beta_slow(1);
  config.mutable_rope()->set_attention_factor(1.5);
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.rope"], 2);  // q and k of layer 0
  std::vector<int64_t> windows;
  std::vector<double> scales;
  (*module)->walk([&](llm::AttentionOp op) {
    windows.push_back(op.getSlidingWindow());
    scales.push_back(op.getScale().convertToDouble());
  });
  EXPECT_EQ(windows, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(scales, (std::vector<double>{0.5 * 1.5 * 1.5, 0.5}));
  ASSERT_TRUE(runPipeline(**module).ok());

  config.add_layers_without_rope(2);
  EXPECT_EQ(ValidateTensors(config, checkpoint.tensors()).message(),
            "config.json: a layer without rope is 2, outside [0, 2)");
  config.clear_layers_without_rope();
  config.add_layer_sliding_windows(8);
  EXPECT_EQ(ValidateTensors(config, checkpoint.tensors()).message(),
            "config.json: layer windows: expected one per layer (2), found 3");
}

// OLMo2: no pre-norm; the attention and MLP outputs are normalized before their residual add;
// q and k are normalized over the whole projection (one group per row) before rope.
TEST(BuildModuleTest, Olmo2PostNormsAndWholeProjectionQkNorm) {
  plan::ModelConfig config = SmallConfig("Olmo2ForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.rms_norm"], 2 * 4 + 1);
  EXPECT_EQ(counts["llm.rope"], 2 * 2);
  (*module)->walk([&](llm::RopeOp rope) {
    auto norm = rope.getX().getDefiningOp<llm::RmsNormOp>();
    ASSERT_TRUE(norm) << "rope without a q/k norm before it";
    EXPECT_TRUE(norm.normalizesWholeRows());
  });
  (*module)->walk([&](llm::AddOp add) {
    // residual + norm(sublayer): exactly one operand is a norm's output.
    EXPECT_NE(static_cast<bool>(add.getLhs().getDefiningOp<llm::RmsNormOp>()),
              static_cast<bool>(add.getRhs().getDefiningOp<llm::RmsNormOp>()));
  });
  // The q/k/v matmuls read the layer input directly (no norm in between).
  (*module)->walk([&](llm::MatmulOp op) {
    if (!llvm::StringRef(op.getWeightRefs()[0].getValue()).ends_with("q_proj.weight")) return;
    EXPECT_FALSE(op.getX().getDefiningOp<llm::RmsNormOp>());
  });
  ASSERT_TRUE(runPipeline(**module).ok());
  int qkv = 0;
  (*module)->walk([&](llm::MatmulOp op) { qkv += op.getWeights().size() == 3; });
  EXPECT_EQ(qkv, 2);
}

// Arch builder -> default pipeline -> codegen -> plan file, read back.
TEST(BuildModuleTest, CompilesToPlan) {
  plan::ModelConfig config = SmallConfig("Qwen2ForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  absl::Status pipeline = runPipeline(**module);
  ASSERT_TRUE(pipeline.ok()) << pipeline;
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.matmul"], 2 * 4);
  EXPECT_EQ(counts["llm.fused_add_rms_norm"], 2 * 2);

  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "llmc_arch_test.plan").string();
  auto opened = WriteF16Plan(**module, checkpoint, path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  // f16 -> f16 is a byte copy: the fused k part of layer 1 is rows 16.. of the qkv weight (after
  // q's 16 rows of 16 columns), wherever the tensor's layout puts each element.
  int index = -1;
  for (int i = 0; i < (*opened)->meta().tensors_size(); ++i)
    if ((*opened)->meta().tensors(i).name() == "model.layers.1.self_attn.qkv_proj.weight")
      index = i;
  ASSERT_GE(index, 0);
  const plan::Tensor& fused = (*opened)->meta().tensors(index);
  const int64_t cols = fused.shape(1);
  const int64_t panel = fused.layout() == plan::Tensor::ROW_PANELS ? fused.panel_rows() : 1;
  auto element_offset = [&](int64_t row, int64_t col) {
    // ROW_PANELS (plan.proto): (r / P) * P * cols + c * P + r % P; row-major is P = 1.
    return (row / panel) * panel * cols + col * panel + row % panel;
  };
  const TensorInfo& k = checkpoint.at("model.layers.1.self_attn.k_proj.weight");
  const auto* packed = reinterpret_cast<const uint16_t*>((*opened)->blob(index));
  const auto* expected = reinterpret_cast<const uint16_t*>(k.data);
  for (int64_t row = 0; row < k.shape[0]; ++row) {
    for (int64_t col = 0; col < cols; ++col) {
      ASSERT_EQ(packed[element_offset(16 + row, col)], expected[row * cols + col])
          << "k row " << row << " col " << col;
    }
  }
  std::filesystem::remove(path);
}

// Gemma 3: scaled embeddings, every norm's gamma 1 + weight (q/k norms too), GeGLU whose gate and
// up matmuls the passes fuse, the sliding layer's own rope, query_pre_attn_scalar, soft-caps on
// scores and logits; codegen writes the f32 gamma 1 + w and the typed attributes.
TEST(BuildModuleTest, GemmaOpsAndAttributes) {
  plan::ModelConfig config = SmallConfig("Gemma3ForCausalLM");
  config.set_hidden_act("gelu_pytorch_tanh");
  config.set_query_pre_attn_scalar(8);
  config.set_attn_logit_softcapping(5);
  config.set_final_logit_softcapping(7);
  config.set_sliding_window(8);
  config.add_layer_sliding_windows(8);
  config.add_layer_sliding_windows(0);
  config.mutable_sliding_layer_rope()->set_theta(500);
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  std::map<std::string, int> counts = CountOps(**module);
  EXPECT_EQ(counts["llm.rms_norm"], 2 * 6 + 1);  // 4 sandwich + q/k norms per layer, final
  EXPECT_EQ(counts["llm.gelu_tanh_mul"], 2);
  EXPECT_EQ(counts["llm.silu"], 0);
  (*module)->walk([&](llm::RmsNormOp op) { EXPECT_EQ(op.getWeightOffset().convertToDouble(), 1); });
  (*module)->walk([&](llm::EmbedOp op) {
    ASSERT_TRUE(op.getScale().has_value());
    EXPECT_EQ(op.getScale()->convertToDouble(), 4.0);  // sqrt(hidden 16)
  });
  std::vector<double> thetas;
  (*module)->walk([&](llm::RopeOp op) { thetas.push_back(op.getTheta().convertToDouble()); });
  EXPECT_EQ(thetas, (std::vector<double>{500, 500, 10000, 10000}));
  (*module)->walk([&](llm::AttentionOp op) {
    EXPECT_DOUBLE_EQ(op.getScale().convertToDouble(), 1 / std::sqrt(8.0));
    EXPECT_EQ(op.getLogitSoftcap().convertToDouble(), 5);
  });
  (*module)->walk([&](llm::LogitsOp op) { EXPECT_EQ(op.getSoftcap().convertToDouble(), 7); });

  absl::Status pipeline = runPipeline(**module);
  ASSERT_TRUE(pipeline.ok()) << pipeline;
  // gate and up are one matmul; gelu_tanh_mul reads its two results in that order.
  (*module)->walk([&](llm::GeluTanhMulOp op) {
    auto fused = op.getLhs().getDefiningOp<llm::MatmulOp>();
    ASSERT_TRUE(fused);
    EXPECT_EQ(op.getRhs().getDefiningOp(), fused.getOperation());
    ASSERT_EQ(fused.getWeights().size(), 2u);
    EXPECT_TRUE(fused.getWeightRefs()[0].getValue().endswith("gate_proj.weight"));
    EXPECT_EQ(op.getLhs(), fused.getResult(0));
    EXPECT_EQ(op.getRhs(), fused.getResult(1));
  });

  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "llmc_arch_gemma.plan").string();
  auto opened = WriteF16Plan(**module, checkpoint, path);
  ASSERT_TRUE(opened.ok()) << opened.status();
  int gelu_ops = 0;
  for (const plan::Op& op : (*opened)->meta().program().ops()) {
    gelu_ops += op.kind() == plan::GELU_TANH_MUL;
    if (op.kind() == plan::EMBED) EXPECT_EQ(op.embed().scale(), 4.0);
    if (op.kind() == plan::LOGITS) EXPECT_EQ(op.logits().softcap(), 7.0);
    if (op.kind() == plan::ATTENTION) EXPECT_EQ(op.attention().logit_softcap(), 5.0);
  }
  EXPECT_EQ(gelu_ops, 2);
  // model.norm.weight holds the f16 values 0x3c00 + i (1.0, 1.0009765625, ...): the plan's f32
  // gamma is 1 + each, exactly.
  for (int i = 0; i < (*opened)->meta().tensors_size(); ++i) {
    const plan::Tensor& tensor = (*opened)->meta().tensors(i);
    if (tensor.name() != "model.norm.weight") continue;
    ASSERT_EQ(tensor.dtype(), plan::F32);
    const auto* gamma = reinterpret_cast<const float*>((*opened)->blob(i));
    const auto* stored = reinterpret_cast<const uint16_t*>(checkpoint.at(tensor.name()).data);
    for (int64_t j = 0; j < tensor.shape(0); ++j)
      EXPECT_EQ(gamma[j], 1.0f + plan::F16ToF32(stored[j])) << j;
  }
  std::filesystem::remove(path);
}

// Phi-3's fused qkv_proj / gate_up_proj are read as row slices (no q_proj on disk), the passes
// fuse the slices back, and codegen's concatenation of consecutive slices is the checkpoint
// tensor's rows in order: the plan holds qkv_proj's bytes as stored.
TEST(BuildModuleTest, Phi3FusedProjectionsAreRowSlicesFusedBack) {
  plan::ModelConfig config = SmallConfig("Phi3ForCausalLM");
  FakeCheckpoint checkpoint = MakeCheckpoint(config);
  EXPECT_NE(ErrorWithout(config, checkpoint, "model.layers.0.self_attn.qkv_proj.weight")
                .find("missing tensor model.layers.0.self_attn.qkv_proj.weight"),
            std::string::npos);
  checkpoint = MakeCheckpoint(config);
  mlir::MLIRContext context;
  auto module = BuildModule(context, config, checkpoint.tensors());
  ASSERT_TRUE(module.ok()) << module.status();
  std::vector<std::string> params;
  (*module)->walk([&](llm::ParamOp param) { params.push_back(param.getSymName().str()); });
  EXPECT_NE(
      std::find(params.begin(), params.end(), "model.layers.0.self_attn.qkv_proj.weight[16:24]"),
      params.end());
  EXPECT_NE(
      std::find(params.begin(), params.end(), "model.layers.1.mlp.gate_up_proj.weight[24:48]"),
      params.end());
  EXPECT_EQ(std::find(params.begin(), params.end(), "model.layers.0.self_attn.qkv_proj.weight"),
            params.end());
  ASSERT_TRUE(runPipeline(**module).ok());
  int qkv = 0, gate_up = 0;
  (*module)->walk([&](llm::MatmulOp op) {
    qkv += op.getWeights().size() == 3;
    gate_up += op.getWeights().size() == 2;
  });
  EXPECT_EQ(qkv, 2);
  EXPECT_EQ(gate_up, 2);

  TensorMapWeightSource weights(checkpoint.tensors());
  auto v = weights.getWeight("model.layers.1.self_attn.qkv_proj.weight[24:32]");
  ASSERT_TRUE(v.ok()) << v.status();
  const TensorInfo& qkv_tensor = checkpoint.at("model.layers.1.self_attn.qkv_proj.weight");
  EXPECT_EQ(v->shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(v->data, qkv_tensor.data + 24 * 16 * 2);  // a view: no copy
  EXPECT_EQ(v->sizeBytes, 8u * 16 * 2);
  EXPECT_FALSE(weights.getWeight("model.layers.1.self_attn.qkv_proj.weight[24:33]").ok());
  EXPECT_EQ(fusedTensorName({"t.w[0:16]", "t.w[16:24]", "t.w[24:32]"}), "t.w[0:32]");
}

// Mixture of experts, on the transformers fixtures (tests/fixtures, make_fixtures.py).
std::string FixtureDir(const std::string& name) {
  return std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/" + name;
}

std::unique_ptr<Checkpoint> OpenFixture(const std::string& name) {
  auto checkpoint = Checkpoint::Open(FixtureDir(name));
  EXPECT_TRUE(checkpoint.ok()) << name << ": " << checkpoint.status();
  return checkpoint.ok() ? *std::move(checkpoint) : nullptr;
}

// The fixture's config.json with `edit` applied, parsed; the error message when it is refused.
std::string ParseEdited(const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                        plan::ModelConfig* config = nullptr) {
  std::ifstream file(FixtureDir(name) + "/config.json");
  nlohmann::json json = nlohmann::json::parse(file);
  edit(json);
  auto parsed = ParseModelConfig(json.dump(), "config.json");
  if (parsed.ok() && config != nullptr) *config = *parsed;
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

struct MoeFixture {
  const char* name;
  int routers;          // MoE layers
  bool shared_expert;   // Qwen2-MoE
  const char* gate_up;  // the fused expert tensor of layer 0
};

// Each fixture validates; the pipeline leaves, per MoE layer, a float router matmul, one ROUTER,
// one fused gate/up expert matmul (quantized) and a down expert matmul; a dense layer where
// mlp_only_layers says so; Qwen2-MoE's shared expert and its float gate.
TEST(MoeFamiliesTest, FixturesBuildTheExpectedOps) {
  for (const MoeFixture& fixture :
       {MoeFixture{"qwen3_moe", 1, false, "model.layers.0.mlp.experts.gate_up_proj.weight"},
        MoeFixture{"qwen2_moe_shared", 2, true, "model.layers.0.mlp.experts.gate_up_proj.weight"},
        MoeFixture{"mixtral_moe", 2, false,
                   "model.layers.0.block_sparse_moe.experts.w1.weight+model.layers.0.block_"
                   "sparse_moe.experts.w3.weight"}}) {
    SCOPED_TRACE(fixture.name);
    std::unique_ptr<Checkpoint> checkpoint = OpenFixture(fixture.name);
    ASSERT_TRUE(checkpoint);
    const plan::ModelConfig& config = checkpoint->config();
    EXPECT_TRUE(ValidateTensors(config, checkpoint->tensors()).ok());
    mlir::MLIRContext context;
    auto module = BuildModule(context, config, checkpoint->tensors());
    ASSERT_TRUE(module.ok()) << module.status();
    PipelineOptions options;
    options.quantize = QuantizeWeightsPassOptions{};  // int8 per channel
    ASSERT_TRUE(runPipeline(**module, options).ok());
    std::map<std::string, int> counts = CountOps(**module);
    EXPECT_EQ(counts["llm.router"], fixture.routers);
    EXPECT_EQ(counts["llm.expert_matmul"], 2 * fixture.routers);
    EXPECT_EQ(counts["llm.moe_combine"], fixture.routers);
    (*module)->walk([&](llm::ExpertMatmulOp op) {
      EXPECT_TRUE(op->hasAttr("llm.quant"));
      EXPECT_EQ(op.getNumExperts(), config.moe().num_experts());
      EXPECT_EQ(op.getTopK(), config.moe().top_k());
    });
    int fused = 0;
    (*module)->walk([&](llm::ExpertMatmulOp op) { fused += op.getNumResults() == 2; });
    EXPECT_EQ(fused, fixture.routers);
    (*module)->walk([&](llm::RouterOp router) {
      auto matmul = router.getLogits().getDefiningOp<llm::MatmulOp>();
      ASSERT_TRUE(matmul);
      EXPECT_FALSE(matmul->hasAttr("llm.quant"));  // routing stays float
      EXPECT_EQ(router.getScoring(), "softmax_topk");
      EXPECT_EQ(router.getNormalize(), config.moe().normalize_top_k());
    });
    (*module)->walk([&](llm::MoeCombineOp combine) {
      EXPECT_EQ(combine.getInputs().size(), fixture.shared_expert ? 4u : 2u);
      if (!fixture.shared_expert) return;
      auto gate = combine.getInputs()[3].getDefiningOp<llm::MatmulOp>();
      ASSERT_TRUE(gate);
      EXPECT_FALSE(gate->hasAttr("llm.quant"));
    });
    // qwen3_moe: layer 1 is in mlp_only_layers, a dense FFN of intermediate_size.
    bool dense_layer_1 = false;
    (*module)->walk([&](llm::MatmulOp op) {
      dense_layer_1 |= op.getWeightRefs()[0].getValue() == "model.layers.1.mlp.gate_proj.weight";
    });
    EXPECT_EQ(dense_layer_1, std::string(fixture.name) == "qwen3_moe");

    const std::string path =
        (std::filesystem::path(::testing::TempDir()) / "llmc_arch_moe_test.plan").string();
    auto writer = plan::PlanWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    TensorMapWeightSource weights(checkpoint->tensors());
    std::vector<plan::Tensor> tensors;
    auto program = emitProgram(**module, weights, plan::F32, **writer, &tensors);
    ASSERT_TRUE(program.ok()) << program.status();
    bool found = false;
    for (const plan::Tensor& tensor : tensors) {
      if (tensor.name() != fixture.gate_up) continue;
      found = true;
      EXPECT_EQ(tensor.shape(0), config.moe().num_experts());
      EXPECT_EQ(tensor.shape(1), 2 * config.moe().expert_intermediate_size());
      EXPECT_EQ(tensor.shape(2), config.hidden_size());
    }
    EXPECT_TRUE(found);
    std::filesystem::remove(path);
  }
}

TEST(MoeFamiliesTest, RefusalsNameTheField) {
  EXPECT_NE(ParseEdited("qwen3_moe", [](nlohmann::json& j) { j["use_sliding_window"] = true; })
                .find("use_sliding_window"),
            std::string::npos);
  const std::string disagree =
      ParseEdited("qwen2_moe_shared", [](nlohmann::json& j) { j["num_local_experts"] = 4; });
  EXPECT_NE(disagree.find("num_local_experts"), std::string::npos) << disagree;
  EXPECT_NE(disagree.find("the same as num_experts (8)"), std::string::npos) << disagree;
  const std::string too_many =
      ParseEdited("mixtral_moe", [](nlohmann::json& j) { j["num_experts_per_tok"] = 5; });
  EXPECT_NE(too_many.find("num_experts_per_tok"), std::string::npos) << too_many;
  const std::string dense =
      ParseEdited("qwen3_moe", [](nlohmann::json& j) { j["mlp_only_layers"] = {-1}; });
  EXPECT_NE(dense.find("mlp_only_layers"), std::string::npos) << dense;

  std::unique_ptr<Checkpoint> checkpoint = OpenFixture("qwen3_moe");
  ASSERT_TRUE(checkpoint);
  TensorMap tensors = checkpoint->tensors();
  tensors.erase("model.layers.0.mlp.experts.3.up_proj.weight");
  EXPECT_EQ(ValidateTensors(checkpoint->config(), tensors).message(),
            "missing tensor model.layers.0.mlp.experts.3.up_proj.weight expected by config.json "
            "(num_hidden_layers=2, num_experts=8)");
  // A checkpoint saved with fused 3-D experts (save_original_format=False) is not read.
  tensors = checkpoint->tensors();
  TensorInfo fused = tensors.at("model.layers.0.mlp.experts.0.up_proj.weight");
  fused.name = "model.layers.0.mlp.experts.gate_up_proj";
  fused.shape = {8, 64, 64};
  tensors[fused.name] = fused;
  const std::string unexpected(ValidateTensors(checkpoint->config(), tensors).message());
  EXPECT_NE(unexpected.find("unexpected tensor model.layers.0.mlp.experts.gate_up_proj"),
            std::string::npos)
      << unexpected;
}

TEST(MoeFamiliesTest, ConfigDefaultsAndWindows) {
  // Qwen3-MoE has no head_dim default (Qwen3 has 128): hidden_size / num_attention_heads.
  plan::ModelConfig config;
  ASSERT_EQ(ParseEdited(
                "qwen3_moe",
                [](nlohmann::json& j) {
                  j.erase("head_dim");
                  j["num_attention_heads"] = 8;
                  j.erase("norm_topk_prob");
                  j.erase("decoder_sparse_step");
                  j.erase("num_experts_per_tok");
                },
                &config),
            "");
  EXPECT_EQ(config.head_dim(), 8);
  EXPECT_FALSE(config.moe().normalize_top_k());
  EXPECT_EQ(config.moe().decoder_sparse_step(), 1);
  EXPECT_EQ(config.moe().top_k(), 8);  // Qwen3MoeConfig's default
  EXPECT_EQ(config.moe().scoring(), plan::RouterAttrs::SOFTMAX_TOPK);
  EXPECT_EQ(config.moe().dense_layers_size(), 1);
  EXPECT_TRUE(LayerIsMoe(config, 0));
  EXPECT_FALSE(LayerIsMoe(config, 1));
  config.mutable_moe()->set_decoder_sparse_step(2);
  config.mutable_moe()->clear_dense_layers();
  EXPECT_FALSE(LayerIsMoe(config, 0));
  EXPECT_TRUE(LayerIsMoe(config, 1));

  // Qwen2-MoE slides the even layers below max_window_layers (Qwen2 the ones from it on).
  ASSERT_EQ(ParseEdited(
                "qwen2_moe_shared",
                [](nlohmann::json& j) {
                  j["use_sliding_window"] = true;
                  j["sliding_window"] = 4;
                  j["max_window_layers"] = 28;
                  j.erase("layer_types");  // the derived rule applies without it
                },
                &config),
            "");
  EXPECT_EQ(std::vector<int64_t>(config.layer_sliding_windows().begin(),
                                 config.layer_sliding_windows().end()),
            (std::vector<int64_t>{4, 0}));
  EXPECT_TRUE(config.attention_bias());  // qkv_bias
  EXPECT_EQ(config.moe().shared_expert_intermediate_size(), 96);
  ASSERT_EQ(ParseEdited(
                "qwen2_moe_shared", [](nlohmann::json& j) { j["qkv_bias"] = false; }, &config),
            "");
  EXPECT_FALSE(config.attention_bias());

  // Mixtral: the window on every layer when set; always renormalised; experts of
  // intermediate_size.
  ASSERT_EQ(ParseEdited(
                "mixtral_moe", [](nlohmann::json& j) { j["sliding_window"] = 16; }, &config),
            "");
  EXPECT_EQ(config.sliding_window(), 16);
  EXPECT_EQ(config.layer_sliding_windows_size(), 0);
  EXPECT_TRUE(config.moe().normalize_top_k());
  EXPECT_EQ(config.moe().expert_intermediate_size(), 64);
  EXPECT_EQ(config.moe().num_experts(), 4);
}

// What llmc synth writes: exactly each fixture's tensors (every expert's, the dense layer's FFN,
// the shared expert), with their shapes.
TEST(MoeFamiliesTest, FamilyTensorsListEveryExpert) {
  for (const char* name : {"qwen3_moe", "qwen2_moe_shared", "mixtral_moe"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Checkpoint> checkpoint = OpenFixture(name);
    ASSERT_TRUE(checkpoint);
    auto tensors = FamilyTensors(checkpoint->config());
    ASSERT_TRUE(tensors.ok()) << tensors.status();
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const FamilyTensor& tensor : *tensors) shapes[tensor.name] = tensor.shape;
    EXPECT_EQ(shapes.size(), checkpoint->tensors().size());
    for (const auto& [tensor, info] : checkpoint->tensors())
      EXPECT_EQ(shapes[tensor], info.shape) << tensor;
  }
  std::unique_ptr<Checkpoint> qwen3 = OpenFixture("qwen3_moe");
  ASSERT_TRUE(qwen3);
  auto tensors = FamilyTensors(qwen3->config());
  ASSERT_TRUE(tensors.ok());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const FamilyTensor& tensor : *tensors) shapes[tensor.name] = tensor.shape;
  EXPECT_EQ(shapes["model.layers.0.mlp.experts.7.down_proj.weight"],
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(shapes["model.layers.1.mlp.gate_proj.weight"], (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(shapes.count("model.layers.1.mlp.experts.0.gate_proj.weight"), 0u);
}

// An f32 checkpoint tensor over `data` (borrowed).
void AddF32(TensorMap& map, const std::string& name, std::vector<int64_t> shape,
            const std::vector<float>& data) {
  AddTensor(map, name, std::move(shape), plan::F32, data.data(), data.size() * sizeof(float));
}

// Expert views of a stacked [E, H, 2I] tensor (gpt-oss's gate_up_proj, used as x @ W[e]): gate
// = columns 0::2 and up = 1::2 of W[e], transposed to [I, H]; biases [E, 2I] likewise; a view
// without transpose or stride is the tensor's own bytes.
TEST(ExpertSliceTest, ViewsOfStackedTensors) {
  constexpr int64_t kExperts = 3, kHidden = 4, kSize = 5;
  std::vector<float> gate_up(kExperts * kHidden * 2 * kSize), bias(kExperts * 2 * kSize);
  for (size_t i = 0; i < gate_up.size(); ++i) gate_up[i] = static_cast<float>(i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 1000.0f + static_cast<float>(i);
  TensorMap map;
  AddF32(map, "w", {kExperts, kHidden, 2 * kSize}, gate_up);
  AddF32(map, "b", {kExperts, 2 * kSize}, bias);
  TensorMapWeightSource weights(map);
  auto at = [](const WeightView& view, int64_t index) {
    float value;
    std::memcpy(&value, view.data + index * 4, 4);
    return value;
  };
  for (int64_t expert = 0; expert < kExperts; ++expert) {
    for (int64_t first : {0, 1}) {
      const std::string name = expertSliceName({"w", expert, true, first, 2});
      EXPECT_EQ(name, absl::StrCat("w[expert=", expert, ",transpose,rows=", first, "::2]"));
      auto view = weights.getWeight(name);
      ASSERT_TRUE(view.ok()) << view.status();
      ASSERT_EQ(view->shape, (std::vector<int64_t>{kSize, kHidden}));
      ASSERT_EQ(view->sizeBytes, static_cast<uint64_t>(kSize * kHidden * 4));
      for (int64_t i = 0; i < kSize; ++i)
        for (int64_t h = 0; h < kHidden; ++h)
          EXPECT_EQ(at(*view, i * kHidden + h),
                    gate_up[(expert * kHidden + h) * 2 * kSize + 2 * i + first]);
      auto bias_view = weights.getWeight(expertSliceName({"b", expert, false, first, 2}));
      ASSERT_TRUE(bias_view.ok());
      ASSERT_EQ(bias_view->shape, (std::vector<int64_t>{kSize}));
      for (int64_t i = 0; i < kSize; ++i)
        EXPECT_EQ(at(*bias_view, i), bias[expert * 2 * kSize + 2 * i + first]);
    }
    auto whole = weights.getWeight(expertSliceName({"b", expert, false, 0, 1}));
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(whole->data, map.at("b").data + expert * 2 * kSize * 4);  // zero-copy
    EXPECT_EQ(whole->shape, (std::vector<int64_t>{2 * kSize}));
  }
  weights.releaseWeights({expertSliceName({"w", 0, true, 0, 2})});
  EXPECT_TRUE(weights.getWeight(expertSliceName({"w", 0, true, 0, 2})).ok());  // made again
  EXPECT_FALSE(weights.getWeight(expertSliceName({"w", kExperts, true, 0, 2})).ok());
  EXPECT_FALSE(parseExpertSlice("w[0:4]"));
  EXPECT_FALSE(parseExpertSlice("w[expert=1,rows=0::2,transpose]"));  // transpose comes first
  std::optional<ExpertSlice> parsed = parseExpertSlice("a.b[expert=12,transpose,rows=1::2]");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->tensor, "a.b");
  EXPECT_EQ(parsed->expert, 12);
  EXPECT_TRUE(parsed->transpose);
  EXPECT_EQ(parsed->row_first, 1);
  EXPECT_EQ(parsed->row_step, 2);
  EXPECT_FALSE(parseRowSlice("a.b[expert=12,transpose,rows=1::2]"));
}

// Codegen of an expert matmul over views of stacked tensors: the plan tensor is named after the
// stacked tensor, [E, 2I, H] with each expert's gate rows (columns 0::2 of W[e], transposed) then
// its up rows (1::2), and the bias [E, 2I] alike: x @ W[e] + b[e] split as transformers does.
TEST(ExpertSliceTest, CodegenOfStackedViews) {
  constexpr int64_t kExperts = 2, kHidden = 32, kSize = 16;
  std::vector<float> gate_up(kExperts * kHidden * 2 * kSize), bias(kExperts * 2 * kSize);
  for (size_t i = 0; i < gate_up.size(); ++i) gate_up[i] = 0.001f * static_cast<float>(i);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 5.0f + static_cast<float>(i);
  FakeCheckpoint checkpoint;
  checkpoint.Add("e", {10, kHidden});
  checkpoint.Add("r", {kExperts, kHidden});
  TensorMap tensors = checkpoint.tensors();
  AddF32(tensors, "l.experts.gate_up_proj", {kExperts, kHidden, 2 * kSize}, gate_up);
  AddF32(tensors, "l.experts.gate_up_proj_bias", {kExperts, 2 * kSize}, bias);
  std::string params = "llm.param @e : tensor<10x32xf16>\nllm.param @r : tensor<2x32xf16>\n", gates,
              ups, gate_biases, up_biases;
  for (int64_t e = 0; e < kExperts; ++e) {
    for (int64_t first : {0, 1}) {
      const std::string w = expertSliceName({"l.experts.gate_up_proj", e, true, first, 2});
      const std::string b = expertSliceName({"l.experts.gate_up_proj_bias", e, false, first, 2});
      absl::StrAppend(&params, "llm.param @\"", w, "\" : tensor<16x32xf32>\n", "llm.param @\"", b,
                      "\" : tensor<16xf32>\n");
      absl::StrAppend(first == 0 ? &gates : &ups, e == 0 ? "" : ", ", "@\"", w, "\"");
      absl::StrAppend(first == 0 ? &gate_biases : &up_biases, e == 0 ? "" : ", ", "@\"", b, "\"");
    }
  }
  const std::string text =
      absl::StrCat(params, R"mlir(
func.func @forward(%tokens: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x10xf32> {
  %x = llm.embed %tokens {table = @e} : tensor<?xi32> -> tensor<?x32xf32>
  %logits = llm.matmul %x {weights = [@r]} : tensor<?x32xf32> -> tensor<?x2xf32>
  %ids, %w = llm.router %logits {num_experts = 2, top_k = 1, scoring = "topk_softmax"} : tensor<?x2xf32> -> (tensor<?x1xi32>, tensor<?x1xf32>)
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[)mlir",
                   gates, "]], biases = [[", gate_biases,
                   R"mlir(]]} : tensor<?x32xf32>, tensor<?x1xi32> -> tensor<?x16xf32>
  %u = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[)mlir",
                   ups, "]], biases = [[", up_biases,
                   R"mlir(]]} : tensor<?x32xf32>, tensor<?x1xi32> -> tensor<?x16xf32>
  %a = llm.clamped_swiglu %g, %u {alpha = 1.702 : f64, limit = 7.0 : f64} : tensor<?x16xf32>
  %l = llm.logits %x {weight = @e} : tensor<?x32xf32> -> tensor<?x10xf32>
  return %l : tensor<?x10xf32>
}
)mlir");
  mlir::MLIRContext context;
  context.loadDialect<llm::LlmDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(text, &context);
  ASSERT_TRUE(module);
  ASSERT_TRUE(runPipeline(*module).ok());
  int fused = 0;
  module->walk([&](llm::ExpertMatmulOp op) { fused += op.getNumResults() == 2; });
  EXPECT_EQ(fused, 1);  // gate and up under clamped_swiglu

  const std::string path =
      (std::filesystem::path(::testing::TempDir()) / "llmc_arch_views_test.plan").string();
  auto writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok());
  TensorMapWeightSource weights(tensors);
  std::vector<plan::Tensor> written;
  auto program = emitProgram(*module, weights, plan::F32, **writer, &written);
  ASSERT_TRUE(program.ok()) << program.status();
  plan::PlanMeta meta;
  *meta.mutable_program() = *program;
  for (const plan::Tensor& tensor : written) *meta.add_tensors() = tensor;
  ASSERT_TRUE((*writer)->Finish(meta).ok());
  auto opened = plan::Plan::Open(path, {.verify_blob_checksums = true});
  ASSERT_TRUE(opened.ok()) << opened.status();
  int weight_index = -1, bias_index = -1;
  for (int i = 0; i < (*opened)->meta().tensors_size(); ++i) {
    if ((*opened)->meta().tensors(i).name() == "l.experts.gate_up_proj") weight_index = i;
    if ((*opened)->meta().tensors(i).name() == "l.experts.gate_up_proj_bias") bias_index = i;
  }
  ASSERT_GE(weight_index, 0);
  ASSERT_GE(bias_index, 0);
  const plan::Tensor& weight = (*opened)->meta().tensors(weight_index);
  EXPECT_EQ(std::vector<int64_t>(weight.shape().begin(), weight.shape().end()),
            (std::vector<int64_t>{kExperts, 2 * kSize, kHidden}));
  const plan::Tensor& bias_tensor = (*opened)->meta().tensors(bias_index);
  EXPECT_EQ(std::vector<int64_t>(bias_tensor.shape().begin(), bias_tensor.shape().end()),
            (std::vector<int64_t>{kExperts, 2 * kSize}));
  const int64_t panel = weight.layout() == plan::Tensor::ROW_PANELS ? weight.panel_rows() : 1;
  const auto* packed = reinterpret_cast<const float*>((*opened)->blob(weight_index));
  const auto* biases = reinterpret_cast<const float*>((*opened)->blob(bias_index));
  for (int64_t e = 0; e < kExperts; ++e)
    for (int64_t r = 0; r < 2 * kSize; ++r) {
      // Row r of expert e: gate output r (column 2r of W[e]) or up output r - I (column
      // 2(r - I) + 1).
      const int64_t column = r < kSize ? 2 * r : 2 * (r - kSize) + 1;
      const int64_t row = e * 2 * kSize + r;
      for (int64_t h = 0; h < kHidden; ++h)
        ASSERT_EQ(packed[(row / panel) * panel * kHidden + h * panel + row % panel],
                  gate_up[(e * kHidden + h) * 2 * kSize + column])
            << "expert " << e << " row " << r << " h " << h;
      EXPECT_EQ(biases[row], bias[e * 2 * kSize + column]);
    }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace llmc
