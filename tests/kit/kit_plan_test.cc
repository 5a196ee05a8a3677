// llmrt-kit plan strip / fill (kit_plan.cc) on mixture-of-experts plans, the kit's way of
// carrying MoE-shaped synthetic models: llmc compiles a transformers fixture, the built
// llmrt-kit strips it (--min-bytes 512, so the fixtures' small expert stacks count as bulk) and
// fills it again, and the test checks the result as the kit's run.sh and a lent GPU would use
// it:
//   - the skeleton is small: it lacks every expert stack, quantization companion and router
//     matrix of the plan (plan size minus their bytes bounds its size);
//   - the filled plan opens with every blob checksum verified and plan::CheckProgram accepts
//     it with its blobs (shapes, layouts, zero points 0..15, no E8M0 NaN scale);
//   - what was kept is byte for byte the original; what was stripped is drawn in the ranges
//     kit_plan.cc documents (E8M0 scales 119 / 120, I8 codes never -128, zero points <= 15,
//     floats within +-0.0346) and differs from the original;
//   - the CPU backend runs a prompt on it with finite, non-constant logits, and its routers
//     spread the prompt's tokens over more experts than one token chooses (the expert load);
//   - the same seed fills the same plan.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/program_check.h"
#include "tests/e2e/test_util.h"

