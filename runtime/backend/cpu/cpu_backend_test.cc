// Conformance of the CPU backend against plain references written here and in
// runtime/backend/testing (double precision, whole-sequence recompute, no paging).
#include "runtime/backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/backend/cpu/kernels.h"
#include "runtime/backend/cpu/quant_kv_attention.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/dtype.h"

namespace llmrt::cpu {
namespace {

using ::llmrt::testing::BuildTinyLlama;
using ::llmrt::testing::TinyLlama;
using ::llmrt::testing::TinyLlamaOptions;

std::unique_ptr<Backend> MakeBackend(const TinyLlama& model, int32_t num_blocks, int32_t block_size,
                                     int32_t max_tokens = 64, int32_t threads = 1) {
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      CreateCpuBackend(model.meta, model.Lookup(), {max_tokens, threads});
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  absl::Status status = (*backend)->AllocateKvCache(num_blocks, block_size);
  EXPECT_TRUE(status.ok()) << status;
  return std::move(*backend);
}

// One sequence's share of a step: `count` tokens starting at `start` of `tokens`.
struct Part {
  const std::vector<int32_t>* tokens;
  const std::vector<int32_t>* block_table;
  int32_t start;
  int32_t count;
};

// Runs one step over `parts` and returns logits of every token, in batch order.
std::vector<float> RunStep(Backend& backend, int32_t block_size, const std::vector<Part>& parts) {
  StepBatch batch;
  for (const Part& part : parts) {
    StepSequence sequence;
    sequence.first_token = batch.num_tokens();
    sequence.num_tokens = part.count;
    sequence.context_length = part.start + part.count;
    sequence.block_table = part.block_table->data();
    sequence.num_blocks = static_cast<int32_t>(part.block_table->size());
    batch.sequences.push_back(sequence);
    for (int32_t index = part.start; index < part.start + part.count; ++index) {
      batch.logit_rows.push_back(batch.num_tokens());
      batch.token_ids.push_back((*part.tokens)[index]);
      batch.positions.push_back(index);
      batch.slot_mapping.push_back((*part.block_table)[index / block_size] * block_size +
                                   index % block_size);
    }
  }
  std::vector<float> logits(batch.logit_rows.size() * backend.vocab_size());
  absl::Status status = backend.RunStep(batch, logits.data());
  EXPECT_TRUE(status.ok()) << status;
  return logits;
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double worst = 0;
  size_t worst_index = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(error <= worst)) {
      worst = error;
      worst_index = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": worst at " << worst_index << ", got "
                              << actual[worst_index] << " expected " << expected[worst_index];
}

std::vector<int32_t> Tokens(int32_t count, int32_t vocab, int32_t salt) {
  std::vector<int32_t> tokens(count);
  for (int32_t i = 0; i < count; ++i) tokens[i] = (i * 7 + salt * 13 + 3) % vocab;
  return tokens;
}

struct ModelCase {
  std::string name;
  TinyLlamaOptions options;
};

std::vector<ModelCase> ModelCases() {
  std::vector<ModelCase> cases;
  cases.push_back({"fused_gqa", {}});
  TinyLlamaOptions unfused;
  unfused.fused = false;
  cases.push_back({"unfused", unfused});
  TinyLlamaOptions mqa;
  mqa.num_kv_heads = 1;
  mqa.qkv_bias = true;
  cases.push_back({"mqa_bias", mqa});
  TinyLlamaOptions mha;
  mha.num_kv_heads = 4;
  mha.tie_embeddings = true;
  cases.push_back({"mha_tied", mha});
  TinyLlamaOptions f16;
  f16.weight_dtype = plan::F16;
  cases.push_back({"f16", f16});
  TinyLlamaOptions bf16;
  bf16.weight_dtype = plan::BF16;
  bf16.fused = false;
  cases.push_back({"bf16_unfused", bf16});
  TinyLlamaOptions window;
  window.sliding_window = 5;
  cases.push_back({"sliding_window", window});
  TinyLlamaOptions linear;
  linear.rope.set_theta(500.0);
  linear.rope.set_scaling(plan::RopeConfig::LINEAR);
  linear.rope.set_factor(4.0);
  cases.push_back({"rope_linear", linear});
  TinyLlamaOptions llama3;
  llama3.head_dim = 16;
  llama3.hidden_size = 32;
  llama3.rope.set_theta(10000.0);
  llama3.rope.set_scaling(plan::RopeConfig::LLAMA3);
  llama3.rope.set_factor(8.0);
  llama3.rope.set_low_freq_factor(1.0);
  llama3.rope.set_high_freq_factor(4.0);
  llama3.rope.set_original_max_position_embeddings(32);
  cases.push_back({"rope_llama3", llama3});
  return cases;
}

// Logits are O(1..10); f32 against double differs by ~1e-6 relative per op.
constexpr double kTolerance = 2e-4;

// Whether packed BF16 matmuls now run on the AVX512-BF16 tier (matmul.cc), which rounds their
// activations to bf16.
bool Bf16TierActive() { return ActiveCpuExtensions().avx512_bf16; }

float RoundToBf16(float value) { return plan::Bf16ToF32(plan::F32ToBf16(value)); }

TEST(CpuBackendTest, WholeSequenceMatchesReference) {
  for (const ModelCase& model_case : ModelCases()) {
    TinyLlama model = BuildTinyLlama(model_case.options);
    std::unique_ptr<Backend> backend = MakeBackend(model, 8, 4);
    ASSERT_NE(backend, nullptr) << model_case.name;
    const std::vector<int32_t> tokens = Tokens(19, model_case.options.vocab_size, 1);
    const std::vector<int32_t> blocks = {6, 1, 4, 0, 7};  // deliberately not 0, 1, 2, ...
    ExpectNear(RunStep(*backend, 4, {{&tokens, &blocks, 0, 19}}), model.ReferenceLogits(tokens),
               kTolerance, model_case.name);
  }
}

TEST(CpuBackendTest, ChunkedPrefillAndDecodeMatchWholeSequence) {
  for (const ModelCase& model_case : ModelCases()) {
    TinyLlama model = BuildTinyLlama(model_case.options);
    std::unique_ptr<Backend> backend = MakeBackend(model, 8, 4);
    const std::vector<int32_t> tokens = Tokens(15, model_case.options.vocab_size, 2);
    const std::vector<int32_t> blocks = {3, 5, 0, 2};
    std::vector<float> logits;
    // A prefill chunk ending mid-block, another crossing two block boundaries, then decode.
    for (auto [start, count] :
         std::vector<std::pair<int, int>>{{0, 3}, {3, 7}, {10, 1}, {11, 1}, {12, 1}, {13, 2}}) {
      std::vector<float> part = RunStep(*backend, 4, {{&tokens, &blocks, start, count}});
      logits.insert(logits.end(), part.begin(), part.end());
    }
    ExpectNear(logits, model.ReferenceLogits(tokens), kTolerance, model_case.name);
  }
}

// The KV cache is not cleared when it is created or when blocks change hands (kv_storage.h):
// a sequence must never read a slot it did not write. Sequence A fills five blocks; sequence
// B then gets three of them (its last block only half used, the rest still holding A's rows)
// and must produce the reference logits of its own tokens, chunked prefill and decode alike.
// Any read of one of A's leftover rows (past B's context, or before B overwrote it) would
// change B's logits.
TEST(CpuBackendTest, ReusedBlocksNeverLeakStaleData) {
  for (const ModelCase& model_case : ModelCases()) {
    TinyLlama model = BuildTinyLlama(model_case.options);
    std::unique_ptr<Backend> backend = MakeBackend(model, 8, 4);
    ASSERT_NE(backend, nullptr) << model_case.name;
    const std::vector<int32_t> first = Tokens(19, model_case.options.vocab_size, 5);
    const std::vector<int32_t> first_blocks = {6, 1, 4, 0, 7};
    RunStep(*backend, 4, {{&first, &first_blocks, 0, 19}});
    const std::vector<int32_t> second = Tokens(10, model_case.options.vocab_size, 9);
    const std::vector<int32_t> second_blocks = {0, 7, 4};
    std::vector<float> logits;
    for (auto [start, count] : std::vector<std::pair<int, int>>{{0, 3}, {3, 5}, {8, 1}, {9, 1}}) {
      std::vector<float> part = RunStep(*backend, 4, {{&second, &second_blocks, start, count}});
      logits.insert(logits.end(), part.begin(), part.end());
    }
    ExpectNear(logits, model.ReferenceLogits(second), kTolerance, model_case.name);
  }
}

using ::llmrt::testing::PackPanels;

// Re-lays every matmul and lm_head weight of `model` as ROW_PANELS of 16, as codegen does for
// the CPU target; an embedding table (also when tied to lm_head) stays ROW_MAJOR.
void PackMatmulWeights(TinyLlama& model) {
  std::set<int32_t> embedding_tables;
  std::set<int32_t> matrices;
  for (const plan::Op& op : model.meta.program().ops()) {
    if (op.kind() == plan::EMBED) embedding_tables.insert(op.weights(0));
    if (op.kind() == plan::MATMUL || op.kind() == plan::LOGITS) matrices.insert(op.weights(0));
  }
  for (int32_t index : matrices) {
    if (embedding_tables.count(index) != 0) continue;
    plan::Tensor* tensor = model.meta.mutable_tensors(index);
    const size_t element_bytes = tensor->dtype() == plan::F32 ? 4 : 2;
    model.blobs[index] = PackPanels(model.blobs[index], tensor->shape(0), tensor->shape(1),
                                    element_bytes, kPanelRows);
    tensor->set_layout(plan::Tensor::ROW_PANELS);
    tensor->set_panel_rows(kPanelRows);
    tensor->set_size_bytes(model.blobs[index].size());
  }
}

// The packed layout through the same whole-sequence and chunked checks, on 1-3 threads.
TEST(CpuBackendTest, PackedWeightsMatchReferenceOnAnyThreadCount) {
  for (ModelCase model_case : ModelCases()) {
    // Every matrix a whole number of 16-row panels: hidden 32, intermediate 48, vocab 48.
    TinyLlamaOptions& options = model_case.options;
    if (options.hidden_size == 24) {
      options.hidden_size = 32;
      options.head_dim = 8;
    }
    options.intermediate_size = 48;
    options.vocab_size = 48;
    TinyLlama model = BuildTinyLlama(options);
    const std::vector<int32_t> tokens = Tokens(19, model_case.options.vocab_size, 1);
    // The reference reads the blobs as ROW_MAJOR, so it runs before packing.
    const std::vector<float> reference = model.ReferenceLogits(tokens);
    PackMatmulWeights(model);
    const std::vector<int32_t> blocks = {6, 1, 4, 0, 7};
    std::vector<float> one_thread;
    for (int32_t threads : {1, 2, 3}) {
      std::unique_ptr<Backend> backend = MakeBackend(model, 8, 4, 64, threads);
      ASSERT_NE(backend, nullptr) << model_case.name;
      std::vector<float> logits = RunStep(*backend, 4, {{&tokens, &blocks, 0, 12}});
      for (int32_t start = 12; start < 19; ++start) {
        std::vector<float> part = RunStep(*backend, 4, {{&tokens, &blocks, start, 1}});
        logits.insert(logits.end(), part.begin(), part.end());
      }
      // On the AVX512-BF16 tier the packed BF16 matmuls round their activations to bf16 (8
      // significant bits, at most 2^-8 relative) through 2 layers of 7 matmuls and lm_head:
      // that moves this random model's logits (O(1)) by up to 0.046 (measured; allowed 0.15),
      // against ~1e-5 for the f32-activation paths. The kernel itself is held to the
      // arithmetic's bound by the CpuKernelTest.Bf16Tier* tests; here every thread count must
      // also give the same logits to the bit.
      const bool rounded_activations = options.weight_dtype == plan::BF16 && Bf16TierActive();
      ExpectNear(logits, reference, rounded_activations ? 0.15 : kTolerance,
                 model_case.name + " threads " + std::to_string(threads));
      if (threads == 1) {
        one_thread = logits;
      } else {
        EXPECT_EQ(logits, one_thread) << model_case.name << " threads " << threads;
      }
    }
  }
}

TEST(CpuBackendTest, RejectsPanelsOfAnotherHeight) {
  TinyLlamaOptions options;
  options.hidden_size = 32;
  options.head_dim = 8;
  options.intermediate_size = 48;
  options.vocab_size = 48;
  TinyLlama model = BuildTinyLlama(options);
  PackMatmulWeights(model);
  for (plan::Tensor& tensor : *model.meta.mutable_tensors()) {
    if (tensor.layout() == plan::Tensor::ROW_PANELS) tensor.set_panel_rows(8);
  }
  auto backend = CreateCpuBackend(model.meta, model.Lookup(), {16, 1});
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("panel_rows 8"), std::string::npos) << backend.status();
}

TEST(CpuBackendTest, SeveralSequencesInOneStepMatchEachAlone) {
  for (const ModelCase& model_case : ModelCases()) {
    const int32_t vocab = model_case.options.vocab_size;
    TinyLlama model = BuildTinyLlama(model_case.options);
    std::unique_ptr<Backend> backend = MakeBackend(model, 16, 4, 64, /*threads=*/2);
    const std::vector<int32_t> first = Tokens(9, vocab, 3);
    const std::vector<int32_t> second = Tokens(13, vocab, 4);
    const std::vector<int32_t> third = Tokens(2, vocab, 5);
    // Interleaved, non-contiguous blocks.
    const std::vector<int32_t> first_blocks = {9, 2, 14};
    const std::vector<int32_t> second_blocks = {1, 11, 3, 8};
    const std::vector<int32_t> third_blocks = {15};
    // Step 1: the first sequence's prefix alone. Step 2: its rest (a cached prefix), all of
    // the second, all of the third. Step 3: one decode token for the first and the second.
    std::vector<float> first_logits = RunStep(*backend, 4, {{&first, &first_blocks, 0, 5}});
    std::vector<float> mixed = RunStep(*backend, 4,
                                       {{&first, &first_blocks, 5, 3},
                                        {&second, &second_blocks, 0, 12},
                                        {&third, &third_blocks, 0, 2}});
    std::vector<float> decode =
        RunStep(*backend, 4, {{&first, &first_blocks, 8, 1}, {&second, &second_blocks, 12, 1}});
    first_logits.insert(first_logits.end(), mixed.begin(), mixed.begin() + 3 * vocab);
    first_logits.insert(first_logits.end(), decode.begin(), decode.begin() + vocab);
    std::vector<float> second_logits(mixed.begin() + 3 * vocab, mixed.begin() + 15 * vocab);
    second_logits.insert(second_logits.end(), decode.begin() + vocab, decode.end());
    std::vector<float> third_logits(mixed.begin() + 15 * vocab, mixed.end());
    ExpectNear(first_logits, model.ReferenceLogits(first), kTolerance, model_case.name + " first");
    ExpectNear(second_logits, model.ReferenceLogits(second), kTolerance,
               model_case.name + " second");
    ExpectNear(third_logits, model.ReferenceLogits(third), kTolerance, model_case.name + " third");
  }
}

TEST(CpuBackendTest, LogitRowsSelectTokens) {
  TinyLlama model = BuildTinyLlama({});
  std::unique_ptr<Backend> backend = MakeBackend(model, 4, 4);
  const std::vector<int32_t> tokens = Tokens(6, 40, 6);
  StepBatch batch;
  batch.token_ids = tokens;
  batch.positions = {0, 1, 2, 3, 4, 5};
  batch.slot_mapping = {0, 1, 2, 3, 4, 5};
  const std::vector<int32_t> blocks = {0, 1};
  batch.sequences.push_back({0, 6, 6, blocks.data(), 2});
  batch.logit_rows = {5, 2};
  std::vector<float> logits(2 * 40);
  ASSERT_TRUE(backend->RunStep(batch, logits.data()).ok());
  const std::vector<float> reference = model.ReferenceLogits(tokens);
  ExpectNear(std::vector<float>(logits.begin(), logits.begin() + 40),
             std::vector<float>(reference.begin() + 5 * 40, reference.begin() + 6 * 40), kTolerance,
             "row 5");
  ExpectNear(std::vector<float>(logits.begin() + 40, logits.end()),
             std::vector<float>(reference.begin() + 2 * 40, reference.begin() + 3 * 40), kTolerance,
             "row 2");
}

// Single-op programs: inputs come from EMBED tables whose row t is token t's input, and an
// identity LOGITS matrix reads the op's output back exactly.
// A program built with testing::OpProgram (inputs given row by row), run on the CPU backend
// in one step.
class OpHarness : public ::llmrt::testing::OpProgram {
 public:
  int32_t Input(const std::vector<std::vector<float>>& rows) { return InputRows(rows); }
  int32_t PanelTensor(plan::DType dtype, int64_t rows, int64_t cols,
                      const std::vector<float>& data) {
    return PanelMatrix(dtype, rows, cols, kPanelRows, data);
  }
  void set_threads(int32_t threads) { threads_ = threads; }

