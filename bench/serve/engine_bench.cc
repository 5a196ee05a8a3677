// llmrt-engine-bench: the serving engine without HTTP. Runs B greedy requests at once through
// engine::Engine for each batch size B and reports what a decode step costs at that batch,
// next to batch 1, so the cost of batching is measured apart from the server, the clients and
// the prefill of new prompts:
//
//   llmrt-engine-bench PLAN [--threads 2] [--batches 1,16] [--prompt-len 32] [--output-len 32]
//       [--reps 2]
//
// Each rep runs the batch sizes in turn (1, 16, 1, 16, ... so load from other processes falls
// on both alike); the table gives the median over reps. Per batch size: ms per decode step
// (the backend step of steps that ran one token per sequence), decode tokens per second, the
// step time relative to batch 1 (what limits aggregate throughput: B / that ratio is the most
// B clients can get over one), the same in process CPU time (all threads; on a loaded machine
// the wall-clock figures include waiting for a core, the CPU ones much less), and the engine
// thread's own time per step outside the model (sampling, outputs, scheduling).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/model.h"

namespace llmrt::bench {
namespace {

constexpr char kUsage[] =
    "usage: llmrt-engine-bench PLAN [--threads 2] [--batches 1,16] [--prompt-len 32]\n"
    "         [--output-len 32] [--reps 2]\n";

struct Options {
  std::string plan;
  int32_t threads = 2;
  std::vector<int32_t> batches = {1, 16};
  int32_t prompt_len = 32;
  int32_t output_len = 32;
  int32_t reps = 2;
};

struct RunResult {
  double decode_ms = 0.0;      // per decode step
  double decode_cpu_ms = 0.0;  // process CPU time (all threads) per decode step
  double mean_batch = 0.0;
  double overhead_ms = 0.0;  // engine step time minus model time, per step
};

bool ParseOptions(int argc, char** argv, Options& options, std::string& error) {
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    auto value = [&](int32_t& out, int32_t minimum) {
      if (i + 1 >= argc || !absl::SimpleAtoi(argv[i + 1], &out) || out < minimum) {
        error = absl::StrFormat("%s: expected a number >= %d", argument, minimum);
        return false;
      }
      ++i;
      return true;
    };
    if (argument == "--threads") {
      if (!value(options.threads, 0)) return false;
    } else if (argument == "--prompt-len") {
      if (!value(options.prompt_len, 1)) return false;
    } else if (argument == "--output-len") {
      if (!value(options.output_len, 2)) return false;
    } else if (argument == "--reps") {
      if (!value(options.reps, 1)) return false;
    } else if (argument == "--batches") {
      if (i + 1 >= argc) {
        error = "--batches: expected a list like 1,16";
        return false;
      }
      options.batches.clear();
      for (absl::string_view part : absl::StrSplit(argv[++i], ',')) {
        int32_t batch = 0;
        if (!absl::SimpleAtoi(part, &batch) || batch < 1) {
          error = absl::StrFormat("--batches: expected sizes >= 1, found \"%s\"", part);
          return false;
        }
        options.batches.push_back(batch);
      }
    } else if (!argument.empty() && argument[0] != '-' && options.plan.empty()) {
      options.plan = argument;
    } else {
      error = absl::StrFormat("unknown argument \"%s\"", argument);
      return false;
    }
  }
  if (options.plan.empty()) error = "no plan file given";
  return error.empty();
}

double ProcessCpuSeconds() {
  timespec now;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// B requests with distinct random prompts (no prefix-cache hits between them or between runs),
// run to completion; the figures are the engine's own counters over the run.
absl::StatusOr<RunResult> RunBatch(engine::Model& model, const Options& options, int32_t batch,
                                   std::mt19937& random) {
  engine::EngineOptions engine_options;
  engine_options.max_seqs = batch;
  engine::Engine engine(model, /*tokenizer=*/nullptr, engine_options);
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(model.vocab_size()) - 1);
  int64_t finished = 0;
  for (int32_t request_index = 0; request_index < batch; ++request_index) {
    engine::GenerationRequest request;
    for (int32_t i = 0; i < options.prompt_len; ++i) request.prompt_ids.push_back(token(random));
    request.sampling.temperature = 0.0;
    request.max_tokens = options.output_len;
    request.ignore_eos = true;
    request.on_output = [&finished](const engine::RequestOutput& output) {
      if (output.finished) ++finished;
    };
    absl::StatusOr<engine::RequestId> id = engine.Submit(std::move(request));
    if (!id.ok()) return id.status();
  }
  const engine::EngineStats before = engine.GetStats();
  // Stepped here rather than by RunUntilIdle() to take the process CPU time of each decode
  // step: on a machine shared with other work, wall time measures the neighbours too.
  double decode_cpu_seconds = 0.0;
  while (engine.HasWork()) {
    const int64_t decode_steps = engine.GetStats().decode_steps_total;
    const double cpu_start = ProcessCpuSeconds();
    absl::StatusOr<bool> stepped = engine.Step();
    if (!stepped.ok()) return stepped.status();
    if (engine.GetStats().decode_steps_total > decode_steps) {
      decode_cpu_seconds += ProcessCpuSeconds() - cpu_start;
    }
  }
  const engine::EngineStats after = engine.GetStats();
  if (finished != batch) {
    return absl::InternalError(absl::StrFormat("%d of %d requests finished", finished, batch));
  }
  const int64_t decode_steps = after.decode_steps_total - before.decode_steps_total;
  const int64_t steps = after.steps_total - before.steps_total;
  if (decode_steps == 0 || steps == 0) return absl::InternalError("no decode step ran");
  RunResult result;
  result.decode_ms =
      1e3 * (after.decode_seconds_total - before.decode_seconds_total) / decode_steps;
  result.decode_cpu_ms = 1e3 * decode_cpu_seconds / decode_steps;
  result.mean_batch =
      static_cast<double>(after.decode_sequences_total - before.decode_sequences_total) /
      decode_steps;
  result.overhead_ms = 1e3 *
                       ((after.step_seconds_total - before.step_seconds_total) -
                        (after.model_seconds_total - before.model_seconds_total)) /
                       steps;
  return result;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

int EngineBench(int argc, char** argv) {
  Options options;
  std::string error;
  if (!ParseOptions(argc, argv, options, error)) {
    std::fprintf(stderr, "llmrt-engine-bench: %s\n%s", error.c_str(), kUsage);
    return 2;
  }
  engine::ModelOptions model_options;
  model_options.num_threads = options.threads;
  int32_t largest = *std::max_element(options.batches.begin(), options.batches.end());
  model_options.max_tokens_per_step = std::max(256, largest * options.prompt_len);
  model_options.kv_cache_tokens =
      static_cast<int64_t>(largest) * (options.prompt_len + options.output_len + 16);
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(options.plan, model_options);
  if (!model.ok()) {
    std::fprintf(stderr, "llmrt-engine-bench: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  std::mt19937 random(1);
  std::vector<std::vector<RunResult>> results(options.batches.size());
  for (int32_t rep = 0; rep < options.reps; ++rep) {
    for (size_t b = 0; b < options.batches.size(); ++b) {
      absl::StatusOr<RunResult> result = RunBatch(**model, options, options.batches[b], random);
      if (!result.ok()) {
        std::fprintf(stderr, "llmrt-engine-bench: batch %d: %s\n", options.batches[b],
                     std::string(result.status().message()).c_str());
        return 1;
      }
      results[b].push_back(*result);
    }
  }
  std::printf("%s, %d threads, prompts %d, outputs %d, median of %d reps\n", options.plan.c_str(),
              options.threads, options.prompt_len, options.output_len, options.reps);
  std::printf(
      "| batch | mean decode batch | ms per decode step | decode tok/s | step / batch-1 step "
      "| CPU ms per decode step | CPU / batch-1 CPU | engine overhead ms/step |\n"
      "|---|---|---|---|---|---|---|---|\n");
  double batch_one_ms = 0.0, batch_one_cpu_ms = 0.0;
  for (size_t b = 0; b < options.batches.size(); ++b) {
    std::vector<double> ms, cpu_ms, batch, overhead;
    for (const RunResult& result : results[b]) {
      ms.push_back(result.decode_ms);
      cpu_ms.push_back(result.decode_cpu_ms);
      batch.push_back(result.mean_batch);
      overhead.push_back(result.overhead_ms);
    }
    const double step_ms = Median(ms), step_cpu_ms = Median(cpu_ms);
    if (options.batches[b] == 1) {
      batch_one_ms = step_ms;
      batch_one_cpu_ms = step_cpu_ms;
    }
    auto ratio = [](double value, double base) {
      return base > 0 ? absl::StrFormat("%.2f", value / base) : std::string("-");
    };
    std::printf("| %d | %.2f | %.1f | %.1f | %s | %.1f | %s | %.2f |\n", options.batches[b],
                Median(batch), step_ms, 1e3 * Median(batch) / step_ms,
                ratio(step_ms, batch_one_ms).c_str(), step_cpu_ms,
                ratio(step_cpu_ms, batch_one_cpu_ms).c_str(), Median(overhead));
  }
  return 0;
}

}  // namespace
}  // namespace llmrt::bench

int main(int argc, char** argv) { return llmrt::bench::EngineBench(argc, argv); }
