//===- EmulationTest.cpp - Generated CUDA kernels vs the CPU backend ------===//
//
// Every kernel codegen/cuda emits for a model runs under emulation (the same source NVRTC
// compiles, built for the host) through the CUDA backend's step program, and must give the
// CPU backend's logits: for every transformers fixture in tests/fixtures, with f16 and bf16
// weights, over prefill steps (MMA GEMM), decode steps (GEMV), paged KV across non-contiguous
// blocks, and two sequences sharing a step. stories260K must tell its documented story.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "codegen/cuda/emulation/StepScript.h"
#include "compiler/pipeline/compile.h"
#include "nlohmann/json.hpp"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

struct Backends {
  std::unique_ptr<plan::Plan> plan;
  CudaEmission emission;
  std::unique_ptr<llmrt::Backend> cpu;
  std::unique_ptr<llmrt::cuda::KernelStepBackend> emulated;
  const EmulatedDevice *device = nullptr; // owned by `emulated`

  // Whether a kernel whose entry name starts with llmc_<prefix> was launched.
  bool launched(const std::string &prefix) const {
    for (const std::string &name : device->launches())
      if (name.rfind("llmc_" + prefix, 0) == 0)
        return true;
    return false;
  }
};

std::string compilePlan(const std::string &model, plan::DType dtype,
                        std::optional<QuantizeOptions> quantize = std::nullopt) {
  CompileOptions options;
  options.quantize = quantize;
  options.model_dir = std::string(LLMC_SOURCE_DIR) + "/" + model;
  std::string name = model;
  for (char &c : name)
    if (c == '/')
      c = '_';
  options.output_path = ::testing::TempDir() + "/" + name + "_" + std::to_string(dtype) +
                        (quantize ? "_q" + std::to_string(quantize->bits) : "") + ".plan";
  options.weight_dtype = dtype;
  // A bf16 KV cache keeps 8 bits: CPU and GPU sum k and v in different orders before rounding,
  // so an element near a rounding boundary lands one bf16 ulp apart and logits move ~4e-3,
  // beyond the 1e-3 kernel tolerance. Compare the kernels over an f32 cache here; KvDtypeTest
  // checks reduced-precision caches against a tolerance derived from their format.
  if (dtype == plan::BF16)
    options.kv_cache_dtype = plan::F32;
  absl::Status status = Compile(options, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  return options.output_path;
}

// Emits `meta`'s kernels, builds them under emulation and creates both backends.
bool createBackends(Backends &result, const plan::PlanMeta &meta, const llmrt::BlobLookup &blobs,
                    int32_t maxTokens) {
  auto emission = emitCuda(meta);
  EXPECT_TRUE(emission.ok()) << emission.status();
  if (!emission.ok())
    return false;
  result.emission = std::move(*emission);
  auto module = EmulatedModule::build(result.emission.moduleSource(), LLMC_EMULATION_CACHE_DIR);
  EXPECT_TRUE(module.ok()) << module.status();
  if (!module.ok())
    return false;
  const plan::KernelTable table = result.emission.kernelTable("cuda:emulated");
  llmrt::BackendOptions options;
  options.max_tokens_per_step = maxTokens;
  auto cpu = llmrt::cpu::CreateCpuBackend(meta, blobs, options);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  auto device = std::make_unique<EmulatedDevice>(*module, table);
  result.device = device.get();
  auto emulated = llmrt::cuda::CreateKernelBackend(meta, table, blobs, options, std::move(device));
  EXPECT_TRUE(emulated.ok()) << emulated.status();
  if (!cpu.ok() || !emulated.ok())
    return false;
  result.cpu = std::move(*cpu);
  result.emulated = std::move(*emulated);
  return true;
}

std::unique_ptr<Backends> makeBackends(const std::string &model, plan::DType dtype,
                                       int32_t maxTokens = 64,
                                       std::optional<QuantizeOptions> quantize = std::nullopt) {
  auto result = std::make_unique<Backends>();
  const std::string path = compilePlan(model, dtype, quantize);
  auto opened = plan::Plan::Open(path, plan::PlanOpenOptions());
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok())
    return nullptr;
  result->plan = std::move(*opened);
  const plan::Plan *planPointer = result->plan.get();
  llmrt::BlobLookup blobs = [planPointer](int index) { return planPointer->blob(index); };
  if (!createBackends(*result, result->plan->meta(), blobs, maxTokens))
    return nullptr;
  return result;
}

