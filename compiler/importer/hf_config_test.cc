#include "compiler/importer/hf_config.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "compiler/arch/family.h"
#include "compiler/importer/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmc {
namespace {

using ::llmc::testing_util::LlamaConfigJson;
using ::llmrt::plan::GenerationDefaults;
using ::llmrt::plan::ModelConfig;
using ::llmrt::plan::RopeConfig;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

absl::StatusOr<ModelConfig> Parse(const Json& config) {
  return ParseModelConfig(config.dump(2), "dir/config.json");
}

std::string ErrorOf(const Json& config) {
  auto parsed = Parse(config);
  return parsed.ok() ? std::string() : std::string(parsed.status().message());
}

absl::StatusOr<GenerationDefaults> ParseGeneration(const std::optional<Json>& generation,
                                                   const Json& config) {
  const std::string generation_text = generation.has_value() ? generation->dump() : "";
  return ParseGenerationDefaults(
      generation.has_value() ? std::optional<std::string_view>(generation_text) : std::nullopt,
      "dir/generation_config.json", config.dump(), "dir/config.json");
}

TEST(ModelConfigTest, LlamaFieldsAreRead) {
  auto config = Parse(LlamaConfigJson());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->architecture(), "LlamaForCausalLM");
  EXPECT_EQ(config->model_type(), "llama");
  EXPECT_EQ(config->vocab_size(), 32);
  EXPECT_EQ(config->hidden_size(), 16);
  EXPECT_EQ(config->intermediate_size(), 24);
  EXPECT_EQ(config->num_layers(), 2);
  EXPECT_EQ(config->num_attention_heads(), 4);
  EXPECT_EQ(config->num_kv_heads(), 2);
  EXPECT_EQ(config->head_dim(), 4);
  EXPECT_EQ(config->max_position_embeddings(), 128);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(config->rope().theta(), 500000.0);
  EXPECT_EQ(config->rope().scaling(), RopeConfig::SCALING_NONE);
  EXPECT_EQ(config->sliding_window(), 0);
  EXPECT_FALSE(config->attention_bias());
  EXPECT_FALSE(config->tie_word_embeddings());
  EXPECT_EQ(config->hidden_act(), "silu");
  EXPECT_EQ(config->checkpoint_dtype(), llmrt::plan::BF16);
}

TEST(ModelConfigTest, LlamaBiases) {
  Json json = LlamaConfigJson();
  EXPECT_FALSE(Parse(json)->mlp_bias());
  json["mlp_bias"] = true;
  EXPECT_TRUE(Parse(json)->mlp_bias());
  EXPECT_FALSE(Parse(json)->attention_bias());
  json["attention_bias"] = true;
  EXPECT_TRUE(Parse(json)->attention_bias());
  json["mlp_bias"] = 1;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"mlp_bias\": expected true or false, found 1"));
}

TEST(ModelConfigTest, LlamaDefaultsFollowTransformers) {
  Json json = LlamaConfigJson();
  for (const char* field :
       {"num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta",
        "tie_word_embeddings", "hidden_act", "torch_dtype", "model_type"}) {
    json.erase(field);
  }
  json["attention_bias"] = true;
  json["head_dim"] = 8;  // explicit head_dim wins over hidden / heads
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_kv_heads(), 4);  // = num_attention_heads
  EXPECT_EQ(config->head_dim(), 8);
  EXPECT_EQ(config->max_position_embeddings(), 2048);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-6);
  EXPECT_DOUBLE_EQ(config->rope().theta(), 10000.0);
  EXPECT_FALSE(config->tie_word_embeddings());
  EXPECT_EQ(config->hidden_act(), "silu");
  EXPECT_EQ(config->model_type(), "llama");
  EXPECT_TRUE(config->attention_bias());
  EXPECT_EQ(config->checkpoint_dtype(), llmrt::plan::DTYPE_UNSPECIFIED);
}

TEST(ModelConfigTest, MistralSlidingWindowAndDefaults) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"MistralForCausalLM"};
  json.erase("model_type");
  json.erase("num_key_value_heads");
  json["num_attention_heads"] = 16;
  json["hidden_size"] = 64;
  json["attention_bias"] = true;  // MistralConfig has no such field: ignored
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "mistral");
  EXPECT_EQ(config->num_kv_heads(), 8);  // MistralConfig's default when the key is absent
  EXPECT_EQ(config->sliding_window(), 4096);
  EXPECT_FALSE(config->attention_bias());

  json["num_key_value_heads"] = nullptr;  // explicit null: same as the query heads
  json["sliding_window"] = nullptr;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_kv_heads(), 16);
  EXPECT_EQ(config->sliding_window(), 0);

  json["sliding_window"] = 2048;
  EXPECT_EQ(Parse(json)->sliding_window(), 2048);
  json["sliding_window"] = "wide";
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"sliding_window\": expected a positive integer, "
                                       "found \"wide\""));
}