  // Runs the program on tokens 0..positions.size()-1 at `positions`; returns `output`.
  std::vector<float> Run(int32_t output, const std::vector<int32_t>& positions) {
    ReadOut(output);
    const int64_t width = meta().program().values(output).width();
    auto backend = CreateCpuBackend(meta(), Lookup(), {64, threads_});
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return {};
    return ::llmrt::testing::RunSteps(**backend, {static_cast<int32_t>(positions.size())},
                                      positions, width);
  }

 private:
  int32_t threads_ = 1;
};

std::vector<std::vector<float>> RandomRows(int rows, int width, int salt) {
  std::vector<std::vector<float>> result(rows, std::vector<float>(width));
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < width; ++i) result[r][i] = std::sin(1.3f * (r * width + i) + salt) * 2.0f;
  }
  return result;
}

TEST(CpuBackendOpTest, RopeAtLargePositionsForEveryScaling) {
  const int32_t heads = 2, head_dim = 16, half = 8;
  const std::vector<int32_t> positions = {0, 1, 17, 300, 4095, 12000};
  for (int scaling = 0; scaling < 3; ++scaling) {
    plan::RopeConfig rope;
    rope.set_theta(500000.0);
    rope.set_scaling(static_cast<plan::RopeConfig::Scaling>(scaling));
    rope.set_factor(8.0);
    rope.set_low_freq_factor(1.0);
    rope.set_high_freq_factor(4.0);
    rope.set_original_max_position_embeddings(64);
    OpHarness harness;
    const auto x = RandomRows(6, heads * head_dim, scaling);
    const int32_t in = harness.Input(x);
    const int32_t out = harness.Activation(heads * head_dim);
    plan::Op* op = harness.AddOp(plan::ROPE, {in, harness.positions()}, {out}, {});
    op->mutable_rope()->set_num_heads(heads);
    op->mutable_rope()->set_head_dim(head_dim);
    *op->mutable_rope()->mutable_config() = rope;
    const std::vector<float> result = harness.Run(out, positions);
    const std::vector<double> inv_freq =
        ::llmrt::testing::ReferenceInverseFrequencies(rope, head_dim);
    for (size_t t = 0; t < positions.size(); ++t) {
      for (int h = 0; h < heads; ++h) {
        for (int i = 0; i < half; ++i) {
          const double angle = positions[t] * inv_freq[i];
          const double a = x[t][h * head_dim + i], b = x[t][h * head_dim + i + half];
          const size_t base = t * heads * head_dim + h * head_dim;
          // At position 12000 one f32 ulp of the angle is ~1e-3 rad; transformers computes
          // the same f32 angle, so only the reference (double) is that far off.
          const double tolerance = 2e-6 * (1 + positions[t]);
          EXPECT_NEAR(result[base + i], a * std::cos(angle) - b * std::sin(angle), tolerance)
              << "scaling " << scaling << " position " << positions[t] << " i " << i;
          EXPECT_NEAR(result[base + i + half], b * std::cos(angle) + a * std::sin(angle), tolerance)
              << "scaling " << scaling << " position " << positions[t] << " i " << i;
        }
      }
    }
  }
}

