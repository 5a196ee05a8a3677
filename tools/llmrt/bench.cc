// llmrt bench: what a plan achieves on this machine, per thread count.
//
//   llmrt bench PLAN [-p 512] [-n 128] [-t 1,2] [--reps 5] [--ubatch 512] [--json]
//   llmrt bench --bandwidth [-t 1,2] [--reps 5] [--bandwidth-mib 1024] [--json]
//
// Per thread count (the model is loaded afresh for each, with that many threads):
//   load_ms                 Model::Load alone (open, validate, mmap, backend set-up).
//   load_to_first_token_ms  Model::Load of the plan, a session, one BOS step, argmax: what a
//                           user waits for before the first generated token (page cache warm
//                           after the first thread count).
//   pp_tok_s   p random tokens appended to a fresh session in steps of --ubatch tokens
//              (llama-bench's pp: one 512-token batch), tokens / seconds.
//   tg_tok_s   n decode steps of one token each after a one-token (BOS) prompt, each step
//              feeding back the previous step's argmax (llama-bench's tg: n single-token
//              decodes from an empty cache), tokens / seconds. ms_per_token = 1000 / tg_tok_s.
//   mbu        bytes the n decode steps must read (every weight once per step, except that an
//              untied embedding table contributes one row, plus the KV cache up to each step's
//              position) / their time / the machine's read bandwidth at this thread count.
//   peak_rss_bytes  getrusage's ru_maxrss of the process so far (models are loaded one after
//              another, so this is the largest of them; weights are mmapped and count as they
//              are touched).
// Every rate is the median over --reps repetitions, after one untimed warm-up of each.
//
// Read bandwidth: a STREAM-like read-sum over a buffer of --bandwidth-mib MiB (default 1 GiB,
// 32x this machine's 32 MiB L3, so caches cannot serve it), split evenly over the threads,
// median of --reps passes after one warm-up. Cached per thread count and buffer size in a
// plain text file, $LLMRT_BANDWIDTH_CACHE or ~/.cache/llmrt/bandwidth.txt, one line
// "<threads> <buffer_bytes> <bytes_per_second>" each; `--bandwidth` re-measures.
//
// --json prints one JSON object per thread count, one per line (JSON Lines).
#include "tools/llmrt/bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/model.h"
#include "runtime/plan/plan_reader.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kUsageError = 2;
constexpr int kError = 1;
constexpr char kBenchUsage[] =
    "usage: llmrt bench PLAN [-p 512] [-n 128] [-t 1,2] [--reps 5] [--ubatch 512] [--json]\n"
    "       llmrt bench --bandwidth [-t 1,2] [--reps 5] [--bandwidth-mib 1024] [--json]\n";

int BenchUsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt bench: %s\n%s", message.c_str(), kBenchUsage);
  return kUsageError;
}

int BenchFail(const std::string& message) {
  std::fprintf(stderr, "llmrt bench: %s\n", message.c_str());
  return kError;
}

double Seconds(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

// ---- read bandwidth ----

// Sums 64-bit words with four independent 32-byte accumulators, so the loop is bound by loads,
// not by an add chain. GCC vector extensions: two SSE2 registers each on baseline x86-64, NEON
// on arm64 (the tool is built for the baseline ISA; 16-byte loads at two per cycle still exceed
// DRAM bandwidth several times over).
typedef uint64_t Lanes __attribute__((vector_size(32)));

uint64_t ReadSum(const uint8_t* data, size_t bytes) {
  Lanes sum0 = {}, sum1 = {}, sum2 = {}, sum3 = {};
  size_t offset = 0;
  for (; offset + 128 <= bytes; offset += 128) {
    Lanes a, b, c, d;
    std::memcpy(&a, data + offset, 32);
    std::memcpy(&b, data + offset + 32, 32);
    std::memcpy(&c, data + offset + 64, 32);
    std::memcpy(&d, data + offset + 96, 32);
    sum0 += a;
    sum1 += b;
    sum2 += c;
    sum3 += d;
  }
  Lanes total = sum0 + sum1 + sum2 + sum3;
  uint64_t result = total[0] + total[1] + total[2] + total[3];
  for (; offset < bytes; ++offset) result += data[offset];
  return result;
}

// Median bytes/s of `reps` passes over `buffer` with `threads` threads.
double MeasureReadBandwidth(const std::vector<uint8_t>& buffer, int threads, int reps) {
  const size_t slice = (buffer.size() / threads) & ~size_t{127};
  std::vector<double> rates;
  std::atomic<uint64_t> sink{0};
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up
    const Clock::time_point start = Clock::now();
    std::vector<std::thread> workers;
    for (int thread = 1; thread < threads; ++thread) {
      workers.emplace_back([&, thread] { sink += ReadSum(buffer.data() + thread * slice, slice); });
    }
    sink += ReadSum(buffer.data(), slice);
    for (std::thread& worker : workers) worker.join();
    const double seconds = Seconds(start, Clock::now());
    if (rep >= 0) rates.push_back(static_cast<double>(slice) * threads / seconds);
  }
  return Median(rates);
}

