// llmrt-soak: a bounded soak of an OpenAI-compatible server on this machine (loopback only).
//
//   llmrt-soak --url http://127.0.0.1:PORT --duration SECONDS --max-requests N
//       [--concurrency 8] [--seed 1] [--server-pid PID] [--warmup SECONDS]
//       [--max-body-bytes N] [--rss-slack-mib 32] [--max-tokens 48] [--json]
//
// Workers send the mix of soak_checks.h (valid streamed and plain generations with random
// parameters, probes, invalid requests, abandoned streams) until --duration or --max-requests,
// whichever comes first, and check every answer. A warm-up phase (--warmup, default 10% of the
// duration, at least 2 s) runs the same mix first so that the server's steady allocations (KV
// pool pages, worker stacks, allocator arenas) exist before the baseline is taken.
//
// At the end it waits (up to 60 s) for the server to have no running or waiting sequence and
// checks, from /metrics and /proc/PID/status:
//   - every request got an allowed answer (none failed, none hung past --timeout);
//   - KV cache usage is 0 (no abandoned request kept blocks);
//   - the server's resident memory is back near its baseline: RSS after the soak <= RSS after
//     the warm-up + max(--rss-slack-mib, 10%). (Allocators keep some freed memory: a leak grows
//     with the request count, this slack does not.)
// Exit 0 when all hold, 1 when one does not, 2 on bad flags.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/serve/http_client.h"
#include "bench/soak/soak_checks.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace llmrt::soak {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: llmrt-soak --url http://127.0.0.1:PORT --duration SECONDS --max-requests N\n"
    "         [--concurrency 8] [--seed 1] [--server-pid PID] [--warmup SECONDS]\n"
    "         [--max-body-bytes N] [--rss-slack-mib 32] [--max-tokens 48] [--timeout 120]\n"
    "         [--json]\n";

struct Options {
  std::string url;
  double duration_seconds = 0;
  int64_t max_requests = 0;
  int64_t concurrency = 8;
  uint64_t seed = 1;
  int64_t server_pid = 0;
  double warmup_seconds = -1;  // -1: 10% of the duration, at least 2 s
  int64_t max_body_bytes = 0;
  int64_t rss_slack_mib = 32;
  int64_t max_tokens = 48;
  int64_t timeout_seconds = 120;
  bool json = false;
};

std::unique_ptr<httplib::Client> NewClient(const Options& options) {
  return bench::NewClient(options.url, options.timeout_seconds);
}

struct Outcome {
  int status = 0;
  std::string failure;  // "" when allowed
};

Outcome Send(const Options& options, const SoakRequest& request) {
  Outcome outcome;
  std::unique_ptr<httplib::Client> client = NewClient(options);
  if (request.expect == Expect::kDisconnect && !request.stream) {
    // Gives up after a few milliseconds: the socket closes while the server still generates.
    client->set_read_timeout(0, request.disconnect_after_ms * 1000);
  }
  httplib::Request http;
  http.method = request.method;
  http.path = request.path;
  if (request.method == "POST") {
    http.headers.emplace("Content-Type", "application/json");
    http.body = request.body;
  }
  std::string body;
  int events = 0;
  http.response_handler = [&](const httplib::Response& response) {
    outcome.status = response.status;
    return true;
  };
  http.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    body.append(data, size);
    if (request.expect == Expect::kDisconnect && request.stream && outcome.status == 200) {
      for (size_t at = body.find("\n\n"); at != std::string::npos; at = body.find("\n\n", at + 2)) {
        ++events;
      }
      if (events >= request.disconnect_after_events) return false;  // closes the connection
      events = 0;
    }
    return true;
  };
  httplib::Result result = client->send(http);
  if (request.expect == Expect::kDisconnect) return outcome;
  if (!result) {
    outcome.failure = "no complete response: " + httplib::to_string(result.error());
    return outcome;
  }
  outcome.status = result->status;
  outcome.failure = CheckResponse(request, outcome.status, body);
  return outcome;
}