struct FixtureCase {
  std::string model;
  plan::DType dtype;
};

// Readable parameter names in ctest's list instead of gtest's byte dump.
void PrintTo(const FixtureCase &param, std::ostream *out) {
  *out << param.model << " dtype " << static_cast<int>(param.dtype);
}

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureTest, EveryKernelMatchesTheCpuBackend) {
  const FixtureCase &param = GetParam();
  auto backends = makeBackends(param.model, param.dtype);
  ASSERT_NE(backends, nullptr);
  runStepScript(*backends->cpu, *backends->emulated);
  // The script's prefill steps ran the tiled MMA attention and its decode steps split-K; rope
  // ran inside them (the ROPE ops launch nothing); the logits prefilter ran after the GEMV.
  EXPECT_TRUE(backends->launched("attention_prefill_"));
  EXPECT_TRUE(backends->launched("attention_combine_"));
  EXPECT_FALSE(backends->launched("rope_"));
  EXPECT_TRUE(backends->launched("logits_top"));
}

// The unfused program (separate SILU, MUL, ADD, RMS_NORM ops) and odd shapes (head_dim 6,
// widths 24 and 36) that no fixture has.
struct TinyCase {
  bool fused;
  bool qkvBias;
  int64_t slidingWindow;
  plan::DType dtype;
};

void PrintTo(const TinyCase &param, std::ostream *out) {
  *out << (param.fused ? "fused" : "unfused") << (param.qkvBias ? " bias" : "") << " window "
       << param.slidingWindow << " dtype " << static_cast<int>(param.dtype);
}

class TinyLlamaTest : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TinyLlamaTest, EveryKernelMatchesTheCpuBackend) {
  llmrt::testing::TinyLlamaOptions options;
  options.fused = GetParam().fused;
  options.qkv_bias = GetParam().qkvBias;
  options.sliding_window = GetParam().slidingWindow;
  options.weight_dtype = GetParam().dtype;
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  Backends backends;
  ASSERT_TRUE(createBackends(backends, model.meta, model.Lookup(), 32));
  runStepScript(*backends.cpu, *backends.emulated);
}

INSTANTIATE_TEST_SUITE_P(
    Tiny, TinyLlamaTest,
    ::testing::Values(TinyCase{true, false, 0, plan::F16}, TinyCase{false, false, 0, plan::BF16},
                      TinyCase{false, true, 5, plan::F32}, TinyCase{true, true, 3, plan::BF16}),
    [](const ::testing::TestParamInfo<TinyCase> &info) {
      return absl::StrCat(info.param.fused ? "fused" : "unfused", info.param.qkvBias ? "_bias" : "",
                          "_window", info.param.slidingWindow, "_",
                          static_cast<int>(info.param.dtype));
    });

std::vector<FixtureCase> fixtureCases() {
  std::vector<FixtureCase> cases;
  for (const char *fixture : {"llama_mha", "llama_gqa_tied", "llama3_rope", "llama_rope_linear",
                              "llama_sharded_bf16", "mistral_sliding", "qwen2_bias"}) {
    for (plan::DType dtype : {plan::F16, plan::BF16})
      cases.push_back({std::string("tests/fixtures/") + fixture, dtype});
  }
  cases.push_back({"tests/fixtures/llama_gqa_tied", plan::F32});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest, ::testing::ValuesIn(fixtureCases()),
                         [](const ::testing::TestParamInfo<FixtureCase> &info) {
                           std::string name =
                               info.param.model.substr(info.param.model.rfind('/') + 1);
                           name += info.param.dtype == plan::F16    ? "_f16"
                                   : info.param.dtype == plan::BF16 ? "_bf16"
                                                                    : "_f32";
                           return name;
                         });

