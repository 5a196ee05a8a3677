#include "compiler/quant/prequantized.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/int4_layout.h"
#include "runtime/plan/mxfp4.h"

namespace llmc::quant {
namespace {

using Json = nlohmann::json;
using llmrt::plan::DType;

constexpr char kQWeight[] = ".qweight";
// AutoAWQ's GEMM packing: nibble i of a word holds column 8 * word + kAwqOrder[i].
constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

absl::StatusOr<Json> ReadConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
  std::stringstream text;
  text << file.rdbuf();
  Json config = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  return config;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int32_t LoadI32(const TensorInfo& tensor, int64_t index) {
  int32_t value;
  std::memcpy(&value, tensor.data + 4 * index, 4);
  return value;
}

uint16_t LoadU16(const TensorInfo& tensor, int64_t index) {
  uint16_t value;
  std::memcpy(&value, tensor.data + 2 * index, 2);
  return value;
}

// The tensor `name`, checked for dtype and shape; errors name it.
absl::StatusOr<const TensorInfo*> Require(const std::map<std::string, TensorInfo>& tensors,
                                          const std::string& name, DType dtype,
                                          const std::vector<int64_t>& shape,
                                          const std::string& why) {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing tensor ", name, " (", why, ")"));
  }
  const TensorInfo& tensor = it->second;
  if (tensor.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(tensor.file, ": tensor ", name, " has dtype ",
                                                   llmrt::plan::DType_Name(tensor.dtype),
                                                   ", expected ", llmrt::plan::DType_Name(dtype)));
  }
  if (tensor.shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(tensor.file, ": tensor ", name, " has shape ",
                                                   ShapeString(tensor.shape), ", expected ",
                                                   ShapeString(shape), " (", why, ")"));
  }
  return &tensor;
}

struct Settings {
  std::string method;
  int64_t group_size = 0;
  bool zeros_minus_one = false;  // AutoGPTQ's original format
};

absl::StatusOr<Settings> ParseSettings(const std::string& model_dir, const Json& config) {
  const std::string where = model_dir + "/config.json: quantization_config";
  const Json& quantization = config["quantization_config"];
  if (!quantization.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
  }
  Settings settings;
  settings.method = quantization.value("quant_method", "");
  if (settings.method != "gptq" && settings.method != "awq") {
    return absl::UnimplementedError(absl::StrCat(where, ".quant_method is \"", settings.method,
                                                 "\"; supported: gptq, awq, mxfp4"));
  }
  const Json bits = quantization.value("bits", Json());
  if (!bits.is_number_integer() || bits.get<int64_t>() != 4) {
    return absl::UnimplementedError(
        absl::StrCat(where, ".bits is ", bits.dump(), "; only 4-bit checkpoints are supported"));
  }
  const Json group = quantization.value("group_size", Json());
  if (!group.is_number_integer() || group.get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".group_size is ", group.dump(),
                     "; expected a positive group size (-1, one group per row, is not supported)"));
  }
  settings.group_size = group.get<int64_t>();
  if (settings.method == "gptq") {
    std::string format = quantization.value("checkpoint_format", "gptq");
    if (format != "gptq" && format != "gptq_v2") {
      return absl::UnimplementedError(
          absl::StrCat(where, ".checkpoint_format is \"", format, "\"; supported: gptq, gptq_v2"));
    }
    settings.zeros_minus_one = format == "gptq";
  } else {
    std::string version = quantization.value("version", "gemm");
    std::transform(version.begin(), version.end(), version.begin(), ::tolower);
    if (version != "gemm") {
      return absl::UnimplementedError(
          absl::StrCat(where, ".version is \"", version, "\"; supported: gemm"));
    }
    if (!quantization.value("zero_point", true)) {
      return absl::UnimplementedError(absl::StrCat(where, ".zero_point false is not supported"));
    }
  }
  return settings;
}

// One linear `prefix` (`prefix.qweight` exists) -> [N, K] codes (0..15, original input order),
// zero points and f16 scales [N, groups], group of each input [K].
struct Unpacked {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;  // [rows, cols]
  std::vector<uint8_t> zeros;  // [rows, groups]
  std::vector<uint16_t> scales;
  std::vector<int32_t> group_of_input;
};

