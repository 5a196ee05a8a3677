// A weight that is a range of rows of a checkpoint tensor. Checkpoints that store projections
// fused (Phi-3's qkv_proj and gate_up_proj) are read as the separate projections the builders
// and passes know: the family names rows [first, end) of tensor T as the param "T[first:end]",
// and weight sources serve that name as a view into T's rows (a row-major tensor's rows are
// contiguous bytes), so the checkpoint is never copied. Header-only: the MLIR-free family
// library writes these names and codegen's sources read them.
#ifndef LLMC_CODEGEN_ROWSLICE_H_
#define LLMC_CODEGEN_ROWSLICE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace llmc {

struct RowSlice {
  std::string tensor;
  int64_t first = 0;
  int64_t end = 0; // exclusive
};

inline std::string rowSliceName(const std::string &tensor, int64_t first, int64_t end) {
  return absl::StrCat(tensor, "[", first, ":", end, "]");
}

// The slice a param name denotes, or nullopt for a plain tensor name.
inline std::optional<RowSlice> parseRowSlice(const std::string &name) {
  if (name.empty() || name.back() != ']')
    return std::nullopt;
  const size_t open = name.rfind('[');
  const size_t colon = name.rfind(':');
  if (open == std::string::npos || colon == std::string::npos || colon < open)
    return std::nullopt;
  RowSlice slice;
  slice.tensor = name.substr(0, open);
  if (!absl::SimpleAtoi(name.substr(open + 1, colon - open - 1), &slice.first) ||
      !absl::SimpleAtoi(name.substr(colon + 1, name.size() - colon - 2), &slice.end) ||
      slice.first < 0 || slice.end <= slice.first)
    return std::nullopt;
  return slice;
}

} // namespace llmc

#endif // LLMC_CODEGEN_ROWSLICE_H_
