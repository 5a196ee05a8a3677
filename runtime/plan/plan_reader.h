// Plan: a plan file mapped read-only into memory and validated.
//
// Open() checks, before anything else reads the file: the magic, the major version, that
// the header's offsets and sizes lie inside the file, the meta checksum, that the meta parses,
// and that every tensor's blob range lies inside the data section and is aligned. With
// `verify_blob_checksums` it also hashes every blob (reads the whole file).
//
// Ownership: the Plan owns the mapping; pointers returned by blob() live as long as the Plan.
// Thread-safety: immutable after Open(); every method is safe to call from any thread.
#ifndef LLMRT_PLAN_PLAN_READER_H_
#define LLMRT_PLAN_PLAN_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/plan/plan_format.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::plan {

struct PlanOpenOptions {
  bool verify_blob_checksums = false;
};

class Plan {
 public:
  static absl::StatusOr<std::unique_ptr<Plan>> Open(const std::string& path,
                                                    const PlanOpenOptions& options = {});
  ~Plan();
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const PlanMeta& meta() const { return meta_; }
  const PlanHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return header_.file_size; }

  // The bytes of meta().tensors(index); validated to lie inside the file.
  const uint8_t* blob(int tensor_index) const;

 private:
  Plan() = default;
  std::string path_;
  PlanHeader header_{};
  PlanMeta meta_;
  const uint8_t* base_ = nullptr;
  size_t mapped_size_ = 0;
};

// Bytes per element of a dtype; 0 for DTYPE_UNSPECIFIED and for I4 / FP4_E2M1 (half a byte).
size_t DTypeSize(DType dtype);
// Bits per element: 4 for I4 and FP4_E2M1, 8 * DTypeSize otherwise.
int DTypeBits(DType dtype);
const char* DTypeName(DType dtype);

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_PLAN_READER_H_
