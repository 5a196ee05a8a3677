#include "tools/llmrt/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt {

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  std::unique_ptr<OutputFile> file(new OutputFile());
  file->path_ = path;
  file->temp_path_ = absl::StrCat(path, ".tmp-", static_cast<long>(getpid()));
  file->file_ = std::fopen(file->temp_path_.c_str(), "wb");
  if (file->file_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create: %s", file->temp_path_, std::strerror(errno)));
  }
  return file;
}

OutputFile::~OutputFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

absl::Status OutputFile::Write(const void* data, size_t size) {
  if (file_ == nullptr || std::fwrite(data, 1, size, file_) != size) {
    return absl::DataLossError(
        absl::StrFormat("%s: writing failed: %s", temp_path_, std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status OutputFile::Commit() {
  std::FILE* file = file_;
  file_ = nullptr;
  if (file == nullptr || std::fclose(file) != 0) {
    const int error = errno;
    std::remove(temp_path_.c_str());
    return absl::DataLossError(
        absl::StrFormat("%s: writing failed: %s", temp_path_, std::strerror(error)));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = errno;
    std::remove(temp_path_.c_str());
    return absl::PermissionDeniedError(absl::StrFormat("%s: cannot rename %s into place: %s", path_,
                                                       temp_path_, std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace llmrt
