// Calibration for AWQ and GPTQ: runs the f32 plan of the model on a calibration text with the
// real runtime (llmrt's Model and the CPU backend's matmul observer) and keeps each matmul's
// input rows. Its own library (llmc_calibration) because it links the runtime engine, which
// the quantization numerics (compiler/quant/awq.h, gptq.h, quantize.h) and codegen do not.
#ifndef LLMC_COMPILER_QUANT_CALIBRATION_H_
#define LLMC_COMPILER_QUANT_CALIBRATION_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/quant/awq.h"

namespace llmc::quant {

// The built-in calibration text (a few paragraphs of plain English, compiled in).
const char* DefaultCalibrationText();

// Runs `float_plan_path` over `text` (tokenized by the plan's tokenizer, truncated to the
// plan's context) and returns, per plan tensor name of each MATMUL op's first weight, the
// op's input rows (evenly subsampled down to kMaxCalibrationRows).
absl::StatusOr<std::map<std::string, Activations>> CollectActivations(
    const std::string& float_plan_path, const std::string& text);

}  // namespace llmc::quant

#endif  // LLMC_COMPILER_QUANT_CALIBRATION_H_
