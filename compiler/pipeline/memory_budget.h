// llmc compile --max-memory: sizing a plan to a resident-memory budget.
//
// What the runtime keeps resident while it runs a plan (runtime/engine/model.cc):
//   weights      every tensor blob, mapped from the plan (resident once touched);
//   workspace    the backend's activation arena (max_tokens_per_step x arena_bytes_per_token)
//                and two logits buffers (the backend's and the Model's, max_tokens_per_step x
//                vocab f32 each), plus kWorkspaceMarginBytes for everything not counted (the
//                meta and tokenizer copies, thread scratch, code, allocator slack);
//   KV cache     kv_cache_tokens x kv_bytes_per_token.
// The budget less weights and workspace is the KV pool; its size, capped at the model's
// max_position_embeddings, is the plan's maximum context. With --quant auto the weight format
// is the widest of f16, int8 and int4 whose estimated weights leave room for kMinContextTokens.
//
// Thread-safety: free functions.
#ifndef LLMC_COMPILER_PIPELINE_MEMORY_BUDGET_H_
#define LLMC_COMPILER_PIPELINE_MEMORY_BUDGET_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/pipeline/compile.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// The step size the runtime uses by default (ModelOptions.max_tokens_per_step).
inline constexpr int32_t kBudgetTokensPerStep = 256;
// 64 MiB: measured peak RSS of `llmrt run` on stories260K is ~20 MiB above its arena, KV and
// weights; the margin covers that with room for a large tokenizer (Llama-3's meta copy is ~9 MiB).
inline constexpr int64_t kWorkspaceMarginBytes = int64_t{64} << 20;
// A plan whose budget holds fewer tokens than this is refused: 256 is one short chat turn.
inline constexpr int64_t kMinContextTokens = 256;

// "4G", "512M", "1.5GiB", "300000000": binary units (K, M, G, T with optional "iB"/"B"), or
// bytes. InvalidArgument naming the text otherwise.
absl::StatusOr<int64_t> ParseMemorySize(std::string_view text);

// Fills meta.memory_budget from the finished meta (tensors, program, kv_cache, config). Fails
// with ResourceExhausted, giving every part's size, when the budget holds fewer than
// kMinContextTokens tokens of KV.
absl::Status ApplyMemoryBudget(int64_t max_memory_bytes, llmrt::plan::PlanMeta& meta);

// The weight formats --quant auto chooses from, widest first.
enum class WeightFormat { kF16, kInt8, kInt4 };
const char* WeightFormatName(WeightFormat format);

struct WeightEstimate {
  int64_t quantizable_elements = 0;  // matmul weights (2-D, not embeddings or norms)
  int64_t quantizable_rows = 0;      // their output channels
  int64_t other_elements = 0;        // everything else, kept float (f16)
};
// Bytes the weights take in `format`: f16 everywhere; int8 per-channel codes + an f16 scale per
// row; int4 group-32 codes + an f16 scale per 32 (codegen's defaults).
int64_t EstimateWeightBytes(const WeightEstimate& weights, WeightFormat format);

// The widest format whose estimated weights, workspace (`workspace_bytes`) and
// kMinContextTokens of KV fit the budget; ResourceExhausted listing each format's size when none
// does.
absl::StatusOr<WeightFormat> ChooseWeightFormat(int64_t max_memory_bytes,
                                                const WeightEstimate& weights,
                                                int64_t workspace_bytes,
                                                int64_t kv_bytes_per_token);

// --quant auto: `options` with the format chosen for options.max_memory_bytes from the
// checkpoint's tensor shapes (f16 weights, or int8 / int4 with codegen's default grouping) and
// quant_auto cleared. InvalidArgument without a budget.
absl::StatusOr<CompileOptions> ResolveQuantAuto(const CompileOptions& options);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_MEMORY_BUDGET_H_
