#include "runtime/server/metrics.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmrt::server {
namespace {

using ::testing::HasSubstr;

TEST(Histogram, BucketsAreCumulativeWithInf) {
  Histogram histogram({0.1, 1.0});
  histogram.Observe(0.05);
  histogram.Observe(0.1);  // le is inclusive
  histogram.Observe(0.5);
  histogram.Observe(5.0);
  std::string out;
  histogram.Render("x_seconds", "help", "m=\"a\"", out);
  EXPECT_THAT(out, HasSubstr("# TYPE x_seconds histogram\n"));
  EXPECT_THAT(out, HasSubstr("x_seconds_bucket{m=\"a\",le=\"0.1\"} 2\n"));
  EXPECT_THAT(out, HasSubstr("x_seconds_bucket{m=\"a\",le=\"1\"} 3\n"));
  EXPECT_THAT(out, HasSubstr("x_seconds_bucket{m=\"a\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(out, HasSubstr("x_seconds_sum{m=\"a\"} 5.65\n"));
  EXPECT_THAT(out, HasSubstr("x_seconds_count{m=\"a\"} 4\n"));
}

TEST(RenderMetrics, VllmNamesAndValues) {
  ServerMetrics metrics;
  metrics.peak_bandwidth_bytes_per_second = 4000;
  metrics.request_queue_time.Observe(0.02);
  metrics.finished_length.fetch_add(3);
  engine::EngineStats stats;
  stats.running = 3;  // choices: one request of n = 2 and another of n = 1
  stats.waiting = 2;  // one request of n = 2
  stats.running_requests = 2;
  stats.waiting_requests = 1;
  stats.kv_block_size = 16;
  stats.kv_blocks_total = 512;
  stats.kv_usage = 0.25;
  stats.prefix_queried_tokens = 10;
  stats.prefix_hit_tokens = 4;
  stats.prompt_tokens_total = 77;
  stats.generation_tokens_total = 99;
  stats.preemptions_total = 5;
  stats.decode_steps_total = 4;
  stats.decode_sequences_total = 12;
  stats.decode_seconds_total = 2.0;
  stats.decode_bytes_total = 4000;
  stats.step_seconds_total = 3.5;
  stats.model_seconds_total = 3.0;
  stats.sample_seconds_total = 0.25;
  const std::string page = RenderMetrics(metrics, stats, "stories \"q\"");
  const std::string labels = "{model_name=\"stories \\\"q\\\"\"}";
  // vLLM counts choices (n > 1 runs as n child requests); ours counts requests once.
  EXPECT_THAT(page, HasSubstr("# TYPE vllm:num_requests_running gauge\n"));
  EXPECT_THAT(page, HasSubstr("vllm:num_requests_running" + labels + " 3\n"));
  EXPECT_THAT(page, HasSubstr("vllm:num_requests_waiting" + labels + " 2\n"));
  EXPECT_THAT(page, HasSubstr("vllm:kv_cache_usage_perc" + labels + " 0.25\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:num_requests_running" + labels + " 2\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:num_requests_waiting" + labels + " 1\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:num_sequences_running" + labels + " 3\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:num_sequences_waiting" + labels + " 2\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:kv_cache_usage_perc" + labels + " 0.25\n"));
  EXPECT_THAT(page, HasSubstr("vllm:cache_config_info{model_name=\"stories \\\"q\\\"\",block_size="
                              "\"16\",num_gpu_blocks=\"512\"} 1\n"));
  // No LoRA adapters exist in llmrt, so the LoRA info gauge is absent rather than empty.
  EXPECT_THAT(page, ::testing::Not(HasSubstr("lora")));
  EXPECT_THAT(page, HasSubstr("llmrt:prefix_cache_hit_rate" + labels + " 0.40000000000000002\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:prompt_tokens_total" + labels + " 77\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:generation_tokens_total" + labels + " 99\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:num_preemptions_total" + labels + " 5\n"));
  EXPECT_THAT(page, HasSubstr("finished_reason=\"length\"} 3\n"));
  EXPECT_THAT(page, HasSubstr("# TYPE llmrt:time_to_first_token_seconds histogram"));
  EXPECT_THAT(page, HasSubstr("# TYPE llmrt:e2e_request_latency_seconds histogram"));
  EXPECT_THAT(page, HasSubstr("llmrt:request_queue_time_seconds_bucket{model_name=\"stories "
                              "\\\"q\\\"\",le=\"0.05\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:decode_steps_total" + labels + " 4\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:decode_sequences_total" + labels + " 12\n"));
  // 4000 bytes read in 2 s of decode steps: 2000 B/s, half of the 4000 B/s peak.
  EXPECT_THAT(page, HasSubstr("llmrt:decode_bandwidth_bytes_per_second" + labels + " 2000\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:decode_mbu" + labels + " 0.5\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:engine_step_seconds_total" + labels + " 3.5\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:engine_model_seconds_total" + labels + " 3\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:engine_sample_seconds_total" + labels + " 0.25\n"));
}

TEST(RenderMetrics, NoMbuWithoutPeakBandwidth) {
  ServerMetrics metrics;
  const std::string page = RenderMetrics(metrics, engine::EngineStats{}, "m");
  EXPECT_THAT(page, ::testing::Not(HasSubstr("llmrt:decode_mbu")));
  EXPECT_THAT(page, HasSubstr("llmrt:prefix_cache_hit_rate{model_name=\"m\"} 0\n"));
}

// A MoE plan's counters: the expert union and layer steps always, the per-expert token counters
// when the engine counts them (--expert-metrics), one series per (MoE layer, expert).
TEST(RenderMetrics, MoeCountersAndPerExpertTokens) {
  ServerMetrics metrics;
  engine::EngineStats stats;
  stats.moe_layers = 2;
  stats.num_experts = 3;
  stats.moe_active_experts_total = 11;
  stats.moe_layer_steps_total = 4;
  std::string page = RenderMetrics(metrics, stats, "m");  // the engine not counting per expert
  EXPECT_THAT(page, HasSubstr("# TYPE llmrt:moe_active_experts_total counter\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:moe_active_experts_total{model_name=\"m\"} 11\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:moe_layer_steps_total{model_name=\"m\"} 4\n"));
  EXPECT_THAT(page, ::testing::Not(HasSubstr("moe_expert_tokens_total")));

  stats.expert_tokens_total = {5, 0, 7, 1, 2, 9};
  page = RenderMetrics(metrics, stats, "m");
  EXPECT_THAT(page, HasSubstr("# TYPE llmrt:moe_expert_tokens_total counter\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:moe_expert_tokens_total{model_name=\"m\",layer=\"0\","
                              "expert=\"2\"} 7\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:moe_expert_tokens_total{model_name=\"m\",layer=\"1\","
                              "expert=\"0\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("llmrt:moe_expert_tokens_total{model_name=\"m\",layer=\"1\","
                              "expert=\"2\"} 9\n"));
  std::vector<std::string> series;  // one line per (layer, expert)
  for (absl::string_view line : absl::StrSplit(page, '\n')) {
    if (absl::StartsWith(line, "llmrt:moe_expert_tokens_total{")) series.emplace_back(line);
  }
  EXPECT_EQ(series.size(), 6u);
}

TEST(RenderMetrics, DensePlansHaveNoMoeCounters) {
  const std::string page = RenderMetrics(ServerMetrics(), engine::EngineStats{}, "m");
  EXPECT_THAT(page, ::testing::Not(HasSubstr("moe_")));
}

}  // namespace
}  // namespace llmrt::server
