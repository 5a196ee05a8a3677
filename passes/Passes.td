//===- Passes.td - llm dialect passes ------------------------*- tablegen -*-===//
//
// All passes run on the module (they walk every func.func in it), so llmc-opt can run each
// one at top level without a nested pipeline.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_PASSES_PASSES_TD
#define LLMC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def FuseAddRmsNormPass : Pass<"llm-fuse-add-rms-norm", "::mlir::ModuleOp"> {
  let summary = "rms_norm(add(a, b)) -> fused_add_rms_norm(a, b)";
  let description = [{
    The residual add and the following norm read the same rows; fusing them saves one pass
    over the activations. The fused op's `sum` result replaces the add's other uses.
  }];
  let dependentDialects = ["::llmc::llm::LlmDialect"];
}

def FuseGateUpPass : Pass<"llm-fuse-gate-up", "::mlir::ModuleOp"> {
  let summary = "mul(silu(matmul_g(x)), matmul_u(x)) -> silu_mul(matmul[g, u](x))";
  let description = [{
    Also fuses the gate and up matmuls under gelu_tanh_mul, and the expert matmuls of a mixture
    of experts under silu * mul and clamped_swiglu when they read the same x with the same ids
    (same num_experts and top_k), all or none have biases and their dtypes agree: one
    expert_matmul whose 3-D weight holds, per expert, gate's rows then up's.
  }];
  let dependentDialects = ["::llmc::llm::LlmDialect"];
}

def FuseQkvPass : Pass<"llm-fuse-qkv", "::mlir::ModuleOp"> {
  let summary = "Fuse the q/k/v projections of one attention into one matmul";
  let description = [{
    Three single-weight matmuls on the same input whose results feed one llm.attention
    (directly or through llm.rope) become one matmul with three weights, so x is read once.
    Not applied when the inputs differ, when only some have a bias, or when the weights'
    dtypes differ (they are concatenated into one blob).
  }];
  let dependentDialects = ["::llmc::llm::LlmDialect"];
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def QuantizeWeightsPass : Pass<"llm-quantize-weights", "::mlir::ModuleOp"> {
  let summary = "Decide which matmul weights are stored as int8/int4 codes";
  let description = [{
    Sets `llm.quant = {bits, group_size, scheme, method}` on every llm.matmul and
    llm.expert_matmul (and, with lm-head-bits, the llm.logits) whose weights the policy
    quantizes; codegen turns the attribute into I8/I4 codes with F16 scales, or FP4_E2M1 codes
    with E8M0 scales for scheme mxfp4 (plan.proto, message Quantization). Policy: embeddings,
    norms, biases and the lm_head stay float; so does a matmul any of whose weights contains a
    keep-float pattern, or (with `only`) none of whose weights contains an `only` pattern, or
    whose input width the format cannot group (int4 and int8 per-group need a multiple of 32
    and of group-size); so do the matmul feeding an llm.router and the one feeding an
    llm.moe_combine's shared gate (routing decisions; a remark says so). A fused matmul is
    quantized as a whole: its weights become one blob with one encoding. Expert matmuls follow
    the same policy with method rtn whatever `method` says (calibration records llm.matmul
    inputs only).
    The lm_head has its own format (lm-head-bits): 8 is symmetric int8 with one scale per
    output channel, 4 is int4 with group-size (32 when the body is int8 per channel) and
    scheme; its method is always rtn (calibration records no lm_head inputs), and keep-float
    does not apply to it. A tied lm_head (the embedding table) or one whose width the format
    cannot group is an error, not a silent float.
  }];
  let options = [
    Option<"bits", "bits", "int64_t", /*default=*/"8", "8 (int8) or 4 (int4)">,
    Option<"groupSize", "group-size", "int64_t", /*default=*/"0",
           "input columns per scale: 32, 64 or 128; 0: one scale per output channel (int8 only)">,
    Option<"scheme", "scheme", "std::string", /*default=*/"\"symmetric\"",
           "symmetric, asymmetric (int4 only: a zero point per group), or mxfp4 (bits 4, "
           "group-size 32: E2M1 codes, E8M0 scales)">,
    Option<"method", "method", "std::string", /*default=*/"\"rtn\"",
           "rtn, awq (activation-aware scales folded upstream) or gptq (imported codes)">,
    ListOption<"keepFloat", "keep-float", "std::string",
               "weights whose name contains one of these substrings stay float">,
    ListOption<"only", "only", "std::string",
               "if given, only matmuls with a weight whose name contains one of these "
               "substrings are quantized (the MXFP4 import: .mlp.experts.)">,
    Option<"lmHeadBits", "lm-head-bits", "int64_t", /*default=*/"0",
           "0: the lm_head stays float; 8: int8 per output channel; 4: int4 (group-size, scheme)">,
  ];
}

//===----------------------------------------------------------------------===//
// Memory planning
//===----------------------------------------------------------------------===//

def PlanMemoryPass : Pass<"llm-plan-memory", "::mlir::ModuleOp"> {
  let summary = "Assign every activation an offset in one per-token arena";
  let description = [{
    Offsets are bytes per token: a value's buffer starts at max_tokens * offset, so one plan
    serves any maximum batch size. Liveness runs from the defining op to the last use; an op's
    outputs never overlap its inputs; freed slots are reused first-fit. Writes
    `llm.arena_offsets` (one i64 per result, -1 for values outside the arena: the function's
    results) on each op and `llm.arena_bytes_per_token` on each function.
  }];
}

//===----------------------------------------------------------------------===//
// Tiling and packing
//===----------------------------------------------------------------------===//

def TileCpuPass : Pass<"llm-tile-cpu", "::mlir::ModuleOp"> {
  let summary = "Record the CPU kernels' weight layout on every matmul, expert matmul and logits op";
  let description = [{
    Sets `llm.cpu_tile = {layout = "row_panels", panel_rows = 16 : i64}`: codegen packs the
    weights in panels of 16 rows stored column by column, the layout every CPU dispatch target
    (SCALAR, SSE4, AVX2, AVX-512, NEON) streams in one pass, so the runtime never repacks.
    Weights an llm.embed also reads (tied lm_head), and weights whose row count is not a
    multiple of 16 (panels are never padded), keep `{layout = "row_major"}`. An
    llm.expert_matmul's 3-D weight is panelled when each expert's rows (summed over its fused
    projections) are a multiple of 16, so no panel straddles two experts.
  }];
}

#endif // LLMC_PASSES_PASSES_TD
