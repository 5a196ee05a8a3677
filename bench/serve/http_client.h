// Helpers shared by the bench clients of OpenAI-compatible servers (llmrt-bench serve,
// llmrt-soak): command-line flag reading, cpp-httplib clients and the /v1/models and /tokenize
// probes.
#ifndef LLMRT_BENCH_SERVE_HTTP_CLIENT_H_
#define LLMRT_BENCH_SERVE_HTTP_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace llmrt::bench {

// Walks argv[first..] flag by flag. Errors go to `error` (the caller's), and Next() stops at
// the first one:
//   FlagReader flags(argc, argv, 1, error);
//   while (flags.Next()) { if (flags.flag() == "--url") url = flags.Value(); ... }
class FlagReader {
 public:
  FlagReader(int argc, char** argv, int first, std::string& error)
      : argc_(argc), argv_(argv), index_(first - 1), error_(error) {}

  // Moves to the next flag; false when none is left or an error was recorded.
  bool Next() {
    if (!error_.empty() || ++index_ >= argc_) return false;
    flag_ = argv_[index_];
    return true;
  }
  const std::string& flag() const { return flag_; }

  // The flag's value (the next argument), or "" and an error when there is none.
  std::string Value() {
    if (index_ + 1 >= argc_) {
      error_ = "flag " + flag_ + " needs a value";
      return "";
    }
    return argv_[++index_];
  }

  // Parses the flag's value into `out` (absl::SimpleAtod for floating point, SimpleAtoi
  // otherwise); on failure records "flag F: 'V' is not `what`".
  template <typename T>
  void Number(T& out, const char* what = "a number") {
    const std::string text = Value();
    if (!error_.empty()) return;
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      ok = absl::SimpleAtod(text, &out);
    } else {
      ok = absl::SimpleAtoi(text, &out);
    }
    if (!ok) error_ = absl::StrFormat("flag %s: '%s' is not %s", flag_, text, what);
  }

 private:
  int argc_;
  char** argv_;
  int index_;
  std::string flag_;
  std::string& error_;
};

// An "Authorization: Bearer KEY" header when `api_key` is set, else none.
httplib::Headers AuthHeaders(const std::string& api_key);

// A client of `url` with a 10 s connection timeout and `timeout_seconds` read/write timeouts.
std::unique_ptr<httplib::Client> NewClient(const std::string& url, int64_t timeout_seconds);

// The first entry of GET /v1/models' "data", or nullopt when the server does not answer 200
// with a non-empty model list.
std::optional<nlohmann::json> FirstModel(httplib::Client& client,
                                         const httplib::Headers& headers = {});

// POST /tokenize of `prompt` without special tokens: the token ids, or UNAVAILABLE naming
// `url` when the server does not answer 200 with a non-empty "tokens" list.
absl::StatusOr<std::vector<int32_t>> Tokenize(httplib::Client& client, const std::string& url,
                                              const std::string& prompt,
                                              const httplib::Headers& headers = {});

// A JSON object of counts keyed by the map's keys (numbers become their decimal strings).
template <typename Key>
nlohmann::json CountsJson(const std::map<Key, int64_t>& counts) {
  nlohmann::json json = nlohmann::json::object();
  for (const auto& [key, count] : counts) {
    if constexpr (std::is_arithmetic_v<Key>) {
      json[std::to_string(key)] = count;
    } else {
      json[key] = count;
    }
  }
  return json;
}

}  // namespace llmrt::bench

#endif  // LLMRT_BENCH_SERVE_HTTP_CLIENT_H_
