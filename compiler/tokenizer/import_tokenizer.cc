#include "compiler/tokenizer/import_tokenizer.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "compiler/importer/json_util.h"
#include "compiler/tokenizer/import_internal.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"

namespace llmc {
namespace {

using Json = nlohmann::json;
using importer_internal::ParseJson;
using llmrt::plan::TokenizerSpec;

// Each component family's supported "type"s, listed in errors so the user sees the alternatives.
constexpr absl::string_view kSupportedNormalizers =
    "Sequence, Replace, Prepend, NFC, NFKC, Lowercase, Strip";
constexpr absl::string_view kSupportedPreTokenizers =
    "Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit";
constexpr absl::string_view kSupportedDecoders =
    "Sequence, Replace, ByteFallback, Fuse, Strip, ByteLevel, Metaspace";
constexpr absl::string_view kSupportedPostProcessors =
    "TemplateProcessing, RobertaProcessing, BertProcessing, ByteLevel, Sequence";

absl::Status Invalid(absl::string_view file, absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", path, ": ", message));
}

std::string TypeName(const Json& value) { return value.type_name(); }

// Typed field access: a missing or null field gives `fallback`; a field of the wrong type is an
// error naming it.
class Reader {
 public:
  explicit Reader(absl::string_view file) : file_(file) {}
  const std::string& file() const { return file_; }

  absl::Status Error(absl::string_view path, absl::string_view message) const {
    return Invalid(file_, path, message);
  }

  absl::StatusOr<std::string> String(const Json& object, const char* key, absl::string_view path,
                                     std::string fallback = "") const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_string()) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat("expected a string, found ", TypeName(*it)));
    }
    return it->get<std::string>();
  }

  absl::StatusOr<bool> Bool(const Json& object, const char* key, absl::string_view path,
                            bool fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat("expected true or false, found ", TypeName(*it)));
    }
    return it->get<bool>();
  }

  absl::StatusOr<int64_t> Int(const Json& object, const char* key, absl::string_view path,
                              int64_t fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_number_integer()) {
      return Error(absl::StrCat(path, ".", key),
                   absl::StrCat("expected an integer, found ", TypeName(*it)));
    }
    return it->get<int64_t>();
  }

  // HF patterns are {"String": "..."} or {"Regex": "..."}.
  absl::Status Pattern(const Json& object, absl::string_view path, std::string* pattern,
                       bool* is_regex) const {
    auto it = object.find("pattern");
    if (it == object.end() || !it->is_object()) {
      return Error(absl::StrCat(path, ".pattern"),
                   "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    if (it->contains("String") && (*it)["String"].is_string()) {
      *pattern = (*it)["String"].get<std::string>();
      *is_regex = false;
      return absl::OkStatus();
    }
    if (it->contains("Regex") && (*it)["Regex"].is_string()) {
      *pattern = (*it)["Regex"].get<std::string>();
      *is_regex = true;
      return absl::OkStatus();
    }
    return Error(absl::StrCat(path, ".pattern"), absl::StrCat("expected {\"String\": ...} or "
                                                              "{\"Regex\": ...}, found ",
                                                              it->dump()));
  }

 private:
  std::string file_;
};

absl::StatusOr<std::string> ComponentType(const Reader& reader, const Json& component,
                                          absl::string_view path) {
  if (!component.is_object()) {
    return reader.Error(path, absl::StrCat("expected an object, found ", TypeName(component)));
  }
  LLMRT_ASSIGN_OR_RETURN(std::string type, reader.String(component, "type", path));
  if (type.empty()) return reader.Error(path, "has no \"type\"");
  return type;
}

// A literal for PCRE2: every ASCII punctuation character escaped, everything else as is.
std::string EscapeRegex(absl::string_view literal) {
  std::string escaped;
  for (char c : literal) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isalnum(byte) && byte != ' ') escaped.push_back('\\');
    escaped.push_back(c);
  }
  return escaped;
}

