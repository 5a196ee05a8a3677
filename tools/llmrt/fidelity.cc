#include "tools/llmrt/fidelity.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt::fidelity {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'R', 'T', 'L', 'G', 'T'};
constexpr uint32_t kVersion = 1;

void PutU32(std::string& out, uint32_t value) {
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<char>(value >> shift));
}
void PutU64(std::string& out, uint64_t value) {
  for (int shift = 0; shift < 64; shift += 8) out.push_back(static_cast<char>(value >> shift));
}
uint32_t GetU32(const unsigned char* bytes) {
  uint32_t value = 0;
  for (int index = 3; index >= 0; --index) value = value << 8 | bytes[index];
  return value;
}
uint64_t GetU64(const unsigned char* bytes) {
  return GetU32(bytes) | static_cast<uint64_t>(GetU32(bytes + 4)) << 32;
}

}  // namespace

double LogSumExp(const float* row, int64_t vocab_size) {
  const double max_logit = *std::max_element(row, row + vocab_size);
  double sum = 0;
  for (int64_t index = 0; index < vocab_size; ++index) {
    sum += std::exp(static_cast<double>(row[index]) - max_logit);
  }
  return max_logit + std::log(sum);
}

double NegativeLogLikelihood(const float* row, int64_t vocab_size, int32_t target) {
  return LogSumExp(row, vocab_size) - static_cast<double>(row[target]);
}

