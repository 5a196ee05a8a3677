#include "tools/llmrt/arguments.h"

#include <algorithm>

#include "runtime/kv/kv_storage.h"

namespace llmrt {

const std::vector<std::string> kModelValuedFlags = {"--threads", "--backend", "--kv-cache",
                                                    "--quant-activations"};
const std::vector<std::string> kModelSwitches = {"--verify"};

std::string ParseArguments(int argc, char** argv, const std::vector<std::string>& valued,
                           const std::vector<std::string>& boolean,
                           const std::vector<std::string>& positional_names, Arguments& arguments) {
  auto contains = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    if (contains(valued, argument)) {
      if (index + 1 >= argc) return "flag " + argument + " needs a value";
      arguments.values[argument] = argv[++index];
    } else if (contains(boolean, argument)) {
      arguments.switches[argument] = true;
    } else if (!argument.empty() && argument[0] == '-' && argument != "-") {
      return "unknown flag " + argument;
    } else if (arguments.positionals.size() < positional_names.size()) {
      arguments.positionals.push_back(argument);
    } else {
      return "unexpected argument " + argument;
    }
  }
  if (arguments.positionals.size() < positional_names.size()) {
    return "missing " + positional_names[arguments.positionals.size()];
  }
  if (!arguments.positionals.empty()) arguments.plan_path = arguments.positionals.front();
  return "";
}

bool WantsHelp(int argc, char** argv) {
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    if (argument == "-h" || argument == "--help") return true;
  }
  return false;
}

std::string ParseModelOptions(const Arguments& arguments, engine::ModelOptions& options) {
  int32_t threads = 0;  // one per core, as --threads 0
  std::string error;
  if (!ParseNumber(arguments, "--threads", threads, error)) return error;
  if (threads < 0) return "--threads must be >= 0 (0: all cores)";
  options.num_threads = threads;
  options.verify = arguments.switches.count("--verify") > 0;
  if (auto found = arguments.values.find("--backend"); found != arguments.values.end()) {
    const std::string& backend = found->second;
    if (backend == "auto") {
      options.backend = engine::BackendChoice::kAuto;
    } else if (backend == "cpu") {
      options.backend = engine::BackendChoice::kCpu;
    } else if (backend == "cuda") {
      options.backend = engine::BackendChoice::kCuda;
    } else {
      return "--backend: expected auto, cpu or cuda, found \"" + backend + "\"";
    }
  }
  if (auto found = arguments.values.find("--kv-cache"); found != arguments.values.end()) {
    absl::StatusOr<plan::DType> kv_dtype = kv::ParseKvDType(found->second);
    if (!kv_dtype.ok()) return std::string(kv_dtype.status().message());
    options.kv_cache_dtype = *kv_dtype;
  }
  if (auto found = arguments.values.find("--quant-activations"); found != arguments.values.end()) {
    absl::StatusOr<QuantizedActivations> mode = engine::ParseQuantizedActivations(found->second);
    if (!mode.ok()) return std::string(mode.status().message());
    options.quantized_activations = *mode;
  }
  return "";
}

}  // namespace llmrt