// Against transformers itself (no CPU backend in between): each fixture's f32 plan runs its
// recorded prompt as one prefill step (tiled prefill attention) and the greedy continuation as
// decode steps (split-K); every logit is within 1e-4 of transformers' float32 forward
// (reference_logits.bin, the bar tests/e2e sets for the CPU backend) and the greedy ids match.
class TransformersReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TransformersReferenceTest, LogitsAndGreedyIdsMatchTransformers) {
  const std::string dir = std::string(LLMC_SOURCE_DIR) + "/tests/fixtures/" + GetParam();
  std::ifstream jsonFile(dir + "/reference.json");
  const nlohmann::json json = nlohmann::json::parse(jsonFile);
  const auto prompt = json.at("prompt_ids").get<std::vector<int32_t>>();
  const auto greedy = json.at("greedy_ids").get<std::vector<int32_t>>();
  const int64_t vocab = json.at("vocab_size").get<int64_t>();
  std::ifstream logitsFile(dir + "/reference_logits.bin", std::ios::binary);
  std::vector<float> reference((prompt.size() + greedy.size() - 1) * vocab);
  logitsFile.read(reinterpret_cast<char *>(reference.data()), reference.size() * sizeof(float));
  ASSERT_TRUE(logitsFile) << "reference_logits.bin of " << GetParam();

