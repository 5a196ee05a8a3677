#include "compiler/arch/rope_config.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace llmc {

using ::llmrt::plan::RopeConfig;
using Json = ConfigReader::Json;

namespace {

// original_max_position_embeddings as standardize_rope_params resolves it for YaRN and LongRoPE:
// the config's top-level field first (Phi-3 checkpoints carry it there), else the parameters',
// else `max_positions`; and factor (absent: max_positions / original).
absl::Status ReadOriginalContext(const ConfigReader& config, const ConfigReader& parameters,
                                 int64_t max_positions, RopeConfig* rope) {
  int64_t original = 0;
  if (config.HasValue("original_max_position_embeddings")) {
    LLMRT_ASSIGN_OR_RETURN(original, config.PositiveIntOr("original_max_position_embeddings", 0));
  } else {
    LLMRT_ASSIGN_OR_RETURN(
        original, parameters.PositiveIntOr("original_max_position_embeddings", max_positions));
  }
  if (original <= 0)
    return parameters.Error("original_max_position_embeddings", "a positive integer");
  rope->set_original_max_position_embeddings(original);
  double factor = 0;
  LLMRT_ASSIGN_OR_RETURN(
      factor, parameters.PositiveNumberOr("factor", static_cast<double>(max_positions) / original));
  if (!(factor > 0)) return parameters.Error("factor", "a positive number");
  rope->set_factor(factor);
  return absl::OkStatus();
}

// YaRN as transformers' _compute_yarn_parameters reads it: original_max_position_embeddings and
// factor (ReadOriginalContext), beta_fast 32, beta_slow 1, truncate true, and the cos/sin scale
// attention_factor (absent: from mscale / mscale_all_dim, else 0.1 ln(factor) + 1).
absl::Status ParseYarn(const ConfigReader& config, const ConfigReader& parameters,
                       int64_t max_positions, RopeConfig* rope) {
  rope->set_scaling(RopeConfig::YARN);
  if (absl::Status status = ReadOriginalContext(config, parameters, max_positions, rope);
      !status.ok())
    return status;
  const double factor = rope->factor();
  double value = 0;
  LLMRT_ASSIGN_OR_RETURN(value, parameters.PositiveNumberOr("beta_fast", 32.0));
  rope->set_beta_fast(value);
  LLMRT_ASSIGN_OR_RETURN(value, parameters.PositiveNumberOr("beta_slow", 1.0));
  rope->set_beta_slow(value);
  bool truncate = true;
  LLMRT_ASSIGN_OR_RETURN(truncate, parameters.BoolOr("truncate", true));
  rope->set_untruncated(!truncate);
  auto mscale_of = [](double scale, double mscale) {
    return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
  };
  double attention_factor = 0;
  LLMRT_ASSIGN_OR_RETURN(attention_factor, parameters.PositiveNumberOr("attention_factor", 0.0));
  if (attention_factor == 0) {
    double mscale = 0, mscale_all_dim = 0;
    LLMRT_ASSIGN_OR_RETURN(mscale, parameters.NumberOr("mscale", 0.0));
    LLMRT_ASSIGN_OR_RETURN(mscale_all_dim, parameters.NumberOr("mscale_all_dim", 0.0));
    attention_factor = mscale != 0 && mscale_all_dim != 0
                           ? mscale_of(factor, mscale) / mscale_of(factor, mscale_all_dim)
                           : mscale_of(factor, 1.0);
  }
  rope->set_attention_factor(attention_factor);
  return absl::OkStatus();
}

// A list of positive numbers (LongRoPE's short_factor / long_factor).
absl::StatusOr<std::vector<double>> PositiveNumbers(const ConfigReader& parameters,
                                                    const char* field) {
  if (!parameters.HasValue(field) || !parameters.Get(field).is_array())
    return parameters.Error(field, "a list of positive numbers");
  std::vector<double> numbers;
  for (const Json& element : parameters.Get(field)) {
    if (!element.is_number() || !(element.get<double>() > 0) || std::isinf(element.get<double>()))
      return parameters.Error(field, "a list of positive numbers");
    numbers.push_back(element.get<double>());
  }
  return numbers;
}

// LongRoPE as transformers' _compute_longrope_parameters reads it. original_max_position_embeddings
// is the config's top-level field when it has one (standardize_rope_params gives it priority,
// Phi-3 checkpoints carry it there), else the parameters', else max_position_embeddings; factor
// (absent: max_position_embeddings / original) sets attention_factor (absent: sqrt(1 + ln factor /
// ln original), 1 when factor <= 1). transformers switches between short_factor and long_factor
// by the current sequence length; a plan picks one set for its whole context,
// max_position_embeddings (the engine's limit): long_factor when it exceeds the original context.
absl::Status ParseLongRope(const ConfigReader& config, const ConfigReader& parameters,
                           int64_t max_positions, RopeConfig* rope) {
  rope->set_scaling(RopeConfig::LONGROPE);
  if (absl::Status status = ReadOriginalContext(config, parameters, max_positions, rope);
      !status.ok())
    return status;
  const double factor = rope->factor();
  const int64_t original = rope->original_max_position_embeddings();
  double attention_factor = 0;
  LLMRT_ASSIGN_OR_RETURN(attention_factor, parameters.PositiveNumberOr("attention_factor", 0.0));
  if (attention_factor == 0) {
    attention_factor =
        factor <= 1.0 ? 1.0
                      : std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original)));
  }
  rope->set_attention_factor(attention_factor);
  std::vector<double> short_factor, long_factor;
  LLMRT_ASSIGN_OR_RETURN(short_factor, PositiveNumbers(parameters, "short_factor"));
  LLMRT_ASSIGN_OR_RETURN(long_factor, PositiveNumbers(parameters, "long_factor"));
  if (short_factor.size() != long_factor.size())
    return parameters.Error("long_factor", "as many numbers as short_factor");
  const bool use_long = max_positions > original;
  rope->set_long_factors(use_long);
  for (double value : use_long ? long_factor : short_factor) rope->add_ext_factors(value);
  return absl::OkStatus();
}

