#include "compiler/importer/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/importer/json_util.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using ::llmc::importer_internal::DescribeJson;
using llmrt::plan::DType;
using Json = nlohmann::json;

// Every dtype name the safetensors format defines, so an unsupported one is reported as
// "not supported" rather than "unknown".
constexpr const char* kOtherSafetensorsDTypes[] = {
    "BOOL",    "I8",      "I16",     "U16",     "U32",     "I64", "U64", "F64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};

struct DTypeInfo {
  DType dtype;
  uint64_t element_size;
};

absl::StatusOr<DTypeInfo> ParseDType(const std::string& where, const Json& value) {
  if (!value.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: \"dtype\" must be a string, found %s", where, DescribeJson(value)));
  }
  const std::string name = value.get<std::string>();
  if (name == "F32") return DTypeInfo{llmrt::plan::F32, 4};
  if (name == "F16") return DTypeInfo{llmrt::plan::F16, 2};
  if (name == "BF16") return DTypeInfo{llmrt::plan::BF16, 2};
  // GPTQ/AWQ checkpoints: packed 4-bit codes (qweight, qzeros) and g_idx.
  if (name == "I32") return DTypeInfo{llmrt::plan::I32, 4};
  // MXFP4 checkpoints (gpt-oss): packed E2M1 codes (*_blocks) and E8M0 exponents (*_scales).
  if (name == "U8") return DTypeInfo{llmrt::plan::U8, 1};
  for (const char* other : kOtherSafetensorsDTypes) {
    if (name == other) {
      return absl::UnimplementedError(absl::StrFormat(
          "%s: dtype %s is not supported (supported: F32, F16, BF16, I32, U8)", where, name));
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: unknown dtype \"%s\" (supported: F32, F16, BF16, I32, U8)", where, name));
}

// A JSON value as a non-negative integer, or an error naming `field`.
absl::StatusOr<uint64_t> NonNegativeInteger(const std::string& where, const char* field,
                                            const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: \"%s\" must hold non-negative integers, found %s", where, field, DescribeJson(value)));
}

}  // namespace

