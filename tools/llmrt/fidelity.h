// What `llmrt perplexity` measures and stores: per-row log-softmax statistics in double, and the
// saved-logits file that --save-logits writes and --kl-base reads.
//
// Saved-logits file (little-endian; docs/quantization.md, "Choosing a quantization"):
//
//   offset 0   magic "LLMRTLGT" (8 bytes)
//          8   u32 version (1)
//         12   u32 vocab_size
//         16   u32 ctx              window length in tokens (--ctx)
//         20   u32 first_scored     position in the window of the first saved row (ctx / 2)
//         24   u32 num_windows
//         28   u32 reserved (0)
//         32   u64 num_text_tokens  tokens of the whole text as encoded (only whole windows run)
//         40   24 bytes reserved (0); the header is 64 bytes so the ids start cache-line aligned
//         64   token ids: num_windows x ctx u32, each window as it ran (first token BOS when
//              the tokenizer adds one)
//         ...  logits: num_windows x rows_per_window rows of vocab_size float32, where
//              rows_per_window = ctx - 1 - first_scored: the rows that predict the next token of
//              the window's second half (the window's last row predicts past it: not saved)
//
// The ids are kept so --kl-base can say which token differs when the text or tokenizer is not
// the one the base ran on; the logits are raw float32 (not log-probabilities) so the file is
// exactly what the model produced, at vocab x 4 bytes a row.
#ifndef LLMRT_TOOLS_LLMRT_FIDELITY_H_
#define LLMRT_TOOLS_LLMRT_FIDELITY_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/plan/output_file.h"

namespace llmrt::fidelity {

// log(sum(exp(row))), summed in double around the row's maximum: the log-softmax denominator of
// rows of 150k logits, where a float sum would lose the small terms.
double LogSumExp(const float* row, int64_t vocab_size);

// -log softmax(row)[target], in double.
double NegativeLogLikelihood(const float* row, int64_t vocab_size, int32_t target);

// KL(base || candidate) = sum_i p_base(i) * (log p_base(i) - log p_candidate(i)), in double.
// Never negative in exact arithmetic; rounding can give -1e-17, returned as 0.
double KlDivergence(const float* base, const float* candidate, int64_t vocab_size);

// Index of the largest logit (the first one on ties, as std::max_element).
int32_t Argmax(const float* row, int64_t vocab_size);

// Mean and standard error of the mean of a stream of values (Welford-free: sums in double are
// exact enough for the ~1e6 values of a long text).
class RunningMean {
 public:
  void Add(double value) {
    sum_ += value;
    sum_squares_ += value * value;
    ++count_;
  }
  int64_t count() const { return count_; }
  double mean() const { return count_ > 0 ? sum_ / static_cast<double>(count_) : 0.0; }
  // sqrt(variance / (count - 1)); 0 for fewer than 2 values.
  double standard_error() const;

 private:
  double sum_ = 0;
  double sum_squares_ = 0;
  int64_t count_ = 0;
};

struct SavedLogitsHeader {
  uint32_t vocab_size = 0;
  uint32_t ctx = 0;
  uint32_t first_scored = 0;
  uint32_t num_windows = 0;
  uint64_t num_text_tokens = 0;

  uint32_t rows_per_window() const { return ctx - 1 - first_scored; }
  // Bytes the whole file must have.
  uint64_t FileBytes() const;
};

constexpr uint64_t kSavedLogitsHeaderBytes = 64;

// Writes a saved-logits file window by window through an OutputFile: an abandoned writer
// (destroyed before Finish, e.g. on an error) leaves nothing under `path`.
// Thread-safety: none. Not copyable.
class SavedLogitsWriter {
 public:
  static absl::StatusOr<std::unique_ptr<SavedLogitsWriter>> Create(
      const std::string& path, const SavedLogitsHeader& header,
      const std::vector<int32_t>& window_tokens);
  SavedLogitsWriter(const SavedLogitsWriter&) = delete;
  SavedLogitsWriter& operator=(const SavedLogitsWriter&) = delete;

  // `rows`: rows_per_window x vocab_size floats of the next window.
  absl::Status AddWindow(const float* rows);
  absl::Status Finish();

 private:
  SavedLogitsWriter() = default;
  std::string path_;
  std::unique_ptr<OutputFile> file_;
  SavedLogitsHeader header_;
  uint32_t windows_written_ = 0;
};

// Reads a saved-logits file: validates the magic, version and that the size matches the header
// (errors name the file, what was expected and what was found), then hands out one window's
// rows at a time. Thread-safety: none. Not copyable.
class SavedLogitsReader {
 public:
  static absl::StatusOr<std::unique_ptr<SavedLogitsReader>> Open(const std::string& path);
  ~SavedLogitsReader();
  SavedLogitsReader(const SavedLogitsReader&) = delete;
  SavedLogitsReader& operator=(const SavedLogitsReader&) = delete;

  const std::string& path() const { return path_; }
  const SavedLogitsHeader& header() const { return header_; }
  // num_windows x ctx ids.
  const std::vector<int32_t>& window_tokens() const { return window_tokens_; }
  // Reads window `window`'s rows_per_window x vocab_size logits into `rows` (resized).
  absl::Status ReadWindow(uint32_t window, std::vector<float>& rows);

 private:
  SavedLogitsReader() = default;
  std::string path_;
  std::FILE* file_ = nullptr;
  SavedLogitsHeader header_;
  std::vector<int32_t> window_tokens_;
};

}  // namespace llmrt::fidelity

#endif  // LLMRT_TOOLS_LLMRT_FIDELITY_H_
