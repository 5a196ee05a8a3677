// Command-line parsing shared by the llmrt subcommands that load a plan (run, chat, inspect,
// eval, perplexity): flags after the subcommand, positional arguments, and the flags that choose
// how the plan runs (--threads, --backend, --kv-cache, --quant-activations, --verify).
#ifndef LLMRT_TOOLS_LLMRT_ARGUMENTS_H_
#define LLMRT_TOOLS_LLMRT_ARGUMENTS_H_

#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/model.h"

namespace llmrt {

// Flags after the subcommand: "--name value", "-x value" or boolean "--name".
struct Arguments {
  std::string plan_path;                 // the first positional argument
  std::vector<std::string> positionals;  // all of them, plan_path first
  std::map<std::string, std::string> values;
  std::map<std::string, bool> switches;
};

// Parses argv[2..]. `positional_names` says how many positional arguments there must be and
// what they are called in messages ("the plan file", "the text file"). Returns an error
// message, or "" when the arguments parse.
std::string ParseArguments(int argc, char** argv, const std::vector<std::string>& valued,
                           const std::vector<std::string>& boolean,
                           const std::vector<std::string>& positional_names, Arguments& arguments);

// Whether argv[2..] holds -h or --help: a subcommand then prints its usage and exits 0, whatever
// else is on the line.
bool WantsHelp(int argc, char** argv);

// Reads the number `flag` holds into `out`; leaves `out` alone when the flag is absent. Returns
// false and sets `error` when the value is not a number.
template <typename Number>
bool ParseNumber(const Arguments& arguments, const std::string& flag, Number& out,
                 std::string& error) {
  auto found = arguments.values.find(flag);
  if (found == arguments.values.end()) return true;
  bool ok;
  if constexpr (std::is_floating_point_v<Number>) {
    double value;
    ok = absl::SimpleAtod(found->second, &value);
    out = value;
  } else {
    ok = absl::SimpleAtoi(found->second, &out);
  }
  if (!ok) {
    error = absl::StrFormat("flag %s: expected %s, found '%s'", flag,
                            std::is_floating_point_v<Number> ? "a number"
                            : std::is_unsigned_v<Number>     ? "an integer >= 0"
                                                             : "an integer",
                            found->second);
  }
  return ok;
}

// The valued and boolean flags ParseModelOptions reads; a subcommand adds them to its own.
extern const std::vector<std::string> kModelValuedFlags;
extern const std::vector<std::string> kModelSwitches;

// Fills `options` from --threads, --backend, --kv-cache, --quant-activations and --verify.
// Returns a usage error message, or "".
std::string ParseModelOptions(const Arguments& arguments, engine::ModelOptions& options);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_ARGUMENTS_H_
