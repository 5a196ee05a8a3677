//===- QuantizedFixtureTest.cpp - Quantized fixture plans under emulation --===//
//
// For every transformers fixture in tests/fixtures and every quantization mode llmc writes
// (int8 per channel and g32, int4 g32 / g64 symmetric and asymmetric, one with a quantized
// lm_head; MXFP4 on the mixture-of-experts fixtures) and for the imported GPTQ / GPTQ act-order /
// AWQ / MXFP4 (gpt_oss_mxfp4) checkpoints as they are:
// `llmc compile --target cpu,cuda:sm_80,sm_90` succeeds (every kernel assembled by ptxas
// without spills, when llmc has NVRTC), and every kernel the plan's step program launches runs
// under emulation through the step script (prefill: quantized MMA GEMM and tiled attention;
// decode: quantized GEMV and split-K; mixed and forked steps) with logits within 1e-3 of the
// CPU backend on the same plan dequantized to f32 by plan.proto's contract. The CPU backend's
// own quantized path rounds activations to int8, so it is not an exact reference for kernels
// that keep f32 activations. stories260K int8 / int4 asymmetric run the same way.
//
// Groups of 128 need input widths that are multiples of 128; the fixtures' hidden size is 64,
// so g128 is covered on the kernels alone (QuantizedKernelTest, CudaTarget_test).
//
// Each case builds its model's kernels with the host compiler (cached by source hash in the
// build tree): ~50 modules on a first run, hence the `long` label of this executable.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codegen/cuda/NvrtcCompiler.h"
#include "codegen/cuda/emulation/EmulatedBackends.h"
#include "codegen/cuda/emulation/StepScript.h"
#include "tests/fixtures/fixture_list.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

struct Mode {
  const char *name;
  int bits;
  int64_t groupSize; // 0: int8 per output channel
  bool asymmetric;
  bool lmHead;
  bool mxfp4 = false;
};

// llmc's --quant modes whose groups fit the fixtures' widths (64 in, 172 for down_proj, which
// stays float unless per-channel int8: 172 is not a multiple of 32).
constexpr Mode kModes[] = {
    {"int8", 8, 0, false, false},        {"int8_g32", 8, 32, false, false},
    {"int4_g32", 4, 32, false, false},   {"int4_g32_asym", 4, 32, true, false},
    {"int4_g64", 4, 64, false, false},   {"int4_g64_asym", 4, 64, true, false},
    {"int8_lm_head", 8, 0, false, true}, {"mxfp4", 4, 32, false, false, true},
};

// Mixture-of-experts fixtures (a ROUTER in the plan): the expert kernels are what they add.
bool isMoe(const std::string &fixture) {
  return fixture.find("moe") != std::string::npos || fixture.rfind("gpt_oss", 0) == 0;
}

struct QuantFixtureCase {
  std::string model; // under the source tree
  const Mode *mode;  // null: a pre-quantized checkpoint, imported as it is
};

void PrintTo(const QuantFixtureCase &param, std::ostream *out) {
  *out << param.model << " " << (param.mode ? param.mode->name : "imported");
}

// Every kernel of the emission ran at least once, and the plan's CUDA tables (when llmc has
// NVRTC) hold every kernel for sm_80, sm_90 and compute_90 PTX without register spills.
void expectEveryKernelLaunchedAndAssembled(const Backends &backends) {
  for (const EmittedKernel &kernel : backends.emission.kernels) {
    const std::vector<std::string> &launches = backends.device->launches();
    EXPECT_NE(std::find(launches.begin(), launches.end(), kernel.info.name()), launches.end())
        << kernel.info.name() << " never ran";
  }
  if (nvrtcVersion().empty())
    return; // llmc without NVRTC: CudaTarget_test's NvrtcTest prints why it skipped
  std::vector<std::string> targets;
  for (const plan::KernelTable &table : backends.plan->meta().program().kernel_tables()) {
    if (table.target() == "cpu")
      continue;
    targets.push_back(table.target());
    EXPECT_EQ(table.kernels_size(), static_cast<int>(backends.emission.kernels.size()));
    for (const plan::KernelTable::Kernel &kernel : table.kernels()) {
      if (table.target() == "cuda:compute_90")
        continue; // PTX: registers are the driver's JIT's business
      EXPECT_GT(kernel.registers(), 0) << table.target() << " " << kernel.name();
      EXPECT_EQ(kernel.spill_store_bytes() + kernel.spill_load_bytes(), 0)
          << table.target() << " " << kernel.name() << " spills";
    }
  }
  EXPECT_EQ(targets, (std::vector<std::string>{"cuda:sm_80", "cuda:sm_90", "cuda:compute_90"}));
}

