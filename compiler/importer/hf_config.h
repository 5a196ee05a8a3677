// HuggingFace config.json and generation_config.json -> plan::ModelConfig and
// plan::GenerationDefaults, with transformers' defaults (LlamaConfig, MistralConfig,
// Qwen2Config, GenerationConfig) for every field transformers itself defaults.
//
// Deliberate difference from transformers: the five fields that fix the weight shapes
// (vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads) are
// required. transformers would silently use its 7B defaults, which for a checkpoint can only
// end in a shape mismatch far from the cause.
//
// Every error starts with the file path and names the field, what was expected and what was
// found: `config.json: field "hidden_size": expected a positive integer, found "abc"`.
#ifndef LLMC_COMPILER_IMPORTER_HF_CONFIG_H_
#define LLMC_COMPILER_IMPORTER_HF_CONFIG_H_

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// Parses config.json's text: the fields every family shares here, then the family's own
// (compiler/arch/family.h, found by architectures[0]). checkpoint_dtype comes from "torch_dtype"
// (or the newer "dtype"); Checkpoint::Open overrides it with what the weights actually hold.
absl::StatusOr<llmrt::plan::ModelConfig> ParseModelConfig(std::string_view config_json,
                                                          const std::string& config_path);

// `generation_json` is generation_config.json's text, or nullopt when the file is absent;
// special token ids it lacks come from config.json (then from the architecture's defaults:
// bos 1 / eos 2 for Llama and Mistral, none for Qwen2). Absent ids are -1.
absl::StatusOr<llmrt::plan::GenerationDefaults> ParseGenerationDefaults(
    std::optional<std::string_view> generation_json, const std::string& generation_path,
    std::string_view config_json, const std::string& config_path);

}  // namespace llmc

#endif  // LLMC_COMPILER_IMPORTER_HF_CONFIG_H_