// Dynamic NTK: transformers keeps the default frequencies until a sequence exceeds
// max_position_embeddings, and a plan never runs past it (the engine's context limit), so the
// plan's rope is the default one; the type and factor are kept for inspect.
absl::Status ParseDynamic(const ConfigReader& parameters, RopeConfig* rope) {
  rope->set_scaling(RopeConfig::DYNAMIC);
  if (!parameters.HasValue("factor")) return parameters.Error("factor", "a positive number");
  double factor = 0;
  LLMRT_ASSIGN_OR_RETURN(factor, parameters.PositiveNumber("factor", parameters.Get("factor")));
  rope->set_factor(factor);
  return absl::OkStatus();
}

}  // namespace

// rope_theta and rope scaling. Older configs carry "rope_theta" and "rope_scaling" at the top
// level; transformers >= 4.56 writes both inside "rope_parameters". Either is accepted.
absl::Status ParseRope(const ConfigReader& config, double default_theta, RopeConfig* rope,
                       int64_t max_positions) {
  const char* scaling_field = nullptr;
  if (config.HasValue("rope_scaling")) {
    scaling_field = "rope_scaling";
  } else if (config.HasValue("rope_parameters")) {
    scaling_field = "rope_parameters";
  }
  double theta = default_theta;
  if (config.HasValue("rope_theta")) {
    LLMRT_ASSIGN_OR_RETURN(theta, config.PositiveNumberOr("rope_theta", theta));
  } else if (scaling_field != nullptr && config.Get(scaling_field).is_object() &&
             config.Get(scaling_field).contains("rope_theta")) {
    ConfigReader parameters(config.Get(scaling_field),
                            absl::StrFormat("%s: field \"%s\"", config.path(), scaling_field));
    LLMRT_ASSIGN_OR_RETURN(theta, parameters.PositiveNumberOr("rope_theta", theta));
  }
  rope->set_theta(theta);
  rope->set_scaling(RopeConfig::SCALING_NONE);
  if (scaling_field == nullptr) return absl::OkStatus();

  const Json& scaling = config.Get(scaling_field);
  if (!scaling.is_object()) return config.Error(scaling_field, "null or an object");
  ConfigReader parameters(scaling,
                          absl::StrFormat("%s: field \"%s\"", config.path(), scaling_field));
  return ParseRopeParameters(config, scaling_field, parameters, rope, max_positions);
}

