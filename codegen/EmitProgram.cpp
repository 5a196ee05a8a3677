//===- EmitProgram.cpp - llm module -> plan Program + weight blobs ---------===//

#include "codegen/EmitProgram.h"
#include "codegen/ExpertSlice.h"
#include "codegen/RowSlice.h"

#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/quant/quantize.h"
#include "ir/LlmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "passes/QuantAttr.h"
#include "runtime/plan/dtype.h"

using namespace mlir;
namespace plan = llmrt::plan;

namespace llmc {
namespace {

size_t dtypeBytes(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
  case plan::I32:
    return 4;
  case plan::F16:
  case plan::BF16:
    return 2;
  default:
    return 0;
  }
}

const char *dtypeSuffix(plan::DType dtype) {
  switch (dtype) {
  case plan::F32:
    return "f32";
  case plan::F16:
    return "f16";
  case plan::BF16:
    return "bf16";
  case plan::I8:
    return "i8";
  case plan::I4:
    return "i4";
  case plan::FP4_E2M1:
    return "mxfp4";
  default:
    return "?";
  }
}

plan::DType dtypeOf(Type elementType) {
  if (elementType.isF32())
    return plan::F32;
  if (elementType.isF16())
    return plan::F16;
  if (elementType.isBF16())
    return plan::BF16;
  return plan::DTYPE_UNSPECIFIED;
}

std::string shapeString(ArrayRef<int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

float loadElement(const uint8_t *data, plan::DType dtype, int64_t index) {
  if (dtype == plan::F32) {
    float value;
    std::memcpy(&value, data + index * 4, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, data + index * 2, 2);
  return dtype == plan::F16 ? plan::F16ToF32(bits) : plan::Bf16ToF32(bits);
}

void storeElement(uint8_t *data, plan::DType dtype, int64_t index, float value) {
  if (dtype == plan::F32) {
    std::memcpy(data + index * 4, &value, 4);
    return;
  }
  uint16_t bits = dtype == plan::F16 ? plan::F32ToF16(value) : plan::F32ToBf16(value);
  std::memcpy(data + index * 2, &bits, 2);
}

// A [rows, ...] shape as the 3-D [experts, rows / experts, ...] of an expert weight (plan.proto
// Expert weight tensors); unchanged when experts is 0.
std::vector<int64_t> expertShape(std::vector<int64_t> shape, int64_t experts) {
  if (experts <= 0 || shape.empty())
    return shape;
  shape[0] /= experts;
  shape.insert(shape.begin(), experts);
  return shape;
}

// The dtype of the codes llm.quant asks for.
plan::DType quantCodeDtype(const QuantSpec &spec) {
  return spec.mxfp4 ? plan::FP4_E2M1 : spec.bits == 8 ? plan::I8 : plan::I4;
}

class Emitter {
public:
  Emitter(const WeightSource &weights, plan::DType weightDtype, plan::PlanWriter &writer,
          std::vector<plan::Tensor> *tensors, const EmitProgress &progress)
      : weights(weights), weightDtype(weightDtype), writer(writer), tensors(tensors),
        progress(progress) {}

  absl::StatusOr<plan::Program> emit(func::FuncOp function);

private:
  // `experts` > 0: the params are an expert weight's parts, expert-major (plan.proto: 3-D
  // [experts, rows / experts, cols]); `name` empty: the params' own (fused) name.
  absl::StatusOr<int> addTensor(Operation *user, ArrayRef<FlatSymbolRefAttr> params,
                                plan::DType dtype, int64_t panelRows = 0,
                                const std::string &name = "", int64_t experts = 0);
  absl::StatusOr<int> addQuantizedTensor(Operation *user, ArrayRef<FlatSymbolRefAttr> params,
                                         const QuantSpec &spec, const std::string &name = "",
                                         int64_t experts = 0);
  absl::StatusOr<WeightView> checkedWeight(Operation *user, FlatSymbolRefAttr param);
  absl::StatusOr<int> addGamma(Operation *user, FlatSymbolRefAttr param, double offset);
  absl::StatusOr<int> writeTensor(const std::string &name, plan::DType dtype,
                                  std::vector<int64_t> shape, ArrayRef<const uint8_t *> parts,
                                  ArrayRef<uint64_t> partBytes,
                                  plan::Tensor::Layout layout = plan::Tensor::ROW_MAJOR);
  absl::Status appendConverted(const WeightView &view, plan::DType dtype);
  absl::Status appendPanels(ArrayRef<WeightView> views, int64_t rows, int64_t cols,
                            plan::DType dtype, int64_t panelRows);
  absl::StatusOr<int> valueId(Value value);
  int kernel(StringRef opName, plan::DType dtype);
  absl::Status emitOp(Operation &op, plan::Op &planOp);

  const WeightSource &weights;
  plan::DType weightDtype;
  plan::PlanWriter &writer;
  std::vector<plan::Tensor> *tensors;
  const EmitProgress &progress;
  int64_t tensorsTotal = 0;
  plan::Program program;
  plan::KernelTable *kernels = nullptr;
  std::map<std::string, int> tensorIndex;
  std::map<std::string, int> kernelIndex;
  DenseMap<Value, int> valueIds;
  std::vector<uint8_t> chunk;
};

absl::Status Emitter::appendConverted(const WeightView &view, plan::DType dtype) {
  const int64_t numElements = static_cast<int64_t>(view.sizeBytes / dtypeBytes(view.dtype));
  if (view.dtype == dtype) {
    const uint64_t chunkBytes = kConvertChunkElements * dtypeBytes(dtype);
    for (uint64_t offset = 0; offset < view.sizeBytes; offset += chunkBytes)
      if (absl::Status status =
              writer.Append(view.data + offset, std::min(chunkBytes, view.sizeBytes - offset));
          !status.ok())
        return status;
    return absl::OkStatus();
  }
  chunk.resize(kConvertChunkElements * dtypeBytes(dtype));
  for (int64_t begin = 0; begin < numElements; begin += kConvertChunkElements) {
    int64_t count = std::min(kConvertChunkElements, numElements - begin);
    for (int64_t i = 0; i < count; ++i)
      storeElement(chunk.data(), dtype, i, loadElement(view.data, view.dtype, begin + i));
    if (absl::Status status = writer.Append(chunk.data(), count * dtypeBytes(dtype)); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

// Writes the rows of `views` (concatenated; a multiple of panelRows) as ROW_PANELS
// (plan.proto): panels of panelRows rows, each stored column by column. One panel (panelRows x
// cols elements, 176 KiB at 16 x 5632 f16) is converted at a time.
absl::Status Emitter::appendPanels(ArrayRef<WeightView> views, int64_t rows, int64_t cols,
                                   plan::DType dtype, int64_t panelRows) {
  const size_t elementBytes = dtypeBytes(dtype);
  chunk.resize(panelRows * cols * elementBytes);
  // Global row -> (view, row in view).
  std::vector<std::pair<const WeightView *, int64_t>> rowSource;
  rowSource.reserve(rows);
  for (const WeightView &view : views)
    for (int64_t row = 0; row < view.shape[0]; ++row)
      rowSource.push_back({&view, row});
  for (int64_t first = 0; first < rows; first += panelRows) {
    for (int64_t r = 0; r < panelRows; ++r) {
      auto [view, row] = rowSource[first + r];
      for (int64_t c = 0; c < cols; ++c)
        storeElement(chunk.data(), dtype, c * panelRows + r,
                     loadElement(view->data, view->dtype, row * cols + c));
    }
    if (absl::Status status = writer.Append(chunk.data(), chunk.size()); !status.ok())
      return status;
  }
  return absl::OkStatus();
}

// One blob made of `parts` (concatenated), as a tensor entry of `layout` (the parts' bytes are
// already in it); not registered in tensorIndex (the caller decides under which name it is
// shared).
absl::StatusOr<int> Emitter::writeTensor(const std::string &name, plan::DType dtype,
                                         std::vector<int64_t> shape,
                                         ArrayRef<const uint8_t *> parts,
                                         ArrayRef<uint64_t> partBytes,
                                         plan::Tensor::Layout layout) {
  if (absl::Status status = writer.BeginBlob(); !status.ok())
    return status;
  for (auto [data, bytes] : llvm::zip(parts, partBytes))
    if (absl::Status status = writer.Append(data, bytes); !status.ok())
      return status;
  absl::StatusOr<plan::BlobRange> range = writer.EndBlob();
  if (!range.ok())
    return range.status();
  plan::Tensor &tensor = tensors->emplace_back();
  tensor.set_name(name);
  tensor.set_dtype(dtype);
  for (int64_t dim : shape)
    tensor.add_shape(dim);
  tensor.set_layout(layout);
  tensor.set_offset(range->offset);
  tensor.set_size_bytes(range->size_bytes);
  tensor.set_checksum(range->checksum);
  return static_cast<int>(tensors->size()) - 1;
}

// The weights of `params` as quantized codes (plan.proto, message Quantization): each part is
// either pre-quantized by the WeightSource (GPTQ/AWQ checkpoints, written as they are) or
// quantized here from its float weights; fused parts are concatenated along the rows, which
// is exact because every scale belongs to one row. Writes the codes, then the F16 scales, the
// U8 zero points (asymmetric) and the I32 input permutation (act-order), and returns the
// codes' tensor index.
absl::StatusOr<int> Emitter::addQuantizedTensor(Operation *user, ArrayRef<FlatSymbolRefAttr> params,
                                                const QuantSpec &spec,
                                                const std::string &tensorName, int64_t experts) {
  std::vector<std::string> names;
  for (FlatSymbolRefAttr param : params)
    names.push_back(param.getValue().str());
  std::string name = !tensorName.empty() ? tensorName
                     : names.size() == 1 ? names[0]
                                         : fusedTensorName(names);
  const plan::DType codeDtype = quantCodeDtype(spec);
  if (auto it = tensorIndex.find(name); it != tensorIndex.end()) {
    const plan::Tensor &existing = (*tensors)[it->second];
    if (existing.dtype() != codeDtype || existing.quantization().group_size() != spec.groupSize)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " is read by two ops with different llm.quant encodings"));
    return it->second;
  }

  const quant::QuantFormat format =
      spec.mxfp4 ? quant::QuantFormat::Mxfp4()
                 : quant::QuantFormat{static_cast<int>(spec.bits), spec.groupSize, spec.asymmetric};
  std::vector<quant::QuantizedMatrix> owned;
  owned.reserve(params.size());
  std::vector<const quant::QuantizedMatrix *> parts;
  std::string method = spec.method;
  for (auto [param, partName] : llvm::zip(params, names)) {
    absl::StatusOr<const quant::QuantizedMatrix *> pre = weights.getQuantizedWeight(partName);
    if (!pre.ok())
      return pre.status();
    if (*pre) {
      const quant::QuantFormat &have = (*pre)->format;
      if (have.bits != format.bits || have.group_size != format.group_size ||
          have.asymmetric != format.asymmetric || have.kind != format.kind)
        return absl::InvalidArgumentError(absl::StrCat("tensor ", partName, " is pre-quantized as ",
                                                       have.ToString(), " but llm.quant asks for ",
                                                       format.ToString()));
      parts.push_back(*pre);
      method = weights.quantizationMethod(partName);
      continue;
    }
    absl::StatusOr<WeightView> view = checkedWeight(user, param);
    if (!view.ok())
      return view.status();
    if (view->shape.size() != 2)
      return absl::InvalidArgumentError(absl::StrCat("tensor ", partName,
                                                     ": only matrices are quantized, found shape ",
                                                     shapeString(view->shape)));
    const int64_t rows = view->shape[0], cols = view->shape[1];
    if (absl::Status status = quant::CheckFormat(format, cols, absl::StrCat("tensor ", partName));
        !status.ok())
      return status;
    std::vector<float> values(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i)
      values[i] = loadElement(view->data, view->dtype, i);
    absl::StatusOr<quant::QuantizedMatrix> matrix =
        quant::QuantizeMatrix(values, rows, cols, format);
    if (!matrix.ok())
      return matrix.status();
    owned.push_back(*std::move(matrix));
    parts.push_back(&owned.back());
  }

  const quant::QuantizedMatrix &first = *parts.front();
  int64_t rows = 0;
  std::vector<const uint8_t *> codes, scales, zeroPoints;
  std::vector<uint64_t> codeBytes, scaleBytes, zeroBytes;
  for (auto [part, partName] : llvm::zip(parts, names)) {
    if (part->cols != first.cols || part->input_permutation != first.input_permutation)
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot concatenate ", partName, " into ", name,
          ": its input columns or act-order permutation (g_idx) differ from ", names[0]));
    rows += part->rows;
    codes.push_back(part->codes.data());
    codeBytes.push_back(part->codes.size());
    // MXFP4's scales are its E8M0 exponent bytes.
    if (format.mxfp4()) {
      scales.push_back(part->exponents.data());
      scaleBytes.push_back(part->exponents.size());
    } else {
      scales.push_back(reinterpret_cast<const uint8_t *>(part->scales.data()));
      scaleBytes.push_back(part->scales.size() * 2);
    }
    zeroPoints.push_back(part->zero_points.data());
    zeroBytes.push_back(part->zero_points.size());
  }
  const int64_t groups = first.cols / format.group_size;
  // QuantizedMatrix packs I4 and FP4_E2M1 rows as plan.proto's LANE_CHUNKS
  // (runtime/plan/int4_layout.h), and fused parts concatenate whole rows, which keeps every
  // row's packing.
  if (experts > 0 && !first.input_permutation.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", names[0], ": an expert weight cannot have an act-order permutation (g_idx)"));
  absl::StatusOr<int> codesIndex =
      writeTensor(name, codeDtype, expertShape({rows, first.cols}, experts), codes, codeBytes,
                  codeDtype == plan::I8 ? plan::Tensor::ROW_MAJOR : plan::Tensor::LANE_CHUNKS);
  if (!codesIndex.ok())
    return codesIndex.status();
  plan::Quantization quantization;
  quantization.set_scheme(format.asymmetric ? plan::Quantization::ASYMMETRIC
                                            : plan::Quantization::SYMMETRIC);
  quantization.set_bits(format.bits);
  quantization.set_group_size(static_cast<int32_t>(format.group_size));
  quantization.set_method(method);
  absl::StatusOr<int> scalesIndex =
      writeTensor(name + ".scales", format.mxfp4() ? plan::E8M0 : plan::F16,
                  expertShape({rows, groups}, experts), scales, scaleBytes);
  if (!scalesIndex.ok())
    return scalesIndex.status();
  quantization.set_scales(*scalesIndex);
  if (format.asymmetric) {
    absl::StatusOr<int> zeroIndex =
        writeTensor(name + ".zero_points", plan::U8, expertShape({rows, groups}, experts),
                    zeroPoints, zeroBytes);
    if (!zeroIndex.ok())
      return zeroIndex.status();
    quantization.set_zero_points(*zeroIndex);
  }
  if (!first.input_permutation.empty()) {
    const auto *permutation = reinterpret_cast<const uint8_t *>(first.input_permutation.data());
    absl::StatusOr<int> permutationIndex =
        writeTensor(name + ".input_permutation", plan::I32, {first.cols}, {permutation},
                    {first.input_permutation.size() * 4});
    if (!permutationIndex.ok())
      return permutationIndex.status();
    quantization.set_input_permutation(*permutationIndex);
  }
  *(*tensors)[*codesIndex].mutable_quantization() = std::move(quantization);
  tensorIndex[name] = *codesIndex;
  if (progress)
    progress(static_cast<int64_t>(tensorIndex.size()), tensorsTotal, writer.bytes_written());
  return *codesIndex;
}

absl::StatusOr<WeightView> Emitter::checkedWeight(Operation *user, FlatSymbolRefAttr param) {
  std::string partName = param.getValue().str();
  llm::ParamOp paramOp = llm::lookupParam(user, param);
  if (!paramOp)
    return absl::InvalidArgumentError(absl::StrCat("no llm.param @", partName, " (used by ",
                                                   user->getName().getStringRef().str(), ")"));
  absl::StatusOr<WeightView> view = weights.getWeight(partName);
  if (!view.ok())
    return view.status();
  RankedTensorType type = paramOp.getTensorType();
  std::string where = view->file.empty() ? "" : absl::StrCat(view->file, ": ");
  if (type.getShape() != ArrayRef<int64_t>(view->shape))
    return absl::InvalidArgumentError(
        absl::StrCat(where, "tensor ", partName, " has shape ", shapeString(view->shape),
                     ", the IR's llm.param expects ", shapeString(type.getShape())));
  if (dtypeOf(type.getElementType()) != view->dtype || dtypeBytes(view->dtype) == 0)
    return absl::InvalidArgumentError(absl::StrCat(
        where, "tensor ", partName, " has dtype ", plan::DType_Name(view->dtype),
        ", the IR's llm.param expects ", plan::DType_Name(dtypeOf(type.getElementType()))));
  uint64_t expectedBytes = type.getNumElements() * dtypeBytes(view->dtype);
  if (view->sizeBytes != expectedBytes || (expectedBytes > 0 && view->data == nullptr))
    return absl::InvalidArgumentError(
        absl::StrCat(where, "tensor ", partName, " has ", view->sizeBytes, " bytes, shape ",
                     shapeString(view->shape), " implies ", expectedBytes));
  return view;
}

// A norm's f32 gamma: the weight, plus `offset` when it is not 0 (Gemma's 1 + weight).
// transformers computes (1.0 + weight.float()) in f32, which is exactly this f32 sum, so the
// folded gamma equals the one transformers multiplies by.
absl::StatusOr<int> Emitter::addGamma(Operation *user, FlatSymbolRefAttr param, double offset) {
  if (offset == 0)
    return addTensor(user, {param}, plan::F32);
  const std::string name = param.getValue().str();
  const std::string key = absl::StrCat(name, "#offset=", offset);
  if (auto it = tensorIndex.find(key); it != tensorIndex.end())
    return it->second;
  absl::StatusOr<WeightView> view = checkedWeight(user, param);
  if (!view.ok())
    return view.status();
  const int64_t count = static_cast<int64_t>(view->sizeBytes / dtypeBytes(view->dtype));
  std::vector<float> gamma(count);
  for (int64_t i = 0; i < count; ++i)
    gamma[i] = static_cast<float>(offset) + loadElement(view->data, view->dtype, i);
  absl::StatusOr<int> index =
      writeTensor(name, plan::F32, view->shape, {reinterpret_cast<const uint8_t *>(gamma.data())},
                  {static_cast<uint64_t>(count) * sizeof(float)});
  if (!index.ok())
    return index.status();
  tensorIndex[key] = *index;
  return *index;
}

absl::StatusOr<int> Emitter::addTensor(Operation *user, ArrayRef<FlatSymbolRefAttr> params,
                                       plan::DType dtype, int64_t panelRows,
                                       const std::string &tensorName, int64_t experts) {
  std::vector<std::string> names;
  for (FlatSymbolRefAttr param : params)
    names.push_back(param.getValue().str());
  std::string name = !tensorName.empty() ? tensorName
                     : names.size() == 1 ? names[0]
                                         : fusedTensorName(names);
  if (auto it = tensorIndex.find(name); it != tensorIndex.end()) {
    if ((*tensors)[it->second].dtype() != dtype)
      return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " is used as ",
                                                     dtypeSuffix(dtype), " and as ",
                                                     dtypeSuffix((*tensors)[it->second].dtype())));
    if ((*tensors)[it->second].panel_rows() != panelRows)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, " is used with panel_rows ", panelRows, " and ",
                       (*tensors)[it->second].panel_rows(),
                       " (llm.cpu_tile differs between two ops reading it)"));
    return it->second;
  }

  // Check every part against its llm.param before writing a byte.
  std::vector<WeightView> views;
  std::vector<int64_t> shape;
  for (auto [param, partName] : llvm::zip(params, names)) {
    absl::StatusOr<WeightView> view = checkedWeight(user, param);
    if (!view.ok())
      return view.status();
    if (shape.empty()) {
      shape = view->shape;
    } else {
      // Concatenation along dim 0 needs the same row shape.
      if (view->shape.size() != shape.size() ||
          !std::equal(view->shape.begin() + 1, view->shape.end(), shape.begin() + 1))
        return absl::InvalidArgumentError(absl::StrCat("cannot concatenate ", partName, " ",
                                                       shapeString(view->shape), " into ", name,
                                                       " ", shapeString(shape), ": rows differ"));
      shape[0] += view->shape[0];
    }
    views.push_back(*std::move(view));
  }

  // Panels never straddle two experts: each expert's rows are a multiple of panel_rows.
  const int64_t panelUnit = experts > 0 ? experts * panelRows : panelRows;
  if (panelRows > 0 && (shape.size() != 2 || shape[0] % panelUnit != 0))
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, " has shape ", shapeString(shape),
                     "; llm.cpu_tile packs only matrices whose rows (per expert) are a multiple "
                     "of panel_rows ",
                     panelRows));
  if (absl::Status status = writer.BeginBlob(); !status.ok())
    return status;
  if (panelRows > 0) {
    if (absl::Status status = appendPanels(views, shape[0], shape[1], dtype, panelRows);
        !status.ok())
      return status;
  } else {
    for (const WeightView &view : views)
      if (absl::Status status = appendConverted(view, dtype); !status.ok())
        return status;
  }
  absl::StatusOr<plan::BlobRange> range = writer.EndBlob();
  if (!range.ok())
    return range.status();

  plan::Tensor &tensor = tensors->emplace_back();
  tensor.set_name(name);
  tensor.set_dtype(dtype);
  for (int64_t dim : expertShape(shape, experts))
    tensor.add_shape(dim);
  tensor.set_layout(panelRows > 0 ? plan::Tensor::ROW_PANELS : plan::Tensor::ROW_MAJOR);
  if (panelRows > 0)
    tensor.set_panel_rows(static_cast<int32_t>(panelRows));
  tensor.set_offset(range->offset);
  tensor.set_size_bytes(range->size_bytes);
  tensor.set_checksum(range->checksum);
  int index = static_cast<int>(tensors->size()) - 1;
  tensorIndex[name] = index;
  if (progress)
    progress(static_cast<int64_t>(tensorIndex.size()), tensorsTotal, writer.bytes_written());
  return index;
}

