// RUN: llmc-opt --llm-fuse-gate-up --split-input-file %s | FileCheck %s

// Fires.
// CHECK-LABEL: func.func @fires
// CHECK: %[[GU:.*]]:2 = llm.matmul %arg0 {weights = [@gate, @up]} : tensor<?x64xf32> -> tensor<?x128xf32>, tensor<?x128xf32>
// CHECK-NEXT: %[[M:.*]] = llm.silu_mul %[[GU]]#0, %[[GU]]#1 : tensor<?x128xf32>
// CHECK-NEXT: llm.matmul %[[M]] {weights = [@down]}
// CHECK-NOT: llm.silu
// CHECK-NOT: llm.mul
llm.param @gate : tensor<128x64xf16>
llm.param @up : tensor<128x64xf16>
llm.param @down : tensor<64x128xf16>
func.func @fires(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %g = llm.matmul %x {weights = [@gate]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %u = llm.matmul %x {weights = [@up]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %s = llm.silu %g : tensor<?x128xf32>
  %m = llm.mul %s, %u : tensor<?x128xf32>
  %d = llm.matmul %m {weights = [@down]} : tensor<?x128xf32> -> tensor<?x64xf32>
  return %d : tensor<?x64xf32>
}

// -----

// Does not fire: up reads a different input.
// CHECK-LABEL: func.func @different_inputs
// CHECK: llm.silu %
// CHECK: llm.mul %
// CHECK-NOT: llm.silu_mul
llm.param @gate : tensor<128x64xf16>
llm.param @up : tensor<128x64xf16>
func.func @different_inputs(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %g = llm.matmul %x {weights = [@gate]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %u = llm.matmul %y {weights = [@up]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %s = llm.silu %g : tensor<?x128xf32>
  %m = llm.mul %s, %u : tensor<?x128xf32>
  return %m : tensor<?x128xf32>
}

// -----

// Does not fire: the silu result has another user.
// CHECK-LABEL: func.func @silu_has_other_users
// CHECK: %[[S:.*]] = llm.silu %
// CHECK: llm.mul %[[S]], %
// CHECK: llm.add %[[S]], %
// CHECK-NOT: llm.silu_mul
llm.param @gate : tensor<128x64xf16>
llm.param @up : tensor<128x64xf16>
func.func @silu_has_other_users(%x: tensor<?x64xf32>) -> tensor<?x128xf32> {
  %g = llm.matmul %x {weights = [@gate]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %u = llm.matmul %x {weights = [@up]} : tensor<?x64xf32> -> tensor<?x128xf32>
  %s = llm.silu %g : tensor<?x128xf32>
  %m = llm.mul %s, %u : tensor<?x128xf32>
  %r = llm.add %s, %m : tensor<?x128xf32>
  return %r : tensor<?x128xf32>
}

// -----

// Expert matmuls of one routing under silu * mul: one expert_matmul with both projections.
// CHECK-LABEL: func.func @experts_silu
// CHECK: %[[GU:.*]]:2 = llm.expert_matmul %arg0, %arg1 {num_experts = 2 : i64, top_k = 2 : i64, weights = {{\[\[}}@e0.gate, @e1.gate], [@e0.up, @e1.up]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>, tensor<?x32xf32>
// CHECK-NEXT: %[[M:.*]] = llm.silu_mul %[[GU]]#0, %[[GU]]#1 : tensor<?x32xf32>
// CHECK-NEXT: llm.expert_matmul %[[M]], %arg1 {num_experts = 2 : i64, top_k = 2 : i64, weights = {{\[\[}}@e0.down, @e1.down]]}
// CHECK-NOT: llm.silu
// CHECK-NOT: llm.mul
llm.param @e0.gate : tensor<16x64xf16>
llm.param @e1.gate : tensor<16x64xf16>
llm.param @e0.up : tensor<16x64xf16>
llm.param @e1.up : tensor<16x64xf16>
llm.param @e0.down : tensor<64x16xf16>
llm.param @e1.down : tensor<64x16xf16>
func.func @experts_silu(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) -> tensor<?x128xf32> {
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@e0.gate, @e1.gate]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %u = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@e0.up, @e1.up]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %s = llm.silu %g : tensor<?x32xf32>
  %m = llm.mul %u, %s : tensor<?x32xf32>
  %d = llm.expert_matmul %m, %ids {num_experts = 2, top_k = 2, weights = [[@e0.down, @e1.down]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x128xf32>
  return %d : tensor<?x128xf32>
}

// -----

// clamped_swiglu (gpt-oss) over expert matmuls with biases: fused, biases too, gate first.
// CHECK-LABEL: func.func @experts_clamped
// CHECK: %[[GU:.*]]:2 = llm.expert_matmul %arg0, %arg1 {biases = {{\[\[}}@e0.bg, @e1.bg], [@e0.bu, @e1.bu]], num_experts = 2 : i64, top_k = 1 : i64, weights = {{\[\[}}@e0.gate, @e1.gate], [@e0.up, @e1.up]]}
// CHECK-NEXT: llm.clamped_swiglu %[[GU]]#0, %[[GU]]#1 {alpha = 1.702000e+00 : f64, limit = 7.000000e+00 : f64} : tensor<?x16xf32>
llm.param @e0.gate : tensor<16x64xf32>
llm.param @e1.gate : tensor<16x64xf32>
llm.param @e0.up : tensor<16x64xf32>
llm.param @e1.up : tensor<16x64xf32>
llm.param @e0.bg : tensor<16xf32>
llm.param @e1.bg : tensor<16xf32>
llm.param @e0.bu : tensor<16xf32>
llm.param @e1.bu : tensor<16xf32>
func.func @experts_clamped(%x: tensor<?x64xf32>, %ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[@e0.gate, @e1.gate]], biases = [[@e0.bg, @e1.bg]]} : tensor<?x64xf32>, tensor<?x1xi32> -> tensor<?x16xf32>
  %u = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[@e0.up, @e1.up]], biases = [[@e0.bu, @e1.bu]]} : tensor<?x64xf32>, tensor<?x1xi32> -> tensor<?x16xf32>
  %a = llm.clamped_swiglu %g, %u {alpha = 1.702 : f64, limit = 7.0 : f64} : tensor<?x16xf32>
  return %a : tensor<?x16xf32>
}

// -----

// Not fused: gate and up are routed by different ids.
// CHECK-LABEL: func.func @experts_different_ids
// CHECK: llm.expert_matmul %arg0, %arg1
// CHECK: llm.expert_matmul %arg0, %arg2
// CHECK: llm.silu %
// CHECK: llm.mul %
// CHECK-NOT: llm.silu_mul
llm.param @e0.gate : tensor<16x64xf16>
llm.param @e1.gate : tensor<16x64xf16>
llm.param @e0.up : tensor<16x64xf16>
llm.param @e1.up : tensor<16x64xf16>
func.func @experts_different_ids(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>, %other: tensor<?x2xi32>) -> tensor<?x32xf32> {
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@e0.gate, @e1.gate]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %u = llm.expert_matmul %x, %other {num_experts = 2, top_k = 2, weights = [[@e0.up, @e1.up]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %s = llm.silu %g : tensor<?x32xf32>
  %m = llm.mul %s, %u : tensor<?x32xf32>
  return %m : tensor<?x32xf32>
}
