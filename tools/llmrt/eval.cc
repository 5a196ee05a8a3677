// `llmrt eval PLAN --tokens FILE --logits-out OUT`: teacher-forced logits of every position.
//
// Reads whitespace-separated token ids, runs them through one session (all positions as logit
// rows, in appends of kTokensPerAppend so memory stays bounded for long inputs; the engine
// splits each append into steps of its own size), and writes raw little-endian float32,
// row-major [num_tokens, vocab]: row i is the distribution for the token after ids[i]. The
// output goes to a temporary file renamed into place, so an error never leaves half of it.
#include "tools/llmrt/eval.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/model.h"
#include "runtime/plan/output_file.h"
#include "tools/llmrt/arguments.h"

namespace llmrt {
namespace {

constexpr char kEvalUsage[] =
    "usage: llmrt eval PLAN --tokens FILE --logits-out OUT [--threads N] [--backend B]\n"
    "                  [--kv-cache f32|f16|bf16|int8] [--quant-activations int8|f32] [--verify]\n"
    "  FILE: token ids separated by whitespace, each in [0, vocab); at most the plan's context\n"
    "  OUT: the logits of every position, raw little-endian float32, row-major\n"
    "       [num_tokens, vocab]; row i predicts the token after ids[i]\n";

// Bounds the logits held at once to kTokensPerAppend x vocab floats (150 MB at a 150k vocab).
constexpr size_t kTokensPerAppend = 256;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt eval: %s\n%s", message.c_str(), kEvalUsage);
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "llmrt eval: %s\n", std::string(status.message()).c_str());
  return 1;
}

// The ids of `path`; every error names the file, the token's index and line, and the value.
absl::StatusOr<std::vector<int32_t>> ReadTokenIds(const std::string& path, int64_t vocab_size,
                                                  int64_t max_context) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("%s: cannot open the token file: %s", path, std::strerror(errno)));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<int32_t> ids;
  int64_t line = 1;
  size_t at = 0;
  while (at < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[at]))) {
      line += text[at++] == '\n';
      continue;
    }
    const size_t end = text.find_first_of(" \t\r\n\v\f", at);
    const std::string word = text.substr(at, end == std::string::npos ? end : end - at);
    at = end == std::string::npos ? text.size() : end;
    int64_t id;
    if (!absl::SimpleAtoi(word, &id)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: token %d (line %d) is \"%s\", expected an integer token id", path,
                          ids.size(), line, word.size() > 40 ? word.substr(0, 40) + "..." : word));
    }
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: token %d (line %d) is %d, outside the plan's vocabulary [0, %d)",
                          path, ids.size(), line, id, vocab_size));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: no token ids (expected integers in [0, %d) separated by whitespace)",
                        path, vocab_size));
  }
  if (static_cast<int64_t>(ids.size()) > max_context) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: %d tokens, more than the plan's context of %d tokens", path, ids.size(), max_context));
  }
  return ids;
}

absl::Status WriteLogits(engine::Model& model, const std::vector<int32_t>& ids,
                         const std::string& out_path) {
  absl::StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Create(out_path);
  if (!out.ok()) return out.status();
  std::unique_ptr<engine::Session> session = model.NewSession();
  for (size_t begin = 0; begin < ids.size(); begin += kTokensPerAppend) {
    const std::vector<int32_t> chunk(ids.begin() + begin,
                                     ids.begin() + std::min(ids.size(), begin + kTokensPerAppend));
    absl::StatusOr<std::vector<float>> logits = session->Append(chunk, /*all_logits=*/true);
    if (!logits.ok()) return logits.status();
    // Written as the machine holds floats: every target llmrt runs on is little-endian.
    if (absl::Status written = (*out)->Write(logits->data(), logits->size() * sizeof(float));
        !written.ok()) {
      return written;
    }
  }
  return (*out)->Commit();
}

}  // namespace

int Eval(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    std::fputs(kEvalUsage, stdout);
    return 0;
  }
  std::vector<std::string> valued = {"--tokens", "--logits-out"};
  valued.insert(valued.end(), kModelValuedFlags.begin(), kModelValuedFlags.end());
  Arguments arguments;
  std::string error =
      ParseArguments(argc, argv, valued, kModelSwitches, {"the plan file"}, arguments);
  if (!error.empty()) return UsageError(error);
  if (!arguments.values.count("--tokens")) return UsageError("missing --tokens FILE");
  if (!arguments.values.count("--logits-out")) return UsageError("missing --logits-out OUT");
  engine::ModelOptions options;
  if (error = ParseModelOptions(arguments, options); !error.empty()) return UsageError(error);

  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(arguments.plan_path, options);
  if (!model.ok()) return Fail(model.status());
  if (!(*model)->backend_note().empty()) {
    std::fprintf(stderr, "[llmrt] %s; running on the CPU\n", (*model)->backend_note().c_str());
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      ReadTokenIds(arguments.values["--tokens"], (*model)->vocab_size(), (*model)->max_context());
  if (!ids.ok()) return Fail(ids.status());
  if (absl::Status written = WriteLogits(**model, *ids, arguments.values["--logits-out"]);
      !written.ok()) {
    return Fail(written);
  }
  std::fprintf(stderr, "[llmrt] %zu positions x %lld logits written to %s\n", ids->size(),
               static_cast<long long>((*model)->vocab_size()),
               arguments.values["--logits-out"].c_str());
  return 0;
}

}  // namespace llmrt