TEST(CpuBackendOpTest, FusedMatMulSplitsColumnsInOrderForEveryDtype) {
  const int rows = 3, k = 37;  // k not a multiple of 8: exercises the tail of the dot product
  const std::vector<int64_t> widths = {5, 2, 6};
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    for (int pick = 0; pick < 3; ++pick) {
      OpHarness harness;
      const auto x = RandomRows(rows, k, 1);
      const std::vector<float> w_data = [&] {
        std::vector<float> data(13 * k);
        for (size_t i = 0; i < data.size(); ++i) data[i] = std::cos(0.7f * i);
        return data;
      }();
      std::vector<float> bias(13);
      for (int i = 0; i < 13; ++i) bias[i] = 0.1f * i - 0.5f;
      const int32_t in = harness.Input(x);
      const int32_t w = harness.Tensor(dtype, {13, k}, w_data);
      const int32_t b = harness.Tensor(plan::F32, {13}, bias);
      std::vector<int32_t> outs;
      for (int64_t width : widths) outs.push_back(harness.Activation(width));
      harness.AddOp(plan::MATMUL, {in}, outs, {w, b});
      const std::vector<float> result = harness.Run(outs[pick], {0, 1, 2});
      const std::vector<float> stored =
          ::llmrt::testing::DecodeFrom(dtype, ::llmrt::testing::EncodeAs(dtype, w_data));
      const int64_t begin = std::accumulate(widths.begin(), widths.begin() + pick, int64_t{0});
      for (int r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < widths[pick]; ++c) {
          double expected = bias[begin + c];
          for (int i = 0; i < k; ++i) expected += double{x[r][i]} * stored[(begin + c) * k + i];
          EXPECT_NEAR(result[r * widths[pick] + c], expected, 1e-4)
              << "dtype " << dtype << " output " << pick << " row " << r << " col " << c;
        }
      }
    }
  }
}

// Every shape class of the panel kernel: token counts below, at and above each target's
// micro-kernel height (1, 2, 3, 6, 8 rows) and their remainders; N of one and two panels; K of 1,
// an odd count and one that is not a multiple of the k-split; fused outputs whose boundaries fall
// inside a panel; with and without bias; 1 and 3 threads.
TEST(CpuBackendOpTest, PackedMatMulEveryShapeClass) {
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    for (int64_t k : {1, 7, 37, 64}) {
      for (std::vector<int64_t> widths :
           {std::vector<int64_t>{16}, std::vector<int64_t>{32}, std::vector<int64_t>{5, 20, 23}}) {
        for (int rows : {1, 2, 3, 5, 6, 7, 9, 13, 17, 40}) {
          for (int32_t threads : {1, 3}) {
            const bool with_bias = rows % 2 == 1;
            const int64_t n = std::accumulate(widths.begin(), widths.end(), int64_t{0});
            OpHarness harness;
            harness.set_threads(threads);
            const auto x = RandomRows(rows, static_cast<int>(k), 3);
            std::vector<float> w_data(n * k);
            for (size_t i = 0; i < w_data.size(); ++i) w_data[i] = std::cos(0.37f * i + 0.1f);
            std::vector<float> bias(n);
            for (int64_t i = 0; i < n; ++i) bias[i] = 0.25f * i - 1.0f;
            const int32_t in = harness.Input(x);
            std::vector<int32_t> weights = {harness.PanelTensor(dtype, n, k, w_data)};
            if (with_bias) weights.push_back(harness.Tensor(plan::F32, {n}, bias));
            std::vector<int32_t> outs;
            for (int64_t width : widths) outs.push_back(harness.Activation(width));
            harness.AddOp(plan::MATMUL, {in}, outs, weights);
            const int pick = static_cast<int>(widths.size()) - 1;
            std::vector<int32_t> positions(rows);
            std::iota(positions.begin(), positions.end(), 0);
            const std::vector<float> result = harness.Run(outs[pick], positions);
            const std::vector<float> stored =
                ::llmrt::testing::DecodeFrom(dtype, ::llmrt::testing::EncodeAs(dtype, w_data));
            // The AVX512-BF16 tier multiplies BF16 weights with bf16-rounded activations.
            const bool round_x = dtype == plan::BF16 && Bf16TierActive();
            const int64_t begin = n - widths[pick];
            for (int r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < widths[pick]; ++c) {
                double expected = with_bias ? bias[begin + c] : 0.0;
                for (int i = 0; i < k; ++i) {
                  expected += double{round_x ? RoundToBf16(x[r][i]) : x[r][i]} *
                              stored[(begin + c) * k + i];
                }
                ASSERT_NEAR(result[r * widths[pick] + c], expected, 1e-4)
                    << "dtype " << dtype << " k " << k << " n " << n << " rows " << rows
                    << " threads " << threads << " row " << r << " col " << c;
              }
            }
          }
        }
      }
    }
  }
}

