// RUN: llmc-opt --llm-quantize-weights="bits=4 group-size=32 scheme=asymmetric" --llm-tile-cpu --split-input-file %s 2>&1 | FileCheck %s
// RUN: llmc-opt --llm-quantize-weights="bits=8 keep-float=down_proj lm-head-bits=8" --split-input-file --verify-diagnostics %s | FileCheck %s --check-prefix=INT8
// RUN: llmc-opt --llm-quantize-weights="bits=4 group-size=32 scheme=asymmetric method=awq keep-float=down_proj lm-head-bits=8" --split-input-file --verify-diagnostics %s | FileCheck %s --check-prefix=HEAD8
// RUN: llmc-opt --llm-quantize-weights="bits=8 keep-float=down_proj lm-head-bits=4" --split-input-file --verify-diagnostics %s | FileCheck %s --check-prefix=HEAD4
// RUN: not llmc-opt --llm-quantize-weights="bits=4 group-size=128 lm-head-bits=4" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=HEADWIDTH
// RUN: not llmc-opt --llm-quantize-weights="bits=4 group-size=32 lm-head-bits=2" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=HEADBITS
// RUN: not llmc-opt --llm-quantize-weights="bits=4" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=NOGROUP
// RUN: not llmc-opt --llm-quantize-weights="bits=8 scheme=asymmetric" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=ASYM8
// RUN: llmc-opt --llm-quantize-weights="bits=4 group-size=32 scheme=mxfp4 only=.experts." --split-input-file %s 2>/dev/null | FileCheck %s --check-prefix=MXFP4
// RUN: not llmc-opt --llm-quantize-weights="bits=4 group-size=64 scheme=mxfp4" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=MXG64
// RUN: not llmc-opt --llm-quantize-weights="bits=8 scheme=mxfp4" --split-input-file %s 2>&1 | FileCheck %s --check-prefix=MXBITS

// int4 g32: the fused q/k/v and the 64-column o_proj are quantized and stay row-major for
// --llm-tile-cpu; the 48-column down_proj cannot be grouped by 32 and stays float (panelled);
// the lm_head stays float by default.
// (The remark is printed before the module.)
// CHECK: remark: stays float: 48 input columns are not a multiple of 32
// The @moe case's (at the end of this file): the router and the shared expert's gate.
// CHECK: remark: stays float: its output is the router's logits (a routing decision)
// CHECK: remark: stays float: its output is the shared expert's gate (a routing decision)
// CHECK-LABEL: func.func @untied
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_major"}, llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, weights = [@l.q_proj, @l.k_proj, @l.v_proj]}
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_major"}, llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, weights = [@l.o_proj]}
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_major"}, llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, weights = [@l.up_proj]}
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weights = [@l.down_proj]}
// CHECK: llm.logits %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weight = @head}

// int8 per channel (group_size = cols, any width): keep-float keeps down_proj, and
// lm-head-bits=8 takes the lm_head too.
// INT8-LABEL: func.func @untied
// INT8: llm.matmul %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weights = [@l.q_proj, @l.k_proj, @l.v_proj]}
// INT8: llm.matmul %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weights = [@l.o_proj]}
// INT8: llm.matmul %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weights = [@l.up_proj]}
// INT8: llm.matmul %{{.*}} {weights = [@l.down_proj]}
// INT8: llm.logits %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weight = @head}

// The lm_head has its own format: int8 per channel, symmetric and rtn in an asymmetric AWQ int4
// plan (calibration records no lm_head inputs) ...
// HEAD8-LABEL: func.func @untied
// HEAD8: llm.matmul %{{.*}} {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "awq", scheme = "asymmetric"}, weights = [@l.q_proj, @l.k_proj, @l.v_proj]}
// HEAD8: llm.logits %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weight = @head}
// ... and int4 in an int8 per-channel plan, in groups of 32 (the body has no group size).
// HEAD4-LABEL: func.func @untied
// HEAD4: llm.matmul %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weights = [@l.q_proj, @l.k_proj, @l.v_proj]}
// HEAD4: llm.logits %{{.*}} {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "symmetric"}, weight = @head}
// An lm_head the int4 groups do not divide is an error, not a silent float.
// HEADWIDTH: lm-head-bits=4: the lm_head @head has 64 input columns, not a multiple of the group size 128
// HEADBITS: lm-head-bits must be 0 (float), 8 or 4, found 2

