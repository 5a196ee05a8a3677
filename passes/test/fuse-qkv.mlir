// RUN: llmc-opt --llm-fuse-qkv --split-input-file %s | FileCheck %s

// Fires: q and k through rope, v directly, all on %x, with biases (Qwen2).
// CHECK-LABEL: func.func @fires
// CHECK: %[[QKV:.*]]:3 = llm.matmul %arg0 {biases = [@qb, @kb, @vb], weights = [@q, @k, @v]} : tensor<?x64xf32> -> tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
// CHECK-NOT: llm.matmul
// CHECK: %[[Q:.*]] = llm.rope %[[QKV]]#0, %arg1
// CHECK: %[[K:.*]] = llm.rope %[[QKV]]#1, %arg1
// CHECK: llm.attention %[[Q]], %[[K]], %[[QKV]]#2
llm.param @q : tensor<64x64xf16>
llm.param @k : tensor<16x64xf16>
llm.param @v : tensor<16x64xf16>
llm.param @qb : tensor<64xf16>
llm.param @kb : tensor<16xf16>
llm.param @vb : tensor<16xf16>
func.func @fires(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  %q = llm.matmul %x {weights = [@q], biases = [@qb]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %k = llm.matmul %x {weights = [@k], biases = [@kb]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %v = llm.matmul %x {weights = [@v], biases = [@vb]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %qr = llm.rope %q, %pos {num_heads = 4, head_dim = 16, theta = 10000.0} : tensor<?x64xf32>, tensor<?xi32>
  %kr = llm.rope %k, %pos {num_heads = 1, head_dim = 16, theta = 10000.0} : tensor<?x16xf32>, tensor<?xi32>
  %a = llm.attention %qr, %kr, %v {layer = 0, num_heads = 4, num_kv_heads = 1, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  return %a : tensor<?x64xf32>
}

// -----

// Does not fire: v reads a different input.
// CHECK-LABEL: func.func @different_inputs
// CHECK-COUNT-3: llm.matmul {{.*}}weights = [@{{[qkv]}}]
llm.param @q : tensor<64x64xf16>
llm.param @k : tensor<16x64xf16>
llm.param @v : tensor<16x64xf16>
func.func @different_inputs(%x: tensor<?x64xf32>, %y: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  %q = llm.matmul %x {weights = [@q]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %k = llm.matmul %x {weights = [@k]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %v = llm.matmul %y {weights = [@v]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %a = llm.attention %q, %k, %v {layer = 0, num_heads = 4, num_kv_heads = 1, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  return %a : tensor<?x64xf32>
}

// -----

// Does not fire: only q has a bias.
// CHECK-LABEL: func.func @bias_mismatch
// CHECK-COUNT-3: llm.matmul %arg0 {{.*}}weights = [@{{[qkv]}}]
llm.param @q : tensor<64x64xf16>
llm.param @k : tensor<16x64xf16>
llm.param @v : tensor<16x64xf16>
llm.param @qb : tensor<64xf16>
func.func @bias_mismatch(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %q = llm.matmul %x {weights = [@q], biases = [@qb]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %k = llm.matmul %x {weights = [@k]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %v = llm.matmul %x {weights = [@v]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %a = llm.attention %q, %k, %v {layer = 0, num_heads = 4, num_kv_heads = 1, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  return %a : tensor<?x64xf32>
}

// -----

// Does not fire: v's weight is bf16, the others f16.
// CHECK-LABEL: func.func @dtype_mismatch
// CHECK-COUNT-3: llm.matmul %arg0 {weights = [@{{[qkv]}}]}
llm.param @q : tensor<64x64xf16>
llm.param @k : tensor<16x64xf16>
llm.param @v : tensor<16x64xbf16>
func.func @dtype_mismatch(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %q = llm.matmul %x {weights = [@q]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %k = llm.matmul %x {weights = [@k]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %v = llm.matmul %x {weights = [@v]} : tensor<?x64xf32> -> tensor<?x16xf32>
  %a = llm.attention %q, %k, %v {layer = 0, num_heads = 4, num_kv_heads = 1, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x16xf32>, tensor<?x16xf32>
  return %a : tensor<?x64xf32>
}