absl::StatusOr<int> Emitter::valueId(Value value) {
  auto it = valueIds.find(value);
  if (it == valueIds.end())
    return absl::InternalError("operand defined outside @forward's body");
  return it->second;
}

int Emitter::kernel(StringRef opName, plan::DType dtype) {
  std::string name = absl::StrCat(kernels->target(), ".", opName.str(), ".", dtypeSuffix(dtype));
  auto [it, inserted] = kernelIndex.emplace(name, kernels->kernels_size());
  if (inserted)
    kernels->add_kernels()->set_name(name);
  return it->second;
}

// The stem expert `expert`'s part name shares with the other experts': a view's stacked
// tensor, else the name without its ".<expert>." component (the last one: layer indices come
// first).
std::string expertStem(const std::string &name, int64_t expert) {
  if (std::optional<ExpertSlice> slice = parseExpertSlice(name))
    return slice->tensor;
  const std::string component = absl::StrCat(".", expert, ".");
  const size_t at = name.rfind(component);
  if (at == std::string::npos)
    return name;
  return name.substr(0, at) + name.substr(at + component.size() - 1);
}

// An expert_matmul's weights (or biases) as one plan tensor's parts, expert-major (per expert,
// its part of every projection in order), and the tensor's name: per projection the stem all
// experts share, fused like fusedTensorName (mlp.experts.{e}.{gate,up}_proj.weight ->
// mlp.experts.gate_up_proj.weight; gpt-oss's gate and up views of one stacked gate_up_proj ->
// that tensor's name).
struct ExpertParts {
  std::vector<FlatSymbolRefAttr> params;
  std::vector<std::string> names;
  std::string name;
};

