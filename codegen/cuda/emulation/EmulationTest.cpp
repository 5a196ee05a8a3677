//===- EmulationTest.cpp - Generated CUDA kernels vs the CPU backend ------===//
//
// Every kernel codegen/cuda emits for a model runs under emulation (the same source NVRTC
// compiles, built for the host) through the CUDA backend's step program, and must give the
// CPU backend's logits: for every transformers fixture in tests/fixtures, with f16 and bf16
// weights, over prefill steps (MMA GEMM), decode steps (GEMV), paged KV across non-contiguous
// blocks, and two sequences sharing a step; over f32, 16-bit and int8 KV caches (the int8
// kv_write stores the CPU cache's very codes). stories260K must tell its documented story.
// Quantized plans: QuantizedFixtureTest.cpp.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/EmulatedBackends.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "codegen/cuda/emulation/StepScript.h"
#include "compiler/pipeline/compile.h"
#include "nlohmann/json.hpp"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"
#include "tests/fixtures/fixture_list.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

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
  F32ActivationCpuReference reference(param.dtype);
  auto backends = makeBackends(param.model, param.dtype);
  ASSERT_NE(backends, nullptr);
  runStepScript(*backends->cpu, *backends->emulated);
  // The script's prefill steps ran the tiled MMA attention and its decode steps split-K; rope
  // ran inside them (the ROPE ops launch nothing) unless it is partial or scales cos/sin
  // (Phi-4-mini's, LongRoPE's: a rope kernel of its own); the logits prefilter ran after the GEMV.
  // head_dim above the tiled kernel's limit (Gemma's 256) has no prefill kernel: split-K runs.
  const bool hasPrefill =
      std::any_of(backends->emission.kernels.begin(), backends->emission.kernels.end(),
                  [](const EmittedKernel &kernel) {
                    return kernel.info.name().rfind("llmc_attention_prefill_", 0) == 0;
                  });
  EXPECT_EQ(backends->launched("attention_prefill_"), hasPrefill);
  EXPECT_EQ(hasPrefill, backends->plan->meta().kv_cache().head_dim() <= 128);
  EXPECT_TRUE(backends->launched("attention_combine_"));
  const plan::ModelConfig &config = backends->plan->meta().config();
  const bool ownRopeKernel =
      plan::RotaryDim(config.rope(), static_cast<int32_t>(config.head_dim())) !=
          config.head_dim() ||
      plan::RopeCosSinScale(config.rope()) != 1.0;
  EXPECT_EQ(backends->launched("rope_"), ownRopeKernel);
  EXPECT_TRUE(backends->launched("logits_top"));
  // MoE: routing, grouping, and both expert matmuls (the GEMM for the prefill steps: 16-bit
  // weights have one); gpt-oss's sinks in the combine and the prefill attention.
  const bool moe = std::any_of(backends->plan->meta().program().ops().begin(),
                               backends->plan->meta().program().ops().end(),
                               [](const plan::Op &op) { return op.kind() == plan::ROUTER; });
  EXPECT_EQ(backends->launched("router_"), moe);
  EXPECT_EQ(backends->launched("expert_group_"), moe);
  EXPECT_EQ(backends->launched("expert_gemv_"), moe);
  EXPECT_EQ(backends->launched("expert_gemm_mma_"), moe);
  EXPECT_EQ(backends->launched("attention_combine_", "_sinks"), config.attention_sinks());
  EXPECT_EQ(backends->launched("attention_prefill_", "_sinks"), config.attention_sinks());
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
  F32ActivationCpuReference reference(options.weight_dtype);
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
  for (const std::string &fixture : fixtures::TransformersFixtureNames(LLMC_SOURCE_DIR)) {
    for (plan::DType dtype : {plan::F16, plan::BF16})
      cases.push_back({"tests/fixtures/" + fixture, dtype});
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
  // The tiled prefill kernel exists up to head_dim 128 (Gemma 2's 256 runs split-K).
  EXPECT_EQ(backends->launched("attention_prefill_"),
            backends->plan->meta().kv_cache().head_dim() <= 128);
  EXPECT_TRUE(backends->launched("attention_combine_"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TransformersReferenceTest,
                         ::testing::ValuesIn(fixtures::TransformersFixtureNames(LLMC_SOURCE_DIR)));

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

// A cache dtype without kernels (I4) is refused by the emitter and by the backend (through the
// program validation it shares with the CPU backend), each naming the dtype and what they keep.
TEST(KvDtypeTest, ACacheDtypeWithoutKernelsIsRefusedWithTheReason) {
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama({});
  model.meta.mutable_kv_cache()->set_dtype(plan::I4);
  auto emission = emitCuda(model.meta);
  ASSERT_FALSE(emission.ok());
  EXPECT_NE(emission.status().message().find("KV cache dtype I4"), std::string::npos)
      << emission.status();
  // A table emitted for an f32 cache does not make the backend accept an I4 plan either.
  model.meta.mutable_kv_cache()->set_dtype(plan::F32);
  auto f32Emission = emitCuda(model.meta);
  ASSERT_TRUE(f32Emission.ok());
  auto module = EmulatedModule::build(f32Emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  ASSERT_TRUE(module.ok()) << module.status();
  model.meta.mutable_kv_cache()->set_dtype(plan::I4);
  const plan::KernelTable table = f32Emission->kernelTable("cuda:emulated");
  llmrt::BackendOptions backendOptions;
  auto backend = llmrt::cuda::CreateKernelBackend(model.meta, table, model.Lookup(), backendOptions,
                                                  std::make_unique<EmulatedDevice>(*module, table));
  ASSERT_FALSE(backend.ok());
  EXPECT_NE(backend.status().message().find("KV cache dtype I4"), std::string::npos)
      << backend.status();
}

// The int8 cache's kv_write kernel stores exactly the codes and scales runtime/kv's KvStorage
// (the CPU backend's cache) stores for the same k and v rows: same max, same IEEE reciprocal
// and product, same round-half-to-even. Rope positions are 0 (the rotation is the identity), so
// both sides quantize the same values. One k head is all zeros (scale 0, codes 0); one v head
// has max 127, so x * 127 / max = x and the halves 2.5, -3.5, 0.5, -0.5, 1.5 pin the rounding:
// codes 2, -4, 0, 0, 2 (half away from zero would give 3, -4, 1, -1, 2).
TEST(KvInt8Test, KvWriteStoresTheCpuCachesCodesAndScales) {
  for (int headDim : {6, 40, 64}) {
    SCOPED_TRACE("head_dim " + std::to_string(headDim));
    llmrt::testing::TinyLlamaOptions options;
    options.head_dim = headDim;
    llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
    model.meta.mutable_kv_cache()->set_dtype(plan::I8);
    auto emission = emitCuda(model.meta);
    ASSERT_TRUE(emission.ok()) << emission.status();
    int32_t kvWrite = -1;
    for (size_t i = 0; i < emission->kernels.size(); ++i)
      if (emission->kernels[i].info.name().rfind("llmc_kv_write_", 0) == 0)
        kvWrite = static_cast<int32_t>(i);
    ASSERT_GE(kvWrite, 0);
    EXPECT_NE(emission->kernels[kvWrite].info.name().find("_i8_"), std::string::npos);
    auto module = EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
    ASSERT_TRUE(module.ok()) << module.status();
    const plan::KernelTable table = emission->kernelTable("cuda:emulated");
    EmulatedDevice device(*module, table);

    const int kvHeads = options.num_kv_heads, kvWidth = kvHeads * headDim;
    constexpr int kTokens = 5, kSlots = 8;
    const std::vector<int32_t> slots = {3, 0, 7, 5, 1};
    std::mt19937 random(5);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> k(kTokens * kvWidth), v(kTokens * kvWidth);
    for (float &x : k)
      x = normal(random);
    for (float &x : v)
      x = normal(random);
    std::fill(k.begin(), k.begin() + headDim, 0.0f); // token 0, head 0
    const float halves[6] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 1.5f};
    float *special = v.data() + 1 * kvWidth + 1 * headDim; // token 1, head 1
    std::fill(special, special + headDim, 0.0f);
    std::copy(halves, halves + 6, special);
    const std::vector<int32_t> positions(kTokens, 0);

    auto upload = [&](const void *data, size_t bytes) {
      auto pointer = device.Allocate(bytes);
      EXPECT_TRUE(pointer.ok());
      EXPECT_TRUE(device.CopyToDevice(*pointer, data, bytes).ok());
      return *pointer;
    };
    // Unwritten slots keep this pattern, so a misplaced write shows up as a changed slot.
    const std::vector<uint8_t> fill(kSlots * kvWidth * 4, 0x55);
    LlmcKernelParams params = {};
    params.input[1] = upload(k.data(), k.size() * 4);
    params.input[2] = upload(v.data(), v.size() * 4);
    params.positions = upload(positions.data(), kTokens * 4);
    params.slot_mapping = upload(slots.data(), kTokens * 4);
    params.key_cache = upload(fill.data(), kSlots * kvWidth);
    params.value_cache = upload(fill.data(), kSlots * kvWidth);
    params.key_scales = upload(fill.data(), kSlots * kvHeads * 4);
    params.value_scales = upload(fill.data(), kSlots * kvHeads * 4);
    params.num_tokens = kTokens;
    llmrt::cuda::LaunchGeometry geometry;
    geometry.grid[0] = kTokens;
    geometry.block[0] = table.kernels(kvWrite).block_x();
    ASSERT_TRUE(device.Launch(kvWrite, geometry, params).ok());

    std::vector<uint8_t> keyCodes(kSlots * kvWidth), valueCodes(kSlots * kvWidth);
    std::vector<float> keyScales(kSlots * kvHeads), valueScales(kSlots * kvHeads);
    ASSERT_TRUE(device.CopyToHost(keyCodes.data(), params.key_cache, keyCodes.size()).ok());
    ASSERT_TRUE(device.CopyToHost(valueCodes.data(), params.value_cache, valueCodes.size()).ok());
    ASSERT_TRUE(device.CopyToHost(keyScales.data(), params.key_scales, keyScales.size() * 4).ok());
    ASSERT_TRUE(
        device.CopyToHost(valueScales.data(), params.value_scales, valueScales.size() * 4).ok());

    llmrt::kv::KvStorageShape shape;
    shape.num_layers = 1;
    shape.num_kv_heads = kvHeads;
    shape.head_dim = headDim;
    shape.num_blocks = kSlots;
    shape.block_size = 1;
    shape.dtype = plan::I8;
    auto storage = llmrt::kv::KvStorage::Create(shape);
    ASSERT_TRUE(storage.ok()) << storage.status();
    for (int t = 0; t < kTokens; ++t)
      (*storage)->WriteToken(0, slots[t], k.data() + t * kvWidth, v.data() + t * kvWidth);
    for (int slot = 0; slot < kSlots; ++slot) {
      SCOPED_TRACE("slot " + std::to_string(slot));
      const bool written = std::find(slots.begin(), slots.end(), slot) != slots.end();
      if (!written) {
        EXPECT_EQ(keyCodes[slot * kvWidth], 0x55);
        continue;
      }
      EXPECT_EQ(
          std::memcmp(keyCodes.data() + slot * kvWidth, (*storage)->key_bytes(0, slot), kvWidth),
          0);
      EXPECT_EQ(std::memcmp(valueCodes.data() + slot * kvWidth, (*storage)->value_bytes(0, slot),
                            kvWidth),
                0);
      EXPECT_EQ(std::memcmp(keyScales.data() + slot * kvHeads, (*storage)->key_scales(0, slot),
                            kvHeads * 4),
                0);
      EXPECT_EQ(std::memcmp(valueScales.data() + slot * kvHeads, (*storage)->value_scales(0, slot),
                            kvHeads * 4),
                0);
    }
    // The contract's numbers, independent of KvStorage: the zero head and the halves.
    EXPECT_EQ(keyScales[slots[0] * kvHeads], 0.0f);
    for (int d = 0; d < headDim; ++d)
      EXPECT_EQ(keyCodes[slots[0] * kvWidth + d], 0);
    const int8_t *rounded =
        reinterpret_cast<const int8_t *>(valueCodes.data() + slots[1] * kvWidth + headDim);
    EXPECT_EQ(std::vector<int>(rounded, rounded + 6), (std::vector<int>{127, 2, -4, 0, 0, 2}));
    EXPECT_EQ(valueScales[slots[1] * kvHeads + 1], 1.0f);
  }
}

// The whole step script (prefill through the tiled MMA attention, split-K decode, mixed steps,
// a copied block) over an int8 cache on both backends: the CPU backend keeps the same codes
// (KvStorage), so the only differences are summation order and where the scales multiply, and
// logits stay within the kernels' 1e-3. Shapes: the tiny model (head_dim 6, GQA, window 5) and
// head_dim 64 (two lanes' worth of elements per lane in the split kernel).
class KvInt8Test : public ::testing::TestWithParam<int> {};

TEST_P(KvInt8Test, StepScriptMatchesTheCpuBackendWithTheSameCache) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  options.head_dim = GetParam();
  options.sliding_window = GetParam() == 6 ? 5 : 0;
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  model.meta.mutable_kv_cache()->set_dtype(plan::I8);
  Backends backends;
  ASSERT_TRUE(createBackends(backends, model.meta, model.Lookup(), 32));
  runStepScript(*backends.cpu, *backends.emulated);
  EXPECT_TRUE(backends.launched("attention_prefill_"));
  EXPECT_TRUE(backends.launched("attention_combine_"));
  // runStepScript's cache: 16 blocks of 4 tokens; K and V of 2 layers, per token 2 kv heads of
  // head_dim 1-byte codes and 2 f32 scales.
  EXPECT_EQ(backends.emulated->kv_cache_bytes(), 16 * 4 * 2 * 2 * (2 * GetParam() + 2 * 4));
}

INSTANTIATE_TEST_SUITE_P(Kv, KvInt8Test, ::testing::Values(6, 64));

// llmc --kv-cache int8 on a transformers fixture (f16 weights, GQA, rope fused into the int8
// kv_write): the emulated kernels against the CPU backend with the same cache.
TEST(KvInt8Test, FixturePlanMatchesTheCpuBackend) {
  auto backends =
      makeBackends("tests/fixtures/llama_gqa_tied", plan::F16, 64, std::nullopt, plan::I8);
  ASSERT_NE(backends, nullptr);
  ASSERT_EQ(backends->plan->meta().kv_cache().dtype(), plan::I8);
  runStepScript(*backends->cpu, *backends->emulated);
  EXPECT_TRUE(backends->launched("kv_write_"));
  EXPECT_TRUE(backends->launched("attention_prefill_"));
}

INSTANTIATE_TEST_SUITE_P(Stories, StoriesTest, ::testing::Values(plan::F32, plan::F16, plan::BF16),
                         [](const ::testing::TestParamInfo<plan::DType> &info) {
                           return std::string(info.param == plan::F16    ? "f16"
                                              : info.param == plan::BF16 ? "bf16"
                                                                         : "f32");
                         });

} // namespace
} // namespace llmc::cuda
