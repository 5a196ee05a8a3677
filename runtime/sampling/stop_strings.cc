#include "runtime/sampling/stop_strings.h"

#include <algorithm>
#include <utility>

namespace llmrt::sampling {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) {
  for (std::string& stop : stops) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopStringMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  // The earliest match wins: with stops "ab" and "b" in "xab", "ab" ends the text at "x".
  size_t earliest = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t found = held_.find(stop);
    if (found != std::string::npos && found < earliest) {
      earliest = found;
      matched_ = stop;
    }
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, earliest);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, held_.size());
    for (size_t length = longest; length > hold; --length) {
      if (held_.compare(held_.size() - length, length, stop, 0, length) == 0) {
        hold = length;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopStringMatcher::Finish() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace llmrt::sampling
