// Files written whole or not at all: the bytes go to `<target>.tmp-<pid>`, which is renamed
// onto the target once complete, so no half-written output is ever left under the name the
// user gave. What the target is, for the path a user named (OutputTarget):
//   - a new path, or an existing regular file: that path;
//   - a symbolic link: the file it points to (the link stays, as with `cp` or `>`), so a plan
//     directory of links keeps them;
//   - anything else that exists (a directory, /dev/null, a FIFO, a socket): an error naming
//     what it is. A rename would replace a device node or a pipe with a plain file, which as
//     root destroys /dev/null for everyone.
// A temporary file in progress is removed when the process dies of SIGINT, SIGTERM or SIGHUP
// once the program called RemoveTemporaryFilesOnSignals() (the llmc and llmrt tools do).
//
// Thread-safety: OutputTarget and RemoveTemporaryFilesOnSignals are thread-safe; an
// OutputFile is used by one thread. Not copyable.
#ifndef LLMRT_PLAN_OUTPUT_FILE_H_
#define LLMRT_PLAN_OUTPUT_FILE_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt {

// The file to write for the user's `path` (rules above); InvalidArgument naming the path and
// what it is otherwise, NotFound for a link to a missing file.
absl::StatusOr<std::string> OutputTarget(const std::string& path);

// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove the temporary files in progress
// and then die of the signal as before. Call once, early in main.
void RemoveTemporaryFilesOnSignals();

// Registers / unregisters a temporary file for that removal (PlanWriter and OutputFile do).
// At most a few at once; a path beyond the registry's room is not removed on a signal.
void RegisterTemporaryFile(const std::string& path);
void UnregisterTemporaryFile(const std::string& path);

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
  std::string path_;  // the target (OutputTarget)
  std::string temp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace llmrt

#endif  // LLMRT_PLAN_OUTPUT_FILE_H_