absl::Status ParseRopeParameters(const ConfigReader& config, const char* scaling_field,
                                 const ConfigReader& parameters, RopeConfig* rope,
                                 int64_t max_positions) {
  if (max_positions == 0) {
    LLMRT_ASSIGN_OR_RETURN(max_positions, config.PositiveIntOr("max_position_embeddings", 0));
  }
  // transformers reads "rope_type", falling back to the legacy "type".
  const char* type_field = parameters.HasValue("rope_type") ? "rope_type" : "type";
  std::string type;
  LLMRT_ASSIGN_OR_RETURN(type, parameters.StringOr(type_field, "default"));
  if (type == "default") return absl::OkStatus();
  if (type == "linear") {
    rope->set_scaling(RopeConfig::LINEAR);
    double factor = 0;
    if (!parameters.HasValue("factor")) return parameters.Error("factor", "a positive number");
    LLMRT_ASSIGN_OR_RETURN(factor, parameters.PositiveNumber("factor", parameters.Get("factor")));
    rope->set_factor(factor);
    return absl::OkStatus();
  }
  if (type == "llama3") {
    rope->set_scaling(RopeConfig::LLAMA3);
    double value = 0;
    for (const char* field : {"factor", "low_freq_factor", "high_freq_factor"}) {
      if (!parameters.HasValue(field)) return parameters.Error(field, "a positive number");
      LLMRT_ASSIGN_OR_RETURN(value, parameters.PositiveNumber(field, parameters.Get(field)));
      if (field == std::string("factor")) rope->set_factor(value);
      if (field == std::string("low_freq_factor")) rope->set_low_freq_factor(value);
      if (field == std::string("high_freq_factor")) rope->set_high_freq_factor(value);
    }
    int64_t original_max = 0;
    LLMRT_ASSIGN_OR_RETURN(original_max,
                           parameters.RequiredPositiveInt("original_max_position_embeddings"));
    rope->set_original_max_position_embeddings(original_max);
    if (rope->high_freq_factor() <= rope->low_freq_factor()) {
      return parameters.Error("high_freq_factor", "a value greater than low_freq_factor");
    }
    return absl::OkStatus();
  }
  if (type == "yarn") return ParseYarn(config, parameters, max_positions, rope);
  if (type == "longrope") return ParseLongRope(config, parameters, max_positions, rope);
  if (type == "dynamic") return ParseDynamic(parameters, rope);
  return config.Unsupported(scaling_field,
                            absl::StrFormat("rope type \"%s\" is not supported (supported: "
                                            "default, linear, llama3, yarn, longrope, dynamic)",
                                            type));
}

namespace {

// The object holding the rope parameters ("rope_scaling" or "rope_parameters"), or null.
const char* RopeParametersField(const ConfigReader& config) {
  for (const char* field : {"rope_scaling", "rope_parameters"}) {
    if (config.HasValue(field) && config.Get(field).is_object()) return field;
  }
  return nullptr;
}

// partial_rotary_factor where transformers reads it, and the field that held it (null: absent).
absl::StatusOr<double> PartialRotaryFactor(const ConfigReader& config, const char** where) {
  *where = nullptr;
  if (const char* field = RopeParametersField(config)) {
    ConfigReader parameters(config.Get(field),
                            absl::StrFormat("%s: field \"%s\"", config.path(), field));
    if (parameters.HasValue("partial_rotary_factor")) {
      *where = field;
      return parameters.PositiveNumberOr("partial_rotary_factor", 1.0);
    }
  }
  if (config.HasValue("partial_rotary_factor")) *where = "partial_rotary_factor";
  return config.PositiveNumberOr("partial_rotary_factor", 1.0);
}

}  // namespace

absl::Status ReadPartialRotary(const ConfigReader& config, int64_t head_dim, RopeConfig* rope) {
  const char* where = nullptr;
  double factor = 1;
  LLMRT_ASSIGN_OR_RETURN(factor, PartialRotaryFactor(config, &where));
  // int() as transformers truncates.
  const auto rotary_dim = static_cast<int64_t>(static_cast<double>(head_dim) * factor);
  if (factor > 1 || rotary_dim <= 0 || rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: field \"partial_rotary_factor\": expected a factor in (0, 1] giving an even "
        "number of rotated dims of head_dim %d, found %g (%d dims)",
        config.path(), head_dim, factor, rotary_dim));
  }
  rope->set_rotary_dim(rotary_dim == head_dim ? 0 : static_cast<int32_t>(rotary_dim));
  return absl::OkStatus();
}

absl::Status CheckRotaryDims(const ConfigReader& config, const llmrt::plan::ModelConfig& model) {
  const RopeConfig& rope = model.rope();
  const int64_t rotary_dim = rope.rotary_dim() > 0 ? rope.rotary_dim() : model.head_dim();
  const char* where = nullptr;
  double factor = 1;
  LLMRT_ASSIGN_OR_RETURN(factor, PartialRotaryFactor(config, &where));
  if (factor != 1.0 && rope.rotary_dim() == 0) {
    return config.Unsupported(
        where, absl::StrFormat("partial_rotary_factor %g is not supported by %s (it rotates "
                               "all of each head; Phi3ForCausalLM rotates part)",
                               factor, model.architecture()));
  }
  if (rope.scaling() == RopeConfig::YARN && rotary_dim != model.head_dim()) {
    return config.Unsupported(where,
                              "YaRN with partial_rotary_factor < 1 is not supported (its "
                              "attention factor is folded into the attention scale)");
  }
  if (rope.scaling() == RopeConfig::LONGROPE && rope.ext_factors_size() != rotary_dim / 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: field \"%s\": expected short_factor and long_factor of %d numbers (one per rotated "
        "pair of the %d rotated dims), found %d",
        config.path(), RopeParametersField(config), rotary_dim / 2, rotary_dim,
        rope.ext_factors_size()));
  }
  return absl::OkStatus();
}

}  // namespace llmc
