// The op conformance matrix: every plan op x every backend x every dtype and quantization the
// op accepts x shapes with odd sizes, against the scalar reference (reference_program.h).
//
// Each case is a one-op program: its inputs come from EMBED tables of random f32 rows (exact
// on every backend), the op under test runs, and a LOGITS op with an f32 identity matrix reads
// the output back (exact too), so the only error measured is the op's. A case runs its tokens
// as a prefill step followed by single-token decode steps where `steps` says so, which takes
// the GEMV, the decode-attention and the paged-KV paths as well as the batched ones.
//
// Error: max |backend - reference| / max |reference| over the output (the reference in double
// precision). The bound of each (op, dtype, backend) is in Bound() with its reason; the table
// in docs/architecture.md ("Op conformance") lists them. Backends: "cpu" (at every Highway
// target the machine runs: ctest registers the test once per LLMRT_CPU_TARGET) and
// "cuda_emulated" (the emitted CUDA kernels executed on the CPU). A backend that does not
// implement a case by design must refuse it with UNIMPLEMENTED at creation, which the case
// checks and prints; a real GPU runs the same kernels through tests/kit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "codegen/cuda/EmitCuda.h"
#include "codegen/cuda/emulation/EmulatedDevice.h"
#include "gtest/gtest.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cuda/kernel_backend.h"
#include "runtime/backend/testing/op_program.h"
#include "runtime/backend/testing/reference_program.h"
#include "runtime/backend/testing/tiny_llama.h"
#include "runtime/plan/dtype.h"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt {
namespace {

using testing::OpProgram;

constexpr int32_t kBlockSize = 16;  // KV block: attention cases cross blocks

enum class BackendKind { kCpu, kCudaEmulated };

const char* BackendName(BackendKind kind) {
  return kind == BackendKind::kCpu ? "cpu" : "cuda_emulated";
}

// One row of the matrix.
struct OpCase {
  std::string name;
  int32_t num_tokens = 5;
  // Tokens per step: {num_tokens} runs one step; {4, 1} a 4-token prefill, then a decode step.
  std::vector<int32_t> steps;
  std::vector<int32_t> positions;  // rope positions; empty: 0, 1, ...
  std::function<void(OpProgram&)> build;
  // The backends that refuse it by design (UNIMPLEMENTED at creation), with the reason.
  std::vector<BackendKind> unsupported;
  // The error bound per backend (see Bound()).
  std::function<double(BackendKind)> bound;
};

// gtest prints a failing row by its name rather than its bytes.
void PrintTo(const OpCase& c, std::ostream* out) { *out << c.name; }

// Error bounds, relative to the output's largest magnitude. The reasons:
//  - f32 arithmetic: elementwise ops and norms 1e-6 (a few roundings of 2^-24 each, exp/rsqrt
//    approximations within 4 ulp); matmuls with f32 inputs 1e-5 (K up to ~600 products summed
//    in f32 in any order: sqrt(K) * 2^-24 relative to the sum of magnitudes, which random
//    signs put within ~10x of the output's largest value).
//  - BF16 / F16 weights: the reference uses the same rounded weights, but the CPU's BF16 tier
//    (vdpbf16ps) also rounds the activations to bf16: 2^-9 per product, ~sqrt(K) * 2^-9 / K of
//    the sum after cancellation, bounded by 1e-2; F16 weights are widened and multiplied in
//    f32 (1e-5).
//  - I8 / I4 weights: the CPU quantizes activations to int8 per block of 32 (half a step of
//    max|x| / 127 per element: ~4e-3 of a dot product), bounded by 2e-2; the CUDA kernels keep
//    f32 activations against dequantized weights (1e-5).
//  - ATTENTION with a 16-bit or int8 KV cache: the keys and values are rounded when cached
//    (bf16 2^-9, f16 2^-12, int8 per-head absmax / 127 / 2), the reference keeps them exact.
double MatmulBound(plan::DType dtype, BackendKind backend) {
  switch (dtype) {
    case plan::BF16:
      return backend == BackendKind::kCpu ? 1e-2 : 1e-5;
    case plan::I8:
    case plan::I4:
    case plan::FP4_E2M1:  // as I4: the CPU quantizes the activations alike
      return backend == BackendKind::kCpu ? 2e-2 : 1e-5;
    default:
      return 1e-5;
  }
}

double KvBound(plan::DType kv) {
  switch (kv) {
    case plan::BF16:
      return 1e-2;
    case plan::F16:
      return 2e-3;
    case plan::I8:
      return 2e-2;
    default:
      return 1e-5;
  }
}

std::string DTypeTag(plan::DType dtype) {
  std::string name = plan::DType_Name(dtype);
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  return name;
}

std::vector<OpCase> Cases() {
  std::vector<OpCase> cases;
  auto constant = [](double bound) { return [bound](BackendKind) { return bound; }; };

  // Elementwise ops over widths 1 (scalar tail only), 21 (odd) and 1000 (long vectors).
  for (plan::OpKind kind :
       {plan::SILU, plan::MUL, plan::ADD, plan::SILU_MUL, plan::GELU_TANH_MUL}) {
    for (int64_t width : {1, 21, 1000}) {
      OpCase c;
      c.name = absl::StrCat(plan::OpKind_Name(kind), "_w", width);
      c.build = [kind, width](OpProgram& p) {
        const int32_t a = p.Input(width, 4.0f);
        std::vector<int32_t> inputs = {a};
        if (kind != plan::SILU) inputs.push_back(p.Input(width, 4.0f));
        const int32_t out = p.Activation(width);
        p.AddOp(kind, inputs, {out}, {});
        p.ReadOut(out);
      };
      c.bound = constant(1e-6);
      cases.push_back(c);
    }
  }

  // RMS_NORM over whole rows and per head (gamma of head_dim); FUSED_ADD_RMS_NORM's two outputs.
  for (auto [width, group] :
       {std::pair<int64_t, int64_t>{21, 21}, {131, 131}, {1024, 1024}, {64, 16}, {96, 6}}) {
    OpCase c;
    c.name = absl::StrCat("RMS_NORM_w", width, "_g", group);
    c.build = [width, group](OpProgram& p) {
      const int32_t x = p.Input(width, 3.0f);
      const int32_t out = p.Activation(width);
      p.AddOp(plan::RMS_NORM, {x}, {out}, {p.FloatTensor(plan::F32, {group}, 0.5f, 1.0f)})
          ->mutable_norm()
          ->set_eps(1e-6);
      p.ReadOut(out);
    };
    c.bound = constant(1e-6);
    cases.push_back(c);
  }
  for (int64_t width : {21, 130}) {
    for (int output : {0, 1}) {
      OpCase c;
      c.name = absl::StrCat("FUSED_ADD_RMS_NORM_w", width, output == 0 ? "_sum" : "_normed");
      c.build = [width, output](OpProgram& p) {
        const int32_t a = p.Input(width, 2.0f), b = p.Input(width, 2.0f);
        const int32_t sum = p.Activation(width), normed = p.Activation(width);
        p.AddOp(plan::FUSED_ADD_RMS_NORM, {a, b}, {sum, normed},
                {p.FloatTensor(plan::F32, {width}, 0.5f, 1.0f)})
            ->mutable_norm()
            ->set_eps(1e-5);
        p.ReadOut(output == 0 ? sum : normed);
      };
      c.bound = constant(1e-6);
      cases.push_back(c);
    }
  }

  // EMBED of every table dtype (the input rows of every other case are f32 EMBEDs too).
  struct EmbedCase {
    plan::DType dtype;
    int64_t width;
    int32_t group;
    bool asymmetric;
  };
  for (const EmbedCase& e : {EmbedCase{plan::F32, 37, 0, false},
                             {plan::F16, 37, 0, false},
                             {plan::BF16, 64, 0, false},
                             {plan::I8, 96, 32, false},
                             {plan::I8, 40, 40, false},
                             {plan::I4, 128, 64, true},
                             {plan::I4, 96, 32, false}}) {
    OpCase c;
    c.name = absl::StrCat("EMBED_", DTypeTag(e.dtype), "_w", e.width,
                          e.group ? absl::StrCat("_g", e.group) : "", e.asymmetric ? "_asym" : "");
    c.build = [e](OpProgram& p) {
      const int32_t table = e.group ? p.QuantizedMatrix(e.dtype, p.num_tokens(), e.width, e.group,
                                                        e.asymmetric, false)
                                    : p.FloatTensor(e.dtype, {p.num_tokens(), e.width}, 1.0f);
      const int32_t out = p.Activation(e.width);
      p.AddOp(plan::EMBED, {p.token_ids()}, {out}, {table});
      p.ReadOut(out);
    };
    // Rows are copied (widened or dequantized): exact up to the f16 scale's product in f32.
    c.bound = constant(1e-6);
    if (e.group) c.unsupported = {BackendKind::kCudaEmulated};
    cases.push_back(c);
  }
  // EMBED with a scale (EmbedAttrs: Gemma's sqrt(hidden)) in the table's dtype: the rounded
  // scale and products are the reference's too, so f16 / bf16 are as exact as f32.
  for (const EmbedCase& e : {EmbedCase{plan::F32, 37, 0, false},
                             {plan::F16, 40, 0, false},
                             {plan::BF16, 64, 0, false},
                             {plan::I8, 96, 32, false}}) {
    OpCase c;
    c.name = absl::StrCat("EMBED_scaled_", DTypeTag(e.dtype), "_w", e.width,
                          e.group ? absl::StrCat("_g", e.group) : "");
    c.build = [e](OpProgram& p) {
      const int32_t table = e.group ? p.QuantizedMatrix(e.dtype, p.num_tokens(), e.width, e.group,
                                                        e.asymmetric, false)
                                    : p.FloatTensor(e.dtype, {p.num_tokens(), e.width}, 1.0f);
      const int32_t out = p.Activation(e.width);
      p.AddOp(plan::EMBED, {p.token_ids()}, {out}, {table})
          ->mutable_embed()
          ->set_scale(std::sqrt(static_cast<double>(e.width)));
      p.ReadOut(out);
    };
    c.bound = constant(1e-6);
    if (e.group) c.unsupported = {BackendKind::kCudaEmulated};
    cases.push_back(c);
  }

  // MATMUL / LOGITS: every weight dtype and layout, K and N odd or short, bias, fused outputs,
  // 1 token (GEMV), 5 and 33 tokens (GEMM, a partial tile), prefill then decode.
  struct MatmulCase {
    plan::DType dtype;
    int64_t k, n;
    int32_t group;  // quantized only
    bool asymmetric = false, permuted = false, bias = false, panels = false;
    int outputs = 1;
    bool logits = false;
    double softcap = 0;  // LOGITS only
  };
  std::vector<MatmulCase> matmuls = {
      {plan::F32, 37, 19, 0},
      {plan::F32, 64, 48, 0, false, false, true, true, 3},
      {plan::F16, 37, 19, 0, false, false, true},
      {plan::F16, 64, 32, 0, false, false, false, true, 2},
      {plan::BF16, 96, 21, 0},
      {plan::BF16, 128, 32, 0, false, false, true, true},
      {plan::F32, 40, 53, 0, false, false, false, false, 1, true},
      {plan::I8, 64, 40, 32},
      {plan::I8, 172, 24, 172, false, false, true},
      {plan::I8, 256, 24, 128, false, true, false, false, 2},
      {plan::I4, 96, 40, 32},
      {plan::I4, 128, 36, 64, true, true, true},
      {plan::I4, 608, 24, 32, false, false, false, false, 3},
      {plan::I4, 256, 24, 128, true, false, true},
      {plan::I4, 1120, 12, 32, true, true, false},
      {plan::I4, 64, 53, 32, false, false, false, false, 1, true},
      {plan::I8, 64, 53, 64, false, false, false, false, 1, true},
      // LOGITS soft-capped (LogitsAttrs, Gemma 2's final_logit_softcapping): a cap of 2 bends
      // logits of magnitude ~2-4.
      {plan::F32, 40, 53, 0, false, false, false, false, 1, true, 2.0},
      {plan::BF16, 64, 37, 0, false, false, false, false, 1, true, 2.0},
      {plan::I8, 64, 53, 64, false, false, false, false, 1, true, 2.0},
      // MXFP4 (FP4_E2M1 codes, E8M0 scales): group 32 only.
      {plan::FP4_E2M1, 64, 40, 32},
      {plan::FP4_E2M1, 608, 24, 32, false, false, true, false, 3},
  };
  for (const MatmulCase& m : matmuls) {
    for (std::vector<int32_t> steps :
         {std::vector<int32_t>{1}, std::vector<int32_t>{33}, std::vector<int32_t>{4, 1}}) {
      OpCase c;
      int32_t tokens = 0;
      for (int32_t s : steps) tokens += s;
      c.num_tokens = tokens;
      c.steps = steps;
      c.name = absl::StrCat(m.logits ? "LOGITS_" : "MATMUL_", DTypeTag(m.dtype), "_k", m.k, "_n",
                            m.n, m.group ? absl::StrCat("_g", m.group) : "",
                            m.asymmetric ? "_asym" : "", m.permuted ? "_perm" : "",
                            m.bias ? "_bias" : "", m.panels ? "_panels16" : "",
                            m.outputs > 1 ? absl::StrCat("_out", m.outputs) : "",
                            m.softcap > 0 ? "_softcap" : "", "_t", absl::StrJoin(steps, "_"));
      c.build = [m](OpProgram& p) {
        const int32_t x = p.Input(m.k, 1.0f);
        const int64_t rows = m.n * m.outputs;
        const int32_t w =
            m.group    ? p.QuantizedMatrix(m.dtype, rows, m.k, m.group, m.asymmetric, m.permuted)
            : m.panels ? p.PanelMatrix(m.dtype, rows, m.k, 16)
                       : p.FloatTensor(m.dtype, {rows, m.k}, 0.5f);
        std::vector<int32_t> weights = {w};
        if (m.bias) weights.push_back(p.FloatTensor(plan::F32, {rows}, 0.5f));
        if (m.logits) {
          plan::Op* op = p.AddOp(plan::LOGITS, {x}, {p.Logits(rows)}, weights);
          if (m.softcap > 0) op->mutable_logits()->set_softcap(m.softcap);
          return;
        }
        std::vector<int32_t> outputs;
        for (int i = 0; i < m.outputs; ++i) outputs.push_back(p.Activation(m.n));
        p.AddOp(plan::MATMUL, {x}, outputs, weights);
        // The last output: its columns start after the others' in the fused matrix.
        p.ReadOut(outputs.back());
      };
      const plan::DType dtype = m.dtype;
      c.bound = [dtype](BackendKind backend) { return MatmulBound(dtype, backend); };
      cases.push_back(c);
    }
  }

  // ROPE: head_dim 6 (short), 64 and 128, every scaling, positions far from 0; partial rotary
  // (rotary_dim < head_dim: Phi-4-mini's 96 of 128, and an odd pair count), LongRoPE's factors
  // and cos/sin scale.
  struct RopeCase {
    int32_t heads, head_dim;
    plan::RopeConfig::Scaling scaling;
    int32_t rotary_dim = 0;
  };
  for (const RopeCase& r : {RopeCase{3, 6, plan::RopeConfig::SCALING_NONE},
                            {2, 64, plan::RopeConfig::LINEAR},
                            {2, 128, plan::RopeConfig::LLAMA3},
                            {4, 64, plan::RopeConfig::YARN},
                            {1, 128, plan::RopeConfig::SCALING_NONE},
                            {2, 128, plan::RopeConfig::LONGROPE, 96},
                            {3, 64, plan::RopeConfig::LONGROPE},
                            {2, 16, plan::RopeConfig::SCALING_NONE, 6},
                            {2, 64, plan::RopeConfig::DYNAMIC}}) {
    OpCase c;
    c.name = absl::StrCat("ROPE_h", r.heads, "_d", r.head_dim, "_",
                          plan::RopeConfig::Scaling_Name(r.scaling),
                          r.rotary_dim > 0 ? absl::StrCat("_rot", r.rotary_dim) : "");
    c.num_tokens = 6;
    c.steps = {4, 1, 1};
    c.positions = {0, 1, 17, 1000, 4095, 30000};
    c.build = [r](OpProgram& p) {
      const int64_t width = int64_t{r.heads} * r.head_dim;
      const int32_t x = p.Input(width, 1.0f);
      const int32_t out = p.Activation(width);
      plan::Op* op = p.AddOp(plan::ROPE, {x, p.positions()}, {out}, {});
      plan::RopeAttrs* rope = op->mutable_rope();
      rope->set_num_heads(r.heads);
      rope->set_head_dim(r.head_dim);
      plan::RopeConfig* config = rope->mutable_config();
      config->set_theta(r.scaling == plan::RopeConfig::YARN ? 1e6 : 10000.0);
      config->set_scaling(r.scaling);
      config->set_factor(r.scaling == plan::RopeConfig::SCALING_NONE ? 1.0 : 4.0);
      config->set_low_freq_factor(1.0);
      config->set_high_freq_factor(4.0);
      config->set_original_max_position_embeddings(2048);
      config->set_beta_fast(32.0);
      config->set_beta_slow(1.0);
      config->set_rotary_dim(r.rotary_dim);
      if (r.scaling == plan::RopeConfig::LONGROPE) {
        // Rescale factors growing over the pairs as LongRoPE's searched ones do.
        const int32_t pairs = (r.rotary_dim > 0 ? r.rotary_dim : r.head_dim) / 2;
        for (int32_t i = 0; i < pairs; ++i) config->add_ext_factors(1.0 + 0.37 * i);
        config->set_long_factors(true);
        config->set_attention_factor(1.19);
      }
      p.ReadOut(out);
    };
    // Angles up to 3e4 rad: the f32 angle position * inv_freq carries 2^-24 relative error, so
    // up to 3e4 * 6e-8 = 2e-3 rad at the largest positions.
    c.bound = constant(4e-3);
    cases.push_back(c);
  }

  // ATTENTION: MHA, GQA, MQA; head_dim 6, 64, 128; a sliding window; a scale; every KV cache
  // dtype; prefill crossing KV blocks then decode steps.
  struct AttentionCase {
    int32_t heads, kv_heads, head_dim;
    int64_t window;
    double scale;
    plan::DType kv;
    std::vector<int32_t> steps;
    double softcap = 0;  // AttentionAttrs.logit_softcap (Gemma 2)
    bool sinks = false;  // gpt-oss's sinks weight
  };
  for (const AttentionCase& a : {AttentionCase{4, 4, 6, 0, 0.0, plan::F32, {37}},
                                 AttentionCase{4, 2, 64, 0, 0.0, plan::F32, {20, 1, 1}},
                                 AttentionCase{4, 1, 128, 0, 0.0, plan::F32, {17, 1}},
                                 AttentionCase{4, 2, 6, 5, 0.0, plan::F32, {19, 1, 1}},
                                 AttentionCase{2, 2, 64, 0, 0.05, plan::F32, {3, 1}},
                                 AttentionCase{4, 2, 64, 0, 0.0, plan::F16, {20, 1}},
                                 AttentionCase{4, 2, 64, 0, 0.0, plan::BF16, {20, 1}},
                                 AttentionCase{4, 2, 64, 7, 0.0, plan::I8, {33, 1, 1}},
                                 // Soft-capped scores (scale 1: scores of ~3 against a cap of
                                 // 2), MHA, GQA filling the lanes, Gemma's head_dim 256 with a
                                 // window, an int8 cache.
                                 AttentionCase{2, 2, 64, 0, 1.0, plan::F32, {20, 1, 1}, 2.0},
                                 AttentionCase{8, 1, 32, 0, 1.0, plan::F32, {21, 1}, 2.0},
                                 AttentionCase{2, 1, 256, 6, 0.0, plan::F32, {19, 1}, 0.5},
                                 AttentionCase{4, 2, 64, 7, 1.0, plan::I8, {33, 1}, 2.0},
                                 // gpt-oss's sinks (one extra softmax logit per head, no
                                 // value) of +-3 around scores of ~1, so they take a real share
                                 // of the softmax: f32 / f16 / int8 caches, prefill then decode,
                                 // windows, MHA and GQA.
                                 AttentionCase{4, 2, 64, 0, 0.0, plan::F32, {20, 1, 1}, 0, true},
                                 AttentionCase{4, 4, 6, 5, 0.0, plan::F32, {19, 1}, 0, true},
                                 AttentionCase{8, 1, 32, 0, 0.0, plan::F32, {21, 1}, 0, true},
                                 AttentionCase{4, 2, 64, 7, 0.0, plan::F16, {20, 1}, 0, true},
                                 AttentionCase{4, 2, 64, 7, 0.0, plan::I8, {33, 1}, 0, true}}) {
    OpCase c;
    int32_t tokens = 0;
    for (int32_t s : a.steps) tokens += s;
    c.num_tokens = tokens;
    c.steps = a.steps;
    c.name = absl::StrCat("ATTENTION", a.sinks ? "_sinks" : "", "_h", a.heads, "_kv", a.kv_heads,
                          "_d", a.head_dim, a.window ? absl::StrCat("_window", a.window) : "",
                          a.scale > 0 ? "_scale" : "", a.softcap > 0 ? "_softcap" : "", "_kv",
                          DTypeTag(a.kv), "_t", absl::StrJoin(a.steps, "_"));
    c.build = [a](OpProgram& p) {
      const int32_t q = p.Input(int64_t{a.heads} * a.head_dim, 1.0f);
      const int32_t k = p.Input(int64_t{a.kv_heads} * a.head_dim, 1.0f);
      const int32_t v = p.Input(int64_t{a.kv_heads} * a.head_dim, 1.0f);
      const int32_t out = p.Activation(int64_t{a.heads} * a.head_dim);
      std::vector<int32_t> weights;
      if (a.sinks) weights.push_back(p.FloatTensor(plan::F32, {a.heads}, 3.0f));
      plan::AttentionAttrs* attention =
          p.AddOp(plan::ATTENTION, {q, k, v}, {out}, weights)->mutable_attention();
      attention->set_num_heads(a.heads);
      attention->set_num_kv_heads(a.kv_heads);
      attention->set_head_dim(a.head_dim);
      attention->set_sliding_window(a.window);
      attention->set_scale(a.scale);
      attention->set_logit_softcap(a.softcap);
      plan::KvCacheSpec* spec = p.kv_cache();
      spec->set_num_layers(1);
      spec->set_num_kv_heads(a.kv_heads);
      spec->set_head_dim(a.head_dim);
      spec->set_dtype(a.kv);
      p.ReadOut(out);
    };
    const plan::DType kv = a.kv;
    c.bound = [kv](BackendKind) { return KvBound(kv); };
    cases.push_back(c);
  }

  // Mixture of experts.
  // ROUTER: E 4 / 60 / 128, top_k 1 / 2 / 8, both scorings, normalize on and off. The logits
  // are permutations of values 8 / E apart (OpProgram::RouterLogits), so the double reference
  // and f32 choose alike. The weights are read out directly (1e-6); the ids through an
  // EXPERT_MATMUL whose weights are zero and whose bias of expert e is e, so slot j's output is
  // ids[t, j] exactly (bound 0).
  struct RouterCase {
    int32_t experts, top_k;
    plan::RouterAttrs::Scoring scoring;
    bool normalize;
  };
  std::vector<RouterCase> routers;
  for (auto [experts, top_k] :
       {std::pair<int32_t, int32_t>{4, 1}, {4, 2}, {60, 1}, {60, 4}, {60, 8}, {128, 2}, {128, 8}}) {
    routers.push_back({experts, top_k, plan::RouterAttrs::SOFTMAX_TOPK, false});
    routers.push_back({experts, top_k, plan::RouterAttrs::SOFTMAX_TOPK, true});
    routers.push_back({experts, top_k, plan::RouterAttrs::TOPK_SOFTMAX, false});
  }
  for (const RouterCase& r : routers) {
    for (bool ids : {false, true}) {
      OpCase c;
      c.num_tokens = 37;
      c.steps = {36, 1};
      c.name = absl::StrCat("ROUTER_e", r.experts, "_k", r.top_k, "_",
                            plan::RouterAttrs::Scoring_Name(r.scoring),
                            r.normalize ? "_normalized" : "", ids ? "_ids" : "_weights");
      c.build = [r, ids](OpProgram& p) {
        const int32_t logits = p.RouterLogits(p.num_tokens(), r.experts);
        const auto [expert_ids, weights] =
            p.Router(logits, r.experts, r.top_k, r.scoring, r.normalize);
        if (!ids) {
          p.ReadOut(weights);
          return;
        }
        std::vector<float> bias(r.experts);
        for (int32_t e = 0; e < r.experts; ++e) bias[e] = static_cast<float>(e);
        const int32_t zero = p.Tensor(plan::F32, {r.experts, 1, r.experts},
                                      std::vector<float>(int64_t{r.experts} * r.experts, 0.0f));
        const int32_t out = p.Activation(r.top_k);
        plan::ExpertAttrs* expert = p.AddOp(plan::EXPERT_MATMUL, {logits, expert_ids}, {out},
                                            {zero, p.Tensor(plan::F32, {r.experts, 1}, bias)})
                                        ->mutable_expert();
        expert->set_num_experts(r.experts);
        expert->set_top_k(r.top_k);
        p.ReadOut(out);
      };
      c.bound = constant(ids ? 0.0 : 1e-6);
      cases.push_back(c);
    }
  }

  // EXPERT_MATMUL: every weight dtype and layout, E 4 / 8 / 64, top_k 1 / 2 / 8, K 64 and 608,
  // N with a partial panel where the layout allows; 1 token (decode), 5 and 37 with skewed
  // routing (one expert chosen by ~80% of the tokens); x one row per token (gate/up) or one
  // slice per slot (down); bias; two outputs.
  struct ExpertCase {
    plan::DType dtype;
    int32_t experts, top_k;
    int64_t k, n;
    int32_t group = 0;  // quantized only
    bool asymmetric = false, panels = false, bias = false, sliced = false;
    int outputs = 1;
  };
  const std::vector<ExpertCase> experts = {
      {plan::F32, 4, 2, 64, 21, 0, false, false, true, false, 2},
      {plan::F32, 8, 2, 64, 32, 0, false, true, false, true},
      {plan::F32, 64, 8, 608, 16, 0, false, true, true, true},
      {plan::F16, 8, 2, 64, 32, 0, false, true, true, false, 2},
      {plan::F16, 4, 1, 608, 19},
      {plan::BF16, 8, 2, 64, 48, 0, false, true, true, true},
      {plan::BF16, 4, 2, 64, 21},
      {plan::I8, 8, 2, 64, 40, 64, false, false, true},
      {plan::I8, 64, 8, 608, 24, 32, false, false, false, true},
      {plan::I4, 8, 2, 64, 24, 32, false, false, false, false, 2},
      {plan::I4, 64, 8, 128, 16, 64, true, false, true},
      {plan::I4, 4, 2, 608, 36, 32, true, false, false, true},
      {plan::FP4_E2M1, 8, 2, 64, 24, 32, false, false, true, false, 2},
      {plan::FP4_E2M1, 64, 8, 608, 16, 32, false, false, false, true},
  };
  for (const ExpertCase& m : experts) {
    for (int32_t tokens : {1, 5, 37}) {
      OpCase c;
      c.num_tokens = tokens;
      c.steps = {tokens};
      c.name = absl::StrCat("EXPERT_MATMUL_", DTypeTag(m.dtype), "_e", m.experts, "_k", m.top_k,
                            "_K", m.k, "_n", m.n, m.group ? absl::StrCat("_g", m.group) : "",
                            m.asymmetric ? "_asym" : "", m.panels ? "_panels16" : "",
                            m.bias ? "_bias" : "", m.sliced ? "_sliced" : "",
                            m.outputs > 1 ? absl::StrCat("_out", m.outputs) : "", "_t", tokens);
      c.build = [m](OpProgram& p) {
        const int32_t logits = p.RouterLogits(p.num_tokens(), m.experts, 0.8, m.experts / 2);
        const int32_t ids =
            p.Router(logits, m.experts, m.top_k, plan::RouterAttrs::SOFTMAX_TOPK, false).first;
        const int32_t x = p.Input(m.sliced ? m.top_k * m.k : m.k, 1.0f);
        const int64_t rows = m.n * m.outputs;
        std::vector<int32_t> weights = {p.ExpertMatrix(m.dtype, m.experts, rows, m.k, m.group,
                                                       m.asymmetric, m.panels ? 16 : 0)};
        if (m.bias) weights.push_back(p.FloatTensor(plan::F32, {m.experts, rows}, 0.5f));
        std::vector<int32_t> outputs;
        for (int i = 0; i < m.outputs; ++i) outputs.push_back(p.Activation(m.top_k * m.n));
        plan::ExpertAttrs* expert =
            p.AddOp(plan::EXPERT_MATMUL, {x, ids}, outputs, weights)->mutable_expert();
        expert->set_num_experts(m.experts);
        expert->set_top_k(m.top_k);
        // The last output: its columns start after the others' in each expert's rows.
        p.ReadOut(outputs.back());
      };
      const plan::DType dtype = m.dtype;
      c.bound = [dtype](BackendKind backend) { return MatmulBound(dtype, backend); };
      cases.push_back(c);
    }
  }

  // MOE_COMBINE with and without the shared expert (top_k 1, 2, 8; H odd and long).
  for (auto [top_k, hidden, shared] : {std::tuple<int32_t, int64_t, bool>{1, 21, false},
                                       {2, 64, false},
                                       {8, 131, false},
                                       {2, 64, true},
                                       {4, 1000, true}}) {
    OpCase c;
    c.num_tokens = 37;
    c.steps = {36, 1};
    c.name = absl::StrCat("MOE_COMBINE_k", top_k, "_h", hidden, shared ? "_shared" : "");
    c.build = [top_k = top_k, hidden = hidden, shared = shared](OpProgram& p) {
      std::vector<int32_t> inputs = {p.Input(top_k * hidden, 2.0f), p.Input(top_k, 1.0f)};
      if (shared) {
        inputs.push_back(p.Input(hidden, 2.0f));
        inputs.push_back(p.Input(1, 4.0f));
      }
      const int32_t out = p.Activation(hidden);
      p.AddOp(plan::MOE_COMBINE, inputs, {out}, {});
      p.ReadOut(out);
    };
    c.bound = constant(1e-6);
    cases.push_back(c);
  }

  // CLAMPED_SWIGLU (gpt-oss's alpha 1.702, limit 7; and a small limit) over inputs spanning
  // +-2 limit, so both clamps are live.
  for (auto [limit, width] : {std::pair<double, int64_t>{7.0, 21}, {7.0, 1000}, {1.5, 64}}) {
    OpCase c;
    c.name = absl::StrCat("CLAMPED_SWIGLU_limit", static_cast<int>(limit * 10), "tenths_w", width);
    c.build = [limit = limit, width = width](OpProgram& p) {
      const float range = static_cast<float>(2.0 * limit);
      const int32_t gate = p.Input(width, range), up = p.Input(width, range);
      const int32_t out = p.Activation(width);
      plan::SwigluAttrs* swiglu =
          p.AddOp(plan::CLAMPED_SWIGLU, {gate, up}, {out}, {})->mutable_swiglu();
      swiglu->set_alpha(1.702);
      swiglu->set_limit(limit);
      p.ReadOut(out);
    };
    c.bound = constant(1e-6);
    cases.push_back(c);
  }
  return cases;
}

// Creates `kind`'s backend over the program. The emulated module is built from the emitted
// source (cached by its hash) and must outlive the backend.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(BackendKind kind, const plan::PlanMeta& meta,
                                                       const BlobLookup& blobs,
                                                       int32_t max_tokens) {
  BackendOptions options;
  options.max_tokens_per_step = max_tokens;
  options.num_threads = 2;  // the work split is part of what is tested
  if (kind == BackendKind::kCpu) return cpu::CreateCpuBackend(meta, blobs, options);
  auto emission = llmc::cuda::emitCuda(meta);
  if (!emission.ok()) return emission.status();
  auto module =
      llmc::cuda::EmulatedModule::build(emission->moduleSource(), LLMC_EMULATION_CACHE_DIR);
  if (!module.ok()) return module.status();
  const plan::KernelTable table = emission->kernelTable("cuda:emulated");
  auto backend = cuda::CreateKernelBackend(
      meta, table, blobs, options, std::make_unique<llmc::cuda::EmulatedDevice>(*module, table));
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<Backend>(std::move(*backend));
}