absl::StatusOr<TokenizerSpec::PreTokenizer::SplitBehavior> ParseBehavior(
    const Reader& reader, const Json& component, absl::string_view path,
    absl::string_view fallback) {
  LLMRT_ASSIGN_OR_RETURN(std::string behavior,
                         reader.String(component, "behavior", path, std::string(fallback)));
  if (behavior == "Removed") return TokenizerSpec::PreTokenizer::REMOVED;
  if (behavior == "Isolated") return TokenizerSpec::PreTokenizer::ISOLATED;
  if (behavior == "MergedWithPrevious") return TokenizerSpec::PreTokenizer::MERGED_WITH_PREVIOUS;
  if (behavior == "MergedWithNext") return TokenizerSpec::PreTokenizer::MERGED_WITH_NEXT;
  if (behavior == "Contiguous") return TokenizerSpec::PreTokenizer::CONTIGUOUS;
  return reader.Error(absl::StrCat(path, ".behavior"),
                      absl::StrCat("\"", behavior,
                                   "\" is not one of Removed, Isolated, MergedWithPrevious, "
                                   "MergedWithNext, Contiguous"));
}

// Metaspace's prepend_scheme; files written before tokenizers 0.19 have add_prefix_space.
absl::StatusOr<std::string> ParsePrependScheme(const Reader& reader, const Json& component,
                                               absl::string_view path) {
  if (component.contains("prepend_scheme") && !component["prepend_scheme"].is_null()) {
    LLMRT_ASSIGN_OR_RETURN(std::string scheme, reader.String(component, "prepend_scheme", path));
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      return reader.Error(absl::StrCat(path, ".prepend_scheme"),
                          absl::StrCat("\"", scheme, "\" is not one of always, first, never"));
    }
    return scheme;
  }
  LLMRT_ASSIGN_OR_RETURN(bool add_prefix_space,
                         reader.Bool(component, "add_prefix_space", path, true));
  return std::string(add_prefix_space ? "always" : "never");
}

absl::Status ImportNormalizer(const Reader& reader, const Json& component, absl::string_view path,
                              TokenizerSpec* spec) {
  if (component.is_null()) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(std::string type, ComponentType(reader, component, path));
  if (type == "Sequence") {
    auto it = component.find("normalizers");
    if (it == component.end() || !it->is_array()) {
      return reader.Error(absl::StrCat(path, ".normalizers"), "expected an array");
    }
    for (size_t index = 0; index < it->size(); ++index) {
      LLMRT_RETURN_IF_ERROR(ImportNormalizer(
          reader, (*it)[index], absl::StrCat(path, ".normalizers[", index, "]"), spec));
    }
    return absl::OkStatus();
  }
  TokenizerSpec::Normalizer normalizer;
  if (type == "Replace") {
    std::string pattern;
    bool is_regex = false;
    LLMRT_RETURN_IF_ERROR(reader.Pattern(component, path, &pattern, &is_regex));
    LLMRT_ASSIGN_OR_RETURN(std::string content, reader.String(component, "content", path));
    if (pattern.empty()) return reader.Error(absl::StrCat(path, ".pattern"), "is empty");
    normalizer.set_kind(is_regex ? TokenizerSpec::Normalizer::REPLACE_REGEX
                                 : TokenizerSpec::Normalizer::REPLACE_STRING);
    normalizer.set_pattern(pattern);
    normalizer.set_content(content);
  } else if (type == "Prepend") {
    LLMRT_ASSIGN_OR_RETURN(std::string prepend, reader.String(component, "prepend", path));
    normalizer.set_kind(TokenizerSpec::Normalizer::PREPEND);
    normalizer.set_content(prepend);
  } else if (type == "NFC") {
    normalizer.set_kind(TokenizerSpec::Normalizer::NFC);
  } else if (type == "NFKC") {
    normalizer.set_kind(TokenizerSpec::Normalizer::NFKC);
  } else if (type == "Lowercase") {
    normalizer.set_kind(TokenizerSpec::Normalizer::LOWERCASE);
  } else if (type == "Strip") {
    LLMRT_ASSIGN_OR_RETURN(bool left, reader.Bool(component, "strip_left", path, true));
    LLMRT_ASSIGN_OR_RETURN(bool right, reader.Bool(component, "strip_right", path, true));
    normalizer.set_kind(TokenizerSpec::Normalizer::STRIP);
    normalizer.set_strip_left(left);
    normalizer.set_strip_right(right);
  } else {
    return reader.Error(
        path, absl::StrCat("normalizer \"", type,
                           "\" is not supported (supported: ", kSupportedNormalizers, ")"));
  }
  *spec->add_normalizers() = std::move(normalizer);
  return absl::OkStatus();
}