TEST(ModelConfigTest, Qwen2HasAttentionBiasAndNoSlidingWindow) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Qwen2ForCausalLM"};
  json["model_type"] = "qwen2";
  json["sliding_window"] = 4096;  // ignored while use_sliding_window is false
  json["use_sliding_window"] = false;
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->attention_bias());
  EXPECT_EQ(config->sliding_window(), 0);
  EXPECT_EQ(config->layer_sliding_windows_size(), 0);
}

// Qwen2Config: with use_sliding_window, layers i >= max_window_layers (default 28) use
// sliding_window (default 4096); config.json's layer_types, when present, decide instead.
TEST(ModelConfigTest, Qwen2SlidingWindowLayers) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Qwen2ForCausalLM"};
  json["num_hidden_layers"] = 3;
  json["use_sliding_window"] = true;
  json["sliding_window"] = 8;
  json["max_window_layers"] = 1;
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->sliding_window(), 8);
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(0, 8, 8));
  json["max_window_layers"] = 0;  // every layer alike: one window, no per-layer list
  EXPECT_EQ(Parse(json)->sliding_window(), 8);
  EXPECT_EQ(Parse(json)->layer_sliding_windows_size(), 0);
  json.erase("max_window_layers");  // 28 >= 3 layers: none slides
  EXPECT_EQ(Parse(json)->sliding_window(), 0);
  EXPECT_EQ(Parse(json)->layer_sliding_windows_size(), 0);
  json["max_window_layers"] = 2;
  json.erase("sliding_window");
  EXPECT_THAT(Parse(json)->layer_sliding_windows(), ElementsAre(0, 0, 4096));
  json["sliding_window"] = nullptr;  // no window: full attention everywhere
  EXPECT_EQ(Parse(json)->sliding_window(), 0);

  json["sliding_window"] = 8;
  json["layer_types"] = {"sliding_attention", "full_attention", "attention"};
  EXPECT_THAT(Parse(json)->layer_sliding_windows(), ElementsAre(8, 0, 0));
  json["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"layer_types\": expected a list of "
                                       "num_hidden_layers (3) layer types, found"));
  json["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"layer_types\": entry 1 is \"chunked_attention\"; "
                                       "supported: \"full_attention\", \"sliding_attention\""));
  // Qwen2Config drops the window when use_sliding_window is false; a sliding layer then has none.
  json["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  json["use_sliding_window"] = false;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"sliding_window\": expected a positive integer "
                                       "(layer_types has sliding_attention layers"));
  json.erase("layer_types");
  json["use_sliding_window"] = true;
  json["max_window_layers"] = -1;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"max_window_layers\": expected a non-negative "
                                       "integer, found -1"));
}

