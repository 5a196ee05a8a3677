// llmrt-kit bench: what llmrt bench cannot see from above the Backend interface, on GPU 0 (or
// on the CPU, for the kit's no-device half and for comparison).
//
//   llmrt-kit bench PLAN [--batch 1,16] [--context 128] [--steps 32] [--prefill 512] [--reps 3]
//                        [--backend cuda|cpu] [--threads N] [--bandwidth BYTES_PER_S]
//   llmrt-kit probe     (prints the GPU, or "no CUDA device: <reason>" and exits 3)
//
// --backend cuda (default): the plan's CUDA backend on GPU 0 through the kit's RecordingDevice;
// without a GPU it prints "no CUDA device: <reason>" and exits 3. --backend cpu: llmrt's CPU
// backend with --threads threads (default 1), no kernel times; MBU needs --bandwidth (the read
// bandwidth `llmrt bench --bandwidth` measures), without it the JSON has no mbu.
//
// Prints one JSON object (stdout) with:
//   copy_bytes_per_s  CUDA: device-to-device copy of 1 GiB, best of 5, counting bytes read and
//                     written: the DRAM bandwidth a kernel can reach, the MBU denominator;
//                     CPU: --bandwidth;
//   weight_bytes      what a decode step reads besides the experts (engine::DecodeWeightBytes:
//                     every weight but the expert stacks and the kernels' code, an untied
//                     embedding table one row);
//   moe               for a mixture-of-experts plan: layers, experts, top_k and the bytes of
//                     one expert of each layer (engine::ExpertBytes);
//   decode[]          per batch B: B sequences prefilled with --context random tokens, then
//                     --steps decode steps of B tokens (one per sequence) timed on the host
//                     (RunStep returns after the logits are copied back): step_ms (median),
//                     tok_s = B / step, bytes_per_step = weight_bytes + the experts the step's
//                     tokens chose (the batch's union per layer, from the backend's expert
//                     load: engine::ActiveExpertBytes, what llmrt bench counts) + the K/V of
//                     every sequence's context, mbu = bytes_per_step / step / copy_bytes_per_s;
//                     MoE plans: expert_bytes_per_step and active_experts[] (per layer, the
//                     mean over the timed steps of experts chosen); kernels[] (CUDA): per
//                     kernel, launches and device microseconds per step from CUDA events
//                     around each launch (a second pass, so the events do not slow the timed
//                     one);
//   prefill           one sequence of --prefill tokens in one step: ms (median), tok_s and
//                     kernels[] as above.
// A line per decode batch also goes to stderr (step time, bytes, MBU, active experts per layer).
// Exit status: 0 success, 1 an error, 2 a usage error, 3 no CUDA device (--backend cuda).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/engine/model.h"
#include "runtime/plan/plan_reader.h"
#include "tests/kit/kit_device.h"
#include "tests/kit/kit_main.h"

namespace llmrt::kit {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kBlockSize = 16;

struct Options {
  std::string plan_path;
  std::vector<int> batches = {1, 16};
  int context = 128;
  int steps = 32;
  int prefill = 512;
  int reps = 3;
  bool cpu = false;  // --backend cpu
  int threads = 1;
  double bandwidth = 0;  // --bandwidth (CPU); 0: no MBU
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

nlohmann::json KernelTimes(const RecordingDevice* device, int steps) {
  nlohmann::json kernels = nlohmann::json::array();
  if (device == nullptr) return kernels;  // the CPU
  for (const KernelTime& time : device->kernel_times()) {
    kernels.push_back({{"name", time.name},
                       {"launches_per_step", static_cast<double>(time.launches) / steps},
                       {"us_per_step", time.total_ms * 1e3 / steps}});
  }
  return kernels;
}

// B sequences, each with its own contiguous run of blocks.
struct Sequences {
  std::vector<std::vector<int32_t>> block_tables;
  std::vector<int32_t> lengths;

  Sequences(int count, int blocks_each) : lengths(count, 0) {
    for (int s = 0; s < count; ++s) {
      block_tables.emplace_back();
      for (int b = 0; b < blocks_each; ++b) block_tables.back().push_back(s * blocks_each + b);
    }
  }