absl::StatusOr<Unpacked> Unpack(const std::map<std::string, TensorInfo>& tensors,
                                const std::string& prefix, const Settings& settings) {
  const TensorInfo& qweight = tensors.at(prefix + kQWeight);
  const std::string qweight_name = prefix + kQWeight;
  if (qweight.dtype != llmrt::plan::I32 || qweight.shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(qweight.file, ": tensor ", qweight_name, " must be an I32 matrix, found ",
                     llmrt::plan::DType_Name(qweight.dtype), " ", ShapeString(qweight.shape)));
  }
  const bool gptq = settings.method == "gptq";
  Unpacked out;
  out.cols = gptq ? qweight.shape[0] * 8 : qweight.shape[0];
  out.rows = gptq ? qweight.shape[1] : qweight.shape[1] * 8;
  const int64_t group_size = settings.group_size;
  if (out.cols % group_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tensor %s implies %d inputs, not a multiple of quantization_config.group_size %d",
        qweight.file, qweight_name, out.cols, group_size));
  }
  const int64_t groups = out.cols / group_size;
  const std::string packing = gptq ? "GPTQ packing" : "AWQ packing";
  absl::StatusOr<const TensorInfo*> qzeros =
      Require(tensors, prefix + ".qzeros", llmrt::plan::I32, {groups, out.rows / 8},
              absl::StrCat(packing, " of ", qweight_name, " ", ShapeString(qweight.shape),
                           ", group size ", group_size));
  if (!qzeros.ok()) return qzeros.status();
  absl::StatusOr<const TensorInfo*> scales =
      Require(tensors, prefix + ".scales", llmrt::plan::F16, {groups, out.rows},
              absl::StrCat(packing, " of ", qweight_name, " ", ShapeString(qweight.shape),
                           ", group size ", group_size));
  if (!scales.ok()) return scales.status();
  if (out.rows % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tensor %s has %d outputs, not a multiple of 8", qweight.file, qweight_name, out.rows));
  }

  out.codes.resize(out.rows * out.cols);
  for (int64_t k = 0; k < out.cols; ++k) {
    for (int64_t n = 0; n < out.rows; ++n) {
      int32_t word;
      int shift;
      if (gptq) {
        word = LoadI32(qweight, (k / 8) * out.rows + n);
        shift = 4 * static_cast<int>(k % 8);
      } else {
        word = LoadI32(qweight, k * (out.rows / 8) + n / 8);
        shift = 4 * static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, n % 8) - kAwqOrder);
      }
      out.codes[n * out.cols + k] =
          static_cast<uint8_t>((static_cast<uint32_t>(word) >> shift) & 15);
    }
  }
  out.zeros.resize(out.rows * groups);
  out.scales.resize(out.rows * groups);
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t n = 0; n < out.rows; ++n) {
      const uint32_t word = static_cast<uint32_t>(LoadI32(**qzeros, g * (out.rows / 8) + n / 8));
      const int position =
          gptq ? static_cast<int>(n % 8)
               : static_cast<int>(std::find(kAwqOrder, kAwqOrder + 8, n % 8) - kAwqOrder);
      uint32_t zero = (word >> (4 * position)) & 15;
      // v1 stored zero - 1 in 4 bits, so a true zero of 0 was stored as 15.
      if (settings.zeros_minus_one) zero = (zero + 1) & 15;
      out.zeros[n * groups + g] = static_cast<uint8_t>(zero);
      out.scales[n * groups + g] = LoadU16(**scales, g * out.rows + n);
    }
  }
  out.group_of_input.resize(out.cols);
  if (auto it = tensors.find(prefix + ".g_idx"); gptq && it != tensors.end()) {
    absl::StatusOr<const TensorInfo*> g_idx =
        Require(tensors, prefix + ".g_idx", llmrt::plan::I32, {out.cols}, "one group per input");
    if (!g_idx.ok()) return g_idx.status();
    for (int64_t k = 0; k < out.cols; ++k) {
      out.group_of_input[k] = LoadI32(**g_idx, k);
      if (out.group_of_input[k] < 0 || out.group_of_input[k] >= groups) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: tensor %s.g_idx[%d] is %d, outside [0, %d)", (*g_idx)->file,
                            prefix, k, out.group_of_input[k], groups));
      }
    }
  } else {
    for (int64_t k = 0; k < out.cols; ++k)
      out.group_of_input[k] = static_cast<int32_t>(k / group_size);
  }
  return out;
}

