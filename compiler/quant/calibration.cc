#include "compiler/quant/calibration.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/engine/model.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmc::quant {
namespace {

// Calibration tokens: at most kMaxCalibrationRows in all, run in windows of at most this many
// (and at most the model's context), each in a fresh session: the built-in text is 1,065
// tokens with stories260K's tokenizer, whose context is 512.
constexpr int64_t kCalibrationWindow = 512;

}  // namespace

absl::StatusOr<std::map<std::string, Activations>> CollectActivations(
    const std::string& float_plan_path, const std::string& text) {
  std::map<std::string, Activations> collected;
  std::vector<std::string> op_weight_names;
  llmrt::engine::ModelOptions options;
  options.backend = llmrt::engine::BackendChoice::kCpu;
  options.max_tokens_per_step = static_cast<int32_t>(kCalibrationWindow);
  options.kv_cache_tokens = kCalibrationWindow;
  options.matmul_observer = [&](int32_t op_index, const float* input, int64_t num_rows,
                                int64_t width) {
    if (op_index < 0 || op_index >= static_cast<int32_t>(op_weight_names.size())) return;
    Activations& activations = collected[op_weight_names[op_index]];
    activations.width = width;
    activations.rows.insert(activations.rows.end(), input, input + num_rows * width);
    activations.num_rows += num_rows;
  };
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model =
      llmrt::engine::Model::Load(float_plan_path, options);
  if (!model.ok()) return model.status();
  const llmrt::plan::PlanMeta& meta = (*model)->meta();
  for (const llmrt::plan::Op& op : meta.program().ops()) {
    op_weight_names.push_back(op.weights_size() > 0 ? meta.tensors(op.weights(0)).name() : "");
  }
  absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer =
      llmrt::Tokenizer::Create(meta.tokenizer());
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<int32_t> tokens = (*tokenizer)->Encode(text);
  if (static_cast<int64_t>(tokens.size()) > kMaxCalibrationRows) {
    tokens.resize(kMaxCalibrationRows);
  }
  if (tokens.size() < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "AWQ calibration: the text gives %d tokens; at least 2 are needed", tokens.size()));
  }
  const int64_t window = std::min<int64_t>(kCalibrationWindow, (*model)->max_context());
  size_t begin = 0;
  while (begin < tokens.size()) {
    // Later windows start with BOS, as every sequence the model saw in training.
    std::vector<int32_t> chunk;
    if (begin > 0 && (*tokenizer)->bos_id() >= 0) chunk.push_back((*tokenizer)->bos_id());
    const size_t end = std::min(tokens.size(), begin + window - chunk.size());
    chunk.insert(chunk.end(), tokens.begin() + begin, tokens.begin() + end);
    absl::StatusOr<std::vector<float>> logits = (*model)->NewSession()->Append(chunk, false);
    if (!logits.ok()) return logits.status();
    begin = end;
  }
  for (auto& [name, activations] : collected) {
    activations = Subsample(activations, kMaxCalibrationRows);
  }
  return collected;
}

}  // namespace llmc::quant