  void Append(StepBatch& batch, int s, const std::vector<int32_t>& tokens, bool all_logits) {
    StepSequence sequence;
    sequence.first_token = batch.num_tokens();
    sequence.num_tokens = static_cast<int32_t>(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (all_logits || i + 1 == tokens.size()) batch.logit_rows.push_back(batch.num_tokens());
      const int32_t position = lengths[s]++;
      batch.token_ids.push_back(tokens[i]);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(block_tables[s][position / kBlockSize] * kBlockSize +
                                   position % kBlockSize);
    }
    sequence.context_length = lengths[s];
    sequence.block_table = block_tables[s].data();
    sequence.num_blocks = static_cast<int32_t>(block_tables[s].size());
    batch.sequences.push_back(sequence);
  }
};

// The backend a bench runs on: the CUDA one through the kit's RecordingDevice, or the CPU's.
struct BenchBackend {
  std::unique_ptr<Backend> backend;
  RecordingDevice* device = nullptr;  // owned by `backend`; nullptr on the CPU
  std::string table;                  // "cuda:sm_90", ..., or "cpu"
};

absl::StatusOr<BenchBackend> CreateBenchBackend(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                                const Options& options,
                                                int32_t max_tokens_per_step) {
  BackendOptions backend_options;
  backend_options.max_tokens_per_step = max_tokens_per_step;
  // A MoE plan's MBU counts the experts each step chose (engine::ActiveExpertBytes).
  backend_options.record_expert_load = !engine::ExpertBytes(meta).empty();
  BenchBackend result;
  if (options.cpu) {
    // Activations as llmrt runs them by default (int8 for quantized weights), like llmrt bench.
    backend_options.num_threads = options.threads;
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        cpu::CreateCpuBackend(meta, blobs, backend_options);
    if (!backend.ok()) return backend.status();
    result.backend = *std::move(backend);
    result.table = "cpu";
    return result;
  }
  absl::StatusOr<KitBackend> kit = CreateKitBackend(meta, blobs, backend_options);
  if (!kit.ok()) return kit.status();
  result.backend = std::move(kit->backend);
  result.device = kit->device;
  result.table = kit->table_target;
  return result;
}

// The experts of a MoE plan's decode steps: per layer, the sum over steps of experts chosen
// and their bytes (engine::ActiveExpertBytes, the accounting llmrt bench uses).
class ExpertTally {
 public:
  explicit ExpertTally(const plan::PlanMeta& meta)
      : routers_(engine::ExpertBytes(meta)), experts_(routers_.size(), 0.0) {}
  bool moe() const { return !routers_.empty(); }

  absl::Status Add(const Backend& backend) {
    if (!moe()) return absl::OkStatus();
    if (absl::Status status = backend.LastStepExpertLoad(load_); !status.ok()) return status;
    absl::StatusOr<int64_t> bytes = engine::ActiveExpertBytes(routers_, load_, active_);
    if (!bytes.ok()) return bytes.status();
    bytes_ += static_cast<double>(*bytes);
    for (size_t r = 0; r < active_.size(); ++r) experts_[r] += active_[r];
    ++steps_;
    return absl::OkStatus();
  }
  double bytes_per_step() const { return steps_ > 0 ? bytes_ / steps_ : 0.0; }
  // Per layer, the mean experts chosen per step.
  std::vector<double> active_experts() const {
    std::vector<double> mean(experts_.size(), 0.0);
    for (size_t r = 0; r < mean.size(); ++r) mean[r] = steps_ > 0 ? experts_[r] / steps_ : 0.0;
    return mean;
  }