// SmolLM3Config: rope_theta 2e6, tied embeddings, 4 kv heads by default; every
// no_rope_layer_interval-th layer (default 4) is NoPE unless no_rope_layers lists them; with
// use_sliding_window, the NoPE layers slide.
TEST(ModelConfigTest, SmolLM3NoRopeLayersAndDefaults) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"SmolLM3ForCausalLM"};
  for (const char* field :
       {"model_type", "rope_theta", "tie_word_embeddings", "num_key_value_heads", "rms_norm_eps"})
    json.erase(field);
  json["num_hidden_layers"] = 8;
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "smollm3");
  EXPECT_DOUBLE_EQ(config->rope().theta(), 2000000.0);
  EXPECT_TRUE(config->tie_word_embeddings());
  EXPECT_EQ(config->num_kv_heads(), 4);
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-6);
  EXPECT_THAT(config->layers_without_rope(), ElementsAre(3, 7));
  EXPECT_EQ(config->sliding_window(), 0);
  json["no_rope_layer_interval"] = 3;
  EXPECT_THAT(Parse(json)->layers_without_rope(), ElementsAre(2, 5));
  json["no_rope_layers"] = {0, 1, 1, 1, 1, 1, 1, 0, 1};  // longer than the layers: tail unused
  EXPECT_THAT(Parse(json)->layers_without_rope(), ElementsAre(0, 7));
  json["use_sliding_window"] = true;
  json["sliding_window"] = 16;
  config = Parse(json);
  EXPECT_EQ(config->sliding_window(), 16);
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(16, 0, 0, 0, 0, 0, 0, 16));
  json["use_sliding_window"] = false;
  EXPECT_EQ(Parse(json)->sliding_window(), 0);
  json["no_rope_layers"] = {1, 1, 0};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"no_rope_layers\": expected a list of at least "
                                       "num_hidden_layers (8) entries, each 0 (no rope) or 1"));
  json["no_rope_layers"] = {1, 1, 1, 1, 1, 1, 1, 2};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"no_rope_layers\": expected"));
  json["no_rope_layers"] = nullptr;
  json["no_rope_layer_interval"] = 0;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"no_rope_layer_interval\": expected a positive "
                                       "integer, found 0"));
  json.erase("no_rope_layer_interval");
  json["mlp_bias"] = true;
  json["attention_bias"] = true;
  EXPECT_TRUE(Parse(json)->mlp_bias());
  EXPECT_TRUE(Parse(json)->attention_bias());
  // SmolLM3Config's pad_token_id 128004 and bos/eos 128000/128001 when config.json has none.
  json.erase("bos_token_id");
  json.erase("eos_token_id");
  auto generation = ParseGeneration(std::nullopt, json);
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(generation->bos_token_id(), 128000);
  EXPECT_THAT(generation->eos_token_ids(), ElementsAre(128001));
  EXPECT_EQ(generation->pad_token_id(), 128004);
}

// Olmo2Config: rms_norm_eps 1e-5, no bos, eos 50279, pad 1, kv heads = heads.
TEST(ModelConfigTest, Olmo2Defaults) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Olmo2ForCausalLM"};
  for (const char* field : {"model_type", "rms_norm_eps", "num_key_value_heads", "bos_token_id",
                            "eos_token_id", "rope_theta"})
    json.erase(field);
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "olmo2");
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-5);
  EXPECT_DOUBLE_EQ(config->rope().theta(), 10000.0);
  EXPECT_EQ(config->num_kv_heads(), 4);
  EXPECT_FALSE(config->attention_bias());
  EXPECT_FALSE(config->tie_word_embeddings());
  auto generation = ParseGeneration(std::nullopt, json);
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(generation->bos_token_id(), -1);
  EXPECT_THAT(generation->eos_token_ids(), ElementsAre(50279));
  EXPECT_EQ(generation->pad_token_id(), 1);
  json["attention_bias"] = "yes";
  EXPECT_THAT(ErrorOf(json),
              HasSubstr("field \"attention_bias\": expected true or false, found \"yes\""));
}

// LongRoPE as _compute_longrope_parameters reads it, with the factor set chosen for the plan's
// context (max_position_embeddings 128).
TEST(ModelConfigTest, LongRopeFactorsChosenForThePlansContext) {
  Json json = LlamaConfigJson();  // head_dim 4: two rotated pairs
  json["rope_scaling"] = {{"rope_type", "longrope"},
                          {"short_factor", {1.0, 1.5}},
                          {"long_factor", {2.0, 3.0}},
                          {"original_max_position_embeddings", 32}};
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LONGROPE);
  EXPECT_TRUE(config->rope().long_factors());
  EXPECT_THAT(config->rope().ext_factors(), ElementsAre(2.0, 3.0));
  EXPECT_EQ(config->rope().original_max_position_embeddings(), 32);
  EXPECT_DOUBLE_EQ(config->rope().factor(), 4.0);  // 128 / 32
  EXPECT_DOUBLE_EQ(config->rope().attention_factor(),
                   std::sqrt(1 + std::log(4.0) / std::log(32.0)));
  // A context within the original one: short_factor, and no cos/sin scale (factor 1).
  json["rope_scaling"]["original_max_position_embeddings"] = 128;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->rope().long_factors());
  EXPECT_THAT(config->rope().ext_factors(), ElementsAre(1.0, 1.5));
  EXPECT_DOUBLE_EQ(config->rope().attention_factor(), 1.0);
  // The top-level field wins, as standardize_rope_params gives it priority.
  json["original_max_position_embeddings"] = 64;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().original_max_position_embeddings(), 64);
  EXPECT_TRUE(config->rope().long_factors());
  EXPECT_DOUBLE_EQ(config->rope().attention_factor(),
                   std::sqrt(1 + std::log(2.0) / std::log(64.0)));
  json["rope_scaling"]["attention_factor"] = 0.75;
  EXPECT_DOUBLE_EQ(Parse(json)->rope().attention_factor(), 0.75);

  json["rope_scaling"]["long_factor"] = {2.0, 3.0, 4.0};
  EXPECT_THAT(ErrorOf(json),
              HasSubstr("field \"long_factor\": expected as many numbers as short_factor"));
  json["rope_scaling"]["short_factor"] = {1.0, 1.0, 1.0};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"rope_scaling\": expected short_factor and "
                                       "long_factor of 2 numbers (one per rotated pair of the 4 "
                                       "rotated dims), found 3"));
  json["rope_scaling"]["short_factor"] = {1.0, -1.0};
  EXPECT_THAT(ErrorOf(json),
              HasSubstr("field \"short_factor\": expected a list of positive numbers"));
  json["rope_scaling"].erase("short_factor");
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"short_factor\": expected a list of positive "
                                       "numbers, found nothing"));
}

