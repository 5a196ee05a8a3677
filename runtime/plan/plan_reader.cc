#include "runtime/plan/plan_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <climits>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/plan/tensor_check.h"

namespace llmrt::plan {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case F32:
    case I32:
      return 4;
    case F16:
    case BF16:
      return 2;
    case I8:
    case U8:
    case E8M0:
      return 1;
    default:
      return 0;  // I4 and FP4_E2M1 have no whole-byte size: see DTypeBits
  }
}

int DTypeBits(DType dtype) {
  return dtype == I4 || dtype == FP4_E2M1 ? 4 : static_cast<int>(DTypeSize(dtype)) * 8;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case F32:
      return "f32";
    case F16:
      return "f16";
    case BF16:
      return "bf16";
    case I32:
      return "i32";
    case I8:
      return "i8";
    case U8:
      return "u8";
    case I4:
      return "i4";
    case FP4_E2M1:
      return "fp4_e2m1";
    case E8M0:
      return "e8m0";
    case DTYPE_UNSPECIFIED:
      return "unspecified";
    default:
      return "unknown";
  }
}

namespace internal {

absl::Status CheckTensor(const std::string& path, int index, const Tensor& tensor,
                         uint64_t data_begin, uint64_t data_end) {
  const std::string where = absl::StrFormat("%s: tensor %d (%s)", path, index, tensor.name());
  const int element_bits = DTypeBits(tensor.dtype());
  if (element_bits == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: dtype %d (%s) is not a storable dtype",
                                                      where, static_cast<int>(tensor.dtype()),
                                                      DTypeName(tensor.dtype())));
  }
  // Overflow-safe product: the file is at most 2^64 bytes, so any true product beyond that
  // is a corrupt shape.
  // Counted in elements, converted to bytes at the end (I4 packs two per byte).
  uint64_t expected_bytes = 1;
  for (const int64_t dim : tensor.shape()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: shape [%s] has a negative dimension", where, absl::StrJoin(tensor.shape(), ", ")));
    }
    if (dim != 0 && expected_bytes > UINT64_MAX / static_cast<uint64_t>(dim)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: shape [%s] overflows 64 bits", where,
                                                        absl::StrJoin(tensor.shape(), ", ")));
    }
    expected_bytes *= static_cast<uint64_t>(dim);
  }
  if (element_bits == 4) {
    if (tensor.shape_size() == 0 || tensor.shape(tensor.shape_size() - 1) % 2 != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: shape [%s] of %s needs an even last dimension", where,
                          absl::StrJoin(tensor.shape(), ", "), DTypeName(tensor.dtype())));
    }
    expected_bytes /= 2;
  } else if (expected_bytes > UINT64_MAX / static_cast<uint64_t>(element_bits / 8)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: shape [%s] overflows 64 bits", where,
                                                      absl::StrJoin(tensor.shape(), ", ")));
  } else {
    expected_bytes *= static_cast<uint64_t>(element_bits / 8);
  }
  if (tensor.size_bytes() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: size_bytes is %u, expected %u for shape [%s] of %s", where, tensor.size_bytes(),
        expected_bytes, absl::StrJoin(tensor.shape(), ", "), DTypeName(tensor.dtype())));
  }
  if (tensor.offset() % kBlobAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: blob offset %u is not a multiple of %u",
                                                      where, tensor.offset(), kBlobAlignment));
  }
  if (tensor.offset() < data_begin || tensor.offset() > data_end ||
      tensor.size_bytes() > data_end - tensor.offset()) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: blob [%u, %u) lies outside the data section [%u, %u)", where, tensor.offset(),
        tensor.offset() + tensor.size_bytes(), data_begin, data_end));
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

// Unmaps on every early return of Open.
struct Mapping {
  const uint8_t* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base != nullptr) munmap(const_cast<uint8_t*>(base), size);
  }
  void Release() { base = nullptr; }
};

}  // namespace

Plan::~Plan() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), mapped_size_);
}

