#include "compiler/synth/synth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/arch/graph.h"
#include "compiler/importer/hf_config.h"
#include "compiler/importer/json_util.h"
#include "compiler/synth/synth_tokenizer.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/dtype.h"

namespace llmc {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// Elements generated and written per chunk: 1 Mi values = 4 MiB of f32 scratch, 2 MiB of f16
// output; large enough that fwrite's per-call cost vanishes, small enough to stay in L2/L3.
constexpr uint64_t kChunkElements = 1 << 20;

// SplitMix64's finalizer: a bijective mix with full avalanche, used as a counter-based
// generator (value i = Mix(key + i * golden)), which makes any slice recomputable.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t TensorKey(uint64_t seed, const std::string& name) {
  uint64_t key = Mix(seed + kGolden);
  for (unsigned char c : name) key = Mix(key ^ c);
  return key;
}

const char* SafetensorsDType(llmrt::plan::DType dtype) {
  switch (dtype) {
    case llmrt::plan::F32:
      return "F32";
    case llmrt::plan::F16:
      return "F16";
    case llmrt::plan::BF16:
      return "BF16";
    default:
      return nullptr;
  }
}

const char* TorchDType(llmrt::plan::DType dtype) {
  switch (dtype) {
    case llmrt::plan::F32:
      return "float32";
    case llmrt::plan::F16:
      return "float16";
    default:
      return "bfloat16";
  }
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrFormat("%s %s: %s", what, path, std::strerror(errno)));
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return ErrnoError("cannot create", path);
  if (std::fwrite(text.data(), 1, text.size(), file.get()) != text.size()) {
    return ErrnoError("cannot write", path);
  }
  if (std::fclose(file.release()) != 0) return ErrnoError("cannot write", path);
  return absl::OkStatus();
}

Json ConfigJson(const SynthModelConfig& config, llmrt::plan::DType dtype) {
  if (!config.source_config_json.empty()) {
    Json json = Json::parse(config.source_config_json);  // parsed once already: valid
    json.erase("dtype");                                 // newer transformers' name for torch_dtype
    json["torch_dtype"] = TorchDType(dtype);
    return json;
  }
  // The keys and order transformers' LlamaConfig.to_json_string() writes.
  Json json;
  json["architectures"] = Json::array({config.architecture});
  json["attention_bias"] = config.attention_bias;
  json["attention_dropout"] = 0.0;
  json["bos_token_id"] = config.bos_token_id;
  json["eos_token_id"] = config.eos_token_id;
  json["head_dim"] = config.head_dim;
  json["hidden_act"] = "silu";
  json["hidden_size"] = config.hidden_size;
  json["initializer_range"] = kSynthWeightStddev;
  json["intermediate_size"] = config.intermediate_size;
  json["max_position_embeddings"] = config.max_position_embeddings;
  json["mlp_bias"] = false;
  json["model_type"] = config.model_type;
  json["num_attention_heads"] = config.num_attention_heads;
  json["num_hidden_layers"] = config.num_layers;
  json["num_key_value_heads"] = config.num_kv_heads;
  json["pretraining_tp"] = 1;
  json["rms_norm_eps"] = config.rms_norm_eps;
  json["rope_scaling"] = nullptr;
  json["rope_theta"] = config.rope_theta;
  json["tie_word_embeddings"] = config.tie_word_embeddings;
  json["torch_dtype"] = TorchDType(dtype);
  json["transformers_version"] = "4.46.0";
  json["use_cache"] = true;
  json["vocab_size"] = config.vocab_size;
  return json;
}

std::string GenerationConfigJson(const SynthModelConfig& config) {
  Json json;
  json["bos_token_id"] = config.bos_token_id;
  json["eos_token_id"] = config.eos_token_id;
  json["max_length"] = config.max_position_embeddings;
  json["transformers_version"] = "4.46.0";
  return json.dump(2) + "\n";
}

size_t ElementBytes(llmrt::plan::DType dtype) { return dtype == llmrt::plan::F32 ? 4 : 2; }

