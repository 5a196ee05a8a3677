// A model family (one `architectures[0]` of config.json) is one file under compiler/arch/families/:
// the config.json fields only it reads, and its forward pass written with the shared blocks of
// blocks.h. The registry (registry.cc) lists the families; the config parser, the "supported: …"
// errors and `llmc --help` read it. docs/adding-a-model.md walks through adding one.
//
// This header and everything a family file includes are free of MLIR: the importer (built
// without the compiler in the sanitizer build) reads configs through the same registry.
#ifndef LLMC_COMPILER_ARCH_FAMILY_H_
#define LLMC_COMPILER_ARCH_FAMILY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "compiler/importer/config_reader.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

class ModelGraph;

// transformers' per-class defaults for the fields that have one (configuration_<family>.py).
struct FamilyDefaults {
  const char* model_type;
  // Absent num_key_value_heads: nullopt = num_attention_heads; some classes default to a number.
  std::optional<int64_t> num_key_value_heads;
  int64_t max_position_embeddings;
  int64_t bos_token_id;  // -1: none
  int64_t eos_token_id;  // -1: none
  // Absent head_dim: nullopt = hidden_size / num_attention_heads; some classes default to a number.
  std::optional<int64_t> head_dim = std::nullopt;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;  // transformers' default_theta
  bool tie_word_embeddings = false;
  int64_t pad_token_id = -1;  // -1: none
  // The gated FFN's activation: the config field and its class default.
  const char* activation_field = "hidden_act";
  const char* activation = "silu";
};

struct Family {
  const char* architecture;  // config.json architectures[0], e.g. "Qwen3ForCausalLM"
  FamilyDefaults defaults;
  // Reads the config.json fields only this family has into `config` (after the common ones:
  // sizes, heads, head_dim, rope, eps, tie_word_embeddings, hidden_act) and refuses, naming the
  // field, every option it does not implement.
  absl::Status (*read_config)(const ConfigReader& config_json, llmrt::plan::ModelConfig& config);
  // Declares the weights the forward pass reads and its ops, through the shared blocks.
  void (*build)(ModelGraph& graph);
};

// nullptr when no family has that architecture.
const Family* FindFamily(std::string_view architecture);
// Every registered architecture, in registry order ("LlamaForCausalLM, ...").
std::string SupportedArchitectures();

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_FAMILY_H_
