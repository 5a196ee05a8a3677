// TensorMapWeightSource: codegen's WeightSource over checkpoint tensors (llmc::TensorMap, e.g.
// Checkpoint::tensors()). Borrows the map; it must outlive the source. Thread-compatible.
#ifndef LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
#define LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "codegen/EmitProgram.h"
#include "compiler/arch/arch.h"

namespace llmc {

class TensorMapWeightSource final : public WeightSource {
 public:
  explicit TensorMapWeightSource(const TensorMap& tensors) : tensors_(tensors) {}

  absl::StatusOr<WeightView> getWeight(const std::string& name) const override {
    auto it = tensors_.find(name);
    if (it == tensors_.end())
      return absl::NotFoundError(absl::StrCat("checkpoint has no tensor ", name));
    const TensorInfo& info = it->second;
    WeightView view;
    view.dtype = info.dtype;
    view.shape = info.shape;
    view.data = info.data;
    view.sizeBytes = info.size_bytes;
    view.file = info.file;
    return view;
  }

 private:
  const TensorMap& tensors_;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_ARCH_WEIGHT_SOURCE_H_
