// RUN: llmc-opt --llm-plan-memory --split-input-file %s | FileCheck %s

// Widths 64 and 32 f32 = 256 and 128 bytes per token. %a is last used by %c, so %d reuses its
// slot; %c's output may not overlap its inputs %a (0) and %b (256). The returned value is
// outside the arena (-1).
// CHECK-LABEL: func.func @chain
// CHECK-SAME: llm.arena_bytes_per_token = 768 : i64
// CHECK: llm.silu %arg0 {llm.arena_offsets = array<i64: 0>}
// CHECK: llm.silu %arg0 {llm.arena_offsets = array<i64: 256>}
// CHECK: llm.add %{{.*}}, %{{.*}} {llm.arena_offsets = array<i64: 512>}
// CHECK: llm.mul %{{.*}}, %{{.*}} {llm.arena_offsets = array<i64: 0>}
// CHECK: llm.add %{{.*}}, %{{.*}} {llm.arena_offsets = array<i64: -1>}
func.func @chain(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %a = llm.silu %x : tensor<?x64xf32>
  %b = llm.silu %x : tensor<?x64xf32>
  %c = llm.add %a, %b : tensor<?x64xf32>
  %d = llm.mul %c, %b : tensor<?x64xf32>
  %e = llm.add %d, %c : tensor<?x64xf32>
  return %e : tensor<?x64xf32>
}

// -----

// Multi-result ops get one offset per result; a freed small slot is reused first-fit.
// CHECK-LABEL: func.func @multi
// CHECK-SAME: llm.arena_bytes_per_token = 384 : i64
// CHECK: llm.matmul %arg0 {llm.arena_offsets = array<i64: 0, 128>, weights = [@g, @u]}
// CHECK: llm.silu_mul %{{.*}}#0, %{{.*}}#1 {llm.arena_offsets = array<i64: 256>}
// CHECK: llm.silu %{{.*}} {llm.arena_offsets = array<i64: 0>}
llm.param @g : tensor<32x64xf16>
llm.param @u : tensor<32x64xf16>
func.func @multi(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  %gu:2 = llm.matmul %x {weights = [@g, @u]} : tensor<?x64xf32> -> tensor<?x32xf32>, tensor<?x32xf32>
  %m = llm.silu_mul %gu#0, %gu#1 : tensor<?x32xf32>
  %s = llm.silu %m : tensor<?x32xf32>
  %r = llm.mul %s, %m : tensor<?x32xf32>
  return %r : tensor<?x32xf32>
}

// -----

// A router's i32 expert ids (tensor<?x2xi32>) take 2 * 4 bytes per token, rounded up to a 64-byte
// slot, like any activation; they stay live until the last expert matmul reads them.
// CHECK-LABEL: func.func @router_ids
// CHECK-SAME: llm.arena_bytes_per_token = 768 : i64
// CHECK: llm.router %arg0 {llm.arena_offsets = array<i64: 0, 64>
// CHECK: llm.expert_matmul %arg1, %{{.*}} {llm.arena_offsets = array<i64: 128>
// CHECK: llm.expert_matmul %{{.*}}, %{{.*}} {llm.arena_offsets = array<i64: 256>
// CHECK: llm.moe_combine %{{.*}}, %{{.*}} {llm.arena_offsets = array<i64: -1>}
llm.param @e0.up : tensor<16x64xf32>
llm.param @e1.up : tensor<16x64xf32>
llm.param @e0.down : tensor<64x16xf32>
llm.param @e1.down : tensor<64x16xf32>
func.func @router_ids(%logits: tensor<?x2xf32>, %x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %ids, %w = llm.router %logits {num_experts = 2, top_k = 2, scoring = "softmax_topk"} : tensor<?x2xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %u = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@e0.up, @e1.up]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  %d = llm.expert_matmul %u, %ids {num_experts = 2, top_k = 2, weights = [[@e0.down, @e1.down]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x128xf32>
  %y = llm.moe_combine %d, %w : tensor<?x128xf32>, tensor<?x2xf32> -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}