SafetensorsFile::~SafetensorsFile() {
  if (base_ != nullptr) munmap(const_cast<uint8_t*>(base_), mapped_size_);
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  const auto found = index_by_name_.find(name);
  return found == index_by_name_.end() ? nullptr : &tensors_[found->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  auto file = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  file->path_ = path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrFormat("%s: cannot open: %s", path, std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat file_stat;
  if (fstat(fd, &file_stat) != 0 || !S_ISREG(file_stat.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  const uint64_t file_size = static_cast<uint64_t>(file_stat.st_size);
  if (file_size < 8) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %u bytes, too short for a safetensors file (8-byte header length); file "
        "truncated?",
        path, file_size));
  }
  void* address = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int mmap_error = errno;
  close(fd);
  if (address == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrFormat("%s: mmap of %u bytes failed: %s", path,
                                                        file_size, std::strerror(mmap_error)));
  }
  file->base_ = static_cast<const uint8_t*>(address);
  file->mapped_size_ = file_size;

  uint64_t header_size = 0;
  for (int byte = 7; byte >= 0; --byte) header_size = (header_size << 8) | file->base_[byte];
  if (header_size > file_size - 8) {
    return absl::DataLossError(absl::StrFormat(
        "%s: header length %u exceeds the %u bytes after the length field; file truncated or "
        "not safetensors?",
        path, header_size, file_size - 8));
  }
  if (header_size > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header length %u exceeds the %u-byte limit; not a safetensors file?",
                        path, header_size, kMaxHeaderBytes));
  }
  const char* header_begin = reinterpret_cast<const char*>(file->base_ + 8);
  absl::StatusOr<Json> parsed =
      importer_internal::ParseJson(std::string_view(header_begin, header_size), path + " (header)");
  if (!parsed.ok()) return parsed.status();
  const Json header = *std::move(parsed);
  if (!header.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header must be a JSON object, found a %s", path, header.type_name()));
  }

  const uint8_t* data_begin = file->base_ + 8 + header_size;
  const uint64_t data_size = file_size - 8 - header_size;
  struct Range {
    uint64_t begin;
    uint64_t end;
    size_t tensor_index;
  };
  std::vector<Range> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (entry.is_null()) continue;
      if (!entry.is_object()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: \"__metadata__\" must be an object, found %s", path, entry.type_name()));
      }
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: \"__metadata__\" entry \"%s\" must be a string, found %s", path,
                              key, DescribeJson(value)));
        }
        file->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = absl::StrFormat("%s: tensor %s", path, name);
    if (!entry.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: entry must be an object, found %s", where, entry.type_name()));
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(field)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: missing field \"%s\"", where, field));
      }
    }
    absl::StatusOr<DTypeInfo> dtype = ParseDType(where, entry["dtype"]);
    if (!dtype.ok()) return dtype.status();

    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype = dtype->dtype;
    const Json& shape = entry["shape"];
    if (!shape.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: \"shape\" must be an array, found %s", where, DescribeJson(shape)));
    }
    // Byte size of the shape, overflow-checked: a product past 2^64 cannot fit in any file.
    uint64_t expected_bytes = dtype->element_size;
    bool overflow = false;
    for (const Json& dim_value : shape) {
      absl::StatusOr<uint64_t> dim = NonNegativeInteger(where, "shape", dim_value);
      if (!dim.ok()) return dim.status();
      if (*dim > static_cast<uint64_t>(INT64_MAX)) overflow = true;
      tensor.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim != 0 && expected_bytes > UINT64_MAX / *dim) overflow = true;
      expected_bytes *= *dim;
    }
    if (overflow) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: shape [%s] is too large (its byte size overflows 64 bits)", where,
                          absl::StrJoin(tensor.shape, ", ")));
    }
    const Json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: \"data_offsets\" must be [begin, end], found %s", where, DescribeJson(offsets)));
    }
    absl::StatusOr<uint64_t> begin = NonNegativeInteger(where, "data_offsets", offsets[0]);
    if (!begin.ok()) return begin.status();
    absl::StatusOr<uint64_t> end = NonNegativeInteger(where, "data_offsets", offsets[1]);
    if (!end.ok()) return end.status();
    if (*end < *begin) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: data_offsets [%u, %u] end before they begin", where, *begin, *end));
    }
    if (*end - *begin != expected_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: data_offsets [%u, %u] span %u bytes, but shape [%s] of %s needs %u",
                          where, *begin, *end, *end - *begin, absl::StrJoin(tensor.shape, ", "),
                          entry["dtype"].get<std::string>(), expected_bytes));
    }
    if (*end > data_size) {
      return absl::DataLossError(absl::StrFormat(
          "%s: data_offsets [%u, %u] lie beyond the end of the data (%u bytes); file truncated?",
          where, *begin, *end, data_size));
    }
    tensor.data = data_begin + *begin;
    tensor.size_bytes = expected_bytes;
    ranges.push_back(Range{*begin, *end, file->tensors_.size()});
    file->tensors_.push_back(std::move(tensor));
  }

  // Overlap check on ranges sorted by begin; empty tensors occupy no bytes and cannot overlap.
  std::sort(ranges.begin(), ranges.end(), [](const Range& left, const Range& right) {
    return left.begin != right.begin ? left.begin < right.begin : left.end < right.end;
  });
  const Range* previous = nullptr;
  for (const Range& range : ranges) {
    if (range.begin == range.end) continue;
    if (previous != nullptr && range.begin < previous->end) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tensors %s [%u, %u] and %s [%u, %u] overlap", path,
          file->tensors_[previous->tensor_index].name, previous->begin, previous->end,
          file->tensors_[range.tensor_index].name, range.begin, range.end));
    }
    if (previous == nullptr || range.end > previous->end) previous = &range;
  }

  // Reorder by offset: consumers that stream a whole file then read it front to back.
  std::vector<SafetensorsTensor> ordered;
  ordered.reserve(ranges.size());
  for (const Range& range : ranges)
    ordered.push_back(std::move(file->tensors_[range.tensor_index]));
  file->tensors_ = std::move(ordered);
  for (size_t index = 0; index < file->tensors_.size(); ++index) {
    file->index_by_name_[file->tensors_[index].name] = index;
  }
  return file;
}

}  // namespace llmc
