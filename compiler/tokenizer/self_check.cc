#include "compiler/tokenizer/self_check.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmc {
namespace {

using llmrt::plan::TokenizerSpec;

constexpr char kProse[] =
    "Once upon a time, there was a little girl named Lily. She loved to play.";

// Samples start with a non-space character: HF's Metaspace ("first") plus Strip decoders drop a
// leading space by design, so a leading space would not round-trip in HF either. All are NFC.
const char* const kSamples[] = {
    kProse, "It's 2024: 1234567890 and 3.14159, 1,000,000 items (42nd place)!",
    "def f(x):\n    return x ** 2  # square\n\r\n\tif (a && b) { c[i] = \"q\"; }",
    "Tabs\t\tand   spaces  \n\n  and newlines\n",
    "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82"  // 你好，世界。
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4",  // 日本語 한국어
    "Emoji \xF0\x9F\x98\x80 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD "                    // 😀 👍🏽
    "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",                               // 👩‍💻
    // é ï, and combining marks that have no precomposed form (NFC leaves them as they are).
    "Accents: caf\xC3\xA9 na\xC3\xAFve q\xCC\x81 q\xCC\x88 j\xCC\xA3",
    "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D"
    "\xE0\xA4\xA4\xE0\xA5\x87",  // مرحبا नमस्ते
};

std::string Quote(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text.substr(0, 80)) {
    if (c == '\n') {
      quoted += "\\n";
    } else if (c == '\t') {
      quoted += "\\t";
    } else if (c == '\r') {
      quoted += "\\r";
    } else {
      quoted += c;
    }
  }
  return quoted + (text.size() > 80 ? "...\"" : "\"");
}

std::string IdList(const std::vector<int32_t>& ids) {
  std::vector<int32_t> head(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 24));
  return absl::StrCat("[", absl::StrJoin(head, " "), ids.size() > 24 ? " ...]" : "]");
}

// Why decode(encode(text)) need not give `text` back for this tokenizer in HF either.
struct Loss {
  // Set when characters may change or vanish (lowercasing, NFKC, removed spaces the decoder
  // cannot restore): no round trip is checked.
  std::string characters;
  // Set when only whitespace may change (stories260K collapses runs of spaces, Strip trims
  // the ends): only the single-spaced prose sample is round-tripped.
  std::string spacing;
};

Loss FindLoss(const TokenizerSpec& spec) {
  const std::string kMetaspace = "\xE2\x96\x81";
  Loss loss;
  for (const auto& normalizer : spec.normalizers()) {
    switch (normalizer.kind()) {
      case TokenizerSpec::Normalizer::NFC:
      case TokenizerSpec::Normalizer::PREPEND:
        break;
      case TokenizerSpec::Normalizer::REPLACE_STRING:
        // " " -> "▁" is undone by the Metaspace-style decoders.
        if (normalizer.pattern() == " " && normalizer.content() == kMetaspace) break;
        loss.spacing = "a Replace normalizer";
        break;
      case TokenizerSpec::Normalizer::REPLACE_REGEX:
        loss.spacing = "a Replace normalizer";
        break;
      case TokenizerSpec::Normalizer::STRIP:
        loss.spacing = "the Strip normalizer";
        break;
      case TokenizerSpec::Normalizer::NFKC:
        loss.characters = "the NFKC normalizer";
        break;
      case TokenizerSpec::Normalizer::LOWERCASE:
        loss.characters = "the Lowercase normalizer";
        break;
      default:
        loss.characters = "an unknown normalizer";
        break;
    }
  }
  bool byte_level = false;
  for (const auto& pre : spec.pre_tokenizers()) {
    switch (pre.kind()) {
      case TokenizerSpec::PreTokenizer::BYTE_LEVEL:
        byte_level = true;
        break;
      case TokenizerSpec::PreTokenizer::SPLIT_REGEX:
        if (pre.behavior() == TokenizerSpec::PreTokenizer::REMOVED) {
          loss.characters = "a Split pre-tokenizer that removes text";
        }
        break;
      case TokenizerSpec::PreTokenizer::METASPACE:
      case TokenizerSpec::PreTokenizer::DIGITS:
      case TokenizerSpec::PreTokenizer::PUNCTUATION:
        break;
      default:
        loss.characters = "a whitespace-removing pre-tokenizer";
        break;
    }
  }
  if (!byte_level && !spec.byte_fallback()) {
    loss.characters = "unknown characters without byte fallback";
  }
  if (spec.decoders_size() == 0) loss.characters = "no decoder";
  if (!spec.continuing_subword_prefix().empty() || !spec.end_of_word_suffix().empty()) {
    loss.characters = "subword prefixes or suffixes";
  }
  return loss;
}

}  // namespace

absl::Status SelfCheckTokenizer(const TokenizerSpec& spec) {
  auto created = llmrt::Tokenizer::Create(spec);
  if (!created.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer self-check: the runtime cannot load the tokenizer: ",
                     created.status().message()));
  }
  const llmrt::Tokenizer& tokenizer = **created;
  const int32_t vocab_size = tokenizer.vocab_size();
  auto fail = [](const std::string& sample, const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer self-check failed on ", Quote(sample), ": ", why));
  };
  auto check_range = [&](const std::string& sample,
                         const std::vector<int32_t>& ids) -> absl::Status {
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size) {
        return fail(sample, absl::StrCat("encoding gave id ", id, ", outside the vocabulary of ",
                                         vocab_size, " tokens"));
      }
    }
    return absl::OkStatus();
  };

  const Loss loss = FindLoss(spec);
  for (const char* sample_text : kSamples) {
    const std::string sample = sample_text;
    const std::vector<int32_t> ids = tokenizer.Encode(sample, /*add_special_tokens=*/false);
    if (absl::Status status = check_range(sample, ids); !status.ok()) return status;
    if (absl::Status status =
            check_range(sample, tokenizer.Encode(sample, /*add_special_tokens=*/true));
        !status.ok()) {
      return status;
    }
    if (ids.empty()) return fail(sample, "it encodes to no tokens");
    if (!loss.characters.empty()) continue;
    if (!loss.spacing.empty() && sample != kProse) continue;
    const std::string decoded = tokenizer.Decode(ids, /*skip_special_tokens=*/false);
    if (decoded != sample) {
      return fail(sample, absl::StrCat("encode gives ", IdList(ids), ", which decodes to ",
                                       Quote(decoded), " instead of the text"));
    }
  }

  for (const auto& added : spec.added_tokens()) {
    if (!added.special()) continue;
    const std::string& content = added.content();
    const std::vector<int32_t> alone = tokenizer.Encode(content, /*add_special_tokens=*/false);
    if (alone != std::vector<int32_t>{added.id()}) {
      return fail(content, absl::StrCat("the special token encodes to ", IdList(alone),
                                        " instead of its id ", added.id()));
    }
    const std::string inside = absl::StrCat("Hello ", content, " world");
    const std::vector<int32_t> ids = tokenizer.Encode(inside, /*add_special_tokens=*/false);
    if (absl::Status status = check_range(inside, ids); !status.ok()) return status;
    if (std::find(ids.begin(), ids.end(), added.id()) == ids.end()) {
      return fail(inside, absl::StrCat("encode gives ", IdList(ids), ", without the special token ",
                                       added.id()));
    }
    const std::string decoded = tokenizer.Decode(alone, /*skip_special_tokens=*/false);
    if (decoded != content) {
      return fail(content, absl::StrCat("the special token decodes to ", Quote(decoded)));
    }
  }
  return absl::OkStatus();
}

}  // namespace llmc