  auto backends = makeBackends("tests/fixtures/" + GetParam(), plan::F32);
  ASSERT_NE(backends, nullptr);
  llmrt::Backend &backend = *backends->emulated;
  ASSERT_EQ(backend.vocab_size(), vocab);
  ASSERT_TRUE(backend.AllocateKvCache(16, 4).ok());
  Sequence sequence({9, 3, 14, 0, 6, 11, 2, 12, 5});
  int64_t position = 0;
  std::vector<int32_t> tokens = prompt;
  for (size_t step = 0; step < greedy.size(); ++step) {
    llmrt::StepBatch batch;
    sequence.append(batch, tokens, 4, /*allLogits=*/true);
    std::vector<float> logits(tokens.size() * vocab);
    ASSERT_TRUE(backend.RunStep(batch, logits.data()).ok());
    for (size_t row = 0; row < tokens.size(); ++row, ++position) {
      const float *ours = logits.data() + row * vocab;
      const float *theirs = reference.data() + position * vocab;
      float worst = 0;
      for (int64_t i = 0; i < vocab; ++i)
        worst = std::max(worst, std::fabs(ours[i] - theirs[i]));
      EXPECT_LE(worst, 1e-4f) << "position " << position;
    }
    const float *last = logits.data() + (tokens.size() - 1) * vocab;
    EXPECT_EQ(std::max_element(last, last + vocab) - last, greedy[step]) << "step " << step;
    tokens = {greedy[step]};
  }
  EXPECT_TRUE(backends->launched("attention_prefill_"));
  EXPECT_TRUE(backends->launched("attention_combine_"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TransformersReferenceTest,
                         ::testing::Values("llama_mha", "llama_gqa_tied", "llama3_rope",
                                           "llama_rope_linear", "llama_sharded_bf16",
                                           "mistral_sliding", "qwen2_bias"));

// The quantized plan with every I8 / I4 matrix replaced by its f32 values, dequantized here
// from plan.proto's Quantization comment (w = (code - zero) * scale per group, I4 nibble runs,
// input permutation folded into the column order): the CPU backend runs it in exact f32, the
// reference for kernels that compute with f32 activations.
struct DequantizedPlan {
  plan::PlanMeta meta;
  std::map<int, std::vector<float>> replaced; // tensor -> f32 values
};

DequantizedPlan dequantize(const plan::PlanMeta &meta, const llmrt::BlobLookup &blobs) {
  DequantizedPlan result{meta, {}};
  for (int t = 0; t < meta.tensors_size(); ++t) {
    const plan::Tensor &tensor = meta.tensors(t);
    if (tensor.dtype() != plan::I8 && tensor.dtype() != plan::I4)
      continue;
    const plan::Quantization &q = tensor.quantization();
    const int64_t rows = tensor.shape(0), cols = tensor.shape(1), group = q.group_size();
    const uint8_t *codes = blobs(t);
    const uint16_t *scales = reinterpret_cast<const uint16_t *>(blobs(q.scales()));
    const uint8_t *zeros = q.has_zero_points() ? blobs(q.zero_points()) : nullptr;
    const int32_t *permutation =
        q.has_input_permutation() ? reinterpret_cast<const int32_t *>(blobs(q.input_permutation()))
                                  : nullptr;
    std::vector<float> values(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = r * (cols / group) + c / group;
        int code;
        if (tensor.dtype() == plan::I8) {
          code = static_cast<int8_t>(codes[r * cols + c]);
        } else {
          const uint8_t byte = codes[r * cols / 2 + (c / 32) * 16 + c % 16];
          code = (c % 32 < 16 ? byte & 15 : byte >> 4) - (zeros ? zeros[g] : 8);
        }
        values[r * cols + (permutation ? permutation[c] : c)] =
            static_cast<float>(code * static_cast<double>(llmrt::plan::F16ToF32(scales[g])));
      }
    plan::Tensor *out = result.meta.mutable_tensors(t);
    out->set_dtype(plan::F32);
    out->clear_quantization();
    out->set_layout(plan::Tensor::ROW_MAJOR);
    out->set_size_bytes(values.size() * 4);
    result.replaced[t] = std::move(values);
  }
  return result;
}

// Quantized stories260K (llmc --quant): the plan's I8 / I4 matmuls run the quantized GEMV
// (decode) and GEMM (prefill) under emulation, through the whole step script, against the CPU
// backend on the same plan dequantized to f32 by the contract (the CPU backend's own quantized
// path rounds activations to int8, so it is not an exact reference: its logits are printed).
struct QuantCaseStories {
  int bits;
  bool asymmetric;
};

class QuantizedStoriesTest : public ::testing::TestWithParam<QuantCaseStories> {};

TEST_P(QuantizedStoriesTest, KernelsMatchTheDequantizedPlan) {
  QuantizeOptions quantize;
  quantize.bits = GetParam().bits;
  quantize.asymmetric = GetParam().asymmetric;
  auto backends = makeBackends("tests/data/stories260K", plan::F32, 64, quantize);
  ASSERT_NE(backends, nullptr);
  const plan::Plan *quantizedPlan = backends->plan.get();
  llmrt::BlobLookup blobs = [quantizedPlan](int index) { return quantizedPlan->blob(index); };
  DequantizedPlan reference = dequantize(quantizedPlan->meta(), blobs);
  ASSERT_FALSE(reference.replaced.empty()) << "the plan has no quantized matrix";
  llmrt::BlobLookup referenceBlobs = [&](int index) -> const uint8_t * {
    auto it = reference.replaced.find(index);
    return it != reference.replaced.end() ? reinterpret_cast<const uint8_t *>(it->second.data())
                                          : quantizedPlan->blob(index);
  };
  llmrt::BackendOptions options;
  options.max_tokens_per_step = 64;
  auto exact = llmrt::cpu::CreateCpuBackend(reference.meta, referenceBlobs, options);
  ASSERT_TRUE(exact.ok()) << exact.status();
  runStepScript(**exact, *backends->emulated);
  EXPECT_TRUE(backends->launched(GetParam().bits == 8 ? "gemv_64x128_i8" : "gemv_64x128_i4"));
  EXPECT_TRUE(
      backends->launched(GetParam().bits == 8 ? "gemm_mma_64x128_i8" : "gemm_mma_64x128_i4"));
}

INSTANTIATE_TEST_SUITE_P(Quant, QuantizedStoriesTest,
                         ::testing::Values(QuantCaseStories{8, false}, QuantCaseStories{4, true}),
                         [](const ::testing::TestParamInfo<QuantCaseStories> &info) {
                           return absl::StrCat("int", info.param.bits,
                                               info.param.asymmetric ? "_asymmetric" : "");
                         });

// stories260K under emulation: greedy decoding gives the CPU backend's tokens, which for the
// f32 plan are the README's documented story.
class StoriesTest : public ::testing::TestWithParam<plan::DType> {};

TEST_P(StoriesTest, GreedyDecodeGivesTheCpuBackendsTokens) {
  auto backends = makeBackends("tests/data/stories260K", GetParam());
  ASSERT_NE(backends, nullptr);
  constexpr int32_t kBlockSize = 16;
  ASSERT_TRUE(backends->cpu->AllocateKvCache(4, kBlockSize).ok());
  ASSERT_TRUE(backends->emulated->AllocateKvCache(4, kBlockSize).ok());
  const int64_t vocab = backends->cpu->vocab_size();
  Sequence cpuSequence({2, 0, 3, 1});
  Sequence emulatedSequence({2, 0, 3, 1});
  std::vector<int32_t> cpuTokens = {1, 403, 407, 261, 378};
  std::vector<int32_t> emulatedTokens = cpuTokens;
  std::vector<int32_t> cpuNext = cpuTokens, emulatedNext = cpuTokens;
  std::vector<float> logits(vocab);
  auto greedy = [&](llmrt::Backend &backend, Sequence &sequence,
                    const std::vector<int32_t> &tokens) {
    llmrt::StepBatch batch;
    sequence.append(batch, tokens, kBlockSize, false);
    absl::Status status = backend.RunStep(batch, logits.data());
    EXPECT_TRUE(status.ok()) << status;
    int32_t best = 0;
    for (int32_t token = 1; token < vocab; ++token)
      if (logits[token] > logits[best])
        best = token;
    return best;
  };
  // The emulated side samples from the device's top-k prefilter only, as an engine would:
  // candidate 0 is the greedy token.
  const int32_t topK = backends->emulated->top_k();
  ASSERT_EQ(topK, std::min<int64_t>(llmrt::cuda::kLogitsTopK, vocab));
  std::vector<float> topValues(topK);
  std::vector<int32_t> topIds(topK);
  auto greedyTopK = [&](Sequence &sequence, const std::vector<int32_t> &tokens) {
    llmrt::StepBatch batch;
    sequence.append(batch, tokens, kBlockSize, false);
    absl::Status status = backends->emulated->RunStepTopK(batch, topValues.data(), topIds.data());
    EXPECT_TRUE(status.ok()) << status;
    return topIds[0];
  };
  constexpr int kGenerated = 40;
  std::vector<int32_t> cpuOut, emulatedOut;
  for (int i = 0; i < kGenerated; ++i) {
    cpuOut.push_back(greedy(*backends->cpu, cpuSequence, cpuNext));
    emulatedOut.push_back(greedyTopK(emulatedSequence, emulatedNext));
    cpuNext = {cpuOut.back()};
    emulatedNext = {emulatedOut.back()};
  }
  EXPECT_EQ(emulatedOut, cpuOut);
  if (GetParam() == plan::F32) {
    const std::vector<int32_t> documented = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                             426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
                                             411, 322, 265, 282, 295, 433, 426, 385, 328, 432,
                                             358, 394, 261, 370, 432, 352, 266, 268, 388, 426};
    EXPECT_EQ(emulatedOut, documented);
  }
}

// The logits prefilter returns exactly the top-k of the logits the same step produces: every
// row of a 13-token prefill and of a decode step, ids and values, in the documented order.
TEST(LogitsTopKTest, CandidatesAreTheTopOfTheRow) {
  auto backends = makeBackends("tests/fixtures/llama_gqa_tied", plan::F16);
  ASSERT_NE(backends, nullptr);
  llmrt::cuda::KernelStepBackend &backend = *backends->emulated;
  ASSERT_TRUE(backend.AllocateKvCache(8, 4).ok());
  const int64_t vocab = backend.vocab_size();
  const int32_t topK = backend.top_k();
  ASSERT_EQ(topK, std::min<int64_t>(llmrt::cuda::kLogitsTopK, vocab));
  std::mt19937 random(3);
  Sequence sequence({5, 2, 7, 0, 1});
  for (int tokens : {13, 1}) {
    llmrt::StepBatch batch;
    sequence.append(batch, randomTokens(random, tokens, vocab), 4, /*allLogits=*/true);
    const size_t rows = batch.logit_rows.size();
    std::vector<float> logits(rows * vocab);
    ASSERT_TRUE(backend.RunStep(batch, logits.data()).ok());
    // The same batch again rewrites the same K/V and gives the same logits.
    std::vector<float> values(rows * topK);
    std::vector<int32_t> ids(rows * topK);
    ASSERT_TRUE(backend.RunStepTopK(batch, values.data(), ids.data()).ok());
    for (size_t row = 0; row < rows; ++row) {
      std::vector<int32_t> order(vocab);
      for (int32_t i = 0; i < vocab; ++i)
        order[i] = i;
      const float *values_of_row = logits.data() + row * vocab;
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return values_of_row[a] > values_of_row[b]; });
      for (int32_t j = 0; j < topK; ++j) {
        ASSERT_EQ(ids[row * topK + j], order[j]) << "row " << row << " rank " << j;
        ASSERT_EQ(values[row * topK + j], values_of_row[order[j]]) << "row " << row;
      }
    }
  }
}

