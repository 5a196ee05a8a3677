#include "compiler/synth/synth_tokenizer.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581 "▁", SentencePiece's word marker

Json SpecialToken(int64_t id, const std::string& content) {
  return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", true}};
}

Json Pattern(const char* kind, const std::string& text) { return Json{{kind, text}}; }

}  // namespace

absl::StatusOr<std::string> SynthTokenizerJson(int64_t vocab_size) {
  if (vocab_size < kSynthMinVocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "synthetic tokenizer: vocab_size %d is too small; expected at least %d (3 special "
        "tokens and 256 byte-fallback pieces)",
        vocab_size, kSynthMinVocab));
  }
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  for (int byte = 0; byte < 256; ++byte) pieces.push_back(absl::StrFormat("<0x%02X>", byte));
  std::unordered_set<std::string> seen(pieces.begin(), pieces.end());

  // Single characters, then merges; `mergeable` indexes both (never specials or bytes).
  std::vector<std::string> mergeable = {kMetaspace};
  for (char c = '!'; c <= '~'; ++c) mergeable.push_back(std::string(1, c));
  for (const std::string& piece : mergeable) {
    if (static_cast<int64_t>(pieces.size()) == vocab_size) break;
    pieces.push_back(piece);
    seen.insert(piece);
  }
  const size_t num_characters = pieces.size() - kSynthMinVocab;
  mergeable.resize(num_characters);
  std::vector<std::string> merges;
  auto try_merge = [&](size_t left, size_t right) {
    if (static_cast<int64_t>(pieces.size()) == vocab_size) return;
    std::string merged = mergeable[left] + mergeable[right];
    if (!seen.insert(merged).second) return;
    merges.push_back(mergeable[left] + " " + mergeable[right]);
    pieces.push_back(merged);
    mergeable.push_back(std::move(merged));
  };
  for (size_t k = 0; k < mergeable.size() && static_cast<int64_t>(pieces.size()) < vocab_size;
       ++k) {
    for (size_t i = 0; i <= k; ++i) {
      try_merge(i, k);
      if (i != k) try_merge(k, i);
    }
  }
  if (static_cast<int64_t>(pieces.size()) != vocab_size) {
    // Cannot happen: pairs grow quadratically with k; kept so a logic error is not silent.
    return absl::InternalError(absl::StrFormat("synthetic tokenizer: built %d pieces, expected %d",
                                               pieces.size(), vocab_size));
  }

  // A sorted-map object for the vocabulary: ordered_json looks keys up linearly, which for
  // 32000 pieces is 5 * 10^8 string compares (seconds); key order does not matter to readers.
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t id = 0; id < pieces.size(); ++id) vocab[pieces[id]] = id;
  Json tokenizer;
  tokenizer["version"] = "1.0";
  tokenizer["truncation"] = nullptr;
  tokenizer["padding"] = nullptr;
  tokenizer["added_tokens"] =
      Json::array({SpecialToken(0, "<unk>"), SpecialToken(1, "<s>"), SpecialToken(2, "</s>")});
  tokenizer["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       Json::array(
           {Json{
                {"type", "Replace"}, {"pattern", Pattern("Regex", "\\A +| +\\z")}, {"content", ""}},
            Json{{"type", "Replace"}, {"pattern", Pattern("Regex", " {2,}")}, {"content", " "}},
            Json{{"type", "Prepend"}, {"prepend", kMetaspace}},
            Json{{"type", "Replace"},
                 {"pattern", Pattern("String", " ")},
                 {"content", kMetaspace}}})}};
  tokenizer["pre_tokenizer"] = nullptr;
  Json bos_piece = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  tokenizer["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", Json::array({bos_piece, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", Json::array({bos_piece,
                            {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                            {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens",
       {{"<s>", {{"id", "<s>"}, {"ids", Json::array({1})}, {"tokens", Json::array({"<s>"})}}}}}};
  tokenizer["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       Json::array(
           {Json{{"type", "Replace"}, {"pattern", Pattern("String", kMetaspace)}, {"content", " "}},
            Json{{"type", "ByteFallback"}}, Json{{"type", "Fuse"}},
            Json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  tokenizer["model"] = {{"type", "BPE"},
                        {"dropout", nullptr},
                        {"unk_token", "<unk>"},
                        {"continuing_subword_prefix", nullptr},
                        {"end_of_word_suffix", nullptr},
                        {"fuse_unk", true},
                        {"byte_fallback", true},
                        {"vocab", std::move(vocab)},
                        {"merges", merges}};
  return tokenizer.dump(1);
}

std::string SynthTokenizerConfigJson(int64_t max_positions) {
  Json decoder = Json::object();
  const char* names[] = {"<unk>", "<s>", "</s>"};
  for (int id = 0; id < 3; ++id) {
    Json token = SpecialToken(id, names[id]);
    token.erase("id");
    decoder[std::to_string(id)] = token;
  }
  Json config = {{"add_bos_token", true},
                 {"add_eos_token", false},
                 {"added_tokens_decoder", decoder},
                 {"bos_token", "<s>"},
                 {"clean_up_tokenization_spaces", false},
                 {"eos_token", "</s>"},
                 {"legacy", true},
                 {"model_max_length", max_positions},
                 {"pad_token", nullptr},
                 {"sp_model_kwargs", Json::object()},
                 {"spaces_between_special_tokens", false},
                 {"tokenizer_class", "LlamaTokenizer"},
                 {"unk_token", "<unk>"}};
  return config.dump(2) + "\n";
}

std::string SynthSpecialTokensMapJson() {
  auto token = [](const char* content) {
    return Json{{"content", content},
                {"lstrip", false},
                {"normalized", false},
                {"rstrip", false},
                {"single_word", false}};
  };
  Json map = {
      {"bos_token", token("<s>")}, {"eos_token", token("</s>")}, {"unk_token", token("<unk>")}};
  return map.dump(2) + "\n";
}

}  // namespace llmc
