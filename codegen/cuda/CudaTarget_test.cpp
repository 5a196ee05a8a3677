//===- CudaTarget_test.cpp - Emission and NVRTC compilation of every kernel ===//
//
// Every kernel emitted for the model shapes the tests know (unfused and fused programs, q/k/v
// bias, sliding window, GQA, head_dim 6, f32/f16/bf16 weights) compiles with NVRTC for sm_80
// and sm_90 and as compute_90 PTX, without register spills; the plan's kernel tables record
// what ptxas reported and the code reads back from the plan file.
//
//===----------------------------------------------------------------------===//

#include "codegen/cuda/CudaTarget.h"

#include <cmath>
#include <cstdio>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "codegen/cuda/CostModel.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/NvrtcCompiler.h"
#include "codegen/cuda/emulation/QuantizedMatmulMeta.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/plan_writer.h"
#include "gtest/gtest.h"

namespace llmc::cuda {
namespace {

namespace plan = llmrt::plan;

// Every kernel variant the emitter has: f32/f16/bf16 weights, fused and unfused programs,
// bias, windows, head_dim 6, 64 and 128 (the prefill attention's largest), 16-bit KV caches,
// int8 / int4 matrices (symmetric, asymmetric, permuted, per-channel), and the MoE kernels
// (router, grouping, expert GEMV / GEMM over every weight format, combine, clamped SwiGLU,
// attention sinks).
std::vector<plan::PlanMeta> models() {
  std::vector<plan::PlanMeta> result;
  llmrt::testing::TinyLlamaOptions options;
  for (plan::DType dtype : {plan::F32, plan::F16, plan::BF16}) {
    options.weight_dtype = dtype;
    options.fused = dtype != plan::F32;
    options.qkv_bias = dtype == plan::BF16;
    options.sliding_window = dtype == plan::F16 ? 4 : 0;
    result.push_back(llmrt::testing::BuildTinyLlama(options).meta);
  }
  for (int headDim : {64, 128}) {
    options.weight_dtype = plan::F16;
    options.head_dim = headDim;
    options.num_heads = 2;
    options.num_kv_heads = 1;
    options.num_layers = 1;
    options.sliding_window = 0;
    result.push_back(llmrt::testing::BuildTinyLlama(options).meta);
    result.back().mutable_kv_cache()->set_dtype(headDim == 64 ? plan::F16 : plan::BF16);
  }
  // int8 KV caches: head_dim 6 (window), 64 and 128 (the prefill kernel's largest), GQA.
  for (int headDim : {6, 64, 128}) {
    options.weight_dtype = plan::F16;
    options.head_dim = headDim;
    options.num_heads = 4;
    options.num_kv_heads = 2;
    options.num_layers = 1;
    options.sliding_window = headDim == 6 ? 5 : 0;
    result.push_back(llmrt::testing::BuildTinyLlama(options).meta);
    result.back().mutable_kv_cache()->set_dtype(plan::I8);
  }
  // Every quantization mode llmc writes: int8 per channel (K 172: one code per lane) and g32,
  // int4 g32 / g64 / g128 symmetric and asymmetric, GPTQ act-order (permuted), bias.
  for (const QuantCase &c : {QuantCase{plan::I8, false, 64, 40, 32, false, false},
                             QuantCase{plan::I8, false, 172, 24, 172, false, true},
                             QuantCase{plan::I8, false, 256, 24, 128, false, false},
                             QuantCase{plan::I4, false, 96, 40, 32, false, false},
                             QuantCase{plan::I4, true, 96, 40, 32, true, false},
                             QuantCase{plan::I4, false, 128, 36, 64, false, true},
                             QuantCase{plan::I4, true, 128, 36, 64, true, true},
                             QuantCase{plan::I4, false, 256, 24, 128, false, false},
                             QuantCase{plan::I4, true, 256, 24, 128, false, true}})
    result.push_back(matmulMeta(c));
  // Mixture of experts: routers (Mixtral's 8 / top-2, Qwen3-MoE's 64 / top-8 normalized,
  // gpt-oss's top-k softmax, the 1024-expert limit), expert GEMV / GEMM over f16 (two fused
  // outputs), bf16 panels (sliced input), I8, I4 symmetric / asymmetric and MXFP4 stacks, the
  // clamped SwiGLU, the combine with and without the shared expert, attention with sinks (f32
  // and f16 caches, windowed, soft-capped).
  for (auto [experts, topK, scoring] : {std::tuple{8, 2, plan::RouterAttrs::SOFTMAX_TOPK},
                                        std::tuple{64, 8, plan::RouterAttrs::SOFTMAX_TOPK},
                                        std::tuple{32, 4, plan::RouterAttrs::TOPK_SOFTMAX},
                                        std::tuple{1024, 8, plan::RouterAttrs::SOFTMAX_TOPK}}) {
    llmrt::testing::OpProgram program(4);
    const int32_t logits = program.Input(experts);
    const int32_t ids =
        program.Router(logits, experts, topK, scoring, scoring == plan::RouterAttrs::SOFTMAX_TOPK)
            .first;
    const int32_t x = program.Input(64);
    const int32_t gate = program.Activation(topK * 32), up = program.Activation(topK * 32);
    plan::Op *gateUp = program.AddOp(plan::EXPERT_MATMUL, {x, ids}, {gate, up},
                                     {program.ExpertMatrix(plan::F16, experts, 64, 64),
                                      program.FloatTensor(plan::F32, {experts, 64}, 0.5f)});
    gateUp->mutable_expert()->set_num_experts(experts);
    gateUp->mutable_expert()->set_top_k(topK);
    const int32_t hidden = program.Activation(topK * 32);
    plan::SwigluAttrs *swiglu =
        program.AddOp(plan::CLAMPED_SWIGLU, {gate, up}, {hidden}, {})->mutable_swiglu();
    swiglu->set_alpha(1.702);
    swiglu->set_limit(7.0);
    const int32_t down = program.Activation(topK * 64);
    plan::Op *downOp =
        program.AddOp(plan::EXPERT_MATMUL, {hidden, ids}, {down},
                      {program.ExpertMatrix(plan::BF16, experts, 64, 32, 0, false, 16)});
    downOp->mutable_expert()->set_num_experts(experts);
    downOp->mutable_expert()->set_top_k(topK);
    const int32_t routed = program.Activation(64), combined = program.Activation(64);
    const int32_t weights = program.Input(topK);
    program.AddOp(plan::MOE_COMBINE, {down, weights}, {routed}, {});
    program.AddOp(plan::MOE_COMBINE, {down, weights, x, program.Input(1)}, {combined}, {});
    program.ReadOut(combined);
    result.push_back(program.meta());
  }
  for (const ExpertQuantCase &c :
       {ExpertQuantCase{plan::I8, false, 32, 64, 8, 1024, 256, false},
        ExpertQuantCase{plan::I4, false, 32, 64, 8, 256, 1024, true},
        ExpertQuantCase{plan::I4, true, 64, 8, 2, 1024, 256, false},
        ExpertQuantCase{plan::FP4_E2M1, false, 32, 32, 4, 1024, 256, false},
        ExpertQuantCase{plan::FP4_E2M1, false, 32, 32, 4, 256, 1024, true}})
    result.push_back(expertMeta(c));
  for (auto [kv, window, softcap, headDim] :
       {std::tuple{plan::F32, 0, 0.0, 64}, std::tuple{plan::F16, 128, 0.0, 64},
        std::tuple{plan::BF16, 0, 30.0, 128}, std::tuple{plan::I8, 5, 0.0, 6}}) {
    llmrt::testing::OpProgram program(4);
    const int32_t q = program.Input(4 * headDim), k = program.Input(2 * headDim),
                  v = program.Input(2 * headDim);
    const int32_t out = program.Activation(4 * headDim);
    plan::AttentionAttrs *attention =
        program.AddOp(plan::ATTENTION, {q, k, v}, {out}, {program.FloatTensor(plan::F32, {4}, 1)})
            ->mutable_attention();
    attention->set_num_heads(4);
    attention->set_num_kv_heads(2);
    attention->set_head_dim(headDim);
    attention->set_sliding_window(window);
    attention->set_logit_softcap(softcap);
    plan::KvCacheSpec *spec = program.kv_cache();
    spec->set_num_layers(1);
    spec->set_num_kv_heads(2);
    spec->set_head_dim(headDim);
    spec->set_dtype(kv);
    program.ReadOut(out);
    result.push_back(program.meta());
  }
  return result;
}

TEST(EmitCudaTest, BakesTheModelsConstantsIntoEachKernel) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  const llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  auto emission = emitCuda(model.meta);
  ASSERT_TRUE(emission.ok()) << emission.status();
  const std::string source = emission->moduleSource();
  // hidden 24, heads 4, kv heads 2, head_dim 6: as literals in the instantiations.
  EXPECT_TRUE(absl::StrContains(source, "llmc::rmsNorm<24, 32, true>")) << source;
  EXPECT_TRUE(absl::StrContains(source, "llmc::attentionSplit<4, 2, 6, ")) << source;
  EXPECT_TRUE(absl::StrContains(source, "llmc::gemmMma<24, ")) << source;
  EXPECT_TRUE(absl::StrContains(source, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"));
  // One binding per op; every layer's identical kernels are emitted once, so more layers
  // add bindings but no kernels.
  ASSERT_EQ(emission->opKernels.size(), static_cast<size_t>(model.meta.program().ops_size()));
  options.num_layers = 5;
  auto deeper = emitCuda(llmrt::testing::BuildTinyLlama(options).meta);
  ASSERT_TRUE(deeper.ok()) << deeper.status();
  EXPECT_GT(deeper->opKernels.size(), emission->opKernels.size());
  EXPECT_EQ(deeper->kernels.size(), emission->kernels.size());
  std::set<std::string> names;
  for (const EmittedKernel &kernel : emission->kernels)
    EXPECT_TRUE(names.insert(kernel.info.name()).second) << kernel.info.name();
}

// ROPE fused into attention: the ROPE ops launch nothing, attention brings [kv write (rotating
// k), split (rotating q), combine, prefill], LOGITS [gemv, top-k].
TEST(EmitCudaTest, FusesRopeIntoAttentionAndAddsPrefillAndTopK) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::BF16;
  const llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  auto emission = emitCuda(model.meta);
  ASSERT_TRUE(emission.ok()) << emission.status();
  int ropes = 0, attentions = 0;
  for (int i = 0; i < model.meta.program().ops_size(); ++i) {
    const plan::Op &op = model.meta.program().ops(i);
    const std::vector<int32_t> &kernels = emission->opKernels[i];
    if (op.kind() == plan::ROPE) {
      ++ropes;
      EXPECT_TRUE(kernels.empty()) << "op " << i;
    } else if (op.kind() == plan::ATTENTION) {
      ++attentions;
      ASSERT_EQ(kernels.size(), 4u);
      const std::string names[] = {"llmc_kv_write_12_rope_f32", "llmc_attention_4x2x6_rope_f32",
                                   "llmc_attention_combine_", "llmc_attention_prefill_4x2x6_rope"};
      for (int k = 0; k < 4; ++k)
        EXPECT_TRUE(absl::StartsWith(emission->kernels[kernels[k]].info.name(), names[k]))
            << emission->kernels[kernels[k]].info.name();
    } else if (op.kind() == plan::LOGITS) {
      ASSERT_EQ(kernels.size(), 2u);
      EXPECT_TRUE(
          absl::StartsWith(emission->kernels[kernels[1]].info.name(), "llmc_logits_top40_"));
    }
  }
  EXPECT_EQ(ropes, 2 * attentions);
  EXPECT_GT(attentions, 0);
  const std::string source = emission->moduleSource();
  EXPECT_TRUE(absl::StrContains(source, "llmc::attentionPrefill<4, 2, 6, 0, true, float>"))
      << source;
  EXPECT_TRUE(
      absl::StrContains(source, "llmc::writeKvCache<12, 6, true, float>(p, llmc_rope_table_"));
  // A 16-bit cache changes the element type of the cache kernels.
  plan::PlanMeta halfCache = model.meta;
  halfCache.mutable_kv_cache()->set_dtype(plan::F16);
  auto halfEmission = emitCuda(halfCache);
  ASSERT_TRUE(halfEmission.ok());
  EXPECT_TRUE(
      absl::StrContains(halfEmission->moduleSource(), "llmc::writeKvCache<12, 6, true, __half>"));
  // An int8 cache: codes of llmc::i8 (scales beside them, KernelLibrary.cuh) in every kernel
  // that touches the cache.
  plan::PlanMeta int8Cache = model.meta;
  int8Cache.mutable_kv_cache()->set_dtype(plan::I8);
  auto int8Emission = emitCuda(int8Cache);
  ASSERT_TRUE(int8Emission.ok()) << int8Emission.status();
  const std::string int8Source = int8Emission->moduleSource();
  EXPECT_TRUE(absl::StrContains(int8Source, "llmc::writeKvCache<12, 6, true, llmc::i8>"));
  EXPECT_TRUE(absl::StrContains(int8Source, "llmc::attentionPrefill<4, 2, 6, 0, true, llmc::i8>"));
  EXPECT_TRUE(absl::StrContains(int8Source, ", true, llmc::i8>(p, 0x")); // attentionSplit
}

// The cost model (docs/cuda.md's tables) on hand-checkable numbers: the fused q/k/v matmul of
// the tiny model (K 24, N 24 + 12 + 12, f16) and the attention kernels each step size picks.
TEST(CostModelTest, CountsWhatEachChosenKernelMoves) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  const plan::PlanMeta meta = llmrt::testing::BuildTinyLlama(options).meta;
  auto find = [](const std::vector<KernelCost> &rows,
                 const std::string &kind) -> const KernelCost * {
    for (const KernelCost &row : rows)
      if (absl::StrContains(row.what, kind))
        return &row;
    return nullptr;
  };
  auto decode = estimateStep(meta, 1, 16);
  ASSERT_TRUE(decode.ok()) << decode.status();
  const KernelCost *gemv = find(*decode, "gemv_24x48_f16");
  ASSERT_NE(gemv, nullptr);
  EXPECT_EQ(gemv->count, 2); // one per layer
  EXPECT_DOUBLE_EQ(gemv->bytes, 48 * 24 * 2 + 24 * 4 + 48 * 4);
  EXPECT_DOUBLE_EQ(gemv->flops, 2 * 48 * 24);
  EXPECT_NE(find(*decode, "attention_combine"), nullptr);
  EXPECT_EQ(find(*decode, "attention_prefill"), nullptr);
  EXPECT_EQ(find(*decode, "rope: "), nullptr); // fused into kv_write and attention
  auto prefill = estimateStep(meta, 100, 100);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const KernelCost *gemm = find(*prefill, "gemm_mma_24x48_f16");
  ASSERT_NE(gemm, nullptr);
  // Weights once per 64-token tile (2 tiles), activations once (L2 serves the re-reads).
  EXPECT_DOUBLE_EQ(gemm->bytes, 2 * 48 * 24 * 2 + 100 * 24 * 4 + 100 * 48 * 4);
  EXPECT_DOUBLE_EQ(gemm->flops, 2 * 2 * 100 * 48 * 24);
  EXPECT_TRUE(gemm->mma);
  EXPECT_NE(find(*prefill, "attention_prefill"), nullptr);
  EXPECT_EQ(find(*prefill, "attention_combine"), nullptr);
  // kv_write of one token (12 = 2 kv heads x 6): reads k and v in f32, writes the cache in its
  // dtype; an int8 cache writes 1-byte codes and one f32 scale per kv head.
  const KernelCost *write = find(*decode, "kv_write_12_rope_f32");
  ASSERT_NE(write, nullptr);
  EXPECT_DOUBLE_EQ(write->bytes, 12 * (2 * 4 + 2 * 4));
  plan::PlanMeta int8Meta = meta;
  int8Meta.mutable_kv_cache()->set_dtype(plan::I8);
  auto int8Decode = estimateStep(int8Meta, 1, 16);
  ASSERT_TRUE(int8Decode.ok()) << int8Decode.status();
  const KernelCost *int8Write = find(*int8Decode, "kv_write_12_rope_i8");
  ASSERT_NE(int8Write, nullptr);
  EXPECT_DOUBLE_EQ(int8Write->bytes, 12 * 2 * 4 + 2 * (12 * 1 + 2 * 4));
  auto table = costTable(meta, 1, 16);
  ASSERT_TRUE(table.ok());
  EXPECT_TRUE(absl::StrContains(*table, "| H200 | A100 |")) << *table;
}

// Expert matmuls read only the step's distinct experts: E (1 - (1 - k/E)^T) of them under
// uniform routing (an int4 stack of 64 experts, top-8, [128, 256] each with f16 scales per 32).
TEST(CostModelTest, ExpertMatmulsMoveTheDistinctExpertsBytes) {
  const ExpertQuantCase c{plan::I4, false, 32, 64, 8, 256, 128, false};
  const plan::PlanMeta meta = expertMeta(c);
  const double perExpert = 128 * 256 / 2 + 128 * (256 / 32) * 2;
  auto find = [](const std::vector<KernelCost> &rows, const std::string &kind) {
    for (const KernelCost &row : rows)
      if (absl::StrContains(row.what, kind))
        return row;
    ADD_FAILURE() << "no row " << kind;
    return KernelCost();
  };
  for (int tokens : {1, 4}) {
    auto step = estimateStep(meta, tokens, tokens);
    ASSERT_TRUE(step.ok()) << step.status();
    const double distinct = 64 * (1 - std::pow(1 - 8.0 / 64, tokens));
    const KernelCost gemv = find(*step, "expert_gemv_64x256x128_i4g32");
    EXPECT_NEAR(gemv.bytes, distinct * perExpert + (256.0 + 8 * 128) * tokens * 4, 1e-6);
    EXPECT_DOUBLE_EQ(gemv.flops, 2.0 * tokens * 8 * 128 * 256);
    EXPECT_NE(find(*step, "router").what, "");
    EXPECT_NE(find(*step, "grouping").what, "");
  }
  auto prefill = estimateStep(meta, 100, 100);
  ASSERT_TRUE(prefill.ok()) << prefill.status();
  const double distinct = 64 * (1 - std::pow(1 - 8.0 / 64, 100));
  const KernelCost gemm = find(*prefill, "expert_gemm_mma_64x256x128_i4g32");
  // 800 routed rows over ~64 experts: one 64-row tile each.
  EXPECT_NEAR(gemm.bytes, distinct * perExpert + (256.0 + 8 * 128) * 100 * 4, 1e-6);
  EXPECT_DOUBLE_EQ(gemm.flops, 3 * 2.0 * 800 * 128 * 256); // three activation parts
  EXPECT_TRUE(gemm.mma);
}

TEST(EmitCudaTest, RefusesAnOpWithoutKernel) {
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama({});
  model.meta.mutable_program()->mutable_ops(1)->set_kind(plan::OP_UNSPECIFIED);
  auto emission = emitCuda(model.meta);
  ASSERT_FALSE(emission.ok());
  EXPECT_TRUE(absl::StrContains(emission.status().message(), "program op 1")) << emission.status();
}

TEST(PtxasReportTest, ReadsRegistersSpillsAndSharedMemory) {
  CompiledCode code;
  parsePtxasReport("ptxas info    : Compiling entry function 'k' for 'sm_80'\n"
                   "ptxas         .     8 bytes stack frame, 12 bytes spill stores, 4 bytes spill "
                   "loads\n"
                   "ptxas info    : Used 72 registers, used 1 barriers, 7680 bytes smem, 560 "
                   "bytes cmem[0]\n",
                   code);
  EXPECT_EQ(code.registers, 72);
  EXPECT_EQ(code.spillStoreBytes, 12);
  EXPECT_EQ(code.spillLoadBytes, 4);
  EXPECT_EQ(code.sharedBytes, 7680);
}

class NvrtcTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (nvrtcVersion().empty())
      GTEST_SKIP() << "llmc was built without NVRTC (no CUDA toolkit at configure time)";
  }
};