absl::Status ImportPreTokenizer(const Reader& reader, const Json& component, absl::string_view path,
                                TokenizerSpec* spec) {
  if (component.is_null()) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(std::string type, ComponentType(reader, component, path));
  if (type == "Sequence") {
    auto it = component.find("pretokenizers");
    if (it == component.end() || !it->is_array()) {
      return reader.Error(absl::StrCat(path, ".pretokenizers"), "expected an array");
    }
    for (size_t index = 0; index < it->size(); ++index) {
      LLMRT_RETURN_IF_ERROR(ImportPreTokenizer(
          reader, (*it)[index], absl::StrCat(path, ".pretokenizers[", index, "]"), spec));
    }
    return absl::OkStatus();
  }
  TokenizerSpec::PreTokenizer pre;
  if (type == "Split") {
    std::string pattern;
    bool is_regex = false;
    LLMRT_RETURN_IF_ERROR(reader.Pattern(component, path, &pattern, &is_regex));
    if (pattern.empty()) return reader.Error(absl::StrCat(path, ".pattern"), "is empty");
    LLMRT_ASSIGN_OR_RETURN(auto behavior, ParseBehavior(reader, component, path, ""));
    LLMRT_ASSIGN_OR_RETURN(bool invert, reader.Bool(component, "invert", path, false));
    pre.set_kind(TokenizerSpec::PreTokenizer::SPLIT_REGEX);
    pre.set_pattern(is_regex ? pattern : EscapeRegex(pattern));
    pre.set_behavior(behavior);
    pre.set_invert(invert);
  } else if (type == "ByteLevel") {
    LLMRT_ASSIGN_OR_RETURN(bool add_prefix_space,
                           reader.Bool(component, "add_prefix_space", path, true));
    LLMRT_ASSIGN_OR_RETURN(bool use_regex, reader.Bool(component, "use_regex", path, true));
    pre.set_kind(TokenizerSpec::PreTokenizer::BYTE_LEVEL);
    pre.set_add_prefix_space(add_prefix_space);
    pre.set_use_regex(use_regex);
  } else if (type == "Metaspace") {
    LLMRT_ASSIGN_OR_RETURN(std::string replacement,
                           reader.String(component, "replacement", path, "\xE2\x96\x81"));
    LLMRT_ASSIGN_OR_RETURN(std::string scheme, ParsePrependScheme(reader, component, path));
    LLMRT_ASSIGN_OR_RETURN(bool split, reader.Bool(component, "split", path, true));
    pre.set_kind(TokenizerSpec::PreTokenizer::METASPACE);
    pre.set_replacement(replacement);
    pre.set_prepend_scheme(scheme);
    pre.set_split(split);
  } else if (type == "Digits") {
    LLMRT_ASSIGN_OR_RETURN(bool individual,
                           reader.Bool(component, "individual_digits", path, false));
    pre.set_kind(TokenizerSpec::PreTokenizer::DIGITS);
    pre.set_individual_digits(individual);
  } else if (type == "Punctuation") {
    LLMRT_ASSIGN_OR_RETURN(auto behavior, ParseBehavior(reader, component, path, "Isolated"));
    pre.set_kind(TokenizerSpec::PreTokenizer::PUNCTUATION);
    pre.set_behavior(behavior);
  } else if (type == "Whitespace") {
    pre.set_kind(TokenizerSpec::PreTokenizer::WHITESPACE);
  } else if (type == "WhitespaceSplit") {
    pre.set_kind(TokenizerSpec::PreTokenizer::WHITESPACE_SPLIT);
  } else {
    return reader.Error(
        path, absl::StrCat("pre_tokenizer \"", type,
                           "\" is not supported (supported: ", kSupportedPreTokenizers, ")"));
  }
  *spec->add_pre_tokenizers() = std::move(pre);
  return absl::OkStatus();
}

