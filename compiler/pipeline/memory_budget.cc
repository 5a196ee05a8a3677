#include "compiler/pipeline/memory_budget.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "compiler/importer/checkpoint.h"
#include "runtime/kv/kv_storage.h"

namespace llmc {

namespace {

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

absl::StatusOr<int64_t> ParseMemorySize(std::string_view text) {
  std::string lower(text);
  absl::AsciiStrToLower(&lower);
  int shift = 0;
  for (const char* suffix : {"ib", "b"}) {
    const std::string ending(suffix);
    if (lower.size() > ending.size() &&
        lower.compare(lower.size() - ending.size(), ending.size(), ending) == 0 &&
        std::isalpha(static_cast<unsigned char>(lower[lower.size() - ending.size() - 1]))) {
      lower.resize(lower.size() - ending.size());
      break;
    }
  }
  if (!lower.empty()) {
    switch (lower.back()) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) lower.pop_back();
  }
  double value = 0;
  if (lower.empty() || !absl::SimpleAtod(lower, &value) || !(value > 0) ||
      value * std::ldexp(1.0, shift) > 9.0e18) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--max-memory: expected a size such as 4G, 512M or 1.5GiB, found \"%s\"",
                        std::string(text)));
  }
  return static_cast<int64_t>(value * std::ldexp(1.0, shift));
}

absl::Status ApplyMemoryBudget(int64_t max_memory_bytes, llmrt::plan::PlanMeta& meta) {
  int64_t weight_bytes = 0;
  for (const llmrt::plan::Tensor& tensor : meta.tensors()) {
    weight_bytes += static_cast<int64_t>(tensor.size_bytes());
  }
  const int64_t vocab = meta.config().vocab_size();
  // Kernel scratch (CUDA attention partials, expert grouping tables): the backend allocates the
  // largest any kernel of its table needs for a full step; the largest of every table bounds it.
  int64_t scratch_floats = 0;
  for (const llmrt::plan::KernelTable& table : meta.program().kernel_tables()) {
    for (const llmrt::plan::KernelTable::Kernel& kernel : table.kernels()) {
      scratch_floats =
          std::max(scratch_floats, kernel.scratch_floats_per_token() * kBudgetTokensPerStep +
                                       kernel.scratch_floats_fixed());
    }
  }
  // The arena holds every activation of a step, the routed ones of a mixture of experts (top_k
  // slots per token) and the expert ids included (runtime/plan: arena_bytes_per_token).
  const int64_t workspace_bytes =
      int64_t{kBudgetTokensPerStep} *
          (static_cast<int64_t>(meta.program().arena_bytes_per_token()) +
           2 * vocab * static_cast<int64_t>(sizeof(float))) +
      scratch_floats * static_cast<int64_t>(sizeof(float)) + kWorkspaceMarginBytes;
  const llmrt::plan::KvCacheSpec& kv = meta.kv_cache();
  const int64_t kv_bytes_per_token = llmrt::kv::KvBytesPerToken(
      kv.num_layers(), kv.num_kv_heads(), kv.head_dim(),
      llmrt::kv::ResolveKvDType(llmrt::plan::DTYPE_UNSPECIFIED, kv.dtype()));
  const int64_t block = std::max(kv.default_block_size(), 1);
  const int64_t left = max_memory_bytes - weight_bytes - workspace_bytes;
  int64_t kv_tokens = left > 0 && kv_bytes_per_token > 0 ? left / kv_bytes_per_token : 0;
  kv_tokens = kv_tokens / block * block;
  const int64_t max_positions = meta.config().max_position_embeddings();
  const int64_t wanted =
      max_positions > 0 ? std::min(max_positions, kMinContextTokens) : kMinContextTokens;
  if (kv_tokens < wanted) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "--max-memory %s: the weights take %s and the workspace %s (activations and logits for "
        "%d tokens a step, + %s margin), which leaves room for %d tokens of KV cache at %d "
        "bytes each; at least %d are needed. Give a larger budget, quantize (--quant int8|int4, "
        "or --quant auto to choose), or a smaller --kv-cache dtype",
        Mib(max_memory_bytes), Mib(weight_bytes), Mib(workspace_bytes), kBudgetTokensPerStep,
        Mib(kWorkspaceMarginBytes), std::max<int64_t>(kv_tokens, 0), kv_bytes_per_token, wanted));
  }
  // A pool larger than one full-length context only helps the serving engine (many sequences);
  // it stays as large as the budget allows, the context is capped at the model's.
  llmrt::plan::MemoryBudget* budget = meta.mutable_memory_budget();
  budget->set_max_memory_bytes(max_memory_bytes);
  budget->set_weight_bytes(weight_bytes);
  budget->set_workspace_bytes(workspace_bytes);
  budget->set_max_tokens_per_step(kBudgetTokensPerStep);
  budget->set_kv_bytes_per_token(kv_bytes_per_token);
  // Slots are int32 in a step batch (runtime/backend/backend.h): at most 2^30 tokens.
  budget->set_kv_cache_tokens(std::min<int64_t>(kv_tokens, int64_t{1} << 30));
  budget->set_max_context(max_positions > 0 ? std::min(kv_tokens, max_positions) : kv_tokens);
  return absl::OkStatus();
}