// Bytes of `tensor` on disk: U8 tensors one per element, the float ones in the checkpoint dtype.
uint64_t TensorBytes(const SynthTensor& tensor, llmrt::plan::DType dtype) {
  return tensor.num_elements() * (tensor.is_u8() ? 1 : ElementBytes(dtype));
}

// One safetensors file: its tensors (indices into the tensor list) and header.
struct Shard {
  std::vector<size_t> tensors;
  uint64_t data_bytes = 0;
};

absl::Status WriteShard(const std::string& path, const Shard& shard,
                        const std::vector<SynthTensor>& tensors, const SynthOptions& options) {
  Json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (size_t index : shard.tensors) {
    const SynthTensor& tensor = tensors[index];
    const uint64_t bytes = TensorBytes(tensor, options.dtype);
    header[tensor.name] = {{"dtype", tensor.is_u8() ? "U8" : SafetensorsDType(options.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", Json::array({offset, offset + bytes})}};
    offset += bytes;
  }
  std::string header_text = header.dump();
  // The safetensors convention (and what the Rust writer does): pad the header with spaces so
  // the data starts 8-byte aligned.
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return ErrnoError("cannot create", path);
  std::vector<char> stdio_buffer(1 << 22);
  std::setvbuf(file.get(), stdio_buffer.data(), _IOFBF, stdio_buffer.size());
  uint8_t length[8];
  const uint64_t header_size = header_text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(header_size >> (8 * i));
  if (std::fwrite(length, 1, 8, file.get()) != 8 ||
      std::fwrite(header_text.data(), 1, header_size, file.get()) != header_size) {
    return ErrnoError("cannot write", path);
  }
  std::vector<float> values;
  std::vector<uint16_t> halves;
  std::vector<uint8_t> bytes;
  for (size_t index : shard.tensors) {
    const SynthTensor& tensor = tensors[index];
    const uint64_t total = tensor.num_elements();
    for (uint64_t first = 0; first < total; first += kChunkElements) {
      if (tensor.is_u8()) {
        bytes.resize(std::min(kChunkElements, total - first));
        SynthBytes(tensor, options.seed, first, bytes);
        if (std::fwrite(bytes.data(), 1, bytes.size(), file.get()) != bytes.size()) {
          return ErrnoError("cannot write", path);
        }
        continue;
      }
      values.resize(std::min(kChunkElements, total - first));
      SynthValues(tensor, options.seed, first, values);
      size_t written;
      if (options.dtype == llmrt::plan::F32) {
        written = std::fwrite(values.data(), 4, values.size(), file.get());
      } else {
        halves.resize(values.size());
        if (options.dtype == llmrt::plan::F16) {
          for (size_t i = 0; i < values.size(); ++i) halves[i] = llmrt::plan::F32ToF16(values[i]);
        } else {
          for (size_t i = 0; i < values.size(); ++i) halves[i] = llmrt::plan::F32ToBf16(values[i]);
        }
        written = std::fwrite(halves.data(), 2, halves.size(), file.get());
      }
      if (written != values.size()) return ErrnoError("cannot write", path);
    }
  }
  if (std::fflush(file.get()) != 0) return ErrnoError("cannot write", path);
  if (std::fclose(file.release()) != 0) return ErrnoError("cannot write", path);
  return absl::OkStatus();
}

absl::Status WriteAll(const SynthOptions& options, const std::string& dir) {
  const SynthModelConfig& config = options.config;
  if (absl::Status status =
          WriteTextFile(dir + "/config.json", ConfigJson(config, options.dtype).dump(2) + "\n");
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          WriteTextFile(dir + "/generation_config.json", GenerationConfigJson(config));
      !status.ok()) {
    return status;
  }
  absl::StatusOr<std::string> tokenizer = SynthTokenizerJson(config.vocab_size);
  if (!tokenizer.ok()) return tokenizer.status();
  for (const auto& [name, text] :
       {std::pair<std::string, std::string>{"tokenizer.json", *tokenizer},
        {"tokenizer_config.json", SynthTokenizerConfigJson(config.max_position_embeddings)},
        {"special_tokens_map.json", SynthSpecialTokensMapJson()}}) {
    if (absl::Status status = WriteTextFile(dir + "/" + name, text); !status.ok()) return status;
  }

  // Shards as transformers cuts them: tensors in order, a new shard when the next tensor would
  // overflow the current one (a tensor larger than the limit gets a shard of its own).
  absl::StatusOr<std::vector<SynthTensor>> declared = SynthTensors(config);
  if (!declared.ok()) return declared.status();
  const std::vector<SynthTensor>& tensors = *declared;
  std::vector<Shard> shards(1);
  uint64_t total_bytes = 0;
  for (size_t index = 0; index < tensors.size(); ++index) {
    const uint64_t bytes = TensorBytes(tensors[index], options.dtype);
    if (!shards.back().tensors.empty() &&
        shards.back().data_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
    }
    shards.back().tensors.push_back(index);
    shards.back().data_bytes += bytes;
    total_bytes += bytes;
  }
  if (shards.size() == 1)
    return WriteShard(dir + "/model.safetensors", shards[0], tensors, options);

  Json weight_map = Json::object();
  for (size_t shard = 0; shard < shards.size(); ++shard) {
    const std::string name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", shard + 1, shards.size());
    if (absl::Status status = WriteShard(dir + "/" + name, shards[shard], tensors, options);
        !status.ok()) {
      return status;
    }
    for (size_t index : shards[shard].tensors) weight_map[tensors[index].name] = name;
  }
  Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  return WriteTextFile(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

absl::Status Validate(const SynthModelConfig& config) {
  auto positive = [](const char* field, int64_t value) -> absl::Status {
    if (value > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic model: %s must be positive, found %d", field, value));
  };
  for (const auto& [field, value] :
       {std::pair<const char*, int64_t>{"vocab_size", config.vocab_size},
        {"hidden_size", config.hidden_size},
        {"intermediate_size", config.intermediate_size},
        {"num_hidden_layers", config.num_layers},
        {"num_attention_heads", config.num_attention_heads},
        {"num_key_value_heads", config.num_kv_heads},
        {"head_dim", config.head_dim}}) {
    if (absl::Status status = positive(field, value); !status.ok()) return status;
  }
  if (config.num_attention_heads % config.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "synthetic model: num_attention_heads %d is not a multiple of num_key_value_heads %d",
        config.num_attention_heads, config.num_kv_heads));
  }
  if (config.vocab_size < kSynthMinVocab) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic model: vocab_size %d is below %d, the smallest vocabulary the "
                        "byte-fallback tokenizer needs",
                        config.vocab_size, kSynthMinVocab));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t SynthTensor::num_elements() const {
  uint64_t count = 1;
  for (int64_t dim : shape) count *= static_cast<uint64_t>(dim);
  return count;
}

uint64_t SynthTensor::num_parameters() const {
  switch (init) {
    case Init::kE2M1Codes:
      return 2 * num_elements();
    case Init::kE8M0Scales:
      return 0;
    default:
      return num_elements();
  }
}

namespace {

// A config.json's text as the importer reads it; written back as is.
absl::StatusOr<SynthModelConfig> SynthConfigFromText(const std::string& text,
                                                     const std::string& config_path) {
  absl::StatusOr<llmrt::plan::ModelConfig> parsed = ParseModelConfig(text, config_path);
  if (!parsed.ok()) return parsed.status();
  SynthModelConfig config;
  config.architecture = parsed->architecture();
  config.model_type = parsed->model_type();
  config.vocab_size = parsed->vocab_size();
  config.hidden_size = parsed->hidden_size();
  config.intermediate_size = parsed->intermediate_size();
  config.num_layers = parsed->num_layers();
  config.num_attention_heads = parsed->num_attention_heads();
  config.num_kv_heads = parsed->num_kv_heads();
  config.head_dim = parsed->head_dim();
  config.max_position_embeddings = parsed->max_position_embeddings();
  config.rms_norm_eps = parsed->rms_norm_eps();
  config.rope_theta = parsed->rope().theta();
  config.tie_word_embeddings = parsed->tie_word_embeddings();
  config.attention_bias = parsed->attention_bias();
  config.source_config_json = text;
  return config;
}

// google/gemma-2-2b's config.json (the fields transformers reads; the others are class
// defaults): hidden 2304, intermediate 9216, 26 layers, 8 heads of 256, 4 KV heads, sliding window
// 4096 on even layers, soft-caps 50 (attention) / 30 (logits), query_pre_attn_scalar 256,
// vocab 256000, tied.
constexpr char kGemma2Config[] = R"({
  "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
  "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "bos_token_id": 2,
  "eos_token_id": 1, "pad_token_id": 0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "intermediate_size": 9216,
  "max_position_embeddings": 8192, "num_attention_heads": 8, "num_hidden_layers": 26,
  "num_key_value_heads": 4, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": true,
  "vocab_size": 256000})";

// google/gemma-3-1b-pt's config.json: hidden 1152, intermediate 6912, 26 layers, 4 heads of
// 256, 1 KV head, five sliding (window 512, rope_local_base_freq 1e4) to one global layer
// (rope_theta 1e6, no scaling), no soft-caps, vocab 262144, tied.
constexpr char kGemma3Config[] = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
  "attn_logit_softcapping": null, "final_logit_softcapping": null, "bos_token_id": 2,
  "eos_token_id": 1, "pad_token_id": 0, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
  "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000.0,
  "rope_scaling": null, "rope_theta": 1000000.0, "sliding_window": 512,
  "sliding_window_pattern": 6, "tie_word_embeddings": true, "vocab_size": 262144})";

