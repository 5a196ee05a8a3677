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
