#include "compiler/importer/hf_config.h"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/arch/family.h"
#include "compiler/arch/rope_config.h"
#include "compiler/importer/config_reader.h"
#include "compiler/importer/json_util.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"
#include "runtime/plan/program_check.h"

namespace llmc {
namespace {

using ::llmc::importer_internal::DescribeJson;
using ::llmc::importer_internal::ParseJson;
using ::llmrt::plan::GenerationDefaults;
using ::llmrt::plan::ModelConfig;
using ::llmrt::plan::RopeConfig;
using Json = nlohmann::json;

absl::StatusOr<Json> ParseObject(std::string_view text, const std::string& path) {
  absl::StatusOr<Json> parsed = ParseJson(text, path);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected a JSON object at the top level, found %s", path, DescribeJson(*parsed)));
  }
  return parsed;
}

absl::StatusOr<const Family*> ParseArchitecture(const ConfigReader& config) {
  if (!config.HasValue("architectures") || !config.Get("architectures").is_array() ||
      config.Get("architectures").empty() || !config.Get("architectures")[0].is_string()) {
    return config.Error("architectures",
                        "a non-empty list of architecture names (one of the supported)");
  }
  const std::string architecture = config.Get("architectures")[0].get<std::string>();
  if (const Family* family = FindFamily(architecture)) return family;
  return absl::UnimplementedError(
      absl::StrFormat("%s: field \"architectures\": architecture \"%s\" is not supported "
                      "(supported: %s)",
                      config.path(), architecture, SupportedArchitectures()));
}

llmrt::plan::DType DTypeFromTorchName(const std::string& name) {
  if (name == "float32" || name == "float") return llmrt::plan::F32;
  if (name == "float16" || name == "half") return llmrt::plan::F16;
  if (name == "bfloat16") return llmrt::plan::BF16;
  return llmrt::plan::DTYPE_UNSPECIFIED;
}

// A token id field: an integer (negative means none), or null/absent (nullopt).
absl::StatusOr<std::optional<int64_t>> OptionalTokenId(const ConfigReader& reader,
                                                       const char* field) {
  if (!reader.HasValue(field)) return std::optional<int64_t>();
  const Json& value = reader.Get(field);
  if (!value.is_number_integer()) return reader.Error(field, "an integer token id or null");
  const int64_t id = value.is_number_unsigned() ? static_cast<int64_t>(value.get<uint64_t>())
                                                : value.get<int64_t>();
  return std::optional<int64_t>(id < 0 ? -1 : id);
}

// A special token id as transformers resolves it: generation_config.json's, else config.json's
// (an explicit null there: none), else the class default. -1: none.
absl::StatusOr<int64_t> TokenIdWithFallbacks(const ConfigReader& generation,
                                             const ConfigReader& config, const char* field,
                                             int64_t class_default) {
  std::optional<int64_t> id;
  LLMRT_ASSIGN_OR_RETURN(id, OptionalTokenId(generation, field));
  if (!id.has_value()) {
    LLMRT_ASSIGN_OR_RETURN(id, OptionalTokenId(config, field));
    if (!config.Has(field)) id = class_default;
  }
  return id.value_or(-1);
}

// eos_token_id: an integer, a list of integers, or null/absent (nullopt).
absl::StatusOr<std::optional<std::vector<int64_t>>> OptionalTokenIdList(const ConfigReader& reader,
                                                                        const char* field) {
  if (!reader.HasValue(field)) return std::optional<std::vector<int64_t>>();
  const Json& value = reader.Get(field);
  std::vector<int64_t> ids;
  auto add = [&ids](int64_t id) {
    if (id < 0) return;
    for (int64_t existing : ids) {
      if (existing == id) return;
    }
    ids.push_back(id);
  };
  if (value.is_number_integer()) {
    add(value.get<int64_t>());
  } else if (value.is_array()) {
    for (const Json& element : value) {
      if (!element.is_number_integer()) {
        return reader.Error(field, "an integer token id or a list of them");
      }
      add(element.get<int64_t>());
    }
  } else {
    return reader.Error(field, "an integer token id or a list of them");
  }
  return std::optional<std::vector<int64_t>>(ids);
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json,
                                             const std::string& config_path) {
  Json json;
  LLMRT_ASSIGN_OR_RETURN(json, ParseObject(config_json, config_path));
  const ConfigReader config(json, config_path);
  ModelConfig result;

  const Family* family = nullptr;
  LLMRT_ASSIGN_OR_RETURN(family, ParseArchitecture(config));
  const FamilyDefaults& defaults = family->defaults;
  result.set_architecture(family->architecture);
  std::string model_type;
  LLMRT_ASSIGN_OR_RETURN(model_type, config.StringOr("model_type", defaults.model_type));
  result.set_model_type(model_type);

  int64_t value = 0;
  LLMRT_ASSIGN_OR_RETURN(value, config.RequiredPositiveInt("vocab_size"));
  result.set_vocab_size(value);
  LLMRT_ASSIGN_OR_RETURN(value, config.RequiredPositiveInt("hidden_size"));
  result.set_hidden_size(value);
  LLMRT_ASSIGN_OR_RETURN(value, config.RequiredPositiveInt("intermediate_size"));
  result.set_intermediate_size(value);
  LLMRT_ASSIGN_OR_RETURN(value, config.RequiredPositiveInt("num_hidden_layers"));
  if (value >= llmrt::plan::kMaxLayers) {
    return config.Error("num_hidden_layers", "fewer than 65536 layers (the plan format's bound)");
  }
  result.set_num_layers(value);
  LLMRT_ASSIGN_OR_RETURN(value, config.RequiredPositiveInt("num_attention_heads"));
  result.set_num_attention_heads(value);

  // Absent: the class default; explicit null: num_attention_heads (transformers' "backward
  // compatibility" branch).
  int64_t kv_fallback = defaults.num_key_value_heads.value_or(result.num_attention_heads());
  if (config.Has("num_key_value_heads") && config.Get("num_key_value_heads").is_null()) {
    kv_fallback = result.num_attention_heads();
  }
  LLMRT_ASSIGN_OR_RETURN(value, config.PositiveIntOr("num_key_value_heads", kv_fallback));
  result.set_num_kv_heads(value);
  if (result.num_attention_heads() % result.num_kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: field \"num_key_value_heads\": expected a divisor of num_attention_heads (%d), "
        "found %d",
        config_path, result.num_attention_heads(), result.num_kv_heads()));
  }

  if (config.HasValue("head_dim")) {
    LLMRT_ASSIGN_OR_RETURN(value, config.PositiveInt("head_dim", config.Get("head_dim")));
    result.set_head_dim(value);
  } else if (defaults.head_dim.has_value()) {
    result.set_head_dim(*defaults.head_dim);
  } else if (result.hidden_size() % result.num_attention_heads() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: field \"head_dim\" is absent and hidden_size %d is not divisible by "
                        "num_attention_heads %d; expected an explicit head_dim",
                        config_path, result.hidden_size(), result.num_attention_heads()));
  } else {
    result.set_head_dim(result.hidden_size() / result.num_attention_heads());
  }

  LLMRT_ASSIGN_OR_RETURN(
      value, config.PositiveIntOr("max_position_embeddings", defaults.max_position_embeddings));
  result.set_max_position_embeddings(value);
  double eps = 0;
  LLMRT_ASSIGN_OR_RETURN(eps, config.PositiveNumberOr("rms_norm_eps", defaults.rms_norm_eps));
  result.set_rms_norm_eps(eps);
  if (absl::Status status = ParseRope(config, defaults.rope_theta, result.mutable_rope(),
                                      result.max_position_embeddings());
      !status.ok())
    return status;

  bool flag = false;
  LLMRT_ASSIGN_OR_RETURN(flag, config.BoolOr("tie_word_embeddings", defaults.tie_word_embeddings));
  result.set_tie_word_embeddings(flag);

  // The gated FFN's activation (Gemma names the field hidden_activation). gelu_new and
  // gelu_pytorch_tanh are one function (gelu's tanh approximation), stored as the latter; exact
  // (erf) gelu would be another kernel, which no backend has.
  std::string hidden_act;
  LLMRT_ASSIGN_OR_RETURN(hidden_act,
                         config.StringOr(defaults.activation_field, defaults.activation));
  if (hidden_act == "gelu_new") hidden_act = "gelu_pytorch_tanh";
  if (hidden_act != "silu" && hidden_act != "gelu_pytorch_tanh") {
    return config.Unsupported(
        defaults.activation_field,
        absl::StrFormat("activation \"%s\" is not supported (supported: silu, gelu_pytorch_tanh, "
                        "gelu_new; exact erf \"gelu\" is not implemented)",
                        hidden_act));
  }
  result.set_hidden_act(hidden_act);

  if (absl::Status status = family->read_config(config, result); !status.ok()) return status;
  if (absl::Status status = CheckRotaryDims(config, result); !status.ok()) return status;

  std::string torch_dtype;
  const char* dtype_field = config.HasValue("torch_dtype") ? "torch_dtype" : "dtype";
  LLMRT_ASSIGN_OR_RETURN(torch_dtype, config.StringOr(dtype_field, ""));
  result.set_checkpoint_dtype(DTypeFromTorchName(torch_dtype));
  return result;
}

