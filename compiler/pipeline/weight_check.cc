#include "compiler/pipeline/weight_check.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/plan/plan_reader.h"

namespace llmc {
namespace {

namespace plan = llmrt::plan;

// IEEE binary32, binary16 and bfloat16: a value is NaN or Inf exactly when its exponent field
// is all ones; the mantissa tells which (zero: Inf, signed by the top bit).
struct Format {
  uint32_t exponent_mask;
  uint32_t mantissa_mask;
  uint32_t sign_bit;
};
constexpr Format kF32 = {0x7F800000u, 0x007FFFFFu, 0x80000000u};
constexpr Format kF16 = {0x7C00u, 0x03FFu, 0x8000u};
constexpr Format kBF16 = {0x7F80u, 0x007Fu, 0x8000u};

// Elements per block: 4 KiB of f32, copied to an aligned buffer since safetensors data is not
// aligned; a branch-free count over the block vectorizes the common all-finite case, and only a
// block with a hit is searched element by element.
constexpr int64_t kBlockElements = 1024;

template <typename Word>
bool IsNonFinite(Word word, const Format& format) {
  return (word & format.exponent_mask) == format.exponent_mask;
}

struct Finding {
  int64_t first_index = -1;
  uint32_t first_word = 0;
  int64_t count = 0;
};

template <typename Word>
Finding Scan(const uint8_t* data, int64_t num_elements, const Format& format) {
  Finding finding;
  Word block[kBlockElements];
  for (int64_t begin = 0; begin < num_elements; begin += kBlockElements) {
    const int64_t size = std::min(kBlockElements, num_elements - begin);
    std::memcpy(block, data + begin * sizeof(Word), size * sizeof(Word));
    // Zeros (finite) past the end keep the trip count constant, which GCC's -O2 cost model needs
    // before it vectorizes; hits are counted in the word's own width (1024 cannot overflow 16
    // bits) so the compare runs at full vector width: 2-4x faster than a bool OR, measured.
    if (size < kBlockElements) {
      std::memset(block + size, 0, (kBlockElements - size) * sizeof(Word));
    }
    const Word mask = static_cast<Word>(format.exponent_mask);
    Word hits = 0;
    for (int64_t index = 0; index < kBlockElements; ++index) hits += (block[index] & mask) == mask;
    if (hits == 0) continue;
    for (int64_t index = 0; index < size; ++index) {
      if (!IsNonFinite(block[index], format)) continue;
      if (finding.count++ == 0) {
        finding.first_index = begin + index;
        finding.first_word = block[index];
      }
    }
  }
  return finding;
}

std::string ValueName(uint32_t word, const Format& format) {
  if ((word & format.mantissa_mask) != 0) return "NaN";
  return (word & format.sign_bit) != 0 ? "-Inf" : "+Inf";
}

std::vector<int64_t> MultiIndex(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t axis = shape.size(); axis-- > 0;) {
    index[axis] = shape[axis] > 0 ? flat % shape[axis] : 0;
    flat = shape[axis] > 0 ? flat / shape[axis] : 0;
  }
  return index;
}

}  // namespace

absl::Status CheckWeightsFinite(const std::string& model_dir,
                                const std::map<std::string, TensorInfo>& tensors) {
  for (const auto& [name, tensor] : tensors) {
    const Format* format;
    size_t element_bytes;
    switch (tensor.dtype) {
      case plan::F32:
        format = &kF32, element_bytes = 4;
        break;
      case plan::F16:
        format = &kF16, element_bytes = 2;
        break;
      case plan::BF16:
        format = &kBF16, element_bytes = 2;
        break;
      default:
        continue;
    }
    const int64_t num_elements = static_cast<int64_t>(tensor.size_bytes / element_bytes);
    const Finding finding = element_bytes == 4 ? Scan<uint32_t>(tensor.data, num_elements, *format)
                                               : Scan<uint16_t>(tensor.data, num_elements, *format);
    if (finding.count == 0) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s/%s: tensor %s (%s [%s]) holds %s at index [%s] (flat index %d); %d of its %d values "
        "are "
        "NaN or Inf. Non-finite weights make every logit NaN: fix or re-export the checkpoint",
        model_dir, tensor.file, name, plan::DTypeName(tensor.dtype),
        absl::StrJoin(tensor.shape, ", "), ValueName(finding.first_word, *format),
        absl::StrJoin(MultiIndex(finding.first_index, tensor.shape), ", "), finding.first_index,
        finding.count, num_elements));
  }
  return absl::OkStatus();
}

}  // namespace llmc
