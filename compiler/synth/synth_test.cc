#include "compiler/synth/synth.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/importer/checkpoint.h"
#include "compiler/pipeline/compile.h"
#include "compiler/synth/synth_tokenizer.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/model.h"
#include "runtime/plan/dtype.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A fresh directory per test, removed afterwards.
class SynthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string temp = (fs::temp_directory_path() / "llmc_synth_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(temp.data()), nullptr);
    root_ = temp;
  }
  void TearDown() override { fs::remove_all(root_); }

  // 2 layers, GQA 4/2 heads of 16, vocab 320: compiles and runs in well under a second.
  static SynthModelConfig TinyConfig() {
    SynthModelConfig config;
    config.vocab_size = 320;
    config.hidden_size = 64;
    config.intermediate_size = 96;
    config.num_layers = 2;
    config.num_attention_heads = 4;
    config.num_kv_heads = 2;
    config.head_dim = 16;
    config.max_position_embeddings = 128;
    return config;
  }

  fs::path root_;
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

TEST(SynthTokenizerTest, HasExactlyTheVocabularySizeAndImports) {
  for (int64_t vocab : {kSynthMinVocab, int64_t{300}, int64_t{32000}}) {
    absl::StatusOr<std::string> json = SynthTokenizerJson(vocab);
    ASSERT_TRUE(json.ok()) << json.status();
    absl::StatusOr<llmrt::plan::TokenizerSpec> spec = ImportTokenizerFromJson(*json, "");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->pieces_size(), vocab);
    EXPECT_TRUE(spec->byte_fallback());
    absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer = llmrt::Tokenizer::Create(*spec);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    // With only bytes (259) even "▁" is byte-encoded, and HF's decoder, like ours, replaces
    // "▁" before ByteFallback restores it: no round trip there.
    if (vocab == kSynthMinVocab) continue;
    // Byte fallback: any text survives the round trip.
    const std::string text = "Once upon a time, caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD!";
    std::vector<int32_t> ids = (*tokenizer)->Encode(text, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);  // <s>
    EXPECT_EQ((*tokenizer)->Decode(ids, true), text);
  }
}

TEST(SynthTokenizerTest, RefusesAVocabularyWithoutRoomForBytes) {
  absl::StatusOr<std::string> json = SynthTokenizerJson(kSynthMinVocab - 1);
  ASSERT_FALSE(json.ok());
  EXPECT_THAT(json.status().message(), HasSubstr("at least 259"));
}