absl::Status ImportDecoder(const Reader& reader, const Json& component, absl::string_view path,
                           TokenizerSpec* spec) {
  if (component.is_null()) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(std::string type, ComponentType(reader, component, path));
  if (type == "Sequence") {
    auto it = component.find("decoders");
    if (it == component.end() || !it->is_array()) {
      return reader.Error(absl::StrCat(path, ".decoders"), "expected an array");
    }
    for (size_t index = 0; index < it->size(); ++index) {
      LLMRT_RETURN_IF_ERROR(
          ImportDecoder(reader, (*it)[index], absl::StrCat(path, ".decoders[", index, "]"), spec));
    }
    return absl::OkStatus();
  }
  TokenizerSpec::Decoder decoder;
  if (type == "Replace") {
    std::string pattern;
    bool is_regex = false;
    LLMRT_RETURN_IF_ERROR(reader.Pattern(component, path, &pattern, &is_regex));
    if (pattern.empty()) return reader.Error(absl::StrCat(path, ".pattern"), "is empty");
    LLMRT_ASSIGN_OR_RETURN(std::string content, reader.String(component, "content", path));
    decoder.set_kind(TokenizerSpec::Decoder::REPLACE);
    decoder.set_pattern(pattern);
    decoder.set_pattern_is_regex(is_regex);
    decoder.set_content(content);
  } else if (type == "ByteFallback") {
    decoder.set_kind(TokenizerSpec::Decoder::BYTE_FALLBACK);
  } else if (type == "Fuse") {
    decoder.set_kind(TokenizerSpec::Decoder::FUSE);
  } else if (type == "Strip") {
    LLMRT_ASSIGN_OR_RETURN(std::string content, reader.String(component, "content", path, " "));
    LLMRT_ASSIGN_OR_RETURN(int64_t start, reader.Int(component, "start", path, 0));
    LLMRT_ASSIGN_OR_RETURN(int64_t stop, reader.Int(component, "stop", path, 0));
    // Counts beyond int32 strip everything anyway (a decoded text is far shorter than 2^31
    // characters).
    constexpr int64_t kMaxCount = 0x7FFFFFFF;
    if (start < 0 || stop < 0) {
      return reader.Error(
          path, absl::StrCat("start and stop must be >= 0, found ", start, " and ", stop));
    }
    decoder.set_kind(TokenizerSpec::Decoder::STRIP);
    decoder.set_content(content);
    decoder.set_strip_start(static_cast<int32_t>(std::min(start, kMaxCount)));
    decoder.set_strip_stop(static_cast<int32_t>(std::min(stop, kMaxCount)));
  } else if (type == "ByteLevel") {
    decoder.set_kind(TokenizerSpec::Decoder::BYTE_LEVEL);
  } else if (type == "Metaspace") {
    LLMRT_ASSIGN_OR_RETURN(std::string replacement,
                           reader.String(component, "replacement", path, "\xE2\x96\x81"));
    LLMRT_ASSIGN_OR_RETURN(std::string scheme, ParsePrependScheme(reader, component, path));
    decoder.set_kind(TokenizerSpec::Decoder::METASPACE);
    decoder.set_replacement(replacement);
    decoder.set_prepend_scheme(scheme);
  } else {
    return reader.Error(path, absl::StrCat("decoder \"", type, "\" is not supported (supported: ",
                                           kSupportedDecoders, ")"));
  }
  *spec->add_decoders() = std::move(decoder);
  return absl::OkStatus();
}