fs::path BandwidthCachePath() {
  if (const char* path = std::getenv("LLMRT_BANDWIDTH_CACHE"); path && *path) return path;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
    return fs::path(cache) / "llmrt" / "bandwidth.txt";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : "/tmp") / ".cache" / "llmrt" / "bandwidth.txt";
}

// (threads, buffer bytes) -> bytes/s. A missing or unreadable cache is empty; malformed lines
// are skipped (the cache is a convenience, never a reason to fail).
using BandwidthTable = std::map<std::pair<int, uint64_t>, double>;

BandwidthTable ReadBandwidthCache(const fs::path& path) {
  BandwidthTable table;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int threads;
    uint64_t bytes;
    double rate;
    if (fields.size() == 3 && absl::SimpleAtoi(fields[0], &threads) &&
        absl::SimpleAtoi(fields[1], &bytes) && absl::SimpleAtod(fields[2], &rate) && rate > 0) {
      table[{threads, bytes}] = rate;
    }
  }
  return table;
}

// Written to a temporary file and renamed: concurrent benches never see half a file.
void WriteBandwidthCache(const fs::path& path, const BandwidthTable& table) {
  std::error_code error;
  fs::create_directories(path.parent_path(), error);
  const fs::path temp = path.string() + absl::StrFormat(".tmp%d", static_cast<int>(getpid()));
  {
    std::ofstream out(temp);
    out << "# llmrt bench --bandwidth: <threads> <buffer_bytes> <read bytes/s, median>\n";
    for (const auto& [key, rate] : table) {
      out << absl::StrFormat("%d %d %.0f\n", key.first, key.second, rate);
    }
    if (!out) {
      fs::remove(temp, error);
      std::fprintf(stderr, "llmrt bench: warning: cannot write %s\n", temp.c_str());
      return;
    }
  }
  fs::rename(temp, path, error);
  if (error) {
    fs::remove(temp, error);
    std::fprintf(stderr, "llmrt bench: warning: cannot write %s\n", path.c_str());
  }
}

// Returns bytes/s per thread count, from the cache unless `remeasure` or missing there.
std::map<int, double> ReadBandwidths(const std::vector<int>& thread_counts, uint64_t buffer_bytes,
                                     int reps, bool remeasure) {
  const fs::path cache_path = BandwidthCachePath();
  BandwidthTable table = ReadBandwidthCache(cache_path);
  std::map<int, double> result;
  std::vector<uint8_t> buffer;
  bool measured = false;
  for (int threads : thread_counts) {
    auto cached = table.find({threads, buffer_bytes});
    if (!remeasure && cached != table.end()) {
      result[threads] = cached->second;
      continue;
    }
    if (buffer.empty()) {
      // Non-zero contents so no page stays the shared zero page (which would read from cache).
      buffer.resize(buffer_bytes);
      for (size_t i = 0; i < buffer.size(); i += 4096) buffer[i] = static_cast<uint8_t>(i >> 12);
    }
    result[threads] = table[{threads, buffer_bytes}] =
        MeasureReadBandwidth(buffer, threads, std::max(reps, 1));
    measured = true;
  }
  if (measured) WriteBandwidthCache(cache_path, table);
  return result;
}

// ---- model throughput ----

struct BenchOptions {
  std::string plan_path;
  int64_t prompt_tokens = 512;
  int64_t generated_tokens = 128;
  std::vector<int> thread_counts;
  int reps = 5;
  int32_t ubatch = 512;
  bool json = false;
  uint64_t bandwidth_bytes = uint64_t{1} << 30;
};

struct BenchResult {
  int threads = 0;
  double load_ms = 0;  // Model::Load alone: open, validate, map, set up the backend
  double load_to_first_token_ms = 0;
  double pp_tok_s = 0;
  double tg_tok_s = 0;
  double ms_per_token = 0;
  uint64_t peak_rss_bytes = 0;
  double decode_bytes_per_token = 0;  // mean over the n steps, weights + KV
  double bandwidth_bytes_per_s = 0;
  double mbu = 0;
};

uint64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

int32_t ArgMax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Weight bytes one decode step reads: every tensor, except that an embedding table not shared
// with the LM head is read one row per token.
double DecodeWeightBytes(const plan::PlanMeta& meta) {
  double bytes = 0;
  for (const plan::Tensor& tensor : meta.tensors()) {
    double size = static_cast<double>(tensor.size_bytes());
    if (tensor.name() == "model.embed_tokens.weight" && !meta.config().tie_word_embeddings() &&
        tensor.shape_size() > 0 && tensor.shape(0) > 0) {
      size /= static_cast<double>(tensor.shape(0));
    }
    bytes += size;
  }
  return bytes;
}

