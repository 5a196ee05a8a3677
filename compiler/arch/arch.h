// Model-family builders: checkpoint tensors + ModelConfig -> the llm MLIR module.
//
// Supported architectures (config.json `architectures[0]`): LlamaForCausalLM,
// MistralForCausalLM, Qwen2ForCausalLM. They share one builder (llama.cc): Qwen2 is Llama with
// q/k/v biases (config.attention_bias()), Mistral is Llama with a sliding window
// (config.sliding_window()). Per layer, exactly transformers' LlamaDecoderLayer:
//   h  = x + o_proj(attention(rope(q_proj(rms(x))), rope(k_proj(rms(x))), v_proj(rms(x))))
//   x' = h + down_proj(silu(gate_proj(rms(h))) * up_proj(rms(h)))
// then the final `model.norm` and `lm_head` (the embedding table when tie_word_embeddings).
//
// The module holds one `llm.param` per checkpoint tensor it uses (type = shape and checkpoint
// dtype) and `func.func @forward(%tokens: tensor<?xi32>, %positions: tensor<?xi32>)
// -> tensor<?x{vocab}xf32>`, unfused: the passes fuse it.
//
// Every error is one line naming the file or config field, what was expected and what was
// found. Thread-safety: free functions without shared state; an MLIRContext is not thread-safe,
// so callers use one context per thread.
#ifndef LLMC_COMPILER_ARCH_ARCH_H_
#define LLMC_COMPILER_ARCH_ARCH_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/importer/checkpoint.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

using TensorMap = std::map<std::string, TensorInfo>;

// Checks the config (supported architecture, consistent head counts, silu activation) and that
// every tensor the config implies is present with the expected shape and a float dtype, and that
// there are no others. Tolerated: `lm_head.weight` absent when tie_word_embeddings (and ignored
// when present), `*.rotary_emb.inv_freq` (recomputed from the rope config).
absl::Status ValidateTensors(const llmrt::plan::ModelConfig& config, const TensorMap& tensors);

// Validates, then builds the unfused module in `context` (loading the llm and func dialects).
absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(
    mlir::MLIRContext& context, const llmrt::plan::ModelConfig& config, const TensorMap& tensors);

// Overloads for an opened checkpoint; header-only so this library does not link the importer.
inline absl::Status ValidateTensors(const llmrt::plan::ModelConfig& config,
                                    const Checkpoint& checkpoint) {
  return ValidateTensors(config, checkpoint.tensors());
}
inline absl::StatusOr<mlir::OwningOpRef<mlir::ModuleOp>> BuildModule(
    mlir::MLIRContext& context, const llmrt::plan::ModelConfig& config,
    const Checkpoint& checkpoint) {
  return BuildModule(context, config, checkpoint.tensors());
}

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_ARCH_H_