constexpr char kBlocks[] = "_blocks";
constexpr char kScales[] = "_scales";
constexpr int64_t kBlockBytes = llmrt::plan::kMxfp4Block / 2;
// The only tensors MXFP4 checkpoints quantize (transformers' Mxfp4GptOssExperts).
const std::regex& ExpertProjection() {
  static const std::regex* pattern =
      new std::regex(R"(model\.layers\.\d+\.mlp\.experts\.(gate_up_proj|down_proj))");
  return *pattern;
}

// transformers' should_convert_module: whether `pattern` (a Python regex, practically a plain
// one) keeps `module` unconverted: it matches from the start up to a module boundary, or is a
// suffix. A boundary is the end, or a position before or after a '.'.
absl::StatusOr<bool> PatternKeepsFloat(const std::string& pattern, const std::string& module,
                                       const std::string& where) {
  if (absl::EndsWith(module, pattern)) return true;
  std::regex regex;
  try {
    regex = std::regex(pattern);
  } catch (const std::regex_error&) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"", pattern, "\" is not a regular expression"));
  }
  for (size_t end = 1; end <= module.size(); ++end) {
    const bool boundary = end == module.size() || module[end] == '.' || module[end - 1] == '.';
    if (boundary && std::regex_match(module.substr(0, end), regex)) return true;
  }
  return false;
}

absl::StatusOr<PrequantizedCheckpoint> ImportMxfp4(
    const std::string& model_dir, const Json& config,
    const std::map<std::string, TensorInfo>& tensors) {
  const std::string where = model_dir + "/config.json: quantization_config";
  std::vector<std::string> keep_float;
  const Json& quantization = config["quantization_config"];
  if (quantization.contains("modules_to_not_convert") &&
      !quantization["modules_to_not_convert"].is_null()) {
    const Json& patterns = quantization["modules_to_not_convert"];
    if (!patterns.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".modules_to_not_convert must be a list of strings"));
    }
    for (const Json& pattern : patterns) {
      if (!pattern.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".modules_to_not_convert must be a list of strings, found ", pattern.dump()));
      }
      keep_float.push_back(pattern.get<std::string>());
    }
  }
  PrequantizedCheckpoint result;
  result.method = "mxfp4";
  result.format = QuantFormat::Mxfp4();
  std::set<std::string> consumed;
  for (const auto& [name, info] : tensors) {
    const bool is_blocks = absl::EndsWith(name, kBlocks);
    if (!is_blocks && !absl::EndsWith(name, kScales)) {
      if (std::regex_match(name, ExpertProjection())) {
        return absl::InvalidArgumentError(absl::StrCat(
            info.file, ": tensor ", name, " is stored as ", llmrt::plan::DType_Name(info.dtype),
            " in an MXFP4 checkpoint (quantization_config.quant_method \"mxfp4\"); expected ", name,
            kBlocks, " and ", name, kScales));
      }
      continue;
    }
    const std::string stem = name.substr(0, name.size() - strlen(is_blocks ? kBlocks : kScales));
    const std::string other = stem + (is_blocks ? kScales : kBlocks);
    if (!tensors.count(other)) {
      return absl::InvalidArgumentError(absl::StrCat(info.file, ": tensor ", name, " has no ",
                                                     other,
                                                     " (MXFP4 stores codes and scales in pairs)"));
    }
    if (!is_blocks) continue;  // the pair is read from its _blocks half
    if (!std::regex_match(stem, ExpertProjection())) {
      return absl::UnimplementedError(
          absl::StrCat(info.file, ": tensor ", name,
                       " is MXFP4 outside a mixture of experts; MXFP4 is imported for "
                       "model.layers.L.mlp.experts.{gate_up_proj,down_proj} only"));
    }
    const std::string module = stem.substr(0, stem.rfind('.'));
    for (const std::string& pattern : keep_float) {
      absl::StatusOr<bool> keeps = PatternKeepsFloat(pattern, module, where);
      if (!keeps.ok()) return keeps.status();
      if (*keeps) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".modules_to_not_convert entry \"", pattern, "\" matches ", module,
                         ", whose experts the checkpoint stores in MXFP4 (", name,
                         "): transformers would expect them in floats"));
      }
    }
    const TensorInfo& scales = tensors.at(other);
    if (info.dtype != llmrt::plan::U8 || info.shape.size() != 4 || info.shape[3] != kBlockBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          info.file, ": tensor ", name, " must be U8 [experts, rows, cols / 32, 16], found ",
          llmrt::plan::DType_Name(info.dtype), " ", ShapeString(info.shape)));
    }
    const std::vector<int64_t> scale_shape(info.shape.begin(), info.shape.begin() + 3);
    absl::StatusOr<const TensorInfo*> checked =
        Require(tensors, other, llmrt::plan::U8, scale_shape,
                absl::StrCat("one E8M0 byte per block of ", name, " ", ShapeString(info.shape)));
    if (!checked.ok()) return checked.status();
    for (uint64_t i = 0; i < scales.size_bytes; ++i) {
      if (scales.data[i] != 255) continue;
      const int64_t groups = info.shape[2], rows = info.shape[1];
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: tensor %s [%d, %d, %d] is 255, E8M0's NaN (a scale must be 0..254)",
                          scales.file, other, i / (rows * groups), i / groups % rows, i % groups));
    }
    Mxfp4Tensor tensor;
    tensor.blocks = info;
    tensor.scales = scales;
    tensor.experts = info.shape[0];
    tensor.rows = info.shape[1];
    tensor.cols = info.shape[2] * llmrt::plan::kMxfp4Block;
    // transformers' parameter: [E, in, out], what the family declares and views transposed.
    TensorInfo placeholder;
    placeholder.name = stem;
    placeholder.file = info.file;
    placeholder.dtype = llmrt::plan::BF16;
    placeholder.shape = {tensor.experts, tensor.cols, tensor.rows};
    placeholder.size_bytes = static_cast<uint64_t>(tensor.experts * tensor.cols * tensor.rows * 2);
    result.tensors[stem] = placeholder;
    result.mxfp4[stem] = std::move(tensor);
    consumed.insert(name);
    consumed.insert(other);
  }
  if (result.mxfp4.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir,
                     "/config.json has quantization_config.quant_method \"mxfp4\" but the "
                     "checkpoint has no *_blocks / *_scales tensors"));
  }
  for (const auto& [name, info] : tensors) {
    if (!consumed.count(name)) result.tensors[name] = info;
  }
  return result;
}

}  // namespace

