// plan::CheckProgram's rules for the MoE ops, MXFP4 weights and attention sinks (plan format
// 2.1): one case per rule, each checking that the error names the op and the field.
#include "runtime/plan/program_check.h"

#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/backend/testing/op_program.h"

namespace llmrt::plan {
namespace {

using ::llmrt::testing::OpProgram;
using ::testing::HasSubstr;

constexpr int32_t kExperts = 8, kTopK = 2, kHidden = 64, kInner = 32;

// Value and tensor ids of the valid MoE block BuildMoe writes.
struct Moe {
  int32_t logits, x, ids, weights, gate_up, act, down, combined, w_gate_up, w_down, bias;
  int32_t router_op = 2, gate_up_op = 3, down_op = 5, combine_op = 6;
};

// logits, x -> ROUTER -> EXPERT_MATMUL gate/up (+ bias) -> CLAMPED_SWIGLU -> EXPERT_MATMUL down
// -> MOE_COMBINE (+ shared expert and gate) -> LOGITS. `dtype` is the expert weights'.
Moe BuildMoe(OpProgram& p, DType dtype = F32) {
  Moe m;
  m.logits = p.Input(kExperts);
  m.x = p.Input(kHidden);
  std::tie(m.ids, m.weights) = p.Router(m.logits, kExperts, kTopK, RouterAttrs::SOFTMAX_TOPK, true);
  m.gate_up = p.Activation(kTopK * kInner);
  const int32_t up = p.Activation(kTopK * kInner);
  m.w_gate_up = p.ExpertMatrix(dtype, kExperts, 2 * kInner, kHidden, 32);
  m.bias = p.FloatTensor(F32, {kExperts, 2 * kInner}, 1.0f);
  ExpertAttrs* expert = p.AddOp(EXPERT_MATMUL, {m.x, m.ids}, {m.gate_up, up}, {m.w_gate_up, m.bias})
                            ->mutable_expert();
  expert->set_num_experts(kExperts);
  expert->set_top_k(kTopK);
  m.act = p.Activation(kTopK * kInner);
  SwigluAttrs* swiglu = p.AddOp(CLAMPED_SWIGLU, {m.gate_up, up}, {m.act}, {})->mutable_swiglu();
  swiglu->set_alpha(1.702);
  swiglu->set_limit(7.0);
  m.down = p.Activation(kTopK * kHidden);
  m.w_down = p.ExpertMatrix(dtype, kExperts, kHidden, kInner, 32);
  expert = p.AddOp(EXPERT_MATMUL, {m.act, m.ids}, {m.down}, {m.w_down})->mutable_expert();
  expert->set_num_experts(kExperts);
  expert->set_top_k(kTopK);
  m.combined = p.Activation(kHidden);
  const int32_t shared = p.Input(kHidden), shared_gate = p.Input(1);
  p.AddOp(MOE_COMBINE, {m.down, m.weights, shared, shared_gate}, {m.combined}, {});
  p.ReadOut(m.combined);
  // Input() added two EMBEDs after the ROUTER's; the ops are in program order: EMBED logits,
  // EMBED x, ROUTER, EXPERT_MATMUL, CLAMPED_SWIGLU, EXPERT_MATMUL, EMBED, EMBED, MOE_COMBINE.
  m.combine_op = 8;
  return m;
}

std::string Check(const PlanMeta& meta, const BlobLookup& blobs = nullptr) {
  auto facts = CheckProgram(meta, blobs);
  return facts.ok() ? "" : std::string(facts.status().message());
}

TEST(ProgramCheckMoeTest, ValidBlockPassesAndReportsFacts) {
  for (DType dtype : {F32, F16, I8, I4, FP4_E2M1}) {
    OpProgram p(3);
    BuildMoe(p, dtype);
    auto facts = CheckProgram(p.meta(), p.Lookup());
    ASSERT_TRUE(facts.ok()) << DType_Name(dtype) << ": " << facts.status();
    EXPECT_EQ(facts->num_routers, 1);
    EXPECT_EQ(facts->max_experts, kExperts);
    EXPECT_EQ(facts->max_top_k, kTopK);
  }
}

struct Rule {
  const char* name;
  std::function<void(PlanMeta&, const Moe&)> mutate;
  std::vector<const char*> expected;  // substrings of the message
};

TEST(ProgramCheckMoeTest, EachRuleIsRefusedByName) {
  auto op = [](PlanMeta& meta, int index) { return meta.mutable_program()->mutable_ops(index); };
  const std::vector<Rule> rules = {
      {"top_k 0",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.router_op)->mutable_router()->set_top_k(0); },
       {"program op 2 (ROUTER)", "router.top_k 0"}},
      {"top_k > E",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.router_op)->mutable_router()->set_top_k(9); },
       {"router.top_k 9", "router.num_experts 8"}},
      {"E > 1024",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.router_op)->mutable_router()->set_num_experts(1025);
       },
       {"router.num_experts 1025", "<= 1024"}},
      {"scoring unset",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.router_op)->mutable_router()->set_scoring(RouterAttrs::SCORING_UNSPECIFIED);
       },
       {"router.scoring"}},
      {"normalize with TOPK_SOFTMAX",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.router_op)->mutable_router()->set_scoring(RouterAttrs::TOPK_SOFTMAX);
       },
       {"router.normalize", "TOPK_SOFTMAX"}},
      {"logits width",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.router_op)->set_inputs(0, m.x); },
       {"input 0 (logits) has width 64", "router.num_experts 8"}},
      {"ids of the wrong kind",
       [&](PlanMeta& meta, const Moe& m) {
         meta.mutable_program()->mutable_values(m.ids)->set_kind(Value::ACTIVATION);
         meta.mutable_program()->mutable_values(m.ids)->set_dtype(F32);
       },
       {"output 0 (ids", "EXPERT_IDS"}},
      {"ids of dtype f32",
       [&](PlanMeta& meta, const Moe& m) {
         meta.mutable_program()->mutable_values(m.ids)->set_dtype(F32);
       },
       {"expert ids are I32"}},
      {"router attrs missing",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.router_op)->clear_attrs(); },
       {"carries attributes none, its kind needs router"}},
      {"ids not from a ROUTER",
       [&](PlanMeta& meta, const Moe& m) {
         // The router writes a fresh EXPERT_IDS value; the experts read the old one.
         Value* fresh = meta.mutable_program()->add_values();
         *fresh = meta.program().values(m.ids);
         op(meta, m.router_op)->set_outputs(0, meta.program().values_size() - 1);
       },
       {"program op 3 (EXPERT_MATMUL)", "input 1 (ids", "not output 0 of an earlier ROUTER"}},
      {"num_experts differs from the router's",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.gate_up_op)->mutable_expert()->set_num_experts(4);
       },
       {"expert.num_experts 4", "ROUTER"}},
      {"top_k differs from the ids",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.gate_up_op)->mutable_expert()->set_top_k(1);
       },
       {"expert.top_k 1"}},
      {"2-D expert weight",
       [&](PlanMeta& meta, const Moe& m) {
         Tensor* w = meta.mutable_tensors(m.w_gate_up);
         w->clear_shape();
         w->add_shape(kExperts * 2 * kInner);
         w->add_shape(kHidden);
       },
       {"expected [8, N, K]"}},
      {"x width neither K nor top_k K",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.gate_up_op)->set_inputs(0, m.logits); },
       {"input 0 (x) has width 8", "expected K 64"}},
      {"output width not a multiple of top_k",
       [&](PlanMeta& meta, const Moe& m) {
         meta.mutable_program()->mutable_values(m.gate_up)->set_width(kTopK * kInner + 1);
       },
       {"output 0 has width 65, not a multiple of top_k 2"}},
      {"outputs' N differ from the weight's",
       [&](PlanMeta& meta, const Moe& m) {
         meta.mutable_program()->mutable_values(m.gate_up)->set_width(kTopK * (kInner + 1));
       },
       {"has shape [8, 64, 64], expected [8, 65, 64]"}},
      {"bias shape",
       [&](PlanMeta& meta, const Moe& m) { meta.mutable_tensors(m.bias)->set_shape(1, 63); },
       {"expected F32 [8, 64]"}},
      {"output overlaps an input",
       [&](PlanMeta& meta, const Moe& m) {
         meta.mutable_program()->mutable_values(m.down)->set_arena_offset_per_token(
             meta.program().values(m.act).arena_offset_per_token());
         meta.mutable_program()->mutable_values(m.down)->set_width(kTopK * kInner);
         meta.mutable_tensors(m.w_down)->set_shape(1, kInner);
         meta.mutable_program()->mutable_values(m.combined)->set_width(kInner);
       },
       {"program op 5 (EXPERT_MATMUL)", "shares arena bytes with input 0"}},
      {"panels straddling experts",
       [&](PlanMeta& meta, const Moe& m) {
         Tensor* w = meta.mutable_tensors(m.w_gate_up);
         w->set_layout(Tensor::ROW_PANELS);
         w->set_panel_rows(128);
       },
       {"panel_rows 128 does not divide its 64 rows per expert"}},
      {"combine with 3 inputs",
       [&](PlanMeta& meta, const Moe& m) {
         op(meta, m.combine_op)->mutable_inputs()->RemoveLast();
       },
       {"program op 8 (MOE_COMBINE)", "got 3"}},
      {"combine y width",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.combine_op)->set_inputs(0, m.act); },
       {"input 0 (y) has width 64, expected 128"}},
      {"combine shared gate width",
       [&](PlanMeta& meta, const Moe& m) { op(meta, m.combine_op)->set_inputs(3, m.weights); },
       {"input 3 (shared_gate) has width 2, expected 1"}},
      {"swiglu alpha 0",
       [&](PlanMeta& meta, const Moe& m) { op(meta, 4)->mutable_swiglu()->set_alpha(0.0); },
       {"program op 4 (CLAMPED_SWIGLU)", "swiglu.alpha must be finite and > 0"}},
      {"swiglu limit inf",
       [&](PlanMeta& meta, const Moe& m) { op(meta, 4)->mutable_swiglu()->set_limit(INFINITY); },
       {"swiglu.limit must be finite and > 0"}},
  };
  for (const Rule& rule : rules) {
    OpProgram p(3);
    const Moe m = BuildMoe(p);
    PlanMeta meta = p.meta();
    rule.mutate(meta, m);
    const std::string message = Check(meta);
    ASSERT_NE(message, "") << rule.name << " was accepted";
    for (const char* part : rule.expected) {
      EXPECT_THAT(message, HasSubstr(part)) << rule.name;
    }
  }
}