absl::StatusOr<BenchResult> BenchThreads(const BenchOptions& options, int threads,
                                         double bandwidth) {
  BenchResult result;
  result.threads = threads;
  engine::ModelOptions model_options;
  model_options.num_threads = threads;
  model_options.max_tokens_per_step = options.ubatch;
  model_options.kv_cache_tokens = std::max(options.prompt_tokens, options.generated_tokens + 1);

  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(options.plan_path, model_options);
  if (!model.ok()) return model.status();
  result.load_ms = Seconds(load_start, Clock::now()) * 1e3;
  const plan::PlanMeta& meta = (*model)->meta();
  const int64_t vocab = (*model)->vocab_size();
  const int64_t needed = std::max(options.prompt_tokens, options.generated_tokens + 1);
  if (needed > (*model)->max_context()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: -p %d / -n %d need %d positions; the model holds %d", options.plan_path,
        options.prompt_tokens, options.generated_tokens, needed, (*model)->max_context()));
  }
  int32_t bos = static_cast<int32_t>(meta.generation().bos_token_id());
  if (bos < 0 || bos >= vocab) bos = 0;
  std::unique_ptr<engine::Session> session = (*model)->NewSession();
  absl::StatusOr<std::vector<float>> logits = session->Append({bos}, false);
  if (!logits.ok()) return logits.status();
  volatile int32_t first_token = ArgMax(*logits);
  (void)first_token;
  result.load_to_first_token_ms = Seconds(load_start, Clock::now()) * 1e3;

  // Prompt processing: random tokens (fixed seed: every run and thread count sees the same).
  std::mt19937 random(1234);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(options.prompt_tokens);
  for (int32_t& id : prompt) id = token(random);
  std::vector<double> pp_rates;
  if (options.prompt_tokens > 0) {
    for (int rep = -1; rep < options.reps; ++rep) {
      session->Reset();
      const Clock::time_point start = Clock::now();
      logits = session->Append(prompt, false);
      const double seconds = Seconds(start, Clock::now());
      if (!logits.ok()) return logits.status();
      if (rep >= 0) pp_rates.push_back(options.prompt_tokens / seconds);
    }
    result.pp_tok_s = Median(pp_rates);
  }

  // Generation.
  std::vector<double> tg_seconds;
  if (options.generated_tokens > 0) {
    for (int rep = -1; rep < options.reps; ++rep) {
      session->Reset();
      logits = session->Append({bos}, false);
      if (!logits.ok()) return logits.status();
      const Clock::time_point start = Clock::now();
      for (int64_t step = 0; step < options.generated_tokens; ++step) {
        logits = session->Append({ArgMax(*logits)}, false);
        if (!logits.ok()) return logits.status();
      }
      if (rep >= 0) tg_seconds.push_back(Seconds(start, Clock::now()));
    }
    const double seconds = Median(tg_seconds);
    result.tg_tok_s = options.generated_tokens / seconds;
    result.ms_per_token = 1e3 / result.tg_tok_s;

    // Step s (0-based) appends the token at position s + 1 and attends over s + 2 positions.
    const plan::KvCacheSpec& kv = meta.kv_cache();
    const double kv_bytes_per_position =
        2.0 * kv.num_layers() * kv.num_kv_heads() * kv.head_dim() * plan::DTypeSize(kv.dtype());
    const double n = static_cast<double>(options.generated_tokens);
    const double positions_read = n * (n + 3) / 2;  // sum over s of (s + 2)
    const double total_bytes = n * DecodeWeightBytes(meta) + kv_bytes_per_position * positions_read;
    result.decode_bytes_per_token = total_bytes / n;
    result.bandwidth_bytes_per_s = bandwidth;
    if (bandwidth > 0) result.mbu = total_bytes / seconds / bandwidth;
  }
  result.peak_rss_bytes = PeakRssBytes();
  return result;
}

bool ParseThreadList(const std::string& text, std::vector<int>& out) {
  out.clear();
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int threads;
    if (!absl::SimpleAtoi(part, &threads) || threads < 1 || threads > 1024) return false;
    out.push_back(threads);
  }
  return !out.empty();
}

}  // namespace