// The attention kernel directly at TinyLlama's head shape (8 query heads per kv head, head_dim
// 64, blocks of 16 in a scrambled order) over contexts that span many blocks and start or end
// mid-block, with and without a sliding window, against a two-pass softmax in double.
TEST(CpuKernelTest, AttentionOnlineSoftmaxMatchesTwoPassReference) {
  constexpr int32_t kHeads = 16, kKvHeads = 2, kHeadDim = 64, kBlock = 16, kBlocks = 24;
  const int64_t stride = kKvHeads * kHeadDim;
  std::vector<float> keys(kBlocks * kBlock * stride), values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = std::sin(0.11f * i) * 1.5f;
    values[i] = std::cos(0.07f * i + 0.3f);
  }
  std::vector<int32_t> block_table(kBlocks);
  for (int32_t i = 0; i < kBlocks; ++i) block_table[i] = (i * 5 + 3) % kBlocks;
  for (int64_t window : {int64_t{0}, int64_t{37}}) {
    for (int32_t threads : {1, 2}) {
      ThreadPool pool(threads);
      // Three query tokens of one sequence at indices 5, 200 and 380.
      const std::vector<int64_t> index = {5, 200, 380};
      const int64_t tokens = static_cast<int64_t>(index.size());
      std::vector<float> q(tokens * kHeads * kHeadDim);
      for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.05f * i + 1.0f);
      std::vector<float> out(q.size());
      std::vector<const int32_t*> tables(tokens, block_table.data());
      const int64_t scratch_stride = AttentionScratchFloats(kHeads, kKvHeads, kHeadDim, kBlock);
      std::vector<float> scratch(scratch_stride * threads);
      AttentionArgs args;
      args.q = q.data();
      args.out = out.data();
      args.key_cache = keys.data();
      args.value_cache = values.data();
      args.token_stride = stride;
      args.num_heads = kHeads;
      args.num_kv_heads = kKvHeads;
      args.head_dim = kHeadDim;
      args.block_size = kBlock;
      args.sliding_window = window;
      args.scale = 0.125f;
      args.num_tokens = tokens;
      args.token_block_table = tables.data();
      args.token_index = index.data();
      args.scratch = scratch.data();
      args.scratch_stride = scratch_stride;
      Attention(pool, args);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int32_t head = 0; head < kHeads; ++head) {
          const int32_t kv_head = head / (kHeads / kKvHeads);
          const float* query = q.data() + (t * kHeads + head) * kHeadDim;
          const int64_t first = window > 0 ? std::max<int64_t>(0, index[t] - window + 1) : 0;
          std::vector<double> scores;
          double max_score = -1e300;
          for (int64_t key = first; key <= index[t]; ++key) {
            const int64_t slot = block_table[key / kBlock] * kBlock + key % kBlock;
            double dot = 0;
            for (int i = 0; i < kHeadDim; ++i) {
              dot += double{query[i]} * keys[slot * stride + kv_head * kHeadDim + i];
            }
            scores.push_back(dot * 0.125);
            max_score = std::max(max_score, scores.back());
          }
          double total = 0;
          for (double& score : scores) total += (score = std::exp(score - max_score));
          for (int i = 0; i < kHeadDim; ++i) {
            double expected = 0;
            for (int64_t key = first; key <= index[t]; ++key) {
              const int64_t slot = block_table[key / kBlock] * kBlock + key % kBlock;
              expected += scores[key - first] * values[slot * stride + kv_head * kHeadDim + i];
            }
            ASSERT_NEAR(out[(t * kHeads + head) * kHeadDim + i], expected / total, 2e-5)
                << "window " << window << " threads " << threads << " token " << t << " head "
                << head << " i " << i;
          }
        }
      }
    }
  }
}

// A KV cache of each dtype for the keys-in-lanes attention tests: exact f32 rows, the bytes the
// kernel reads, and each element as the kernel decodes it (the reference's input).
struct AttentionCache {
  AttentionCache(plan::DType dtype, int32_t kv_heads, int32_t head_dim, int64_t slots)
      : dtype(dtype), kv_heads(kv_heads), head_dim(head_dim), stride(int64_t{kv_heads} * head_dim) {
    const int64_t size = slots * stride;
    keys.resize(size);
    values.resize(size);
    for (int64_t i = 0; i < size; ++i) {
      // Some heads 50x larger than others, so per-head I8 scales matter.
      const float magnitude = (i / head_dim) % 2 == 0 ? 1.5f : 0.03f;
      keys[i] = std::sin(0.11f * static_cast<float>(i) + 0.2f) * magnitude;
      values[i] = std::cos(0.07f * static_cast<float>(i) + 0.3f) * magnitude;
    }
    decoded_keys = keys;
    decoded_values = values;
    if (dtype == plan::F16 || dtype == plan::BF16) {
      key_bits.resize(size);
      value_bits.resize(size);
      for (int64_t i = 0; i < size; ++i) {
        const bool f16 = dtype == plan::F16;
        key_bits[i] = f16 ? plan::F32ToF16(keys[i]) : plan::F32ToBf16(keys[i]);
        value_bits[i] = f16 ? plan::F32ToF16(values[i]) : plan::F32ToBf16(values[i]);
        decoded_keys[i] = f16 ? plan::F16ToF32(key_bits[i]) : plan::Bf16ToF32(key_bits[i]);
        decoded_values[i] = f16 ? plan::F16ToF32(value_bits[i]) : plan::Bf16ToF32(value_bits[i]);
      }
    } else if (dtype == plan::I8) {
      key_codes.resize(size);
      value_codes.resize(size);
      key_scales.resize(slots * kv_heads);
      value_scales.resize(slots * kv_heads);
      for (int64_t row = 0; row < slots * kv_heads; ++row) {
        Quantize(keys, row, key_codes, key_scales, decoded_keys);
        Quantize(values, row, value_codes, value_scales, decoded_values);
      }
    }
  }

  // Symmetric int8 of one (slot, kv head) row: scale = max |x| / 127.
  void Quantize(const std::vector<float>& exact, int64_t row, std::vector<int8_t>& codes,
                std::vector<float>& scales, std::vector<float>& decoded) const {
    float largest = 0;
    for (int32_t i = 0; i < head_dim; ++i) {
      largest = std::max(largest, std::fabs(exact[row * head_dim + i]));
    }
    scales[row] = largest / 127.0f;
    for (int32_t i = 0; i < head_dim; ++i) {
      const int64_t at = row * head_dim + i;
      codes[at] = static_cast<int8_t>(std::lround(exact[at] / scales[row]));
      decoded[at] = static_cast<float>(codes[at]) * scales[row];
    }
  }

  // Points `args` at this cache; KvCacheAttention for reduced-precision dtypes.
  void Run(ThreadPool& pool, AttentionArgs& args) const {
    args.token_stride = stride;
    args.kv_dtype = dtype;
    if (dtype == plan::F32) {
      args.key_cache = keys.data();
      args.value_cache = values.data();
      Attention(pool, args);
      return;
    }
    const bool i8 = dtype == plan::I8;
    args.key_bytes = i8 ? reinterpret_cast<const uint8_t*>(key_codes.data())
                        : reinterpret_cast<const uint8_t*>(key_bits.data());
    args.value_bytes = i8 ? reinterpret_cast<const uint8_t*>(value_codes.data())
                          : reinterpret_cast<const uint8_t*>(value_bits.data());
    args.key_scales = i8 ? key_scales.data() : nullptr;
    args.value_scales = i8 ? value_scales.data() : nullptr;
    KvCacheAttention(pool, args);
  }

