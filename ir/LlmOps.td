//===- LlmOps.td - the llm dialect ---------------------------*- tablegen -*-===//
//
// Value semantics on tensors. Activations are `tensor<?xWxf32>`: the dynamic dimension is the
// number of tokens of one engine step, W the row width; f32 is the compute type whatever the
// weights' dtype. Weights are module-level `llm.param` symbols named after the checkpoint's
// tensors and referenced by FlatSymbolRefAttr, so the IR of an 80-layer model stays small and
// weights are never inlined. Verifiers check widths against the referenced params.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_IR_LLMOPS_TD
#define LLMC_IR_LLMOPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Llm_Dialect : Dialect {
  let name = "llm";
  let cppNamespace = "::llmc::llm";
  let summary = "Transformer-level ops for ahead-of-time LLM compilation";
  let useFoldAPI = kEmitFoldAdaptorFolder;
}

class Llm_Op<string mnemonic, list<Trait> traits = []> :
    Op<Llm_Dialect, mnemonic, traits>;

// [T, W] f32 rows; T is dynamic (tokens of a step).
def Llm_Activation : 2DTensorOf<[F32]>;
// [T] i32: token ids or positions.
def Llm_TokenVector : 1DTensorOf<[I32]>;
// [T, top_k] i32: each token's chosen experts, written by llm.router (plan.proto EXPERT_IDS).
def Llm_ExpertIds : 2DTensorOf<[I32]>;

def Llm_ParamOp : Llm_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a weight tensor of the checkpoint, by name";
  let description = [{
    `llm.param @model.norm.weight : tensor<64xf16>` declares the checkpoint tensor of that name;
    the type is its shape and its checkpoint dtype. Codegen reads the data by name.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyRankedTensor>:$type);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return getType().cast<::mlir::RankedTensorType>();
    }
  }];
}

def Llm_EmbedOp : Llm_Op<"embed", [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "rows of the embedding table for the token ids";
  let description = [{
    With `scale`, each row is multiplied by it in the table's dtype (Gemma's sqrt(hidden_size)
    normalizer, which transformers casts to the embedding dtype): plan.proto's EmbedAttrs.
  }];
  let arguments = (ins Llm_TokenVector:$tokens, FlatSymbolRefAttr:$table,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$tokens attr-dict `:` type($tokens) `->` type($result)";
}

