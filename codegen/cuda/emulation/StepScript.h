//===- StepScript.h - The same steps on two backends, logits compared -*- C++ -*-===//
//
// Test support shared by the emulation tests and the GPU tests: a step script (prefill,
// decode, mixed and forked steps over a paged KV cache whose blocks are out of order) run on
// a reference backend (the CPU) and a candidate (emulated or real CUDA), every logit compared.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_STEPSCRIPT_H_
#define LLMC_CODEGEN_CUDA_EMULATION_STEPSCRIPT_H_

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/dispatch.h"
#include "runtime/plan/dtype.h"
#include "gtest/gtest.h"

namespace llmc::cuda {

// f16/bf16 weights with f32 activations: both backends read the same weights, so the only
// differences are summation order, f32 transcendental ulps and the MMA's split activations.
inline constexpr float kTolerance = 1e-3f;

// The CUDA kernels (emulated or real) compute BF16 matmuls with f32-class activations, so their
// reference is the CPU backend's f32-activation arithmetic. On a CPU with AVX512-BF16 the CPU
// backend's default tier (avx3_zen4) rounds BF16 matmul activations to bf16 instead
// (runtime/backend/cpu/matmul.cc; tested against transformers' own bf16 forward in
// tests/e2e/fixtures_test.cc), so while a BF16 case runs this puts the CPU reference on the avx3
// tier (the same kernels without AVX512-BF16) and restores the selection after. Create it before
// the CPU backend: CreateCpuBackend selects from LLMRT_CPU_TARGET, hence both.
class F32ActivationCpuReference {
public:
  explicit F32ActivationCpuReference(llmrt::plan::DType dtype) {
    EXPECT_TRUE(llmrt::cpu::SelectCpuTargetFromEnvironment().ok());
    if (dtype != llmrt::plan::BF16 || !llmrt::cpu::ActiveCpuExtensions().avx512_bf16)
      return;
    active_ = true;
    if (const char *previous = std::getenv("LLMRT_CPU_TARGET"))
      previous_ = previous;
    setenv("LLMRT_CPU_TARGET", "avx3", 1);
    EXPECT_TRUE(llmrt::cpu::SelectCpuTarget("avx3").ok());
  }
  ~F32ActivationCpuReference() {
    if (!active_)
      return;
    if (previous_)
      setenv("LLMRT_CPU_TARGET", previous_->c_str(), 1);
    else
      unsetenv("LLMRT_CPU_TARGET");
    (void)llmrt::cpu::SelectCpuTarget(previous_.value_or(""));
  }
  F32ActivationCpuReference(const F32ActivationCpuReference &) = delete;
  F32ActivationCpuReference &operator=(const F32ActivationCpuReference &) = delete;

private:
  bool active_ = false;
  std::optional<std::string> previous_;
};

// Drives one sequence (or two) through both backends with identical batches.
class Sequence {
public:
  // Blocks are taken from `blocks` in order: deliberately not 0, 1, 2... so paging matters.
  explicit Sequence(std::vector<int32_t> blocks) : blockTable(std::move(blocks)) {}

  // Appends `tokens` to `batch` as this sequence's share of a step.
  void append(llmrt::StepBatch &batch, const std::vector<int32_t> &tokens, int32_t blockSize,
              bool allLogits) {
    llmrt::StepSequence sequence;
    sequence.first_token = batch.num_tokens();
    sequence.num_tokens = static_cast<int32_t>(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (allLogits || i + 1 == tokens.size())
        batch.logit_rows.push_back(batch.num_tokens());
      batch.token_ids.push_back(tokens[i]);
      batch.positions.push_back(length);
      batch.slot_mapping.push_back(blockTable[length / blockSize] * blockSize + length % blockSize);
      ++length;
    }
    sequence.context_length = length;
    sequence.block_table = blockTable.data();
    sequence.num_blocks = static_cast<int32_t>(blockTable.size());
    batch.sequences.push_back(sequence);
  }

