// RUN: llmc-opt --llm-fuse-add-rms-norm --split-input-file %s | FileCheck %s

// Fires; the add's other use (the residual) takes the fused op's sum.
// CHECK-LABEL: func.func @fires
// CHECK: %[[SUM:.*]], %[[NORMED:.*]] = llm.fused_add_rms_norm %arg0, %arg1 {eps = 1.000000e-05 : f64, weight = @w} : tensor<?x64xf32>
// CHECK-NOT: llm.rms_norm
// CHECK-NOT: llm.add
// CHECK: llm.mul %[[NORMED]], %[[SUM]]
llm.param @w : tensor<64xf32>
func.func @fires(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %sum = llm.add %a, %b : tensor<?x64xf32>
  %n = llm.rms_norm %sum {weight = @w, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  %r = llm.mul %n, %sum : tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

// Does not fire: the norm's input is not an add.
// CHECK-LABEL: func.func @not_an_add
// CHECK: llm.mul
// CHECK: llm.rms_norm
// CHECK-NOT: llm.fused_add_rms_norm
llm.param @w : tensor<64xf32>
func.func @not_an_add(%a: tensor<?x64xf32>, %b: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %p = llm.mul %a, %b : tensor<?x64xf32>
  %n = llm.rms_norm %p {weight = @w, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  return %n : tensor<?x64xf32>
}
