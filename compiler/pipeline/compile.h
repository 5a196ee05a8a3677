// The llmc pipeline: HF checkpoint directory -> plan file.
//
//   import (config, weights, tokenizer) -> validate tensors -> build llm IR -> passes -> codegen
//   -> PlanWriter (temporary file, renamed into place only when everything succeeded)
//
// Thread-safety: Compile() may run concurrently for different outputs; it shares no state.
#ifndef LLMC_COMPILER_PIPELINE_COMPILE_H_
#define LLMC_COMPILER_PIPELINE_COMPILE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// --quant: which matmul weights become integer codes, and how (docs/quantization.md).
struct QuantizeOptions {
  int bits = 8;             // 8 or 4
  int64_t group_size = 0;   // 32, 64, 128; 0: int8 per output channel, int4 32
  bool asymmetric = false;  // int4 only
  // MXFP4 (OCP MX v1.0: E2M1 codes, an E8M0 exponent per 32 columns; compiler/quant/mxfp4.h):
  // bits 4, group_size 32 (or 0), symmetric; no awq / gptq (round-to-nearest only).
  bool mxfp4 = false;
  // Activation-aware per-input-channel scales searched on a calibration text and folded into
  // the preceding op (compiler/quant/awq.h).
  bool awq = false;
  // GPTQ-style error feedback from the same calibration rows (compiler/quant/gptq.h); with awq,
  // after the scaling.
  bool gptq = false;
  std::string calib_path;               // calibration text for awq / gptq; empty: the built-in one
  std::vector<std::string> keep_float;  // weights whose name contains one of these stay float
  // --lm-head-quant: the lm_head's own format (a tied one: of its own copy of the embedding
  // table). 0: float (the default policy); 8: int8, symmetric, one scale per output channel;
  // 4: int4 with group_size (32 when 0) and the scheme above. Always round-to-nearest:
  // calibration records no lm_head inputs.
  int lm_head_bits = 0;
};

struct CompileOptions {
  std::string model_dir;
  std::string output_path;
  // The plan's weight dtype; unset: the checkpoint's dtype.
  std::optional<llmrt::plan::DType> weight_dtype;
  // Unset: a float plan (unless the checkpoint is pre-quantized: GPTQ/AWQ).
  std::optional<QuantizeOptions> quantize;
  // KvCacheSpec.dtype: F32, F16, BF16 or I8; unset: the plan's float weight dtype.
  std::optional<llmrt::plan::DType> kv_cache_dtype;
  // When non-empty, the IR is written there after import and after each pass.
  std::string dump_ir_dir;
  // When non-empty, this Jinja file replaces tokenizer_config.json's chat template.
  std::string chat_template_path;
  // Targets the plan carries kernels for: the CPU (a "cpu" kernel table) and/or CUDA SM
  // versions (80 = sm_80; a CUBIN each plus PTX for the newest, see codegen/cuda/CudaTarget.h).
  bool target_cpu = true;
  std::vector<int> cuda_sm_versions;
  // Where compiled CUDA kernels are cached; empty: codegen/cuda's default (~/.cache/llmc/cuda).
  std::string cuda_cache_dir;
  // --max-memory: the resident-memory budget the plan is sized for (KV pool, maximum context;
  // compiler/pipeline/memory_budget.h); 0: none.
  int64_t max_memory_bytes = 0;
  // --quant auto: choose f16, int8 or int4 weights for max_memory_bytes (replaces
  // weight_dtype and quantize).
  bool quant_auto = false;
};

// Receives progress; implementations decide how to show it (a live line on a terminal, one
// line per stage otherwise). Called from the compiling thread only.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void BeginStage(const std::string& name) = 0;
  // Weight writing: tensors done of total and bytes written so far in this stage.
  virtual void TensorProgress(int64_t done, int64_t total, uint64_t bytes) = 0;
  virtual void EndStage() = 0;
};

// `progress` may be null.
absl::Status Compile(const CompileOptions& options, ProgressSink* progress);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_COMPILE_H_