// Resident and peak resident memory of `pid` in bytes (VmRSS, VmHWM), 0 when unreadable.
std::pair<int64_t, int64_t> ServerRss(int64_t pid) {
  if (pid <= 0) return {0, 0};
  std::ifstream status(absl::StrFormat("/proc/%d/status", pid));
  std::string line;
  int64_t rss = 0, peak = 0;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    auto field = [&](const char* name, int64_t& out) {
      if (line.rfind(name, 0) != 0) return;
      std::string digits;
      for (char c : line) {
        if (c >= '0' && c <= '9') digits += c;
      }
      if (absl::SimpleAtoi(digits, &kib)) out = kib * 1024;
    };
    field("VmRSS:", rss);
    field("VmHWM:", peak);
  }
  return {rss, peak};
}

// One value of /metrics, or -1.
double Metric(const std::string& page, const std::string& series) {
  size_t at = page.find("\n" + series);
  if (at == std::string::npos) return -1;
  const size_t line_end = page.find('\n', at + 1);
  const std::string line = page.substr(at + 1, line_end - at - 1);
  double value = -1;
  if (!absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &value)) return -1;
  return value;
}

std::string MetricsPage(const Options& options) {
  httplib::Result result = NewClient(options)->Get("/metrics");
  return result && result->status == 200 ? result->body : "";
}