// microsoft/Phi-3-mini-4k-instruct's config.json: hidden 3072, intermediate 8192, 32 layers, 32
// heads of 96 (multi-head), sliding window 2047, no rope scaling, vocab 32064, untied; its
// checkpoint stores qkv_proj and gate_up_proj fused, as synth writes them.
constexpr char kPhi3MiniConfig[] = R"({
  "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "bos_token_id": 1,
  "eos_token_id": 32000, "pad_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
  "intermediate_size": 8192, "max_position_embeddings": 4096, "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047,
  "tie_word_embeddings": false, "vocab_size": 32064})";

// Mixture-of-experts presets: real MoE proportions (experts, top-k, expert width relative to
// hidden) at 1.5-2 B parameters, so an f16 checkpoint (~3 GB) and its plans fit this machine's
// disk. Each is a config.json in its family's published layout, so every MoE field survives into
// the checkpoint, and llama.cpp's converter finds num_local_experts / num_experts and a
// top-level rope_theta. bos 1 / eos 2 are the synthetic tokenizer's <s> and </s>.
//
// Qwen3-MoE (Qwen3-30B-A3B's layout): hidden 1024, 24 layers, 16 heads of 128, 4 KV heads, 64
// experts top-8 of 256 (renormalised), every layer MoE, untied. 1.65 B parameters, 0.43 B active
// per token besides the embedding table.
constexpr char kQwen3MoeConfig[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": false,
  "bos_token_id": 1, "eos_token_id": 2, "decoder_sparse_step": 1, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 256,
  "norm_topk_prob": true, "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
  "num_hidden_layers": 24, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen2-MoE (Qwen1.5-MoE-A2.7B's layout): hidden 1024, 16 layers, 16 heads of 64 (multi-head), 60
// experts top-4 of 352 (not renormalised) plus the gated shared expert of 1408, untied. 1.49 B
// parameters, 0.36 B active.
constexpr char kQwen2MoeConfig[] = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "bos_token_id": 1,
  "eos_token_id": 2, "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 1024,
  "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
  "moe_intermediate_size": 352, "norm_topk_prob": false, "num_attention_heads": 16,
  "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 16,
  "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "shared_expert_intermediate_size": 1408, "sliding_window": 32768,
  "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936})";

// Mixtral (Mixtral-8x7B's layout): hidden 1024, 16 layers, 16 heads of 64, 4 KV heads, 8 experts
// top-2 of 3584, vocab 32000, no sliding window. 1.52 B parameters, 0.43 B active.
constexpr char kMixtralConfig[] = R"({
  "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3584,
  "max_position_embeddings": 32768, "num_attention_heads": 16, "num_experts_per_tok": 2,
  "num_hidden_layers": 16, "num_key_value_heads": 4, "num_local_experts": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "vocab_size": 32000})";