namespace llmc::testing {
namespace {

constexpr uint64_t kMinBytes = 512;
constexpr float kWeightRange = 0.0346f;  // kit_plan.cc's uniform float range

struct Case {
  const char* name;
  const char* fixture;
  const char* flags;  // llmc compile flags
  // Whether random weights spread a prompt over more experts than one token chooses. Not where
  // the fixture has attention biases: those 1-D vectors are kept (|b| ~ 0.4 against random
  // weights of 0.02), so every token's hidden state shares one large component and the
  // routers pick the same experts for all of them. The synthetic presets the kit strips have
  // no such biases (llmrt-kit bench prints their active experts per layer).
  bool spreads;
};

// Every dtype an expert stack takes: f16 / bf16 / f32 floats, I8 and I4 (symmetric and with
// zero points) codes with f16 scales, MXFP4 codes with E8M0 scales (imported and quantized
// here); routers with and without bias, a shared expert.
const Case kCases[] = {
    {"qwen3_moe_f16", "qwen3_moe", "--dtype f16"},
    {"mixtral_moe_bf16", "mixtral_moe", "--dtype bf16 --kv-cache f32"},
    {"qwen2_moe_shared_f32_int8_g32", "qwen2_moe_shared",
     "--dtype f32 --quant int8 --group-size 32"},
    {"qwen3_moe_int4_g32_asym", "qwen3_moe",
     "--dtype f32 --quant int4 --group-size 32 --scheme asymmetric"},
    {"mixtral_moe_mxfp4", "mixtral_moe", "--dtype f32 --quant mxfp4"},
    {"gpt_oss_mxfp4", "gpt_oss_mxfp4", "--dtype f32"},
};

// Test names and failure messages show the case's name, not its bytes.
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

uint64_t FileSize(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
}

std::unique_ptr<llmrt::plan::Plan> OpenVerified(const std::string& path) {
  llmrt::plan::PlanOpenOptions options;
  options.verify_blob_checksums = true;
  absl::StatusOr<std::unique_ptr<llmrt::plan::Plan>> plan = llmrt::plan::Plan::Open(path, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *std::move(plan) : nullptr;
}

// The tensors that are MoE bulk: every EXPERT_MATMUL's weights with their quantization
// companions and biases, and the router matrices (the matrix weights of the ops whose outputs the
// ROUTER ops read: the router logits).
std::set<int> MoeTensors(const llmrt::plan::PlanMeta& meta, std::set<int>& routers) {
  std::set<int32_t> router_inputs;
  for (const llmrt::plan::Op& op : meta.program().ops()) {
    if (op.kind() == llmrt::plan::ROUTER) router_inputs.insert(op.inputs(0));
  }
  std::set<int> tensors;
  for (const llmrt::plan::Op& op : meta.program().ops()) {
    const bool router = op.outputs_size() > 0 && router_inputs.count(op.outputs(0)) > 0;
    if (op.kind() != llmrt::plan::EXPERT_MATMUL && !router) continue;
    for (int32_t index : op.weights()) {
      if (meta.tensors(index).shape_size() < 2) continue;  // a router's bias: a kept vector
      tensors.insert(index);
      if (router) routers.insert(index);
      const llmrt::plan::Quantization& q = meta.tensors(index).quantization();
      if (q.has_scales()) tensors.insert(q.scales());
      if (q.has_zero_points()) tensors.insert(q.zero_points());
    }
  }
  return tensors;
}

class KitPlanMoeTest : public ::testing::TestWithParam<Case> {};

TEST_P(KitPlanMoeTest, StripFillRoundTrip) {
  const Case& c = GetParam();
  const std::string dir = MakeScratchDir(std::string("kit_plan_") + c.name);
  const std::string plan_path = dir + "/original.plan", skeleton = dir + "/plan.skel";
  const std::string filled_path = dir + "/filled.plan", again_path = dir + "/again.plan";
  CommandResult compiled = RunCommand(ToolPath("llmc") + " compile " +
                                      SourcePath(std::string("tests/fixtures/") + c.fixture) +
                                      " -o " + plan_path + " -q " + c.flags);
  ASSERT_EQ(compiled.exit_code, 0) << compiled.error;
  const std::string kit = ToolPath("llmrt-kit");
  CommandResult stripped = RunCommand(kit + " plan strip " + plan_path + " " + skeleton +
                                      " --min-bytes " + std::to_string(kMinBytes));
  ASSERT_EQ(stripped.exit_code, 0) << stripped.error;
  for (const std::string& out : {filled_path, again_path}) {
    CommandResult filled = RunCommand(kit + " plan fill " + skeleton + " " + out + " --seed 7");
    ASSERT_EQ(filled.exit_code, 0) << filled.error;
  }

  std::unique_ptr<llmrt::plan::Plan> original = OpenVerified(plan_path);
  std::unique_ptr<llmrt::plan::Plan> filled = OpenVerified(filled_path);
  std::unique_ptr<llmrt::plan::Plan> again = OpenVerified(again_path);
  ASSERT_TRUE(original && filled && again);
  const llmrt::plan::PlanMeta& meta = filled->meta();
  ASSERT_EQ(meta.tensors_size(), original->meta().tensors_size());

  // Small: none of the MoE bulk travels.
  std::set<int> routers;
  const std::set<int> moe = MoeTensors(meta, routers);
  std::set<int> scales;
  for (const llmrt::plan::Tensor& tensor : meta.tensors()) {
    if (tensor.quantization().has_scales()) scales.insert(tensor.quantization().scales());
  }
  uint64_t moe_bytes = 0;
  bool has_expert_stack = false;
  for (int index : moe) {
    const llmrt::plan::Tensor& tensor = meta.tensors(index);
    ASSERT_GE(tensor.size_bytes(), kMinBytes) << tensor.name() << ": the fixture is too small";
    moe_bytes += tensor.size_bytes();
    has_expert_stack |= tensor.shape_size() == 3;
  }
  EXPECT_TRUE(has_expert_stack);
  EXPECT_FALSE(routers.empty());
  EXPECT_LT(FileSize(skeleton), original->file_size() - moe_bytes);

  // Valid, and what kit_plan.cc promises tensor by tensor.
  const llmrt::plan::Plan* plan = filled.get();
  const llmrt::BlobLookup blobs = [plan](int index) { return plan->blob(index); };
  absl::StatusOr<llmrt::plan::ProgramFacts> facts = llmrt::plan::CheckProgram(meta, blobs);
  ASSERT_TRUE(facts.ok()) << facts.status();
  ASSERT_GT(facts->num_routers, 0);
  for (int index = 0; index < meta.tensors_size(); ++index) {
    const llmrt::plan::Tensor& tensor = meta.tensors(index);
    SCOPED_TRACE(tensor.name());
    const uint8_t* bytes = filled->blob(index);
    const uint8_t* before = original->blob(index);
    const size_t size = tensor.size_bytes();
    EXPECT_EQ(std::memcmp(bytes, again->blob(index), size), 0) << "the same seed differs";
    const bool bulk = moe.count(index) > 0;
    if (size < kMinBytes) {
      EXPECT_EQ(std::memcmp(bytes, before, size), 0) << "a kept blob changed";
      continue;
    }
    if (bulk) EXPECT_NE(std::memcmp(bytes, before, size), 0) << "not drawn afresh";
    switch (tensor.dtype()) {
      case llmrt::plan::E8M0:
        for (size_t i = 0; i < size; ++i) ASSERT_TRUE(bytes[i] == 119 || bytes[i] == 120) << i;
        break;
      case llmrt::plan::I8:
        for (size_t i = 0; i < size; ++i) ASSERT_NE(bytes[i], 0x80) << i;
        break;
      case llmrt::plan::U8:
        for (size_t i = 0; i < size; ++i) ASSERT_LE(bytes[i], 15) << i;
        break;
      case llmrt::plan::F32:
      case llmrt::plan::F16:
      case llmrt::plan::BF16: {
        // 1-D vectors are kept; f16 quantization scales have a range of their own.
        if (tensor.shape_size() < 2 || scales.count(index) > 0) break;
        const size_t element = tensor.dtype() == llmrt::plan::F32 ? 4 : 2;
        for (size_t i = 0; i < size / element; ++i) {
          float value;
          if (element == 4) {
            std::memcpy(&value, bytes + 4 * i, 4);
          } else {
            uint16_t half;
            std::memcpy(&half, bytes + 2 * i, 2);
            value = tensor.dtype() == llmrt::plan::F16 ? llmrt::plan::F16ToF32(half)
                                                       : llmrt::plan::Bf16ToF32(half);
          }
          ASSERT_LE(std::fabs(value), kWeightRange * 1.01f) << i;
        }
        break;
      }
      default:
        break;
    }
  }

  // A CPU forward: finite logits, and routing that spreads the prompt over the experts.
  llmrt::BackendOptions options;
  options.max_tokens_per_step = 16;
  options.num_threads = 1;
  options.record_expert_load = true;
  absl::StatusOr<std::unique_ptr<llmrt::Backend>> backend =
      llmrt::cpu::CreateCpuBackend(meta, blobs, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*backend)->AllocateKvCache(1, 16).ok());
  llmrt::StepBatch batch;
  const int32_t block = 0;
  llmrt::StepSequence sequence;
  sequence.num_tokens = 12;
  sequence.context_length = 12;
  sequence.block_table = &block;
  sequence.num_blocks = 1;
  batch.sequences.push_back(sequence);
  for (int32_t i = 0; i < sequence.num_tokens; ++i) {
    batch.token_ids.push_back(static_cast<int32_t>((1 + 37 * i) % (*backend)->vocab_size()));
    batch.positions.push_back(i);
    batch.slot_mapping.push_back(i);
    batch.logit_rows.push_back(i);
  }
  std::vector<float> logits(batch.logit_rows.size() * (*backend)->vocab_size());
  ASSERT_TRUE((*backend)->RunStep(batch, logits.data()).ok());
  std::set<float> distinct;
  for (float logit : logits) {
    ASSERT_TRUE(std::isfinite(logit));
    distinct.insert(logit);
  }
  EXPECT_GT(distinct.size(), logits.size() / 2);
  llmrt::ExpertLoad load;
  ASSERT_TRUE((*backend)->LastStepExpertLoad(load).ok());
  int32_t top_k = 0;
  for (const llmrt::plan::Op& op : meta.program().ops()) {
    if (op.kind() == llmrt::plan::ROUTER) top_k = op.router().top_k();
  }
  ASSERT_EQ(load.num_routers, facts->num_routers);
  if (!c.spreads) return;
  for (int32_t r = 0; r < load.num_routers; ++r) {
    int32_t chosen = 0;
    for (int32_t e = 0; e < load.num_experts; ++e)
      chosen += load.counts[r * load.num_experts + e] > 0;
    EXPECT_GT(chosen, top_k) << "router " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Moe, KitPlanMoeTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace llmc::testing
