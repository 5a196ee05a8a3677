// `llmrt perplexity PLAN TEXT_FILE [--ctx N] [--kl-base FILE] [--save-logits FILE]`.
//
// Scoring follows llama.cpp's llama-perplexity, so figures compare with its: the text is encoded
// once with the tokenizer's special tokens (BOS), cut into floor(tokens / ctx) windows of ctx
// tokens (a tail shorter than ctx is not scored), each window's first token is replaced by BOS
// when the tokenizer adds one, each window runs in a fresh session, and only the second half is
// scored: the rows at positions ctx/2 .. ctx-2, each predicting the next token of the window.
// Every scored token so sees at least ctx/2 tokens of context. Perplexity = exp(mean NLL), with
// the standard error of the mean NLL carried through exp (as llama-perplexity prints it). Sums
// are in double (fidelity.h).
//
// --save-logits writes those scored rows (fidelity.h has the file layout); --kl-base reads such
// a file from a base plan over the same text and ctx and adds KL(base || this) per token (mean
// with its standard error, and the largest) and how often both plans' top-1 tokens agree.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/model.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tools/llmrt/arguments.h"
#include "tools/llmrt/eval.h"
#include "tools/llmrt/fidelity.h"

namespace llmrt {
namespace {

// llama-perplexity's default window; long enough that the scored half has 256 tokens of
// context, short enough for any plan's context and a quick run.
constexpr int64_t kDefaultCtx = 512;
// Each window must score at least one token: positions ctx/2 .. ctx-2.
constexpr int64_t kMinCtx = 3;

constexpr char kPerplexityUsage[] =
    "usage: llmrt perplexity PLAN TEXT_FILE [--ctx N] [--kl-base FILE] [--save-logits FILE]\n"
    "                        [--threads N] [--backend B] [--kv-cache f32|f16|bf16|int8]\n"
    "                        [--quant-activations int8|f32] [--verify]\n"
    "  Encodes TEXT_FILE with the plan's tokenizer (with BOS), cuts it into windows of --ctx\n"
    "  tokens (a shorter tail is dropped), starts each window with BOS and scores the SECOND\n"
    "  HALF of each window (positions ctx/2 .. ctx-2 predicting the next token), as llama.cpp's\n"
    "  llama-perplexity does. Prints perplexity +/- its standard error.\n"
    "  --ctx N: window length (default 512, at most the plan's context; with --kl-base, the\n"
    "           base file's)\n"
    "  --save-logits FILE: save the scored rows' logits (docs/quantization.md has the format)\n"
    "  --kl-base FILE: logits saved by --save-logits from a base plan over the same text and\n"
    "           --ctx; adds mean/max KL(base || this plan) per token and top-1 agreement\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt perplexity: %s\n%s", message.c_str(), kPerplexityUsage);
  return 2;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "llmrt perplexity: %s\n", std::string(status.message()).c_str());
  return 1;
}