// The CI check of issue 7: every kernel, every target, no spills in any (all are hot).
TEST_F(NvrtcTest, EveryKernelCompilesForEveryTargetWithoutSpills) {
  const std::string cache = ::testing::TempDir() + "/nvrtc_cache_all";
  for (const plan::PlanMeta &meta : models()) {
    auto emission = emitCuda(meta);
    ASSERT_TRUE(emission.ok()) << emission.status();
    std::vector<CompileRequest> requests;
    for (const char *target : {"sm_80", "sm_90", "compute_90"})
      for (size_t i = 0; i < emission->kernels.size(); ++i)
        requests.push_back({emission->kernelSource(i), emission->kernels[i].info.name(), target});
    auto compiled = compileAll(requests, cache, 0);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    for (size_t i = 0; i < requests.size(); ++i) {
      const CompiledCode &code = (*compiled)[i];
      SCOPED_TRACE(requests[i].entry + " for " + requests[i].target);
      ASSERT_FALSE(code.code.empty());
      if (requests[i].target == "compute_90") {
        EXPECT_TRUE(absl::StrContains(code.code, ".entry " + requests[i].entry));
        continue;
      }
      EXPECT_EQ(code.code.substr(0, 4), "\x7f"
                                        "ELF");
      EXPECT_GT(code.registers, 0);
      EXPECT_EQ(code.spillStoreBytes, 0);
      EXPECT_EQ(code.spillLoadBytes, 0);
      // Printed for the log: what ptxas made of each kernel.
      std::printf("%-12s %-56s %3d registers %6d bytes smem\n", requests[i].target.c_str(),
                  requests[i].entry.c_str(), code.registers, code.sharedBytes);
    }
  }
}

