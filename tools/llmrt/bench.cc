// llmrt bench: what a plan achieves on this machine, per thread count.
//
//   llmrt bench PLAN [-p 512] [-n 128] [-t 1,2] [--reps 5] [--ubatch 512] [--json]
//                    [--batch B] [--backend auto|cpu|cuda]
//   llmrt bench --bandwidth [-t 1,2] [--reps 5] [--bandwidth-mib 1024] [--json]
//
// -t defaults to one thread per core the process may use (ThreadPool::DefaultThreadCount).
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
//              With -d D (llama-bench's -d), the BOS prompt is followed by D random tokens,
//              prefilled once (not timed) and kept: each repetition's n steps continue the
//              previous one's, so they attend over D + 2 + k n ... positions (k: repetitions
//              before; keep n * reps small against D).
//              With --batch B, B sessions decode together: each of the n steps appends one
//              token to every session (Model::AppendBatch, one backend step), tg_tok_s counts
//              all B * n tokens, and the bytes a step reads are the weights once plus every
//              session's KV (decode_bytes_per_step). Each step appends random tokens, drawn
//              before the timed steps, not the sessions' greedy choices: sessions started
//              alike stay alike, and a batch of one repeated row reads a MoE plan's experts
//              as one token does (Qwen3-MoE preset, batch 16: 8.0 of 64 experts per layer and
//              step; distinct first tokens then greedy 24.4; random tokens 28.1, the synthetic
//              router favouring some experts).
//   mbu        bytes the n decode steps must read (every weight once per step, except that an
//              untied embedding table contributes one row, plus the KV cache up to each step's
//              position) / their time / the machine's read bandwidth at this thread count.
//              MoE plans count, of each MoE layer's experts, those the step's tokens chose
//              (each once: the batch's union), as the backend reported them
//              (Model::last_step_active_expert_bytes, averaged over the timed steps).
//   moe_active_experts  MoE plans: experts chosen per MoE layer and decode step, mean over the
//              timed steps (top_k for one sequence; up to num_experts for a batch).
//   peak_rss_bytes  getrusage's ru_maxrss of the process so far (models are loaded one after
//              another, so this is the largest of them; weights are mmapped and count as they
//              are touched).
// Every rate is the median over --reps repetitions, after one untimed warm-up of each.
// --backend picks the backend as for llmrt run (default auto: CUDA when the plan has kernels
// for the GPU and one works); "backend" in the output names the one that ran. On a GPU the
// read bandwidth (and so mbu) is still the host's: the GPU kit (docs/cuda.md) divides
// decode_bytes_per_step by the device's own copy bandwidth instead.
//
// Read bandwidth: a read-sum over a buffer of --bandwidth-mib MiB (default 1 GiB, 32x this
// machine's 32 MiB L3, so caches cannot serve it, on transparent huge pages), split evenly
// over the threads, each pinned to its own CPU and reading 4 interleaved streams with AVX2
// loads; the best of --reps passes after one warm-up. Cached per thread count and buffer size
// in a plain text file, $LLMRT_BANDWIDTH_CACHE or ~/.cache/llmrt/bandwidth.txt: a version line,
// then one line "<threads> <buffer_bytes> <bytes_per_second>" each; `--bandwidth` re-measures
// (and a cache from an older probe version is ignored).
//
// --json prints one JSON object per thread count, one per line (JSON Lines).
#include "tools/llmrt/bench.h"

#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
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
#include "absl/types/span.h"
#include "nlohmann/json.hpp"
#include "runtime/engine/model.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/sampling/sampler.h"
#include "runtime/threading/thread_pool.h"

