// Accuracy measures of a quantized plan against its float plan, on the real runtime:
// teacher-forced logits, mean per-token KL(float || quantized), perplexity on a text, and
// top-1 agreement along the float plan's greedy continuation. Shared by the ctest checks
// (accuracy_test.cc) and the table printer (accuracy_report.cc, docs/quantization.md).
#ifndef LLMC_TESTS_QUANT_ACCURACY_H_
#define LLMC_TESTS_QUANT_ACCURACY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/pipeline/compile.h"
#include "runtime/backend/backend.h"
#include "runtime/plan/plan_reader.h"

namespace llmc::quant_testing {

// Compiles `model_dir` to `output_path` (f32 weights unless `quantize` says otherwise).
absl::Status CompilePlan(const std::string& model_dir, const std::string& output_path,
                         const std::optional<QuantizeOptions>& quantize);

// The plan's tokenizer applied to `text` (with the BOS the tokenizer's template adds).
absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& plan_path,
                                              const std::string& text);

// Logits of every position of `tokens` ([tokens.size(), vocab] row-major) in one session, on
// the CPU backend; `activations` says how quantized matmuls treat their inputs (kF32: the
// exact mode, runtime/backend/cpu/quant_matmul_exact.h).
absl::StatusOr<std::vector<float>> TeacherForcedLogits(
    const std::string& plan_path, const std::vector<int32_t>& tokens, int64_t* vocab_size,
    llmrt::QuantizedActivations activations = llmrt::QuantizedActivations::kInt8);

// The same for the plan's DEQUANTIZED twin: every I8/I4/FP4_E2M1 tensor replaced by the f32
// weights DequantizePlanTensor reads from its codes (no permutation, plain f32 matmuls), built
// in memory; the reference the exact mode must match.
absl::StatusOr<std::vector<float>> DequantizedTeacherForcedLogits(
    const std::string& plan_path, const std::vector<int32_t>& tokens, int64_t* vocab_size);

// `count` greedy tokens after `prompt` (prompt not included).
absl::StatusOr<std::vector<int32_t>> GreedyTokens(const std::string& plan_path,
                                                  const std::vector<int32_t>& prompt, int count);

// Mean over positions of KL(softmax(reference) || softmax(candidate)), in nats.
double MeanKl(const std::vector<float>& reference, const std::vector<float>& candidate,
              int64_t vocab_size);

// exp(mean negative log-likelihood of tokens[i + 1] given position i's logits).
double Perplexity(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                  int64_t vocab_size);

// Fraction of positions [from, tokens.size() - 1) whose argmax is tokens[i + 1].
double Top1Agreement(const std::vector<float>& logits, const std::vector<int32_t>& tokens,
                     int64_t vocab_size, size_t from);

// The f32 weights [rows, cols] a quantized plan tensor (I8/I4/FP4_E2M1 with Quantization) stands
// for, in original input order, read from the plan bytes by plan.proto's formulas (independently
// of compiler/quant); an expert tensor [E, N, K] gives [E * N, K].
std::vector<float> DequantizePlanTensor(const llmrt::plan::Plan& plan, int tensor_index);

// Copies the checkpoint in `model_dir` (one model.safetensors) to `output_dir` untied:
// config.json's tie_word_embeddings false and an lm_head.weight equal to
// model.embed_tokens.weight. The same model (equal float logits) with an lm_head that
// --lm-head-quant can quantize: stories260K, the one trained model here, is tied.
absl::Status WriteUntiedCopy(const std::string& model_dir, const std::string& output_dir);

struct AccuracyRow {
  std::string label;  // "int4 g32 asymmetric rtn"
  uint64_t plan_bytes = 0;
  double mean_kl = 0;  // on the text, vs the f32 plan
  // The same with the plan's quantized matmuls run in the exact mode (f32 activations): the
  // part of mean_kl the weights alone cause; the rest is the int8 activations'.
  double weight_only_kl = 0;
  double perplexity = 0;  // on the text
  double top1 = 0;        // along the f32 plan's 256 greedy tokens
};

// Measures one plan against the f32 plan of the same model on `text`; `greedy` is the f32
// plan's greedy continuation of `prompt` (GreedyTokens). mean_kl, perplexity and top1 are
// measured with `activations`; weight_only_kl always with kF32.
absl::StatusOr<AccuracyRow> Measure(
    const std::string& label, const std::string& plan_path, const std::vector<int32_t>& text_tokens,
    const std::vector<float>& reference_logits, const std::vector<int32_t>& prompt_and_greedy,
    size_t prompt_size,
    llmrt::QuantizedActivations activations = llmrt::QuantizedActivations::kInt8);

}  // namespace llmc::quant_testing

#endif  // LLMC_TESTS_QUANT_ACCURACY_H_