// The base file must have been made over the same windows: says the first thing that differs
// and how to fix it.
absl::Status CheckBase(const fidelity::SavedLogitsReader& base,
                       const fidelity::SavedLogitsHeader& ours,
                       const std::vector<int32_t>& window_tokens, const std::string& text_path) {
  const fidelity::SavedLogitsHeader& theirs = base.header();
  if (theirs.vocab_size != ours.vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--kl-base %s: saved with a vocabulary of %d, this plan has %d (a different model "
        "family or tokenizer; KL needs the same vocabulary)",
        base.path(), theirs.vocab_size, ours.vocab_size));
  }
  if (theirs.ctx != ours.ctx || theirs.first_scored != ours.first_scored) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--kl-base %s: saved with --ctx %d, this run uses --ctx %d; run with "
                        "--ctx %d (or leave --ctx out to take the base's)",
                        base.path(), theirs.ctx, ours.ctx, theirs.ctx));
  }
  if (theirs.num_text_tokens != ours.num_text_tokens || theirs.num_windows != ours.num_windows) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--kl-base %s: saved over a text of %d tokens (%d windows), %s encodes to %d tokens (%d "
        "windows): a different text or tokenizer",
        base.path(), theirs.num_text_tokens, theirs.num_windows, text_path, ours.num_text_tokens,
        ours.num_windows));
  }
  for (size_t index = 0; index < window_tokens.size(); ++index) {
    if (base.window_tokens()[index] != window_tokens[index]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--kl-base %s: token %d (window %d, position %d) is %d there and %d in %s: a different "
          "text or tokenizer",
          base.path(), index, index / ours.ctx, index % ours.ctx, base.window_tokens()[index],
          window_tokens[index], text_path));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int Perplexity(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    std::fputs(kPerplexityUsage, stdout);
    return 0;
  }
  std::vector<std::string> valued = {"--ctx", "--kl-base", "--save-logits"};
  valued.insert(valued.end(), kModelValuedFlags.begin(), kModelValuedFlags.end());
  Arguments arguments;
  std::string error = ParseArguments(argc, argv, valued, kModelSwitches,
                                     {"the plan file", "the text file"}, arguments);
  if (!error.empty()) return UsageError(error);
  const std::string& text_path = arguments.positionals[1];
  int64_t ctx = 0;
  if (!ParseNumber(arguments, "--ctx", ctx, error)) return UsageError(error);
  if (arguments.values.count("--ctx") && ctx < kMinCtx) {
    return UsageError(
        absl::StrFormat("--ctx must be >= %d (each window scores positions "
                        "ctx/2 .. ctx-2), found %d",
                        kMinCtx, ctx));
  }
  engine::ModelOptions options;
  if (error = ParseModelOptions(arguments, options); !error.empty()) return UsageError(error);

  // The base file first: a wrong path fails before the model runs.
  std::unique_ptr<fidelity::SavedLogitsReader> base;
  if (arguments.values.count("--kl-base")) {
    absl::StatusOr<std::unique_ptr<fidelity::SavedLogitsReader>> opened =
        fidelity::SavedLogitsReader::Open(arguments.values["--kl-base"]);
    if (!opened.ok()) {
      return Fail(absl::Status(opened.status().code(),
                               absl::StrCat("--kl-base ", opened.status().message())));
    }
    base = *std::move(opened);
    if (!arguments.values.count("--ctx")) ctx = base->header().ctx;
  }
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    return Fail(absl::NotFoundError(
        absl::StrFormat("%s: cannot open the text file: %s", text_path, std::strerror(errno))));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  absl::StatusOr<std::unique_ptr<engine::Model>> loaded =
      engine::Model::Load(arguments.plan_path, options);
  if (!loaded.ok()) return Fail(loaded.status());
  engine::Model& model = **loaded;
  if (!model.backend_note().empty()) {
    std::fprintf(stderr, "[llmrt] %s; running on the CPU\n", model.backend_note().c_str());
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Create(model.meta().tokenizer());
  if (!tokenizer.ok()) {
    return Fail(absl::Status(
        tokenizer.status().code(),
        absl::StrFormat("%s: tokenizer: %s", arguments.plan_path, tokenizer.status().message())));
  }
  if (ctx == 0) ctx = std::min(kDefaultCtx, model.max_context());
  if (ctx > model.max_context()) {
    return Fail(absl::OutOfRangeError(absl::StrFormat(
        "--ctx %d is more than the plan's context of %d tokens", ctx, model.max_context())));
  }
  const std::vector<int32_t> tokens = (*tokenizer)->Encode(text, /*add_special_tokens=*/true);
  const int64_t num_windows = static_cast<int64_t>(tokens.size()) / ctx;
  if (num_windows == 0) {
    return Fail(absl::InvalidArgumentError(absl::StrFormat(
        "%s: %d tokens, fewer than one window of --ctx %d tokens; give a longer text or a "
        "smaller --ctx",
        text_path, tokens.size(), ctx)));
  }
  // llama-perplexity restarts every window with BOS when the model's tokenizer adds one: the
  // model is scored as it is used, from the start of a sequence.
  const int32_t bos = (*tokenizer)->bos_id();
  const bool starts_with_bos = bos >= 0 && tokens.front() == bos;
  std::vector<int32_t> window_tokens(tokens.begin(), tokens.begin() + num_windows * ctx);
  if (starts_with_bos) {
    for (int64_t window = 0; window < num_windows; ++window) window_tokens[window * ctx] = bos;
  }

  fidelity::SavedLogitsHeader header;
  header.vocab_size = static_cast<uint32_t>(model.vocab_size());
  header.ctx = static_cast<uint32_t>(ctx);
  header.first_scored = static_cast<uint32_t>(ctx / 2);
  header.num_windows = static_cast<uint32_t>(num_windows);
  header.num_text_tokens = tokens.size();
  const int64_t vocab = model.vocab_size();
  const int64_t first = header.first_scored;
  const int64_t rows_per_window = header.rows_per_window();
  if (base != nullptr) {
    if (absl::Status matches = CheckBase(*base, header, window_tokens, text_path); !matches.ok()) {
      return Fail(matches);
    }
  }
  std::unique_ptr<fidelity::SavedLogitsWriter> writer;
  if (arguments.values.count("--save-logits")) {
    absl::StatusOr<std::unique_ptr<fidelity::SavedLogitsWriter>> created =
        fidelity::SavedLogitsWriter::Create(arguments.values["--save-logits"], header,
                                            window_tokens);
    if (!created.ok()) return Fail(created.status());
    writer = *std::move(created);
  }

  std::fprintf(stderr,
               "[llmrt] %s: %zu tokens; %lld windows of %lld, scoring positions %lld..%lld of "
               "each (%lld tokens)\n",
               text_path.c_str(), tokens.size(), static_cast<long long>(num_windows),
               static_cast<long long>(ctx), static_cast<long long>(first),
               static_cast<long long>(ctx - 2),
               static_cast<long long>(num_windows * rows_per_window));
  fidelity::RunningMean nll, base_nll, kl;
  double max_kl = 0;
  int64_t max_kl_token = 0;
  int64_t top1_agreements = 0;
  std::vector<float> base_rows;
  std::unique_ptr<engine::Session> session = model.NewSession();
  for (int64_t window = 0; window < num_windows; ++window) {
    const auto window_begin = window_tokens.begin() + window * ctx;
    session->Reset();
    // The first half needs no logits; the second half's rows are the scored ones (plus the
    // last, which predicts past the window).
    absl::StatusOr<std::vector<float>> prefix =
        session->Append(std::vector<int32_t>(window_begin, window_begin + first), false);
    if (!prefix.ok()) return Fail(prefix.status());
    absl::StatusOr<std::vector<float>> rows =
        session->Append(std::vector<int32_t>(window_begin + first, window_begin + ctx), true);
    if (!rows.ok()) return Fail(rows.status());
    if (base != nullptr) {
      if (absl::Status read = base->ReadWindow(window, base_rows); !read.ok()) return Fail(read);
    }
    for (int64_t row = 0; row < rows_per_window; ++row) {
      const float* logits = rows->data() + row * vocab;
      const int32_t target = window_begin[first + row + 1];
      nll.Add(fidelity::NegativeLogLikelihood(logits, vocab, target));
      if (base == nullptr) continue;
      const float* base_logits = base_rows.data() + row * vocab;
      base_nll.Add(fidelity::NegativeLogLikelihood(base_logits, vocab, target));
      const double divergence = fidelity::KlDivergence(base_logits, logits, vocab);
      kl.Add(divergence);
      if (divergence > max_kl || kl.count() == 1) {
        max_kl = divergence;
        max_kl_token = window * ctx + first + row + 1;
      }
      top1_agreements +=
          fidelity::Argmax(base_logits, vocab) == fidelity::Argmax(logits, vocab) ? 1 : 0;
    }
    if (writer != nullptr) {
      if (absl::Status added = writer->AddWindow(rows->data()); !added.ok()) return Fail(added);
    }
    // Running perplexity per window, as llama-perplexity prints it: a drifting figure shows a
    // text whose parts differ, or a run worth stopping early.
    std::fprintf(stderr, "%s[%lld]%.4f", window == 0 ? "" : ",", static_cast<long long>(window + 1),
                 std::exp(nll.mean()));
    std::fflush(stderr);
  }
  std::fputc('\n', stderr);
  if (writer != nullptr) {
    if (absl::Status finished = writer->Finish(); !finished.ok()) return Fail(finished);
  }

  // exp is applied to the mean NLL; its standard error maps through d exp(x) = exp(x) dx.
  const double perplexity = std::exp(nll.mean());
  std::string out = absl::StrFormat(
      "tokens scored: %d (%d windows of %d, positions %d..%d of each)\n"
      "perplexity: %.6f +/- %.6f\n",
      nll.count(), num_windows, ctx, first, ctx - 2, perplexity, perplexity * nll.standard_error());
  if (base != nullptr) {
    const double base_perplexity = std::exp(base_nll.mean());
    absl::StrAppendFormat(&out,
                          "base perplexity: %.6f +/- %.6f (%s)\n"
                          "mean KL(base||this): %.6g +/- %.6g\n"
                          "max KL(base||this): %.6g (token %d of the text, predicting id %d)\n"
                          "top-1 agreement: %.6f (%d of %d)\n",
                          base_perplexity, base_perplexity * base_nll.standard_error(),
                          base->path(), kl.mean(), kl.standard_error(), max_kl, max_kl_token,
                          window_tokens[max_kl_token],
                          static_cast<double>(top1_agreements) / static_cast<double>(kl.count()),
                          top1_agreements, kl.count());
  }
  if (writer != nullptr) {
    absl::StrAppendFormat(&out, "saved logits: %s\n", arguments.values["--save-logits"]);
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace llmrt
