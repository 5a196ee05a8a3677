#include "runtime/server/metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace llmrt::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::Observe(double value) {
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

double Histogram::sum() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sum_;
}

void Histogram::Render(const std::string& name, const std::string& help, const std::string& labels,
                       std::string& out) const {
  std::vector<int64_t> counts;
  double sum;
  int64_t count;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    counts = counts_;
    sum = sum_;
    count = count_;
  }
  absl::StrAppendFormat(&out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t index = 0; index < upper_bounds_.size(); ++index) {
    cumulative += counts[index];
    absl::StrAppendFormat(&out, "%s_bucket{%s,le=\"%g\"} %d\n", name, labels, upper_bounds_[index],
                          cumulative);
  }
  cumulative += counts.back();
  absl::StrAppendFormat(&out, "%s_bucket{%s,le=\"+Inf\"} %d\n", name, labels, cumulative);
  absl::StrAppendFormat(&out, "%s_sum{%s} %.9g\n%s_count{%s} %d\n", name, labels, sum, name, labels,
                        count);
}

ServerMetrics::ServerMetrics()
    : time_to_first_token({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                           1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      inter_token_latency({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
                           5.0, 7.5, 10.0, 20.0, 40.0, 80.0}),
      e2e_request_latency({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                           30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      // vLLM's e2e bounds start at 0.3 s; an idle server queues for microseconds, so finer
      // bounds below that show whether queueing starts.
      request_queue_time({0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0,
                          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

namespace {

void Metric(std::string& out, const std::string& name, const char* type, const std::string& help,
            const std::string& labels, double value) {
  absl::StrAppendFormat(&out, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type,
                        name, labels, value);
}

std::string EscapeLabel(const std::string& value) {
  std::string escaped;
  for (char c : value) {
    if (c == '\\' || c == '"') escaped += '\\';
    if (c == '\n') {
      escaped += "\\n";
      continue;
    }
    escaped += c;
  }
  return escaped;
}

}  // namespace

std::string RenderMetrics(const ServerMetrics& metrics, const engine::EngineStats& stats,
                          const std::string& model_name) {
  const std::string labels = absl::StrFormat("model_name=\"%s\"", EscapeLabel(model_name));
  std::string out;
  // The gauges an endpoint picker reads (the Gateway API Inference Extension's model-server
  // protocol: TotalQueuedRequests, TotalRunningRequests, KVCacheUtilization, and BlockSize /
  // NumGPUBlocks from cache_config_info), under vLLM's names and counted as vLLM counts them,
  // so that a picker configured for vLLM needs no configuration. vLLM runs a request with n > 1
  // as n child requests: its request gauges count choices.
  Metric(out, "vllm:num_requests_running", "gauge",
         "Choices in the running batch (a request with n = 2 counts 2, as vLLM's child requests).",
         labels, stats.running);
  Metric(out, "vllm:num_requests_waiting", "gauge", "Choices waiting to be scheduled.", labels,
         stats.waiting);
  Metric(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means 100 percent.", labels,
         stats.kv_usage);
  // vLLM's info gauge: value 1, the configuration in labels.
  Metric(out, "vllm:cache_config_info", "gauge", "KV-cache configuration (value 1).",
         absl::StrFormat("%s,block_size=\"%d\",num_gpu_blocks=\"%d\"", labels, stats.kv_block_size,
                         stats.kv_blocks_total),
         1.0);
  // Ours: requests counted once whatever their n, and the choices beside them.
  Metric(out, "llmrt:num_requests_running", "gauge",
         "Requests with a choice in the running batch (a request counts once whatever its n).",
         labels, stats.running_requests);
  Metric(out, "llmrt:num_requests_waiting", "gauge",
         "Requests waiting to be scheduled, none of whose choices runs.", labels,
         stats.waiting_requests);
  Metric(out, "llmrt:num_sequences_running", "gauge",
         "Choices in the running batch: n = 2 counts 2 (vllm:num_requests_running).", labels,
         stats.running);
  Metric(out, "llmrt:num_sequences_waiting", "gauge",
         "Choices waiting to be scheduled (vllm:num_requests_waiting).", labels, stats.waiting);
  Metric(out, "llmrt:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means 100 percent.", labels,
         stats.kv_usage);
  Metric(out, "llmrt:kv_cache_blocks_total", "gauge", "KV-cache blocks in the pool.", labels,
         stats.kv_blocks_total);
  Metric(out, "llmrt:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache.", labels,
         static_cast<double>(stats.prefix_queried_tokens));
  Metric(out, "llmrt:prefix_cache_hits_total", "counter",
         "Prompt tokens found in the prefix cache.", labels,
         static_cast<double>(stats.prefix_hit_tokens));
  Metric(out, "llmrt:prefix_cache_hit_rate", "gauge",
         "Prefix-cache hits over queries since start (0 before the first query).", labels,
         stats.prefix_queried_tokens > 0
             ? static_cast<double>(stats.prefix_hit_tokens) / stats.prefix_queried_tokens
             : 0.0);
  Metric(out, "llmrt:prompt_tokens_total", "counter", "Prefill tokens processed.", labels,
         static_cast<double>(stats.prompt_tokens_total));
  Metric(out, "llmrt:generation_tokens_total", "counter", "Tokens generated.", labels,
         static_cast<double>(stats.generation_tokens_total));
  Metric(out, "llmrt:num_preemptions_total", "counter",
         "Sequences preempted (by recompute) for lack of KV blocks.", labels,
         static_cast<double>(stats.preemptions_total));
  Metric(out, "llmrt:engine_steps_total", "counter", "Engine steps run.", labels,
         static_cast<double>(stats.steps_total));

  absl::StrAppendFormat(&out,
                        "# HELP llmrt:request_success_total Finished requests by reason.\n"
                        "# TYPE llmrt:request_success_total counter\n");
  const std::pair<const char*, const std::atomic<int64_t>*> reasons[] = {
      {"stop", &metrics.finished_stop},
      {"length", &metrics.finished_length},
      {"abort", &metrics.finished_abort},
      {"error", &metrics.finished_error}};
  for (const auto& [reason, counter] : reasons) {
    absl::StrAppendFormat(&out, "llmrt:request_success_total{%s,finished_reason=\"%s\"} %d\n",
                          labels, reason, counter->load());
  }
  Metric(out, "llmrt:request_rejected_queue_full_total", "counter",
         "Requests answered 429 because the queue was full.", labels,
         static_cast<double>(metrics.rejected_queue_full.load()));

  metrics.time_to_first_token.Render("llmrt:time_to_first_token_seconds",
                                     "Time from request arrival to its first token.", labels, out);
  metrics.inter_token_latency.Render("llmrt:inter_token_latency_seconds",
                                     "Time between successive tokens of a sequence.", labels, out);
  metrics.e2e_request_latency.Render("llmrt:e2e_request_latency_seconds",
                                     "Time from request arrival to its last token.", labels, out);
  metrics.request_queue_time.Render("llmrt:request_queue_time_seconds",
                                    "Time from submission to the first step that ran the request.",
                                    labels, out);

  Metric(out, "llmrt:decode_steps_total", "counter",
         "Engine steps that ran one token per sequence (pure decode).", labels,
         static_cast<double>(stats.decode_steps_total));
  Metric(out, "llmrt:decode_sequences_total", "counter",
         "Sequences over all decode steps (divided by decode_steps_total: mean decode batch).",
         labels, static_cast<double>(stats.decode_sequences_total));
  Metric(out, "llmrt:decode_seconds_total", "counter", "Backend time of the decode steps.", labels,
         stats.decode_seconds_total);
  Metric(out, "llmrt:decode_bytes_total", "counter",
         "Bytes the decode steps had to read: weights once per step (of a MoE layer's experts, "
         "those the step's tokens chose) plus each sequence's KV.",
         labels, stats.decode_bytes_total);
  Metric(out, "llmrt:engine_step_seconds_total", "counter",
         "Engine thread time of the steps that ran the model: schedule, model, sampling, outputs.",
         labels, stats.step_seconds_total);
  Metric(out, "llmrt:engine_model_seconds_total", "counter",
         "Backend time of all steps (engine_step_seconds_total minus this: the engine's overhead).",
         labels, stats.model_seconds_total);
  Metric(out, "llmrt:engine_sample_seconds_total", "counter",
         "Sampling, detokenization, stop strings and output callbacks of all steps.", labels,
         stats.sample_seconds_total);
  const double bandwidth =
      stats.decode_seconds_total > 0 ? stats.decode_bytes_total / stats.decode_seconds_total : 0.0;
  Metric(out, "llmrt:decode_bandwidth_bytes_per_second", "gauge",
         "Achieved read bandwidth of decode steps since start (decode_bytes_total / "
         "decode_seconds_total).",
         labels, bandwidth);
  if (metrics.peak_bandwidth_bytes_per_second > 0) {
    Metric(out, "llmrt:decode_mbu", "gauge",
           "Decode memory-bandwidth utilisation: decode bandwidth / --mem-bandwidth.", labels,
           bandwidth / metrics.peak_bandwidth_bytes_per_second);
  }
  if (stats.moe_layers > 0) {
    Metric(out, "llmrt:moe_active_experts_total", "counter",
           "Experts chosen by at least one token of a step, summed over steps and MoE layers.",
           labels, static_cast<double>(stats.moe_active_experts_total));
    Metric(out, "llmrt:moe_layer_steps_total", "counter",
           "Steps times MoE layers (moe_active_experts_total over this: mean experts per layer).",
           labels, static_cast<double>(stats.moe_layer_steps_total));
  }
  // Per-expert series only when the engine counts them (EngineOptions::expert_token_counts):
  // layers x experts of them.
  if (stats.moe_layers > 0 && stats.num_experts > 0 &&
      stats.expert_tokens_total.size() ==
          static_cast<size_t>(stats.moe_layers) * static_cast<size_t>(stats.num_experts)) {
    absl::StrAppendFormat(&out,
                          "# HELP llmrt:moe_expert_tokens_total Tokens routed to each expert of "
                          "each MoE layer (layer: the MoE layer's index among them).\n"
                          "# TYPE llmrt:moe_expert_tokens_total counter\n");
    for (int32_t layer = 0; layer < stats.moe_layers; ++layer) {
      for (int32_t expert = 0; expert < stats.num_experts; ++expert) {
        absl::StrAppendFormat(
            &out, "llmrt:moe_expert_tokens_total{%s,layer=\"%d\",expert=\"%d\"} %d\n", labels,
            layer, expert, stats.expert_tokens_total[layer * stats.num_experts + expert]);
      }
    }
  }
  return out;
}

}  // namespace llmrt::server
