// Pieces of `llmrt-bench serve` that need no network: arrival schedules, request lengths, the
// SSE stream parser and the latency summary. Kept apart from main() so they are unit-tested.
#ifndef LLMRT_BENCH_SERVE_LOAD_STATS_H_
#define LLMRT_BENCH_SERVE_LOAD_STATS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::bench {

// Seconds after the start at which each request arrives. rate <= 0 or infinite: all at 0.
// Poisson: exponential gaps with mean 1/rate; fixed: gaps of exactly 1/rate.
std::vector<double> ArrivalTimes(int64_t count, double rate, bool poisson, uint64_t seed);

struct RequestShape {
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
};
// Uniform in [len * (1 - range_ratio), len * (1 + range_ratio)], at least 1.
std::vector<RequestShape> RandomShapes(int64_t count, int64_t input_len, int64_t output_len,
                                       double range_ratio, uint64_t seed);
// A file of "INPUT OUTPUT" lines ('#' comments, blank lines skipped), cycled to `count`.
absl::StatusOr<std::vector<RequestShape>> ShapesFromFile(const std::string& path, int64_t count);

// Splits an SSE byte stream into the payloads of its "data:" events, across arbitrary chunk
// boundaries.
class SseParser {
 public:
  // Appends the payloads completed by `bytes` to `events`.
  void Feed(std::string_view bytes, std::vector<std::string>& events);

 private:
  std::string buffer_;
};

// mean, p50, p99 (linear interpolation between order statistics, as numpy.percentile).
struct Summary {
  double mean = 0, p50 = 0, p99 = 0;
  int64_t count = 0;
};
Summary Summarize(std::vector<double> values);
double Percentile(const std::vector<double>& sorted, double percent);

}  // namespace llmrt::bench

#endif  // LLMRT_BENCH_SERVE_LOAD_STATS_H_
