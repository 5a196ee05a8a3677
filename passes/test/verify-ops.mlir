// RUN: llmc-opt --split-input-file --verify-diagnostics %s
// The llm ops' verifiers: widths and shapes against the referenced llm.params.

llm.param @w : tensor<32x64xf16>
func.func @matmul_weight_shape(%x: tensor<?x64xf32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{weight @w has type 'tensor<32x64xf16>', expected shape [16, 64]}}
  %y = llm.matmul %x {weights = [@w]} : tensor<?x64xf32> -> tensor<?x16xf32>
  return %y : tensor<?x16xf32>
}

// -----

llm.param @w : tensor<32x64xf16>
func.func @matmul_result_count(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{has 2 results for 1 weights}}
  %y:2 = llm.matmul %x {weights = [@w]} : tensor<?x64xf32> -> tensor<?x32xf32>, tensor<?x32xf32>
  return %y#0 : tensor<?x32xf32>
}

// -----

llm.param @w : tensor<32x64xf16>
llm.param @b : tensor<16xf16>
func.func @matmul_bias_shape(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{bias @b has type 'tensor<16xf16>', expected shape [32]}}
  %y = llm.matmul %x {weights = [@w], biases = [@b]} : tensor<?x64xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

func.func @matmul_missing_param(%x: tensor<?x64xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{weight @nope does not name an llm.param}}
  %y = llm.matmul %x {weights = [@nope]} : tensor<?x64xf32> -> tensor<?x32xf32>
  return %y : tensor<?x32xf32>
}

// -----

llm.param @g : tensor<48xf32>
func.func @rms_norm_weight(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{weight @g has type 'tensor<48xf32>', expected [G] with G dividing the width 64}}
  %y = llm.rms_norm %x {weight = @g, eps = 1.0e-05 : f64} : tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

func.func @attention_gqa(%q: tensor<?x64xf32>, %kv: tensor<?x48xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{num_heads 4 is not a multiple of num_kv_heads 3}}
  %a = llm.attention %q, %kv, %kv {layer = 0, num_heads = 4, num_kv_heads = 3, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x48xf32>, tensor<?x48xf32>
  return %a : tensor<?x64xf32>
}

// -----

func.func @attention_k_width(%q: tensor<?x64xf32>, %kv: tensor<?x48xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{k has width 48, expected 32}}
  %a = llm.attention %q, %kv, %kv {layer = 0, num_heads = 4, num_kv_heads = 2, head_dim = 16, scale = 0.25} : tensor<?x64xf32>, tensor<?x48xf32>, tensor<?x48xf32>
  return %a : tensor<?x64xf32>
}

// -----

func.func @rope_scaling(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{scaling must be none, linear, llama3, yarn, longrope or dynamic, found "ntk"}}
  %y = llm.rope %x, %pos {num_heads = 4, head_dim = 16, theta = 10000.0, scaling = "ntk"} : tensor<?x64xf32>, tensor<?xi32>
  return %y : tensor<?x64xf32>
}

// -----

func.func @rope_rotary_dim_odd(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{rotary_dim must be even and in [0, head_dim], found 7}}
  %y = llm.rope %x, %pos {num_heads = 4, head_dim = 16, theta = 10000.0, rotary_dim = 7} : tensor<?x64xf32>, tensor<?xi32>
  return %y : tensor<?x64xf32>
}

// -----

func.func @rope_longrope_factor_count(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{ext_factors: longrope needs one per rotated pair (4), other scalings none; found 3}}
  %y = llm.rope %x, %pos {num_heads = 4, head_dim = 16, theta = 10000.0, scaling = "longrope", factor = 4.0, rotary_dim = 8, ext_factors = array<f64: 1.0, 2.0, 3.0>} : tensor<?x64xf32>, tensor<?xi32>
  return %y : tensor<?x64xf32>
}

// -----

func.func @rope_yarn_partial(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{yarn scaling rotates all of head_dim}}
  %y = llm.rope %x, %pos {num_heads = 4, head_dim = 16, theta = 10000.0, scaling = "yarn", factor = 4.0, rotary_dim = 8, original_max_position_embeddings = 16} : tensor<?x64xf32>, tensor<?xi32>
  return %y : tensor<?x64xf32>
}

// -----

func.func @rope_yarn_needs_original_context(%x: tensor<?x64xf32>, %pos: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{yarn scaling needs original_max_position_embeddings, beta_fast and beta_slow positive}}
  %y = llm.rope %x, %pos {num_heads = 4, head_dim = 16, theta = 10000.0, scaling = "yarn", factor = 4.0} : tensor<?x64xf32>, tensor<?xi32>
  return %y : tensor<?x64xf32>
}