absl::StatusOr<GenerationDefaults> ParseGenerationDefaults(
    std::optional<std::string_view> generation_json, const std::string& generation_path,
    std::string_view config_json, const std::string& config_path) {
  Json config_object;
  LLMRT_ASSIGN_OR_RETURN(config_object, ParseObject(config_json, config_path));
  const ConfigReader config(config_object, config_path);
  const Family* family = nullptr;
  LLMRT_ASSIGN_OR_RETURN(family, ParseArchitecture(config));
  const FamilyDefaults& defaults = family->defaults;

  Json generation_object = Json::object();
  if (generation_json.has_value()) {
    LLMRT_ASSIGN_OR_RETURN(generation_object, ParseObject(*generation_json, generation_path));
  }
  const ConfigReader generation(generation_object, generation_path);

  GenerationDefaults result;
  int64_t id = -1;
  LLMRT_ASSIGN_OR_RETURN(
      id, TokenIdWithFallbacks(generation, config, "bos_token_id", defaults.bos_token_id));
  result.set_bos_token_id(id);

  std::optional<std::vector<int64_t>> eos;
  LLMRT_ASSIGN_OR_RETURN(eos, OptionalTokenIdList(generation, "eos_token_id"));
  if (!eos.has_value()) {
    LLMRT_ASSIGN_OR_RETURN(eos, OptionalTokenIdList(config, "eos_token_id"));
    if (!config.Has("eos_token_id") && defaults.eos_token_id >= 0) {
      eos = std::vector<int64_t>{defaults.eos_token_id};
    }
  }
  for (int64_t eos_id : eos.value_or(std::vector<int64_t>())) result.add_eos_token_ids(eos_id);

  LLMRT_ASSIGN_OR_RETURN(
      id, TokenIdWithFallbacks(generation, config, "pad_token_id", defaults.pad_token_id));
  result.set_pad_token_id(id);

  // transformers' GenerationConfig defaults.
  bool do_sample = false;
  LLMRT_ASSIGN_OR_RETURN(do_sample, generation.BoolOr("do_sample", false));
  result.set_do_sample(do_sample);
  double number = 0;
  LLMRT_ASSIGN_OR_RETURN(number, generation.NumberOr("temperature", 1.0));
  if (number < 0) return generation.Error("temperature", "a non-negative number");
  result.set_temperature(number);
  int64_t top_k = 50;
  if (generation.HasValue("top_k")) {
    const Json& value = generation.Get("top_k");
    if (!value.is_number_integer() || value.get<int64_t>() < 0) {
      return generation.Error("top_k", "a non-negative integer");
    }
    top_k = value.get<int64_t>();
  }
  result.set_top_k(top_k);
  LLMRT_ASSIGN_OR_RETURN(number, generation.NumberOr("top_p", 1.0));
  if (number <= 0 || number > 1) return generation.Error("top_p", "a number in (0, 1]");
  result.set_top_p(number);
  LLMRT_ASSIGN_OR_RETURN(number, generation.PositiveNumberOr("repetition_penalty", 1.0));
  result.set_repetition_penalty(number);
  int64_t max_length = 0;
  LLMRT_ASSIGN_OR_RETURN(max_length, generation.PositiveIntOr("max_length", 20));
  result.set_max_length(max_length);
  return result;
}

}  // namespace llmc
