// Server metrics for /metrics, in the Prometheus text exposition format (version 0.0.4) with
// vLLM's metric names under an `llmrt:` prefix, so dashboards written for vLLM need only the
// prefix changed, and the gauges a gateway routes by under vLLM's own names:
//   vllm:num_requests_running / _waiting             gauges of choices, as vLLM counts its n child
//                                                    requests; vllm:kv_cache_usage_perc and
//                                                    vllm:cache_config_info{block_size,
//                                                    num_gpu_blocks}: what a gateway's endpoint
//                                                    picker reads (docs/deployment.md)
//   llmrt:num_requests_running / _waiting           gauges of requests (once whatever their n)
//   llmrt:num_sequences_running / _waiting          gauges of choices
//   llmrt:kv_cache_usage_perc                        gauge in [0, 1]
//   llmrt:prefix_cache_queries_total / _hits_total   counters (tokens), and _hit_rate gauge
//   llmrt:prompt_tokens_total, generation_tokens_total, num_preemptions_total   counters
//   llmrt:request_success_total{finished_reason}    counter
//   llmrt:time_to_first_token_seconds, inter_token_latency_seconds, e2e_request_latency_seconds,
//   request_queue_time_seconds                       histograms
//   llmrt:decode_steps_total, decode_sequences_total, decode_seconds_total, decode_bytes_total
//                                                    counters (EngineStats: pure decode steps;
//                                                    MoE plans count the chosen experts' bytes)
//   llmrt:engine_step_seconds_total, engine_model_seconds_total, engine_sample_seconds_total
//                                                    counters (EngineStats: engine thread time)
//   llmrt:decode_bandwidth_bytes_per_second, llmrt:decode_mbu   gauges (see ServerMetrics)
//   llmrt:moe_active_experts_total, moe_layer_steps_total   counters, MoE plans only (the mean
//                                                    expert union per MoE layer and step is
//                                                    their ratio)
//   llmrt:moe_expert_tokens_total{layer,expert}     counters, when the engine counts them
//                                                    (EngineOptions::expert_token_counts,
//                                                    `llmrt serve --expert-metrics`)
//
// Thread-safety: every member may be updated and rendered from any thread.
#ifndef LLMRT_SERVER_METRICS_H_
#define LLMRT_SERVER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine/engine.h"

namespace llmrt::server {

// A cumulative histogram with fixed upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends "# HELP", "# TYPE" and the _bucket/_sum/_count lines.
  void Render(const std::string& name, const std::string& help, const std::string& labels,
              std::string& out) const;
  int64_t count() const;
  double sum() const;

 private:
  std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last is +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

struct ServerMetrics {
  ServerMetrics();

  // vLLM's bucket bounds, in seconds: TTFT reaches into minutes under load; ITL is milliseconds
  // to a second.
  Histogram time_to_first_token;
  Histogram inter_token_latency;
  Histogram e2e_request_latency;
  // Submit to first scheduled step, once per engine request (RequestOutput::queue_seconds).
  Histogram request_queue_time;

  std::atomic<int64_t> finished_stop{0};
  std::atomic<int64_t> finished_length{0};
  std::atomic<int64_t> finished_abort{0};
  std::atomic<int64_t> finished_error{0};
  std::atomic<int64_t> rejected_queue_full{0};

  // Decode bandwidth is what the engine measured over its pure decode steps since start: the
  // bytes they had to read (weights once per step, plus every sequence's KV up to its position)
  // over their backend time; the counters let a dashboard take rate() over any window. MBU
  // divides it by the machine's read bandwidth, given with `llmrt serve --mem-bandwidth GB/s`
  // (measured once with `llmrt bench --bandwidth`, which caches it): a serving process does not
  // stream a GiB through memory at start-up to find out, and a figure measured while other
  // processes run would be wrong anyway. Without the flag the MBU gauge is not emitted.
  double peak_bandwidth_bytes_per_second = 0.0;
};

// The full /metrics page.
std::string RenderMetrics(const ServerMetrics& metrics, const engine::EngineStats& stats,
                          const std::string& model_name);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_METRICS_H_
