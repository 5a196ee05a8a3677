// Import of pre-quantized int4 checkpoints (GPTQ and AWQ safetensors) into the plan's encoding,
// repacking the codes without dequantizing them.
//
// config.json's `quantization_config` says which format:
//   GPTQ (quant_method "gptq"): per linear `P.qweight` I32 [K/8, N] (8 codes per word along K,
//     code of input k in bits 4*(k%8) of word k/8), `P.qzeros` I32 [K/G, N/8] (8 zero points per
//     word along N), `P.scales` F16 [K/G, N], `P.g_idx` I32 [K] (group of each input; act-order
//     checkpoints permute it). AutoGPTQ's original format (checkpoint_format "gptq", the default)
//     stores every zero point minus one; "gptq_v2" stores it as it is.
//   AWQ (quant_method "awq", version "gemm"): `P.qweight` I32 [K, N/8] (8 codes per word along N,
//     nibble i holding column 8*w + [0,2,4,6,1,3,5,7][i]), `P.qzeros` I32 [K/G, N/8] in the same
//     order, `P.scales` F16 [K/G, N]; no g_idx; always zero points.
// Both mean w[n, k] = (code - zero[g, n]) * scale[g, n] with g the group of input k, which is the
// plan's asymmetric I4 (or symmetric when every zero point is 8). Act-order (a g_idx that is not
// k / G) becomes the plan's input_permutation: stored column c = original input perm[c], with the
// inputs sorted by group so that each group is one run of G stored columns.
//   MXFP4 (quant_method "mxfp4", gpt-oss): a mixture of experts' stacked projections
//     `model.layers.L.mlp.experts.P` (P = gate_up_proj, down_proj; transformers' [E, in, out],
//     used as x @ W) are stored as `P_blocks` U8 [E, out, in/32, 16] and `P_scales` U8
//     [E, out, in/32], out-major (not transposed): byte j of a block holds column 2j in its low
//     nibble and 2j + 1 in its high one, each an E2M1 code; scale byte b means 2^(b - 127)
//     (transformers' integrations/mxfp4.py). That is the plan's FP4_E2M1 + E8M0 encoding row for
//     row, so expert matrices are read out of the blocks as they are (Mxfp4ExpertMatrix).
//
// Thread-safety: pure functions over the borrowed tensors.
#ifndef LLMC_COMPILER_QUANT_PREQUANTIZED_H_
#define LLMC_COMPILER_QUANT_PREQUANTIZED_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/importer/checkpoint.h"
#include "compiler/quant/quantize.h"

namespace llmc::quant {

// One MXFP4 stacked expert tensor: `blocks` [E, rows, cols / 32, 16] and `scales`
// [E, rows, cols / 32], expert e's [rows, cols] matrix being what x @ W^T multiplies.
struct Mxfp4Tensor {
  TensorInfo blocks;
  TensorInfo scales;
  int64_t experts = 0, rows = 0, cols = 0;
};

struct PrequantizedCheckpoint {
  std::string method;  // "gptq", "awq" or "mxfp4"
  QuantFormat format;  // int4, the group size, asymmetric unless every zero point is 8; mxfp4
  // The checkpoint's tensors with each quantized linear's qweight/qzeros/scales/g_idx replaced
  // by a `P.weight` entry of the float shape [N, K] and dtype F16 that has no data (so the
  // config and IR builder see an ordinary checkpoint).
  std::map<std::string, TensorInfo> tensors;
  // `P.weight` -> its codes in the plan's layout (GPTQ, AWQ).
  std::map<std::string, QuantizedMatrix> matrices;
  // MXFP4: the placeholder `P` (in `tensors`: [E, cols, rows] BF16, no data) -> its blocks and
  // scales; expert views of it are decoded on demand (Mxfp4ExpertMatrix).
  std::map<std::string, Mxfp4Tensor> mxfp4;
};

// Whether `model_dir`'s config.json has a quantization_config (then ImportPrequantized applies).
absl::StatusOr<bool> IsPrequantized(const std::string& model_dir);

// Repacks every quantized linear of `tensors` (the checkpoint's) per `model_dir`'s config.json.
// Errors name the tensor or config field: unsupported bits or method, a missing qzeros or
// scales, shapes that disagree with each other, a g_idx whose groups are not all of size G.
// MXFP4 checkpoints: every `P_blocks` / `P_scales` pair becomes the placeholder `P`. Refused,
// naming the tensor or pattern: a lone half of a pair, shapes that disagree, a scale byte 255
// (NaN), a pair outside `model.layers.L.mlp.experts.`, an expert projection stored as floats,
// and a modules_to_not_convert pattern matching an experts module (transformers would then
// expect it in floats).
absl::StatusOr<PrequantizedCheckpoint> ImportPrequantized(
    const std::string& model_dir, const std::map<std::string, TensorInfo>& tensors);

// Rows first, first + step, ... of expert `expert`'s [rows, cols] matrix of `tensor` (`name`
// for messages) as an MXFP4 QuantizedMatrix: the codes repacked into LANE_CHUNKS, the exponent
// bytes copied; no requantization.
absl::StatusOr<QuantizedMatrix> Mxfp4ExpertMatrix(const Mxfp4Tensor& tensor,
                                                  const std::string& name, int64_t expert,
                                                  int64_t row_first, int64_t row_step);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_PREQUANTIZED_H_