  plan::DType dtype;
  int32_t kv_heads, head_dim;
  int64_t stride;
  std::vector<float> keys, values, decoded_keys, decoded_values;
  std::vector<uint16_t> key_bits, value_bits;
  std::vector<int8_t> key_codes, value_codes;
  std::vector<float> key_scales, value_scales;
};

struct AttentionShape {
  int32_t heads, kv_heads, head_dim, block;
  int64_t window;
  float softcap;
  bool sinks;
};

// Attention of `tokens` (token t: the sequence's table and index, query row t of `q`), all in
// one call or, with `alone`, one call per token.
std::vector<float> RunAttentionRows(const AttentionShape& shape, const AttentionCache& cache,
                                    const std::vector<const int32_t*>& tables,
                                    const std::vector<int64_t>& index, const std::vector<float>& q,
                                    const std::vector<float>& sinks, int32_t threads, bool alone) {
  ThreadPool pool(threads);
  const int64_t tokens = static_cast<int64_t>(index.size());
  const int64_t width = int64_t{shape.heads} * shape.head_dim;
  std::vector<float> out(q.size(), -1.0f);
  const int64_t scratch_stride =
      KvCacheAttentionScratchFloats(shape.heads, shape.kv_heads, shape.head_dim, shape.block);
  std::vector<float> scratch(scratch_stride * threads);
  AttentionArgs args;
  args.num_heads = shape.heads;
  args.num_kv_heads = shape.kv_heads;
  args.head_dim = shape.head_dim;
  args.block_size = shape.block;
  args.sliding_window = shape.window;
  args.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  args.softcap = shape.softcap;
  args.sinks = shape.sinks ? sinks.data() : nullptr;
  args.scratch = scratch.data();
  args.scratch_stride = scratch_stride;
  const int64_t step = alone ? 1 : tokens;
  for (int64_t first = 0; first < tokens; first += step) {
    args.q = q.data() + first * width;
    args.out = out.data() + first * width;
    args.num_tokens = step;
    args.token_block_table = tables.data() + first;
    args.token_index = index.data() + first;
    cache.Run(pool, args);
  }
  return out;
}

// Prefill tiles of narrow groups (keys in lanes on AVX-512: MHA as Qwen2-MoE / Phi-3 / OLMo2,
// groups of 2; at narrower vectors some of these are heads in lanes) against one token at a time
// to the bit, and against a double reference over the values the cache holds. Tokens: two
// sequences in one step, 3 tokens of one from index 13 (crossing a block boundary at 16), then
// 17 of the other from index 30, so tiles start mid-block, straddle the two sequences, and end
// with a partial tile; a lone token at index 0. Every KV dtype, with a sliding window shorter
// than a block (a tile's tokens then start their keys in different blocks) and one longer,
// soft-capping, and sinks.
TEST(CpuKernelTest, NarrowGroupTilesMatchEachTokenAloneAndTheReference) {
  constexpr int32_t kBlocks = 8;
  const std::vector<AttentionShape> shapes = {
      {4, 4, 64, 16, 0, 0.0f, false}, {4, 2, 64, 16, 0, 0.0f, false},
      {4, 4, 64, 16, 7, 0.0f, false}, {4, 2, 40, 16, 20, 0.0f, true},
      {6, 6, 24, 8, 0, 30.0f, true},  {2, 1, 64, 16, 11, 0.0f, true},
  };
  // Two sequences' block tables, in scrambled orders over one cache of 2 * kBlocks blocks.
  std::vector<int32_t> table_a(kBlocks), table_b(kBlocks);
  for (int32_t i = 0; i < kBlocks; ++i) {
    table_a[i] = (i * 5 + 3) % (2 * kBlocks);
    table_b[i] = (i * 5 + 3) % (2 * kBlocks) ^ 1;
  }
  std::vector<const int32_t*> tables;
  std::vector<int64_t> index;
  for (int64_t i = 13; i < 16; ++i) tables.push_back(table_a.data()), index.push_back(i);
  for (int64_t i = 30; i < 47; ++i) tables.push_back(table_b.data()), index.push_back(i);
  tables.push_back(table_a.data());
  index.push_back(0);
  const int64_t tokens = static_cast<int64_t>(index.size());
  for (const AttentionShape& shape : shapes) {
    const int32_t group = shape.heads / shape.kv_heads;
    const int64_t width = int64_t{shape.heads} * shape.head_dim;
    std::vector<float> q(tokens * width);
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.05f * static_cast<float>(i) + 1.0f);
    std::vector<float> sinks(shape.heads);
    for (int32_t h = 0; h < shape.heads; ++h) sinks[h] = 0.5f * static_cast<float>(h) - 1.0f;
    for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16, plan::I8}) {
      const AttentionCache cache(dtype, shape.kv_heads, shape.head_dim,
                                 int64_t{2} * kBlocks * shape.block);
      const std::string where = "heads " + std::to_string(shape.heads) + "/" +
                                std::to_string(shape.kv_heads) + " head_dim " +
                                std::to_string(shape.head_dim) + " window " +
                                std::to_string(shape.window) + " " + plan::DType_Name(dtype);
      const std::vector<float> alone =
          RunAttentionRows(shape, cache, tables, index, q, sinks, 1, /*alone=*/true);
      for (int32_t threads : {1, 2}) {
        const std::vector<float> together =
            RunAttentionRows(shape, cache, tables, index, q, sinks, threads, /*alone=*/false);
        for (size_t i = 0; i < together.size(); ++i) {
          ASSERT_EQ(together[i], alone[i]) << where << " threads " << threads << " token "
                                           << i / width << " element " << i % width;
        }
      }
      const double scale = 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
      for (int64_t t = 0; t < tokens; ++t) {
        const int64_t first =
            shape.window > 0 ? std::max<int64_t>(0, index[t] - shape.window + 1) : 0;
        for (int32_t head = 0; head < shape.heads; ++head) {
          const int64_t kv_offset = int64_t{head / group} * shape.head_dim;
          const float* query = q.data() + t * width + int64_t{head} * shape.head_dim;
          std::vector<double> scores;
          std::vector<int64_t> slots;
          double max_score = shape.sinks ? sinks[head] : -1e300;
          for (int64_t key = first; key <= index[t]; ++key) {
            const int64_t slot =
                int64_t{tables[t][key / shape.block]} * shape.block + key % shape.block;
            double dot = 0;
            for (int32_t i = 0; i < shape.head_dim; ++i) {
              dot += double{query[i]} * cache.decoded_keys[slot * cache.stride + kv_offset + i];
            }
            double score = dot * scale;
            if (shape.softcap > 0) score = shape.softcap * std::tanh(score / shape.softcap);
            scores.push_back(score);
            slots.push_back(slot);
            max_score = std::max(max_score, score);
          }
          double total = shape.sinks ? std::exp(sinks[head] - max_score) : 0.0;
          for (double& score : scores) total += (score = std::exp(score - max_score));
          for (int32_t i = 0; i < shape.head_dim; ++i) {
            double expected = 0;
            for (size_t k = 0; k < scores.size(); ++k) {
              expected += scores[k] * cache.decoded_values[slots[k] * cache.stride + kv_offset + i];
            }
            ASSERT_NEAR(alone[t * width + int64_t{head} * shape.head_dim + i], expected / total,
                        2e-5)
                << where << " token " << t << " head " << head << " i " << i;
          }
        }
      }
    }
  }
}