absl::StatusOr<QuantizedMatrix> Mxfp4ExpertMatrix(const Mxfp4Tensor& tensor,
                                                  const std::string& name, int64_t expert,
                                                  int64_t row_first, int64_t row_step) {
  if (expert < 0 || expert >= tensor.experts || row_first < 0 || row_first >= tensor.rows ||
      row_step < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: MXFP4 tensor %s has %d experts of %d rows; no expert %d rows %d::%d", name,
        tensor.blocks.name, tensor.experts, tensor.rows, expert, row_first, row_step));
  }
  const int64_t groups = tensor.cols / llmrt::plan::kMxfp4Block;
  QuantizedMatrix matrix;
  matrix.format = QuantFormat::Mxfp4();
  matrix.rows = (tensor.rows - row_first + row_step - 1) / row_step;
  matrix.cols = tensor.cols;
  matrix.codes.resize(matrix.rows * matrix.cols / 2);
  matrix.exponents.resize(matrix.rows * groups);
  std::vector<uint8_t> codes(tensor.cols);
  for (int64_t r = 0; r < matrix.rows; ++r) {
    const int64_t stored_row = expert * tensor.rows + row_first + r * row_step;
    const uint8_t* blocks = tensor.blocks.data + stored_row * groups * kBlockBytes;
    for (int64_t j = 0; j < groups * kBlockBytes; ++j) {
      codes[2 * j] = blocks[j] & 15;
      codes[2 * j + 1] = blocks[j] >> 4;
    }
    llmrt::plan::PackInt4Row(codes.data(), tensor.cols, matrix.codes.data() + r * tensor.cols / 2);
    std::memcpy(matrix.exponents.data() + r * groups, tensor.scales.data + stored_row * groups,
                groups);
  }
  return matrix;
}

