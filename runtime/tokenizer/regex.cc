#include "runtime/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llmrt::tokenizer_internal {

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Code> code) : code_(std::move(code)) {}
Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern,
                                                      std::string_view what) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto code = std::make_unique<Code>();
  code->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
  if (code->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: ", std::string(what), ": regex \"", std::string(pattern),
        "\" does not compile at offset ", error_offset, ": ", reinterpret_cast<char*>(message)));
  }
  // JIT is an optimization only: when the platform lacks it, the interpreter gives the same
  // matches.
  pcre2_jit_compile(code->code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::move(code)));
}

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* match_data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    // The subject was validated once by the caller; re-checking UTF-8 on every call would make
    // matching quadratic on long inputs.
    int result = pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK,
                             match_data, nullptr);
    if (result < 0 && result != PCRE2_ERROR_NOMATCH) {
      // The JIT's fixed 32 KiB stack can run out where the interpreter, which grows its own
      // heap frames, still succeeds; a silent stop would tokenize the rest as one piece.
      result = pcre2_match(code_->code, data, subject.size(), start,
                           PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match_data, nullptr);
    }
    if (result < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end < begin) break;  // \K tricks; not used by tokenizer patterns
    matches.emplace_back(begin, end);
    if (end > begin) {
      start = end;
    } else {
      if (end >= subject.size()) break;
      start = end + 1;
      while (start < subject.size() && (static_cast<unsigned char>(subject[start]) & 0xC0) == 0x80)
        ++start;
    }
  }
  pcre2_match_data_free(match_data);
  return matches;
}

}  // namespace llmrt::tokenizer_internal