// A 16-bit KV cache (KvCacheSpec.dtype F16 / BF16): the kernels store K and V rounded to
// nearest even in half the bytes. The bound allows for a CPU reference that keeps an f32 cache
// (relative 2^-11 / 2^-8 differences in K and V); a kernel that read the cache with the wrong
// element type or misplaced a slot misses it by orders of magnitude.
class KvDtypeTest : public ::testing::TestWithParam<plan::DType> {};

TEST_P(KvDtypeTest, SixteenBitCacheStaysCloseToTheCpuBackend) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  options.sliding_window = 5;
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  model.meta.mutable_kv_cache()->set_dtype(GetParam());
  Backends backends;
  ASSERT_TRUE(createBackends(backends, model.meta, model.Lookup(), 32));
  runStepScript(*backends.cpu, *backends.emulated, GetParam() == plan::F16 ? 2e-3f : 2e-2f);
  // runStepScript's cache: 16 blocks of 4 tokens, K and V of 2 layers x 2 kv heads x 6, 2 bytes.
  EXPECT_EQ(backends.emulated->kv_cache_bytes(), 16 * 4 * 2 * 2 * 2 * 6 * 2);
}

INSTANTIATE_TEST_SUITE_P(Kv, KvDtypeTest, ::testing::Values(plan::F16, plan::BF16),
                         [](const ::testing::TestParamInfo<plan::DType> &info) {
                           return std::string(info.param == plan::F16 ? "f16" : "bf16");
                         });