absl::Status ImportPostProcessor(const Reader& reader, const Json& component,
                                 absl::string_view path, TokenizerSpec* spec) {
  if (component.is_null()) return absl::OkStatus();
  LLMRT_ASSIGN_OR_RETURN(std::string type, ComponentType(reader, component, path));
  if (type == "Sequence") {
    auto it = component.find("processors");
    if (it == component.end() || !it->is_array()) {
      return reader.Error(absl::StrCat(path, ".processors"), "expected an array");
    }
    for (size_t index = 0; index < it->size(); ++index) {
      LLMRT_RETURN_IF_ERROR(ImportPostProcessor(
          reader, (*it)[index], absl::StrCat(path, ".processors[", index, "]"), spec));
    }
    return absl::OkStatus();
  }
  // ByteLevel as a post-processor only trims offsets; token ids are unchanged.
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    // Single sequence: cls $A sep. Roberta's trim_offsets/add_prefix_space only move offsets.
    if (spec->post_template_size() > 0) {
      return reader.Error(path, "a second template-making post-processor is not supported");
    }
    std::vector<int32_t> ids;
    for (const char* key : {"cls", "sep"}) {
      auto it = component.find(key);
      if (it == component.end() || !it->is_array() || it->size() != 2 || !(*it)[0].is_string() ||
          !(*it)[1].is_number_integer()) {
        return reader.Error(absl::StrCat(path, ".", key),
                            absl::StrCat("expected [\"token\", id], found ",
                                         it == component.end() ? "nothing" : it->dump()));
      }
      ids.push_back((*it)[1].get<int32_t>());
    }
    spec->add_post_template()->add_special_ids(ids[0]);
    spec->add_post_template()->set_is_sequence(true);
    spec->add_post_template()->add_special_ids(ids[1]);
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return reader.Error(
        path, absl::StrCat("post_processor \"", type,
                           "\" is not supported (supported: ", kSupportedPostProcessors, ")"));
  }
  if (spec->post_template_size() > 0) {
    return reader.Error(path, "a second TemplateProcessing is not supported");
  }
  auto single = component.find("single");
  if (single == component.end() || !single->is_array()) {
    return reader.Error(absl::StrCat(path, ".single"), "expected an array");
  }
  const Json empty = Json::object();
  auto special_tokens_it = component.find("special_tokens");
  const Json& special_tokens =
      special_tokens_it != component.end() && special_tokens_it->is_object() ? *special_tokens_it
                                                                             : empty;
  bool has_sequence = false;
  for (size_t index = 0; index < single->size(); ++index) {
    const std::string piece_path = absl::StrCat(path, ".single[", index, "]");
    const Json& piece = (*single)[index];
    TokenizerSpec::TemplatePiece* out = spec->add_post_template();
    if (piece.is_object() && piece.contains("Sequence")) {
      LLMRT_ASSIGN_OR_RETURN(std::string id, reader.String(piece["Sequence"], "id", piece_path));
      if (id != "A") {
        return reader.Error(
            piece_path, absl::StrCat("the single template may only use sequence A, found ", id));
      }
      out->set_is_sequence(true);
      has_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      LLMRT_ASSIGN_OR_RETURN(std::string name,
                             reader.String(piece["SpecialToken"], "id", piece_path));
      auto special = special_tokens.find(name);
      if (special == special_tokens.end() || !special->is_object() || !special->contains("ids") ||
          !(*special)["ids"].is_array()) {
        return reader.Error(piece_path, absl::StrCat("special token \"", name, "\" has no ids in ",
                                                     path, ".special_tokens"));
      }
      for (const Json& id : (*special)["ids"]) {
        if (!id.is_number_integer()) {
          return reader.Error(piece_path, absl::StrCat("special token \"", name,
                                                       "\" has a non-integer id ", id.dump()));
        }
        out->add_special_ids(id.get<int32_t>());
      }
    } else {
      return reader.Error(piece_path, absl::StrCat("expected {\"Sequence\": ...} or "
                                                   "{\"SpecialToken\": ...}, found ",
                                                   piece.dump()));
    }
  }
  if (!has_sequence) return reader.Error(absl::StrCat(path, ".single"), "has no sequence A");
  return absl::OkStatus();
}

