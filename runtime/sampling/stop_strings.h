// StopStringMatcher: finds stop strings in a sequence's streamed text, across token boundaries,
// and never lets any part of a stop string out.
//
// Text arrives in pieces (one per token, from the tokenizer's StreamDecoder). A stop string may
// begin in one piece and end in a later one, so the matcher holds back the longest tail of the
// text seen so far that is a prefix of some stop string (at most longest-stop - 1 bytes), and
// releases it once it can no longer begin a match. When a stop string completes, the text before
// its first byte is released and nothing after it ever is. Stop strings are valid UTF-8 and a
// prefix of one starts on a character boundary, so a held-back tail never splits a character.
//
// Thread-safety: not thread-safe; one matcher per sequence.
#ifndef LLMRT_SAMPLING_STOP_STRINGS_H_
#define LLMRT_SAMPLING_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace llmrt::sampling {

class StopStringMatcher {
 public:
  // Empty strings in `stops` are ignored (they would match before any text).
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text`; returns the text that is now safe to emit. After a stop string matched,
  // stopped() is true and every later call returns "".
  std::string Push(std::string_view text);
  // At the end of generation: releases the held-back tail (no stop string can complete now).
  std::string Finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched; empty while none has.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace llmrt::sampling

#endif  // LLMRT_SAMPLING_STOP_STRINGS_H_