ExpertParts expertParts(llm::ExpertMatmulOp op, bool biases) {
  ExpertParts parts;
  std::vector<SmallVector<FlatSymbolRefAttr>> projections;
  for (unsigned i = 0; i < op.getNumResults(); ++i)
    projections.push_back(biases ? op.getExpertBiasRefs(i) : op.getExpertWeightRefs(i));
  if (projections.empty() || projections[0].empty())
    return parts;
  std::vector<std::string> stems;
  for (const SmallVector<FlatSymbolRefAttr> &refs : projections) {
    std::string stem = expertStem(refs.front().getValue().str(), 0);
    for (auto [expert, ref] : llvm::enumerate(refs))
      if (expertStem(ref.getValue().str(), static_cast<int64_t>(expert)) != stem) {
        // Names without a common stem (hand-written IR): the first and last expert's.
        stem = absl::StrCat(refs.front().getValue().str(), "..", refs.back().getValue().str());
        break;
      }
    if (stems.empty() || stems.back() != stem)
      stems.push_back(stem);
  }
  parts.name = stems.size() == 1 ? stems[0] : fusedTensorName(stems);
  for (size_t expert = 0; expert < projections[0].size(); ++expert)
    for (const SmallVector<FlatSymbolRefAttr> &refs : projections) {
      parts.params.push_back(refs[expert]);
      parts.names.push_back(refs[expert].getValue().str());
    }
  return parts;
}

