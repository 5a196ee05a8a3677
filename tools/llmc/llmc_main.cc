// llmc: the ahead-of-time compiler's command line.
//
//   llmc compile MODEL_DIR -o PLAN [--dtype f32|f16|bf16] [--target LIST] [--dump-ir=DIR]
//                [--quant int8|int4|mxfp4 [--group-size N] [--scheme S] [--awq] [--gptq]
//                 [--calib FILE] [--keep-float PATTERNS] [--lm-head-quant int8|int4]]
//                [--kv-cache T] [--quiet]
//                [--max-memory SIZE [--quant auto]]
//   llmc synth --preset NAME|CONFIG_JSON -o DIR [--dtype f16|bf16|f32] [--seed S]
//              [--max-shard-size SIZE]
//
// Exit codes: 0 success, 1 compile error (message on stderr, no output file), 2 usage error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "codegen/cuda/CudaTarget.h"
#include "compiler/arch/family.h"
#include "compiler/pipeline/compile.h"
#include "compiler/pipeline/memory_budget.h"
#include "compiler/synth/synth.h"
#include "runtime/plan/output_file.h"

namespace {

constexpr char kUsage[] =
    "usage: llmc compile MODEL_DIR -o PLAN [--dtype f32|f16|bf16] [--target LIST] [--dump-ir=DIR]\n"
    "                    [--quant int8|int4|mxfp4 [--group-size N] [--scheme S] [--awq]\n"
    "                     [--gptq] [--calib FILE] [--keep-float LIST] [--lm-head-quant "
    "int8|int4]]\n"
    "                    [--kv-cache T] [--quiet]\n"
    "                    [--max-memory SIZE [--quant auto]]\n"
    "\n"
    "  MODEL_DIR     a HuggingFace model directory (config.json, *.safetensors, tokenizer.json)\n"
    "  -o PLAN       the plan file to write (written to a temporary file, renamed on success)\n"
    "  --dtype T     weight dtype of the plan (default: the checkpoint's)\n"
    "  --target LIST what the plan carries kernels for (default: cpu), e.g.\n"
    "                cpu,cuda:sm_80,sm_86,sm_89,sm_90 (a CUBIN per SM, PTX for the newest)\n"
    "  --dump-ir=DIR write the IR after import and after each pass into DIR\n"
    "  --chat-template FILE  use this Jinja file as the default chat template instead of\n"
    "                        chat_template.jinja or tokenizer_config.json's (named templates,\n"
    "                        e.g. tool_use, stay; docs/chat-templates.md)\n"
    "  --quant int8|int4     store matmul weights as integer codes with f16 scales\n"
    "                        (embeddings, norms and lm_head stay float; docs/quantization.md)\n"
    "  --quant mxfp4         OCP MXFP4: E2M1 codes with one power-of-two (E8M0) scale per 32\n"
    "                        columns (group size 32, symmetric; no --awq / --gptq)\n"
    "  --group-size N        input columns per scale: 32, 64 or 128 (default: int8 one\n"
    "                        scale per output channel, int4 32)\n"
    "  --scheme S            symmetric (default) or asymmetric (int4: a zero point per group)\n"
    "  --awq                 activation-aware scales searched on a calibration text\n"
    "  --gptq                error feedback (GPTQ) from the calibration text; with --awq, after\n"
    "                        the scaling\n"
    "  --calib FILE          calibration text for --awq / --gptq (default: built-in English)\n"
    "  --keep-float LIST     comma-separated name substrings whose weights stay float\n"
    "  --lm-head-quant F     the lm_head's own format (default: float): int8 (one scale per\n"
    "                        output channel) or int4 (--group-size, --scheme); round-to-\n"
    "                        nearest even with --awq / --gptq; a tied lm_head gets its own\n"
    "                        quantized copy of the embedding table\n"
    "  --kv-cache T          KV cache dtype: f32, f16, bf16 or int8 (default: the weights')\n"
    "  --max-memory SIZE     size the plan for a resident-memory budget (4G, 512M; binary units):\n"
    "                        the KV pool and maximum context fill what the weights and the\n"
    "                        workspace leave; llmrt refuses to start with less memory available\n"
    "  --quant auto          with --max-memory: the widest of f16, int8, int4 that fits\n"
    "  --quiet       no progress output\n"
    "\n"
    "usage: llmc synth --preset NAME|CONFIG_JSON -o DIR [--dtype f16|bf16|f32] [--seed S]\n"
    "                  [--max-shard-size SIZE]\n"
    "\n"
    "  writes a random-weight HuggingFace checkpoint (config, safetensors, tokenizer)\n"
    "  --preset      a preset (below) or a config.json to take the shapes from\n"
    "  -o DIR        the directory to create (must not exist; written via a temporary one)\n"
    "  --dtype T     weight dtype (default f16)\n"
    "  --seed S      random seed (default 0); the same seed gives the same weights\n"
    "  --max-shard-size SIZE  bytes per safetensors shard, e.g. 5GB (default), 500MB\n";

// kUsage, the synth presets and the architectures the registry (compiler/arch/family.h) knows.
std::string Usage() {
  return std::string(kUsage) + "\npresets: " + absl::StrJoin(llmc::SynthPresetNames(), ", ") +
         "\narchitectures: " + llmc::SupportedArchitectures() + "\n";
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmc: %s\n\n%s", message.c_str(), Usage().c_str());
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
    detail_ =
        absl::StrFormat("%d/%d tensors, %.1f MB, %.0f MB/s", done, total, bytes / 1e6, mb_per_s);
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

// "cpu,cuda:sm_80,sm_86": items are "cpu", "cuda:sm_XY", or "sm_XY" continuing the CUDA list.
// Returns an error message, or "" on success.
std::string ParseTargets(const std::string& list, llmc::CompileOptions& options) {
  options.target_cpu = false;
  options.cuda_sm_versions.clear();
  bool in_cuda = false;
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    std::string target(item);
    if (target == "cpu") {
      options.target_cpu = true;
      in_cuda = false;
      continue;
    }
    if (target.rfind("cuda:", 0) == 0) {
      target = target.substr(strlen("cuda:"));
      in_cuda = true;
    } else if (!in_cuda) {
      return "unknown target \"" + target + "\" (expected cpu or cuda:sm_XY)";
    }
    absl::StatusOr<int> version = llmc::cuda::parseSmVersion(target);
    if (!version.ok()) return std::string(version.status().message());
    options.cuda_sm_versions.push_back(*version);
  }
  if (!options.target_cpu && options.cuda_sm_versions.empty()) {
    return "no target in \"" + list + "\"";
  }
  return "";
}

int Compile(const std::vector<std::string>& args) {
  llmc::CompileOptions options;
  llmc::QuantizeOptions quantize;
  bool quant_requested = false;
  std::string quant_modifier;  // the last --quant-only flag seen, for the usage error
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
    } else if (arg == "--target" || arg.rfind("--target=", 0) == 0) {
      std::string list;
      if (arg == "--target") {
        const std::string* next = value();
        if (!next) return UsageError("--target needs a list such as cpu,cuda:sm_80,sm_90");
        list = *next;
      } else {
        list = arg.substr(strlen("--target="));
      }
      if (std::string error = ParseTargets(list, options); !error.empty()) {
        return UsageError("--target: " + error);
      }
    } else if (arg == "--chat-template") {
      const std::string* path = value();
      if (!path) return UsageError("--chat-template needs a Jinja file");
      options.chat_template_path = *path;
    } else if (arg.rfind("--dump-ir=", 0) == 0) {
      options.dump_ir_dir = arg.substr(strlen("--dump-ir="));
    } else if (arg == "--dump-ir") {
      const std::string* dir = value();
      if (!dir) return UsageError("--dump-ir needs a directory");
      options.dump_ir_dir = *dir;
    } else if (arg == "--quant") {
      const std::string* kind = value();
      if (!kind || (*kind != "int8" && *kind != "int4" && *kind != "mxfp4" && *kind != "auto")) {
        return UsageError("--quant: expected int8, int4, mxfp4 or auto");
      }
      if (*kind == "auto") {
        options.quant_auto = true;
        continue;
      }
      quantize.bits = *kind == "int8" ? 8 : 4;
      quantize.mxfp4 = *kind == "mxfp4";
      quant_requested = true;
    } else if (arg == "--max-memory") {
      const std::string* size = value();
      if (!size) return UsageError("--max-memory needs a size such as 4G");
      absl::StatusOr<int64_t> bytes = llmc::ParseMemorySize(*size);
      if (!bytes.ok()) return UsageError(std::string(bytes.status().message()));
      options.max_memory_bytes = *bytes;
    } else if (arg == "--group-size") {
      const std::string* size = value();
      if (!size || !absl::SimpleAtoi(*size, &quantize.group_size) ||
          (quantize.group_size != 32 && quantize.group_size != 64 && quantize.group_size != 128)) {
        return UsageError("--group-size: expected 32, 64 or 128, found " +
                          (size ? "'" + *size + "'" : std::string("nothing")));
      }
      quant_modifier = arg;
    } else if (arg == "--scheme") {
      const std::string* scheme = value();
      if (!scheme || (*scheme != "symmetric" && *scheme != "asymmetric")) {
        return UsageError("--scheme: expected symmetric or asymmetric");
      }
      quantize.asymmetric = *scheme == "asymmetric";
      quant_modifier = arg;
    } else if (arg == "--awq") {
      quantize.awq = true;
      quant_modifier = arg;
    } else if (arg == "--gptq") {
      quantize.gptq = true;
      quant_modifier = arg;
    } else if (arg == "--calib") {
      const std::string* path = value();
      if (!path) return UsageError("--calib needs a text file");
      quantize.calib_path = *path;
      quant_modifier = arg;
    } else if (arg == "--keep-float") {
      const std::string* list = value();
      if (!list) return UsageError("--keep-float needs a comma-separated list of name parts");
      for (absl::string_view part : absl::StrSplit(*list, ',', absl::SkipEmpty())) {
        quantize.keep_float.emplace_back(part);
      }
      quant_modifier = arg;
    } else if (arg == "--lm-head-quant" || arg.rfind("--lm-head-quant=", 0) == 0) {
      std::string format;
      if (arg == "--lm-head-quant") {
        const std::string* next = value();
        if (!next) return UsageError("--lm-head-quant needs int8 or int4");
        format = *next;
      } else {
        format = arg.substr(strlen("--lm-head-quant="));
      }
      if (format != "int8" && format != "int4") {
        return UsageError("--lm-head-quant: expected int8 or int4, found \"" + format + "\"");
      }
      quantize.lm_head_bits = format == "int8" ? 8 : 4;
      quant_modifier = "--lm-head-quant";
    } else if (arg == "--kv-cache") {
      const std::string* dtype = value();
      if (!dtype) return UsageError("--kv-cache needs one of f32, f16, bf16, int8");
      if (*dtype == "f32") {
        options.kv_cache_dtype = llmrt::plan::F32;
      } else if (*dtype == "f16") {
        options.kv_cache_dtype = llmrt::plan::F16;
      } else if (*dtype == "bf16") {
        options.kv_cache_dtype = llmrt::plan::BF16;
      } else if (*dtype == "int8") {
        options.kv_cache_dtype = llmrt::plan::I8;
      } else {
        return UsageError("--kv-cache: expected f32, f16, bf16 or int8, found \"" + *dtype + "\"");
      }
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
  if (!quant_requested && !quant_modifier.empty()) {
    return UsageError(quant_modifier + " needs --quant int8|int4|mxfp4");
  }
  if (quantize.mxfp4) {
    // The format fixes these (OCP MX v1.0); asking for others is a mistake, not a preference.
    if (quantize.group_size != 0 && quantize.group_size != 32) {
      return UsageError("--group-size: --quant mxfp4 has one scale per 32 columns, found " +
                        std::to_string(quantize.group_size));
    }
    if (quantize.asymmetric) return UsageError("--scheme: --quant mxfp4 is symmetric");
    if (quantize.awq || quantize.gptq) {
      return UsageError(std::string(quantize.awq ? "--awq" : "--gptq") +
                        ": not available with --quant mxfp4 (round-to-nearest only)");
    }
  }
  if (quant_requested && quantize.asymmetric && quantize.bits == 8) {
    return UsageError("--scheme asymmetric is int4 only (int8 is symmetric)");
  }
  if (!quantize.calib_path.empty() && !quantize.awq && !quantize.gptq) {
    return UsageError("--calib needs --awq or --gptq");
  }
  if (options.quant_auto && options.max_memory_bytes == 0) {
    return UsageError("--quant auto chooses the weight format for a budget: add --max-memory");
  }
  if (options.quant_auto && (quant_requested || !quant_modifier.empty() || options.weight_dtype)) {
    return UsageError("--quant auto chooses the weight format itself: drop --quant int8|int4, " +
                      std::string("--dtype and the quantization options"));
  }
  if (quant_requested) options.quantize = quantize;

  ConsoleProgress progress(quiet, isatty(STDERR_FILENO) != 0);
  absl::Status status = llmc::Compile(options, &progress);
  if (!status.ok()) {
    std::fprintf(stderr, "llmc: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "llmc: wrote %s\n", options.output_path.c_str());
  return 0;
}

// "5GB", "500MB", "64KB" (decimal, as transformers' max_shard_size) or plain bytes.
bool ParseSize(const std::string& text, uint64_t* bytes) {
  uint64_t multiplier = 1;
  std::string digits = text;
  for (const auto& [suffix, factor] : {std::pair<const char*, uint64_t>{"GB", 1'000'000'000ull},
                                       {"MB", 1'000'000ull},
                                       {"KB", 1'000ull}}) {
    const size_t length = std::strlen(suffix);
    if (digits.size() > length && digits.compare(digits.size() - length, length, suffix) == 0) {
      multiplier = factor;
      digits.resize(digits.size() - length);
      break;
    }
  }
  uint64_t count;
  if (!absl::SimpleAtoi(digits, &count) || count == 0) return false;
  *bytes = count * multiplier;
  return true;
}

int Synth(const std::vector<std::string>& args) {
  llmc::SynthOptions options;
  std::string preset;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    if (arg == "-o" || arg == "--output") {
      const std::string* dir = value();
      if (!dir) return UsageError(arg + " needs a directory");
      options.output_dir = *dir;
    } else if (arg == "--preset") {
      const std::string* name = value();
      if (!name) return UsageError("--preset needs a preset name or a config.json path");
      preset = *name;
    } else if (arg == "--dtype") {
      const std::string* dtype = value();
      if (!dtype) return UsageError("--dtype needs one of f16, bf16, f32");
      if (*dtype == "f32") {
        options.dtype = llmrt::plan::F32;
      } else if (*dtype == "f16") {
        options.dtype = llmrt::plan::F16;
      } else if (*dtype == "bf16") {
        options.dtype = llmrt::plan::BF16;
      } else {
        return UsageError("--dtype: expected f16, bf16 or f32, found \"" + *dtype + "\"");
      }
    } else if (arg == "--seed") {
      const std::string* seed = value();
      if (!seed || !absl::SimpleAtoi(*seed, &options.seed)) {
        return UsageError("--seed needs a non-negative integer");
      }
    } else if (arg == "--max-shard-size") {
      const std::string* size = value();
      if (!size || !ParseSize(*size, &options.max_shard_bytes)) {
        return UsageError("--max-shard-size needs a positive size such as 5GB, 500MB or 100000");
      }
    } else {
      return UsageError("synth: unexpected argument " + arg);
    }
  }
  if (preset.empty()) {
    return UsageError("synth needs --preset (" + absl::StrJoin(llmc::SynthPresetNames(), ", ") +
                      " or a config.json)");
  }
  if (options.output_dir.empty()) return UsageError("synth needs -o DIR");
  // A name with a path separator or a .json suffix is a file; anything else a preset.
  const bool is_file = preset.find('/') != std::string::npos ||
                       (preset.size() > 5 && preset.compare(preset.size() - 5, 5, ".json") == 0);
  absl::StatusOr<llmc::SynthModelConfig> config =
      is_file ? llmc::SynthConfigFromFile(preset) : llmc::SynthPreset(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "llmc: error: %s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  options.config = *config;
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = llmc::WriteSyntheticCheckpoint(options);
  if (!status.ok()) {
    std::fprintf(stderr, "llmc: error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  uint64_t parameters = 0;
  // The checkpoint was written from this same list, so it cannot fail now. Kept in a variable:
  // a range-for over `*SynthTensors(...)` would iterate a destroyed temporary.
  const absl::StatusOr<std::vector<llmc::SynthTensor>> tensors = llmc::SynthTensors(options.config);
  for (const llmc::SynthTensor& tensor : *tensors) parameters += tensor.num_elements();
  std::fprintf(stderr, "llmc: wrote %s (%.3f G parameters) in %.1f s\n", options.output_dir.c_str(),
               parameters / 1e9,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A plan or logits file in progress is not left behind by Ctrl-C.
  llmrt::RemoveTemporaryFilesOnSignals();
  if (argc < 2) return UsageError("missing command");
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "compile") return Compile(args);
  if (command == "synth") return Synth(args);
  if (command == "-h" || command == "--help" || command == "help") {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  return UsageError("unknown command \"" + command + "\"");
}
