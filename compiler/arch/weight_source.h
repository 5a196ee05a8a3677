// TensorMapWeightSource: codegen's WeightSource over checkpoint tensors (llmc::TensorMap, e.g.
// Checkpoint::tensors()). Borrows the map; it must outlive the source. Thread-compatible.
#ifndef LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
#define LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/EmitProgram.h"
#include "codegen/RowSlice.h"
#include "compiler/arch/arch.h"

namespace llmc {

class TensorMapWeightSource final : public WeightSource {
 public:
  explicit TensorMapWeightSource(const TensorMap& tensors) : tensors_(tensors) {}

  // A row slice name (codegen/RowSlice.h) is served as a view of those rows of its tensor.
  absl::StatusOr<WeightView> getWeight(const std::string& name) const override {
    const std::optional<RowSlice> slice = parseRowSlice(name);
    const std::string& tensor = slice ? slice->tensor : name;
    auto it = tensors_.find(tensor);
    if (it == tensors_.end())
      return absl::NotFoundError(absl::StrCat("checkpoint has no tensor ", tensor));
    const TensorInfo& info = it->second;
    WeightView view;
    view.dtype = info.dtype;
    view.shape = info.shape;
    view.data = info.data;
    view.sizeBytes = info.size_bytes;
    view.file = info.file;
    if (!slice) return view;
    if (info.shape.size() != 2 || slice->end > info.shape[0])
      return absl::InvalidArgumentError(absl::StrCat(
          info.file, ": tensor ", tensor, " has no rows [", slice->first, ", ", slice->end, ")"));
    const uint64_t row_bytes = info.size_bytes / static_cast<uint64_t>(info.shape[0]);
    view.shape[0] = slice->end - slice->first;
    view.data = info.data + row_bytes * static_cast<uint64_t>(slice->first);
    view.sizeBytes = row_bytes * static_cast<uint64_t>(view.shape[0]);
    return view;
  }

 private:
  const TensorMap& tensors_;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
