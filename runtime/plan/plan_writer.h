// PlanWriter: writes a plan file (layout in plan_format.h) atomically.
//
// Blobs are streamed into `<path>.tmp-<pid>` as they are produced; Finish() appends the meta,
// writes the header, pads the file, fsyncs and renames it onto `path`. Destroying a writer
// that did not finish removes the temporary file, so a failed compile never leaves a plan
// (complete or partial) behind.
//
// Not thread-safe: one thread drives a writer.
#ifndef LLMRT_PLAN_PLAN_WRITER_H_
#define LLMRT_PLAN_PLAN_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt::plan {

struct BlobRange {
  uint64_t offset = 0;  // absolute file offset, a multiple of kBlobAlignment
  uint64_t size_bytes = 0;
  uint64_t checksum = 0;  // xxh64, seed 0
};

class PlanWriter {
 public:
  static absl::StatusOr<std::unique_ptr<PlanWriter>> Create(const std::string& path);
  ~PlanWriter();
  PlanWriter(const PlanWriter&) = delete;
  PlanWriter& operator=(const PlanWriter&) = delete;

  // A blob is written as BeginBlob, any number of Append calls, EndBlob; this lets callers
  // convert dtypes or concatenate tensors chunk by chunk without materializing the blob.
  absl::Status BeginBlob();
  absl::Status Append(const void* data, size_t size);
  absl::StatusOr<BlobRange> EndBlob();

  // Convenience for a blob held in memory.
  absl::StatusOr<BlobRange> AddBlob(const void* data, size_t size);

  // Writes `meta`, the header and the padding, then renames the file into place.
  absl::Status Finish(const PlanMeta& meta);

  uint64_t bytes_written() const;

 private:
  struct State;
  explicit PlanWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_PLAN_WRITER_H_