// The panel height --llm-tile-cpu chose for `op`'s weights; 0: row-major (no attribute, or
// layout "row_major").
absl::StatusOr<int64_t> cpuPanelRows(Operation &op) {
  auto tile = op.getAttrOfType<DictionaryAttr>("llm.cpu_tile");
  if (!tile)
    return 0;
  auto layout = tile.getAs<StringAttr>("layout");
  if (layout && layout.getValue() == "row_major")
    return 0;
  auto panelRows = tile.getAs<IntegerAttr>("panel_rows");
  // 1..256 rows: a panel is a handful of SIMD vectors; anything else is a corrupt attribute.
  if (!layout || layout.getValue() != "row_panels" || !panelRows || panelRows.getInt() < 1 ||
      panelRows.getInt() > 256)
    return absl::InvalidArgumentError(
        absl::StrCat("codegen: ", op.getName().getStringRef().str(),
                     ": llm.cpu_tile must be {layout = \"row_major\"} or {layout = \"row_panels\", "
                     "panel_rows = 1..256}"));
  return panelRows.getInt();
}

absl::Status Emitter::emitOp(Operation &op, plan::Op &planOp) {
  auto addWeight = [&](ArrayRef<FlatSymbolRefAttr> params, plan::DType dtype, int64_t panelRows = 0,
                       const std::string &name = "", int64_t experts = 0) -> absl::Status {
    absl::StatusOr<int> index = addTensor(&op, params, dtype, panelRows, name, experts);
    if (!index.ok())
      return index.status();
    planOp.add_weights(*index);
    return absl::OkStatus();
  };
  // Elementwise and attention kernels compute in f32 whatever the weights are.
  plan::DType kernelDtype = plan::F32;
  // A matmul or lm_head matrix: quantized codes when the op carries llm.quant, else float
  // weights in the layout --llm-tile-cpu chose. Sets kernelDtype to what the kernel reads.
  auto addMatrix = [&](ArrayRef<FlatSymbolRefAttr> params, const std::string &name = "",
                       int64_t experts = 0) -> absl::Status {
    std::string quantError;
    if (std::optional<QuantSpec> spec = getQuantSpec(&op, &quantError)) {
      if (absl::StatusOr<int64_t> panelRows = cpuPanelRows(op); !panelRows.ok() || *panelRows)
        return absl::InvalidArgumentError(
            absl::StrCat("codegen: ", op.getName().getStringRef().str(),
                         ": quantized weights are stored row-major only, but llm.cpu_tile asks "
                         "for row panels"));
      absl::StatusOr<int> index = addQuantizedTensor(&op, params, *spec, name, experts);
      if (!index.ok())
        return index.status();
      planOp.add_weights(*index);
      kernelDtype = quantCodeDtype(*spec);
      return absl::OkStatus();
    }
    if (!quantError.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("codegen: ", op.getName().getStringRef().str(), ": ", quantError));
    absl::StatusOr<int64_t> panelRows = cpuPanelRows(op);
    if (!panelRows.ok())
      return panelRows.status();
    kernelDtype = weightDtype;
    return addWeight(params, weightDtype, *panelRows, name, experts);
  };
  StringRef kernelName;
  absl::Status status = absl::OkStatus();
  if (auto embed = dyn_cast<llm::EmbedOp>(op)) {
    planOp.set_kind(plan::EMBED);
    kernelName = "embed";
    kernelDtype = weightDtype;
    status = addWeight({embed.getTableAttr()}, weightDtype);
    if (std::optional<APFloat> scale = embed.getScale())
      planOp.mutable_embed()->set_scale(scale->convertToDouble());
  } else if (isa<llm::RmsNormOp, llm::FusedAddRmsNormOp>(op)) {
    auto norm = dyn_cast<llm::RmsNormOp>(op);
    auto fused = dyn_cast<llm::FusedAddRmsNormOp>(op);
    planOp.set_kind(norm ? plan::RMS_NORM : plan::FUSED_ADD_RMS_NORM);
    kernelName = norm ? "rms_norm" : "fused_add_rms_norm";
    planOp.mutable_norm()->set_eps(norm ? norm.getEps().convertToDouble()
                                        : fused.getEps().convertToDouble());
    absl::StatusOr<int> gamma =
        norm ? addGamma(&op, norm.getWeightAttr(), norm.getWeightOffset().convertToDouble())
             : addGamma(&op, fused.getWeightAttr(), fused.getWeightOffset().convertToDouble());
    if (gamma.ok())
      planOp.add_weights(*gamma);
    else
      status = gamma.status();
  } else if (auto matmul = dyn_cast<llm::MatmulOp>(op)) {
    planOp.set_kind(plan::MATMUL);
    kernelName = "matmul";
    status = addMatrix(matmul.getWeightRefs());
    if (status.ok() && !matmul.getBiasRefs().empty())
      status = addWeight(matmul.getBiasRefs(), plan::F32);
  } else if (auto rope = dyn_cast<llm::RopeOp>(op)) {
    planOp.set_kind(plan::ROPE);
    kernelName = "rope";
    plan::RopeAttrs *attrs = planOp.mutable_rope();
    attrs->set_num_heads(rope.getNumHeads());
    attrs->set_head_dim(rope.getHeadDim());
    plan::RopeConfig *config = attrs->mutable_config();
    config->set_theta(rope.getTheta().convertToDouble());
    StringRef scaling = rope.getScaling();
    config->set_scaling(scaling == "linear"     ? plan::RopeConfig::LINEAR
                        : scaling == "llama3"   ? plan::RopeConfig::LLAMA3
                        : scaling == "yarn"     ? plan::RopeConfig::YARN
                        : scaling == "longrope" ? plan::RopeConfig::LONGROPE
                        : scaling == "dynamic"  ? plan::RopeConfig::DYNAMIC
                                                : plan::RopeConfig::SCALING_NONE);
    config->set_rotary_dim(static_cast<int32_t>(rope.getRotaryDim()));
    if (scaling == "longrope") {
      for (double factor : rope.getExtFactorsAttr().asArrayRef())
        config->add_ext_factors(factor);
      config->set_long_factors(rope.getLongFactors());
      config->set_attention_factor(rope.getAttentionFactor().convertToDouble());
    }
    config->set_factor(rope.getFactor().convertToDouble());
    config->set_low_freq_factor(rope.getLowFreqFactor().convertToDouble());
    config->set_high_freq_factor(rope.getHighFreqFactor().convertToDouble());
    config->set_original_max_position_embeddings(rope.getOriginalMaxPositionEmbeddings());
    if (scaling == "yarn") {
      config->set_beta_fast(rope.getBetaFast().convertToDouble());
      config->set_beta_slow(rope.getBetaSlow().convertToDouble());
      config->set_untruncated(rope.getUntruncated());
    }
  } else if (auto attention = dyn_cast<llm::AttentionOp>(op)) {
    planOp.set_kind(plan::ATTENTION);
    kernelName = "attention";
    plan::AttentionAttrs *attrs = planOp.mutable_attention();
    attrs->set_layer(attention.getLayer());
    attrs->set_num_heads(attention.getNumHeads());
    attrs->set_num_kv_heads(attention.getNumKvHeads());
    attrs->set_head_dim(attention.getHeadDim());
    attrs->set_sliding_window(attention.getSlidingWindow());
    attrs->set_scale(attention.getScale().convertToDouble());
    attrs->set_logit_softcap(attention.getLogitSoftcap().convertToDouble());
    // The sinks are logits: f32 whatever the checkpoint's dtype (plan.proto ATTENTION).
    if (FlatSymbolRefAttr sinks = attention.getSinksAttr())
      status = addWeight({sinks}, plan::F32);
  } else if (auto router = dyn_cast<llm::RouterOp>(op)) {
    planOp.set_kind(plan::ROUTER);
    kernelName = "router";
    plan::RouterAttrs *attrs = planOp.mutable_router();
    attrs->set_num_experts(static_cast<int32_t>(router.getNumExperts()));
    attrs->set_top_k(static_cast<int32_t>(router.getTopK()));
    attrs->set_scoring(router.getScoring() == "topk_softmax" ? plan::RouterAttrs::TOPK_SOFTMAX
                                                             : plan::RouterAttrs::SOFTMAX_TOPK);
    attrs->set_normalize(router.getNormalize());
  } else if (auto expert = dyn_cast<llm::ExpertMatmulOp>(op)) {
    planOp.set_kind(plan::EXPERT_MATMUL);
    kernelName = "expert_matmul";
    const int64_t numExperts = expert.getNumExperts();
    planOp.mutable_expert()->set_num_experts(static_cast<int32_t>(numExperts));
    planOp.mutable_expert()->set_top_k(static_cast<int32_t>(expert.getTopK()));
    ExpertParts weightParts = expertParts(expert, /*biases=*/false);
    status = addMatrix(weightParts.params, weightParts.name, numExperts);
    ExpertParts biasParts = expertParts(expert, /*biases=*/true);
    if (status.ok() && !biasParts.params.empty())
      status = addWeight(biasParts.params, plan::F32, 0, biasParts.name, numExperts);
    // Materialized views (a transposed stacked checkpoint) live one op at a time.
    weights.releaseWeights(weightParts.names);
    weights.releaseWeights(biasParts.names);
  } else if (isa<llm::MoeCombineOp>(op)) {
    planOp.set_kind(plan::MOE_COMBINE);
    kernelName = "moe_combine";
  } else if (auto swiglu = dyn_cast<llm::ClampedSwigluOp>(op)) {
    planOp.set_kind(plan::CLAMPED_SWIGLU);
    kernelName = "clamped_swiglu";
    planOp.mutable_swiglu()->set_alpha(swiglu.getAlpha().convertToDouble());
    planOp.mutable_swiglu()->set_limit(swiglu.getLimit().convertToDouble());
  } else if (isa<llm::SiluOp>(op)) {
    planOp.set_kind(plan::SILU);
    kernelName = "silu";
  } else if (isa<llm::MulOp>(op)) {
    planOp.set_kind(plan::MUL);
    kernelName = "mul";
  } else if (isa<llm::AddOp>(op)) {
    planOp.set_kind(plan::ADD);
    kernelName = "add";
  } else if (isa<llm::SiluMulOp>(op)) {
    planOp.set_kind(plan::SILU_MUL);
    kernelName = "silu_mul";
  } else if (isa<llm::GeluTanhMulOp>(op)) {
    planOp.set_kind(plan::GELU_TANH_MUL);
    kernelName = "gelu_tanh_mul";
  } else if (auto logits = dyn_cast<llm::LogitsOp>(op)) {
    planOp.set_kind(plan::LOGITS);
    kernelName = "logits";
    if (double softcap = logits.getSoftcap().convertToDouble(); softcap > 0)
      planOp.mutable_logits()->set_softcap(softcap);
    status = addMatrix({logits.getWeightAttr()});
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("codegen: no plan op for ", op.getName().getStringRef().str()));
  }
  if (!status.ok())
    return status;
  planOp.set_kernel(kernel(kernelName, kernelDtype));
  return absl::OkStatus();
}

