//===- QuantizedMatmulMeta.h - A one-op plan over a quantized matrix -*- C++ -*-===//
//
// Test support shared by the emulation tests and the NVRTC tests: a PlanMeta holding one
// MATMUL over an I8 / I4 matrix laid out as plan.proto's Quantization comment says (tensor 0
// the codes, I8 ROW_MAJOR and I4 LANE_CHUNKS; 1 the f16 scales, 2 the U8 zero points, 3 the i32
// input permutation, 4 an f32 bias), which is all codegen/cuda needs to emit the quantized GEMV
// and GEMM.
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

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_CUDA_EMULATION_QUANTIZEDMATMULMETA_H_