absl::StatusOr<bool> IsPrequantized(const std::string& model_dir) {
  absl::StatusOr<Json> config = ReadConfig(model_dir);
  if (!config.ok()) return config.status();
  return config->contains("quantization_config") && !(*config)["quantization_config"].is_null();
}

absl::StatusOr<PrequantizedCheckpoint> ImportPrequantized(
    const std::string& model_dir, const std::map<std::string, TensorInfo>& tensors) {
  absl::StatusOr<Json> config = ReadConfig(model_dir);
  if (!config.ok()) return config.status();
  if ((*config)["quantization_config"].is_object() &&
      (*config)["quantization_config"].value("quant_method", "") == "mxfp4") {
    return ImportMxfp4(model_dir, *config, tensors);
  }
  absl::StatusOr<Settings> settings = ParseSettings(model_dir, *config);
  if (!settings.ok()) return settings.status();

  PrequantizedCheckpoint result;
  result.method = settings->method;
  result.format = {4, settings->group_size, false};
  std::map<std::string, Unpacked> unpacked;
  for (const auto& [name, info] : tensors) {
    if (!absl::EndsWith(name, kQWeight)) continue;
    const std::string prefix = name.substr(0, name.size() - strlen(kQWeight));
    absl::StatusOr<Unpacked> linear = Unpack(tensors, prefix, *settings);
    if (!linear.ok()) return linear.status();
    if (absl::Status status = CheckFormat({4, settings->group_size, true}, linear->cols,
                                          absl::StrCat("tensor ", name));
        !status.ok()) {
      return status;
    }
    for (uint8_t zero : linear->zeros) result.format.asymmetric |= zero != 8;
    unpacked[prefix] = *std::move(linear);
  }
  if (unpacked.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(model_dir, "/config.json has a quantization_config (", settings->method,
                     ") but the checkpoint has no *.qweight tensor"));
  }

  std::set<std::string> consumed;
  for (auto& [prefix, linear] : unpacked) {
    // Inputs sorted by group (stable: identity when g_idx is k / G).
    std::vector<int32_t> permutation(linear.cols);
    std::iota(permutation.begin(), permutation.end(), 0);
    std::stable_sort(permutation.begin(), permutation.end(), [&](int32_t a, int32_t b) {
      return linear.group_of_input[a] < linear.group_of_input[b];
    });
    for (int64_t c = 0; c < linear.cols; ++c) {
      if (linear.group_of_input[permutation[c]] != c / settings->group_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tensor %s.g_idx: group %d does not have exactly %d inputs (quantization_config."
            "group_size); such act-order layouts cannot be stored without requantizing",
            prefix, linear.group_of_input[permutation[c]], settings->group_size));
      }
    }
    bool identity = true;
    for (int64_t c = 0; c < linear.cols; ++c) identity &= permutation[c] == c;

    QuantizedMatrix matrix;
    matrix.format = result.format;
    matrix.rows = linear.rows;
    matrix.cols = linear.cols;
    matrix.codes.resize(linear.rows * linear.cols / 2);
    std::vector<uint8_t> stored(linear.cols);
    for (int64_t n = 0; n < linear.rows; ++n) {
      for (int64_t c = 0; c < linear.cols; ++c)
        stored[c] = linear.codes[n * linear.cols + permutation[c]];
      llmrt::plan::PackInt4Row(stored.data(), linear.cols,
                               matrix.codes.data() + n * linear.cols / 2);
    }
    matrix.scales = std::move(linear.scales);
    if (result.format.asymmetric) matrix.zero_points = std::move(linear.zeros);
    if (!identity) matrix.input_permutation = std::move(permutation);

    const TensorInfo& qweight = tensors.at(prefix + kQWeight);
    TensorInfo weight;
    weight.name = prefix + ".weight";
    weight.file = qweight.file;
    weight.dtype = llmrt::plan::F16;
    weight.shape = {linear.rows, linear.cols};
    weight.size_bytes = static_cast<uint64_t>(linear.rows * linear.cols * 2);
    result.tensors[weight.name] = weight;
    result.matrices[weight.name] = std::move(matrix);
    for (const char* suffix : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
      consumed.insert(prefix + suffix);
    }
  }
  for (const auto& [name, info] : tensors) {
    if (!consumed.count(name)) result.tensors[name] = info;
  }
  return result;
}

}  // namespace llmc::quant