TEST(ModelConfigTest, Phi3DefaultsPartialRotaryAndRefusals) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Phi3ForCausalLM"};
  for (const char* field : {"model_type", "rms_norm_eps", "num_key_value_heads", "bos_token_id",
                            "eos_token_id", "rope_theta", "max_position_embeddings"})
    json.erase(field);
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "phi3");
  EXPECT_DOUBLE_EQ(config->rms_norm_eps(), 1e-5);
  EXPECT_EQ(config->num_kv_heads(), 4);
  EXPECT_EQ(config->max_position_embeddings(), 4096);
  EXPECT_EQ(config->sliding_window(), 0);
  EXPECT_EQ(config->rope().rotary_dim(), 0);
  auto generation = ParseGeneration(std::nullopt, json);
  ASSERT_TRUE(generation.ok()) << generation.status();
  EXPECT_EQ(generation->bos_token_id(), 1);
  EXPECT_THAT(generation->eos_token_ids(), ElementsAre(32000));
  EXPECT_EQ(generation->pad_token_id(), 32000);
  json["sliding_window"] = 2047;
  EXPECT_EQ(Parse(json)->sliding_window(), 2047);
  EXPECT_THAT(SupportedArchitectures(), HasSubstr("Phi3ForCausalLM"));

  // Phi-4-mini's shape: partial_rotary_factor 0.75 of head_dim 16 rotates 12 dims (6 pairs).
  json["hidden_size"] = 64;
  json["partial_rotary_factor"] = 0.75;
  json["original_max_position_embeddings"] = 1024;
  const std::vector<double> six = {1, 1, 1, 2, 2, 2}, other = {1, 2, 3, 4, 5, 6};
  json["rope_scaling"] = {{"rope_type", "longrope"}, {"short_factor", six}, {"long_factor", other}};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().rotary_dim(), 12);
  EXPECT_TRUE(config->rope().long_factors());  // 4096 > 1024
  EXPECT_THAT(config->rope().ext_factors(), ElementsAre(1, 2, 3, 4, 5, 6));
  // rope_parameters' own partial_rotary_factor wins over the top-level one.
  json["rope_scaling"]["partial_rotary_factor"] = 0.5;
  json["rope_scaling"]["short_factor"] = {1, 1, 1, 1};
  json["rope_scaling"]["long_factor"] = {1, 2, 3, 4};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().rotary_dim(), 8);
  json["rope_scaling"]["partial_rotary_factor"] = 0.1875;  // 3 dims: no rotate-half pairs
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"partial_rotary_factor\": expected a factor in (0, "
                                       "1] giving an even number of rotated dims of head_dim 16, "
                                       "found 0.1875 (3 dims)"));
  json["rope_scaling"]["partial_rotary_factor"] = 0.5;
  json["rope_scaling"]["long_factor"] = six;
  EXPECT_THAT(ErrorOf(json), HasSubstr("expected as many numbers as short_factor"));
  json["rope_scaling"]["short_factor"] = six;
  EXPECT_THAT(ErrorOf(json), HasSubstr("expected short_factor and long_factor of 4 numbers"));
  // Phi3Config reads "yarn" as longrope; refused rather than computed as another type.
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"rope_scaling\": Phi3ForCausalLM takes rope type "
                                       "default or longrope"));
  // Without the top-level field Phi3Config's 4096 would override rope_scaling's value.
  json.erase("original_max_position_embeddings");
  json["rope_scaling"] = {{"rope_type", "longrope"},
                          {"short_factor", {1, 1, 1, 1}},
                          {"long_factor", {1, 1, 1, 1}},
                          {"partial_rotary_factor", 0.5},
                          {"original_max_position_embeddings", 1024}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"original_max_position_embeddings\": absent at the "
                                       "top level"));
}