// A token's matmul result must not depend on which tokens share its step: the engine batches
// sequences freely, and a sequence must give the same logits alone or batched, to the bit.
TEST(CpuKernelTest, PackedMatMulIsBatchInvariant) {
  ASSERT_TRUE(SelectCpuTargetFromEnvironment().ok());  // the tier this run is forced to
  constexpr int64_t kRows = 11, kCols = 75, kOut = 32;
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    std::vector<float> w_data(kOut * kCols);
    for (size_t i = 0; i < w_data.size(); ++i) w_data[i] = std::cos(0.61f * i);
    const std::vector<uint8_t> packed = PackPanels(::llmrt::testing::EncodeAs(dtype, w_data), kOut,
                                                   kCols, dtype == plan::F32 ? 4 : 2, kPanelRows);
    const MatrixView w{packed.data(), dtype, kOut, kCols, kPanelRows};
    std::vector<float> x(kRows * kCols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * i) * 3.0f;
    ThreadPool pool(2);
    std::vector<float> batched(kRows * kOut);
    const MatMulOutput all{batched.data(), 0, kOut};
    MatMul(pool, x.data(), kRows, nullptr, w, nullptr, &all, 1);
    for (int32_t row = 0; row < kRows; ++row) {
      std::vector<float> alone(kOut);
      const MatMulOutput one{alone.data(), 0, kOut};
      MatMul(pool, x.data(), 1, &row, w, nullptr, &one, 1);
      for (int64_t c = 0; c < kOut; ++c) {
        ASSERT_EQ(alone[c], batched[row * kOut + c]) << "dtype " << dtype << " row " << row;
      }
    }
  }
}

// F16/BF16 prefill of 64 rows or more runs on f32 copies of the panels, 1024 columns at a time
// (matmul.cc, SweepWidened): 300 rows (a 256-row chunk that is widened and a 44-row one that is
// not), K = 2500 (two whole slices and a partial one), 3 panels (a group of two and one alone)
// on 1 and 2 threads. Every row must equal its decode (one row alone, never widened) to the bit,
// and both the decoded weights' f64 reference (BF16 on the AVX512-BF16 tier, which rounds the
// activations to bf16 and does not widen: within 2^-8 of it, matmul.cc). The batch keeps off the
// AMX-BF16 path (amx_min_rows), which matmul_amx_test.cc checks, so the widened FMA kernels are
// checked on every tier.
TEST(CpuKernelTest, WidenedPrefillMatchesDecodeBitForBit) {
  ASSERT_TRUE(SelectCpuTargetFromEnvironment().ok());
  constexpr int64_t kRows = 300, kCols = 2500, kOut = 48;
  for (plan::DType dtype : {plan::F16, plan::BF16}) {
    const double tolerance = dtype == plan::BF16 && Bf16TierActive() ? 0x1p-8 : 1e-5;
    std::vector<float> w_data(kOut * kCols);
    for (size_t i = 0; i < w_data.size(); ++i) w_data[i] = std::cos(0.61f * i);
    const std::vector<uint8_t> encoded = ::llmrt::testing::EncodeAs(dtype, w_data);
    const std::vector<float> decoded = ::llmrt::testing::DecodeFrom(dtype, encoded);
    const std::vector<uint8_t> packed = PackPanels(encoded, kOut, kCols, 2, kPanelRows);
    const MatrixView w{packed.data(), dtype, kOut, kCols, kPanelRows};
    std::vector<float> x(kRows * kCols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * i) * 3.0f;
    for (int32_t threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> batched(kRows * kOut);
      const MatMulOutput all{batched.data(), 0, kOut};
      MatMul(pool, x.data(), kRows, nullptr, w, nullptr, &all, 1,
             /*amx_min_rows=*/std::numeric_limits<int64_t>::max());
      for (int32_t row = 0; row < kRows; row += 13) {
        std::vector<float> alone(kOut);
        const MatMulOutput one{alone.data(), 0, kOut};
        MatMul(pool, x.data(), 1, &row, w, nullptr, &one, 1);
        for (int64_t c = 0; c < kOut; ++c) {
          ASSERT_EQ(alone[c], batched[row * kOut + c])
              << "dtype " << dtype << " threads " << threads << " row " << row << " col " << c;
          double expected = 0, magnitude = 0;
          for (int64_t k = 0; k < kCols; ++k) {
            const double product = static_cast<double>(x[row * kCols + k]) * decoded[c * kCols + k];
            expected += product;
            magnitude += std::abs(product);
          }
          ASSERT_NEAR(batched[row * kOut + c], expected, tolerance * magnitude)
              << "dtype " << dtype << " row " << row << " col " << c;
        }
      }
    }
  }
}

// ---- Packed BF16 weights on the AVX512-BF16 tier (matmul.cc: vdpbf16ps) ----

// Applies LLMRT_CPU_TARGET as the backend does (these tests call MatMul directly) and returns
// "" when the BF16 tier is active, else why the test is skipped.
std::string Bf16TierSkipReason() {
  const absl::Status status = SelectCpuTargetFromEnvironment();
  if (!status.ok()) return status.ToString();
  if (Bf16TierActive()) return "";
  const char* selected = std::getenv("LLMRT_CPU_TARGET");
  std::string cpu = "lacks it";
  if (DetectCpuExtensions().avx512_bf16) {
    cpu = Bf16DotOutrunsFma() ? "has it"
                              : "has it, but the default target leaves it out (vdpbf16ps slower "
                                "than the FMA path here); the avx3_zen4 run of this test uses it";
  }
  return "needs AVX512-BF16 (this CPU: " + cpu + "; target " + ActiveCpuTarget() +
         (selected != nullptr ? " from LLMRT_CPU_TARGET" : "") + ")";
}

// Restores the environment's target selection when a test that selected another one ends.
class RestoreCpuTarget {
 public:
  RestoreCpuTarget() = default;
  RestoreCpuTarget(const RestoreCpuTarget&) = delete;
  RestoreCpuTarget& operator=(const RestoreCpuTarget&) = delete;
  ~RestoreCpuTarget() {
    const char* selected = std::getenv("LLMRT_CPU_TARGET");
    EXPECT_TRUE(SelectCpuTarget(selected != nullptr ? selected : "").ok());
  }
};

// The default selection takes the AVX512-BF16 matmul only where vdpbf16ps outruns the FMA
// path; forcing avx3_zen4 takes it on any CPU that has the instruction.
TEST(CpuDispatchTest, DefaultTargetUsesBf16OnlyWhereItIsTheFasterPath) {
  const RestoreCpuTarget restore;
  ASSERT_TRUE(SelectCpuTarget("best").ok());
  const bool machine_bf16 =
      DetectCpuExtensions().avx512_bf16 && (hwy::SupportedTargets() & HWY_AVX3) != 0;
  EXPECT_EQ(ActiveCpuExtensions().avx512_bf16, machine_bf16 && Bf16DotOutrunsFma())
      << ActiveCpuTarget();
  if (machine_bf16) {
    ASSERT_TRUE(SelectCpuTarget("avx3_zen4").ok());
    EXPECT_TRUE(ActiveCpuExtensions().avx512_bf16);
    EXPECT_EQ(ActiveCpuTarget(), "AVX3_ZEN4");
  } else {
    EXPECT_FALSE(SelectCpuTarget("avx3_zen4").ok());
  }
}

// The default selection takes the AMX tiles wherever the CPU and the OS allow them (with
// AVX512-VNNI, whose GEMVs' bits they reproduce); forcing avx3_amx elsewhere is refused by name.
TEST(CpuDispatchTest, DefaultTargetUsesAmxWhereTheMachineHasIt) {
  const RestoreCpuTarget restore;
  ASSERT_TRUE(SelectCpuTarget("best").ok());
  const CpuExtensions detected = DetectCpuExtensions();
  const bool machine_amx =
      detected.amx && detected.avx512_vnni && (hwy::SupportedTargets() & HWY_AVX3) != 0;
  EXPECT_EQ(ActiveCpuExtensions().amx, machine_amx) << ActiveCpuTarget();
  const absl::Status forced = SelectCpuTarget("avx3_amx");
  if (machine_amx) {
    ASSERT_TRUE(forced.ok()) << forced;
    EXPECT_EQ(ActiveCpuTarget(), "AVX3_AMX");
    EXPECT_TRUE(ActiveCpuExtensions().avx512_vnni);
  } else if (HWY_ARCH_X86) {
    EXPECT_EQ(forced.code(), absl::StatusCode::kFailedPrecondition) << forced;
    EXPECT_NE(std::string(forced.message()).find("AMX"), std::string::npos) << forced;
  } else {
    EXPECT_EQ(forced.code(), absl::StatusCode::kInvalidArgument) << forced;  // an x86 tier
  }
  // avx3_vnni stays the VNNI kernels alone, AMX or not.
  if (SelectCpuTarget("avx3_vnni").ok()) EXPECT_FALSE(ActiveCpuExtensions().amx);
}