// gpt-oss (gpt-oss-20b's layout): hidden 1024, 16 layers alternating sliding (128) and full
// attention, 16 heads of 64, 4 KV heads, sinks, q/k/v/o biases, 32 experts top-4 of 1024 with
// biases and the clamped SwiGLU, YaRN x32, vocab 201088; experts MXFP4 (quantization_config as
// gpt-oss ships it). 2.07 B parameters (the experts 1.61 B, 0.86 GB in MXFP4), 0.45 B active.
constexpr char kGptOssConfig[] = R"({
  "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": true,
  "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "experts_per_token": 4,
  "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "initial_context_length": 4096,
  "intermediate_size": 1024,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                  "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 131072, "num_attention_heads": 16, "num_experts_per_tok": 4,
  "num_hidden_layers": 16, "num_key_value_heads": 4, "num_local_experts": 32,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
      "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                   "original_max_position_embeddings": 4096, "rope_type": "yarn",
                   "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
  "swiglu_limit": 7.0, "tie_word_embeddings": false, "vocab_size": 201088})";

// Whether config.json's quantization_config says MXFP4 (gpt-oss's expert format).
bool IsMxfp4Config(const std::string& config_json) {
  if (config_json.empty()) return false;
  const Json json = Json::parse(config_json);  // parsed once already: valid
  const auto quantization = json.find("quantization_config");
  return quantization != json.end() && quantization->is_object() &&
         quantization->value("quant_method", "") == "mxfp4";
}