// testdata/tokenizer_encodings.txt holds HF tokenizers' encodings of our vocab-32000 tokenizer
// (make_reference.py); our runtime must produce the same ids.
TEST(SynthTokenizerTest, EncodesLikeHuggingFaceTokenizers) {
  absl::StatusOr<std::string> json = SynthTokenizerJson(32000);
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<llmrt::plan::TokenizerSpec> spec =
      ImportTokenizerFromJson(*json, SynthTokenizerConfigJson(2048));
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer = llmrt::Tokenizer::Create(*spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::ifstream in(fs::path(LLMC_SYNTH_TESTDATA_DIR) / "tokenizer_encodings.txt");
  ASSERT_TRUE(in) << "missing testdata/tokenizer_encodings.txt";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    ASSERT_EQ(fields.size(), 2u) << line;
    const std::string text = nlohmann::json::parse(fields[0]).get<std::string>();
    std::vector<int32_t> expected;
    for (absl::string_view id : absl::StrSplit(fields[1], ' ', absl::SkipEmpty())) {
      expected.push_back(std::stoi(std::string(id)));
    }
    EXPECT_EQ((*tokenizer)->Encode(text, true), expected) << "text: " << fields[0];
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

// testdata/tinyllama_state_dict.txt is transformers' LlamaForCausalLM state_dict for TinyLlama's
// config (make_reference.py): the preset must produce exactly those names and shapes.
TEST(SynthTensorsTest, TinyLlamaPresetMatchesTransformersStateDict) {
  absl::StatusOr<SynthModelConfig> config = SynthPreset("tinyllama-1.1b");
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> ours;
  uint64_t parameters = 0;
  absl::StatusOr<std::vector<SynthTensor>> tensors = SynthTensors(*config);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  for (const SynthTensor& tensor : *tensors) {
    std::string line = tensor.name + " ";
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      line += (i ? "," : "") + std::to_string(tensor.shape[i]);
    }
    ours.push_back(line);
    parameters += tensor.num_elements();
  }
  std::vector<std::string> reference =
      absl::StrSplit(ReadFile(fs::path(LLMC_SYNTH_TESTDATA_DIR) / "tinyllama_state_dict.txt"), '\n',
                     absl::SkipEmpty());
  std::sort(ours.begin(), ours.end());
  std::sort(reference.begin(), reference.end());
  EXPECT_EQ(ours, reference);
  EXPECT_EQ(parameters, 1'100'048'384u);  // TinyLlama-1.1B's published parameter count
}

// testdata/smollm3_state_dict.txt: transformers' SmolLM3ForCausalLM for SmolLM3-3B's config
// (tied, so no lm_head), then its no_rope_layers.
std::vector<std::string> SmolLM3Reference(std::string* no_rope_layers) {
  std::vector<std::string> reference =
      absl::StrSplit(ReadFile(fs::path(LLMC_SYNTH_TESTDATA_DIR) / "smollm3_state_dict.txt"), '\n',
                     absl::SkipEmpty());
  EXPECT_TRUE(absl::StartsWith(reference.back(), "no_rope_layers "));
  *no_rope_layers = reference.back().substr(std::strlen("no_rope_layers "));
  reference.pop_back();
  return reference;
}

// The preset's tensors as "name d0,d1" lines, sorted, and their parameter count.
std::vector<std::string> PresetTensorLines(const std::string& preset, uint64_t* parameters) {
  absl::StatusOr<SynthModelConfig> config = SynthPreset(preset);
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::vector<SynthTensor>> tensors =
      config.ok() ? SynthTensors(*config) : config.status();
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  std::vector<std::string> lines;
  *parameters = 0;
  for (const SynthTensor& tensor : tensors.value_or(std::vector<SynthTensor>())) {
    lines.push_back(tensor.name + " " + absl::StrJoin(tensor.shape, ","));
    *parameters += tensor.num_parameters();
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

TEST(SynthTensorsTest, SmolLM3PresetMatchesTransformersStateDict) {
  uint64_t parameters = 0;
  std::vector<std::string> ours = PresetTensorLines("smollm3-3b", &parameters);
  std::string no_rope_layers;
  std::vector<std::string> reference = SmolLM3Reference(&no_rope_layers);
  std::sort(reference.begin(), reference.end());
  EXPECT_EQ(ours, reference);
  EXPECT_EQ(parameters, 3'075'098'624u);  // SmolLM3-3B's parameter count (tied embeddings)
}

// testdata/gemma2_2b_state_dict.txt / gemma3_1b_state_dict.txt: transformers' Gemma2ForCausalLM
// and Gemma3ForCausalLM for gemma-2-2b's and gemma-3-1b-pt's configs (tied, so no lm_head).
TEST(SynthTensorsTest, GemmaPresetsMatchTransformersStateDicts) {
  for (auto [preset, file, expected_parameters] :
       {std::tuple{"gemma2-2b", "gemma2_2b_state_dict.txt", uint64_t{2'614'341'888}},
        std::tuple{"gemma3-1b", "gemma3_1b_state_dict.txt", uint64_t{999'885'952}}}) {
    uint64_t parameters = 0;
    std::vector<std::string> ours = PresetTensorLines(preset, &parameters);
    std::vector<std::string> reference =
        absl::StrSplit(ReadFile(fs::path(LLMC_SYNTH_TESTDATA_DIR) / file), '\n', absl::SkipEmpty());
    std::sort(reference.begin(), reference.end());
    EXPECT_EQ(ours, reference) << preset;
    EXPECT_EQ(parameters, expected_parameters) << preset;  // 2.6B and 1.0B as published
  }
}

// testdata/phi3_mini_state_dict.txt: transformers' Phi3ForCausalLM for Phi-3-mini-4k's config,
// whose q/k/v and gate/up are fused tensors on disk.
TEST(SynthTensorsTest, Phi3MiniPresetMatchesTransformersStateDict) {
  uint64_t parameters = 0;
  std::vector<std::string> ours = PresetTensorLines("phi3-mini", &parameters);
  std::vector<std::string> reference =
      absl::StrSplit(ReadFile(fs::path(LLMC_SYNTH_TESTDATA_DIR) / "phi3_mini_state_dict.txt"), '\n',
                     absl::SkipEmpty());
  std::sort(reference.begin(), reference.end());
  EXPECT_EQ(ours, reference);
  EXPECT_EQ(parameters, 3'821'079'552u);  // Phi-3-mini's 3.8B
}

// testdata/{qwen3_moe,qwen2_moe,mixtral,gpt_oss}_state_dict.txt: transformers' MoE classes for
// the presets' configs as save_pretrained writes them (per-expert Qwen / Mixtral names; gpt-oss's
// experts as MXFP4 _blocks / _scales), then transformers' parameter counts. The counts are also
// the presets' published shape: total, experts, and active per token besides the embedding table
// (every non-expert weight plus top_k / num_experts of the experts).
struct MoePreset {
  const char* preset;
  const char* file;
  uint64_t total, experts, active;
  uint64_t top_k, num_experts;
};

void ExpectMoePresetMatchesTransformers(const MoePreset& c) {
  SCOPED_TRACE(c.preset);
  std::vector<std::string> reference =
      absl::StrSplit(ReadFile(fs::path(LLMC_SYNTH_TESTDATA_DIR) / c.file), '\n', absl::SkipEmpty());
  ASSERT_GE(reference.size(), 2u);
  EXPECT_EQ(reference[reference.size() - 2], absl::StrCat("parameters ", c.total));
  EXPECT_EQ(reference.back(), absl::StrCat("expert_parameters ", c.experts));
  reference.resize(reference.size() - 2);
  std::sort(reference.begin(), reference.end());
  uint64_t parameters = 0;
  EXPECT_EQ(PresetTensorLines(c.preset, &parameters), reference);
  EXPECT_EQ(parameters, c.total);

  absl::StatusOr<SynthModelConfig> config = SynthPreset(c.preset);
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::vector<SynthTensor>> tensors = SynthTensors(*config);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  uint64_t experts = 0, embedding = 0;
  for (const SynthTensor& tensor : *tensors) {
    if (absl::StrContains(tensor.name, ".experts.")) experts += tensor.num_parameters();
    if (tensor.name == "model.embed_tokens.weight") embedding = tensor.num_parameters();
  }
  EXPECT_EQ(experts, c.experts);
  EXPECT_EQ(c.total - embedding - experts + experts / c.num_experts * c.top_k, c.active);
}

TEST(SynthTensorsTest, MoePresetsMatchTransformersStateDicts) {
  for (const MoePreset& c : {
           MoePreset{"qwen3-moe-1.6b-a0.4b", "qwen3_moe_state_dict.txt", 1'646'582'784,
                     1'207'959'552, 434'035'712, 8, 64},
           MoePreset{"qwen2-moe-1.5b-a0.4b", "qwen2_moe_state_dict.txt", 1'486'652'416,
                     1'038'090'240, 362'185'728, 4, 60},
           MoePreset{"mixtral-1.5b-a0.4b", "mixtral_state_dict.txt", 1'516'930'048, 1'409'286'144,
                     427'197'440, 2, 8},
       }) {
    ExpectMoePresetMatchesTransformers(c);
  }
}

// gpt-oss's experts as its MXFP4 checkpoints store them: U8 _blocks and _scales in place of the
// stacked float matrices (each block byte two parameters).
TEST(SynthTensorsTest, GptOssPresetMatchesTransformersStateDict) {
  ExpectMoePresetMatchesTransformers(MoePreset{"gpt-oss-2b-a0.5b", "gpt_oss_state_dict.txt",
                                               2'066'556'672, 1'612'185'600, 449'980'160, 4, 32});
}

// An MXFP4 config (gpt-oss's quantization_config) gets its stacked experts as U8 _blocks of
// random E2M1 codes and _scales of kSynthMxfp4ScaleByte, out-major as gpt-oss ships them; every
// other tensor stays in the checkpoint dtype. Read back from the safetensors header and data.
TEST_F(SynthTest, Mxfp4ExpertsAreBlocksAndScales) {
  const fs::path config_path = root_ / "in.json";
  std::ofstream(config_path) << R"({"architectures": ["GptOssForCausalLM"], "model_type":
      "gpt_oss", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 32,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 8,
      "max_position_embeddings": 256, "quantization_config": {"quant_method": "mxfp4",
      "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
      "model.embed_tokens", "lm_head"]}})";
  absl::StatusOr<SynthModelConfig> config = SynthConfigFromFile(config_path.string());
  ASSERT_TRUE(config.ok()) << config.status();
  SynthOptions options;
  options.config = *config;
  options.seed = 7;
  options.output_dir = (root_ / "gpt_oss").string();
  ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
  const nlohmann::json written =
      nlohmann::json::parse(ReadFile(fs::path(options.output_dir) / "config.json"));
  EXPECT_EQ(written["quantization_config"]["quant_method"], "mxfp4");

  const std::string file = ReadFile(fs::path(options.output_dir) / "model.safetensors");
  ASSERT_GT(file.size(), 8u);
  uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, header_size));
  const char* data = file.data() + 8 + header_size;
  auto bytes_of = [&](const std::string& name) {
    const nlohmann::json& entry = header.at(name);
    const uint64_t begin = entry["data_offsets"][0], end = entry["data_offsets"][1];
    return std::vector<uint8_t>(data + begin, data + end);
  };
  const std::string prefix = "model.layers.1.mlp.experts.";
  EXPECT_FALSE(header.contains(prefix + "gate_up_proj"));
  EXPECT_EQ(header[prefix + "gate_up_proj_blocks"]["dtype"], "U8");
  EXPECT_EQ(header[prefix + "gate_up_proj_blocks"]["shape"],
            (std::vector<int64_t>{4, 64, 2, 16}));  // [E, 2I, H / 32, 16]
  EXPECT_EQ(header[prefix + "gate_up_proj_scales"]["shape"], (std::vector<int64_t>{4, 64, 2}));
  EXPECT_EQ(header[prefix + "down_proj_blocks"]["shape"], (std::vector<int64_t>{4, 64, 1, 16}));
  EXPECT_EQ(header[prefix + "down_proj_scales"]["dtype"], "U8");
  EXPECT_EQ(header[prefix + "down_proj_bias"]["dtype"], "F16");
  EXPECT_EQ(header["model.layers.1.mlp.router.weight"]["dtype"], "F16");

  for (uint8_t scale : bytes_of(prefix + "down_proj_scales")) ASSERT_EQ(scale, 120);
  const std::vector<uint8_t> blocks = bytes_of(prefix + "gate_up_proj_blocks");
  SynthTensor tensor{prefix + "gate_up_proj_blocks", {4, 64, 2, 16}, SynthTensor::Init::kE2M1Codes};
  std::vector<uint8_t> expected(blocks.size());
  SynthBytes(tensor, options.seed, 0, expected);
  EXPECT_EQ(blocks, expected);
  EXPECT_EQ(tensor.num_parameters(), 2 * blocks.size());
  // Both nibbles take every E2M1 code, each in 1/16 of the bytes (8192 of them: a binomial
  // standard deviation of 22, so 110 is five).
  ASSERT_EQ(blocks.size(), 8192u);
  std::vector<int> low(16), high(16);
  for (uint8_t byte : blocks) {
    ++low[byte & 15];
    ++high[byte >> 4];
  }
  for (int code = 0; code < 16; ++code) {
    EXPECT_NEAR(low[code], 8192 / 16, 110) << code;
    EXPECT_NEAR(high[code], 8192 / 16, 110) << code;
  }
}

// The preset's config.json leaves no_rope_layers to SmolLM3Config's default: the importer must
// derive transformers' list from it. 36 layers at toy width, so it also compiles and runs.
TEST_F(SynthTest, SmolLM3PresetNoRopeLayersCompileAndRun) {
  SynthOptions options;
  absl::StatusOr<SynthModelConfig> preset = SynthPreset("smollm3-3b");
  ASSERT_TRUE(preset.ok()) << preset.status();
  options.config = TinyConfig();
  options.config.architecture = preset->architecture;
  options.config.model_type = preset->model_type;
  options.config.num_layers = preset->num_layers;
  options.config.rope_theta = preset->rope_theta;
  options.config.tie_word_embeddings = preset->tie_word_embeddings;
  options.output_dir = (root_ / "model").string();
  ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.output_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  std::string no_rope_layers;
  SmolLM3Reference(&no_rope_layers);
  std::vector<std::string> flags(36, "1");
  for (int64_t layer : (*checkpoint)->config().layers_without_rope()) flags.at(layer) = "0";
  EXPECT_EQ(absl::StrJoin(flags, ","), no_rope_layers);
  EXPECT_DOUBLE_EQ((*checkpoint)->config().rope().theta(), 5000000.0);

  CompileOptions compile;
  compile.model_dir = options.output_dir;
  compile.output_path = (root_ / "model.plan").string();
  absl::Status compiled = Compile(compile, nullptr);
  ASSERT_TRUE(compiled.ok()) << compiled;
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model =
      llmrt::engine::Model::Load(compile.output_path, llmrt::engine::ModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<float>> logits = (*model)->NewSession()->Append({1, 5, 9}, false);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (float value : *logits) ASSERT_TRUE(std::isfinite(value));
}

// A Phi-3 checkpoint at toy width as synth writes it (fused qkv_proj / gate_up_proj on disk)
// compiles, its plan reads the fused tensors back as one qkv and one gate_up matmul, and runs.
TEST_F(SynthTest, Phi3FusedCheckpointCompilesAndRuns) {
  SynthOptions options;
  options.config = TinyConfig();
  options.config.architecture = "Phi3ForCausalLM";
  options.config.model_type = "phi3";
  options.output_dir = (root_ / "model").string();
  ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.output_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_NE((*checkpoint)->Find("model.layers.0.self_attn.qkv_proj.weight"), nullptr);
  EXPECT_EQ((*checkpoint)->Find("model.layers.0.self_attn.q_proj.weight"), nullptr);

  CompileOptions compile;
  compile.model_dir = options.output_dir;
  compile.output_path = (root_ / "model.plan").string();
  absl::Status compiled = Compile(compile, nullptr);
  ASSERT_TRUE(compiled.ok()) << compiled;
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model =
      llmrt::engine::Model::Load(compile.output_path, llmrt::engine::ModelOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::vector<float>> logits = (*model)->NewSession()->Append({1, 5, 9}, false);
  ASSERT_TRUE(logits.ok()) << logits.status();
  for (float value : *logits) ASSERT_TRUE(std::isfinite(value));
}

TEST(SynthTensorsTest, UnknownPresetNamesTheAlternatives) {
  absl::StatusOr<SynthModelConfig> config = SynthPreset("llama-7b");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr("tinyllama-1.1b, llama-110m"));
}

TEST(SynthValuesTest, NormalStatisticsAndChunkIndependence) {
  SynthTensor tensor{"w", {1024, 1024}, SynthTensor::Init::kNormal};
  std::vector<float> all(tensor.num_elements());
  SynthValues(tensor, 7, 0, all);
  double sum = 0, sum_squares = 0;
  float largest = 0;
  for (float value : all) {
    sum += value;
    sum_squares += double{value} * value;
    largest = std::max(largest, std::fabs(value));
  }
  const double mean = sum / all.size();
  const double stddev = std::sqrt(sum_squares / all.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 1e-4);  // stderr of the mean: 0.02 / 1024 = 2e-5
  EXPECT_NEAR(stddev, kSynthWeightStddev, 1e-4);
  EXPECT_LE(largest, 3.47f * kSynthWeightStddev);  // Irwin-Hall(4) bound: sqrt(12) sigma

  std::vector<float> slice(1000);
  SynthValues(tensor, 7, 12345, slice);
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), all.begin() + 12345));
  SynthValues(tensor, 8, 12345, slice);
  EXPECT_FALSE(std::equal(slice.begin(), slice.end(), all.begin() + 12345)) << "seed ignored";
}

// Synthesize (sharded, to exercise the index), compile, run: the whole point of synth.
TEST_F(SynthTest, ShardedCheckpointCompilesAndRuns) {
  SynthOptions options;
  options.config = TinyConfig();
  options.dtype = llmrt::plan::F16;
  options.output_dir = (root_ / "model").string();
  options.seed = 3;
  options.max_shard_bytes = 45'000;  // embed alone is 40960 bytes: several shards
  ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
  for (const char* file :
       {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
        "special_tokens_map.json", "model.safetensors.index.json"}) {
    EXPECT_TRUE(fs::exists(root_ / "model" / file)) << file;
  }
  int shards = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(root_ / "model")) {
    shards += entry.path().extension() == ".safetensors";
  }
  EXPECT_GE(shards, 3);
  EXPECT_TRUE(
      fs::exists(root_ / "model" / absl::StrFormat("model-00001-of-%05d.safetensors", shards)));
  // Nothing but the output directory is left in its parent (the temporary one was renamed).
  EXPECT_EQ(std::distance(fs::directory_iterator(root_), fs::directory_iterator()), 1);

  // The weights on disk are the generator's values rounded to f16.
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.output_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->config().num_kv_heads(), 2);
  absl::StatusOr<std::vector<SynthTensor>> declared = SynthTensors(options.config);
  ASSERT_TRUE(declared.ok()) << declared.status();
  const std::vector<SynthTensor>& tensors = *declared;
  EXPECT_EQ((*checkpoint)->tensors().size(), tensors.size());
  for (const SynthTensor& tensor : tensors) {
    const TensorInfo* info = (*checkpoint)->Find(tensor.name);
    ASSERT_NE(info, nullptr) << tensor.name;
    ASSERT_EQ(info->dtype, llmrt::plan::F16);
    std::vector<float> expected(tensor.num_elements());
    SynthValues(tensor, options.seed, 0, expected);
    for (size_t i = 0; i < expected.size(); i += 97) {
      uint16_t half;
      std::memcpy(&half, info->data + 2 * i, 2);
      ASSERT_EQ(half, llmrt::plan::F32ToF16(expected[i])) << tensor.name << "[" << i << "]";
    }
  }

  CompileOptions compile;
  compile.model_dir = options.output_dir;
  compile.output_path = (root_ / "model.plan").string();
  absl::Status compiled = Compile(compile, nullptr);
  ASSERT_TRUE(compiled.ok()) << compiled;

  llmrt::engine::ModelOptions model_options;
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model =
      llmrt::engine::Model::Load(compile.output_path, model_options);
  ASSERT_TRUE(model.ok()) << model.status();
  absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer =
      llmrt::Tokenizer::Create((*model)->meta().tokenizer());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<int32_t> tokens = (*tokenizer)->Encode("Once upon a time", true);
  std::unique_ptr<llmrt::engine::Session> session = (*model)->NewSession();
  int64_t appended = 0;
  for (int step = 0; step < 8; ++step) {
    appended += tokens.size();
    absl::StatusOr<std::vector<float>> logits = session->Append(tokens, false);
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_EQ(logits->size(), 320u);
    float spread = 0;
    for (float value : *logits) {
      ASSERT_TRUE(std::isfinite(value));
      spread = std::max(spread, std::fabs(value - (*logits)[0]));
    }
    EXPECT_GT(spread, 0.0f) << "random weights must give distinct logits";
    tokens = {
        static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin())};
  }
  EXPECT_EQ(session->num_tokens(), appended);
}