// The vocabulary, added tokens, merges and BPE options.
absl::Status ImportModel(const Reader& reader, const Json& root, TokenizerSpec* spec,
                         absl::flat_hash_map<std::string, int32_t>* token_ids) {
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) {
    return reader.Error("model", "expected an object");
  }
  const Json& model = *model_it;
  LLMRT_ASSIGN_OR_RETURN(std::string type, reader.String(model, "type", "model", "BPE"));
  if (type != "BPE") {
    return reader.Error("model.type",
                        absl::StrCat("model \"", type, "\" is not supported (supported: BPE)"));
  }
  spec->set_model(TokenizerSpec::BPE);
  auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0.0)) {
    return reader.Error("model.dropout",
                        absl::StrCat("BPE dropout ", dropout->dump(),
                                     " is not supported (encoding would not be deterministic)"));
  }
  LLMRT_ASSIGN_OR_RETURN(bool byte_fallback, reader.Bool(model, "byte_fallback", "model", false));
  LLMRT_ASSIGN_OR_RETURN(bool fuse_unk, reader.Bool(model, "fuse_unk", "model", false));
  LLMRT_ASSIGN_OR_RETURN(bool ignore_merges, reader.Bool(model, "ignore_merges", "model", false));
  LLMRT_ASSIGN_OR_RETURN(std::string unk_token, reader.String(model, "unk_token", "model"));
  LLMRT_ASSIGN_OR_RETURN(std::string prefix,
                         reader.String(model, "continuing_subword_prefix", "model"));
  LLMRT_ASSIGN_OR_RETURN(std::string suffix, reader.String(model, "end_of_word_suffix", "model"));
  spec->set_byte_fallback(byte_fallback);
  spec->set_fuse_unk(fuse_unk);
  spec->set_ignore_merges(ignore_merges);
  spec->set_continuing_subword_prefix(prefix);
  spec->set_end_of_word_suffix(suffix);

  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return reader.Error("model.vocab", "expected an object mapping pieces to ids");
  }
  // Ids must be dense 0..V-1 over the vocabulary and the added tokens together.
  std::vector<std::string> pieces;
  std::vector<bool> assigned;
  auto assign = [&](int64_t id, const std::string& piece, absl::string_view where) -> absl::Status {
    if (id < 0 || id >= tokenizer_internal::kMaxVocabSize) {
      return reader.Error(where, absl::StrCat("id ", id, " of \"", piece, "\" is out of range"));
    }
    if (static_cast<size_t>(id) >= pieces.size()) {
      pieces.resize(id + 1);
      assigned.resize(id + 1, false);
    }
    if (assigned[id] && pieces[id] != piece) {
      return reader.Error(where, absl::StrCat("id ", id, " is given to both \"", pieces[id],
                                              "\" and \"", piece, "\""));
    }
    pieces[id] = piece;
    assigned[id] = true;
    return absl::OkStatus();
  };
  for (auto it = vocab_it->begin(); it != vocab_it->end(); ++it) {
    if (!it.value().is_number_integer()) {
      return reader.Error("model.vocab", absl::StrCat("\"", it.key(), "\" maps to ",
                                                      it.value().dump(), ", expected an id"));
    }
    const int64_t id = it.value().get<int64_t>();
    LLMRT_RETURN_IF_ERROR(assign(id, it.key(), "model.vocab"));
    (*token_ids)[it.key()] = static_cast<int32_t>(id);
  }
  const absl::flat_hash_map<std::string, int32_t> model_vocab = *token_ids;

  auto added_it = root.find("added_tokens");
  if (added_it != root.end() && !added_it->is_null()) {
    if (!added_it->is_array()) return reader.Error("added_tokens", "expected an array");
    for (size_t index = 0; index < added_it->size(); ++index) {
      const std::string path = absl::StrCat("added_tokens[", index, "]");
      const Json& token = (*added_it)[index];
      if (!token.is_object()) return reader.Error(path, "expected an object");
      LLMRT_ASSIGN_OR_RETURN(int64_t id, reader.Int(token, "id", path, -1));
      LLMRT_ASSIGN_OR_RETURN(std::string content, reader.String(token, "content", path));
      if (content.empty()) return reader.Error(path, "content is empty");
      auto in_vocab = model_vocab.find(content);
      if (in_vocab != model_vocab.end() && in_vocab->second != id) {
        return reader.Error(
            path, absl::StrCat("\"", content, "\" has id ", id, " but the vocabulary gives it id ",
                               in_vocab->second));
      }
      LLMRT_RETURN_IF_ERROR(assign(id, content, path));
      auto* added = spec->add_added_tokens();
      added->set_id(static_cast<int32_t>(id));
      added->set_content(content);
      LLMRT_ASSIGN_OR_RETURN(bool special, reader.Bool(token, "special", path, false));
      LLMRT_ASSIGN_OR_RETURN(bool lstrip, reader.Bool(token, "lstrip", path, false));
      LLMRT_ASSIGN_OR_RETURN(bool rstrip, reader.Bool(token, "rstrip", path, false));
      LLMRT_ASSIGN_OR_RETURN(bool normalized, reader.Bool(token, "normalized", path, !special));
      LLMRT_ASSIGN_OR_RETURN(bool single_word, reader.Bool(token, "single_word", path, false));
      added->set_special(special);
      added->set_lstrip(lstrip);
      added->set_rstrip(rstrip);
      added->set_normalized(normalized);
      added->set_single_word(single_word);
      added->set_in_model_vocab(in_vocab != model_vocab.end());
      (*token_ids)[content] = static_cast<int32_t>(id);
    }
  }
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (!assigned[id]) {
      return reader.Error("model.vocab", absl::StrCat("ids must be dense 0..", pieces.size() - 1,
                                                      " over the vocabulary and added tokens; id ",
                                                      id, " has no piece"));
    }
  }
  for (std::string& piece : pieces) spec->add_pieces(std::move(piece));

  spec->set_unk_id(-1);
  if (!unk_token.empty()) {
    auto it = model_vocab.find(unk_token);
    if (it == model_vocab.end()) {
      return reader.Error("model.unk_token",
                          absl::StrCat("\"", unk_token, "\" is not in the vocabulary"));
    }
    spec->set_unk_id(it->second);
  }

  auto merges_it = model.find("merges");
  if (merges_it == model.end() || merges_it->is_null()) return absl::OkStatus();
  if (!merges_it->is_array()) return reader.Error("model.merges", "expected an array");
  for (size_t index = 0; index < merges_it->size(); ++index) {
    const Json& merge = (*merges_it)[index];
    const std::string path = absl::StrCat("model.merges[", index, "]");
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return reader.Error(
            path, absl::StrCat("merge \"", text, "\" is not two pieces separated by one space"));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return reader.Error(path,
                          absl::StrCat("expected \"a b\" or [\"a\", \"b\"], found ", merge.dump()));
    }
    // HF drops the continuing-subword prefix's length from the right part (it assumes the
    // right part carries the prefix).
    const std::string merged = left + right.substr(std::min(prefix.size(), right.size()));
    for (const std::string& part : {left, right, merged}) {
      if (!model_vocab.contains(part)) {
        return reader.Error(path, absl::StrCat("merge \"", left, " ", right, "\": \"", part,
                                               "\" is not in the vocabulary"));
      }
    }
    auto* out = spec->add_merges();
    out->set_left(model_vocab.at(left));
    out->set_right(model_vocab.at(right));
    out->set_result(model_vocab.at(merged));
  }
  return absl::OkStatus();
}

