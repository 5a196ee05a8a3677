// Sets of Unicode code points as sorted inclusive ranges, shared by the GBNF parser and the
// regex converter. Internal to runtime/grammar.
#ifndef LLMRT_GRAMMAR_CODE_RANGES_H_
#define LLMRT_GRAMMAR_CODE_RANGES_H_

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace llmrt::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;
using CodeRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive

// Sorted, with overlapping and adjacent ranges merged.
inline CodeRanges NormalizeRanges(CodeRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodeRanges merged;
  for (const auto& range : ranges) {
    if (!merged.empty() && range.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, range.second);
    } else {
      merged.push_back(range);
    }
  }
  return merged;
}

// Every code point in [0, kMaxCodePoint] that `ranges` lacks.
inline CodeRanges ComplementRanges(const CodeRanges& ranges) {
  CodeRanges result;
  uint32_t next = 0;
  for (const auto& range : NormalizeRanges(ranges)) {
    if (range.first > next) result.emplace_back(next, range.first - 1);
    next = range.second + 1;
  }
  if (next <= kMaxCodePoint) result.emplace_back(next, kMaxCodePoint);
  return result;
}

}  // namespace llmrt::grammar

#endif  // LLMRT_GRAMMAR_CODE_RANGES_H_
