// RUN: llmc-opt --llm-tile-cpu --split-input-file %s | FileCheck %s

// Every matmul (single and fused) and the lm_head get 16-row panels.
// CHECK-LABEL: func.func @untied
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weights = [@w]}
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weights = [@g, @u]}
// CHECK: llm.logits %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weight = @head}
llm.param @table : tensor<96x64xf16>
llm.param @w : tensor<64x64xf16>
llm.param @g : tensor<40x64xf16>
llm.param @u : tensor<40x64xf16>
llm.param @head : tensor<96x64xf16>
func.func @untied(%t: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x96xf32> {
  %x = llm.embed %t {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  %y = llm.matmul %x {weights = [@w]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %gu:2 = llm.matmul %y {weights = [@g, @u]} : tensor<?x64xf32> -> tensor<?x40xf32>, tensor<?x40xf32>
  %l = llm.logits %y {weight = @head} : tensor<?x64xf32> -> tensor<?x96xf32>
  return %l : tensor<?x96xf32>
}

// -----

// A tied lm_head reads the embedding table, which the embed op gathers by rows: it stays
// row-major, while the other matmuls are still packed.
// CHECK-LABEL: func.func @tied
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weights = [@w]}
// CHECK: llm.logits %{{.*}} {llm.cpu_tile = {layout = "row_major"}, weight = @table}
llm.param @table : tensor<96x64xf16>
llm.param @w : tensor<64x64xf16>
func.func @tied(%t: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<?x96xf32> {
  %x = llm.embed %t {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  %y = llm.matmul %x {weights = [@w]} : tensor<?x64xf32> -> tensor<?x64xf32>
  %l = llm.logits %y {weight = @table} : tensor<?x64xf32> -> tensor<?x96xf32>
  return %l : tensor<?x96xf32>
}

// -----

// Panels are never padded: 100 vocabulary rows and a fused 24 + 12 rows stay row-major, while
// a fused 8 + 8 rows (one panel across both weights) is packed.
// CHECK-LABEL: func.func @ragged
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_major"}, weights = [@a, @b]}
// CHECK: llm.matmul %{{.*}} {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}, weights = [@c, @d]}
// CHECK: llm.logits %{{.*}} {llm.cpu_tile = {layout = "row_major"}, weight = @head}
llm.param @a : tensor<24x64xf32>
llm.param @b : tensor<12x64xf32>
llm.param @c : tensor<8x64xf32>
llm.param @d : tensor<8x64xf32>
llm.param @head : tensor<100x64xf32>
func.func @ragged(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x100xf32> {
  %ab:2 = llm.matmul %x {weights = [@a, @b]} : tensor<?x64xf32> -> tensor<?x24xf32>, tensor<?x12xf32>
  %cd:2 = llm.matmul %x {weights = [@c, @d]} : tensor<?x64xf32> -> tensor<?x8xf32>, tensor<?x8xf32>
  %l = llm.logits %x {weight = @head} : tensor<?x64xf32> -> tensor<?x100xf32>
  return %l : tensor<?x100xf32>
}

// -----

// Expert weights are panelled per expert: gate + up give 32 rows per expert (a multiple of 16),
// so the 3-D blob is panelled and no panel straddles two experts; down's 24 rows per expert are
// not, so it stays row-major.
// CHECK-LABEL: func.func @experts
// CHECK: llm.expert_matmul %arg0, %arg1 {llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}
// CHECK: llm.expert_matmul %{{.*}}, %arg1 {llm.cpu_tile = {layout = "row_major"}
llm.param @e0.gate : tensor<16x24xf16>
llm.param @e1.gate : tensor<16x24xf16>
llm.param @e0.up : tensor<16x24xf16>
llm.param @e1.up : tensor<16x24xf16>
llm.param @e0.down : tensor<24x16xf16>
llm.param @e1.down : tensor<24x16xf16>
func.func @experts(%x: tensor<?x24xf32>, %ids: tensor<?x1xi32>) -> tensor<?x24xf32> {
  %gu:2 = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[@e0.gate, @e1.gate], [@e0.up, @e1.up]]} : tensor<?x24xf32>, tensor<?x1xi32> -> tensor<?x16xf32>, tensor<?x16xf32>
  %a = llm.silu_mul %gu#0, %gu#1 : tensor<?x16xf32>
  %d = llm.expert_matmul %a, %ids {num_experts = 2, top_k = 1, weights = [[@e0.down, @e1.down]]} : tensor<?x16xf32>, tensor<?x1xi32> -> tensor<?x24xf32>
  return %d : tensor<?x24xf32>
}