// bos_token / eos_token are a string or an AddedToken object {"content": ...}.
absl::StatusOr<int32_t> SpecialTokenId(const Reader& reader, const Json& config, const char* key,
                                       const absl::flat_hash_map<std::string, int32_t>& ids) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return -1;
  std::string content;
  if (it->is_string()) {
    content = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    content = (*it)["content"].get<std::string>();
  } else {
    return reader.Error(
        key, absl::StrCat("expected a string or {\"content\": ...}, found ", it->dump()));
  }
  auto id = ids.find(content);
  if (id == ids.end()) {
    return reader.Error(key, absl::StrCat("\"", content, "\" is not in the vocabulary"));
  }
  return id->second;
}

}  // namespace

absl::StatusOr<TokenizerSpec> ImportTokenizerFromJson(std::string_view tokenizer_json_std,
                                                      std::string_view config_json_std,
                                                      std::string_view tokenizer_json_name_std,
                                                      std::string_view config_json_name_std) {
  LLMRT_ASSIGN_OR_RETURN(Json root,
                         ParseJson(tokenizer_json_std, std::string(tokenizer_json_name_std)));
  return tokenizer_internal::ImportTokenizerDocument(root, config_json_std, tokenizer_json_name_std,
                                                     config_json_name_std);
}

namespace tokenizer_internal {

absl::StatusOr<TokenizerSpec> ImportTokenizerDocument(const nlohmann::json& root,
                                                      std::string_view config_json_std,
                                                      std::string_view tokenizer_json_name_std,
                                                      std::string_view config_json_name_std) {
  const absl::string_view config_json(config_json_std.data(), config_json_std.size());
  const absl::string_view tokenizer_json_name(tokenizer_json_name_std.data(),
                                              tokenizer_json_name_std.size());
  const absl::string_view config_json_name(config_json_name_std.data(),
                                           config_json_name_std.size());
  const Reader reader(tokenizer_json_name);
  if (!root.is_object()) return reader.Error("(root)", "expected an object");
  TokenizerSpec spec;
  spec.set_bos_id(-1);
  spec.set_eos_id(-1);
  absl::flat_hash_map<std::string, int32_t> token_ids;
  LLMRT_RETURN_IF_ERROR(ImportModel(reader, root, &spec, &token_ids));
  auto truncation = root.find("truncation");
  if (truncation != root.end() && !truncation->is_null()) {
    return reader.Error("truncation",
                        "truncation is not supported (the engine enforces the "
                        "context length itself); set it to null");
  }
  // Padding only shapes batched encodings; the runtime encodes one text at a time.
  const Json null_json;
  auto component = [&](const char* key) -> const Json& {
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  LLMRT_RETURN_IF_ERROR(ImportNormalizer(reader, component("normalizer"), "normalizer", &spec));
  LLMRT_RETURN_IF_ERROR(
      ImportPreTokenizer(reader, component("pre_tokenizer"), "pre_tokenizer", &spec));
  LLMRT_RETURN_IF_ERROR(
      ImportPostProcessor(reader, component("post_processor"), "post_processor", &spec));
  LLMRT_RETURN_IF_ERROR(ImportDecoder(reader, component("decoder"), "decoder", &spec));
  for (const auto& piece : spec.post_template()) {
    for (int32_t id : piece.special_ids()) {
      if (id < 0 || id >= spec.pieces_size()) {
        return reader.Error("post_processor",
                            absl::StrCat("special token id ", id, " is outside the vocabulary"));
      }
    }
  }

  if (config_json.empty()) return spec;
  LLMRT_ASSIGN_OR_RETURN(Json config,
                         ParseJson(config_json_std, std::string(config_json_name_std)));
  const Reader config_reader(config_json_name);
  if (!config.is_object()) return config_reader.Error("(root)", "expected an object");
  LLMRT_ASSIGN_OR_RETURN(bool add_bos,
                         config_reader.Bool(config, "add_bos_token", "(root)", false));
  LLMRT_ASSIGN_OR_RETURN(bool add_eos,
                         config_reader.Bool(config, "add_eos_token", "(root)", false));
  spec.set_add_bos_token(add_bos);
  spec.set_add_eos_token(add_eos);
  LLMRT_ASSIGN_OR_RETURN(int32_t bos_id,
                         SpecialTokenId(config_reader, config, "bos_token", token_ids));
  LLMRT_ASSIGN_OR_RETURN(int32_t eos_id,
                         SpecialTokenId(config_reader, config, "eos_token", token_ids));
  spec.set_bos_id(bos_id);
  spec.set_eos_id(eos_id);
  auto chat_template = config.find("chat_template");
  if (chat_template != config.end() && !chat_template->is_null()) {
    if (chat_template->is_string()) {
      spec.set_chat_template(chat_template->get<std::string>());
    } else if (chat_template->is_array()) {
      // Named templates, as transformers turns the list into {name: template}: a later entry of
      // the same name replaces an earlier one. "default" renders unless a name is asked for (or
      // "tool_use" when tools are given); a list without "default" is legal, it only makes a
      // name necessary at render time.
      std::vector<std::pair<std::string, std::string>> named;
      for (size_t index = 0; index < chat_template->size(); ++index) {
        const Json& entry = (*chat_template)[index];
        const std::string field = absl::StrCat("chat_template[", index, "]");
        if (!entry.is_object()) {
          return config_reader.Error(field, absl::StrCat("expected an object {\"name\", "
                                                         "\"template\"}, found ",
                                                         TypeName(entry)));
        }
        for (const char* key : {"name", "template"}) {
          if (!entry.contains(key) || !entry[key].is_string()) {
            return config_reader.Error(
                absl::StrCat(field, ".", key),
                absl::StrCat("expected a string, found ",
                             entry.contains(key) ? TypeName(entry[key]) : "nothing"));
          }
        }
        named.emplace_back(entry["name"].get<std::string>(), entry["template"].get<std::string>());
      }
      SetChatTemplates(named, spec);
    } else {
      return config_reader.Error("chat_template",
                                 absl::StrCat("expected a string or a list of {\"name\", "
                                              "\"template\"}, found ",
                                              TypeName(*chat_template)));
    }
  }
  return spec;
}

void SetChatTemplates(const std::vector<std::pair<std::string, std::string>>& named,
                      TokenizerSpec& spec) {
  spec.clear_chat_template();
  spec.clear_named_chat_templates();
  for (const auto& [name, source] : named) {
    if (name == "default") {
      spec.set_chat_template(source);
      continue;
    }
    TokenizerSpec::NamedChatTemplate* entry = nullptr;
    for (TokenizerSpec::NamedChatTemplate& existing : *spec.mutable_named_chat_templates()) {
      if (existing.name() == name) entry = &existing;
    }
    if (entry == nullptr) entry = spec.add_named_chat_templates();
    entry->set_name(name);
    entry->set_source(source);
  }
}

}  // namespace tokenizer_internal

absl::StatusOr<TokenizerSpec> ImportTokenizer(const std::string& model_dir) {
  return ImportTokenizerFiles(FindTokenizerFiles(model_dir));
}

}  // namespace llmc