TEST(KvDtypeTest, AnInt8CacheIsRefusedWithTheReason) {
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama({});
  model.meta.mutable_kv_cache()->set_dtype(plan::I8);
  auto emission = emitCuda(model.meta);
  ASSERT_FALSE(emission.ok());
  EXPECT_NE(emission.status().message().find("KV cache dtype I8"), std::string::npos)
      << emission.status();
  // A table emitted for an f32 cache does not make the backend accept an I8 plan either.
  model.meta.mutable_kv_cache()->set_dtype(plan::F32);
  auto f32Emission = emitCuda(model.meta);
  ASSERT_TRUE(f32Emission.ok());
  auto module = EmulatedModule::build(f32Emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  ASSERT_TRUE(module.ok()) << module.status();
  model.meta.mutable_kv_cache()->set_dtype(plan::I8);
  const plan::KernelTable table = f32Emission->kernelTable("cuda:emulated");
  llmrt::BackendOptions backendOptions;
  auto backend = llmrt::cuda::CreateKernelBackend(model.meta, table, model.Lookup(), backendOptions,
                                                  std::make_unique<EmulatedDevice>(*module, table));
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("kv_cache.dtype i8"), std::string::npos)
      << backend.status();
}

INSTANTIATE_TEST_SUITE_P(Stories, StoriesTest, ::testing::Values(plan::F32, plan::F16, plan::BF16),
                         [](const ::testing::TestParamInfo<plan::DType> &info) {
                           return std::string(info.param == plan::F16    ? "f16"
                                              : info.param == plan::BF16 ? "bf16"
                                                                         : "f32");
                         });

} // namespace
} // namespace llmc::cuda