// An MXFP4 checkpoint stores each stacked expert matrix (transformers' [E, in, out], used as
// x @ W) out-major as <name>_blocks U8 [E, out, in / 32, 16] (two E2M1 codes a byte) and
// <name>_scales U8 [E, out, in / 32] (one E8M0 byte per 32 inputs); biases stay float.
void AppendMxfp4Pair(const std::string& name, const std::vector<int64_t>& shape,
                     std::vector<SynthTensor>& tensors) {
  constexpr int64_t kBlock = 32;
  const int64_t experts = shape[0], inputs = shape[1], outputs = shape[2];
  tensors.push_back({name + "_blocks",
                     {experts, outputs, inputs / kBlock, kBlock / 2},
                     SynthTensor::Init::kE2M1Codes});
  tensors.push_back(
      {name + "_scales", {experts, outputs, inputs / kBlock}, SynthTensor::Init::kE8M0Scales});
}

}  // namespace

std::vector<std::string> SynthPresetNames() {
  return {"tinyllama-1.1b",
          "llama-110m",
          "qwen3-0.6b",
          "smollm3-3b",
          "gemma2-2b",
          "gemma3-1b",
          "phi3-mini",
          "qwen3-moe-1.6b-a0.4b",
          "qwen2-moe-1.5b-a0.4b",
          "mixtral-1.5b-a0.4b",
          "gpt-oss-2b-a0.5b"};
}