// Weights of mixed scale (|w| up to 2^-5 .. 2, both signs) as ROW_PANELS of BF16, and what they
// are exactly.
struct Bf16Panels {
  std::vector<uint8_t> packed;
  std::vector<float> exact;  // row-major [rows, cols]
  MatrixView view;
};

Bf16Panels MakeBf16Panels(int64_t rows, int64_t cols) {
  std::vector<float> data(rows * cols);
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] =
        std::cos(0.61f * static_cast<float>(i)) * std::ldexp(1.0f, static_cast<int>(i % 7) - 5);
  }
  Bf16Panels panels;
  const std::vector<uint8_t> encoded = ::llmrt::testing::EncodeAs(plan::BF16, data);
  panels.exact = ::llmrt::testing::DecodeFrom(plan::BF16, encoded);
  panels.packed = PackPanels(encoded, rows, cols, 2, kPanelRows);
  panels.view = MatrixView{panels.packed.data(), plan::BF16, rows, cols, kPanelRows};
  return panels;
}

// Activations of magnitude up to 3 that bf16 does not hold exactly, and every 5th an exact tie
// between two bf16 values (+-(1 + (2j + 1) 2^-8)), where round-to-nearest-even decides.
std::vector<float> MakeBf16TestActivations(int64_t rows, int64_t cols) {
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = i % 5 == 0 ? (i % 2 == 0 ? 1.0f : -1.0f) *
                            (1.0f + static_cast<float>(2 * (i % 64) + 1) * std::ldexp(1.0f, -8))
                      : std::sin(0.3f * static_cast<float>(i) + 0.2f) * 3.0f;
  }
  return x;
}

// The tier's arithmetic against a double-precision reference of the same inputs: bf16 weights
// and bf16-rounded (round to nearest even) activations. Each product of two bf16 values (8-bit
// significands) is exact in f32; vdpbf16ps adds two per lane per instruction, so an output is K
// exact terms summed with at most K f32 roundings (an odd K's last pair adds an exact 0), each
// at most u = 2^-24 of a partial sum bounded by sum|w x|: |error| <= gamma_K sum|w x| with
// gamma_K = K u / (1 - K u). We allow K 2^-23 sum|w x| (twice that), plus K 2^-126 for the
// flushing of denormal products and sums (DAZ/FTZ; none occur with these values). K = 1 has no
// rounding at all, so it is checked to the bit: w times the rounded activation, ties to even.
TEST(CpuKernelTest, Bf16TierMatchesRoundedActivationReference) {
  if (const std::string reason = Bf16TierSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  for (int64_t k : {1, 3, 17, 64, 1000, 2048}) {
    for (int64_t n : {16, 48}) {
      const Bf16Panels w = MakeBf16Panels(n, k);
      for (int64_t m : {1, 3, 8, 17, 64}) {
        const std::vector<float> x = MakeBf16TestActivations(m, k);
        for (int32_t threads : {1, 2}) {
          ThreadPool pool(threads);
          std::vector<float> out(m * n);
          const MatMulOutput output{out.data(), 0, n};
          MatMul(pool, x.data(), m, nullptr, w.view, nullptr, &output, 1);
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              double expected = 0, magnitude = 0;
              for (int64_t i = 0; i < k; ++i) {
                const double term = double{w.exact[c * k + i]} * RoundToBf16(x[r * k + i]);
                expected += term;
                magnitude += std::abs(term);
              }
              const double tolerance =
                  static_cast<double>(k) * (std::ldexp(magnitude, -23) + std::ldexp(1.0, -126));
              ASSERT_NEAR(out[r * n + c], expected, tolerance)
                  << "k " << k << " n " << n << " m " << m << " threads " << threads << " row " << r
                  << " col " << c;
              if (k == 1) ASSERT_EQ(out[r * n + c], static_cast<float>(expected));
            }
          }
        }
      }
    }
  }
}

// The tier against the f32-activation FMA path (LLMRT_CPU_TARGET=avx3 on this machine): only
// the rounding of the activations separates them. |bf16(x) - x| <= 2^-8 |x|, so the rounded
// terms move the exact sum by at most 2^-8 sum|w x|; each path's own accumulation error is at
// most gamma_K sum|w x| (gamma_K ~ K 2^-24; the tier's taken over the rounded terms, at most
// (1 + 2^-8) sum|w x|). Allowed: 2^-8 sum|w x| + 2 K 2^-23 sum|w x|, twice the accumulation
// part. And rounding must show somewhere: the two paths may not agree everywhere.
TEST(CpuKernelTest, Bf16TierStaysNearF32ActivationPath) {
  if (const std::string reason = Bf16TierSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  const RestoreCpuTarget restore;
  for (int64_t k : {3, 64, 2048}) {
    const int64_t n = 48, m = 17;
    const Bf16Panels w = MakeBf16Panels(n, k);
    const std::vector<float> x = MakeBf16TestActivations(m, k);
    ThreadPool pool(2);
    std::vector<float> bf16_tier(m * n), f32_path(m * n);
    const MatMulOutput tier_output{bf16_tier.data(), 0, n};
    const MatMulOutput f32_output{f32_path.data(), 0, n};
    ASSERT_TRUE(SelectCpuTarget("avx3_zen4").ok());
    MatMul(pool, x.data(), m, nullptr, w.view, nullptr, &tier_output, 1);
    ASSERT_TRUE(SelectCpuTarget("avx3").ok());
    MatMul(pool, x.data(), m, nullptr, w.view, nullptr, &f32_output, 1);
    int64_t differing = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double magnitude = 0;
        for (int64_t i = 0; i < k; ++i)
          magnitude += std::abs(double{w.exact[c * k + i]} * x[r * k + i]);
        const double tolerance =
            std::ldexp(magnitude, -8) + 2.0 * static_cast<double>(k) * std::ldexp(magnitude, -23);
        ASSERT_NEAR(bf16_tier[r * n + c], f32_path[r * n + c], tolerance)
            << "k " << k << " row " << r << " col " << c;
        differing += bf16_tier[r * n + c] != f32_path[r * n + c];
      }
    }
    EXPECT_GT(differing, 0) << "k " << k << ": the BF16 tier did not round the activations";
  }
}

// Batch invariance on the tier: a token's outputs are the same bits whether it runs alone
// (decode loop order), among a few (up to one micro-kernel tile) or among many (prefill loop
// order, activations rounded on the pool), gathered through input_rows or not, on 1 or 2
// threads.
TEST(CpuKernelTest, Bf16TierIsBatchInvariant) {
  if (const std::string reason = Bf16TierSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
  constexpr int64_t kMaxRows = 64;
  for (int64_t k : {75, 2048}) {
    const int64_t n = 48;
    const Bf16Panels w = MakeBf16Panels(n, k);
    const std::vector<float> x = MakeBf16TestActivations(kMaxRows, k);
    for (int32_t threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> all(kMaxRows * n);
      const MatMulOutput all_output{all.data(), 0, n};
      MatMul(pool, x.data(), kMaxRows, nullptr, w.view, nullptr, &all_output, 1);
      for (int64_t m : {1, 3, 8, 17}) {
        std::vector<float> some(m * n);
        const MatMulOutput some_output{some.data(), 0, n};
        MatMul(pool, x.data(), m, nullptr, w.view, nullptr, &some_output, 1);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            ASSERT_EQ(some[r * n + c], all[r * n + c])
                << "k " << k << " threads " << threads << " m " << m << " row " << r;
          }
        }
      }
      // Rows gathered in reverse, and each row alone.
      std::vector<int32_t> reversed(17);
      for (int32_t i = 0; i < 17; ++i) reversed[i] = 16 - i;
      std::vector<float> gathered(17 * n);
      const MatMulOutput gathered_output{gathered.data(), 0, n};
      MatMul(pool, x.data(), 17, reversed.data(), w.view, nullptr, &gathered_output, 1);
      for (int32_t row = 0; row < kMaxRows; ++row) {
        std::vector<float> alone(n);
        const MatMulOutput alone_output{alone.data(), 0, n};
        MatMul(pool, x.data(), 1, &row, w.view, nullptr, &alone_output, 1);
        for (int64_t c = 0; c < n; ++c) {
          ASSERT_EQ(alone[c], all[row * n + c])
              << "k " << k << " threads " << threads << " row " << row;
          if (row < 17) ASSERT_EQ(gathered[(16 - row) * n + c], alone[c]) << "row " << row;
        }
      }
    }
  }
}

