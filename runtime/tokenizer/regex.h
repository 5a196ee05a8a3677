// A compiled PCRE2 pattern (UTF + UCP, JIT when available) for the tokenizer's Replace
// normalizer and Split pre-tokenizers. Patterns are compiled once in Tokenizer::Create, never per
// call.
//
// Thread-safety: immutable after Compile(); FindAll may run concurrently (each call owns its
// match data).
#ifndef LLMRT_TOKENIZER_REGEX_H_
#define LLMRT_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace llmrt::tokenizer_internal {

class Regex {
 public:
  // `what` names the component for the error message (e.g. "pre_tokenizer 0 (Split)").
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern,
                                                        std::string_view what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches, left to right, as [begin, end) byte offsets. `subject` must be
  // valid UTF-8. After an empty match the search resumes one character later, as the regex
  // engines HF uses do.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view subject) const;

 private:
  struct Code;
  explicit Regex(std::unique_ptr<Code> code);
  std::unique_ptr<Code> code_;
};

}  // namespace llmrt::tokenizer_internal

#endif  // LLMRT_TOKENIZER_REGEX_H_