TEST_F(NvrtcTest, IdenticalKernelsCompileOnceAndTheCacheServesTheSecondCompile) {
  const std::string cache = ::testing::TempDir() + "/nvrtc_cache_reuse";
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::BF16;
  options.seed = 99; // weights differ, kernels do not
  auto emission = emitCuda(llmrt::testing::BuildTinyLlama(options).meta);
  ASSERT_TRUE(emission.ok());
  std::vector<CompileRequest> requests = {
      {emission->kernelSource(0), emission->kernels[0].info.name(), "sm_86"},
      {emission->kernelSource(0), emission->kernels[0].info.name(), "sm_86"}};
  auto first = compileAll(requests, cache, 2);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*first)[0].code, (*first)[1].code);
  auto second = compileAll(requests, cache, 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)[0].fromCache);
  EXPECT_EQ((*second)[0].code, (*first)[0].code);
  EXPECT_EQ((*second)[0].registers, (*first)[0].registers);
}

TEST_F(NvrtcTest, AKernelThatDoesNotCompileStopsWithNvrtcsLog) {
  auto compiled = compileAll(
      {{"extern \"C\" __global__ void broken() { undeclared_name(); }", "broken", "sm_80"}}, "", 1);
  ASSERT_FALSE(compiled.ok());
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "broken")) << compiled.status();
  EXPECT_TRUE(absl::StrContains(compiled.status().message(), "undeclared_name"))
      << compiled.status();
}