TEST(CpuBackendOpTest, ElementwiseAndNorms) {
  const int rows = 4, width = 21;
  const auto a = RandomRows(rows, width, 2);
  const auto b = RandomRows(rows, width, 5);
  std::vector<float> gamma(width);
  for (int i = 0; i < width; ++i) gamma[i] = 0.5f + 0.05f * i;
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  auto rms = [&](const std::vector<double>& row, int i) {
    double squares = 0;
    for (double v : row) squares += v * v;
    return row[i] / std::sqrt(squares / width + 1e-6) * gamma[i];
  };
  for (plan::OpKind kind : {plan::SILU, plan::MUL, plan::ADD, plan::SILU_MUL, plan::RMS_NORM,
                            plan::FUSED_ADD_RMS_NORM}) {
    for (int which = 0; which < (kind == plan::FUSED_ADD_RMS_NORM ? 2 : 1); ++which) {
      OpHarness harness;
      const int32_t in_a = harness.Input(a);
      const int32_t in_b = harness.Input(b);
      const int32_t out = harness.Activation(width);
      const int32_t out2 = harness.Activation(width);
      std::vector<int32_t> inputs = {in_a, in_b};
      std::vector<int32_t> outputs = {out};
      std::vector<int32_t> weights;
      if (kind == plan::SILU || kind == plan::RMS_NORM) inputs = {in_a};
      if (kind == plan::FUSED_ADD_RMS_NORM) outputs = {out, out2};
      if (kind == plan::RMS_NORM || kind == plan::FUSED_ADD_RMS_NORM) {
        weights = {harness.Tensor(plan::F32, {width}, gamma)};
      }
      plan::Op* op = harness.AddOp(kind, inputs, outputs, weights);
      if (!weights.empty()) op->mutable_norm()->set_eps(1e-6);
      const std::vector<float> result = harness.Run(outputs[which], {0, 1, 2, 3});
      for (int r = 0; r < rows; ++r) {
        std::vector<double> sum(width);
        for (int i = 0; i < width; ++i) sum[i] = double{a[r][i]} + b[r][i];
        std::vector<double> a_row(a[r].begin(), a[r].end());
        for (int i = 0; i < width; ++i) {
          double expected = 0;
          switch (kind) {
            case plan::SILU:
              expected = silu(a[r][i]);
              break;
            case plan::MUL:
              expected = double{a[r][i]} * b[r][i];
              break;
            case plan::ADD:
              expected = sum[i];
              break;
            case plan::SILU_MUL:
              expected = silu(a[r][i]) * b[r][i];
              break;
            case plan::RMS_NORM:
              expected = rms(a_row, i);
              break;
            default:
              expected = which == 0 ? sum[i] : rms(sum, i);
              break;
          }
          EXPECT_NEAR(result[r * width + i], expected, 1e-5)
              << plan::OpKind_Name(kind) << " output " << which << " row " << r << " i " << i;
        }
      }
    }
  }
}

TEST(CpuBackendTest, RejectsMalformedPrograms) {
  auto expect_error = [](TinyLlama model, const std::string& needle) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        CreateCpuBackend(model.meta, model.Lookup(), {16, 1});
    ASSERT_FALSE(backend.ok()) << needle;
    EXPECT_NE(backend.status().message().find(needle), std::string::npos) << backend.status();
  };
  {
    TinyLlama model = BuildTinyLlama({});
    model.meta.mutable_tensors(1)->set_shape(0, 7);  // layer 0 input_layernorm: wrong size
    expect_error(std::move(model), "input_layernorm.weight");
  }
  {
    TinyLlama model = BuildTinyLlama({});
    model.meta.mutable_program()->mutable_ops(3)->set_inputs(0, 999);
    expect_error(std::move(model), "program op 3");
  }
  {
    TinyLlama model = BuildTinyLlama({});
    model.meta.mutable_program()->mutable_ops()->RemoveLast();
    expect_error(std::move(model), "LOGITS");
  }
  {
    TinyLlama model = BuildTinyLlama({});
    model.meta.mutable_program()->set_arena_bytes_per_token(16);
    expect_error(std::move(model), "arena");
  }
  {
    TinyLlama model = BuildTinyLlama({});
    model.blobs[0].clear();  // embedding table missing
    expect_error(std::move(model), "model.embed_tokens.weight");
  }
  {
    TinyLlama model = BuildTinyLlama({});
    for (plan::Op& op : *model.meta.mutable_program()->mutable_ops()) {
      if (op.kind() == plan::ATTENTION) op.mutable_attention()->set_num_kv_heads(3);
    }
    expect_error(std::move(model), "num_kv_heads");
  }
}

TEST(CpuBackendTest, RejectsMalformedBatchesWithoutCrashing) {
  TinyLlama model = BuildTinyLlama({});
  std::unique_ptr<Backend> backend = MakeBackend(model, 2, 4, 8);
  const std::vector<int32_t> blocks = {1};
  auto make = [&] {
    StepBatch batch;
    batch.token_ids = {3, 4};
    batch.positions = {0, 1};
    batch.slot_mapping = {4, 5};
    batch.sequences.push_back({0, 2, 2, blocks.data(), 1});
    batch.logit_rows = {1};
    return batch;
  };
  std::vector<float> logits(8 * 40);
  ASSERT_TRUE(backend->RunStep(make(), logits.data()).ok());
  StepBatch bad = make();
  bad.token_ids[0] = 40;
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());
  bad = make();
  bad.slot_mapping[1] = 8;
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());
  bad = make();
  bad.sequences[0].context_length = 5;  // needs 2 blocks, has 1
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());
  bad = make();
  bad.logit_rows = {2};
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());
  bad = make();
  bad.sequences[0].num_tokens = 1;
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());
  bad = make();
  for (int i = 0; i < 8; ++i) {
    bad.token_ids.push_back(1);
    bad.positions.push_back(2 + i);
    bad.slot_mapping.push_back(0);
  }
  EXPECT_FALSE(backend->RunStep(bad, logits.data()).ok());  // 10 tokens > max 8
}

// Supports sees each op's shapes, dtypes and layouts, not only its kind.
TEST(CpuBackendTest, SupportsAnswersPerOpWithTheReason) {
  ::llmrt::testing::TinyLlama model = ::llmrt::testing::BuildTinyLlama({});
  const plan::Program& program = model.meta.program();
  for (int i = 0; i < program.ops_size(); ++i) {
    EXPECT_TRUE(CpuSupports(model.meta, i).ok()) << i << ": " << CpuSupports(model.meta, i);
  }
  auto backend = CreateCpuBackend(model.meta, model.Lookup(), {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  int matmul = 0;
  while (program.ops(matmul).kind() != plan::MATMUL) ++matmul;
  EXPECT_TRUE((*backend)->Supports(model.meta, matmul).ok());
  // Panels of 8 rows are a valid plan (plan.proto) that the cpu kernels do not read.
  plan::PlanMeta panels = model.meta;
  plan::Tensor* weight = panels.mutable_tensors(program.ops(matmul).weights(0));
  ASSERT_EQ(weight->shape(0) % 8, 0);
  weight->set_layout(plan::Tensor::ROW_PANELS);
  weight->set_panel_rows(8);
  const absl::Status refused = (*backend)->Supports(panels, matmul);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnimplemented) << refused;
  EXPECT_NE(refused.message().find("panel_rows 8"), std::string::npos) << refused;
  EXPECT_EQ(CpuSupports(model.meta, program.ops_size()).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llmrt::cpu
