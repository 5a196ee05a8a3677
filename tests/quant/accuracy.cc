#include "tests/quant/accuracy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/model.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/e2e/test_util.h"

namespace llmc::quant_testing {
namespace {

llmrt::engine::ModelOptions Options(llmrt::QuantizedActivations activations) {
  llmrt::engine::ModelOptions options;
  options.backend = llmrt::engine::BackendChoice::kCpu;
  options.verify = true;
  options.kv_cache_tokens = 1024;
  options.quantized_activations = activations;
  return options;
}

absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> LoadPlan(
    const std::string& plan_path,
    llmrt::QuantizedActivations activations = llmrt::QuantizedActivations::kInt8) {
  return llmrt::engine::Model::Load(plan_path, Options(activations));
}

// log-softmax of one row, in double so KL sums of ~1e-4 stay exact enough.
std::vector<double> LogSoftmax(const float* logits, int64_t vocab_size) {
  const float max_logit = *std::max_element(logits, logits + vocab_size);
  double sum = 0;
  for (int64_t i = 0; i < vocab_size; ++i)
    sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  std::vector<double> result(vocab_size);
  for (int64_t i = 0; i < vocab_size; ++i) result[i] = logits[i] - log_sum;
  return result;
}

}  // namespace

std::vector<float> DequantizePlanTensor(const llmrt::plan::Plan& plan, int tensor_index) {
  const llmrt::plan::Tensor& tensor = plan.meta().tensors(tensor_index);
  const llmrt::plan::Quantization& q = tensor.quantization();
  // Expert weights [E, N, K] are the [E * N, K] matrix (plan.proto).
  const int64_t cols = tensor.shape(tensor.shape_size() - 1);
  int64_t rows = 1;
  for (int dim = 0; dim + 1 < tensor.shape_size(); ++dim) rows *= tensor.shape(dim);
  const int64_t groups = cols / q.group_size();
  const bool mxfp4 = tensor.dtype() == llmrt::plan::FP4_E2M1;
  const uint8_t* codes = plan.blob(tensor_index);
  const uint8_t* scales = plan.blob(q.scales());
  const uint8_t* zeros = q.has_zero_points() ? plan.blob(q.zero_points()) : nullptr;
  const uint8_t* permutation =
      q.has_input_permutation() ? plan.blob(q.input_permutation()) : nullptr;
  std::vector<float> weights(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t group = r * groups + c / q.group_size();
      if (mxfp4) {
        // E2M1 value times 2^(e - 127), from runtime/plan/mxfp4.h's tables.
        weights[r * cols + c] =
            llmrt::plan::kE2M1Values[llmrt::plan::Int4CodeAt(codes + r * cols / 2, cols, c)] *
            llmrt::plan::E8M0ToF32(scales[group]);
        continue;
      }
      uint16_t scale_bits;
      std::memcpy(&scale_bits, scales + 2 * group, 2);
      int level;
      if (tensor.dtype() == llmrt::plan::I8) {
        level = static_cast<int8_t>(codes[r * cols + c]);
      } else {
        level = llmrt::plan::Int4CodeAt(codes + r * cols / 2, cols, c) - (zeros ? zeros[group] : 8);
      }
      int32_t original = static_cast<int32_t>(c);
      if (permutation) std::memcpy(&original, permutation + 4 * c, 4);
      weights[r * cols + original] = static_cast<float>(level) * llmrt::plan::F16ToF32(scale_bits);
    }
  }
  return weights;
}

