#include "compiler/importer/checkpoint.h"

#include <cstring>
#include <string>
#include <vector>

#include "compiler/importer/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/plan/dtype.h"

namespace llmc {
namespace {

using ::llmc::testing_util::BuildSafetensors;
using ::llmc::testing_util::BytesOf;
using ::llmc::testing_util::LlamaConfigJson;
using ::llmc::testing_util::TempDir;
using ::llmc::testing_util::TensorSpec;
using ::llmc::testing_util::WriteFile;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kStoriesDir = std::string(LLMC_TEST_DATA_DIR) + "/stories260K";

TEST(CheckpointTest, OpensStories260K) {
  auto checkpoint = Checkpoint::Open(kStoriesDir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  const llmrt::plan::ModelConfig& config = (*checkpoint)->config();
  EXPECT_EQ(config.architecture(), "LlamaForCausalLM");
  EXPECT_EQ(config.vocab_size(), 512);
  EXPECT_EQ(config.hidden_size(), 64);
  EXPECT_EQ(config.intermediate_size(), 172);
  EXPECT_EQ(config.num_layers(), 5);
  EXPECT_EQ(config.num_attention_heads(), 8);
  EXPECT_EQ(config.num_kv_heads(), 4);
  EXPECT_EQ(config.head_dim(), 8);
  EXPECT_EQ(config.max_position_embeddings(), 512);
  EXPECT_DOUBLE_EQ(config.rms_norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(config.rope().theta(), 10000.0);
  EXPECT_TRUE(config.tie_word_embeddings());
  EXPECT_FALSE(config.attention_bias());
  EXPECT_EQ(config.checkpoint_dtype(), llmrt::plan::F32);

  const llmrt::plan::GenerationDefaults& generation = (*checkpoint)->generation();
  EXPECT_EQ(generation.bos_token_id(), 1);
  EXPECT_THAT(generation.eos_token_ids(), ElementsAre(2));
  EXPECT_EQ(generation.pad_token_id(), -1);
  EXPECT_FALSE(generation.do_sample());
  EXPECT_EQ(generation.max_length(), 512);

  EXPECT_EQ((*checkpoint)->tensors().size(), 47u);  // 5 layers x 9, embed_tokens, norm
  const TensorInfo* k_proj = (*checkpoint)->Find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k_proj, nullptr);
  EXPECT_EQ(k_proj->file, "model.safetensors");
  EXPECT_EQ(k_proj->dtype, llmrt::plan::F32);
  EXPECT_THAT(k_proj->shape, ElementsAre(32, 64));
  EXPECT_EQ(k_proj->size_bytes, 32u * 64 * 4);
  float first;
  std::memcpy(&first, k_proj->data, sizeof(first));
  EXPECT_EQ(first, 0.2161301076412201f);                      // read with Python's struct module
  EXPECT_EQ((*checkpoint)->Find("lm_head.weight"), nullptr);  // tied
}

// A two-shard checkpoint: layer tensors in shard 1, the rest in shard 2.
class ShardedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.File("config.json"), LlamaConfigJson().dump(2));
    const std::vector<uint16_t> matrix(16 * 16, llmrt::plan::F32ToBf16(0.25f));
    const std::vector<float> norm(16, 1.0f);
    shard1_ = {{"model.layers.0.self_attn.q_proj.weight", "BF16", {16, 16}, BytesOf(matrix)},
               {"model.layers.0.input_layernorm.weight", "F32", {16}, BytesOf(norm)}};
    shard2_ = {{"model.embed_tokens.weight", "BF16", {16, 16}, BytesOf(matrix)},
               {"model.norm.weight", "F32", {16}, BytesOf(norm)}};
    for (const TensorSpec& tensor : shard1_) weight_map_[tensor.name] = kShard1;
    for (const TensorSpec& tensor : shard2_) weight_map_[tensor.name] = kShard2;
  }

  void WriteAll() {
    WriteFile(dir_.File(kShard1), BuildSafetensors(shard1_));
    WriteFile(dir_.File(kShard2), BuildSafetensors(shard2_));
    WriteFile(dir_.File("model.safetensors.index.json"),
              Json{{"metadata", {{"total_size", 1}}}, {"weight_map", weight_map_}}.dump(2));
  }

  std::string OpenError() {
    auto checkpoint = Checkpoint::Open(dir_.path());
    return checkpoint.ok() ? std::string() : std::string(checkpoint.status().message());
  }

  static constexpr char kShard1[] = "model-00001-of-00002.safetensors";
  static constexpr char kShard2[] = "model-00002-of-00002.safetensors";
  TempDir dir_;
  std::vector<TensorSpec> shard1_;
  std::vector<TensorSpec> shard2_;
  Json weight_map_ = Json::object();
};

TEST_F(ShardedCheckpointTest, OpensAllShards) {
  WriteAll();
  auto checkpoint = Checkpoint::Open(dir_.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->tensors().size(), 4u);
  const TensorInfo* q_proj = (*checkpoint)->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q_proj, nullptr);
  EXPECT_EQ(q_proj->file, kShard1);
  EXPECT_EQ(q_proj->dtype, llmrt::plan::BF16);
  uint16_t value;
  std::memcpy(&value, q_proj->data + 2 * 17, 2);
  EXPECT_EQ(llmrt::plan::Bf16ToF32(value), 0.25f);
  EXPECT_EQ((*checkpoint)->Find("model.norm.weight")->file, kShard2);
  // Matrices are bf16, norms f32: the matmul weights decide.
  EXPECT_EQ((*checkpoint)->config().checkpoint_dtype(), llmrt::plan::BF16);
}