TEST(ModelConfigTest, RopeScalingTypes) {
  Json json = LlamaConfigJson();
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LINEAR);
  EXPECT_DOUBLE_EQ(config->rope().factor(), 4.0);

  json["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LLAMA3);
  EXPECT_DOUBLE_EQ(config->rope().factor(), 8.0);
  EXPECT_DOUBLE_EQ(config->rope().low_freq_factor(), 1.0);
  EXPECT_DOUBLE_EQ(config->rope().high_freq_factor(), 4.0);
  EXPECT_EQ(config->rope().original_max_position_embeddings(), 8192);

  json["rope_scaling"].erase("original_max_position_embeddings");
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"rope_scaling\": field "
                                       "\"original_max_position_embeddings\": expected a positive "
                                       "integer, found nothing"));

  json["rope_scaling"] = {{"rope_type", "su"}, {"factor", 2.0}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("dir/config.json: field \"rope_scaling\": rope type \"su\" "
                                       "is not supported (supported: default, linear, llama3, "
                                       "yarn, longrope, dynamic)"));
  // Dynamic NTK keeps the default frequencies up to max_position_embeddings, the plan's limit.
  json["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::DYNAMIC);
  EXPECT_DOUBLE_EQ(config->rope().factor(), 2.0);
  json["rope_scaling"].erase("factor");
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"factor\": expected a positive number"));
  // Only Phi3ForCausalLM rotates part of each head.
  json["rope_scaling"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"rope_scaling\": partial_rotary_factor 0.5 is not "
                                       "supported by LlamaForCausalLM"));
  // YaRN is not Qwen3's alone: every family's rotary embedding reads the same rope parameters.
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::YARN);
  // original_max_position_embeddings absent: the config's max_position_embeddings (128).
  EXPECT_EQ(config->rope().original_max_position_embeddings(), 128);
  json["rope_scaling"] = {{"type", "linear"}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"factor\": expected a positive number"));
  json["rope_scaling"] = nullptr;
  EXPECT_EQ(Parse(json)->rope().scaling(), RopeConfig::SCALING_NONE);
}

TEST(ModelConfigTest, NewerRopeParametersLayout) {
  Json json = LlamaConfigJson();
  json.erase("rope_theta");
  json["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 1e6}, {"factor", 2.0}};
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->rope().theta(), 1e6);
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LINEAR);
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000.0}};
  EXPECT_DOUBLE_EQ(Parse(json)->rope().theta(), 20000.0);
  EXPECT_EQ(Parse(json)->rope().scaling(), RopeConfig::SCALING_NONE);
}

TEST(ModelConfigTest, BadJsonNamesLineAndColumn) {
  auto config = ParseModelConfig("{\n  \"vocab_size\": 3,\n    oops\n}", "dir/config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(),
              HasSubstr("dir/config.json: invalid JSON at line 3, column 5: "));
  EXPECT_THAT(ParseModelConfig("[1]", "c.json").status().message(),
              HasSubstr("c.json: expected a JSON object at the top level, found [1]"));
  EXPECT_THAT(ParseModelConfig("", "c.json").status().message(), HasSubstr("invalid JSON"));
}

// Qwen3Config: head_dim defaults to 128 (not hidden / heads), num_key_value_heads to 32,
// attention_bias to false; use_sliding_window true is refused by name.
TEST(ModelConfigTest, Qwen3DefaultsAndRefusals) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Qwen3ForCausalLM"};
  json.erase("head_dim");
  json.erase("num_key_value_heads");
  json.erase("model_type");
  json["num_attention_heads"] = 32;
  auto config = ParseModelConfig(json.dump(), "dir/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type(), "qwen3");
  EXPECT_EQ(config->head_dim(), 128);
  EXPECT_EQ(config->num_kv_heads(), 32);
  EXPECT_FALSE(config->attention_bias());
  json["use_sliding_window"] = true;
  EXPECT_THAT(ErrorOf(json), HasSubstr("dir/config.json: field \"use_sliding_window\": Qwen3 "
                                       "sliding-window layers (true) are not supported"));
}