absl::StatusOr<SynthModelConfig> SynthPreset(const std::string& name) {
  SynthModelConfig config;
  config.vocab_size = 32000;
  if (name == "tinyllama-1.1b") {
    // TinyLlama/TinyLlama-1.1B-Chat-v1.0's config.json.
    config.hidden_size = 2048;
    config.intermediate_size = 5632;
    config.num_layers = 22;
    config.num_attention_heads = 32;
    config.num_kv_heads = 4;
    config.max_position_embeddings = 2048;
  } else if (name == "llama-110m") {
    // llama2.c's stories110M as converted to HF (multi-head attention, no GQA).
    config.hidden_size = 768;
    config.intermediate_size = 2048;
    config.num_layers = 12;
    config.num_attention_heads = 12;
    config.num_kv_heads = 12;
    config.max_position_embeddings = 1024;
  } else if (name == "qwen3-0.6b") {
    // Qwen/Qwen3-0.6B's config.json: explicit head_dim 128 (16 x 128 = 2048 != hidden 1024),
    // q/k norms, tied embeddings.
    config.architecture = "Qwen3ForCausalLM";
    config.model_type = "qwen3";
    config.vocab_size = 151936;
    config.hidden_size = 1024;
    config.intermediate_size = 3072;
    config.num_layers = 28;
    config.num_attention_heads = 16;
    config.num_kv_heads = 8;
    config.head_dim = 128;
    config.max_position_embeddings = 40960;
    config.rms_norm_eps = 1e-6;
    config.rope_theta = 1000000.0;
    config.tie_word_embeddings = true;
    return config;
  } else if (name == "smollm3-3b") {
    // HuggingFaceTB/SmolLM3-3B's config.json: GQA 16 / 4 of 128, rope_theta 5e6, tied embeddings.
    // Its NoPE layers (3, 7, ..., 35) are SmolLM3Config's no_rope_layer_interval default, which
    // the importer applies to the config.json written here.
    config.architecture = "SmolLM3ForCausalLM";
    config.model_type = "smollm3";
    config.vocab_size = 128256;
    config.hidden_size = 2048;
    config.intermediate_size = 11008;
    config.num_layers = 36;
    config.num_attention_heads = 16;
    config.num_kv_heads = 4;
    config.head_dim = 128;
    config.max_position_embeddings = 65536;
    config.rms_norm_eps = 1e-6;
    config.rope_theta = 5000000.0;
    config.tie_word_embeddings = true;
    return config;
  } else if (name == "gemma2-2b" || name == "gemma3-1b") {
    return SynthConfigFromText(name == "gemma2-2b" ? kGemma2Config : kGemma3Config, name);
  } else if (name == "phi3-mini") {
    return SynthConfigFromText(kPhi3MiniConfig, name);
  } else if (name == "qwen3-moe-1.6b-a0.4b") {
    return SynthConfigFromText(kQwen3MoeConfig, name);
  } else if (name == "qwen2-moe-1.5b-a0.4b") {
    return SynthConfigFromText(kQwen2MoeConfig, name);
  } else if (name == "mixtral-1.5b-a0.4b") {
    return SynthConfigFromText(kMixtralConfig, name);
  } else if (name == "gpt-oss-2b-a0.5b") {
    return SynthConfigFromText(kGptOssConfig, name);
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown preset \"%s\"; expected one of %s, or a config.json path", name,
                        absl::StrJoin(SynthPresetNames(), ", ")));
  }
  config.head_dim = config.hidden_size / config.num_attention_heads;
  config.rms_norm_eps = 1e-5;
  config.rope_theta = 10000.0;
  return config;
}

absl::StatusOr<SynthModelConfig> SynthConfigFromFile(const std::string& config_path) {
  absl::StatusOr<std::string> text = importer_internal::ReadSmallFile(config_path);
  if (!text.ok()) return text.status();
  return SynthConfigFromText(*text, config_path);
}

absl::StatusOr<std::vector<SynthTensor>> SynthTensors(const SynthModelConfig& config) {
  // The family declares what its forward pass reads (compiler/arch): synth writes exactly that,
  // so every registered family can be synthesized.
  llmrt::plan::ModelConfig model;
  if (!config.source_config_json.empty()) {
    absl::StatusOr<llmrt::plan::ModelConfig> parsed =
        ParseModelConfig(config.source_config_json, "config.json");
    if (!parsed.ok()) return parsed.status();
    model = *parsed;
  } else {
    model.set_architecture(config.architecture);
    model.set_model_type(config.model_type);
    model.set_vocab_size(config.vocab_size);
    model.set_hidden_size(config.hidden_size);
    model.set_intermediate_size(config.intermediate_size);
    model.set_num_layers(config.num_layers);
    model.set_num_attention_heads(config.num_attention_heads);
    model.set_num_kv_heads(config.num_kv_heads);
    model.set_head_dim(config.head_dim);
    model.set_rms_norm_eps(config.rms_norm_eps);
    model.mutable_rope()->set_theta(config.rope_theta);
    model.set_tie_word_embeddings(config.tie_word_embeddings);
    model.set_attention_bias(config.attention_bias);
  }
  absl::StatusOr<std::vector<FamilyTensor>> declared = FamilyTensors(model);
  if (!declared.ok()) return declared.status();
  const bool mxfp4 = IsMxfp4Config(config.source_config_json);
  std::vector<SynthTensor> tensors;
  for (FamilyTensor& tensor : *declared) {
    if (mxfp4 && tensor.shape.size() == 3 &&
        (absl::EndsWith(tensor.name, "experts.gate_up_proj") ||
         absl::EndsWith(tensor.name, "experts.down_proj"))) {
      AppendMxfp4Pair(tensor.name, tensor.shape, tensors);
      continue;
    }
    // Norm scales start at one, as transformers initializes them.
    const SynthTensor::Init init = absl::EndsWith(tensor.name, "norm.weight")
                                       ? SynthTensor::Init::kOnes
                                       : SynthTensor::Init::kNormal;
    tensors.push_back({std::move(tensor.name), std::move(tensor.shape), init});
  }
  return tensors;
}