absl::StatusOr<plan::Program> Emitter::emit(func::FuncOp function) {
  kernels = program.add_kernel_tables();
  kernels->set_target("cpu");
  if (function.getNumArguments() != 2)
    return absl::InvalidArgumentError(absl::StrCat("codegen: @", function.getName().str(),
                                                   " must take (token_ids, positions), found ",
                                                   function.getNumArguments(), " arguments"));
  auto addValue = [&](Value value, plan::Value::Kind kind, plan::DType dtype, int64_t width,
                      int64_t arenaOffset, std::string name) {
    plan::Value *planValue = program.add_values();
    planValue->set_kind(kind);
    planValue->set_dtype(dtype);
    planValue->set_width(width);
    planValue->set_arena_offset_per_token(arenaOffset);
    planValue->set_name(std::move(name));
    valueIds[value] = program.values_size() - 1;
  };
  addValue(function.getArgument(0), plan::Value::TOKEN_IDS, plan::I32, 1, 0, "token_ids");
  addValue(function.getArgument(1), plan::Value::POSITIONS, plan::I32, 1, 0, "positions");

  auto arenaBytes = function->getAttrOfType<IntegerAttr>(llm::kArenaBytesPerTokenAttr);
  if (!arenaBytes)
    return absl::FailedPreconditionError(
        "codegen: @forward has no llm.arena_bytes_per_token; run --llm-plan-memory first");
  program.set_arena_bytes_per_token(arenaBytes.getInt());

  Block &body = function.getBody().front();
  Operation *terminator = body.getTerminator();
  if (terminator->getNumOperands() != 1)
    return absl::InvalidArgumentError("codegen: @forward must return exactly the logits");
  Value logits = terminator->getOperand(0);

  // The number of tensor entries, for progress: one per distinct plan tensor name, named the
  // way addTensor names them.
  std::set<std::string> plannedNames;
  auto plan = [&](ArrayRef<FlatSymbolRefAttr> refs) {
    std::vector<std::string> names;
    for (FlatSymbolRefAttr ref : refs)
      names.push_back(ref.getValue().str());
    if (!names.empty())
      plannedNames.insert(names.size() == 1 ? names[0] : fusedTensorName(names));
  };
  for (Operation &op : body.without_terminator()) {
    if (auto matmul = dyn_cast<llm::MatmulOp>(op)) {
      plan(matmul.getWeightRefs());
      plan(matmul.getBiasRefs());
    }
    if (auto expert = dyn_cast<llm::ExpertMatmulOp>(op))
      for (bool biases : {false, true})
        if (ExpertParts parts = expertParts(expert, biases); !parts.params.empty())
          plannedNames.insert(parts.name);
    for (StringRef attrName : {"table", "weight", "sinks"})
      if (auto ref = op.getAttrOfType<FlatSymbolRefAttr>(attrName))
        plan({ref});
  }
  tensorsTotal = static_cast<int64_t>(plannedNames.size());

  int opIndex = 0;
  for (Operation &op : body.without_terminator()) {
    plan::Op planOp;
    for (Value operand : op.getOperands()) {
      absl::StatusOr<int> id = valueId(operand);
      if (!id.ok())
        return id.status();
      planOp.add_inputs(*id);
    }
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(llm::kArenaOffsetsAttr);
    if (!offsets || offsets.size() != static_cast<int64_t>(op.getNumResults()))
      return absl::FailedPreconditionError(
          absl::StrCat("codegen: ", op.getName().getStringRef().str(), " #", opIndex,
                       " has no llm.arena_offsets for its results; run --llm-plan-memory first"));
    for (auto [resultIndex, result] : llvm::enumerate(op.getResults())) {
      std::string name = absl::StrCat(op.getName().stripDialect().str(), ".", opIndex,
                                      op.getNumResults() > 1 ? absl::StrCat(":", resultIndex) : "");
      int64_t width = llm::getActivationWidth(result.getType());
      if (result == logits)
        addValue(result, plan::Value::LOGITS, plan::F32, width, 0, "logits");
      else if (isa<llm::RouterOp>(op) && resultIndex == 0)
        addValue(result, plan::Value::EXPERT_IDS, plan::I32, width, offsets[resultIndex],
                 std::move(name));
      else
        addValue(result, plan::Value::ACTIVATION, plan::F32, width, offsets[resultIndex],
                 std::move(name));
      planOp.add_outputs(valueIds[result]);
    }
    if (absl::Status status = emitOp(op, planOp); !status.ok())
      return status;
    *program.add_ops() = std::move(planOp);
    ++opIndex;
  }
  if (!valueIds.count(logits) || program.values(valueIds[logits]).kind() != plan::Value::LOGITS)
    return absl::InvalidArgumentError("codegen: @forward returns a value no op produces");
  return std::move(program);
}

} // namespace