namespace llmrt {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kUsageError = 2;
constexpr int kError = 1;
constexpr char kBenchUsage[] =
    "usage: llmrt bench PLAN [-p 512] [-n 128] [-d 0] [-t 1,2] [--reps 5] [--ubatch 512] [--json]\n"
    "                        [--kv-cache f32|f16|bf16|int8] [--quant-activations int8|f32]\n"
    "                        [--batch 1] [--backend auto|cpu|cuda]\n"
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

// The probe must reach what the hardware can deliver, or decode's MBU exceeds 100%: one
// sequential stream with a dependent add chain reads ~35% below what a GEMV over 4 panels
// achieves here. So each thread reads kStreams sub-ranges of its slice in lock-step (four
// hardware prefetch streams, like a decode kernel's four panels), with AVX2 loads where the
// CPU has them (the tool itself is built for baseline x86-64), into independent accumulators;
// threads are pinned to distinct CPUs so none migrates mid-pass, and the result is the best
// pass of --reps (interference only ever slows a pass down).
constexpr int kStreams = 4;
constexpr size_t kStreamStepBytes = 64;  // one cache line per stream per iteration

// Sums `bytes` (a multiple of kStreams * kStreamStepBytes) as kStreams interleaved streams.
template <typename Lanes>
uint64_t ReadStreams(const uint8_t* data, size_t bytes) {
  constexpr int kWords = sizeof(Lanes) / sizeof(uint64_t);
  const size_t stream_bytes = bytes / kStreams;
  Lanes sum[kStreams][kStreamStepBytes / sizeof(Lanes)] = {};
  for (size_t offset = 0; offset < stream_bytes; offset += kStreamStepBytes) {
#pragma GCC unroll 4
    for (int stream = 0; stream < kStreams; ++stream) {
      const uint8_t* line = data + stream * stream_bytes + offset;
#pragma GCC unroll 4
      for (size_t part = 0; part < kStreamStepBytes / sizeof(Lanes); ++part) {
        Lanes value;
        std::memcpy(&value, line + part * sizeof(Lanes), sizeof(Lanes));
        sum[stream][part] += value;
      }
    }
  }
  uint64_t result = 0;
  for (const auto& stream : sum) {
    for (const Lanes& lanes : stream) {
      for (int word = 0; word < kWords; ++word) result += lanes[word];
    }
  }
  return result;
}

typedef uint64_t Lanes16 __attribute__((vector_size(16)));
typedef uint64_t Lanes32 __attribute__((vector_size(32)));

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) uint64_t ReadStreamsAvx2(const uint8_t* data, size_t bytes) {
  return ReadStreams<Lanes32>(data, bytes);
}
#endif

uint64_t ReadSum(const uint8_t* data, size_t bytes) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return ReadStreamsAvx2(data, bytes);
#endif
  return ReadStreams<Lanes16>(data, bytes);
}

// The CPUs this process may run on, in order.
std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
    }
  }
  return cpus;
}

void PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// Best bytes/s of `reps` passes over `buffer` with `threads` threads.
double MeasureReadBandwidth(const uint8_t* buffer, size_t buffer_bytes, int threads, int reps) {
  const size_t granule = kStreams * kStreamStepBytes;
  const size_t slice = buffer_bytes / threads / granule * granule;
  const std::vector<int> cpus = AllowedCpus();
  std::atomic<uint64_t> sink{0};
  double best = 0;
  // Workers run on their own thread objects so the caller's affinity is left as it was.
  for (int rep = -1; rep < reps; ++rep) {  // rep -1: warm-up (faults, frequency ramp)
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    for (int thread = 0; thread < threads; ++thread) {
      workers.emplace_back([&, thread] {
        if (!cpus.empty()) PinCurrentThread(cpus[thread % cpus.size()]);
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        sink += ReadSum(buffer + thread * slice, slice);
      });
    }
    while (ready.load() < threads) std::this_thread::yield();
    const Clock::time_point start = Clock::now();
    go.store(true, std::memory_order_release);
    for (std::thread& worker : workers) worker.join();
    const double seconds = Seconds(start, Clock::now());
    if (rep >= 0) best = std::max(best, static_cast<double>(slice) * threads / seconds);
  }
  return best;
}

