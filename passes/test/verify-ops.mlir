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