const uint8_t* Plan::blob(int tensor_index) const {
  if (tensor_index < 0 || tensor_index >= meta_.tensors_size()) return nullptr;
  return base_ + meta_.tensors(tensor_index).offset();
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::Open(const std::string& path,
                                                 const PlanOpenOptions& options) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the S_ISREG check below refuses it.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrFormat("%s: cannot open: %s", path, std::strerror(error));
    if (error == ENOENT) return absl::NotFoundError(message);
    return absl::PermissionDeniedError(message);
  }
  struct stat file_stat;
  if (fstat(fd, &file_stat) != 0) {
    const int error = errno;
    close(fd);
    return absl::InternalError(absl::StrFormat("%s: fstat failed: %s", path, std::strerror(error)));
  }
  if (!S_ISREG(file_stat.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  const uint64_t actual_size = static_cast<uint64_t>(file_stat.st_size);
  if (actual_size < kHeaderSize) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("not a plan file: %s: %u bytes, shorter than the %u-byte header", path,
                        actual_size, kHeaderSize));
  }
  Mapping mapping;
  void* address = mmap(nullptr, actual_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_error = errno;
  close(fd);  // the mapping keeps the file alive
  if (address == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: mmap of %u bytes failed: %s", path,
                                                        actual_size, std::strerror(mmap_error)));
  }
  // MADV_WILLNEED, not MAP_POPULATE: the kernel starts reading the whole file into the page
  // cache in large requests and returns at once; the first step then maps the pages as it
  // faults on them. Not MADV_HUGEPAGE: it makes the kernel read a cold plan into 2 MiB folios
  // mapped 2 MiB at a time (smaps FilePmdMapped 2.5 of 2.5 GB, ext4, Linux 6.18), but the
  // Mixtral-shape f16 plan (2.5 GB) then reached its first token after 2.1 s cold against
  // 0.7 s, and decoded at the same speed (42-44 tok/s, 1 thread, 2026-11-25). Measured here (1.2 GB
  // plan, evicted with POSIX_FADV_DONTNEED, then one read per 4 KiB page, 2026-11-21, noisy
  // machine): cold, WILLNEED + faults 1.2-1.5 s wall and 35 ms CPU; MAP_POPULATE returned after 1.6
  // s having mapped only what was already cached, and the touches then took another 6-13 s of
  // small-readahead faults; plain faults 31 s. Warm (2.2 GB plan): mapping and touching cost
  // ~58 ms CPU by faults against ~80 ms with MAP_POPULATE. Advice is only advice: a failure
  // changes nothing but speed.
  madvise(address, actual_size, MADV_WILLNEED);
  mapping.base = static_cast<const uint8_t*>(address);
  mapping.size = actual_size;

  auto plan = std::unique_ptr<Plan>(new Plan());
  plan->path_ = path;
  PlanHeader& header = plan->header_;
  std::memcpy(&header, mapping.base, sizeof(header));
  if (std::memcmp(header.magic, kPlanMagic, sizeof(kPlanMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("not a plan file: %s: bad magic", path));
  }
  if (header.major != kPlanMajorVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: plan format version %d.%d is not supported by this llmrt (supports %d.x)", path,
        header.major, header.minor, kPlanMajorVersion));
  }
  if (header.file_size != actual_size) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header says the file is %u bytes, it is %u bytes%s", path, header.file_size,
        actual_size, actual_size < header.file_size ? "; file truncated?" : ""));
  }
  if (header.data_offset < kHeaderSize || header.data_offset % kBlobAlignment != 0 ||
      header.data_offset > header.meta_offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header's data_offset %u must be a multiple of %u, at least %u and at most "
        "meta_offset %u",
        path, header.data_offset, kBlobAlignment, kHeaderSize, header.meta_offset));
  }
  if (header.meta_offset > actual_size || header.meta_size > actual_size - header.meta_offset) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header's meta range [%u, +%u) lies beyond the end of the file (%u bytes)", path,
        header.meta_offset, header.meta_size, actual_size));
  }
  // protobuf parses at most INT_MAX bytes.
  if (header.meta_size > static_cast<uint64_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: meta_size %u exceeds protobuf's 2 GiB message limit", path, header.meta_size));
  }
  const uint8_t* meta_bytes = mapping.base + header.meta_offset;
  const uint64_t meta_checksum = XXH64(meta_bytes, header.meta_size, 0);
  if (meta_checksum != header.meta_checksum) {
    return absl::DataLossError(
        absl::StrFormat("%s: meta checksum mismatch: header says 0x%016x, meta hashes to 0x%016x",
                        path, header.meta_checksum, meta_checksum));
  }
  if (!plan->meta_.ParseFromArray(meta_bytes, static_cast<int>(header.meta_size))) {
    return absl::DataLossError(
        absl::StrFormat("%s: the meta (%u bytes at offset %u) is not a valid PlanMeta", path,
                        header.meta_size, header.meta_offset));
  }
  for (int index = 0; index < plan->meta_.tensors_size(); ++index) {
    absl::Status status = internal::CheckTensor(path, index, plan->meta_.tensors(index),
                                                header.data_offset, header.meta_offset);
    if (!status.ok()) return status;
  }
  if (options.verify_blob_checksums) {
    for (int index = 0; index < plan->meta_.tensors_size(); ++index) {
      const Tensor& tensor = plan->meta_.tensors(index);
      const uint64_t checksum = XXH64(mapping.base + tensor.offset(), tensor.size_bytes(), 0);
      if (checksum != tensor.checksum()) {
        return absl::DataLossError(absl::StrFormat(
            "%s: tensor %d (%s): blob checksum mismatch: meta says 0x%016x, blob hashes to "
            "0x%016x",
            path, index, tensor.name(), tensor.checksum(), checksum));
      }
    }
  }
  plan->base_ = mapping.base;
  plan->mapped_size_ = mapping.size;
  mapping.Release();
  return plan;
}

}  // namespace llmrt::plan