// A buffer for the probe: 2 MiB-aligned and marked for transparent huge pages, so TLB misses
// (one per 4 KiB page otherwise, 262144 per GiB) do not count against the memory system.
struct ProbeBuffer {
  explicit ProbeBuffer(size_t size) : bytes(size) {
    constexpr size_t kHugePage = size_t{2} << 20;
    data = static_cast<uint8_t*>(
        std::aligned_alloc(kHugePage, (size + kHugePage - 1) & ~(kHugePage - 1)));
    if (data == nullptr) return;
    madvise(data, size, MADV_HUGEPAGE);
    // Non-zero contents so no page stays the shared zero page (which would read from cache).
    for (size_t i = 0; i < size; i += 4096) data[i] = static_cast<uint8_t>(i >> 12);
  }
  ~ProbeBuffer() { std::free(data); }
  ProbeBuffer(const ProbeBuffer&) = delete;
  ProbeBuffer& operator=(const ProbeBuffer&) = delete;
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

fs::path BandwidthCachePath() {
  if (const char* path = std::getenv("LLMRT_BANDWIDTH_CACHE"); path && *path) return path;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache && *cache) {
    return fs::path(cache) / "llmrt" / "bandwidth.txt";
  }
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : "/tmp") / ".cache" / "llmrt" / "bandwidth.txt";
}

constexpr char kBandwidthCacheHeader[] =
    "# llmrt bench --bandwidth v2 (4 streams/thread, pinned, best of reps): <threads> "
    "<buffer_bytes> <read bytes/s>";

// (threads, buffer bytes) -> bytes/s. A missing or unreadable cache is empty; malformed lines
// are skipped (the cache is a convenience, never a reason to fail).
using BandwidthTable = std::map<std::pair<int, uint64_t>, double>;

BandwidthTable ReadBandwidthCache(const fs::path& path) {
  BandwidthTable table;
  std::ifstream in(path);
  std::string line;
  // A cache written by an older probe (another first line) under-reads: measure afresh.
  if (!std::getline(in, line) || line != kBandwidthCacheHeader) return table;
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
    out << kBandwidthCacheHeader << "\n";
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
  std::unique_ptr<ProbeBuffer> buffer;
  bool measured = false;
  for (int threads : thread_counts) {
    auto cached = table.find({threads, buffer_bytes});
    if (!remeasure && cached != table.end()) {
      result[threads] = cached->second;
      continue;
    }
    if (buffer == nullptr) buffer = std::make_unique<ProbeBuffer>(buffer_bytes);
    if (buffer->data == nullptr) {
      std::fprintf(stderr, "llmrt bench: warning: cannot allocate a %llu-byte probe buffer\n",
                   static_cast<unsigned long long>(buffer_bytes));
      result[threads] = 0;
      continue;
    }
    result[threads] = table[{threads, buffer_bytes}] =
        MeasureReadBandwidth(buffer->data, buffer_bytes, threads, std::max(reps, 1));
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
  int64_t depth = 0;  // -d: context tokens before the timed decode steps
  std::vector<int> thread_counts;
  int reps = 5;
  int32_t ubatch = 512;
  bool json = false;
  uint64_t bandwidth_bytes = uint64_t{1} << 30;
  plan::DType kv_cache_dtype = plan::DTYPE_UNSPECIFIED;  // --kv-cache; unset: the plan's
  QuantizedActivations quantized_activations = QuantizedActivations::kInt8;  // --quant-activations
  int32_t batch = 1;  // --batch: sessions decoding together
  engine::BackendChoice backend = engine::BackendChoice::kAuto;
};

struct BenchResult {
  int threads = 0;
  double load_ms = 0;  // Model::Load alone: open, validate, map, set up the backend
  double load_to_first_token_ms = 0;
  double pp_tok_s = 0;
  double tg_tok_s = 0;
  double ms_per_token = 0;
  uint64_t peak_rss_bytes = 0;
  double decode_bytes_per_token = 0;        // mean over the n steps, weights + KV
  double decode_bytes_per_step = 0;         // the same for a step of --batch tokens
  int32_t moe_layers = 0;                   // the plan's ROUTER ops
  double moe_active_experts = 0;            // per MoE layer and decode step, mean
  double active_expert_bytes_per_step = 0;  // of decode_bytes_per_step: the chosen experts
  std::string backend;
  double bandwidth_bytes_per_s = 0;
  double mbu = 0;
};

uint64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Greedy sampling as the runtime's sampler does it.
int32_t ArgMax(const std::vector<float>& logits) {
  return sampling::ArgMax(logits.data(), static_cast<int32_t>(logits.size()));
}

// Positions the tg phase needs: BOS, then with -d the context and every repetition's steps
// (which continue one another), else one repetition's steps.
int64_t DecodePositions(const BenchOptions& options) {
  return 1 + options.generated_tokens * (options.depth > 0 ? options.reps + 1 : 1) + options.depth;
}

// The expert load of a MoE plan's timed decode steps, summed over steps (and repetitions).
struct ExpertTally {
  double bytes = 0;    // the chosen experts' bytes
  double experts = 0;  // experts chosen, over every MoE layer
  int64_t steps = 0;
  void Add(const engine::Model& model) {
    bytes += static_cast<double>(model.last_step_active_expert_bytes());
    for (int32_t active : model.last_step_active_experts()) experts += active;
    ++steps;
  }
};

// `steps` decode steps of one token for every request's session together, step s appending
// tokens[s * batch + b] to session b; returns their seconds. Each step's expert load goes to
// `tally`, if given.
absl::StatusOr<double> DecodeBatch(engine::Model& model,
                                   std::vector<engine::AppendRequest>& requests,
                                   absl::Span<const int32_t> tokens, int64_t steps,
                                   ExpertTally* tally) {
  const size_t batch = requests.size();
  const Clock::time_point start = Clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    for (size_t b = 0; b < batch; ++b) requests[b].tokens.assign(1, tokens[step * batch + b]);
    if (absl::Status status = model.AppendBatch(absl::MakeSpan(requests)); !status.ok()) {
      return status;
    }
    if (tally != nullptr) tally->Add(model);
  }
  return Seconds(start, Clock::now());
}

