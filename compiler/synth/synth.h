// Synthetic HuggingFace checkpoints: random weights of real shapes, so benchmarks and tests need
// no downloads.
//
// A synthetic checkpoint directory holds what transformers' save_pretrained writes for a Llama
// model: config.json, generation_config.json, model.safetensors (or model-0000N-of-0000M
// .safetensors shards plus model.safetensors.index.json when the weights exceed the shard
// size), and a tokenizer (tokenizer.json, tokenizer_config.json, special_tokens_map.json) whose
// vocabulary has exactly config.vocab_size pieces (see synth_tokenizer.h).
//
// Weights: projections and embeddings ~ normal(0, 0.02) (transformers' initializer_range), norm
// weights 1, so activations stay finite through any depth. The normal is approximated by the
// sum of four uniforms (Irwin-Hall): mean 0 and standard deviation 0.02 exactly, bounded by
// +-3.46 sigma, and about ten times cheaper than Box-Muller, which matters for 1.1 G values.
// Each tensor has its own generator seeded from (seed, tensor name), so a tensor's values do
// not depend on the order tensors are written in or on the shard layout.
//
// The output is written into a temporary sibling directory and renamed into place when
// complete; weights are generated and written in 4 MiB chunks, so memory stays small whatever
// the model size. An existing output directory is an error (it is never deleted).
//
// Thread-safety: the functions share no state; concurrent calls for different outputs are fine.
#ifndef LLMC_COMPILER_SYNTH_SYNTH_H_
#define LLMC_COMPILER_SYNTH_SYNTH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// The shape-defining subset of a Llama-family config.json.
struct SynthModelConfig {
  std::string architecture = "LlamaForCausalLM";
  std::string model_type = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  int64_t bos_token_id = 1;
  int64_t eos_token_id = 2;
  // config.json's text when the config came from a file: written back as is (only torch_dtype
  // changes), so fields that do not affect shapes (rope scaling, sliding window) survive.
  std::string source_config_json;
};

// "tinyllama-1.1b" (TinyLlama-1.1B: hidden 2048, intermediate 5632, 22 layers, 32 heads, 4 KV
// heads), "llama-110m" (llama2.c stories110M: hidden 768, intermediate 2048, 12 layers, 12
// heads), both vocab 32000, or "qwen3-0.6b" (Qwen3-0.6B: hidden 1024, 28 layers, 16 heads of 128,
// 8 KV heads, q/k norms, vocab 151936, tied), or "smollm3-3b" (SmolLM3-3B: hidden 2048,
// intermediate 11008, 36 layers, 16 heads of 128, 4 KV heads, every fourth layer without rope,
// vocab 128256, tied), or "gemma2-2b" / "gemma3-1b" (google/gemma-2-2b and gemma-3-1b-pt's
// config.json, written as config.json: synth.cc lists the values), or "phi3-mini"
// (microsoft/Phi-3-mini-4k-instruct's config.json: fused qkv_proj / gate_up_proj, 32 layers of
// 3072, 32 heads of 96, sliding window 2047, vocab 32064). Mixture-of-experts shapes of real
// proportions that fit this machine (config.json texts in synth.cc): "qwen3-moe-1.6b-a0.4b"
// (Qwen3-MoE: hidden 1024, 24 layers, 16 heads of 128, 4 KV heads, 64 experts top-8 of 256,
// vocab 151936), "qwen2-moe-1.5b-a0.4b" (Qwen2-MoE: hidden 1024, 16 layers, 16 heads, 60 experts
// top-4 of 352 plus a shared expert of 1408), "mixtral-1.5b-a0.4b" (Mixtral: hidden 1024, 16
// layers, 16 heads, 4 KV heads, 8 experts top-2 of 3584, vocab 32000) and "gpt-oss-2b-a0.5b"
// (gpt-oss: hidden 1024, 16 layers, 16 heads of 64, 4 KV heads, 32 experts top-4 of 1024, vocab
// 201088, experts written MXFP4 as gpt-oss ships them). Unknown names are an error listing the
// presets.
absl::StatusOr<SynthModelConfig> SynthPreset(const std::string& name);
std::vector<std::string> SynthPresetNames();

// A config.json file (Llama, Mistral or Qwen2 as the importer accepts them). Qwen2 checkpoints
// get q/k/v biases, as Qwen2's attention always has them.
absl::StatusOr<SynthModelConfig> SynthConfigFromFile(const std::string& config_path);

struct SynthOptions {
  SynthModelConfig config;
  llmrt::plan::DType dtype = llmrt::plan::F16;  // F32, F16 or BF16
  std::string output_dir;
  uint64_t seed = 0;
  // transformers' save_pretrained default (max_shard_size="5GB", decimal).
  uint64_t max_shard_bytes = 5'000'000'000ull;
};

// One tensor of the checkpoint, in the order it is written.
struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;
  // kNormal / kOnes: float tensors in SynthOptions::dtype. kE2M1Codes / kE8M0Scales: U8 tensors
  // of an MXFP4 checkpoint (gpt-oss's experts): `_blocks` of uniformly random bytes (two E2M1
  // codes each) and `_scales` all kSynthMxfp4ScaleByte.
  enum class Init { kNormal, kOnes, kE2M1Codes, kE8M0Scales } init = SynthTensor::Init::kNormal;
  uint64_t num_elements() const;
  bool is_u8() const { return init == Init::kE2M1Codes || init == Init::kE8M0Scales; }
  // Model parameters it holds: two per E2M1 byte, none for scales, else one per element.
  uint64_t num_parameters() const;
};

// The MXFP4 scale byte of synthetic experts: 2^(120 - 127) = 2^-7. Random E2M1 codes have an RMS
// of sqrt(8.5625) = 2.93, so the weights' standard deviation is 0.023, near kSynthWeightStddev.
inline constexpr uint8_t kSynthMxfp4ScaleByte = 120;

// The tensors the config's family reads (compiler/arch), as transformers' state_dict holds them;
// an error for an architecture no family implements.
absl::StatusOr<std::vector<SynthTensor>> SynthTensors(const SynthModelConfig& config);

// Writes the checkpoint; on error nothing is left at options.output_dir.
absl::Status WriteSyntheticCheckpoint(const SynthOptions& options);

// The weights' standard deviation (transformers' initializer_range default).
inline constexpr float kSynthWeightStddev = 0.02f;

// Fills `out` with the values of `tensor` at element offset `first_element`: the same values
// whatever the chunking, so tests can recompute any slice of a written tensor. SynthValues for
// the float kinds, SynthBytes for the U8 ones.
void SynthValues(const SynthTensor& tensor, uint64_t seed, uint64_t first_element,
                 std::vector<float>& out);
void SynthBytes(const SynthTensor& tensor, uint64_t seed, uint64_t first_element,
                std::vector<uint8_t>& out);

}  // namespace llmc

#endif  // LLMC_COMPILER_SYNTH_SYNTH_H_