// NOGROUP: int4 needs a group-size (32, 64 or 128)
// ASYM8: the asymmetric scheme (zero points) is int4 only
llm.param @table : tensor<96x64xf32>
llm.param @l.q_proj : tensor<64x64xf32>
llm.param @l.k_proj : tensor<32x64xf32>
llm.param @l.v_proj : tensor<32x64xf32>
llm.param @l.o_proj : tensor<64x64xf32>
llm.param @l.up_proj : tensor<48x64xf32>
llm.param @l.down_proj : tensor<64x48xf32>
llm.param @head : tensor<96x64xf32>
func.func @untied(%t: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x96xf32> {
  %x = llm.embed %t {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  %qkv:3 = llm.matmul %x {weights = [@l.q_proj, @l.k_proj, @l.v_proj]} : tensor<?x64xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %o = llm.matmul %qkv#0 {weights = [@l.o_proj]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %s = llm.add %o, %x : tensor<?x64xf32>
  %h = llm.matmul %s {weights = [@l.up_proj]} : tensor<?x64xf32> -> tensor<?x48xf32>
  %d = llm.matmul %h {weights = [@l.down_proj]} : tensor<?x48xf32> -> tensor<?x64xf32>
  %l = llm.logits %d {weight = @head} : tensor<?x64xf32> -> tensor<?x96xf32>
  return %l : tensor<?x96xf32>
}

// -----

// A tied lm_head is the embedding table, which the embed reads as float rows: the logits get
// their own copy, the view @"table[0:96]" of the same checkpoint tensor, and quantize it.
// INT8-LABEL: llm.param @table : tensor<96x64xf32>
// INT8-NEXT: llm.param @"table[0:96]" : tensor<96x64xf32>
// INT8: llm.embed %{{.*}} {table = @table}
// INT8: llm.logits %{{.*}} {llm.quant = {bits = 8 : i64, group_size = 64 : i64, method = "rtn", scheme = "symmetric"}, weight = @"table[0:96]"}
// Without lm-head-bits nothing changes: the tied table serves both.
// CHECK-LABEL: func.func @tied
// CHECK: llm.logits %{{.*}} weight = @table}
llm.param @table : tensor<96x64xf32>
func.func @tied(%t: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x96xf32> {
  %x = llm.embed %t {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  %l = llm.logits %x {weight = @table} : tensor<?x64xf32> -> tensor<?x96xf32>
  return %l : tensor<?x96xf32>
}

// -----

// A mixture of experts: the expert matmuls follow the policy; the router's matmul and the shared
// expert's gate stay float (routing decisions).
// CHECK-LABEL: func.func @moe
// CHECK: llm.matmul %arg0 {llm.cpu_tile = {layout = "row_major"}, weights = [@l.mlp.gate]}
// CHECK: llm.expert_matmul {{.*}} {llm.cpu_tile = {layout = "row_major"}, llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, num_experts = 2 : i64, top_k = 2 : i64, weights = {{\[\[}}@l.mlp.experts.0.gate_proj, @l.mlp.experts.1.gate_proj], [@l.mlp.experts.0.up_proj, @l.mlp.experts.1.up_proj]]}
// CHECK: llm.expert_matmul {{.*}} llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, {{.*}}@l.mlp.experts.0.down_proj
// CHECK: llm.matmul %arg0 {llm.cpu_tile = {layout = "row_major"}, llm.quant = {{.*}}, weights = [@l.mlp.shared_expert.up_proj]}
// CHECK: llm.matmul %arg0 {llm.cpu_tile = {layout = "row_major"}, weights = [@l.mlp.shared_expert_gate]}
// Expert matmuls are rtn whatever the method (calibration records llm.matmul inputs only), and
// keep-float applies to their names.
// HEAD8-LABEL: func.func @moe
// HEAD8: llm.matmul %arg0 {weights = [@l.mlp.gate]}
// HEAD8: llm.expert_matmul {{.*}} {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "asymmetric"}, num_experts
// HEAD8: llm.expert_matmul {{.*}} {num_experts = 2 : i64, top_k = 2 : i64, weights = {{\[\[}}@l.mlp.experts.0.down_proj
// HEAD8: llm.matmul %arg0 {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "awq", scheme = "asymmetric"}, weights = [@l.mlp.shared_expert.up_proj]}
// MXFP4 with `only`: the experts only (the MXFP4 import's selection).
// MXFP4-LABEL: func.func @moe
// MXFP4: llm.matmul %arg0 {weights = [@l.mlp.gate]}
// MXFP4: llm.expert_matmul {{.*}} {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "mxfp4"}, num_experts
// MXFP4: llm.expert_matmul {{.*}} {llm.quant = {bits = 4 : i64, group_size = 32 : i64, method = "rtn", scheme = "mxfp4"}, num_experts
// MXFP4: llm.matmul %arg0 {weights = [@l.mlp.shared_expert.up_proj]}
// MXFP4: llm.matmul %arg0 {weights = [@l.mlp.shared_expert_gate]}
// MXG64: scheme mxfp4 needs bits=4 and group-size=32 (one E8M0 scale per 32 columns), found bits=4 group-size=64
// MXBITS: scheme mxfp4 needs bits=4 and group-size=32 (one E8M0 scale per 32 columns), found bits=8 group-size=0
llm.param @l.mlp.gate : tensor<2x64xf32>
llm.param @l.mlp.experts.0.gate_proj : tensor<32x64xf32>
llm.param @l.mlp.experts.1.gate_proj : tensor<32x64xf32>
llm.param @l.mlp.experts.0.up_proj : tensor<32x64xf32>
llm.param @l.mlp.experts.1.up_proj : tensor<32x64xf32>
llm.param @l.mlp.experts.0.down_proj : tensor<64x32xf32>
llm.param @l.mlp.experts.1.down_proj : tensor<64x32xf32>
llm.param @l.mlp.shared_expert.up_proj : tensor<64x64xf32>
llm.param @l.mlp.shared_expert_gate : tensor<1x64xf32>
func.func @moe(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-remark @+1 {{stays float: its output is the router's logits (a routing decision)}}
  %logits = llm.matmul %x {weights = [@l.mlp.gate]} : tensor<?x64xf32> -> tensor<?x2xf32>
  %ids, %w = llm.router %logits {num_experts = 2, top_k = 2, scoring = "softmax_topk"} : tensor<?x2xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %gu:2 = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@l.mlp.experts.0.gate_proj, @l.mlp.experts.1.gate_proj], [@l.mlp.experts.0.up_proj, @l.mlp.experts.1.up_proj]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x64xf32>, tensor<?x64xf32>
  %a = llm.silu_mul %gu#0, %gu#1 : tensor<?x64xf32>
  %d = llm.expert_matmul %a, %ids {num_experts = 2, top_k = 2, weights = [[@l.mlp.experts.0.down_proj, @l.mlp.experts.1.down_proj]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x128xf32>
  %sh = llm.matmul %x {weights = [@l.mlp.shared_expert.up_proj]} : tensor<?x64xf32> -> tensor<?x64xf32>
  // expected-remark @+1 {{stays float: its output is the shared expert's gate (a routing decision)}}
  %sg = llm.matmul %x {weights = [@l.mlp.shared_expert_gate]} : tensor<?x64xf32> -> tensor<?x1xf32>
  %y = llm.moe_combine %d, %w, %sh, %sg : tensor<?x128xf32>, tensor<?x2xf32>, tensor<?x64xf32>, tensor<?x1xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