TEST(ProgramCheckMoeTest, QuantizedExpertCompanionsAre3D) {
  OpProgram p(3);
  const Moe m = BuildMoe(p, I4);
  PlanMeta meta = p.meta();
  Tensor* scales = meta.mutable_tensors(meta.tensors(m.w_gate_up).quantization().scales());
  scales->clear_shape();
  scales->add_shape(kExperts * 2 * kInner);
  scales->add_shape(kHidden / 32);
  EXPECT_THAT(Check(meta), HasSubstr("quantization.scales is tensor"));
  EXPECT_THAT(Check(meta), HasSubstr("expected [8, 64, 2] f16"));
}

TEST(ProgramCheckMoeTest, ExpertWeightsRefuseAPermutation) {
  OpProgram p(3);
  const Moe m = BuildMoe(p, I8);
  PlanMeta meta = p.meta();
  meta.mutable_tensors(m.w_gate_up)->mutable_quantization()->set_input_permutation(m.bias);
  EXPECT_THAT(Check(meta), HasSubstr("quantization.input_permutation is set"));
}

TEST(ProgramCheckMoeTest, Mxfp4Rules) {
  struct Case {
    const char* name;
    std::function<void(PlanMeta&, const Moe&)> mutate;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"group 64",
       [](PlanMeta& meta, const Moe& m) {
         meta.mutable_tensors(m.w_gate_up)->mutable_quantization()->set_group_size(64);
       },
       "FP4_E2M1 needs quantization.group_size 32"},
      {"f16 scales",
       [](PlanMeta& meta, const Moe& m) {
         meta.mutable_tensors(meta.tensors(m.w_gate_up).quantization().scales())->set_dtype(F16);
       },
       "quantization.scales is tensor"},
      {"row-major codes",
       [](PlanMeta& meta, const Moe& m) {
         meta.mutable_tensors(m.w_gate_up)->set_layout(Tensor::ROW_MAJOR);
       },
       "is FP4_E2M1 in layout ROW_MAJOR, expected LANE_CHUNKS"},
      {"asymmetric",
       [](PlanMeta& meta, const Moe& m) {
         meta.mutable_tensors(m.w_gate_up)
             ->mutable_quantization()
             ->set_scheme(Quantization::ASYMMETRIC);
       },
       "quantization.scheme ASYMMETRIC is not SYMMETRIC"},
      {"bits 8",
       [](PlanMeta& meta, const Moe& m) {
         meta.mutable_tensors(m.w_gate_up)->mutable_quantization()->set_bits(8);
       },
       "quantization.bits is 8, its dtype FP4_E2M1 needs 4"},
  };
  for (const Case& c : cases) {
    OpProgram p(3);
    const Moe m = BuildMoe(p, FP4_E2M1);
    PlanMeta meta = p.meta();
    c.mutate(meta, m);
    EXPECT_THAT(Check(meta), HasSubstr(c.expected)) << c.name;
  }
}

