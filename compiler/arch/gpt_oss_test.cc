// gpt-oss's config.json reading (families/gpt_oss.cc) against transformers' GptOssConfig
// (configuration_gpt_oss.py, 5.23): its class defaults and __post_init__ rules, and the
// fixture config transformers itself wrote (tests/fixtures/gpt_oss).
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/importer/hf_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;
using llmrt::plan::ModelConfig;
using llmrt::plan::RopeConfig;
using llmrt::plan::RouterAttrs;

// The fields GptOssConfig has no default for in a real config (sizes), nothing else.
Json Minimal() {
  return Json{{"architectures", {"GptOssForCausalLM"}},
              {"vocab_size", 512},
              {"hidden_size", 128},
              {"intermediate_size", 96},
              {"num_hidden_layers", 4},
              {"num_attention_heads", 16}};
}

absl::StatusOr<ModelConfig> Parse(const Json& json) {
  return ParseModelConfig(json.dump(), "dir/config.json");
}

TEST(GptOssConfigTest, ClassDefaults) {
  absl::StatusOr<ModelConfig> config = Parse(Minimal());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "gpt_oss");
  EXPECT_EQ(config->num_kv_heads(), 8);
  EXPECT_EQ(config->head_dim(), 64);  // not hidden / heads (8)
  EXPECT_EQ(config->max_position_embeddings(), 131072);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-5);
  EXPECT_TRUE(config->attention_bias());
  EXPECT_TRUE(config->attention_sinks());
  // layer_types: "sliding_attention" if (i + 1) % 2 else "full_attention"; sliding_window 128.
  EXPECT_EQ(config->sliding_window(), 128);
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(128, 0, 128, 0));
  // rope_parameters None -> YaRN factor 32 over 4096, beta_fast 32, beta_slow 1, untruncated.
  const RopeConfig& rope = config->rope();
  EXPECT_DOUBLE_EQ(rope.theta(), 150000.0);
  EXPECT_EQ(rope.scaling(), RopeConfig::YARN);
  EXPECT_DOUBLE_EQ(rope.factor(), 32.0);
  EXPECT_EQ(rope.original_max_position_embeddings(), 4096);
  EXPECT_DOUBLE_EQ(rope.beta_fast(), 32.0);
  EXPECT_DOUBLE_EQ(rope.beta_slow(), 1.0);
  EXPECT_TRUE(rope.untruncated());
  const llmrt::plan::MoeConfig& moe = config->moe();
  EXPECT_EQ(moe.num_experts(), 128);
  EXPECT_EQ(moe.top_k(), 4);
  EXPECT_EQ(moe.expert_intermediate_size(), 96);
  EXPECT_EQ(moe.scoring(), RouterAttrs::TOPK_SOFTMAX);
  EXPECT_FALSE(moe.normalize_top_k());
  EXPECT_TRUE(moe.router_bias());
  EXPECT_TRUE(moe.expert_bias());
  EXPECT_DOUBLE_EQ(moe.swiglu_alpha(), 1.702);
  EXPECT_DOUBLE_EQ(moe.swiglu_limit(), 7.0);
  EXPECT_EQ(moe.shared_expert_intermediate_size(), 0);
}

TEST(GptOssConfigTest, FixtureWrittenByTransformers) {
  std::ifstream file(LLMC_SOURCE_DIR "/tests/fixtures/gpt_oss/config.json");
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(text.str(), "gpt_oss/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim(), 16);
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(8, 0));
  EXPECT_EQ(config->moe().num_experts(), 8);
  EXPECT_DOUBLE_EQ(config->moe().swiglu_limit(), 1.5);
  EXPECT_EQ(config->rope().scaling(), RopeConfig::YARN);
  EXPECT_TRUE(config->rope().untruncated());  // "truncate": false in rope_parameters
}

TEST(GptOssConfigTest, ExplicitFieldsWin) {
  Json json = Minimal();
  json["layer_types"] = {"full_attention", "sliding_attention", "full_attention",
                         "sliding_attention"};
  json["sliding_window"] = 16;
  json["num_experts"] = 16;  // the attribute_map alias of num_local_experts
  json["num_experts_per_tok"] = 2;
  json["swiglu_limit"] = 3.5;
  json["attention_bias"] = false;
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(0, 16, 0, 16));
  EXPECT_EQ(config->moe().num_experts(), 16);
  EXPECT_EQ(config->moe().top_k(), 2);
  EXPECT_DOUBLE_EQ(config->moe().swiglu_limit(), 3.5);
  EXPECT_FALSE(config->attention_bias());
  EXPECT_EQ(config->rope().scaling(), RopeConfig::SCALING_NONE);
  EXPECT_DOUBLE_EQ(config->rope().theta(), 10000.0);
}

TEST(GptOssConfigTest, RefusalsNameTheField) {
  Json json = Minimal();
  json["num_experts"] = 8;
  json["num_local_experts"] = 16;
  EXPECT_THAT(std::string(Parse(json).status().message()),
              HasSubstr("field \"num_local_experts\""));
  json = Minimal();
  json["sliding_window"] = nullptr;  // the default layer_types slide
  EXPECT_THAT(std::string(Parse(json).status().message()), HasSubstr("field \"sliding_window\""));
  json = Minimal();
  json["swiglu_limit"] = -1.0;
  EXPECT_THAT(std::string(Parse(json).status().message()), HasSubstr("field \"swiglu_limit\""));
  json = Minimal();
  json["num_experts_per_tok"] = 200;
  EXPECT_THAT(std::string(Parse(json).status().message()),
              HasSubstr("field \"num_experts_per_tok\""));
}

}  // namespace
}  // namespace llmc