// Fills the expert figures of `result` from the timed steps' tally; returns the mean bytes of
// chosen experts per step (0 for a dense plan).
double ExpertFigures(const engine::Model& model, const ExpertTally& tally, BenchResult& result) {
  result.moe_layers = static_cast<int32_t>(model.moe_routers().size());
  if (result.moe_layers == 0 || tally.steps == 0) return 0.0;
  result.moe_active_experts =
      tally.experts / (static_cast<double>(tally.steps) * result.moe_layers);
  result.active_expert_bytes_per_step = tally.bytes / static_cast<double>(tally.steps);
  return result.active_expert_bytes_per_step;
}

absl::StatusOr<BenchResult> BenchThreads(const BenchOptions& options, int threads,
                                         double bandwidth) {
  BenchResult result;
  result.threads = threads;
  engine::ModelOptions model_options;
  model_options.num_threads = threads;
  model_options.max_tokens_per_step = options.ubatch;
  // With --batch each session holds whole blocks: room for one more block (of up to 64
  // tokens) per session than its positions.
  model_options.kv_cache_tokens = std::max(
      options.prompt_tokens, options.batch > 1 ? (DecodePositions(options) + 64) * options.batch
                                               : DecodePositions(options));
  model_options.backend = options.backend;
  model_options.kv_cache_dtype = options.kv_cache_dtype;
  model_options.quantized_activations = options.quantized_activations;

  const Clock::time_point load_start = Clock::now();
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(options.plan_path, model_options);
  if (!model.ok()) return model.status();
  result.load_ms = Seconds(load_start, Clock::now()) * 1e3;
  result.backend = (*model)->backend().name();
  const plan::PlanMeta& meta = (*model)->meta();
  const int64_t vocab = (*model)->vocab_size();
  const int64_t needed = std::max(options.prompt_tokens, DecodePositions(options));
  if (needed > (*model)->max_context()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: -p %d / -d %d / -n %d need %d positions; the model holds %d",
                        options.plan_path, options.prompt_tokens, options.depth,
                        options.generated_tokens, needed, (*model)->max_context()));
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
  ExpertTally tally;  // timed steps only
  std::vector<int32_t> context(options.depth);
  for (int32_t& id : context) id = token(random);
  if (options.generated_tokens > 0 && options.batch > 1) {
    // Every session starts from BOS (+ the -d context) on each repetition.
    std::vector<std::unique_ptr<engine::Session>> sessions;
    std::vector<engine::AppendRequest> requests(options.batch);
    std::vector<int32_t> tokens(options.generated_tokens * options.batch);
    for (int32_t b = 0; b < options.batch; ++b) sessions.push_back((*model)->NewSession());
    for (int rep = -1; rep < options.reps; ++rep) {
      for (int32_t& id : tokens) id = token(random);
      for (int32_t b = 0; b < options.batch; ++b) {
        sessions[b]->Reset();
        std::vector<int32_t> prompt = {bos};
        prompt.insert(prompt.end(), context.begin(), context.end());
        requests[b].session = sessions[b].get();
        requests[b].tokens = prompt;
      }
      if (absl::Status status = (*model)->AppendBatch(absl::MakeSpan(requests)); !status.ok()) {
        return status;
      }
      absl::StatusOr<double> seconds = DecodeBatch(
          **model, requests, tokens, options.generated_tokens, rep >= 0 ? &tally : nullptr);
      if (!seconds.ok()) return seconds.status();
      if (rep >= 0) tg_seconds.push_back(*seconds);
    }
    const double seconds = Median(tg_seconds);
    const double n = static_cast<double>(options.generated_tokens);
    result.tg_tok_s = options.batch * n / seconds;
    result.ms_per_token = 1e3 * seconds / n;  // per step: what each session waits per token
    const double kv_bytes_per_position = static_cast<double>((*model)->kv_block_bytes()) /
                                         static_cast<double>((*model)->kv_block_size());
    const double positions_read =
        n * (n + 3) / 2 + n * static_cast<double>(options.depth);  // per session, as below
    const double weight_bytes = static_cast<double>(engine::DecodeWeightBytes(meta)) +
                                ExpertFigures(**model, tally, result);
    const double total_bytes =
        n * weight_bytes + options.batch * kv_bytes_per_position * positions_read;
    result.decode_bytes_per_step = total_bytes / n;
    result.decode_bytes_per_token = total_bytes / (n * options.batch);
    result.bandwidth_bytes_per_s = bandwidth;
    if (bandwidth > 0) result.mbu = total_bytes / seconds / bandwidth;
  } else if (options.generated_tokens > 0) {
    for (int rep = -1; rep < options.reps; ++rep) {
      if (rep == -1 || context.empty()) {
        session->Reset();
        logits = session->Append({bos}, false);
        if (!logits.ok()) return logits.status();
        if (!context.empty()) {
          logits = session->Append(context, false);
          if (!logits.ok()) return logits.status();
        }
      }
      const Clock::time_point start = Clock::now();
      for (int64_t step = 0; step < options.generated_tokens; ++step) {
        logits = session->Append({ArgMax(*logits)}, false);
        if (!logits.ok()) return logits.status();
        if (rep >= 0) tally.Add(**model);
      }
      if (rep >= 0) tg_seconds.push_back(Seconds(start, Clock::now()));
    }
    const double seconds = Median(tg_seconds);
    result.tg_tok_s = options.generated_tokens / seconds;
    result.ms_per_token = 1e3 / result.tg_tok_s;

    // Step s (0-based) appends the token at position d + s + 1 and attends over d + s + 2
    // positions.
    // In the cache's dtype, I8 scales included.
    const double kv_bytes_per_position = static_cast<double>((*model)->kv_block_bytes()) /
                                         static_cast<double>((*model)->kv_block_size());
    const double n = static_cast<double>(options.generated_tokens);
    const double depth = static_cast<double>(options.depth);
    const double positions_read = n * (n + 3) / 2 + n * depth;  // sum over s of (d + s + 2)
    const double weight_bytes = static_cast<double>(engine::DecodeWeightBytes(meta)) +
                                ExpertFigures(**model, tally, result);
    const double total_bytes = n * weight_bytes + kv_bytes_per_position * positions_read;
    result.decode_bytes_per_token = total_bytes / n;
    result.decode_bytes_per_step = result.decode_bytes_per_token;
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
    } else if (argument == "-d" || argument == "--depth") {
      if (!number(options.depth, 0)) return BenchUsageError("-d needs a count >= 0");
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
    } else if (argument == "--kv-cache") {
      const char* text = value();
      absl::StatusOr<plan::DType> kv_dtype = kv::ParseKvDType(text != nullptr ? text : "");
      if (!kv_dtype.ok()) return BenchUsageError(std::string(kv_dtype.status().message()));
      options.kv_cache_dtype = *kv_dtype;
    } else if (argument == "--quant-activations") {
      const char* text = value();
      absl::StatusOr<QuantizedActivations> mode =
          engine::ParseQuantizedActivations(text != nullptr ? text : "");
      if (!mode.ok()) return BenchUsageError(std::string(mode.status().message()));
      options.quantized_activations = *mode;
    } else if (argument == "--batch") {
      if (!number(options.batch, 1)) return BenchUsageError("--batch needs a count >= 1");
    } else if (argument == "--backend") {
      const char* given = value();
      const std::string text = given != nullptr ? given : "";
      if (text == "auto") {
        options.backend = engine::BackendChoice::kAuto;
      } else if (text == "cpu") {
        options.backend = engine::BackendChoice::kCpu;
      } else if (text == "cuda") {
        options.backend = engine::BackendChoice::kCuda;
      } else {
        return BenchUsageError("--backend: expected auto, cpu or cuda, found \"" + text + "\"");
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
    options.thread_counts = {threading::ThreadPool::DefaultThreadCount()};
  }
  if (!bandwidth_only && options.plan_path.empty()) return BenchUsageError("missing the plan file");
  if (bandwidth_only && !options.plan_path.empty()) {
    return BenchUsageError("--bandwidth takes no plan file");
  }

  const std::map<int, double> bandwidths =
      ReadBandwidths(options.thread_counts, options.bandwidth_bytes, options.reps, bandwidth_only);
  if (bandwidth_only) {
    if (!options.json) {
      std::printf("read bandwidth, %d MiB buffer, best of %d:\n",
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
                             {"depth", options.depth},
                             {"reps", options.reps},
                             {"load_ms", result->load_ms},
                             {"load_to_first_token_ms", result->load_to_first_token_ms},
                             {"decode_bytes_per_token", result->decode_bytes_per_token},
                             {"read_bytes_per_s", result->bandwidth_bytes_per_s},
                             {"batch", options.batch},
                             {"backend", result->backend},
                             {"decode_bytes_per_step", result->decode_bytes_per_step}};
      if (result->moe_layers > 0) {
        line["moe_layers"] = result->moe_layers;
        line["moe_active_experts"] = result->moe_active_experts;
        line["active_expert_bytes_per_step"] = result->active_expert_bytes_per_step;
      }
      std::printf("%s\n", line.dump().c_str());
      std::fflush(stdout);
    }
  }
  if (!options.json) {
    std::printf("plan %s, pp%lld / tg%lld @ d%lld, batch %d, %s backend, median of %d\n",
                options.plan_path.c_str(), static_cast<long long>(options.prompt_tokens),
                static_cast<long long>(options.generated_tokens),
                static_cast<long long>(options.depth), options.batch,
                results.empty() ? "" : results.front().backend.c_str(), options.reps);
    std::printf("%7s %11s %11s %9s %12s %12s %12s %6s\n", "threads", "pp tok/s", "tg tok/s",
                "ms/token", "load->1st ms", "peak RSS MB", "read GB/s", "MBU");
    for (const BenchResult& result : results) {
      std::printf("%7d %11.2f %11.2f %9.2f %12.1f %12.1f %12.1f %5.1f%%\n", result.threads,
                  result.pp_tok_s, result.tg_tok_s, result.ms_per_token,
                  result.load_to_first_token_ms, result.peak_rss_bytes / 1e6,
                  result.bandwidth_bytes_per_s / 1e9, result.mbu * 100);
    }
    for (const BenchResult& result : results) {
      if (result.moe_layers == 0 || options.generated_tokens == 0) continue;
      std::printf(
          "%d threads: %d MoE layers, %.2f experts active per layer and decode step; a step reads "
          "%.1f MB, of which %.1f MB of chosen experts (MBU counts those)\n",
          result.threads, result.moe_layers, result.moe_active_experts,
          result.decode_bytes_per_step / 1e6, result.active_expert_bytes_per_step / 1e6);
    }
  }
  return 0;
}

}  // namespace llmrt