std::string fusedTensorName(const std::vector<std::string> &names) {
  // Consecutive row slices of one tensor (Phi-3's qkv_proj read as q, k, v) are the rows they
  // span together.
  std::optional<RowSlice> joined = parseRowSlice(names[0]);
  for (size_t i = 1; joined && i < names.size(); ++i) {
    const std::optional<RowSlice> next = parseRowSlice(names[i]);
    if (!next || next->tensor != joined->tensor || next->first != joined->end)
      joined.reset();
    else
      joined->end = next->end;
  }
  if (joined)
    return rowSliceName(joined->tensor, joined->first, joined->end);
  // Split "prefix.stem_proj.suffix".
  std::string prefix, suffix;
  std::vector<std::string> stems;
  bool allSingleLetter = true;
  for (const std::string &name : names) {
    size_t last = name.rfind('.');
    size_t middle = last == std::string::npos ? std::string::npos : name.rfind('.', last - 1);
    std::string stem =
        middle == std::string::npos ? "" : name.substr(middle + 1, last - middle - 1);
    constexpr llvm::StringLiteral kProj = "_proj";
    if (stem.size() <= kProj.size() || !StringRef(stem).endswith(kProj))
      return absl::StrJoin(names, "+");
    std::string thisPrefix = name.substr(0, middle), thisSuffix = name.substr(last + 1);
    if (stems.empty()) {
      prefix = thisPrefix;
      suffix = thisSuffix;
    } else if (thisPrefix != prefix || thisSuffix != suffix) {
      return absl::StrJoin(names, "+");
    }
    stems.push_back(stem.substr(0, stem.size() - kProj.size()));
    allSingleLetter &= stems.back().size() == 1;
  }
  return absl::StrCat(prefix, ".", absl::StrJoin(stems, allSingleLetter ? "" : "_"), "_proj.",
                      suffix);
}

absl::StatusOr<plan::Program> emitProgram(ModuleOp module, const WeightSource &weights,
                                          plan::DType weightDtype, plan::PlanWriter &writer,
                                          std::vector<plan::Tensor> *tensors,
                                          const EmitProgress &progress) {
  if (weightDtype != plan::F32 && weightDtype != plan::F16 && weightDtype != plan::BF16)
    return absl::InvalidArgumentError(absl::StrCat("codegen: weight dtype must be F32, F16 or "
                                                   "BF16, found ",
                                                   plan::DType_Name(weightDtype)));
  func::FuncOp function = module.lookupSymbol<func::FuncOp>("forward");
  if (!function) {
    auto functions = module.getOps<func::FuncOp>();
    if (std::distance(functions.begin(), functions.end()) == 1)
      function = *functions.begin();
  }
  if (!function || function.isExternal() || !function.getBody().hasOneBlock())
    return absl::InvalidArgumentError("codegen: the module has no single-block func.func @forward");
  return Emitter(weights, weightDtype, writer, tensors, progress).emit(function);
}

} // namespace llmc