int Bench(int argc, char** argv) {
  BenchOptions options;
  bool bandwidth_only = false;
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    auto value = [&]() -> const char* { return index + 1 < argc ? argv[++index] : nullptr; };
    auto number = [&](auto& out, long long minimum) {
      const char* text = value();
      long long parsed;
      if (!text || !absl::SimpleAtoi(text, &parsed) || parsed < minimum) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(parsed);
      return true;
    };
    if (argument == "-p") {
      if (!number(options.prompt_tokens, 0)) return BenchUsageError("-p needs a count >= 0");
    } else if (argument == "-n") {
      if (!number(options.generated_tokens, 0)) return BenchUsageError("-n needs a count >= 0");
    } else if (argument == "--reps") {
      if (!number(options.reps, 1)) return BenchUsageError("--reps needs a count >= 1");
    } else if (argument == "--ubatch") {
      if (!number(options.ubatch, 1)) return BenchUsageError("--ubatch needs a count >= 1");
    } else if (argument == "--bandwidth-mib") {
      uint64_t mib = 0;
      if (!number(mib, 1)) return BenchUsageError("--bandwidth-mib needs a count >= 1");
      options.bandwidth_bytes = mib << 20;
    } else if (argument == "-t" || argument == "--threads") {
      const char* text = value();
      if (!text || !ParseThreadList(text, options.thread_counts)) {
        return BenchUsageError("-t needs a comma-separated list of thread counts, e.g. 1,2");
      }
    } else if (argument == "--json") {
      options.json = true;
    } else if (argument == "--bandwidth") {
      bandwidth_only = true;
    } else if (!argument.empty() && argument[0] == '-') {
      return BenchUsageError("unknown flag " + argument);
    } else if (options.plan_path.empty()) {
      options.plan_path = argument;
    } else {
      return BenchUsageError("unexpected argument " + argument);
    }
  }
  if (options.thread_counts.empty()) {
    options.thread_counts = {static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  }
  if (!bandwidth_only && options.plan_path.empty()) return BenchUsageError("missing the plan file");
  if (bandwidth_only && !options.plan_path.empty()) {
    return BenchUsageError("--bandwidth takes no plan file");
  }

  const std::map<int, double> bandwidths =
      ReadBandwidths(options.thread_counts, options.bandwidth_bytes, options.reps, bandwidth_only);
  if (bandwidth_only) {
    if (!options.json) {
      std::printf("read bandwidth, %d MiB buffer, median of %d:\n",
                  static_cast<int>(options.bandwidth_bytes >> 20), options.reps);
      std::printf("%8s %12s\n", "threads", "GB/s");
    }
    for (int threads : options.thread_counts) {
      if (options.json) {
        nlohmann::json line = {{"threads", threads},
                               {"read_bytes_per_s", bandwidths.at(threads)},
                               {"buffer_bytes", options.bandwidth_bytes}};
        std::printf("%s\n", line.dump().c_str());
      } else {
        std::printf("%8d %12.1f\n", threads, bandwidths.at(threads) / 1e9);
      }
    }
    std::printf("cached in %s\n", BandwidthCachePath().c_str());
    return 0;
  }

  std::vector<BenchResult> results;
  for (int threads : options.thread_counts) {
    absl::StatusOr<BenchResult> result = BenchThreads(options, threads, bandwidths.at(threads));
    if (!result.ok()) return BenchFail(std::string(result.status().message()));
    results.push_back(*result);
    if (options.json) {
      nlohmann::json line = {{"threads", result->threads},
                             {"pp_tok_s", result->pp_tok_s},
                             {"tg_tok_s", result->tg_tok_s},
                             {"ms_per_token", result->ms_per_token},
                             {"peak_rss_bytes", result->peak_rss_bytes},
                             {"mbu", result->mbu},
                             {"prompt_tokens", options.prompt_tokens},
                             {"generated_tokens", options.generated_tokens},
                             {"reps", options.reps},
                             {"load_ms", result->load_ms},
                             {"load_to_first_token_ms", result->load_to_first_token_ms},
                             {"decode_bytes_per_token", result->decode_bytes_per_token},
                             {"read_bytes_per_s", result->bandwidth_bytes_per_s}};
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  if (!options.json) {
    std::printf("plan %s, pp%lld / tg%lld, median of %d\n", options.plan_path.c_str(),
                static_cast<long long>(options.prompt_tokens),
                static_cast<long long>(options.generated_tokens), options.reps);
    std::printf("%7s %11s %11s %9s %12s %12s %12s %6s\n", "threads", "pp tok/s", "tg tok/s",
                "ms/token", "load->1st ms", "peak RSS MB", "read GB/s", "MBU");
    for (const BenchResult& result : results) {
      std::printf("%7d %11.2f %11.2f %9.2f %12.1f %12.1f %12.1f %5.1f%%\n", result.threads,
                  result.pp_tok_s, result.tg_tok_s, result.ms_per_token,
                  result.load_to_first_token_ms, result.peak_rss_bytes / 1e6,
                  result.bandwidth_bytes_per_s / 1e9, result.mbu * 100);
    }
  }
  return 0;
}

}  // namespace llmrt