// -----

llm.param @table : tensor<100x32xf16>
func.func @embed_width(%t: tensor<?xi32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{table @table has type 'tensor<100x32xf16>', expected [vocab, 64]}}
  %x = llm.embed %t {table = @table} : tensor<?xi32> -> tensor<?x64xf32>
  return %x : tensor<?x64xf32>
}

// -----

llm.param @head : tensor<100x32xf16>
func.func @logits_shape(%x: tensor<?x64xf32>) -> tensor<?x100xf32> {
  // expected-error @+1 {{weight @head has type 'tensor<100x32xf16>', expected shape [100, 64]}}
  %l = llm.logits %x {weight = @head} : tensor<?x64xf32> -> tensor<?x100xf32>
  return %l : tensor<?x100xf32>
}

// -----

// Mixture of experts: a valid router -> expert_matmul -> silu_mul -> expert_matmul -> combine.
llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
llm.param @u0 : tensor<16x64xf16>
llm.param @u1 : tensor<16x64xf16>
llm.param @d0 : tensor<64x16xf16>
llm.param @d1 : tensor<64x16xf16>
llm.param @bg0 : tensor<16xf32>
llm.param @bg1 : tensor<16xf32>
llm.param @sinks : tensor<4xf32>
func.func @moe_valid(%x: tensor<?x64xf32>, %logits: tensor<?x2xf32>, %shared: tensor<?x64xf32>,
                     %sg: tensor<?x1xf32>) -> tensor<?x64xf32> {
  %ids, %w = llm.router %logits {num_experts = 2, top_k = 2, scoring = "softmax_topk", normalize = true} : tensor<?x2xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  %g, %u = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1], [@u0, @u1]], biases = [[@bg0, @bg1], [@bg0, @bg1]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>, tensor<?x32xf32>
  %a = llm.clamped_swiglu %g, %u {alpha = 1.702 : f64, limit = 7.0 : f64} : tensor<?x32xf32>
  %d = llm.expert_matmul %a, %ids {num_experts = 2, top_k = 2, weights = [[@d0, @d1]]} : tensor<?x32xf32>, tensor<?x2xi32> -> tensor<?x128xf32>
  %y = llm.moe_combine %d, %w, %shared, %sg : tensor<?x128xf32>, tensor<?x2xf32>, tensor<?x64xf32>, tensor<?x1xf32> -> tensor<?x64xf32>
  %t = llm.attention %y, %y, %y {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64, scale = 0.25 : f64, sinks = @sinks} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  return %t : tensor<?x64xf32>
}

// -----

func.func @router_top_k(%logits: tensor<?x4xf32>) -> tensor<?x5xf32> {
  // expected-error @+1 {{needs 1 <= top_k <= num_experts <= 1024, found top_k 5, num_experts 4}}
  %ids, %w = llm.router %logits {num_experts = 4, top_k = 5, scoring = "softmax_topk"} : tensor<?x4xf32> -> (tensor<?x5xi32>, tensor<?x5xf32>)
  return %w : tensor<?x5xf32>
}

// -----

func.func @router_logits_width(%logits: tensor<?x4xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{logits has width 4, expected 8}}
  %ids, %w = llm.router %logits {num_experts = 8, top_k = 2, scoring = "softmax_topk"} : tensor<?x4xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %w : tensor<?x2xf32>
}

// -----

func.func @router_ids_width(%logits: tensor<?x8xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{ids has width 3, expected 2}}
  %ids, %w = llm.router %logits {num_experts = 8, top_k = 2, scoring = "softmax_topk"} : tensor<?x8xf32> -> (tensor<?x3xi32>, tensor<?x2xf32>)
  return %w : tensor<?x2xf32>
}

// -----

func.func @router_scoring(%logits: tensor<?x8xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{scoring must be softmax_topk or topk_softmax, found "sigmoid"}}
  %ids, %w = llm.router %logits {num_experts = 8, top_k = 2, scoring = "sigmoid"} : tensor<?x8xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %w : tensor<?x2xf32>
}

// -----

func.func @router_normalize(%logits: tensor<?x8xf32>) -> tensor<?x2xf32> {
  // expected-error @+1 {{normalize applies to softmax_topk only}}
  %ids, %w = llm.router %logits {num_experts = 8, top_k = 2, scoring = "topk_softmax", normalize = true} : tensor<?x8xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  return %w : tensor<?x2xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
func.func @expert_matmul_expert_count(%x: tensor<?x64xf32>, %ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{weights[0] must be an array of num_experts (2) symbols, found [@g0]}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[@g0]]} : tensor<?x64xf32>, tensor<?x1xi32> -> tensor<?x16xf32>
  return %g : tensor<?x16xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