TEST_F(SynthTest, UnshardedBf16AndF32) {
  for (llmrt::plan::DType dtype : {llmrt::plan::BF16, llmrt::plan::F32}) {
    SynthOptions options;
    options.config = TinyConfig();
    options.config.tie_word_embeddings = true;
    options.dtype = dtype;
    options.output_dir = (root_ / llmrt::plan::DType_Name(dtype)).string();
    ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
    EXPECT_TRUE(fs::exists(root_ / llmrt::plan::DType_Name(dtype) / "model.safetensors"));
    absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.output_dir);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    EXPECT_EQ((*checkpoint)->Find("lm_head.weight"), nullptr);
    EXPECT_EQ((*checkpoint)->Find("model.embed_tokens.weight")->dtype, dtype);
    const nlohmann::json config =
        nlohmann::json::parse(ReadFile(fs::path(options.output_dir) / "config.json"));
    EXPECT_EQ(config["torch_dtype"], dtype == llmrt::plan::F32 ? "float32" : "bfloat16");
  }
}

TEST_F(SynthTest, ConfigFromFileKeepsItsFields) {
  const fs::path config_path = root_ / "in.json";
  std::ofstream(config_path) << R"({"architectures": ["MistralForCausalLM"], "model_type":
      "mistral", "vocab_size": 320, "hidden_size": 32, "intermediate_size": 64,
      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
      "sliding_window": 64, "torch_dtype": "float32"})";
  absl::StatusOr<SynthModelConfig> config = SynthConfigFromFile(config_path.string());
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->head_dim, 16);
  SynthOptions options;
  options.config = *config;
  options.output_dir = (root_ / "mistral").string();
  ASSERT_TRUE(WriteSyntheticCheckpoint(options).ok());
  const nlohmann::json written =
      nlohmann::json::parse(ReadFile(fs::path(options.output_dir) / "config.json"));
  EXPECT_EQ(written["sliding_window"], 64);
  EXPECT_EQ(written["torch_dtype"], "float16");
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.output_dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->Find("model.layers.0.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{16, 32}));
}

TEST_F(SynthTest, ErrorsLeaveNothingBehind) {
  SynthOptions options;
  options.config = TinyConfig();
  options.config.vocab_size = 100;
  options.output_dir = (root_ / "small").string();
  absl::Status status = WriteSyntheticCheckpoint(options);
  EXPECT_THAT(status.message(), HasSubstr("vocab_size 100"));
  options.config = TinyConfig();
  options.config.num_kv_heads = 3;
  status = WriteSyntheticCheckpoint(options);
  EXPECT_THAT(status.message(), HasSubstr("not a multiple"));
  EXPECT_TRUE(fs::is_empty(root_));

  fs::create_directory(root_ / "exists");
  options.config = TinyConfig();
  options.output_dir = (root_ / "exists").string();
  status = WriteSyntheticCheckpoint(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(status.message(), HasSubstr("already exists"));
}

}  // namespace
}  // namespace llmc