// Waits until the server runs and queues nothing; returns the last /metrics page.
std::string WaitIdle(const Options& options, double seconds) {
  const Clock::time_point deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  std::string page;
  while (true) {
    page = MetricsPage(options);
    if (Metric(page, "llmrt:num_requests_running") == 0 &&
        Metric(page, "llmrt:num_requests_waiting") == 0 &&
        Metric(page, "llmrt:kv_cache_usage_perc") == 0) {
      return page;
    }
    if (Clock::now() > deadline) return page;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

struct Tally {
  std::mutex mutex;
  std::map<std::string, int64_t> sent;      // by catalogue name
  std::map<std::string, int64_t> failures;  // by "name: message"
  std::map<int, int64_t> statuses;
  int64_t total = 0, failed = 0, rejected_429 = 0, disconnects = 0, errors_as_expected = 0;
  int64_t successes = 0;
};

// Runs the mix until `until` or until `budget` requests were sent.
void RunPhase(const Options& options, const SoakContext& context, uint64_t seed,
              Clock::time_point until, int64_t budget, Tally& tally) {
  std::atomic<int64_t> next{0};
  std::vector<std::thread> workers;
  for (int64_t worker = 0; worker < options.concurrency; ++worker) {
    workers.emplace_back([&, worker] {
      std::mt19937_64 random(seed * 7919 + static_cast<uint64_t>(worker));
      while (Clock::now() < until && next.fetch_add(1) < budget) {
        const SoakRequest request = RandomRequest(random, context);
        const Outcome outcome = Send(options, request);
        std::lock_guard<std::mutex> lock(tally.mutex);
        ++tally.total;
        ++tally.sent[request.name];
        ++tally.statuses[outcome.status];
        if (!outcome.failure.empty()) {
          ++tally.failed;
          ++tally.failures[request.name + ": " + outcome.failure.substr(0, 160)];
        } else if (request.expect == Expect::kDisconnect) {
          ++tally.disconnects;
        } else if (request.expect == Expect::kError) {
          ++tally.errors_as_expected;
        } else if (outcome.status == 429) {
          ++tally.rejected_429;
        } else {
          ++tally.successes;
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
}

int Soak(int argc, char** argv) {
  Options options;
  std::string error;
  bench::FlagReader flags(argc, argv, 1, error);
  while (flags.Next()) {
    const std::string& flag = flags.flag();
    auto integer = [&](int64_t& out) { flags.Number(out, "an integer"); };
    auto real = [&](double& out) { flags.Number(out); };
    int64_t seed = 1;
    if (flag == "--url") {
      options.url = flags.Value();
    } else if (flag == "--duration") {
      real(options.duration_seconds);
    } else if (flag == "--max-requests") {
      integer(options.max_requests);
    } else if (flag == "--concurrency") {
      integer(options.concurrency);
    } else if (flag == "--seed") {
      integer(seed);
      options.seed = static_cast<uint64_t>(seed);
    } else if (flag == "--server-pid") {
      integer(options.server_pid);
    } else if (flag == "--warmup") {
      real(options.warmup_seconds);
    } else if (flag == "--max-body-bytes") {
      integer(options.max_body_bytes);
    } else if (flag == "--rss-slack-mib") {
      integer(options.rss_slack_mib);
    } else if (flag == "--max-tokens") {
      integer(options.max_tokens);
    } else if (flag == "--timeout") {
      integer(options.timeout_seconds);
    } else if (flag == "--json") {
      options.json = true;
    } else if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (error.empty()) {
      error = "unknown flag " + flag;
    }
  }
  // Loopback only: a soak sends invalid and abandoned requests on purpose.
  if (error.empty() && options.url.rfind("http://127.0.0.1:", 0) != 0 &&
      options.url.rfind("http://localhost:", 0) != 0) {
    error = "--url must be http://127.0.0.1:PORT or http://localhost:PORT (loopback only)";
  }
  if (error.empty() &&
      (!(options.duration_seconds > 0) || options.max_requests < 1 || options.concurrency < 1 ||
       options.concurrency > 256 || options.max_tokens < 1 || options.timeout_seconds < 1)) {
    error =
        "--duration > 0, --max-requests >= 1, --concurrency in [1, 256], --max-tokens >= 1 and "
        "--timeout >= 1 are required";
  }
  // Bodies of max_body_bytes + 1 are built per request: keep them small.
  if (error.empty() && (options.max_body_bytes < 0 || options.max_body_bytes > (4 << 20))) {
    error = "--max-body-bytes must be in [0, 4 MiB]";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "llmrt-soak: %s\n%s", error.c_str(), kUsage);
    return 2;
  }

  // What the catalogue needs from the server.
  SoakContext context;
  context.max_body_bytes = options.max_body_bytes;
  context.max_tokens = options.max_tokens;
  {
    std::unique_ptr<httplib::Client> client = NewClient(options);
    const std::optional<Json> model = bench::FirstModel(*client);
    if (!model) {
      std::fprintf(stderr, "llmrt-soak: %s/v1/models did not answer with a model\n",
                   options.url.c_str());
      return 1;
    }
    context.model = model->value("id", "");
    context.max_context = model->value("max_model_len", int64_t{0});
    absl::StatusOr<std::vector<int32_t>> tokens = bench::Tokenize(
        *client, options.url,
        "once upon a time there was a little girl named lily she loved to play with her dog in "
        "the park");
    if (!tokens.ok() || context.max_context < 80) {
      std::fprintf(stderr, "llmrt-soak: %s: /tokenize failed or the context (%lld) is < 80\n",
                   options.url.c_str(), static_cast<long long>(context.max_context));
      return 1;
    }
    context.token_pool = *std::move(tokens);
    // Valid generations must fit: prompts are at most ~60 tokens.
    context.max_tokens = std::min(context.max_tokens, context.max_context - 64);
  }

  const double warmup = options.warmup_seconds >= 0 ? options.warmup_seconds
                                                    : std::max(2.0, 0.1 * options.duration_seconds);
  const Clock::time_point start = Clock::now();
  Tally warmup_tally;
  RunPhase(options, context, options.seed + 1000003,
           start + std::chrono::milliseconds(static_cast<int64_t>(warmup * 1000)),
           options.max_requests, warmup_tally);
  WaitIdle(options, 60);
  const int64_t baseline_rss = ServerRss(options.server_pid).first;

  // RSS is sampled once a second during the soak, for the report.
  std::atomic<bool> sampling{true};
  std::atomic<int64_t> max_rss{baseline_rss};
  std::thread sampler([&] {
    while (sampling.load()) {
      const int64_t rss = ServerRss(options.server_pid).first;
      int64_t seen = max_rss.load();
      while (rss > seen && !max_rss.compare_exchange_weak(seen, rss)) {
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  });
  const Clock::time_point soak_start = Clock::now();
  Tally tally;
  RunPhase(
      options, context, options.seed,
      soak_start + std::chrono::milliseconds(static_cast<int64_t>(options.duration_seconds * 1000)),
      options.max_requests, tally);
  const double soak_seconds = std::chrono::duration<double>(Clock::now() - soak_start).count();
  const std::string page = WaitIdle(options, 60);
  sampling.store(false);
  sampler.join();
  const auto [final_rss, final_peak] = ServerRss(options.server_pid);

  const double kv_usage = Metric(page, "llmrt:kv_cache_usage_perc");
  const double running = Metric(page, "llmrt:num_requests_running");
  const double waiting = Metric(page, "llmrt:num_requests_waiting");
  const int64_t slack = std::max<int64_t>(options.rss_slack_mib << 20, baseline_rss / 10);
  const bool rss_ok = options.server_pid <= 0 ||
                      (baseline_rss > 0 && final_rss > 0 && final_rss <= baseline_rss + slack);
  const bool idle_ok = kv_usage == 0 && running == 0 && waiting == 0;
  const bool ok = tally.failed == 0 && warmup_tally.failed == 0 && idle_ok && rss_ok;

  if (options.json) {
    Json failures = bench::CountsJson(tally.failures);
    for (const auto& [name, count] : warmup_tally.failures) failures["warmup " + name] = count;
    const Json report = {{"ok", ok},
                         {"soak_seconds", soak_seconds},
                         {"warmup_requests", warmup_tally.total},
                         {"requests", tally.total},
                         {"requests_per_second", tally.total / soak_seconds},
                         {"successes", tally.successes},
                         {"rejected_429", tally.rejected_429},
                         {"errors_as_expected", tally.errors_as_expected},
                         {"disconnects", tally.disconnects},
                         {"failed", tally.failed + warmup_tally.failed},
                         {"failures", failures},
                         {"sent", bench::CountsJson(tally.sent)},
                         {"http_status", bench::CountsJson(tally.statuses)},
                         {"kv_cache_usage_after", kv_usage},
                         {"running_after", running},
                         {"waiting_after", waiting},
                         {"rss_baseline_bytes", baseline_rss},
                         {"rss_max_bytes", max_rss.load()},
                         {"rss_final_bytes", final_rss},
                         {"rss_peak_bytes", final_peak},
                         {"rss_slack_bytes", slack},
                         {"generation_tokens_total", Metric(page, "llmrt:generation_tokens_total")},
                         {"preemptions_total", Metric(page, "llmrt:num_preemptions_total")}};
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("soak %.1f s (after %lld warm-up requests): %lld requests, %.1f req/s\n",
                soak_seconds, static_cast<long long>(warmup_tally.total),
                static_cast<long long>(tally.total), tally.total / soak_seconds);
    std::printf("  200 valid %lld, 429 %lld, expected errors %lld, abandoned %lld, FAILED %lld\n",
                static_cast<long long>(tally.successes), static_cast<long long>(tally.rejected_429),
                static_cast<long long>(tally.errors_as_expected),
                static_cast<long long>(tally.disconnects),
                static_cast<long long>(tally.failed + warmup_tally.failed));
    for (const auto& [name, count] : warmup_tally.failures) {
      std::printf("  warm-up failure x%lld: %s\n", static_cast<long long>(count), name.c_str());
    }
    for (const auto& [name, count] : tally.failures) {
      std::printf("  failure x%lld: %s\n", static_cast<long long>(count), name.c_str());
    }
    std::printf(
        "  after: running %g, waiting %g, KV usage %g; generated tokens %g, "
        "preemptions %g\n",
        running, waiting, kv_usage, Metric(page, "llmrt:generation_tokens_total"),
        Metric(page, "llmrt:num_preemptions_total"));
    if (options.server_pid > 0) {
      std::printf(
          "  server RSS: baseline %.1f MiB, max %.1f MiB, final %.1f MiB (allowed "
          "%.1f MiB), peak %.1f MiB\n",
          baseline_rss / 1048576.0, max_rss.load() / 1048576.0, final_rss / 1048576.0,
          (baseline_rss + slack) / 1048576.0, final_peak / 1048576.0);
    }
    std::printf("%s\n", ok ? "OK" : "FAILED");
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace llmrt::soak

int main(int argc, char** argv) { return llmrt::soak::Soak(argc, argv); }