const char* WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kInt8:
      return "int8";
    case WeightFormat::kInt4:
      return "int4";
  }
  return "?";
}

int64_t EstimateWeightBytes(const WeightEstimate& weights, WeightFormat format) {
  const int64_t others = weights.other_elements * 2;
  switch (format) {
    case WeightFormat::kF16:
      return others + weights.quantizable_elements * 2;
    case WeightFormat::kInt8:
      return others + weights.quantizable_elements + weights.quantizable_rows * 2;
    case WeightFormat::kInt4:
      return others + (weights.quantizable_elements + 1) / 2 +
             (weights.quantizable_elements + 31) / 32 * 2;
  }
  return 0;
}

absl::StatusOr<WeightFormat> ChooseWeightFormat(int64_t max_memory_bytes,
                                                const WeightEstimate& weights,
                                                int64_t workspace_bytes,
                                                int64_t kv_bytes_per_token) {
  std::string sizes;
  for (WeightFormat format : {WeightFormat::kF16, WeightFormat::kInt8, WeightFormat::kInt4}) {
    const int64_t needed = EstimateWeightBytes(weights, format) + workspace_bytes +
                           kMinContextTokens * kv_bytes_per_token;
    if (needed <= max_memory_bytes) return format;
    absl::StrAppendFormat(&sizes, "%s%s needs %s", sizes.empty() ? "" : ", ",
                          WeightFormatName(format), Mib(needed));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "--max-memory %s --quant auto: no weight format fits with %d tokens of context (%s)",
      Mib(max_memory_bytes), kMinContextTokens, sizes));
}

absl::StatusOr<CompileOptions> ResolveQuantAuto(const CompileOptions& options) {
  if (options.max_memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--quant auto chooses a format for a budget: give --max-memory");
  }
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(options.model_dir);
  if (!checkpoint.ok()) return checkpoint.status();
  const llmrt::plan::ModelConfig& config = (*checkpoint)->config();
  WeightEstimate weights;
  for (const auto& [name, tensor] : (*checkpoint)->tensors()) {
    int64_t elements = 1;
    for (int64_t dimension : tensor.shape) elements *= dimension;
    // What --quant quantizes by default: 2-D projection weights; embeddings, norms and the
    // lm_head stay float (docs/quantization.md).
    if (tensor.shape.size() == 2 && absl::StrContains(name, "_proj.")) {
      weights.quantizable_elements += elements;
      weights.quantizable_rows += tensor.shape[0];
    } else if (tensor.shape.size() == 3 && absl::StrContains(name, ".mlp.experts.")) {
      // Stacked experts (gpt-oss: [E, in, out], used transposed): E * out quantized rows.
      weights.quantizable_elements += elements;
      weights.quantizable_rows += tensor.shape[0] * tensor.shape[2];
    } else {
      weights.other_elements += elements;
    }
  }
  // The step's activations before memory planning: ~6 hidden-wide and 3 intermediate-wide f32
  // rows per token (q/k/v, attention, residual, norms; gate, up, product), plus logits.
  // A mixture of experts adds its routed rows: gate, up and product for each of top_k slots.
  const int64_t routed = 3 * config.moe().top_k() * config.moe().expert_intermediate_size();
  const int64_t workspace =
      int64_t{kBudgetTokensPerStep} *
          (4 * (6 * config.hidden_size() + 3 * config.intermediate_size() + routed) +
           2 * config.vocab_size() * static_cast<int64_t>(sizeof(float))) +
      kWorkspaceMarginBytes;
  const llmrt::plan::DType kv_dtype = options.kv_cache_dtype.value_or(llmrt::plan::F16);
  const int64_t kv_bytes_per_token = llmrt::kv::KvBytesPerToken(
      static_cast<int32_t>(config.num_layers()), static_cast<int32_t>(config.num_kv_heads()),
      static_cast<int32_t>(config.head_dim()), kv_dtype);
  absl::StatusOr<WeightFormat> format =
      ChooseWeightFormat(options.max_memory_bytes, weights, workspace, kv_bytes_per_token);
  if (!format.ok()) return format.status();
  CompileOptions resolved = options;
  resolved.quant_auto = false;
  resolved.weight_dtype = llmrt::plan::F16;
  resolved.quantize.reset();
  if (*format != WeightFormat::kF16) {
    QuantizeOptions quantize;
    quantize.bits = *format == WeightFormat::kInt8 ? 8 : 4;
    resolved.quantize = quantize;
  }
  return resolved;
}

}  // namespace llmc