double KlDivergence(const float* base, const float* candidate, int64_t vocab_size) {
  const double base_log_sum = LogSumExp(base, vocab_size);
  const double candidate_log_sum = LogSumExp(candidate, vocab_size);
  double kl = 0;
  for (int64_t index = 0; index < vocab_size; ++index) {
    const double log_p = static_cast<double>(base[index]) - base_log_sum;
    const double log_q = static_cast<double>(candidate[index]) - candidate_log_sum;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return std::max(kl, 0.0);
}

int32_t Argmax(const float* row, int64_t vocab_size) {
  return static_cast<int32_t>(std::max_element(row, row + vocab_size) - row);
}

double RunningMean::standard_error() const {
  if (count_ < 2) return 0.0;
  const double mean = this->mean();
  const double variance = sum_squares_ / static_cast<double>(count_) - mean * mean;
  return variance > 0 ? std::sqrt(variance / static_cast<double>(count_ - 1)) : 0.0;
}

uint64_t SavedLogitsHeader::FileBytes() const {
  return kSavedLogitsHeaderBytes + uint64_t{4} * num_windows * ctx +
         uint64_t{4} * num_windows * rows_per_window() * vocab_size;
}

absl::StatusOr<std::unique_ptr<SavedLogitsWriter>> SavedLogitsWriter::Create(
    const std::string& path, const SavedLogitsHeader& header,
    const std::vector<int32_t>& window_tokens) {
  std::string bytes(kMagic, sizeof(kMagic));
  PutU32(bytes, kVersion);
  PutU32(bytes, header.vocab_size);
  PutU32(bytes, header.ctx);
  PutU32(bytes, header.first_scored);
  PutU32(bytes, header.num_windows);
  PutU32(bytes, 0);
  PutU64(bytes, header.num_text_tokens);
  bytes.resize(kSavedLogitsHeaderBytes, '\0');
  for (int32_t token : window_tokens) PutU32(bytes, static_cast<uint32_t>(token));

  std::unique_ptr<SavedLogitsWriter> writer(new SavedLogitsWriter());
  writer->path_ = path;
  writer->header_ = header;
  absl::StatusOr<std::unique_ptr<OutputFile>> file = OutputFile::Create(path);
  if (!file.ok()) return file.status();
  writer->file_ = *std::move(file);
  if (absl::Status written = writer->file_->Write(bytes.data(), bytes.size()); !written.ok()) {
    return written;
  }
  return writer;
}

absl::Status SavedLogitsWriter::AddWindow(const float* rows) {
  // Written as the machine holds floats: every target llmrt runs on is little-endian.
  const size_t count = static_cast<size_t>(header_.rows_per_window()) * header_.vocab_size;
  if (absl::Status written = file_->Write(rows, count * sizeof(float)); !written.ok()) {
    return written;
  }
  ++windows_written_;
  return absl::OkStatus();
}

absl::Status SavedLogitsWriter::Finish() {
  if (windows_written_ != header_.num_windows) {
    return absl::InternalError(absl::StrFormat("%s: %d windows written, the header says %d", path_,
                                               windows_written_, header_.num_windows));
  }
  return file_->Commit();
}

absl::StatusOr<std::unique_ptr<SavedLogitsReader>> SavedLogitsReader::Open(
    const std::string& path) {
  std::unique_ptr<SavedLogitsReader> reader(new SavedLogitsReader());
  reader->path_ = path;
  reader->file_ = std::fopen(path.c_str(), "rb");
  if (reader->file_ == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("%s: cannot open the saved logits: %s", path, std::strerror(errno)));
  }
  unsigned char bytes[kSavedLogitsHeaderBytes];
  if (std::fread(bytes, 1, sizeof(bytes), reader->file_) != sizeof(bytes) ||
      std::memcmp(bytes, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a saved-logits file (expected the magic \"LLMRTLGT\" and a %d-byte header, as "
        "`llmrt perplexity --save-logits` writes)",
        path, kSavedLogitsHeaderBytes));
  }
  const uint32_t version = GetU32(bytes + 8);
  if (version != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: saved-logits version %d, this llmrt reads version %d", path, version, kVersion));
  }
  SavedLogitsHeader& header = reader->header_;
  header.vocab_size = GetU32(bytes + 12);
  header.ctx = GetU32(bytes + 16);
  header.first_scored = GetU32(bytes + 20);
  header.num_windows = GetU32(bytes + 24);
  header.num_text_tokens = GetU64(bytes + 32);
  if (header.vocab_size == 0 || header.ctx < 3 || header.first_scored + 1 >= header.ctx ||
      header.num_windows == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header holds vocab %d, ctx %d, first scored position %d, %d windows; expected a "
        "vocabulary, ctx >= 3, first scored position < ctx - 1 and at least one window",
        path, header.vocab_size, header.ctx, header.first_scored, header.num_windows));
  }
  std::fseek(reader->file_, 0, SEEK_END);
  const uint64_t size = static_cast<uint64_t>(std::ftell(reader->file_));
  if (size != header.FileBytes()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d bytes, but its header (vocab %d, ctx %d, %d windows) implies %d: truncated or not "
        "written by this llmrt",
        path, size, header.vocab_size, header.ctx, header.num_windows, header.FileBytes()));
  }
  std::fseek(reader->file_, kSavedLogitsHeaderBytes, SEEK_SET);
  std::vector<unsigned char> ids(uint64_t{4} * header.num_windows * header.ctx);
  if (std::fread(ids.data(), 1, ids.size(), reader->file_) != ids.size()) {
    return absl::DataLossError(absl::StrFormat("%s: reading the token ids failed", path));
  }
  reader->window_tokens_.resize(ids.size() / 4);
  for (size_t index = 0; index < reader->window_tokens_.size(); ++index) {
    reader->window_tokens_[index] = static_cast<int32_t>(GetU32(ids.data() + 4 * index));
  }
  return reader;
}

SavedLogitsReader::~SavedLogitsReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status SavedLogitsReader::ReadWindow(uint32_t window, std::vector<float>& rows) {
  const uint64_t count = uint64_t{header_.rows_per_window()} * header_.vocab_size;
  const uint64_t offset = kSavedLogitsHeaderBytes +
                          uint64_t{4} * header_.num_windows * header_.ctx +
                          uint64_t{4} * count * window;
  rows.resize(count);
  if (window >= header_.num_windows ||
      std::fseek(file_, static_cast<long>(offset), SEEK_SET) != 0 ||
      std::fread(rows.data(), sizeof(float), count, file_) != count) {
    return absl::DataLossError(
        absl::StrFormat("%s: reading window %d of %d failed", path_, window, header_.num_windows));
  }
  return absl::OkStatus();
}

}  // namespace llmrt::fidelity