// YaRN as Qwen3 ships it: the defaults transformers' _compute_yarn_parameters uses, and the
// cos/sin scale 0.1 ln(factor) + 1 (or mscale / mscale_all_dim, or an explicit attention_factor).
TEST(ModelConfigTest, YarnRopeScaling) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"Qwen3ForCausalLM"};
  json["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  auto config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::YARN);
  EXPECT_DOUBLE_EQ(config->rope().factor(), 4.0);
  EXPECT_EQ(config->rope().original_max_position_embeddings(), 32768);
  EXPECT_DOUBLE_EQ(config->rope().beta_fast(), 32.0);
  EXPECT_DOUBLE_EQ(config->rope().beta_slow(), 1.0);
  EXPECT_FALSE(config->rope().untruncated());
  EXPECT_DOUBLE_EQ(config->rope().attention_factor(), 0.1 * std::log(4.0) + 1.0);
  json["rope_scaling"]["mscale"] = 1.0;
  json["rope_scaling"]["mscale_all_dim"] = 0.5;
  json["rope_scaling"]["truncate"] = false;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_DOUBLE_EQ(config->rope().attention_factor(),
                   (0.1 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0));
  EXPECT_TRUE(config->rope().untruncated());
  json["rope_scaling"]["attention_factor"] = 1.25;
  EXPECT_DOUBLE_EQ(Parse(json)->rope().attention_factor(), 1.25);
  json["rope_scaling"]["beta_fast"] = -1;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"beta_fast\": expected a positive number"));
}

Json GemmaConfigJson(const char* architecture) {
  return {{"architectures", {architecture}}, {"vocab_size", 32},       {"hidden_size", 16},
          {"intermediate_size", 24},         {"num_hidden_layers", 7}, {"num_attention_heads", 2},
          {"num_key_value_heads", 1}};
}

TEST(ModelConfigTest, Gemma2DefaultsAndRefusals) {
  absl::StatusOr<ModelConfig> config = Parse(GemmaConfigJson("Gemma2ForCausalLM"));
  ASSERT_TRUE(config.ok()) << config.status();
  // Gemma2Config's class defaults.
  EXPECT_EQ(config->head_dim(), 256);
  EXPECT_EQ(config->hidden_act(), "gelu_pytorch_tanh");
  EXPECT_EQ(config->query_pre_attn_scalar(), 256.0);
  EXPECT_EQ(config->attn_logit_softcapping(), 50.0);
  EXPECT_EQ(config->final_logit_softcapping(), 30.0);
  EXPECT_TRUE(config->tie_word_embeddings());
  EXPECT_EQ(config->rms_norm_eps(), 1e-6);
  EXPECT_EQ(config->rope().theta(), 10000.0);
  EXPECT_FALSE(config->has_sliding_layer_rope());
  // Even layers slide (layer_types' default), with the default window.
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(4096, 0, 4096, 0, 4096, 0, 4096));

  Json json = GemmaConfigJson("Gemma2ForCausalLM");
  json["attn_logit_softcapping"] = nullptr;  // transformers tests `is not None`
  json["final_logit_softcapping"] = 12.5;
  json["query_pre_attn_scalar"] = 144;
  json["hidden_act"] = "gelu";  // Gemma reads hidden_activation only, as transformers does
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->attn_logit_softcapping(), 0.0);
  EXPECT_EQ(config->final_logit_softcapping(), 12.5);
  EXPECT_EQ(config->query_pre_attn_scalar(), 144.0);

  json = GemmaConfigJson("Gemma2ForCausalLM");
  json["hidden_activation"] = "gelu";
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"hidden_activation\": activation \"gelu\" is not "
                                       "supported"));
  json = GemmaConfigJson("Gemma2ForCausalLM");
  json["use_bidirectional_attention"] = true;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"use_bidirectional_attention\""));
  json = GemmaConfigJson("Gemma2ForCausalLM");
  json["final_logit_softcapping"] = -1;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"final_logit_softcapping\": expected a positive"));
}