class OpConformanceTest : public ::testing::TestWithParam<std::tuple<BackendKind, OpCase>> {};

TEST_P(OpConformanceTest, MatchesTheScalarReference) {
  const auto& [backend_kind, c] = GetParam();
  OpProgram program(c.num_tokens, std::hash<std::string>()(c.name));
  c.build(program);
  const plan::PlanMeta& meta = program.meta();
  std::vector<int32_t> steps = c.steps.empty() ? std::vector<int32_t>{c.num_tokens} : c.steps;
  int32_t max_step = *std::max_element(steps.begin(), steps.end());
  auto backend = CreateBackend(backend_kind, meta, program.Lookup(), max_step);
  const bool unsupported =
      std::find(c.unsupported.begin(), c.unsupported.end(), backend_kind) != c.unsupported.end();
  if (unsupported) {
    // Not implemented by design: the refusal must say so, at creation.
    ASSERT_FALSE(backend.ok()) << BackendName(backend_kind)
                               << " accepts a case the matrix lists as unsupported";
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented) << backend.status();
    std::printf("not supported by %s (by design): %s\n", BackendName(backend_kind),
                std::string(backend.status().message()).c_str());
    return;
  }
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::vector<int32_t> positions = c.positions;
  if (positions.empty()) {
    for (int32_t t = 0; t < c.num_tokens; ++t) positions.push_back(t);
  }
  std::vector<int32_t> tokens(c.num_tokens);
  for (int32_t t = 0; t < c.num_tokens; ++t) tokens[t] = t;
  const std::vector<double> expected =
      testing::ReferenceProgram(meta, program.Lookup(), tokens, positions);
  const int64_t width = static_cast<int64_t>(expected.size()) / c.num_tokens;
  const std::vector<float> got = testing::RunSteps(**backend, steps, positions, width, kBlockSize);
  double magnitude = 0, error = 0;
  for (size_t i = 0; i < expected.size(); ++i)
    magnitude = std::max(magnitude, std::fabs(expected[i]));
  for (size_t i = 0; i < expected.size(); ++i) {
    const double difference = std::fabs(got[i] - expected[i]);
    error = std::isnan(difference) ? INFINITY : std::max(error, difference);
  }
  const double relative = error / std::max(magnitude, 1e-30);
  const double bound = c.bound(backend_kind);
  std::printf("%s on %s: error %.3g of max |reference| %.3g (bound %.0e)\n", c.name.c_str(),
              BackendName(backend_kind), relative, magnitude, bound);
  EXPECT_LE(relative, bound) << c.name;
}