def Llm_RmsNormOp : Llm_Op<"rms_norm", [Pure, AllTypesMatch<["x", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "x / sqrt(mean(x^2) + eps) * (weight_offset + weight)";
  let description = [{
    The weight's length G divides the row width W: each of the W / G groups of G consecutive
    elements is normalized on its own, with the same weight. G = W normalizes whole rows; G =
    head_dim normalizes each head (Qwen3's q_norm / k_norm). `weight_offset` is added to the
    weight (Gemma's 1 + weight); codegen folds it into the f32 gamma it writes.
  }];
  let arguments = (ins Llm_Activation:$x, FlatSymbolRefAttr:$weight, F64Attr:$eps,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_offset);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let extraClassDeclaration = [{
    // G: the weight's length (0 when the weight is not a 1-D llm.param).
    int64_t getGroupWidth();
    // Whole rows are normalized (G = W): the form residual fusion and AWQ folding handle.
    bool normalizesWholeRows();
  }];
}

def Llm_FusedAddRmsNormOp : Llm_Op<"fused_add_rms_norm", [Pure,
    AllTypesMatch<["a", "b", "sum", "normed"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "sum = a + b; normed = rms_norm(sum)";
  let arguments = (ins Llm_Activation:$a, Llm_Activation:$b, FlatSymbolRefAttr:$weight,
                       F64Attr:$eps, DefaultValuedAttr<F64Attr, "0.0">:$weight_offset);
  let results = (outs Llm_Activation:$sum, Llm_Activation:$normed);
  let assemblyFormat = "$a `,` $b attr-dict `:` type($a)";
}

def Llm_MatmulOp : Llm_Op<"matmul", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "x * W^T (+ b), one result per weight";
  let description = [{
    Every weight is `[N_i, K]` with K the width of x; result i is `[T, N_i]`. `biases` is
    absent/empty or has one `[N_i]` param per weight. Several weights mean several fused
    projections sharing one input (q/k/v, gate/up); codegen concatenates them.
  }];
  let arguments = (ins Llm_Activation:$x, FlatSymbolRefArrayAttr:$weights,
                       OptionalAttr<FlatSymbolRefArrayAttr>:$biases);
  let results = (outs Variadic<Llm_Activation>:$results);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // The bias symbols, empty when the op has none.
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getBiasRefs();
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getWeightRefs();
  }];
}

def Llm_RopeOp : Llm_Op<"rope", [Pure, AllTypesMatch<["x", "result"]>]> {
  let summary = "rotary position embedding, HF rotate-half layout";
  let description = [{
    `scaling` is "none", "linear" (positions divided by `factor`), "llama3" (Llama 3.1
    frequency-dependent scaling using the low/high frequency factors and
    `original_max_position_embeddings`) or "yarn" (YaRN's blend of interpolated and
    extrapolated frequencies over the ramp set by `beta_fast`, `beta_slow` and
    `original_max_position_embeddings`, rounded outward unless `untruncated`). YaRN's cos/sin
    scale is not applied here: it scales q and k alike, so builders fold its square into the
    attention scale. "longrope" divides frequency i by `ext_factors[i]` (the short or long
    factors the importer chose, `long_factors`) and multiplies the rotated dims by
    `attention_factor`; "dynamic" (NTK) has the default frequencies within a plan's context.
    `rotary_dim` (0: head_dim) dims at the start of each head are rotated, the rest pass
    through (partial rotary).
  }];
  let arguments = (ins Llm_Activation:$x, Llm_TokenVector:$positions,
                       I64Attr:$num_heads, I64Attr:$head_dim, F64Attr:$theta,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$scaling,
                       DefaultValuedAttr<F64Attr, "1.0">:$factor,
                       DefaultValuedAttr<F64Attr, "1.0">:$low_freq_factor,
                       DefaultValuedAttr<F64Attr, "4.0">:$high_freq_factor,
                       DefaultValuedAttr<I64Attr, "0">:$original_max_position_embeddings,
                       DefaultValuedAttr<F64Attr, "32.0">:$beta_fast,
                       DefaultValuedAttr<F64Attr, "1.0">:$beta_slow,
                       DefaultValuedAttr<BoolAttr, "false">:$untruncated,
                       DefaultValuedAttr<I64Attr, "0">:$rotary_dim,
                       OptionalAttr<DenseF64ArrayAttr>:$ext_factors,
                       DefaultValuedAttr<BoolAttr, "false">:$long_factors,
                       DefaultValuedAttr<F64Attr, "1.0">:$attention_factor);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x `,` $positions attr-dict `:` type($x) `,` type($positions)";
  let hasVerifier = 1;
}

// Not Pure: at run time it also writes k and v into the paged KV cache of `layer`, so it must
// survive even if its result were unused.
def Llm_AttentionOp : Llm_Op<"attention", [
    MemoryEffects<[MemRead, MemWrite]>, AllTypesMatch<["q", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "causal attention with GQA/MQA and optional sliding window";
  let description = [{
    `sinks` (gpt-oss) names a `[num_heads]` float param: head h's softmax denominator gains
    exp(sink_h - m), m the maximum over the scaled scores and sink_h; the sink has no value row.
  }];
  let arguments = (ins Llm_Activation:$q, Llm_Activation:$k, Llm_Activation:$v,
                       I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, DefaultValuedAttr<I64Attr, "0">:$sliding_window,
                       F64Attr:$scale,
                       // > 0: scores = cap * tanh(scores / cap) before the softmax (Gemma 2).
                       DefaultValuedAttr<F64Attr, "0.0">:$logit_softcap,
                       OptionalAttr<FlatSymbolRefAttr>:$sinks);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v)
  }];
  let hasVerifier = 1;
}

class Llm_UnaryOp<string mnemonic> : Llm_Op<mnemonic, [Pure, AllTypesMatch<["x", "result"]>]> {
  let arguments = (ins Llm_Activation:$x);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
}

class Llm_BinaryOp<string mnemonic> :
    Llm_Op<mnemonic, [Pure, AllTypesMatch<["lhs", "rhs", "result"]>]> {
  let arguments = (ins Llm_Activation:$lhs, Llm_Activation:$rhs);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs)";
}

def Llm_SiluOp : Llm_UnaryOp<"silu"> { let summary = "x * sigmoid(x)"; }
def Llm_MulOp : Llm_BinaryOp<"mul"> { let summary = "elementwise lhs * rhs"; }
def Llm_AddOp : Llm_BinaryOp<"add"> { let summary = "elementwise lhs + rhs"; }
def Llm_SiluMulOp : Llm_BinaryOp<"silu_mul"> { let summary = "silu(lhs) * rhs"; }
def Llm_GeluTanhMulOp : Llm_BinaryOp<"gelu_tanh_mul"> {
  let summary = "gelu_tanh(lhs) * rhs, gelu's tanh approximation (gelu_pytorch_tanh, gelu_new)";
}