TEST_F(NvrtcTest, KernelTablesAndCodeGoIntoThePlan) {
  llmrt::testing::TinyLlamaOptions options;
  options.weight_dtype = plan::F16;
  llmrt::testing::TinyLlama model = llmrt::testing::BuildTinyLlama(options);
  const std::string path = ::testing::TempDir() + "/cuda_tables.plan";
  auto writer = plan::PlanWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  // The model's own weights first, as the pipeline writes them.
  for (int i = 0; i < model.meta.tensors_size(); ++i) {
    auto range = (*writer)->AddBlob(model.blobs[i].data(), model.blobs[i].size());
    ASSERT_TRUE(range.ok());
    model.meta.mutable_tensors(i)->set_offset(range->offset);
    model.meta.mutable_tensors(i)->set_checksum(range->checksum);
  }
  CudaTargetOptions cudaOptions;
  cudaOptions.smVersions = {90, 80, 80};
  cudaOptions.cacheDir = ::testing::TempDir() + "/nvrtc_cache_plan";
  ASSERT_TRUE(addCudaKernelTables(model.meta, **writer, cudaOptions).ok());
  ASSERT_TRUE((*writer)->Finish(model.meta).ok());

  auto opened = plan::Plan::Open(path, plan::PlanOpenOptions{true});
  ASSERT_TRUE(opened.ok()) << opened.status();
  const plan::PlanMeta &meta = (*opened)->meta();
  std::vector<std::string> targets;
  for (const plan::KernelTable &table : meta.program().kernel_tables())
    targets.push_back(table.target());
  EXPECT_EQ(targets, (std::vector<std::string>{"cuda:sm_80", "cuda:sm_90", "cuda:compute_90"}));
  for (const plan::KernelTable &table : meta.program().kernel_tables()) {
    EXPECT_EQ(table.op_kernels_size(), meta.program().ops_size());
    EXPECT_EQ(table.compiler_version(), nvrtcVersion());
    for (const plan::KernelTable::Kernel &kernel : table.kernels()) {
      SCOPED_TRACE(table.target() + " " + kernel.name());
      ASSERT_GE(kernel.code_tensor(), 0);
      const std::string code(reinterpret_cast<const char *>((*opened)->blob(kernel.code_tensor())),
                             kernel.code_size());
      if (table.target() == "cuda:compute_90") {
        EXPECT_TRUE(absl::StrContains(code, ".entry " + kernel.name()));
      } else {
        EXPECT_EQ(code.substr(0, 4), "\x7f"
                                     "ELF");
        EXPECT_GT(kernel.registers(), 0);
      }
      EXPECT_GT(kernel.block_x(), 0u);
    }
  }
}

} // namespace
} // namespace llmc::cuda