TEST_F(ShardedCheckpointTest, MissingShardNamesIndexAndShard) {
  WriteAll();
  unlink(dir_.File(kShard2).c_str());
  EXPECT_THAT(OpenError(), HasSubstr("model.safetensors.index.json: shard "
                                     "model-00002-of-00002.safetensors (holding 2 tensors"));
  EXPECT_THAT(OpenError(), HasSubstr("is missing"));
}

TEST_F(ShardedCheckpointTest, TensorListedButAbsentFromItsShard) {
  weight_map_["model.layers.0.mlp.up_proj.weight"] = kShard1;
  WriteAll();
  EXPECT_THAT(OpenError(),
              HasSubstr("model.safetensors.index.json: lists tensor "
                        "model.layers.0.mlp.up_proj.weight in model-00001-of-00002.safetensors, "
                        "but "));
  EXPECT_THAT(OpenError(), HasSubstr("model-00001-of-00002.safetensors has no such tensor"));
}

TEST_F(ShardedCheckpointTest, TensorInShardButNotInIndex) {
  weight_map_.erase("model.norm.weight");
  WriteAll();
  EXPECT_THAT(OpenError(), HasSubstr("model-00002-of-00002.safetensors: tensor model.norm.weight "
                                     "is not listed in "));
  EXPECT_THAT(OpenError(), HasSubstr("model.safetensors.index.json"));
}

TEST_F(ShardedCheckpointTest, TensorInTwoShards) {
  shard2_.push_back(shard1_[1]);  // input_layernorm also in shard 2
  WriteAll();
  EXPECT_THAT(OpenError(), HasSubstr("model-00002-of-00002.safetensors: tensor "
                                     "model.layers.0.input_layernorm.weight is stored here, but "));
  EXPECT_THAT(OpenError(), HasSubstr("assigns it to model-00001-of-00002.safetensors"));
}

TEST_F(ShardedCheckpointTest, BadIndex) {
  WriteAll();
  WriteFile(dir_.File("model.safetensors.index.json"), R"({"weight_map": [1]})");
  EXPECT_THAT(OpenError(), HasSubstr("model.safetensors.index.json: field \"weight_map\": "
                                     "expected an object {tensor: shard file}, found [1]"));
  WriteFile(dir_.File("model.safetensors.index.json"),
            R"({"weight_map": {"w": "../elsewhere.safetensors"}})");
  EXPECT_THAT(OpenError(), HasSubstr("is not a file name inside"));
  WriteFile(dir_.File("model.safetensors.index.json"), "{\"weight_map\": {");
  EXPECT_THAT(OpenError(), HasSubstr("model.safetensors.index.json: invalid JSON at line 1"));
}

TEST(CheckpointErrorTest, NoWeightsNamesDirectoryAndFilesLookedFor) {
  TempDir dir;
  WriteFile(dir.File("config.json"), LlamaConfigJson().dump());
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr(dir.path() + ": no weights found: looked for model.safetensors and "
                                     "model.safetensors.index.json"));
}

TEST(CheckpointErrorTest, ConfigProblemsAreReported) {
  TempDir dir;
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(), HasSubstr("config.json: cannot open"));

  WriteFile(dir.File("config.json"), "{\n  \"architectures\": [\"LlamaForCausalLM\"],,\n}");
  checkpoint = Checkpoint::Open(dir.path());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr(dir.File("config.json") + ": invalid JSON at line 2, column 41"));

  Json config = LlamaConfigJson();
  config["architectures"] = {"FalconForCausalLM"};
  WriteFile(dir.File("config.json"), config.dump());
  checkpoint = Checkpoint::Open(dir.path());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("architecture \"FalconForCausalLM\" is not supported"));

  EXPECT_FALSE(Checkpoint::Open(dir.File("config.json")).ok());  // not a directory
}

TEST(CheckpointErrorTest, SafetensorsErrorsPassThrough) {
  TempDir dir;
  WriteFile(dir.File("config.json"), LlamaConfigJson().dump());
  const std::string bytes =
      BuildSafetensors({{"model.embed_tokens.weight", "I8", {4}, std::string(4, '\0')}});
  WriteFile(dir.File("model.safetensors"), bytes);
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("model.safetensors: tensor model.embed_tokens.weight: dtype I8 is not "
                        "supported"));
}

TEST(CheckpointErrorTest, GenerationConfigIsOptionalButValidated) {
  TempDir dir;
  WriteFile(dir.File("config.json"), LlamaConfigJson().dump());
  const std::vector<float> values(4, 1.0f);
  WriteFile(dir.File("model.safetensors"),
            BuildSafetensors({{"model.norm.weight", "F32", {4}, BytesOf(values)}}));
  auto checkpoint = Checkpoint::Open(dir.path());
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->generation().bos_token_id(), 1);  // from config.json
  // No rank-2 tensors: checkpoint_dtype stays config.json's torch_dtype.
  EXPECT_EQ((*checkpoint)->config().checkpoint_dtype(), llmrt::plan::BF16);

  WriteFile(dir.File("generation_config.json"), R"({"temperature": "hot"})");
  checkpoint = Checkpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok());
  EXPECT_THAT(checkpoint.status().message(),
              HasSubstr("generation_config.json: field \"temperature\": expected a number, found "
                        "\"hot\""));
}

}  // namespace
}  // namespace llmc
