// What Gemma 2 (gemma2.cc) and Gemma 3 (gemma3.cc) read alike.
#ifndef LLMC_COMPILER_ARCH_FAMILIES_GEMMA_H_
#define LLMC_COMPILER_ARCH_FAMILIES_GEMMA_H_

#include <cstdint>

#include "absl/status/status.h"
#include "compiler/importer/config_reader.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// attention_bias (q/k/v/o), query_pre_attn_scalar (default 256), attn_logit_softcapping and
// final_logit_softcapping (absent: the class defaults given; null: none),
// use_bidirectional_attention refused, and the sliding layers: layer_types, else every layer
// with (i + 1) % pattern != 0, with sliding_window (default 4096).
absl::Status ReadGemmaConfig(const ConfigReader& json, llmrt::plan::ModelConfig& config,
                             double attn_softcap, double final_softcap, int64_t pattern);

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_FAMILIES_GEMMA_H_
