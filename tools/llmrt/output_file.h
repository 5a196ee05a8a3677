// OutputFile: a file written whole or not at all. Bytes go to `path` + ".tmp-<pid>"; Commit()
// renames that into place; an OutputFile destroyed before Commit() (an error on the way)
// removes it, so no half-written output is ever left under `path`.
//
// Thread-safety: none. Not copyable.
#ifndef LLMRT_TOOLS_LLMRT_OUTPUT_FILE_H_
#define LLMRT_TOOLS_LLMRT_OUTPUT_FILE_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt {

class OutputFile {
 public:
  static absl::StatusOr<std::unique_ptr<OutputFile>> Create(const std::string& path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  absl::Status Write(const void* data, size_t size);
  absl::Status Commit();

 private:
  OutputFile() = default;
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_OUTPUT_FILE_H_
