#include "runtime/plan/plan_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/plan/output_file.h"
#include "runtime/plan/plan_format.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/plan/tensor_check.h"

namespace llmrt::plan {
namespace {

// Blob padding and the file tail are written from this buffer; 64 KiB covers the largest
// single gap (the file padding) in one write.
constexpr size_t kZeroBufferSize = kFilePadding;
const uint8_t kZeros[kZeroBufferSize] = {};

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string ErrnoText(int error) { return std::strerror(error); }

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

struct PlanWriter::State {
  std::string path;
  std::string temp_path;
  int fd = -1;
  uint64_t position = 0;  // bytes written so far; the next write goes here
  bool in_blob = false;
  bool done = false;  // finished, or failed and cleaned up: no further writes
  BlobRange current;
  XXH64_state_t* hash = nullptr;

  ~State() {
    if (hash != nullptr) XXH64_freeState(hash);
  }

  // Closes and removes the temporary file; every failure path ends here so no partial plan
  // is left behind.
  void Discard() {
    if (fd >= 0) {
      close(fd);
      fd = -1;
    }
    if (!done) {
      unlink(temp_path.c_str());
      UnregisterTemporaryFile(temp_path);
    }
    done = true;
  }

  absl::Status Fail(absl::Status status) {
    Discard();
    return status;
  }

  absl::Status WriteAll(const void* data, size_t size) {
    const uint8_t* bytes = static_cast<const uint8_t*>(data);
    while (size > 0) {
      const ssize_t written = write(fd, bytes, size);
      if (written < 0) {
        if (errno == EINTR) continue;
        const int error = errno;
        return Fail(
            absl::InternalError(absl::StrFormat("%s: writing %u bytes at offset %u failed: %s",
                                                path, size, position, ErrnoText(error))));
      }
      bytes += written;
      size -= static_cast<size_t>(written);
      position += static_cast<uint64_t>(written);
    }
    return absl::OkStatus();
  }

  absl::Status PadTo(uint64_t target) {
    while (position < target) {
      const uint64_t gap = target - position;
      const size_t chunk = gap < kZeroBufferSize ? static_cast<size_t>(gap) : kZeroBufferSize;
      absl::Status status = WriteAll(kZeros, chunk);
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

  absl::Status CheckUsable(const char* operation) const {
    if (done) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: %s after the plan writer finished or failed", path, operation));
    }
    return absl::OkStatus();
  }
};

PlanWriter::PlanWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}

PlanWriter::~PlanWriter() {
  if (state_ != nullptr) state_->Discard();
}

absl::StatusOr<std::unique_ptr<PlanWriter>> PlanWriter::Create(const std::string& path) {
  absl::StatusOr<std::string> target = OutputTarget(path);
  if (!target.ok()) return target.status();
  auto state = std::make_unique<State>();
  state->path = *std::move(target);
  state->temp_path = absl::StrCat(state->path, ".tmp-", static_cast<long>(getpid()));
  state->hash = XXH64_createState();
  if (state->hash == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%s: cannot allocate the xxh64 state", path));
  }
  // O_EXCL: a leftover temp file with our pid belongs to a dead process; replace it rather
  // than appending to it.
  unlink(state->temp_path.c_str());
  state->fd = open(state->temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (state->fd < 0) {
    const int error = errno;
    state->done = true;  // nothing was created, nothing to remove
    return absl::PermissionDeniedError(absl::StrFormat("%s: cannot create temporary file %s: %s",
                                                       path, state->temp_path, ErrnoText(error)));
  }
  RegisterTemporaryFile(state->temp_path);
  // The header is written last (Finish); reserve its 64 bytes and pad to the first blob.
  absl::Status status = state->PadTo(RoundUp(kHeaderSize, kBlobAlignment));
  if (!status.ok()) return status;
  return std::unique_ptr<PlanWriter>(new PlanWriter(std::move(state)));
}

absl::Status PlanWriter::BeginBlob() {
  State& state = *state_;
  if (absl::Status usable = state.CheckUsable("BeginBlob"); !usable.ok()) return usable;
  if (state.in_blob) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: BeginBlob while a blob is open (call EndBlob first)", state.path));
  }
  absl::Status status = state.PadTo(RoundUp(state.position, kBlobAlignment));
  if (!status.ok()) return status;
  state.in_blob = true;
  state.current = BlobRange{};
  state.current.offset = state.position;
  XXH64_reset(state.hash, 0);
  return absl::OkStatus();
}

absl::Status PlanWriter::Append(const void* data, size_t size) {
  State& state = *state_;
  if (absl::Status usable = state.CheckUsable("Append"); !usable.ok()) return usable;
  if (!state.in_blob) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: Append outside a blob (call BeginBlob first)", state.path));
  }
  if (size == 0) return absl::OkStatus();
  XXH64_update(state.hash, data, size);
  absl::Status status = state.WriteAll(data, size);
  if (!status.ok()) return status;
  state.current.size_bytes += size;
  return absl::OkStatus();
}

absl::StatusOr<BlobRange> PlanWriter::EndBlob() {
  State& state = *state_;
  if (absl::Status usable = state.CheckUsable("EndBlob"); !usable.ok()) return usable;
  if (!state.in_blob) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: EndBlob without BeginBlob", state.path));
  }
  state.in_blob = false;
  state.current.checksum = XXH64_digest(state.hash);
  return state.current;
}