TEST(ModelConfigTest, Gemma3RopePerLayerType) {
  // transformers 5's layout: rope_parameters per layer type.
  Json json = GemmaConfigJson("Gemma3ForCausalLM");
  json["sliding_window"] = 512;
  json["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  absl::StatusOr<ModelConfig> config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LINEAR);
  EXPECT_EQ(config->rope().factor(), 8.0);
  EXPECT_EQ(config->rope().theta(), 1000000.0);
  ASSERT_TRUE(config->has_sliding_layer_rope());
  EXPECT_EQ(config->sliding_layer_rope().scaling(), RopeConfig::SCALING_NONE);
  EXPECT_EQ(config->sliding_layer_rope().theta(), 10000.0);
  // sliding_window_pattern 6: five local layers, then a global one.
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(512, 512, 512, 512, 512, 0, 512));
  EXPECT_EQ(config->attn_logit_softcapping(), 0.0);
  EXPECT_EQ(config->final_logit_softcapping(), 0.0);

  // The older layout: rope_theta and rope_scaling for the global layers, rope_local_base_freq.
  json = GemmaConfigJson("Gemma3ForCausalLM");
  json["rope_theta"] = 500000.0;
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  json["rope_local_base_freq"] = 20000.0;
  json["sliding_window_pattern"] = 2;
  config = Parse(json);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->rope().theta(), 500000.0);
  EXPECT_EQ(config->rope().scaling(), RopeConfig::LINEAR);
  EXPECT_EQ(config->sliding_layer_rope().theta(), 20000.0);
  EXPECT_EQ(config->sliding_layer_rope().scaling(), RopeConfig::SCALING_NONE);
  EXPECT_THAT(config->layer_sliding_windows(), ElementsAre(4096, 0, 4096, 0, 4096, 0, 4096));

  json = GemmaConfigJson("Gemma3ForCausalLM");
  json["rope_parameters"] = {{"full_attention", {{"rope_type", "mystery"}, {"factor", 2.0}}}};
  EXPECT_THAT(ErrorOf(json),
              HasSubstr("field \"rope_parameters\": rope type \"mystery\" is not supported"));
  json = GemmaConfigJson("Gemma3ForCausalLM");
  json["rope_parameters"] = {{"sliding_attention", 3}};
  EXPECT_THAT(ErrorOf(json), HasSubstr("sliding_attention"));
}

TEST(ModelConfigTest, UnknownArchitectureListsSupported) {
  Json json = LlamaConfigJson();
  json["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_THAT(ErrorOf(json),
              HasSubstr("dir/config.json: field \"architectures\": architecture "
                        "\"GPT2LMHeadModel\" is not supported (supported: LlamaForCausalLM, "
                        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
                        "SmolLM3ForCausalLM, Olmo2ForCausalLM, "));
  EXPECT_THAT(ErrorOf(json), HasSubstr("Gemma2ForCausalLM, Gemma3ForCausalLM)"));
  json.erase("architectures");
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"architectures\": expected a non-empty list"));
}

TEST(ModelConfigTest, MissingAndMistypedFields) {
  Json json = LlamaConfigJson();
  json.erase("hidden_size");
  EXPECT_THAT(ErrorOf(json), HasSubstr("dir/config.json: field \"hidden_size\": expected a "
                                       "positive integer, found nothing (the field is missing)"));
  json["hidden_size"] = "abc";
  EXPECT_THAT(ErrorOf(json), HasSubstr("dir/config.json: field \"hidden_size\": expected a "
                                       "positive integer, found \"abc\""));
  json["hidden_size"] = 16.5;
  EXPECT_THAT(ErrorOf(json), HasSubstr("found 16.5"));
  json = LlamaConfigJson();
  json["num_hidden_layers"] = 0;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"num_hidden_layers\": expected a positive "
                                       "integer, found 0"));
  json = LlamaConfigJson();
  json["rms_norm_eps"] = "small";
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"rms_norm_eps\": expected a positive number"));
  json = LlamaConfigJson();
  json["tie_word_embeddings"] = 1;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"tie_word_embeddings\": expected true or false, "
                                       "found 1"));
}

