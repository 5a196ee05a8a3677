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