func.func @expert_matmul_results(%x: tensor<?x64xf32>, %ids: tensor<?x1xi32>) -> tensor<?x16xf32> {
  // expected-error @+1 {{has 1 weights entries for 2 results; expected one per result}}
  %g:2 = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 1, weights = [[@g0, @g1]]} : tensor<?x64xf32>, tensor<?x1xi32> -> tensor<?x16xf32>, tensor<?x16xf32>
  return %g#0 : tensor<?x16xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
func.func @expert_matmul_ids(%x: tensor<?x64xf32>, %ids: tensor<?x1xi32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{ids has width 1, expected 2}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]]} : tensor<?x64xf32>, tensor<?x1xi32> -> tensor<?x32xf32>
  return %g : tensor<?x32xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
func.func @expert_matmul_top_k_multiple(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) -> tensor<?x31xf32> {
  // expected-error @+1 {{result 0 has width 31, expected a multiple of top_k 2}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x31xf32>
  return %g : tensor<?x31xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<8x64xf16>
func.func @expert_matmul_param_shape(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{weight @g1 has type 'tensor<8x64xf16>', expected shape [16, 64]}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  return %g : tensor<?x32xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
func.func @expert_matmul_x_width(%x: tensor<?x48xf32>, %ids: tensor<?x2xi32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{x has width 48, expected K (64) or top_k * K (128)}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]]} : tensor<?x48xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  return %g : tensor<?x32xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
llm.param @b : tensor<8xf32>
func.func @expert_matmul_bias(%x: tensor<?x64xf32>, %ids: tensor<?x2xi32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{bias @b has type 'tensor<8xf32>', expected shape [16]}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]], biases = [[@b, @b]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  return %g : tensor<?x32xf32>
}

// -----

func.func @moe_combine_operands(%y: tensor<?x128xf32>, %w: tensor<?x2xf32>, %s: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{takes (y, weights) or (y, weights, shared, shared_gate), found 3 operands}}
  %r = llm.moe_combine %y, %w, %s : tensor<?x128xf32>, tensor<?x2xf32>, tensor<?x64xf32> -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

func.func @moe_combine_y_width(%y: tensor<?x96xf32>, %w: tensor<?x2xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{y has width 96, expected 128}}
  %r = llm.moe_combine %y, %w : tensor<?x96xf32>, tensor<?x2xf32> -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

func.func @moe_combine_shared_gate(%y: tensor<?x128xf32>, %w: tensor<?x2xf32>, %s: tensor<?x64xf32>, %g: tensor<?x2xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{shared_gate has width 2, expected 1}}
  %r = llm.moe_combine %y, %w, %s, %g : tensor<?x128xf32>, tensor<?x2xf32>, tensor<?x64xf32>, tensor<?x2xf32> -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// -----

func.func @clamped_swiglu_limit(%g: tensor<?x32xf32>, %u: tensor<?x32xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{alpha and limit must be finite and > 0, found alpha 1.702000e+00, limit 0.000000e+00}}
  %a = llm.clamped_swiglu %g, %u {alpha = 1.702 : f64, limit = 0.0 : f64} : tensor<?x32xf32>
  return %a : tensor<?x32xf32>
}

// -----

llm.param @sinks : tensor<2xf32>
func.func @attention_sinks(%q: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{sinks @sinks has type 'tensor<2xf32>', expected shape [4]}}
  %t = llm.attention %q, %q, %q {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 4 : i64, head_dim = 16 : i64, scale = 0.25 : f64, sinks = @sinks} : tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
  return %t : tensor<?x64xf32>
}

// -----

llm.param @g0 : tensor<16x64xf16>
llm.param @g1 : tensor<16x64xf16>
func.func @expert_matmul_router_experts(%x: tensor<?x64xf32>, %logits: tensor<?x4xf32>) -> tensor<?x32xf32> {
  %ids, %w = llm.router %logits {num_experts = 4, top_k = 2, scoring = "softmax_topk"} : tensor<?x4xf32> -> (tensor<?x2xi32>, tensor<?x2xf32>)
  // expected-error @+1 {{num_experts 2 differs from its router's 4}}
  %g = llm.expert_matmul %x, %ids {num_experts = 2, top_k = 2, weights = [[@g0, @g1]]} : tensor<?x64xf32>, tensor<?x2xi32> -> tensor<?x32xf32>
  return %g : tensor<?x32xf32>
}
