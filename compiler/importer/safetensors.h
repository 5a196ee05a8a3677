// SafetensorsFile: one .safetensors file, mmapped read-only and validated.
//
// Format: an 8-byte little-endian header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// then the data; offsets are relative to the first byte after the JSON.
//
// Open() validates everything a consumer would otherwise trip over: the header length, the
// JSON, each entry's field types, the dtype (F32, F16 and BF16 are accepted; every other
// safetensors dtype is refused by name), that end - begin equals the shape's byte size, that
// the range lies inside the data, and that no two ranges overlap. Errors name the file and the
// tensor. The file may be any bytes: nothing crashes.
//
// Tensor data is NOT aligned: safetensors packs tensors back to back after a header of any
// length, so an f32 tensor may start at an odd address. Read through memcpy (or unaligned
// loads), never through a float*.
//
// Ownership: the object owns the mapping; `data` pointers live as long as it.
// Thread-safety: immutable after Open(); safe to read from any thread.
#ifndef LLMC_COMPILER_IMPORTER_SAFETENSORS_H_
#define LLMC_COMPILER_IMPORTER_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

struct SafetensorsTensor {
  std::string name;
  llmrt::plan::DType dtype = llmrt::plan::DTYPE_UNSPECIFIED;  // F32, F16 or BF16
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping; little-endian, possibly unaligned
  uint64_t size_bytes = 0;
};

class SafetensorsFile {
 public:
  // The JSON header is capped at 100 MB: a 400-billion-parameter checkpoint's header is
  // under 10 MB, and the cap stops a corrupt length from making us parse gigabytes.
  static constexpr uint64_t kMaxHeaderBytes = 100u * 1000 * 1000;

  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their data offsets.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const SafetensorsTensor* Find(const std::string& name) const;
  // The "__metadata__" object (string values only, as the format requires); empty if absent.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_by_name_;
  std::map<std::string, std::string> metadata_;
  const uint8_t* base_ = nullptr;
  size_t mapped_size_ = 0;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_IMPORTER_SAFETENSORS_H_
