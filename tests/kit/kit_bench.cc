// llmrt-kit bench: what llmrt bench cannot see from above the Backend interface, on GPU 0.
//
//   llmrt-kit bench PLAN [--batch 1,16] [--context 128] [--steps 32] [--prefill 512] [--reps 3]
//   llmrt-kit probe     (prints the GPU, or "no CUDA device: <reason>" and exits 3)
//
// Prints one JSON object (stdout) with:
//   copy_bytes_per_s  device-to-device copy of 1 GiB, best of 5, counting bytes read and
//                     written: the DRAM bandwidth a kernel can reach, the MBU denominator;
//   decode[]          per batch B: B sequences prefilled with --context random tokens, then
//                     --steps decode steps of B tokens (one per sequence) timed on the host
//                     (RunStep returns after the logits are copied back): step_ms (median),
//                     tok_s = B / step, bytes_per_step = the weights the step reads (every
//                     tensor but the kernels' code, an untied embedding table one row per
//                     token) + the K/V of every sequence's context, mbu = bytes_per_step /
//                     step / copy_bytes_per_s; kernels[]: per kernel, launches and device
//                     microseconds per step from CUDA events around each launch (a second
//                     pass, so the events do not slow the timed one);
//   prefill           one sequence of --prefill tokens in one step: ms (median), tok_s and
//                     kernels[] as above.
// Exit status: 0 success, 1 an error, 2 a usage error, 3 no CUDA device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
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
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t WeightBytesPerStep(const plan::PlanMeta& meta, int batch) {
  int64_t bytes = 0;
  for (const plan::Tensor& tensor : meta.tensors()) {
    if (tensor.name().rfind("cuda.", 0) == 0) continue;
    int64_t size = static_cast<int64_t>(tensor.size_bytes());
    if (tensor.name() == "model.embed_tokens.weight" && !meta.config().tie_word_embeddings() &&
        tensor.shape_size() > 0 && tensor.shape(0) > 0) {
      size = size / tensor.shape(0) * batch;
    }
    bytes += size;
  }
  return bytes;
}

nlohmann::json KernelTimes(const RecordingDevice& device, int steps) {
  nlohmann::json kernels = nlohmann::json::array();
  for (const KernelTime& time : device.kernel_times()) {
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

absl::StatusOr<nlohmann::json> Decode(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                      const Options& options, int batch_size,
                                      double copy_bandwidth) {
  BackendOptions backend_options;
  backend_options.max_tokens_per_step = std::max(options.context, batch_size);
  absl::StatusOr<KitBackend> kit = CreateKitBackend(meta, blobs, backend_options);
  if (!kit.ok()) return kit.status();
  cuda::KernelStepBackend& backend = *kit->backend;
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
  for (int i = 0; i < options.steps; ++i) {
    context_sum += sequences.lengths[0] + 1;
    const Clock::time_point start = Clock::now();
    if (absl::Status status = step(); !status.ok()) return status;
    seconds.push_back(Since(start));
  }
  if (absl::Status status = kit->device->EnableTiming(true); !status.ok()) return status;
  for (int i = 0; i < options.steps; ++i) {
    if (absl::Status status = step(); !status.ok()) return status;
  }
  (void)kit->device->EnableTiming(false);
  const double step_seconds = Median(seconds);
  const double bytes = static_cast<double>(WeightBytesPerStep(meta, batch_size)) +
                       kv_bytes_per_position * batch_size * context_sum / options.steps;
  return nlohmann::json{{"batch", batch_size},
                        {"table", kit->table_target},
                        {"context", options.context},
                        {"steps", options.steps},
                        {"step_ms", step_seconds * 1e3},
                        {"tok_s", batch_size / step_seconds},
                        {"bytes_per_step", bytes},
                        {"mbu", bytes / step_seconds / copy_bandwidth},
                        {"kernels", KernelTimes(*kit->device, options.steps)}};
}

absl::StatusOr<nlohmann::json> Prefill(const plan::PlanMeta& meta, const BlobLookup& blobs,
                                       const Options& options) {
  BackendOptions backend_options;
  backend_options.max_tokens_per_step = options.prefill;
  absl::StatusOr<KitBackend> kit = CreateKitBackend(meta, blobs, backend_options);
  if (!kit.ok()) return kit.status();
  cuda::KernelStepBackend& backend = *kit->backend;
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
  if (absl::Status status = kit->device->EnableTiming(true); !status.ok()) return status;
  for (int rep = 0; rep < options.reps; ++rep) {
    if (absl::Status status = run(); !status.ok()) return status;
  }
  const double step_seconds = Median(seconds);
  return nlohmann::json{{"tokens", options.prefill},
                        {"ms", step_seconds * 1e3},
                        {"tok_s", options.prefill / step_seconds},
                        {"kernels", KernelTimes(*kit->device, options.reps)}};
}

int Usage(const std::string& message) {
  std::fprintf(stderr,
               "llmrt-kit bench: %s\nusage: llmrt-kit bench PLAN [--batch 1,16] [--context 128] "
               "[--steps 32] [--prefill 512] [--reps 3]\n",
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
      if (argument == "--batch") {
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
  absl::StatusOr<cuda::GpuInfo> gpu = cuda::ProbeGpu(0);
  if (!gpu.ok()) {
    std::printf("no CUDA device: %s\n", std::string(gpu.status().message()).c_str());
    return 3;
  }
  if (options.plan_path.empty()) return Usage("missing the plan file");
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "llmrt-kit bench: %s\n", std::string(status.message()).c_str());
    return 1;
  };
  absl::StatusOr<std::unique_ptr<plan::Plan>> plan = plan::Plan::Open(options.plan_path);
  if (!plan.ok()) return fail(plan.status());
  const plan::Plan* plan_pointer = plan->get();
  BlobLookup blobs = [plan_pointer](int index) { return plan_pointer->blob(index); };
  absl::StatusOr<double> bandwidth = MeasureCopyBandwidth(uint64_t{1} << 30, 5);
  if (!bandwidth.ok()) return fail(bandwidth.status());
  nlohmann::json result = {{"plan", options.plan_path},
                           {"device", gpu->name},
                           {"sm", gpu->sm_version},
                           {"driver", gpu->driver_version},
                           {"copy_bytes_per_s", *bandwidth},
                           {"weight_bytes", WeightBytesPerStep((*plan)->meta(), 1)},
                           {"decode", nlohmann::json::array()}};
  for (int batch : options.batches) {
    absl::StatusOr<nlohmann::json> decode =
        Decode((*plan)->meta(), blobs, options, batch, *bandwidth);
    if (!decode.ok()) return fail(decode.status());
    result["decode"].push_back(*decode);
  }
  absl::StatusOr<nlohmann::json> prefill = Prefill((*plan)->meta(), blobs, options);
  if (!prefill.ok()) return fail(prefill.status());
  result["prefill"] = *prefill;
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace llmrt::kit
