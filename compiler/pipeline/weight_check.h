// Finiteness of checkpoint weights: a NaN or Inf anywhere in a float tensor is refused before
// compiling, because it would not fail anywhere later: the plan compiles, every logit comes out
// NaN, greedy decoding picks token 0 and `llmrt run` exits 0 with garbage.
//
// Thread-safety: stateless; reads the tensors' (mmapped) bytes only.
#ifndef LLMC_COMPILER_PIPELINE_WEIGHT_CHECK_H_
#define LLMC_COMPILER_PIPELINE_WEIGHT_CHECK_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "compiler/importer/checkpoint.h"

namespace llmc {

// Scans every F32, F16 and BF16 tensor (integer tensors, the packed codes of GPTQ/AWQ
// checkpoints, are skipped: every bit pattern is a valid code). The first tensor (in name
// order) holding a non-finite value gives InvalidArgument naming its file (inside
// `model_dir`), the tensor, its
// shape and dtype, the value (NaN, +Inf, -Inf), its index (multi-index and flat) and how many
// non-finite values the tensor holds. Scans at memory speed: 0.04-0.15 s per GiB of weights
// already in memory on the machines here (vectorized bit tests on 4 KiB blocks, no float
// compares); a cold checkpoint costs its disk read, which codegen would pay anyway.
absl::Status CheckWeightsFinite(const std::string& model_dir,
                                const std::map<std::string, TensorInfo>& tensors);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_WEIGHT_CHECK_H_
