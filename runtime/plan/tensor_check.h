// Checks shared by the plan reader and writer: a tensor's dtype, shape and blob range.
#ifndef LLMRT_PLAN_TENSOR_CHECK_H_
#define LLMRT_PLAN_TENSOR_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::plan::internal {

// OK when `tensor` has a known dtype, non-negative dims, size_bytes == product(shape) * dtype
// size (without overflow), and a kBlobAlignment-aligned blob inside [data_begin, data_end).
// Errors start with "<path>: tensor <index> (<name>): ".
absl::Status CheckTensor(const std::string& path, int index, const Tensor& tensor,
                         uint64_t data_begin, uint64_t data_end);

}  // namespace llmrt::plan::internal

#endif  // LLMRT_PLAN_TENSOR_CHECK_H_
