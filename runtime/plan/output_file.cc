#include "runtime/plan/output_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Temporary files in progress, for the signal handler: fixed storage, since a handler may
// neither allocate nor lock. A slot is claimed by a compare-and-swap on `used`.
constexpr int kSlots = 8;
struct Slot {
  std::atomic<bool> used{false};
  std::atomic<bool> ready{false};
  char path[PATH_MAX];
};
Slot slots[kSlots];

void RemoveAndDie(int signal_number) {
  for (Slot& slot : slots) {
    if (slot.ready.load()) unlink(slot.path);
  }
  std::signal(signal_number, SIG_DFL);
  raise(signal_number);
}

}  // namespace

absl::StatusOr<std::string> OutputTarget(const std::string& path) {
  struct stat link_info;
  if (lstat(path.c_str(), &link_info) != 0) return path;  // new (or unreachable: open says why)
  if (S_ISREG(link_info.st_mode)) return path;
  struct stat info;
  if (S_ISLNK(link_info.st_mode)) {
    if (stat(path.c_str(), &info) != 0) {
      return absl::NotFoundError(
          absl::StrFormat("%s: a symbolic link to a missing file; name the file itself", path));
    }
    if (S_ISREG(info.st_mode)) {
      char resolved[PATH_MAX];
      if (realpath(path.c_str(), resolved) == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: cannot resolve the symbolic link: %s", path, std::strerror(errno)));
      }
      return std::string(resolved);
    }
  } else {
    info = link_info;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s is %s, not a regular file: outputs are written to a temporary file and renamed onto "
      "their name, which would replace it; name a file",
      path, FileKind(info.st_mode)));
}

void RemoveTemporaryFilesOnSignals() {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = RemoveAndDie;
    sigemptyset(&action.sa_mask);
    sigaction(signal_number, &action, nullptr);
  }
}

void RegisterTemporaryFile(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  for (Slot& slot : slots) {
    bool expected = false;
    if (!slot.used.compare_exchange_strong(expected, true)) continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.ready.store(true);
    return;
  }
}

void UnregisterTemporaryFile(const std::string& path) {
  for (Slot& slot : slots) {
    if (slot.ready.load() && path == slot.path) {
      slot.ready.store(false);
      slot.used.store(false);
      return;
    }
  }
}

absl::StatusOr<std::unique_ptr<OutputFile>> OutputFile::Create(const std::string& path) {
  absl::StatusOr<std::string> target = OutputTarget(path);
  if (!target.ok()) return target.status();
  std::unique_ptr<OutputFile> file(new OutputFile());
  file->path_ = *std::move(target);
  file->temp_path_ = absl::StrCat(file->path_, ".tmp-", static_cast<long>(getpid()));
  file->file_ = std::fopen(file->temp_path_.c_str(), "wb");
  if (file->file_ == nullptr) {
    const int error = errno;
    const std::string message =
        absl::StrFormat("%s: cannot create: %s", file->temp_path_, std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  RegisterTemporaryFile(file->temp_path_);
  return file;
}

OutputFile::~OutputFile() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
    UnregisterTemporaryFile(temp_path_);
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
  const bool closed = file != nullptr && std::fclose(file) == 0;
  const int close_error = errno;
  if (!closed || std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int error = closed ? errno : close_error;
    std::remove(temp_path_.c_str());
    UnregisterTemporaryFile(temp_path_);
    return closed ? absl::PermissionDeniedError(
                        absl::StrFormat("%s: cannot rename %s into place: %s", path_, temp_path_,
                                        std::strerror(error)))
                  : absl::DataLossError(absl::StrFormat("%s: writing failed: %s", temp_path_,
                                                        std::strerror(error)));
  }
  UnregisterTemporaryFile(temp_path_);
  return absl::OkStatus();
}

}  // namespace llmrt
