#include "bench/serve/load_stats.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_format.h"

namespace llmrt::bench {

std::vector<double> ArrivalTimes(int64_t count, double rate, bool poisson, uint64_t seed) {
  std::vector<double> times(static_cast<size_t>(std::max<int64_t>(count, 0)), 0.0);
  if (!(rate > 0) || std::isinf(rate)) return times;
  std::mt19937_64 random(seed);
  std::exponential_distribution<double> gap(rate);
  double now = 0.0;
  for (double& time : times) {
    time = now;
    now += poisson ? gap(random) : 1.0 / rate;
  }
  return times;
}

std::vector<RequestShape> RandomShapes(int64_t count, int64_t input_len, int64_t output_len,
                                       double range_ratio, uint64_t seed) {
  std::mt19937_64 random(seed ^ 0x9e3779b97f4a7c15ull);
  auto draw = [&](int64_t length) {
    const int64_t low = std::max<int64_t>(1, std::llround(length * (1.0 - range_ratio)));
    const int64_t high = std::max<int64_t>(low, std::llround(length * (1.0 + range_ratio)));
    return std::uniform_int_distribution<int64_t>(low, high)(random);
  };
  std::vector<RequestShape> shapes;
  for (int64_t index = 0; index < count; ++index) {
    RequestShape shape;
    shape.input_tokens = draw(input_len);
    shape.output_tokens = draw(output_len);
    shapes.push_back(shape);
  }
  return shapes;
}

absl::StatusOr<std::vector<RequestShape>> ShapesFromFile(const std::string& path, int64_t count) {
  std::ifstream file(path);
  if (!file) return absl::NotFoundError(absl::StrFormat("%s: cannot open", path));
  std::vector<RequestShape> listed;
  std::string line;
  int line_number = 0;
  while (std::getline(file, line)) {
    ++line_number;
    const size_t comment = line.find('#');
    if (comment != std::string::npos) line.resize(comment);
    std::istringstream fields(line);
    RequestShape shape;
    if (!(fields >> shape.input_tokens)) continue;  // blank line
    if (!(fields >> shape.output_tokens) || shape.input_tokens < 1 || shape.output_tokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: expected 'INPUT_TOKENS OUTPUT_TOKENS', both >= 1, found '%s'",
                          path, line_number, line));
    }
    listed.push_back(shape);
  }
  if (listed.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: no 'INPUT OUTPUT' lines", path));
  }
  std::vector<RequestShape> shapes;
  for (int64_t index = 0; index < count; ++index) shapes.push_back(listed[index % listed.size()]);
  return shapes;
}

void SseParser::Feed(std::string_view bytes, std::vector<std::string>& events) {
  buffer_.append(bytes.data(), bytes.size());
  // Events end with a blank line; "\r\n" line ends are allowed by the SSE spec.
  while (true) {
    size_t end = buffer_.find("\n\n");
    size_t separator = 2;
    const size_t crlf = buffer_.find("\r\n\r\n");
    if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) {
      end = crlf;
      separator = 4;
    }
    if (end == std::string::npos) return;
    std::string event = buffer_.substr(0, end);
    buffer_.erase(0, end + separator);
    std::string data;
    std::istringstream lines(event);
    std::string event_line;
    while (std::getline(lines, event_line)) {
      if (!event_line.empty() && event_line.back() == '\r') event_line.pop_back();
      if (event_line.rfind("data:", 0) != 0) continue;  // comments, event:, id:
      std::string value = event_line.substr(5);
      if (!value.empty() && value[0] == ' ') value.erase(0, 1);
      if (!data.empty()) data += '\n';
      data += value;
    }
    if (!data.empty()) events.push_back(std::move(data));
  }
}

double Percentile(const std::vector<double>& sorted, double percent) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double position = percent / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + (sorted[above] - sorted[below]) * fraction;
}

Summary Summarize(std::vector<double> values) {
  Summary summary;
  summary.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    summary.mean = summary.p50 = summary.p99 = std::numeric_limits<double>::quiet_NaN();
    return summary;
  }
  std::sort(values.begin(), values.end());
  summary.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  summary.p50 = Percentile(values, 50);
  summary.p99 = Percentile(values, 99);
  return summary;
}

}  // namespace llmrt::bench