absl::Status WriteUntiedCopy(const std::string& model_dir, const std::string& output_dir) {
  using ::llmc::testing::ReadFile;
  using ::llmc::testing::WriteFile;
  ::llmc::testing::CopyDir(model_dir, output_dir);
  const std::string config_path = output_dir + "/config.json";
  nlohmann::json config = nlohmann::json::parse(ReadFile(config_path), nullptr, false);
  if (config.is_discarded()) return absl::DataLossError(config_path + ": not JSON");
  config["tie_word_embeddings"] = false;
  WriteFile(config_path, config.dump(2));

  // safetensors: u64 header length, the JSON header, then the data the offsets index.
  const std::string weights_path = output_dir + "/model.safetensors";
  const std::string bytes = ReadFile(weights_path);
  uint64_t header_size = 0;
  if (bytes.size() >= 8) std::memcpy(&header_size, bytes.data(), 8);
  if (bytes.size() < 8 + header_size)
    return absl::DataLossError(weights_path + ": shorter than its header");
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, header_size), nullptr, false);
  const char kTable[] = "model.embed_tokens.weight";
  if (header.is_discarded() || !header.contains(kTable) || header.contains("lm_head.weight"))
    return absl::InvalidArgumentError(
        absl::StrCat(weights_path, ": expected ", kTable, " and no lm_head.weight"));
  std::string data = bytes.substr(8 + header_size);
  const uint64_t begin = header[kTable]["data_offsets"][0], end = header[kTable]["data_offsets"][1];
  header["lm_head.weight"] = header[kTable];
  header["lm_head.weight"]["data_offsets"] = {data.size(), data.size() + end - begin};
  data += data.substr(begin, end - begin);
  std::string new_header = header.dump();
  new_header.append((8 - new_header.size() % 8) % 8, ' ');
  const uint64_t new_size = new_header.size();
  std::string file(reinterpret_cast<const char*>(&new_size), 8);
  WriteFile(weights_path, file + new_header + data);
  return absl::OkStatus();
}

absl::Status CompilePlan(const std::string& model_dir, const std::string& output_path,
                         const std::optional<QuantizeOptions>& quantize) {
  CompileOptions options;
  options.model_dir = model_dir;
  options.output_path = output_path;
  options.weight_dtype = llmrt::plan::F32;
  options.quantize = quantize;
  return Compile(options, nullptr);
}

absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& plan_path,
                                              const std::string& text) {
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model = LoadPlan(plan_path);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<llmrt::Tokenizer>> tokenizer =
      llmrt::Tokenizer::Create((*model)->meta().tokenizer());
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<int32_t> tokens = (*tokenizer)->Encode(text);
  if ((*tokenizer)->bos_id() >= 0 && (tokens.empty() || tokens.front() != (*tokenizer)->bos_id())) {
    tokens.insert(tokens.begin(), (*tokenizer)->bos_id());
  }
  return tokens;
}

absl::StatusOr<std::vector<float>> TeacherForcedLogits(const std::string& plan_path,
                                                       const std::vector<int32_t>& tokens,
                                                       int64_t* vocab_size,
                                                       llmrt::QuantizedActivations activations) {
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model = LoadPlan(plan_path, activations);
  if (!model.ok()) return model.status();
  *vocab_size = (*model)->vocab_size();
  return (*model)->NewSession()->Append(tokens, /*all_logits=*/true);
}

absl::StatusOr<std::vector<float>> DequantizedTeacherForcedLogits(
    const std::string& plan_path, const std::vector<int32_t>& tokens, int64_t* vocab_size) {
  llmrt::plan::PlanOpenOptions open_options;
  open_options.verify_blob_checksums = true;
  absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> plan =
      llmrt::plan::Plan::Open(plan_path, open_options);
  if (!plan.ok()) return plan.status();
  llmrt::plan::PlanMeta meta = (*plan)->meta();
  std::vector<std::vector<float>> dequantized(meta.tensors_size());
  for (int index = 0; index < meta.tensors_size(); ++index) {
    llmrt::plan::Tensor& tensor = *meta.mutable_tensors(index);
    if (tensor.dtype() != llmrt::plan::I8 && tensor.dtype() != llmrt::plan::I4 &&
        tensor.dtype() != llmrt::plan::FP4_E2M1)
      continue;
    dequantized[index] = DequantizePlanTensor(**plan, index);
    tensor.set_dtype(llmrt::plan::F32);
    tensor.set_layout(llmrt::plan::Tensor::ROW_MAJOR);
    tensor.set_size_bytes(dequantized[index].size() * sizeof(float));
    tensor.clear_quantization();
  }
  const llmrt::plan::Plan* mapped = plan->get();
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model = llmrt::engine::Model::Create(
      meta,
      [&](int index) -> const uint8_t* {
        return dequantized[index].empty()
                   ? mapped->blob(index)
                   : reinterpret_cast<const uint8_t*>(dequantized[index].data());
      },
      Options(llmrt::QuantizedActivations::kInt8));
  if (!model.ok()) return model.status();
  *vocab_size = (*model)->vocab_size();
  return (*model)->NewSession()->Append(tokens, /*all_logits=*/true);
}