TEST(ProgramCheckMoeTest, Mxfp4NanScaleIsRefusedWithItsPlace) {
  OpProgram p(3);
  // Block 37 of 2 blocks per row: row 18, group 1 of the [8 x 64, 2] scales.
  std::vector<uint8_t> bytes(8 * 64 * 2, 127);
  bytes[37] = 255;
  const int32_t w = p.Mxfp4Matrix(8 * 64, 64, bytes);
  const int32_t x = p.Input(64);
  const int32_t out = p.Activation(8 * 64);
  p.AddOp(MATMUL, {x}, {out}, {w});
  p.ReadOut(out);
  const std::string message = Check(p.meta(), p.Lookup());
  EXPECT_THAT(message, HasSubstr("tensor t0: quantization.scales"));
  EXPECT_THAT(message, HasSubstr("E8M0 NaN byte 255 at [18, 1]"));
  EXPECT_EQ(Check(p.meta()), "") << "without blobs the bytes are not read";
}

TEST(ProgramCheckMoeTest, Mxfp4IsRefusedOnLogitsAndEmbed) {
  OpProgram p(3);
  const int32_t x = p.Input(64);
  p.AddOp(LOGITS, {x}, {p.Logits(32)}, {p.Mxfp4Matrix(32, 64)});
  EXPECT_THAT(Check(p.meta()),
              HasSubstr("MXFP4 is for MATMUL and EXPERT_MATMUL weights, not LOGITS"));
  OpProgram q(3);
  const int32_t out = q.Activation(64);
  q.AddOp(EMBED, {q.token_ids()}, {out}, {q.Mxfp4Matrix(3, 64)});
  q.ReadOut(out);
  EXPECT_THAT(Check(q.meta()), HasSubstr("not EMBED"));
}

TEST(ProgramCheckMoeTest, AttentionSinksAreF32PerHead) {
  for (std::vector<int64_t> shape : {std::vector<int64_t>{3}, std::vector<int64_t>{4, 1}}) {
    OpProgram p(3);
    const int32_t q = p.Input(64), k = p.Input(32), v = p.Input(32);
    const int32_t out = p.Activation(64);
    AttentionAttrs* attention =
        p.AddOp(ATTENTION, {q, k, v}, {out}, {p.FloatTensor(F32, shape, 1.0f)})
            ->mutable_attention();
    attention->set_num_heads(4);
    attention->set_num_kv_heads(2);
    attention->set_head_dim(16);
    p.ReadOut(out);
    EXPECT_THAT(Check(p.meta()), HasSubstr("expected F32 [4]"));
  }
}

}  // namespace
}  // namespace llmrt::plan
