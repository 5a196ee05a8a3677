//===- EmitProgram.h - llm module -> plan Program + weight blobs -*- C++ -*-===//
//
// Walks `func.func @forward` of a module that went through the default pipeline (so every op
// carries llm.arena_offsets) and produces the plan's Program, writing each weight blob through
// a PlanWriter and appending its entry to the tensor table.
//
// Weight layout in the plan:
//   - embedding table, matmul weights, lm_head: `weightDtype`, row-major as in the checkpoint,
//     except matmul/lm_head weights whose op carries `llm.cpu_tile = {layout = "row_panels",
//     panel_rows = P}` (--llm-tile-cpu): those are packed as ROW_PANELS of P rows (plan.proto);
//   - rms_norm weights and matmul biases: always F32 (tiny, and their precision matters);
//   - a fused matmul's weights are one blob, concatenated along the output dimension
//     (`...self_attn.qkv_proj.weight` = q rows, then k rows, then v rows), biases likewise;
//   - a param referenced twice (tied lm_head = embedding table) gets one tensor entry;
//   - matmul/lm_head weights whose op carries `llm.quant` (--llm-quantize-weights, QuantAttr.h)
//     are I8/I4 codes, ROW_MAJOR, with F16 scales, U8 zero points (asymmetric) and an I32 input
//     permutation (act-order imports) as extra tensors named `<codes>.scales`,
//     `<codes>.zero_points`, `<codes>.input_permutation` (plan.proto, message Quantization).
//     Codes come from the WeightSource when it holds the weight pre-quantized (GPTQ/AWQ
//     checkpoints), else from compiler/quant's round-to-nearest quantizer. Scheme "mxfp4"
//     writes FP4_E2M1 codes with E8M0 `<codes>.scales` (the QuantizedMatrix's exponents);
//   - an llm.expert_matmul's weights are one 3-D tensor [E, sum N_i, K]: per expert, its part
//     of every fused projection in order (gate rows, then up rows), float (panelled per expert)
//     or quantized with 3-D companions [E, sum N_i, groups]; its biases one F32 [E, sum N_i].
//     The name drops the expert index (or the view) of the parts' names:
//     `...mlp.experts.{e}.{gate,up}_proj.weight` -> `...mlp.experts.gate_up_proj.weight`,
//     views of a stacked `...experts.gate_up_proj` -> that name (codegen/ExpertSlice.h). The
//     WeightSource may free the parts (releaseWeights) once the tensor is written;
//   - attention sinks: F32 [num_heads], the ATTENTION op's weight.
// Conversion streams in chunks of kConvertChunkElements, so a multi-GB checkpoint is never
// held in memory.
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_EMITPROGRAM_H_
#define LLMC_CODEGEN_EMITPROGRAM_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/quant/quantize.h"
#include "mlir/IR/BuiltinOps.h"
#include "runtime/plan/plan_writer.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// A checkpoint tensor's bytes. `data` is borrowed from the WeightSource (typically an mmapped
// safetensors file) and must stay valid until emitProgram returns.
struct WeightView {
  llmrt::plan::DType dtype = llmrt::plan::DTYPE_UNSPECIFIED; // F32, F16 or BF16
  std::vector<int64_t> shape;
  const uint8_t *data = nullptr; // little-endian elements, row-major
  uint64_t sizeBytes = 0;
  std::string file; // where it came from, for error messages
};

// Where codegen reads weights by the `llm.param` name (the checkpoint tensor name). The llmc
// driver adapts llmc::Checkpoint to it; tests use an in-memory map.
class WeightSource {
public:
  virtual ~WeightSource() = default;
  // NotFound when there is no tensor of that name.
  virtual absl::StatusOr<WeightView> getWeight(const std::string &name) const = 0;
  // The weight already quantized (a GPTQ/AWQ checkpoint, repacked into the plan's layout), or
  // nullptr when the source holds it as floats. Owned by the source.
  virtual absl::StatusOr<const quant::QuantizedMatrix *>
  getQuantizedWeight(const std::string &name) const {
    return nullptr;
  }
  // Tensor.quantization.method of pre-quantized weight `name` ("gptq", "awq").
  virtual std::string quantizationMethod(const std::string &name) const { return ""; }
  // Codegen is done with `names` (the parts of one expert tensor, written): a source that
  // materialized them (transposed expert views, codegen/ExpertSlice.h) may free them, so views
  // live one op at a time. Views returned for them before are invalid afterwards.
  virtual void releaseWeights(llvm::ArrayRef<std::string> names) const {}
};

// 64 Ki elements: 256 KiB of f32 scratch, which fits in L2 while converting.
inline constexpr int64_t kConvertChunkElements = 64 * 1024;

// Called after each weight blob is written: tensor entries written so far, how many the program
// needs in all, and the writer's bytes_written().
using EmitProgress =
    std::function<void(int64_t tensorsDone, int64_t tensorsTotal, uint64_t bytesWritten)>;

// Emits the program of `@forward` (or of the module's only function). Tensor table indices in
// the ops are positions in `*tensors`; new entries are appended, so a caller may put other
// tensors first. `weightDtype` is F32, F16 or BF16. Kernel names go into one KernelTable with
// target "cpu" ("cpu.matmul.f16", ...; identical names share one entry).
absl::StatusOr<llmrt::plan::Program> emitProgram(mlir::ModuleOp module, const WeightSource &weights,
                                                 llmrt::plan::DType weightDtype,
                                                 llmrt::plan::PlanWriter &writer,
                                                 std::vector<llmrt::plan::Tensor> *tensors,
                                                 const EmitProgress &progress = nullptr);

// "p.q_proj.weight", "p.k_proj.weight", "p.v_proj.weight" -> "p.qkv_proj.weight";
// gate/up -> "p.gate_up_proj.weight". Names not of that form are joined with '+'.
std::string fusedTensorName(const std::vector<std::string> &names);

} // namespace llmc

#endif // LLMC_CODEGEN_EMITPROGRAM_H_