  std::vector<int32_t> blockTable;
  int32_t length = 0;
};

// Runs `batch` on both backends and expects the same logits; returns the CPU's.
inline std::vector<float> runBoth(llmrt::Backend &reference, llmrt::Backend &candidate,
                                  const llmrt::StepBatch &batch, const std::string &what,
                                  float tolerance = kTolerance) {
  const int64_t vocab = reference.vocab_size();
  std::vector<float> expected(batch.logit_rows.size() * vocab);
  std::vector<float> actual(expected.size(), NAN);
  absl::Status cpuStatus = reference.RunStep(batch, expected.data());
  EXPECT_TRUE(cpuStatus.ok()) << cpuStatus;
  absl::Status emulatedStatus = candidate.RunStep(batch, actual.data());
  EXPECT_TRUE(emulatedStatus.ok()) << emulatedStatus;
  float worst = 0.0f;
  size_t worstIndex = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float difference = std::fabs(expected[i] - actual[i]);
    if (!(difference <= worst)) {
      worst = std::isnan(difference) ? INFINITY : difference;
      worstIndex = i;
    }
  }
  EXPECT_LE(worst, tolerance) << what << ": logit " << worstIndex % vocab << " of row "
                              << worstIndex / vocab << ": " << reference.name() << " "
                              << expected[worstIndex] << ", " << candidate.name() << " "
                              << actual[worstIndex];
  // A MoE plan (backends created with record_expert_load): the step routed every token to the
  // same experts on both.
  llmrt::ExpertLoad expectedLoad, actualLoad;
  if (reference.LastStepExpertLoad(expectedLoad).ok()) {
    absl::Status status = candidate.LastStepExpertLoad(actualLoad);
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(actualLoad.num_routers, expectedLoad.num_routers) << what;
    EXPECT_EQ(actualLoad.num_experts, expectedLoad.num_experts) << what;
    EXPECT_EQ(actualLoad.counts, expectedLoad.counts) << what;
  }
  return expected;
}

inline std::vector<int32_t> randomTokens(std::mt19937 &random, int count, int64_t vocab) {
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> tokens(count);
  for (int32_t &token : tokens)
    token = pick(random);
  return tokens;
}

// Prefill (MMA GEMM, tiled prefill attention), decode (GEMV, split-K attention over a paged
// cache whose blocks are not in order), and mixed steps of two sequences, every logit compared.
// `tolerance`: max |logit difference| (kTolerance, or looser for a 16-bit KV cache).
inline void runStepScript(llmrt::Backend &reference, llmrt::Backend &candidate,
                          float tolerance = kTolerance) {
  // 4-token blocks: a 13-token prompt spans four blocks of a table that is not in order.
  constexpr int32_t kBlockSize = 4;
  constexpr int32_t kBlocks = 16;
  ASSERT_TRUE(reference.AllocateKvCache(kBlocks, kBlockSize).ok());
  ASSERT_TRUE(candidate.AllocateKvCache(kBlocks, kBlockSize).ok());
  std::mt19937 random(7);
  const int64_t vocab = reference.vocab_size();
  Sequence first({9, 3, 14, 0, 6, 11});
  Sequence second({1, 12, 5, 8, 2});

  llmrt::StepBatch batch;
  first.append(batch, randomTokens(random, 13, vocab), kBlockSize, /*allLogits=*/true);
  runBoth(reference, candidate, batch, "prefill", tolerance);
  for (int step = 0; step < 3; ++step) {
    batch.Clear();
    first.append(batch, randomTokens(random, 1, vocab), kBlockSize, false);
    runBoth(reference, candidate, batch, "decode " + std::to_string(step), tolerance);
  }
  // A decode token of the first sequence and a 10-token prefill of a second in one step.
  batch.Clear();
  first.append(batch, randomTokens(random, 1, vocab), kBlockSize, false);
  second.append(batch, randomTokens(random, 10, vocab), kBlockSize, true);
  runBoth(reference, candidate, batch, "mixed step", tolerance);
  // A small mixed step: GEMV for both.
  batch.Clear();
  first.append(batch, randomTokens(random, 1, vocab), kBlockSize, false);
  second.append(batch, randomTokens(random, 2, vocab), kBlockSize, true);
  runBoth(reference, candidate, batch, "small mixed step", tolerance);
  // Copy-on-write of a block: the copy must hold the same K/V on both backends.
  ASSERT_TRUE(reference.CopyKvBlock(3, 15).ok());
  ASSERT_TRUE(candidate.CopyKvBlock(3, 15).ok());
  Sequence forked({9, 15});
  forked.length = 5; // shares tokens 0..4 with `first` (block 9 whole, block 3 copied)
  batch.Clear();
  forked.append(batch, randomTokens(random, 1, vocab), kBlockSize, false);
  runBoth(reference, candidate, batch, "forked sequence", tolerance);
}

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_STEPSCRIPT_H_
