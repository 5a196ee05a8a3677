//===- QuantizedMatmulMeta.h - A one-op plan over a quantized matrix -*- C++ -*-===//
//
// Test support shared by the emulation tests and the NVRTC tests: a PlanMeta holding one
// MATMUL over an I8 / I4 matrix laid out as plan.proto's Quantization comment says (tensor 0
// the codes, I8 ROW_MAJOR and I4 LANE_CHUNKS; 1 the f16 scales, 2 the U8 zero points, 3 the i32
// input permutation, 4 an f32 bias), which is all codegen/cuda needs to emit the quantized GEMV
// and GEMM; and one EXPERT_MATMUL over a quantized expert stack (expertMeta).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_QUANTIZEDMATMULMETA_H_
#define LLMC_CODEGEN_CUDA_EMULATION_QUANTIZEDMATMULMETA_H_

#include <cstdint>
#include <ostream>
#include <utility>

#include "runtime/plan/proto/plan.pb.h"

namespace llmc::cuda {

struct QuantCase {
  llmrt::plan::DType dtype; // I8 or I4
  bool asymmetric;
  int64_t k, n, group;
  bool permuted, bias;
};

inline void PrintTo(const QuantCase &c, std::ostream *out) {
  *out << llmrt::plan::DType_Name(c.dtype) << (c.asymmetric ? " asym" : " sym") << " K" << c.k
       << " N" << c.n << " g" << c.group << (c.permuted ? " perm" : "") << (c.bias ? " bias" : "");
}

// One MATMUL op over the quantized matrix of `c`, as the emitter sees it in a plan.
inline llmrt::plan::PlanMeta matmulMeta(const QuantCase &c) {
  llmrt::plan::PlanMeta meta;
  llmrt::plan::Program *program = meta.mutable_program();
  // x at arena offset 0, y after it.
  for (int64_t width : {c.k, c.n}) {
    llmrt::plan::Value *value = program->add_values();
    value->set_kind(llmrt::plan::Value::ACTIVATION);
    value->set_width(width);
    value->set_dtype(llmrt::plan::F32);
    value->set_arena_offset_per_token(program->arena_bytes_per_token());
    program->set_arena_bytes_per_token(program->arena_bytes_per_token() + 4 * width);
  }
  llmrt::plan::Tensor *w = meta.add_tensors();
  w->set_name("w");
  w->set_dtype(c.dtype);
  w->add_shape(c.n);
  w->add_shape(c.k);
  if (c.dtype == llmrt::plan::I4)
    w->set_layout(llmrt::plan::Tensor::LANE_CHUNKS);
  llmrt::plan::Quantization *q = w->mutable_quantization();
  q->set_scheme(c.asymmetric ? llmrt::plan::Quantization::ASYMMETRIC
                             : llmrt::plan::Quantization::SYMMETRIC);
  q->set_bits(c.dtype == llmrt::plan::I8 ? 8 : 4);
  q->set_group_size(static_cast<int32_t>(c.group));
  q->set_scales(1);
  if (c.asymmetric)
    q->set_zero_points(2);
  if (c.permuted)
    q->set_input_permutation(3);
  for (auto [name, dtype] :
       {std::pair<const char *, llmrt::plan::DType>{"scales", llmrt::plan::F16},
        {"zeros", llmrt::plan::U8}}) {
    llmrt::plan::Tensor *t = meta.add_tensors();
    t->set_name(name);
    t->set_dtype(dtype);
    t->add_shape(c.n);
    t->add_shape(c.k / c.group);
  }
  llmrt::plan::Tensor *perm = meta.add_tensors();
  perm->set_name("perm");
  perm->set_dtype(llmrt::plan::I32);
  perm->add_shape(c.k);
  llmrt::plan::Tensor *bias = meta.add_tensors();
  bias->set_name("bias");
  bias->set_dtype(llmrt::plan::F32);
  bias->add_shape(c.n);
  llmrt::plan::Op *op = program->add_ops();
  op->set_kind(llmrt::plan::MATMUL);
  op->add_inputs(0);
  op->add_outputs(1);
  op->add_weights(0);
  if (c.bias)
    op->add_weights(4);
  return meta;
}

// An EXPERT_MATMUL over an [E, N, K] stack of I8 / I4 / FP4_E2M1 expert matrices (tensor 0 the
// codes, 1 the scales: F16, or E8M0 for FP4_E2M1; 2 the U8 zero points), its ids written by a
// ROUTER (program check: the ids come from an earlier ROUTER op). Values: 0 the router logits
// [E], 1 the ids [topK], 2 the routing weights [topK], 3 x ([K], or [topK K] when `sliced`: one
// slice per slot, the down projection's input), 4 the output [topK N].
struct ExpertQuantCase {
  llmrt::plan::DType dtype; // I8, I4 or FP4_E2M1
  bool asymmetric;
  int64_t group;
  int32_t experts, topK;
  int64_t k, n;
  bool sliced;
};

inline void PrintTo(const ExpertQuantCase &c, std::ostream *out) {
  *out << llmrt::plan::DType_Name(c.dtype) << (c.asymmetric ? " asym" : "") << " g" << c.group
       << " E" << c.experts << " top" << c.topK << " K" << c.k << " N" << c.n
       << (c.sliced ? " sliced" : "");
}

inline llmrt::plan::PlanMeta expertMeta(const ExpertQuantCase &c) {
  namespace plan = llmrt::plan;
  plan::PlanMeta meta;
  plan::Program *program = meta.mutable_program();
  for (int64_t width : {int64_t{c.experts}, int64_t{c.topK}, int64_t{c.topK},
                        c.sliced ? c.topK * c.k : c.k, c.topK * c.n}) {
    plan::Value *value = program->add_values();
    value->set_kind(program->values_size() == 2 ? plan::Value::EXPERT_IDS
                                                : plan::Value::ACTIVATION);
    value->set_width(width);
    value->set_dtype(program->values_size() == 2 ? plan::I32 : plan::F32);
    value->set_arena_offset_per_token(program->arena_bytes_per_token());
    program->set_arena_bytes_per_token(program->arena_bytes_per_token() + 4 * width);
  }
  const bool fp4 = c.dtype == plan::FP4_E2M1;
  plan::Tensor *w = meta.add_tensors();
  w->set_name("experts");
  w->set_dtype(c.dtype);
  for (int64_t dim : {int64_t{c.experts}, c.n, c.k})
    w->add_shape(dim);
  if (c.dtype != plan::I8)
    w->set_layout(plan::Tensor::LANE_CHUNKS);
  plan::Quantization *q = w->mutable_quantization();
  q->set_scheme(c.asymmetric ? plan::Quantization::ASYMMETRIC : plan::Quantization::SYMMETRIC);
  q->set_bits(c.dtype == plan::I8 ? 8 : 4);
  q->set_group_size(static_cast<int32_t>(c.group));
  q->set_scales(1);
  if (c.asymmetric)
    q->set_zero_points(2);
  for (auto [name, dtype] :
       {std::pair<const char *, plan::DType>{"scales", fp4 ? plan::E8M0 : plan::F16},
        {"zeros", plan::U8}}) {
    plan::Tensor *t = meta.add_tensors();
    t->set_name(name);
    t->set_dtype(dtype);
    for (int64_t dim : {int64_t{c.experts}, c.n, c.k / c.group})
      t->add_shape(dim);
  }
  plan::Op *router = program->add_ops();
  router->set_kind(plan::ROUTER);
  router->add_inputs(0);
  router->add_outputs(1);
  router->add_outputs(2);
  router->mutable_router()->set_num_experts(c.experts);
  router->mutable_router()->set_top_k(c.topK);
  router->mutable_router()->set_scoring(plan::RouterAttrs::SOFTMAX_TOPK);
  plan::Op *op = program->add_ops();
  op->set_kind(plan::EXPERT_MATMUL);
  op->add_inputs(3);
  op->add_inputs(1);
  op->add_outputs(4);
  op->add_weights(0);
  op->mutable_expert()->set_num_experts(c.experts);
  op->mutable_expert()->set_top_k(c.topK);
  return meta;
}

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_QUANTIZEDMATMULMETA_H_