 private:
  std::vector<engine::MoeRouter> routers_;
  ExpertLoad load_;
  std::vector<int32_t> active_;
  std::vector<double> experts_;
  double bytes_ = 0;
  int64_t steps_ = 0;
};

absl::StatusOr<nlohmann::json> Decode(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                      const Options& options, int batch_size,
                                      double copy_bandwidth) {
  absl::StatusOr<BenchBackend> bench =
      CreateBenchBackend(meta, blobs, options, std::max(options.context, batch_size));
  if (!bench.ok()) return bench.status();
  Backend& backend = *bench->backend;
  const int warmup = 4;
  const int positions = options.context + warmup + 2 * options.steps;
  const int blocks_each = (positions + kBlockSize - 1) / kBlockSize;
  if (absl::Status status = backend.AllocateKvCache(batch_size * blocks_each, kBlockSize);
      !status.ok()) {
    return status;
  }
  const double kv_bytes_per_position =
      static_cast<double>(backend.kv_cache_bytes()) / (batch_size * blocks_each * kBlockSize);
  const int64_t vocab = backend.vocab_size();
  std::mt19937 random(1234);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  Sequences sequences(batch_size, blocks_each);
  std::vector<float> logits(static_cast<size_t>(batch_size) * vocab);
  StepBatch batch;
  for (int s = 0; s < batch_size; ++s) {
    std::vector<int32_t> prompt(options.context);
    for (int32_t& id : prompt) id = token(random);
    batch.Clear();
    sequences.Append(batch, s, prompt, false);
    if (absl::Status status = backend.RunStep(batch, logits.data()); !status.ok()) return status;
  }
  auto step = [&]() -> absl::Status {
    batch.Clear();
    for (int s = 0; s < batch_size; ++s) sequences.Append(batch, s, {token(random)}, false);
    return backend.RunStep(batch, logits.data());
  };
  for (int i = 0; i < warmup; ++i) {
    if (absl::Status status = step(); !status.ok()) return status;
  }
  std::vector<double> seconds;
  double context_sum = 0;
  ExpertTally experts(meta);
  for (int i = 0; i < options.steps; ++i) {
    context_sum += sequences.lengths[0] + 1;
    const Clock::time_point start = Clock::now();
    if (absl::Status status = step(); !status.ok()) return status;
    seconds.push_back(Since(start));
    if (absl::Status status = experts.Add(backend); !status.ok()) return status;
  }
  if (bench->device != nullptr) {  // the CPU has no kernel times: no second pass
    if (absl::Status status = bench->device->EnableTiming(true); !status.ok()) return status;
    for (int i = 0; i < options.steps; ++i) {
      if (absl::Status status = step(); !status.ok()) return status;
    }
    (void)bench->device->EnableTiming(false);
  }
  const double step_seconds = Median(seconds);
  const double weight_bytes = static_cast<double>(engine::DecodeWeightBytes(meta));
  const double kv_bytes = kv_bytes_per_position * batch_size * context_sum / options.steps;
  const double bytes = weight_bytes + experts.bytes_per_step() + kv_bytes;
  nlohmann::json result = {{"batch", batch_size},
                           {"table", bench->table},
                           {"context", options.context},
                           {"steps", options.steps},
                           {"step_ms", step_seconds * 1e3},
                           {"tok_s", batch_size / step_seconds},
                           {"bytes_per_step", bytes},
                           {"kv_bytes_per_step", kv_bytes},
                           {"kernels", KernelTimes(bench->device, options.steps)}};
  if (copy_bandwidth > 0) result["mbu"] = bytes / step_seconds / copy_bandwidth;
  std::string line =
      absl::StrFormat("%s batch %d (%s): %.3f ms/step, %.1f MB/step", options.plan_path, batch_size,
                      bench->table, step_seconds * 1e3, bytes / 1e6);
  if (copy_bandwidth > 0) {
    absl::StrAppendFormat(&line, ", MBU %.1f%%", 100 * bytes / step_seconds / copy_bandwidth);
  }
  if (experts.moe()) {
    result["expert_bytes_per_step"] = experts.bytes_per_step();
    result["active_experts"] = experts.active_experts();
    absl::StrAppendFormat(
        &line, "; experts %.1f MB/step, active per layer:", experts.bytes_per_step() / 1e6);
    for (double active : experts.active_experts()) absl::StrAppendFormat(&line, " %.1f", active);
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  return result;
}

absl::StatusOr<nlohmann::json> Prefill(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                       const Options& options) {
  absl::StatusOr<BenchBackend> bench = CreateBenchBackend(meta, blobs, options, options.prefill);
  if (!bench.ok()) return bench.status();
  Backend& backend = *bench->backend;
  const int blocks = (options.prefill + kBlockSize - 1) / kBlockSize;
  if (absl::Status status = backend.AllocateKvCache(blocks, kBlockSize); !status.ok()) {
    return status;
  }
  std::mt19937 random(4321);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(backend.vocab_size() - 1));
  std::vector<int32_t> prompt(options.prefill);
  for (int32_t& id : prompt) id = token(random);
  std::vector<float> logits(backend.vocab_size());
  StepBatch batch;
  auto run = [&]() -> absl::Status {
    Sequences sequences(1, blocks);
    batch.Clear();
    sequences.Append(batch, 0, prompt, false);
    return backend.RunStep(batch, logits.data());
  };
  std::vector<double> seconds;
  for (int rep = -1; rep < options.reps; ++rep) {
    const Clock::time_point start = Clock::now();
    if (absl::Status status = run(); !status.ok()) return status;
    if (rep >= 0) seconds.push_back(Since(start));
  }
  if (bench->device != nullptr) {  // the CPU has no kernel times: no second pass
    if (absl::Status status = bench->device->EnableTiming(true); !status.ok()) return status;
    for (int rep = 0; rep < options.reps; ++rep) {
      if (absl::Status status = run(); !status.ok()) return status;
    }
  }
  const double step_seconds = Median(seconds);
  return nlohmann::json{{"tokens", options.prefill},
                        {"ms", step_seconds * 1e3},
                        {"tok_s", options.prefill / step_seconds},
                        {"kernels", KernelTimes(bench->device, options.reps)}};
}

int Usage(const std::string& message) {
  std::fprintf(stderr,
               "llmrt-kit bench: %s\nusage: llmrt-kit bench PLAN [--batch 1,16] [--context 128] "
               "[--steps 32] [--prefill 512] [--reps 3] [--backend cuda|cpu] [--threads N] "
               "[--bandwidth BYTES_PER_S]\n",
               message.c_str());
  return 2;
}

}  // namespace

int ProbeMain() {
  absl::StatusOr<cuda::GpuInfo> gpu = cuda::ProbeGpu(0);
  if (!gpu.ok()) {
    std::printf("no CUDA device: %s\n", std::string(gpu.status().message()).c_str());
    return 3;
  }
  std::printf("%s, sm_%d, driver %d\n", gpu->name.c_str(), gpu->sm_version, gpu->driver_version);
  return 0;
}

int BenchMain(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind("--", 0) == 0) {
      if (i + 1 >= argc) return Usage(argument + " needs a value");
      const std::string value = argv[++i];
      int* number = argument == "--context"   ? &options.context
                    : argument == "--steps"   ? &options.steps
                    : argument == "--prefill" ? &options.prefill
                    : argument == "--reps"    ? &options.reps
                                              : nullptr;
      if (argument == "--backend") {
        if (value != "cuda" && value != "cpu") {
          return Usage("--backend: expected cuda or cpu, found " + value);
        }
        options.cpu = value == "cpu";
      } else if (argument == "--threads") {
        if (!absl::SimpleAtoi(value, &options.threads) || options.threads < 1) {
          return Usage("--threads needs a count >= 1, found " + value);
        }
      } else if (argument == "--bandwidth") {
        if (!absl::SimpleAtod(value, &options.bandwidth) || !(options.bandwidth > 0)) {
          return Usage("--bandwidth needs bytes per second > 0, found " + value);
        }
      } else if (argument == "--batch") {
        options.batches.clear();
        for (absl::string_view part : absl::StrSplit(value, ',')) {
          int batch;
          if (!absl::SimpleAtoi(part, &batch) || batch < 1) return Usage("bad --batch " + value);
          options.batches.push_back(batch);
        }
      } else if (number == nullptr) {
        return Usage("unknown flag " + argument);
      } else if (!absl::SimpleAtoi(value, number) || *number < 1) {
        return Usage(argument + " needs a count >= 1, found " + value);
      }
    } else if (options.plan_path.empty()) {
      options.plan_path = argument;
    } else {
      return Usage("unexpected argument " + argument);
    }
  }
  // Each flag belongs to one backend: one given for the other would be ignored, so it is refused.
  if (!options.cpu && (options.threads != 1 || options.bandwidth > 0)) {
    return Usage(
        "--threads and --bandwidth are for --backend cpu (the GPU's bandwidth is measured)");
  }
  if (options.plan_path.empty()) return Usage("missing the plan file");
  nlohmann::json result = {{"plan", options.plan_path}};
  if (!options.cpu) {
    absl::StatusOr<cuda::GpuInfo> gpu = cuda::ProbeGpu(0);
    if (!gpu.ok()) {
      std::printf("no CUDA device: %s\n", std::string(gpu.status().message()).c_str());
      return 3;
    }
    result["device"] = gpu->name;
    result["sm"] = gpu->sm_version;
    result["driver"] = gpu->driver_version;
  } else {
    result["device"] = "cpu";
    result["threads"] = options.threads;
  }
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "llmrt-kit bench: %s\n", std::string(status.message()).c_str());
    return 1;
  };
  absl::StatusOr<std::unique_ptr<plan::Plan>> plan = plan::Plan::Open(options.plan_path);
  if (!plan.ok()) return fail(plan.status());
  const plan::Plan* plan_pointer = plan->get();
  const plan::PlanMeta& meta = (*plan)->meta();
  BlobLookup blobs = [plan_pointer](int index) { return plan_pointer->blob(index); };
  double bandwidth = options.bandwidth;
  if (!options.cpu) {
    absl::StatusOr<double> measured = MeasureCopyBandwidth(uint64_t{1} << 30, 5);
    if (!measured.ok()) return fail(measured.status());
    bandwidth = *measured;
  }
  if (bandwidth > 0) result["copy_bytes_per_s"] = bandwidth;
  result["weight_bytes"] = engine::DecodeWeightBytes(meta);
  if (const std::vector<engine::MoeRouter> routers = engine::ExpertBytes(meta); !routers.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (const engine::MoeRouter& router : routers) {
      layers.push_back({{"experts", router.num_experts},
                        {"top_k", router.top_k},
                        {"bytes_per_expert", router.bytes_per_expert}});
    }
    result["moe"] = layers;
  }
  result["decode"] = nlohmann::json::array();
  for (int batch : options.batches) {
    absl::StatusOr<nlohmann::json> decode = Decode(meta, blobs, options, batch, bandwidth);
    if (!decode.ok()) return fail(decode.status());
    result["decode"].push_back(*decode);
  }
  absl::StatusOr<nlohmann::json> prefill = Prefill(meta, blobs, options);
  if (!prefill.ok()) return fail(prefill.status());
  result["prefill"] = *prefill;
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace llmrt::kit