void SynthValues(const SynthTensor& tensor, uint64_t seed, uint64_t first_element,
                 std::vector<float>& out) {
  if (tensor.init == SynthTensor::Init::kOnes) {
    std::fill(out.begin(), out.end(), 1.0f);
    return;
  }
  // Four 16-bit uniforms u_k in [0, 65535] per 64-bit draw: sum has mean 2 * 65535 and variance
  // 4 * (65536^2 - 1) / 12, so scaling by stddev * sqrt(3) / 65536 gives the target deviation
  // (to 1 part in 10^9).
  const float scale = kSynthWeightStddev * 1.7320508f / 65536.0f;
  const uint64_t key = TensorKey(seed, tensor.name);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t bits = Mix(key + (first_element + i) * kGolden);
    const int32_t sum =
        static_cast<int32_t>(bits & 0xFFFF) + static_cast<int32_t>((bits >> 16) & 0xFFFF) +
        static_cast<int32_t>((bits >> 32) & 0xFFFF) + static_cast<int32_t>(bits >> 48) - 2 * 65535;
    out[i] = static_cast<float>(sum) * scale;
  }
}

void SynthBytes(const SynthTensor& tensor, uint64_t seed, uint64_t first_element,
                std::vector<uint8_t>& out) {
  if (tensor.init == SynthTensor::Init::kE8M0Scales) {
    std::fill(out.begin(), out.end(), kSynthMxfp4ScaleByte);
    return;
  }
  // Every byte value equally likely: both nibbles uniform over the 16 E2M1 codes.
  const uint64_t key = TensorKey(seed, tensor.name);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<uint8_t>(Mix(key + (first_element + i) * kGolden) >> 56);
  }
}

absl::Status WriteSyntheticCheckpoint(const SynthOptions& options) {
  if (absl::Status status = Validate(options.config); !status.ok()) return status;
  if (!SafetensorsDType(options.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic model: dtype %s is not supported; expected f32, f16 or bf16",
                        llmrt::plan::DType_Name(options.dtype)));
  }
  if (options.output_dir.empty()) {
    return absl::InvalidArgumentError("synthetic model: no output directory given");
  }
  fs::path output = fs::path(options.output_dir).lexically_normal();
  if (output.filename().empty()) output = output.parent_path();
  std::error_code error;
  if (fs::exists(output, error)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s already exists; remove it or choose another output directory", output.string()));
  }
  fs::path parent = output.parent_path().empty() ? fs::path(".") : output.parent_path();
  if (!fs::is_directory(parent, error)) {
    return absl::NotFoundError(absl::StrFormat("%s: parent directory %s does not exist",
                                               output.string(), parent.string()));
  }
  // Same directory as the output so the final rename cannot cross file systems.
  std::string temp_template = (parent / (output.filename().string() + ".tmp-XXXXXX")).string();
  if (!mkdtemp(temp_template.data())) return ErrnoError("cannot create directory", temp_template);
  // mkdtemp makes the directory 0700; the checkpoint gets a new directory's usual mode.
  const mode_t mask = umask(0);
  umask(mask);
  chmod(temp_template.c_str(), 0777 & ~mask);
  absl::Status status = WriteAll(options, temp_template);
  if (status.ok()) {
    fs::rename(temp_template, output, error);
    if (error) {
      status = absl::InternalError(absl::StrFormat("cannot rename %s to %s: %s", temp_template,
                                                   output.string(), error.message()));
    }
  }
  if (!status.ok()) fs::remove_all(temp_template, error);
  return status;
}

}  // namespace llmc
