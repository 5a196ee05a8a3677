// TensorMapWeightSource: codegen's WeightSource over checkpoint tensors (llmc::TensorMap, e.g.
// Checkpoint::tensors()). Borrows the map; it must outlive the source. Thread-compatible, and
// not thread-safe even for const calls: getWeight may fill the cache of materialized views.
#ifndef LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
#define LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/EmitProgram.h"
#include "codegen/ExpertSlice.h"
#include "codegen/RowSlice.h"
#include "compiler/arch/arch.h"

namespace llmc {

class TensorMapWeightSource final : public WeightSource {
 public:
  explicit TensorMapWeightSource(const TensorMap& tensors) : tensors_(tensors) {}

  // A row slice name (codegen/RowSlice.h) is served as a view of those rows of its tensor; an
  // expert view (codegen/ExpertSlice.h) likewise when its rows are contiguous, else as a copy
  // this source owns until releaseWeights.
  absl::StatusOr<WeightView> getWeight(const std::string& name) const override {
    if (std::optional<ExpertSlice> expert = parseExpertSlice(name))
      return ExpertView(*expert, name);
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

  void releaseWeights(llvm::ArrayRef<std::string> names) const override {
    for (const std::string& name : names) materialized_.erase(name);
  }

 private:
  absl::StatusOr<WeightView> ExpertView(const ExpertSlice& slice, const std::string& name) const {
    auto it = tensors_.find(slice.tensor);
    if (it == tensors_.end())
      return absl::NotFoundError(absl::StrCat("checkpoint has no tensor ", slice.tensor));
    const TensorInfo& info = it->second;
    WeightView view;
    view.dtype = info.dtype;
    view.shape = expertSliceShape(slice, info.shape);
    view.file = info.file;
    if (view.shape.empty())
      return absl::InvalidArgumentError(
          absl::StrCat(info.file, ": tensor ", slice.tensor, " has no view ", name));
    uint64_t count = 1;
    for (int64_t dim : info.shape) count *= static_cast<uint64_t>(dim);
    const size_t element_bytes = count == 0 ? 0 : info.size_bytes / count;
    uint64_t view_count = 1;
    for (int64_t dim : view.shape) view_count *= static_cast<uint64_t>(dim);
    view.sizeBytes = view_count * element_bytes;
    if (slice.contiguous()) {
      // Rows [first, end) of the expert's block: contiguous bytes.
      const uint64_t expert_bytes = info.size_bytes / static_cast<uint64_t>(info.shape[0]);
      const uint64_t row_bytes = view.sizeBytes / static_cast<uint64_t>(view.shape[0]);
      view.data = info.data + expert_bytes * static_cast<uint64_t>(slice.expert) +
                  row_bytes * static_cast<uint64_t>(slice.row_first);
      return view;
    }
    std::vector<uint8_t>& copy = materialized_[name];
    if (copy.empty()) copyExpertSlice(slice, info.shape, element_bytes, info.data, copy);
    view.data = copy.data();
    return view;
  }

  const TensorMap& tensors_;
  // Transposed or strided expert views, by name, until releaseWeights.
  mutable std::map<std::string, std::vector<uint8_t>> materialized_;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