absl::StatusOr<std::vector<int32_t>> GreedyTokens(const std::string& plan_path,
                                                  const std::vector<int32_t>& prompt, int count) {
  absl::StatusOr<std::unique_ptr<llmrt::engine::Model>> model = LoadPlan(plan_path);
  if (!model.ok()) return model.status();
  const int64_t vocab_size = (*model)->vocab_size();
  std::unique_ptr<llmrt::engine::Session> session = (*model)->NewSession();
  absl::StatusOr<std::vector<float>> logits = session->Append(prompt, false);
  std::vector<int32_t> generated;
  for (int i = 0; i < count; ++i) {
    if (!logits.ok()) return logits.status();
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits->begin(), logits->begin() + vocab_size) - logits->begin());
    generated.push_back(next);
    if (i + 1 < count) logits = session->Append({next}, false);
  }
  return generated;
}

double MeanKl(const std::vector<float>& reference, const std::vector<float>& candidate,
              int64_t vocab_size) {
  const int64_t positions = static_cast<int64_t>(reference.size()) / vocab_size;
  double total = 0;
  for (int64_t p = 0; p < positions; ++p) {
    const std::vector<double> log_p = LogSoftmax(reference.data() + p * vocab_size, vocab_size);
    const std::vector<double> log_q = LogSoftmax(candidate.data() + p * vocab_size, vocab_size);
    for (int64_t i = 0; i < vocab_size; ++i) total += std::exp(log_p[i]) * (log_p[i] - log_q[i]);
  }
  return total / static_cast<double>(positions);
}

double Perplexity(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                  int64_t vocab_size) {
  double nll = 0;
  for (size_t i = 0; i + 1 < tokens.size(); ++i) {
    nll -= LogSoftmax(logits.data() + i * vocab_size, vocab_size)[tokens[i + 1]];
  }
  return std::exp(nll / static_cast<double>(tokens.size() - 1));
}

double Top1Agreement(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                     int64_t vocab_size, size_t from) {
  int agree = 0, total = 0;
  for (size_t i = from; i + 1 < tokens.size(); ++i, ++total) {
    const float* row = logits.data() + i * vocab_size;
    agree += std::max_element(row, row + vocab_size) - row == tokens[i + 1];
  }
  return total == 0 ? 0.0 : static_cast<double>(agree) / total;
}

absl::StatusOr<AccuracyRow> Measure(const std::string& label, const std::string& plan_path,
                                    const std::vector<int32_t>& text_tokens,
                                    const std::vector<float>& reference_logits,
                                    const std::vector<int32_t>& prompt_and_greedy,
                                    size_t prompt_size, llmrt::QuantizedActivations activations) {
  AccuracyRow row;
  row.label = label;
  row.plan_bytes = std::filesystem::file_size(plan_path);
  int64_t vocab_size = 0;
  absl::StatusOr<std::vector<float>> logits =
      TeacherForcedLogits(plan_path, text_tokens, &vocab_size, activations);
  if (!logits.ok()) return logits.status();
  row.mean_kl = MeanKl(reference_logits, *logits, vocab_size);
  absl::StatusOr<std::vector<float>> exact_logits =
      TeacherForcedLogits(plan_path, text_tokens, &vocab_size, llmrt::QuantizedActivations::kF32);
  if (!exact_logits.ok()) return exact_logits.status();
  row.weight_only_kl = MeanKl(reference_logits, *exact_logits, vocab_size);
  row.perplexity = Perplexity(*logits, text_tokens, vocab_size);
  absl::StatusOr<std::vector<float>> greedy_logits =
      TeacherForcedLogits(plan_path, prompt_and_greedy, &vocab_size, activations);
  if (!greedy_logits.ok()) return greedy_logits.status();
  // The position before the first greedy token predicts it.
  row.top1 = Top1Agreement(*greedy_logits, prompt_and_greedy, vocab_size, prompt_size - 1);
  return row;
}

}  // namespace llmc::quant_testing