def Llm_ClampedSwigluOp : Llm_Op<"clamped_swiglu", [Pure,
    AllTypesMatch<["gate", "up", "result"]>]> {
  let summary = "(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g), g = min(gate, limit)";
  let description = [{
    gpt-oss's expert activation (swiglu_alpha, swiglu_limit); both finite and positive.
  }];
  let arguments = (ins Llm_Activation:$gate, Llm_Activation:$up, F64Attr:$alpha, F64Attr:$limit);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts. A token's top_k routed rows are top_k consecutive column blocks of its
// activation row: a routed activation of N columns per expert is `tensor<?x(top_k*N)xf32>`.
//===----------------------------------------------------------------------===//

def Llm_RouterOp : Llm_Op<"router", [Pure]> {
  let summary = "the top_k experts of each token and their weights, from the router logits";
  let description = [{
    Chooses the `top_k` largest logits (ties to the lower expert index), in descending order.
    `scoring` "softmax_topk" (Qwen-MoE, Mixtral): the weights are the softmax over all
    num_experts logits at the chosen experts, divided by their sum when `normalize`;
    "topk_softmax" (gpt-oss): the softmax over the top_k chosen logits (`normalize` refused).
    The router's matmul (and bias) is an ordinary llm.matmul before it.
  }];
  let arguments = (ins Llm_Activation:$logits, I64Attr:$num_experts, I64Attr:$top_k,
                       StrAttr:$scoring, DefaultValuedAttr<BoolAttr, "false">:$normalize);
  let results = (outs Llm_ExpertIds:$ids, Llm_Activation:$weights);
  let assemblyFormat = [{
    $logits attr-dict `:` type($logits) `->` `(` type($ids) `,` type($weights) `)`
  }];
  let hasVerifier = 1;
}

def Llm_ExpertMatmulOp : Llm_Op<"expert_matmul", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "per routed row, x * W_e^T (+ b_e) with e the row's expert";
  let description = [{
    `weights` holds one entry per fused projection, each an array of exactly num_experts
    `[N_i, K]` params (expert e's matrix at index e); `biases` is absent or the same shape of
    `[N_i]` params. x is `[T, K]` (every slot of a token reads its row: gate/up) or
    `[T, top_k*K]` (slot j reads columns [jK, (j+1)K): down). Result i is `[T, top_k*N_i]`:
    slot j of token t holds x_slot(t, j) * W_e^T (+ b_e), e = ids[t, j].
  }];
  let arguments = (ins Llm_Activation:$x, Llm_ExpertIds:$ids, I64Attr:$num_experts,
                       I64Attr:$top_k, ArrayAttr:$weights, OptionalAttr<ArrayAttr>:$biases);
  let results = (outs Variadic<Llm_Activation>:$results);
  let assemblyFormat = [{
    $x `,` $ids attr-dict `:` type($x) `,` type($ids) `->` type($results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // weights[projection] / biases[projection] (empty when the op has no biases).
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getExpertWeightRefs(unsigned projection);
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getExpertBiasRefs(unsigned projection);
    // Every weight / bias symbol, projection-major.
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getAllWeightRefs();
    ::llvm::SmallVector<::mlir::FlatSymbolRefAttr> getAllBiasRefs();
  }];
}

def Llm_MoeCombineOp : Llm_Op<"moe_combine", [Pure]> {
  let summary = "sum_j weights[t, j] * y[t, j*H:(j+1)*H] (+ sigmoid(shared_gate) * shared)";
  let description = [{
    Operands: y `[T, top_k*H]`, weights `[T, top_k]`, and optionally shared `[T, H]` and
    shared_gate `[T, 1]` (Qwen2-MoE's shared expert, added last). The slots are summed in order.
  }];
  let arguments = (ins Variadic<Llm_Activation>:$inputs);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

def Llm_LogitsOp : Llm_Op<"logits", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "x * W^T with W the lm_head (or the tied embedding table)";
  let description = [{
    With `softcap` > 0 the logits are soft-capped, cap * tanh(logits / cap) (Gemma 2's
    final_logit_softcapping).
  }];
  let arguments = (ins Llm_Activation:$x, FlatSymbolRefAttr:$weight,
                       DefaultValuedAttr<F64Attr, "0.0">:$softcap);
  let results = (outs Llm_Activation:$result);
  let assemblyFormat = "$x attr-dict `:` type($x) `->` type($result)";
}

#endif  // LLMC_IR_LLMOPS_TD
