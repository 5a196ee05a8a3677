// llmc: the ahead-of-time compiler's command line.
//
//   llmc compile MODEL_DIR -o PLAN [--dtype f32|f16|bf16] [--dump-ir=DIR] [--quiet]
//
// Exit codes: 0 success, 1 compile error (message on stderr, no output file), 2 usage error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "compiler/pipeline/compile.h"

namespace {

constexpr char kUsage[] =
    "usage: llmc compile MODEL_DIR -o PLAN [--dtype f32|f16|bf16] [--dump-ir=DIR] [--quiet]\n"
    "\n"
    "  MODEL_DIR     a HuggingFace model directory (config.json, *.safetensors, tokenizer.json)\n"
    "  -o PLAN       the plan file to write (written to a temporary file, renamed on success)\n"
    "  --dtype T     weight dtype of the plan (default: the checkpoint's)\n"
    "  --dump-ir=DIR write the IR after import and after each pass into DIR\n"
    "  --quiet       no progress output\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmc: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

// On a terminal: one live line per stage, redrawn with tensors done/total and MB/s.
// Elsewhere (logs, CI): one line per finished stage, so logs stay readable.
class ConsoleProgress : public llmc::ProgressSink {
 public:
  ConsoleProgress(bool quiet, bool interactive) : quiet_(quiet), interactive_(interactive) {}

  void BeginStage(const std::string& name) override {
    stage_ = name;
    start_ = std::chrono::steady_clock::now();
    last_draw_ = start_;
    detail_.clear();
    if (!quiet_ && interactive_) Draw("");
  }

  void TensorProgress(int64_t done, int64_t total, uint64_t bytes) override {
    auto now = std::chrono::steady_clock::now();
    double seconds = std::chrono::duration<double>(now - start_).count();
    double mb_per_s = seconds > 0 ? bytes / 1e6 / seconds : 0.0;
    detail_ = absl::StrFormat("%d/%d tensors, %.1f MB, %.0f MB/s", done, total, bytes / 1e6,
                              mb_per_s);
    // Redraw at most 10 times a second: the terminal is slower than small tensors.
    if (!quiet_ && interactive_ &&
        (done == total || now - last_draw_ > std::chrono::milliseconds(100))) {
      last_draw_ = now;
      Draw(detail_);
    }
  }

  void EndStage() override {
    if (quiet_) return;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::string line = absl::StrFormat("llmc: %-10s done in %.2f s", stage_, seconds);
    if (!detail_.empty()) line += " (" + detail_ + ")";
    if (interactive_) {
      std::fprintf(stderr, "\r\033[K%s\n", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }

 private:
  void Draw(const std::string& detail) {
    std::fprintf(stderr, "\r\033[Kllmc: %-10s %s", stage_.c_str(), detail.c_str());
    std::fflush(stderr);
  }

  bool quiet_;
  bool interactive_;
  std::string stage_;
  std::string detail_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

int Compile(const std::vector<std::string>& args) {
  llmc::CompileOptions options;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // The argument after a flag, or null when the flag is last.
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (arg == "-o" || arg == "--output") {
      const std::string* path = value();
      if (!path) return UsageError(arg + " needs a file name");
      options.output_path = *path;
    } else if (arg == "--dtype" || arg.rfind("--dtype=", 0) == 0) {
      std::string dtype;
      if (arg == "--dtype") {
        const std::string* next = value();
        if (!next) return UsageError("--dtype needs one of f32, f16, bf16");
        dtype = *next;
      } else {
        dtype = arg.substr(strlen("--dtype="));
      }
      if (dtype == "f32") {
        options.weight_dtype = llmrt::plan::F32;
      } else if (dtype == "f16") {
        options.weight_dtype = llmrt::plan::F16;
      } else if (dtype == "bf16") {
        options.weight_dtype = llmrt::plan::BF16;
      } else {
        return UsageError("--dtype: expected f32, f16 or bf16, found \"" + dtype + "\"");
      }
    } else if (arg.rfind("--dump-ir=", 0) == 0) {
      options.dump_ir_dir = arg.substr(strlen("--dump-ir="));
    } else if (arg == "--dump-ir") {
      const std::string* dir = value();
      if (!dir) return UsageError("--dump-ir needs a directory");
      options.dump_ir_dir = *dir;
    } else if (arg == "--quiet" || arg == "-q") {
      quiet = true;
    } else if (!arg.empty() && arg[0] == '-') {
      return UsageError("unknown option " + arg);
    } else if (options.model_dir.empty()) {
      options.model_dir = arg;
    } else {
      return UsageError("unexpected argument " + arg);
    }
  }
  if (options.model_dir.empty()) return UsageError("missing MODEL_DIR");
  if (options.output_path.empty()) return UsageError("missing -o PLAN");

  ConsoleProgress progress(quiet, isatty(STDERR_FILENO) != 0);
  absl::Status status = llmc::Compile(options, &progress);
  if (!status.ok()) {
    std::fprintf(stderr, "llmc: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "llmc: wrote %s\n", options.output_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return UsageError("missing command");
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "compile") return Compile(args);
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  return UsageError("unknown command \"" + command + "\"");
}