absl::StatusOr<BlobRange> PlanWriter::AddBlob(const void* data, size_t size) {
  if (absl::Status status = BeginBlob(); !status.ok()) return status;
  if (absl::Status status = Append(data, size); !status.ok()) return status;
  return EndBlob();
}

uint64_t PlanWriter::bytes_written() const { return state_->position; }

absl::Status PlanWriter::Finish(const PlanMeta& meta) {
  State& state = *state_;
  if (absl::Status usable = state.CheckUsable("Finish"); !usable.ok()) return usable;
  if (state.in_blob) {
    return state.Fail(absl::FailedPreconditionError(
        absl::StrFormat("%s: Finish while a blob is open (call EndBlob first)", state.path)));
  }
  const uint64_t data_offset = RoundUp(kHeaderSize, kBlobAlignment);
  // The meta starts on a blob boundary too: it keeps the data section [data_offset,
  // meta_offset) a whole number of alignment units and costs at most 255 bytes.
  const uint64_t meta_offset = RoundUp(state.position, kBlobAlignment);

  // Refuse to write a plan the reader would reject: a tensor pointing outside the blobs is a
  // bug in the caller, and finding it here names the tensor while the producer is at hand.
  for (int index = 0; index < meta.tensors_size(); ++index) {
    absl::Status status =
        internal::CheckTensor(state.path, index, meta.tensors(index), data_offset, meta_offset);
    if (!status.ok()) return state.Fail(status);
  }

  std::string meta_bytes;
  if (!meta.SerializeToString(&meta_bytes)) {
    return state.Fail(absl::InvalidArgumentError(
        absl::StrFormat("%s: cannot serialize the plan meta (%u bytes; protobuf's limit is 2 GiB)",
                        state.path, static_cast<uint64_t>(meta.ByteSizeLong()))));
  }
  if (absl::Status status = state.PadTo(meta_offset); !status.ok()) return status;
  if (absl::Status status = state.WriteAll(meta_bytes.data(), meta_bytes.size()); !status.ok()) {
    return status;
  }
  const uint64_t file_size = RoundUp(state.position, kFilePadding);
  if (absl::Status status = state.PadTo(file_size); !status.ok()) return status;

  PlanHeader header{};
  std::memcpy(header.magic, kPlanMagic, sizeof(header.magic));
  header.major = kPlanMajorVersion;
  header.minor = kPlanMinorVersion;
  header.meta_offset = meta_offset;
  header.meta_size = meta_bytes.size();
  header.data_offset = data_offset;
  header.file_size = file_size;
  header.meta_checksum = XXH64(meta_bytes.data(), meta_bytes.size(), 0);
  for (size_t done = 0; done < sizeof(header);) {
    const ssize_t written = pwrite(state.fd, reinterpret_cast<const char*>(&header) + done,
                                   sizeof(header) - done, static_cast<off_t>(done));
    if (written < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      return state.Fail(absl::InternalError(
          absl::StrFormat("%s: writing the header failed: %s", state.path, ErrnoText(error))));
    }
    done += static_cast<size_t>(written);
  }
  // fsync before rename: otherwise a crash can leave the new name pointing at a file whose
  // data never reached the disk.
  if (fsync(state.fd) != 0) {
    const int error = errno;
    return state.Fail(
        absl::InternalError(absl::StrFormat("%s: fsync failed: %s", state.path, ErrnoText(error))));
  }
  if (close(state.fd) != 0) {
    const int error = errno;
    state.fd = -1;
    return state.Fail(
        absl::InternalError(absl::StrFormat("%s: close failed: %s", state.path, ErrnoText(error))));
  }
  state.fd = -1;
  if (rename(state.temp_path.c_str(), state.path.c_str()) != 0) {
    const int error = errno;
    return state.Fail(absl::InternalError(absl::StrFormat(
        "%s: renaming %s into place failed: %s", state.path, state.temp_path, ErrnoText(error))));
  }
  state.done = true;
  UnregisterTemporaryFile(state.temp_path);
  // Persist the rename itself; best effort, the plan is complete either way.
  const int directory_fd =
      open(DirectoryOf(state.path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (directory_fd >= 0) {
    fsync(directory_fd);
    close(directory_fd);
  }
  return absl::OkStatus();
}

}  // namespace llmrt::plan