TEST(ModelConfigTest, UnsupportedFeatures) {
  Json json = LlamaConfigJson();
  // Exact (erf) gelu is another function than the tanh approximation the kernels compute.
  for (const char* activation : {"gelu", "relu", "gelu_fast"}) {
    json["hidden_act"] = activation;
    EXPECT_THAT(ErrorOf(json),
                HasSubstr(std::string("field \"hidden_act\": activation \"") + activation +
                          "\" is not supported (supported: silu, gelu_pytorch_tanh, gelu_new; "
                          "exact erf \"gelu\" is not implemented)"));
  }
  // gelu_new and gelu_pytorch_tanh are one function, stored under the latter's name.
  for (const char* activation : {"gelu_new", "gelu_pytorch_tanh"}) {
    json["hidden_act"] = activation;
    absl::StatusOr<ModelConfig> config = ParseModelConfig(json.dump(), "config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->hidden_act(), "gelu_pytorch_tanh");
  }
  json = LlamaConfigJson();
  json["num_key_value_heads"] = 3;
  EXPECT_THAT(ErrorOf(json), HasSubstr("field \"num_key_value_heads\": expected a divisor of "
                                       "num_attention_heads (4), found 3"));
  json = LlamaConfigJson();
  json["hidden_size"] = 18;
  EXPECT_THAT(ErrorOf(json), HasSubstr("hidden_size 18 is not divisible by num_attention_heads 4"));
}

TEST(GenerationDefaultsTest, ReadsGenerationConfig) {
  const Json generation = {{"bos_token_id", 128000}, {"eos_token_id", {128001, 128008, 128009}},
                           {"pad_token_id", 0},      {"do_sample", true},
                           {"temperature", 0.6},     {"top_k", 40},
                           {"top_p", 0.9},           {"repetition_penalty", 1.1},
                           {"max_length", 4096}};
  auto defaults = ParseGeneration(generation, LlamaConfigJson());
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->bos_token_id(), 128000);
  EXPECT_THAT(defaults->eos_token_ids(), ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(defaults->pad_token_id(), 0);
  EXPECT_TRUE(defaults->do_sample());
  EXPECT_DOUBLE_EQ(defaults->temperature(), 0.6);
  EXPECT_EQ(defaults->top_k(), 40);
  EXPECT_DOUBLE_EQ(defaults->top_p(), 0.9);
  EXPECT_DOUBLE_EQ(defaults->repetition_penalty(), 1.1);
  EXPECT_EQ(defaults->max_length(), 4096);
}

TEST(GenerationDefaultsTest, FallsBackToConfigThenClassDefaults) {
  Json config = LlamaConfigJson();
  config["bos_token_id"] = 5;
  config["eos_token_id"] = {6, 7};
  auto defaults = ParseGeneration(std::nullopt, config);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->bos_token_id(), 5);
  EXPECT_THAT(defaults->eos_token_ids(), ElementsAre(6, 7));
  EXPECT_EQ(defaults->pad_token_id(), -1);
  // transformers' GenerationConfig defaults.
  EXPECT_FALSE(defaults->do_sample());
  EXPECT_DOUBLE_EQ(defaults->temperature(), 1.0);
  EXPECT_EQ(defaults->top_k(), 50);
  EXPECT_DOUBLE_EQ(defaults->top_p(), 1.0);
  EXPECT_DOUBLE_EQ(defaults->repetition_penalty(), 1.0);
  EXPECT_EQ(defaults->max_length(), 20);

  // Absent everywhere: LlamaConfig's bos 1 / eos 2; Qwen2Config has none.
  config.erase("bos_token_id");
  config.erase("eos_token_id");
  defaults = ParseGeneration(Json::object(), config);
  EXPECT_EQ(defaults->bos_token_id(), 1);
  EXPECT_THAT(defaults->eos_token_ids(), ElementsAre(2));
  config["architectures"] = {"Qwen2ForCausalLM"};
  defaults = ParseGeneration(Json::object(), config);
  EXPECT_EQ(defaults->bos_token_id(), -1);
  EXPECT_TRUE(defaults->eos_token_ids().empty());
  // Explicit null in config.json: none.
  config["architectures"] = {"LlamaForCausalLM"};
  config["bos_token_id"] = nullptr;
  EXPECT_EQ(ParseGeneration(std::nullopt, config)->bos_token_id(), -1);
}

TEST(GenerationDefaultsTest, BadValuesNameFileAndField) {
  auto defaults = ParseGeneration(Json{{"eos_token_id", "</s>"}}, LlamaConfigJson());
  ASSERT_FALSE(defaults.ok());
  EXPECT_THAT(defaults.status().message(),
              HasSubstr("dir/generation_config.json: field \"eos_token_id\": expected an integer "
                        "token id or a list of them, found \"</s>\""));
  defaults = ParseGeneration(Json{{"top_p", 1.5}}, LlamaConfigJson());
  EXPECT_THAT(defaults.status().message(), HasSubstr("field \"top_p\": expected a number in"));
  defaults = ParseGenerationDefaults("{oops", "dir/generation_config.json",
                                     LlamaConfigJson().dump(), "dir/config.json");
  EXPECT_THAT(defaults.status().message(),
              HasSubstr("dir/generation_config.json: invalid JSON at line 1, column 2"));
}

}  // namespace
}  // namespace llmc
