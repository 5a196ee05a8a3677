// One expert's weight read out of a stacked checkpoint tensor. gpt-oss stores its experts as 3-D
// tensors ([E, H, 2I] gate_up_proj, used transposed, gate and up interleaved by column); the
// builders and passes know per-expert [N, K] matrices. The family names expert e's view of
// tensor T as the param "T[expert=e(,transpose)?(,rows=F::S)?]", which denotes, in this order:
//   expert=e   drop the leading dim: [E, A, B] -> [A, B], [E, A] -> [A];
//   transpose  swap the two remaining dims (2-D only);
//   rows=F::S  keep entries F, F + S, F + 2S, ... of the first remaining dim.
// Weight sources serve the name: zero-copy when the kept rows are contiguous bytes of T
// (no transpose, step 1), else copied into a buffer (copyExpertSlice). Header-only like
// RowSlice.h, whose "T[a:b]" names these never collide with (no "=").
#ifndef LLMC_CODEGEN_EXPERTSLICE_H_
#define LLMC_CODEGEN_EXPERTSLICE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llmc {

struct ExpertSlice {
  std::string tensor;
  int64_t expert = 0;
  bool transpose = false;
  int64_t row_first = 0;
  int64_t row_step = 1;

  // Zero-copy: the view's bytes are one contiguous range of the tensor's.
  bool contiguous() const { return !transpose && row_step == 1; }
};

inline std::string expertSliceName(const ExpertSlice &slice) {
  std::string name = absl::StrCat(slice.tensor, "[expert=", slice.expert);
  if (slice.transpose)
    absl::StrAppend(&name, ",transpose");
  if (slice.row_first != 0 || slice.row_step != 1)
    absl::StrAppend(&name, ",rows=", slice.row_first, "::", slice.row_step);
  return name + "]";
}

// The view a param name denotes, or nullopt for any other name (plain tensors, row slices).
inline std::optional<ExpertSlice> parseExpertSlice(const std::string &name) {
  constexpr char kOpen[] = "[expert=";
  if (name.empty() || name.back() != ']')
    return std::nullopt;
  const size_t open = name.rfind(kOpen);
  if (open == std::string::npos || open == 0)
    return std::nullopt;
  ExpertSlice slice;
  slice.tensor = name.substr(0, open);
  const std::string body = name.substr(open + 1, name.size() - open - 2);
  bool first = true;
  for (const absl::string_view field : absl::StrSplit(body, ',')) {
    if (first) {
      if (!absl::SimpleAtoi(field.substr(7), &slice.expert) || slice.expert < 0)
        return std::nullopt;
      first = false;
    } else if (field == "transpose" && !slice.transpose && slice.row_step == 1 &&
               slice.row_first == 0) {
      slice.transpose = true;
    } else if (absl::StartsWith(field, "rows=")) {
      const std::vector<absl::string_view> parts = absl::StrSplit(field.substr(5), "::");
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &slice.row_first) ||
          !absl::SimpleAtoi(parts[1], &slice.row_step) || slice.row_first < 0 || slice.row_step < 1)
        return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  return slice;
}

// The view's shape given the stacked tensor's, or empty when the view does not fit it (a 1-D
// tensor, an expert or first row out of range, a transposed vector).
inline std::vector<int64_t> expertSliceShape(const ExpertSlice &slice,
                                             const std::vector<int64_t> &tensorShape) {
  if (tensorShape.size() < 2 || tensorShape.size() > 3 || slice.expert >= tensorShape[0])
    return {};
  std::vector<int64_t> shape(tensorShape.begin() + 1, tensorShape.end());
  if (slice.transpose) {
    if (shape.size() != 2)
      return {};
    std::swap(shape[0], shape[1]);
  }
  if (slice.row_first >= shape[0])
    return {};
  shape[0] = (shape[0] - slice.row_first + slice.row_step - 1) / slice.row_step;
  return shape;
}

// Copies the view of a row-major stacked tensor (`data`, `tensorShape`, elements of
// `elementBytes`) into `out`, row-major in the view's shape (expertSliceShape, non-empty).
inline void copyExpertSlice(const ExpertSlice &slice, const std::vector<int64_t> &tensorShape,
                            size_t elementBytes, const uint8_t *data, std::vector<uint8_t> &out) {
  const std::vector<int64_t> shape = expertSliceShape(slice, tensorShape);
  // The expert's [A, B] (or [A]) block; a vector is one row of A columns.
  const int64_t a = tensorShape[1], b = tensorShape.size() == 3 ? tensorShape[2] : 1;
  const uint8_t *block = data + static_cast<uint64_t>(slice.expert) * a * b * elementBytes;
  const int64_t rows = shape[0], cols = shape.size() == 2 ? shape[1] : 1;
  out.resize(static_cast<size_t>(rows * cols) * elementBytes);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t source = slice.row_first + r * slice.row_step;
    for (int64_t c = 0; c < cols; ++c) {
      // Element (source, c) of the (possibly transposed) [A, B] block.
      const int64_t index = slice.transpose ? c * b + source : source * b + c;
      std::memcpy(out.data() + (r * cols + c) * elementBytes, block + index * elementBytes,
                  elementBytes);
    }
  }
}

} // namespace llmc

#endif // LLMC_CODEGEN_EXPERTSLICE_H_