// The attributes Gemma added are checked by plan::CheckProgram, which every backend calls first:
// a bad value is refused at creation, naming the field.
TEST(OpAttributesTest, BadValuesAreRefusedByName) {
  struct Bad {
    const char* field;
    std::function<void(OpProgram&)> build;
  };
  auto attention = [](double softcap) {
    return [softcap](OpProgram& p) {
      const int32_t q = p.Input(8), k = p.Input(8), v = p.Input(8);
      const int32_t out = p.Activation(8);
      plan::AttentionAttrs* attrs =
          p.AddOp(plan::ATTENTION, {q, k, v}, {out}, {})->mutable_attention();
      attrs->set_num_heads(1);
      attrs->set_num_kv_heads(1);
      attrs->set_head_dim(8);
      attrs->set_logit_softcap(softcap);
      plan::KvCacheSpec* spec = p.kv_cache();
      spec->set_num_layers(1);
      spec->set_num_kv_heads(1);
      spec->set_head_dim(8);
      p.ReadOut(out);
    };
  };
  auto embed = [](double scale) {
    return [scale](OpProgram& p) {
      const int32_t out = p.Activation(8);
      p.AddOp(plan::EMBED, {p.token_ids()}, {out},
              {p.FloatTensor(plan::F32, {p.num_tokens(), 8}, 1.0f)})
          ->mutable_embed()
          ->set_scale(scale);
      p.ReadOut(out);
    };
  };
  auto logits = [](double softcap) {
    return [softcap](OpProgram& p) {
      const int32_t x = p.Input(8);
      p.AddOp(plan::LOGITS, {x}, {p.Logits(5)}, {p.FloatTensor(plan::F32, {5, 8}, 1.0f)})
          ->mutable_logits()
          ->set_softcap(softcap);
    };
  };
  // The MoE ops' attributes and wiring, and MXFP4 scales (plan format 2.1).
  auto router = [](int32_t experts, int32_t top_k, plan::RouterAttrs::Scoring scoring,
                   bool normalize) {
    return [=](OpProgram& p) {
      const int32_t logits = p.Input(experts);
      p.ReadOut(p.Router(logits, experts, top_k, scoring, normalize).second);
    };
  };
  auto swiglu = [](double alpha, double limit) {
    return [=](OpProgram& p) {
      const int32_t gate = p.Input(8), up = p.Input(8), out = p.Activation(8);
      plan::SwigluAttrs* attrs =
          p.AddOp(plan::CLAMPED_SWIGLU, {gate, up}, {out}, {})->mutable_swiglu();
      attrs->set_alpha(alpha);
      attrs->set_limit(limit);
      p.ReadOut(out);
    };
  };
  auto sinks = [](int64_t count) {
    return [count](OpProgram& p) {
      const int32_t q = p.Input(16), k = p.Input(8), v = p.Input(8);
      const int32_t out = p.Activation(16);
      plan::AttentionAttrs* attrs =
          p.AddOp(plan::ATTENTION, {q, k, v}, {out}, {p.FloatTensor(plan::F32, {count}, 1.0f)})
              ->mutable_attention();
      attrs->set_num_heads(2);
      attrs->set_num_kv_heads(1);
      attrs->set_head_dim(8);
      plan::KvCacheSpec* spec = p.kv_cache();
      spec->set_num_layers(1);
      spec->set_num_kv_heads(1);
      spec->set_head_dim(8);
      p.ReadOut(out);
    };
  };
  // Expert ids that no ROUTER wrote (an EXPERT_IDS value of its own).
  auto orphan_ids = [](OpProgram& p) {
    const int32_t x = p.Input(32), ids = p.ExpertIds(2), out = p.Activation(2 * 4);
    p.AddOp(plan::EXPERT_MATMUL, {x, ids}, {out}, {p.ExpertMatrix(plan::F32, 4, 4, 32)})
        ->mutable_expert()
        ->set_num_experts(4);
    p.ReadOut(out);
  };
  auto nan_scale = [](OpProgram& p) {
    const int32_t x = p.Input(64), out = p.Activation(8);
    std::vector<uint8_t> scales(8 * 2, 120);
    scales[5] = 255;  // row 2, group 1
    p.AddOp(plan::MATMUL, {x}, {out}, {p.Mxfp4Matrix(8, 64, scales)});
    p.ReadOut(out);
  };
  const std::vector<Bad> cases = {
      {"router.top_k 0",
       [](OpProgram& p) {
         const int32_t logits = p.Input(4), ids = p.ExpertIds(1), weights = p.Activation(1);
         plan::RouterAttrs* attrs =
             p.AddOp(plan::ROUTER, {logits}, {ids, weights}, {})->mutable_router();
         attrs->set_num_experts(4);
         attrs->set_scoring(plan::RouterAttrs::SOFTMAX_TOPK);
         p.ReadOut(weights);
       }},
      {"router.top_k 5 and router.num_experts 4",
       router(4, 5, plan::RouterAttrs::SOFTMAX_TOPK, false)},
      {"router.num_experts 1025", router(1025, 2, plan::RouterAttrs::SOFTMAX_TOPK, false)},
      {"router.normalize is SOFTMAX_TOPK's", router(8, 2, plan::RouterAttrs::TOPK_SOFTMAX, true)},
      {"swiglu.alpha must be finite and > 0", swiglu(0.0, 7.0)},
      {"swiglu.alpha must be finite and > 0", swiglu(-1.0, 7.0)},
      {"swiglu.limit must be finite and > 0", swiglu(1.702, INFINITY)},
      {"swiglu.limit must be finite and > 0", swiglu(1.702, 0.0)},
      {"expected F32 [2]", sinks(3)},
      {"not output 0 of an earlier ROUTER", orphan_ids},
      {"E8M0 NaN byte 255 at [2, 1]", nan_scale},
      {"logit_softcap must be finite and >= 0", attention(-1.0)},
      {"logit_softcap must be finite and >= 0", attention(INFINITY)},
      {"embed.scale must be finite and > 0", embed(0.0)},
      {"embed.scale must be finite and > 0", embed(NAN)},
      {"logits.softcap must be finite and > 0", logits(-2.0)},
      {"logits.softcap must be finite and > 0", logits(0.0)},
  };
  for (const Bad& bad : cases) {
    for (BackendKind kind : {BackendKind::kCpu, BackendKind::kCudaEmulated}) {
      OpProgram program(3);
      bad.build(program);
      auto backend = CreateBackend(kind, program.meta(), program.Lookup(), 3);
      ASSERT_FALSE(backend.ok()) << bad.field << " on " << BackendName(kind);
      EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument) << backend.status();
      EXPECT_NE(backend.status().message().find(bad.field), std::string::npos)
          << backend.status() << " (" << BackendName(kind) << ")";
    }
  }
}

std::vector<std::tuple<BackendKind, OpCase>> Matrix() {
  std::vector<std::tuple<BackendKind, OpCase>> rows;
  for (BackendKind backend : {BackendKind::kCpu, BackendKind::kCudaEmulated}) {
    for (const OpCase& c : Cases()) rows.emplace_back(backend, c);
  }
  return rows;
}

INSTANTIATE_TEST_SUITE_P(Ops, OpConformanceTest, ::testing::ValuesIn(Matrix()),
                         [](const auto& info) {
                           return absl::StrCat(BackendName(std::get<0>(info.param)), "_",
                                               std::get<1>(info.param).name);
                         });

}  // namespace
}  // namespace llmrt
