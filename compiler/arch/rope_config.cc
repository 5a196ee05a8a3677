#include "compiler/arch/rope_config.h"

#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"

namespace llmc {

using ::llmrt::plan::RopeConfig;
using Json = ConfigReader::Json;

// YaRN as transformers' _compute_yarn_parameters reads it: factor (absent: max_position_embeddings
// / original_max_position_embeddings), original_max_position_embeddings (absent: the config's
// max_position_embeddings), beta_fast 32, beta_slow 1, truncate true, and the cos/sin scale
// attention_factor (absent: from mscale / mscale_all_dim, else 0.1 ln(factor) + 1).
namespace {

absl::Status ParseYarn(const ConfigReader& config, const ConfigReader& parameters,
                       RopeConfig* rope) {
  rope->set_scaling(RopeConfig::YARN);
  int64_t max_positions = 0;
  LLMRT_ASSIGN_OR_RETURN(max_positions, config.PositiveIntOr("max_position_embeddings", 0));
  int64_t original = 0;
  LLMRT_ASSIGN_OR_RETURN(
      original, parameters.PositiveIntOr("original_max_position_embeddings", max_positions));
  if (original <= 0)
    return parameters.Error("original_max_position_embeddings", "a positive integer");
  rope->set_original_max_position_embeddings(original);
  double factor = 0;
  LLMRT_ASSIGN_OR_RETURN(
      factor, parameters.PositiveNumberOr("factor", static_cast<double>(max_positions) / original));
  if (!(factor > 0)) return parameters.Error("factor", "a positive number");
  rope->set_factor(factor);
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

}  // namespace

// rope_theta and rope scaling. Older configs carry "rope_theta" and "rope_scaling" at the top
// level; transformers >= 4.56 writes both inside "rope_parameters". Either is accepted.
absl::Status ParseRope(const ConfigReader& config, double default_theta, RopeConfig* rope) {
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
  return ParseRopeParameters(config, scaling_field, parameters, rope);
}

absl::Status ParseRopeParameters(const ConfigReader& config, const char* scaling_field,
                                 const ConfigReader& parameters, RopeConfig* rope) {
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
  if (type == "yarn") return ParseYarn(config, parameters, rope);
  if (type == "dynamic") {
    // transformers' dynamic_rope_update recomputes the frequencies from the longest sequence the
    // module has seen so far (it even keeps them across generate calls), while the keys already
    // cached keep the rotation they were given: the logits depend on the request history, which
    // a batched engine with a prefix cache cannot reproduce.
    return config.Unsupported(
        scaling_field,
        "rope type \"dynamic\" (NTK scaling recomputed from the sequence length) is not "
        "supported: transformers' frequencies depend on the longest sequence seen before, so "
        "cached keys would differ (supported: default, linear, llama3, yarn)");
  }
  return config.Unsupported(scaling_field,
                            absl::StrFormat("rope type \"%s\" is not supported (supported: "
                                            "default, linear, llama3, yarn)",
                                            type));
}

}  // namespace llmc