class QuantizedFixtureTest : public ::testing::TestWithParam<QuantFixtureCase> {};

TEST_P(QuantizedFixtureTest, EveryKernelMatchesTheDequantizedPlan) {
  const QuantFixtureCase &param = GetParam();
  std::optional<QuantizeOptions> quantize;
  if (param.mode) {
    quantize.emplace();
    quantize->bits = param.mode->bits;
    quantize->group_size = param.mode->groupSize;
    quantize->asymmetric = param.mode->asymmetric;
    quantize->lm_head_bits = param.mode->lmHead ? 8 : 0;
    quantize->mxfp4 = param.mode->mxfp4;
  }
  const std::vector<int> cudaTargets =
      nvrtcVersion().empty() ? std::vector<int>{} : std::vector<int>{80, 90};
  auto backends = makeBackends(param.model, plan::F32, 64, quantize, std::nullopt, cudaTargets);
  ASSERT_NE(backends, nullptr);
  const plan::Plan &quantized = *backends->plan;
  DequantizedPlan reference =
      dequantize(quantized.meta(), [&quantized](int index) { return quantized.blob(index); });
  ASSERT_FALSE(reference.replaced.empty()) << "the plan has no quantized matrix";
  auto exact = createDequantizedCpuBackend(quantized, reference, 64);
  ASSERT_NE(exact, nullptr);
  runStepScript(*exact, *backends->emulated);
  expectEveryKernelLaunchedAndAssembled(*backends);
  // The quantized kernels ran: decode GEMV and prefill GEMM (the expert ones too in a MoE plan;
  // gpt_oss_mxfp4 ships only its experts in MXFP4), and the logits GEMV over an int8 lm_head.
  const bool moe = isMoe(param.model.substr(param.model.rfind('/') + 1));
  const std::string bits = !param.mode             ? (moe ? "_mxfp4" : "_i4")
                           : param.mode->mxfp4     ? "_mxfp4"
                           : param.mode->bits == 8 ? "_i8"
                                                   : "_i4";
  bool gemv = false, gemm = false, logits = false, expertGemv = false, expertGemm = false;
  for (const std::string &name : backends->device->launches()) {
    const bool quantized = name.find(bits) != std::string::npos;
    gemv = gemv || (name.rfind("llmc_gemv_", 0) == 0 && quantized);
    gemm = gemm || (name.rfind("llmc_gemm_mma_", 0) == 0 && quantized);
    expertGemv = expertGemv || (name.rfind("llmc_expert_gemv_", 0) == 0 && quantized);
    expertGemm = expertGemm || (name.rfind("llmc_expert_gemm_mma_", 0) == 0 && quantized);
    logits =
        logits || (name.rfind("llmc_logits_", 0) == 0 && name.find("_i8") != std::string::npos);
  }
  EXPECT_EQ(gemv, !moe || param.mode != nullptr);
  EXPECT_EQ(gemm, !moe || param.mode != nullptr);
  EXPECT_EQ(expertGemv, moe);
  EXPECT_EQ(expertGemm, moe);
  EXPECT_EQ(logits, param.mode && param.mode->lmHead);
}

std::vector<QuantFixtureCase> quantFixtureCases() {
  std::vector<QuantFixtureCase> cases;
  for (const std::string &fixture : fixtures::TransformersFixtureNames(LLMC_SOURCE_DIR))
    for (const Mode &mode : kModes)
      if ((!mode.lmHead || fixture == "llama_mha") && (!mode.mxfp4 || isMoe(fixture)))
        cases.push_back({"tests/fixtures/" + fixture, &mode});
  for (const std::string &imported : fixtures::PrequantizedFixtureNames(LLMC_SOURCE_DIR))
    cases.push_back({"tests/fixtures/" + imported, nullptr});
  for (const Mode &mode : kModes)
    if (std::string(mode.name) == "int8" || std::string(mode.name) == "int4_g32_asym")
      cases.push_back({"tests/data/stories260K", &mode});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizedFixtureTest, ::testing::ValuesIn(quantFixtureCases()),
                         [](const ::testing::TestParamInfo<QuantFixtureCase> &info) {
                           return absl::StrCat(
                               info.param.model.substr(info.param.model.rfind('/') + 1), "_",
                               info.param.mode ? info.param.mode->name : "imported");
                         });

} // namespace
} // namespace llmc::cuda
