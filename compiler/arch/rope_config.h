// rope_theta and the rope scaling of config.json, as transformers' rope initialization reads
// them (modeling_rope_utils.py). Shared by the common config parser (hf_config.cc) and families
// whose layers rotate differently (Gemma 3's per-layer-type rope_parameters).
#ifndef LLMC_COMPILER_ARCH_ROPE_CONFIG_H_
#define LLMC_COMPILER_ARCH_ROPE_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "compiler/importer/config_reader.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// Older configs carry "rope_theta" and "rope_scaling" at the top level; transformers >= 4.56
// writes both inside "rope_parameters". Either is accepted; absent theta: `default_theta`.
// `max_positions`: the model's max_position_embeddings with the family's default applied (YaRN's
// and LongRoPE's defaults derive from it); 0: config.json's field.
absl::Status ParseRope(const ConfigReader& config, double default_theta,
                       llmrt::plan::RopeConfig* rope, int64_t max_positions = 0);

// The scaling of one rope parameters object (rope_type or the legacy type: default, linear,
// llama3, yarn; dynamic and others refused by name, naming `scaling_field`) into `rope`, whose
// theta the caller sets. `config` is the whole config (YaRN reads max_position_embeddings).
absl::Status ParseRopeParameters(const ConfigReader& config, const char* scaling_field,
                                 const ConfigReader& parameters, llmrt::plan::RopeConfig* rope,
                                 int64_t max_positions = 0);

// transformers' partial_rotary_factor (Phi3Config: inside rope_parameters / rope_scaling, else at
// the top level; default 1): rope->rotary_dim = int(head_dim * factor), which must be even and
// positive. For the families whose attention rotates part of each head.
absl::Status ReadPartialRotary(const ConfigReader& config, int64_t head_dim,
                               llmrt::plan::RopeConfig* rope);

// After the family read its config: a partial_rotary_factor other than 1 that the family did not
// read is refused by name, and LONGROPE's factor lists must have one entry per rotated pair.
absl::Status CheckRotaryDims(const ConfigReader& config, const llmrt::plan::ModelConfig& model);

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_ROPE_CONFIG_H_
