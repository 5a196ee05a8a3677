// Import of the tokenizer files that are not tokenizer.json: vocab.json + merges.txt (GPT-2,
// Qwen2), a SentencePiece tokenizer.model (Llama 2, Mistral, TinyLlama) and a tiktoken
// tokenizer.model (Llama 3). Each builds the tokenizer.json document that transformers (5.x)
// builds from the same files and hands it to the tokenizer.json importer, so the ids match
// transformers' and every check of that importer applies.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "compiler/importer/json_util.h"
#include "compiler/tokenizer/import_internal.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "nlohmann/json.hpp"
#include "runtime/base/status_macros.h"

namespace llmc {
namespace {

using Json = nlohmann::json;
using importer_internal::ParseJson;
using llmrt::plan::TokenizerSpec;

// The pre-tokenizer regexes, as transformers' Qwen2Tokenizer and TikTokenConverter set them.
constexpr char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kTiktokenPattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581

absl::string_view View(std::string_view text) { return {text.data(), text.size()}; }

absl::Status Invalid(absl::string_view file, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(file, ": ", message));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  return importer_internal::ReadSmallFile(path);
}

// Present at all: a FIFO or an unreadable file then fails in ReadFile, saying so.
bool FileExists(const std::string& path) {
  std::error_code error;
  return std::filesystem::exists(path, error);
}

// tokenizer_config.json, or an empty object when there is none.
absl::StatusOr<Json> ParseConfig(std::string_view config_json, absl::string_view name) {
  if (config_json.empty()) return Json::object();
  LLMRT_ASSIGN_OR_RETURN(Json config, ParseJson(config_json, std::string(name)));
  if (!config.is_object()) return Invalid(name, "expected an object");
  return config;
}

absl::StatusOr<bool> ConfigBool(const Json& config, const char* key, bool fallback,
                                absl::string_view name) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return Invalid(name, absl::StrCat(key, ": expected true or false, found ", it->dump()));
  }
  return it->get<bool>();
}

// A special token entry (`bos_token` ...): a string or an AddedToken object; null means none,
// absent means `fallback`.
absl::StatusOr<std::string> ConfigToken(const Json& config, const char* key,
                                        absl::string_view fallback, absl::string_view name) {
  auto it = config.find(key);
  if (it == config.end()) return std::string(fallback);
  if (it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return Invalid(
      name, absl::StrCat(key, ": expected a string or {\"content\": ...}, found ", it->dump()));
}

// One entry of tokenizer.json's added_tokens.
Json AddedToken(int64_t id, const std::string& content, bool special) {
  return Json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
              {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// tokenizer_config.json's added_tokens_decoder {"id": {"content", flags...}} as added_tokens
// entries, in id order.
absl::StatusOr<std::vector<Json>> ConfigAddedTokens(const Json& config, absl::string_view name) {
  std::vector<Json> tokens;
  auto it = config.find("added_tokens_decoder");
  if (it == config.end() || it->is_null()) return tokens;
  if (!it->is_object()) return Invalid(name, "added_tokens_decoder: expected an object");
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(entry.key(), &id) || id < 0) {
      return Invalid(
          name, absl::StrCat("added_tokens_decoder: key \"", entry.key(), "\" is not a token id"));
    }
    // The tiktoken importer fills every id up to the largest with a reserved token.
    if (id >= tokenizer_internal::kMaxVocabSize) {
      return Invalid(
          name, absl::StrCat("added_tokens_decoder: token id ", id, " is out of range (at most ",
                             tokenizer_internal::kMaxVocabSize - 1, ")"));
    }
    const Json& token = entry.value();
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string()) {
      return Invalid(name, absl::StrCat("added_tokens_decoder.", entry.key(),
                                        ": expected {\"content\": ...}, found ", token.dump()));
    }
    Json added = AddedToken(id, token["content"].get<std::string>(), false);
    for (const char* flag : {"single_word", "lstrip", "rstrip", "normalized", "special"}) {
      if (!token.contains(flag) || token[flag].is_null()) continue;
      if (!token[flag].is_boolean()) {
        return Invalid(name, absl::StrCat("added_tokens_decoder.", entry.key(), ".", flag,
                                          ": expected true or false, found ", token[flag].dump()));
      }
      added[flag] = token[flag];
    }
    tokens.push_back(std::move(added));
  }
  std::stable_sort(tokens.begin(), tokens.end(), [](const Json& a, const Json& b) {
    return a["id"].get<int64_t>() < b["id"].get<int64_t>();
  });
  return tokens;
}

// TemplateProcessing as transformers' update_post_processor writes it: [bos] $A [eos].
Json PostProcessor(const std::string& bos, int64_t bos_id, bool add_bos, const std::string& eos,
                   int64_t eos_id, bool add_eos) {
  Json single = Json::array();
  Json special_tokens = Json::object();
  auto special = [&](const std::string& content, int64_t id) {
    single.push_back({{"SpecialToken", {{"id", content}, {"type_id", 0}}}});
    special_tokens[content] = {{"id", content}, {"ids", {id}}, {"tokens", {content}}};
  };
  if (add_bos && bos_id >= 0) special(bos, bos_id);
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (add_eos && eos_id >= 0) special(eos, eos_id);
  return {{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", special_tokens}};
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 map to
// U+0100.. in byte order.
const std::vector<std::string>& ByteLevelChars() {
  static const std::vector<std::string>* chars = [] {
    auto* table = new std::vector<std::string>(256);
    uint32_t next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                             (byte >= 0xAE && byte <= 0xFF);
      const uint32_t code_point = printable ? byte : next_extra++;
      std::string& out = (*table)[byte];
      if (code_point < 0x80) {
        out.push_back(static_cast<char>(code_point));
      } else {
        out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
        out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
      }
    }
    return table;
  }();
  return *chars;
}

std::string ByteLevelString(absl::string_view bytes) {
  std::string text;
  text.reserve(bytes.size() * 2);
  for (unsigned char byte : bytes) text += ByteLevelChars()[byte];
  return text;
}

// Byte offsets of the character boundaries inside `text` (not 0 and not size); Python's
// str slicing at index 1..len-1. Bytes that are not UTF-8 count as one character each.
std::vector<size_t> CharBoundaries(absl::string_view text) {
  std::vector<size_t> boundaries;
  for (size_t pos = 1; pos < text.size(); ++pos) {
    if ((static_cast<unsigned char>(text[pos]) & 0xC0) != 0x80) boundaries.push_back(pos);
  }
  return boundaries;
}

// ---------------------------------------------------------------------------------------------
// vocab.json + merges.txt

enum class ByteLevelFamily { kGpt2, kQwen2 };

absl::StatusOr<ByteLevelFamily> PickFamily(const Json& config, absl::string_view model_type,
                                           absl::string_view name) {
  std::string tokenizer_class;
  auto it = config.find("tokenizer_class");
  if (it != config.end() && it->is_string()) tokenizer_class = it->get<std::string>();
  if (absl::EndsWith(tokenizer_class, "Fast")) {
    tokenizer_class.resize(tokenizer_class.size() - 4);
  }
  if (tokenizer_class == "GPT2Tokenizer") return ByteLevelFamily::kGpt2;
  if (tokenizer_class == "Qwen2Tokenizer") return ByteLevelFamily::kQwen2;
  if (!tokenizer_class.empty()) {
    return Invalid(name, absl::StrCat("tokenizer_class \"", tokenizer_class,
                                      "\" with vocab.json + merges.txt is not supported "
                                      "(supported: GPT2Tokenizer, Qwen2Tokenizer)"));
  }
  if (model_type.empty() || model_type == "gpt2") return ByteLevelFamily::kGpt2;
  if (model_type == "qwen2" || model_type == "qwen2_moe" || model_type == "qwen3" ||
      model_type == "qwen3_moe") {
    return ByteLevelFamily::kQwen2;
  }
  return Invalid(name, absl::StrCat("no tokenizer_class, and model_type \"", model_type,
                                    "\" names no byte-level BPE family llmc knows "
                                    "(gpt2, qwen2, qwen3)"));
}

absl::StatusOr<Json> ParseMerges(absl::string_view merges_txt, absl::string_view name) {
  Json merges = Json::array();
  size_t line_number = 0;
  size_t pos = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == absl::string_view::npos) end = merges_txt.size();
    absl::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_number == 1 && absl::StartsWith(line, "#version")) continue;
    const size_t space = line.find(' ');
    if (space == absl::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != absl::string_view::npos) {
      return Invalid(name, absl::StrCat("line ", line_number,
                                        ": expected two pieces separated "
                                        "by one space, found \"",
                                        line.substr(0, 80), "\""));
    }
    merges.push_back({std::string(line.substr(0, space)), std::string(line.substr(space + 1))});
  }
  return merges;
}

}  // namespace

absl::StatusOr<TokenizerSpec> ImportVocabMerges(std::string_view vocab_json_std,
                                                std::string_view merges_txt_std,
                                                std::string_view added_tokens_json_std,
                                                std::string_view config_json,
                                                std::string_view model_type_std,
                                                std::string_view name_std) {
  const std::string name = name_std.empty() ? "vocab.json + merges.txt" : std::string(name_std);
  const std::string vocab_name = absl::StrCat(name, " (vocab.json)");
  const std::string merges_name = absl::StrCat(name, " (merges.txt)");
  const std::string config_name = absl::StrCat(name, " (tokenizer_config.json)");
  LLMRT_ASSIGN_OR_RETURN(Json config, ParseConfig(config_json, config_name));
  LLMRT_ASSIGN_OR_RETURN(ByteLevelFamily family,
                         PickFamily(config, View(model_type_std), config_name));
  LLMRT_ASSIGN_OR_RETURN(Json vocab, ParseJson(vocab_json_std, vocab_name));
  if (!vocab.is_object()) return Invalid(vocab_name, "expected an object mapping pieces to ids");
  LLMRT_ASSIGN_OR_RETURN(Json merges, ParseMerges(View(merges_txt_std), merges_name));

  // The named special tokens, with each class's defaults.
  const bool qwen2 = family == ByteLevelFamily::kQwen2;
  const absl::string_view kEndOfText = "<|endoftext|>";
  LLMRT_ASSIGN_OR_RETURN(std::string unk,
                         ConfigToken(config, "unk_token", kEndOfText, config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string bos,
                         ConfigToken(config, "bos_token", qwen2 ? "" : kEndOfText, config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string eos,
                         ConfigToken(config, "eos_token", kEndOfText, config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string pad,
                         ConfigToken(config, "pad_token", qwen2 ? kEndOfText : "", config_name));

  // Added tokens: added_tokens_decoder when the config has it, else added_tokens.json; then the
  // named special tokens that are not among them (they keep their vocabulary id, or follow it).
  LLMRT_ASSIGN_OR_RETURN(std::vector<Json> added, ConfigAddedTokens(config, config_name));
  absl::flat_hash_set<std::string> named = {unk, bos, eos, pad};
  named.erase("");
  if (added.empty() && !added_tokens_json_std.empty()) {
    const std::string added_name = absl::StrCat(name, " (added_tokens.json)");
    LLMRT_ASSIGN_OR_RETURN(Json added_json, ParseJson(added_tokens_json_std, added_name));
    if (!added_json.is_object()) return Invalid(added_name, "expected {content: id}");
    for (auto it = added_json.begin(); it != added_json.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() >= tokenizer_internal::kMaxVocabSize) {
        return Invalid(added_name, absl::StrCat("\"", it.key(), "\" maps to ", it.value().dump(),
                                                ", expected an id in [0, ",
                                                tokenizer_internal::kMaxVocabSize, ")"));
      }
      // Qwen2Tokenizer re-adds every special token as special; others stay plain added tokens.
      added.push_back(AddedToken(it.value().get<int64_t>(), it.key(), named.contains(it.key())));
    }
    std::stable_sort(added.begin(), added.end(), [](const Json& a, const Json& b) {
      return a["id"].get<int64_t>() < b["id"].get<int64_t>();
    });
  }
  int64_t next_id = static_cast<int64_t>(vocab.size());
  for (const Json& token : added) next_id = std::max(next_id, token["id"].get<int64_t>() + 1);
  absl::flat_hash_map<std::string, int64_t> added_ids;
  for (const Json& token : added) added_ids[token["content"].get<std::string>()] = token["id"];
  for (const std::string& content : {unk, bos, eos, pad}) {
    if (content.empty() || added_ids.contains(content)) continue;
    auto in_vocab = vocab.find(content);
    const int64_t id = in_vocab != vocab.end() && in_vocab->is_number_integer()
                           ? in_vocab->get<int64_t>()
                           : next_id++;
    added.push_back(AddedToken(id, content, true));
    added_ids[content] = id;
  }
  auto id_of = [&](const std::string& content) -> int64_t {
    if (content.empty()) return -1;
    auto it = added_ids.find(content);
    return it == added_ids.end() ? -1 : it->second;
  };

  LLMRT_ASSIGN_OR_RETURN(bool add_prefix_space,
                         ConfigBool(config, "add_prefix_space", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_bos, ConfigBool(config, "add_bos_token", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_eos, ConfigBool(config, "add_eos_token", false, config_name));

  Json root = Json::object();
  root["model"] = {
      {"type", "BPE"},          {"vocab", std::move(vocab)}, {"merges", std::move(merges)},
      {"byte_fallback", false}, {"fuse_unk", false},         {"ignore_merges", false}};
  root["added_tokens"] = added;
  if (qwen2) {
    root["normalizer"] = {{"type", "NFC"}};
    root["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kQwen2Pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"use_regex", false}}}}};
  } else {
    root["pre_tokenizer"] = {
        {"type", "ByteLevel"}, {"add_prefix_space", add_prefix_space}, {"use_regex", true}};
  }
  root["post_processor"] = PostProcessor(bos, id_of(bos), add_bos, eos, id_of(eos), add_eos);
  root["decoder"] = {{"type", "ByteLevel"}};
  LLMRT_ASSIGN_OR_RETURN(TokenizerSpec spec, tokenizer_internal::ImportTokenizerDocument(
                                                 root, config_json, name, config_name));
  if (spec.bos_id() < 0 && id_of(bos) >= 0) spec.set_bos_id(static_cast<int32_t>(id_of(bos)));
  if (spec.eos_id() < 0 && id_of(eos) >= 0) spec.set_eos_id(static_cast<int32_t>(id_of(eos)));
  return spec;
}

namespace {

// ---------------------------------------------------------------------------------------------
// SentencePiece ModelProto, read from the protobuf wire format with the public field numbers:
// ModelProto { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2;
//              NormalizerSpec normalizer_spec = 3; }
// SentencePiece { string piece = 1; float score = 2; Type type = 3; }  (NORMAL = 1 default,
//   UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6)
// TrainerSpec { ModelType model_type = 3 (UNIGRAM = 1 default, BPE = 2, WORD = 3, CHAR = 4); }
// NormalizerSpec { string name = 1; bytes precompiled_charsmap = 2; }

struct SpmPiece {
  std::string piece;
  int type = 1;
};

struct SpmModel {
  std::vector<SpmPiece> pieces;
  int model_type = 1;
  std::string normalizer_name;
  std::string precompiled_charsmap;
};

class WireReader {
 public:
  explicit WireReader(absl::string_view data) : data_(data) {}
  bool done() const { return pos_ >= data_.size(); }

  bool Varint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return false;
      const uint8_t byte = static_cast<uint8_t>(data_[pos_++]);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  // Reads one field: its number, wire type, and for length-delimited fields the payload; for
  // varints the value. Fixed 32/64-bit fields are skipped.
  bool Field(uint32_t* number, int* wire_type, absl::string_view* payload, uint64_t* value) {
    uint64_t key = 0;
    if (!Varint(&key)) return false;
    *number = static_cast<uint32_t>(key >> 3);
    *wire_type = static_cast<int>(key & 7);
    switch (*wire_type) {
      case 0:
        return Varint(value);
      case 1:
        if (data_.size() - pos_ < 8) return false;
        pos_ += 8;
        return true;
      case 2: {
        uint64_t length = 0;
        if (!Varint(&length) || length > data_.size() - pos_) return false;
        *payload = data_.substr(pos_, length);
        pos_ += length;
        return true;
      }
      case 5:
        if (data_.size() - pos_ < 4) return false;
        pos_ += 4;
        return true;
      default:
        return false;  // groups (3, 4) do not occur in ModelProto
    }
  }

  size_t pos() const { return pos_; }

 private:
  absl::string_view data_;
  size_t pos_ = 0;
};

absl::StatusOr<SpmModel> ParseSentencePiece(absl::string_view data, absl::string_view name) {
  SpmModel model;
  WireReader reader(data);
  while (!reader.done()) {
    uint32_t number = 0;
    int wire_type = 0;
    absl::string_view payload;
    uint64_t value = 0;
    if (!reader.Field(&number, &wire_type, &payload, &value)) {
      return Invalid(name, absl::StrCat("not a SentencePiece model: malformed protobuf at byte ",
                                        reader.pos()));
    }
    if (wire_type != 2) continue;
    if (number == 1) {
      SpmPiece piece;
      WireReader piece_reader(payload);
      while (!piece_reader.done()) {
        uint32_t piece_number = 0;
        int piece_wire = 0;
        absl::string_view piece_payload;
        uint64_t piece_value = 0;
        if (!piece_reader.Field(&piece_number, &piece_wire, &piece_payload, &piece_value)) {
          return Invalid(name, absl::StrCat("piece ", model.pieces.size(), " is malformed"));
        }
        if (piece_number == 1 && piece_wire == 2) piece.piece = std::string(piece_payload);
        if (piece_number == 3 && piece_wire == 0) piece.type = static_cast<int>(piece_value);
      }
      model.pieces.push_back(std::move(piece));
    } else if (number == 2) {
      WireReader spec_reader(payload);
      while (!spec_reader.done()) {
        uint32_t spec_number = 0;
        int spec_wire = 0;
        absl::string_view spec_payload;
        uint64_t spec_value = 0;
        if (!spec_reader.Field(&spec_number, &spec_wire, &spec_payload, &spec_value)) {
          return Invalid(name, "trainer_spec is malformed");
        }
        if (spec_number == 3 && spec_wire == 0) model.model_type = static_cast<int>(spec_value);
      }
    } else if (number == 3) {
      WireReader spec_reader(payload);
      while (!spec_reader.done()) {
        uint32_t spec_number = 0;
        int spec_wire = 0;
        absl::string_view spec_payload;
        uint64_t spec_value = 0;
        if (!spec_reader.Field(&spec_number, &spec_wire, &spec_payload, &spec_value)) {
          return Invalid(name, "normalizer_spec is malformed");
        }
        if (spec_number == 1 && spec_wire == 2) model.normalizer_name = std::string(spec_payload);
        if (spec_number == 2 && spec_wire == 2) {
          model.precompiled_charsmap = std::string(spec_payload);
        }
      }
    }
  }
  if (model.pieces.empty()) return Invalid(name, "not a SentencePiece model: it has no pieces");
  return model;
}

// transformers' LlamaTokenizer (5.x) over SentencePieceExtractor: the pieces in id order as
// the vocabulary; merges from generate_merges (every split of every piece into two pieces,
// ordered by the piece's id, then by the left part's length); CONTROL pieces special added
// tokens, USER_DEFINED pieces plain added tokens.
absl::StatusOr<TokenizerSpec> ImportSentencePiece(absl::string_view data,
                                                  std::string_view config_json,
                                                  const std::string& name,
                                                  const std::string& config_name) {
  LLMRT_ASSIGN_OR_RETURN(SpmModel model, ParseSentencePiece(data, name));
  static constexpr const char* kModelTypes[] = {"", "Unigram", "BPE", "Word", "Char"};
  if (model.model_type != 2) {
    const char* type =
        model.model_type >= 1 && model.model_type <= 4 ? kModelTypes[model.model_type] : "unknown";
    return Invalid(name, absl::StrCat("SentencePiece model_type ", model.model_type, " (", type,
                                      ") is not supported (supported: BPE)"));
  }
  if (!model.precompiled_charsmap.empty() && model.normalizer_name != "identity") {
    return Invalid(name, absl::StrCat("SentencePiece normalizer \"", model.normalizer_name,
                                      "\" (a precompiled_charsmap) is not supported (supported: "
                                      "identity)"));
  }
  LLMRT_ASSIGN_OR_RETURN(Json config, ParseConfig(config_json, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool legacy, ConfigBool(config, "legacy", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_prefix_space,
                         ConfigBool(config, "add_prefix_space", true, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_bos, ConfigBool(config, "add_bos_token", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_eos, ConfigBool(config, "add_eos_token", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string unk, ConfigToken(config, "unk_token", "<unk>", config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string bos, ConfigToken(config, "bos_token", "<s>", config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string eos, ConfigToken(config, "eos_token", "</s>", config_name));

  // A later duplicate piece takes the id, as in Python's dict; the importer then reports the
  // earlier id as having no piece.
  absl::flat_hash_map<std::string, int64_t> ids;
  Json vocab = Json::object();
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    ids[model.pieces[id].piece] = static_cast<int64_t>(id);
  }
  Json merges = Json::array();
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const std::string& piece = model.pieces[id].piece;
    vocab[piece] = id;
    if (ids[piece] != static_cast<int64_t>(id)) continue;
    for (size_t split : CharBoundaries(piece)) {
      std::string left = piece.substr(0, split), right = piece.substr(split);
      if (ids.contains(left) && ids.contains(right)) {
        merges.push_back({std::move(left), std::move(right)});
      }
    }
  }

  LLMRT_ASSIGN_OR_RETURN(std::vector<Json> config_added, ConfigAddedTokens(config, config_name));
  std::vector<Json> added;
  absl::flat_hash_set<int64_t> added_set;
  for (Json& token : config_added) {
    const int64_t id = token["id"];
    if (id >= static_cast<int64_t>(model.pieces.size()) ||
        model.pieces[id].piece != token["content"].get<std::string>()) {
      return Invalid(
          config_name,
          absl::StrCat("added_tokens_decoder.", id, " is \"", token["content"].get<std::string>(),
                       "\" but tokenizer.model has no such piece at that id"));
    }
    added_set.insert(id);
    added.push_back(std::move(token));
  }
  for (size_t id = 0; id < model.pieces.size(); ++id) {
    const SpmPiece& piece = model.pieces[id];
    const bool named = piece.piece == unk || piece.piece == bos || piece.piece == eos;
    if ((piece.type == 3 || piece.type == 4 || named) && !added_set.contains(id)) {
      added.push_back(AddedToken(static_cast<int64_t>(id), piece.piece, piece.type != 4));
      added_set.insert(id);
    }
  }
  std::stable_sort(added.begin(), added.end(), [](const Json& a, const Json& b) {
    return a["id"].get<int64_t>() < b["id"].get<int64_t>();
  });
  auto id_of = [&](const std::string& content) -> int64_t {
    auto it = ids.find(content);
    return content.empty() || it == ids.end() ? -1 : it->second;
  };

  Json root = Json::object();
  root["model"] = {
      {"type", "BPE"},         {"vocab", std::move(vocab)}, {"merges", std::move(merges)},
      {"byte_fallback", true}, {"fuse_unk", true},          {"ignore_merges", false}};
  root["added_tokens"] = added;
  root["pre_tokenizer"] = {
      {"type", "Metaspace"},
      {"replacement", kMetaspace},
      {"prepend_scheme", add_prefix_space ? (legacy ? "always" : "first") : "never"},
      {"split", false}};
  Json decoders = {{{"type", "Replace"}, {"pattern", {{"String", kMetaspace}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}};
  if (add_prefix_space) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  root["post_processor"] = PostProcessor(bos, id_of(bos), add_bos, eos, id_of(eos), add_eos);
  LLMRT_ASSIGN_OR_RETURN(TokenizerSpec spec, tokenizer_internal::ImportTokenizerDocument(
                                                 root, config_json, name, config_name));
  if (spec.bos_id() < 0 && id_of(bos) >= 0) spec.set_bos_id(static_cast<int32_t>(id_of(bos)));
  if (spec.eos_id() < 0 && id_of(eos) >= 0) spec.set_eos_id(static_cast<int32_t>(id_of(eos)));
  return spec;
}

// ---------------------------------------------------------------------------------------------
// tiktoken: one "base64(token) rank" per line.

bool DecodeBase64(absl::string_view text, std::string* out) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  if (text.size() % 4 != 0 || text.empty()) return false;
  uint32_t buffer = 0;
  int bits = 0;
  size_t padding = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=') {
      if (i + 2 < text.size()) return false;  // '=' only in the last two places
      ++padding;
      continue;
    }
    if (padding > 0) return false;
    const int v = value(c);
    if (v < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out->push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return padding <= 2;
}

bool LooksLikeTiktoken(absl::string_view data) {
  const size_t end = data.find('\n');
  const absl::string_view line = data.substr(0, end);
  const size_t space = line.find(' ');
  if (space == absl::string_view::npos || space == 0) return false;
  std::string decoded;
  int64_t rank = 0;
  absl::string_view rank_text = line.substr(space + 1);
  if (!rank_text.empty() && rank_text.back() == '\r') rank_text.remove_suffix(1);
  return DecodeBase64(line.substr(0, space), &decoded) && absl::SimpleAtoi(rank_text, &rank);
}

// transformers' TikTokenConverter: the ranks as the byte-level vocabulary; a token's merges
// are its splits into two tokens, ordered by (left rank, right rank), and all merges by the
// token's rank; ignore_merges; Split with the Llama 3 regex then ByteLevel without its own
// regex; the special tokens of added_tokens_decoder from the first id after the ranks, gaps
// filled with <|reserved_token_N|>, then extra_special_tokens.
absl::StatusOr<TokenizerSpec> ImportTiktoken(absl::string_view data, std::string_view config_json,
                                             const std::string& name,
                                             const std::string& config_name) {
  std::vector<std::pair<std::string, int64_t>> tokens;  // file order
  absl::flat_hash_map<std::string, int64_t> ranks;
  size_t pos = 0;
  size_t line_number = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == absl::string_view::npos) end = data.size();
    absl::string_view line = data.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    std::string token;
    int64_t rank = 0;
    if (space == absl::string_view::npos || !DecodeBase64(line.substr(0, space), &token) ||
        !absl::SimpleAtoi(line.substr(space + 1), &rank) || rank < 0) {
      return Invalid(
          name, absl::StrCat("line ", line_number, ": expected \"base64-token rank\", found \"",
                             line.substr(0, 80), "\""));
    }
    ranks[token] = rank;
    tokens.emplace_back(std::move(token), rank);
  }
  if (tokens.empty()) return Invalid(name, "no tokens");

  struct Merge {
    int64_t rank;  // of the merged token
    std::string left;
    std::string right;
  };
  std::vector<Merge> merges;
  Json vocab = Json::object();
  for (const auto& [token, rank] : tokens) {
    vocab[ByteLevelString(token)] = rank;
    if (token.size() < 2) continue;
    std::vector<std::pair<std::pair<int64_t, int64_t>, size_t>> local;
    for (size_t split = 1; split < token.size(); ++split) {
      auto left = ranks.find(absl::string_view(token).substr(0, split));
      auto right = ranks.find(absl::string_view(token).substr(split));
      if (left != ranks.end() && right != ranks.end()) {
        local.push_back({{left->second, right->second}, split});
      }
    }
    std::stable_sort(local.begin(), local.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& entry : local) {
      merges.push_back({rank, token.substr(0, entry.second), token.substr(entry.second)});
    }
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.rank < b.rank; });
  Json merges_json = Json::array();
  for (const Merge& merge : merges) {
    merges_json.push_back({ByteLevelString(merge.left), ByteLevelString(merge.right)});
  }

  LLMRT_ASSIGN_OR_RETURN(Json config, ParseConfig(config_json, config_name));
  const int64_t base_size = static_cast<int64_t>(ranks.size());
  LLMRT_ASSIGN_OR_RETURN(std::vector<Json> decoder_tokens, ConfigAddedTokens(config, config_name));
  absl::flat_hash_map<int64_t, std::string> by_id;
  int64_t max_id = -1;
  for (const Json& token : decoder_tokens) {
    by_id[token["id"].get<int64_t>()] = token["content"].get<std::string>();
    max_id = std::max(max_id, token["id"].get<int64_t>());
  }
  std::vector<std::string> specials;
  if (max_id >= base_size) {
    for (int64_t id = base_size; id <= max_id; ++id) {
      auto it = by_id.find(id);
      specials.push_back(it != by_id.end() ? it->second
                                           : absl::StrCat("<|reserved_token_", id, "|>"));
    }
  }
  auto extra = config.find("extra_special_tokens");
  if (extra != config.end() && !extra->is_null()) {
    absl::flat_hash_set<std::string> seen(specials.begin(), specials.end());
    std::vector<std::string> names;
    if (extra->is_array()) {
      for (const Json& item : *extra) {
        if (!item.is_string()) {
          return Invalid(config_name, "extra_special_tokens: expected strings");
        }
        names.push_back(item.get<std::string>());
      }
    } else if (extra->is_object()) {
      for (auto it = extra->begin(); it != extra->end(); ++it) names.push_back(it.key());
    } else {
      return Invalid(config_name, "extra_special_tokens: expected a list or an object");
    }
    for (const std::string& special : names) {
      if (seen.insert(special).second) specials.push_back(special);
    }
  }
  std::vector<Json> added;
  absl::flat_hash_map<std::string, int64_t> added_ids;
  for (const std::string& special : specials) {
    if (added_ids.contains(special)) continue;
    if (vocab.contains(special)) {
      return Invalid(config_name, absl::StrCat("special token \"", special,
                                               "\" is also a tiktoken rank; not supported"));
    }
    const int64_t id = base_size + static_cast<int64_t>(added.size());
    added.push_back(AddedToken(id, special, true));
    added_ids[special] = id;
  }
  LLMRT_ASSIGN_OR_RETURN(std::string bos, ConfigToken(config, "bos_token", "", config_name));
  LLMRT_ASSIGN_OR_RETURN(std::string eos, ConfigToken(config, "eos_token", "", config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_bos, ConfigBool(config, "add_bos_token", false, config_name));
  LLMRT_ASSIGN_OR_RETURN(bool add_eos, ConfigBool(config, "add_eos_token", false, config_name));
  auto id_of = [&](const std::string& content) -> int64_t {
    auto it = added_ids.find(content);
    return content.empty() || it == added_ids.end() ? -1 : it->second;
  };

  Json root = Json::object();
  root["model"] = {
      {"type", "BPE"},          {"vocab", std::move(vocab)}, {"merges", std::move(merges_json)},
      {"byte_fallback", false}, {"fuse_unk", false},         {"ignore_merges", true}};
  root["added_tokens"] = added;
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", kTiktokenPattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  root["decoder"] = {{"type", "ByteLevel"}};
  // TikTokenConverter's ByteLevel post-processor only trims offsets; BOS/EOS come from the
  // template transformers installs when the config asks for them.
  if (add_bos || add_eos) {
    root["post_processor"] = PostProcessor(bos, id_of(bos), add_bos, eos, id_of(eos), add_eos);
  }
  return tokenizer_internal::ImportTokenizerDocument(root, config_json, name, config_name);
}

}  // namespace

absl::StatusOr<TokenizerSpec> ImportTokenizerModel(std::string_view model_bytes,
                                                   std::string_view config_json,
                                                   std::string_view name_std) {
  const std::string name = name_std.empty() ? "tokenizer.model" : std::string(name_std);
  const std::string config_name = absl::StrCat(name, " (tokenizer_config.json)");
  const absl::string_view data = View(model_bytes);
  // A ModelProto starts with field 1 (pieces), length-delimited: byte 0x0A. A tiktoken file
  // starts with base64 text.
  if (!data.empty() && data[0] == 0x0A) {
    return ImportSentencePiece(data, config_json, name, config_name);
  }
  if (LooksLikeTiktoken(data)) return ImportTiktoken(data, config_json, name, config_name);
  return Invalid(name,
                 "neither a SentencePiece model (protobuf starting with pieces) nor tiktoken "
                 "ranks (\"base64-token rank\" lines)");
}

TokenizerFiles FindTokenizerFiles(const std::string& model_dir) {
  TokenizerFiles files;
  files.model_dir = model_dir;
  auto found = [&](const char* file_name) {
    const std::string path = model_dir + "/" + file_name;
    return FileExists(path) ? path : std::string();
  };
  files.tokenizer_json = found("tokenizer.json");
  files.vocab_json = found("vocab.json");
  files.merges_txt = found("merges.txt");
  files.added_tokens_json = found("added_tokens.json");
  files.tokenizer_model = found("tokenizer.model");
  files.tokenizer_config_json = found("tokenizer_config.json");
  files.config_json = found("config.json");
  files.chat_template_jinja = found("chat_template.jinja");
  // transformers globs "*.jinja" in that directory; files only, as glob would not match a
  // directory named x.jinja usefully (open() fails on it).
  std::error_code error;
  const std::filesystem::path template_dir =
      std::filesystem::path(model_dir) / "additional_chat_templates";
  for (const auto& entry : std::filesystem::directory_iterator(template_dir, error)) {
    if (entry.path().extension() == ".jinja" && entry.is_regular_file(error)) {
      files.additional_chat_templates.push_back(entry.path().string());
    }
  }
  std::sort(files.additional_chat_templates.begin(), files.additional_chat_templates.end());
  return files;
}

absl::StatusOr<TokenizerSpec> ImportTokenizerFiles(const TokenizerFiles& files) {
  std::string config_json;
  if (!files.tokenizer_config_json.empty()) {
    LLMRT_ASSIGN_OR_RETURN(config_json, ReadFile(files.tokenizer_config_json));
  }
  TokenizerSpec spec;
  if (!files.tokenizer_json.empty()) {
    LLMRT_ASSIGN_OR_RETURN(std::string tokenizer_json, ReadFile(files.tokenizer_json));
    LLMRT_ASSIGN_OR_RETURN(
        spec, ImportTokenizerFromJson(tokenizer_json, config_json, files.tokenizer_json,
                                      files.tokenizer_config_json));
  } else if (!files.vocab_json.empty() && !files.merges_txt.empty()) {
    LLMRT_ASSIGN_OR_RETURN(std::string vocab, ReadFile(files.vocab_json));
    LLMRT_ASSIGN_OR_RETURN(std::string merges, ReadFile(files.merges_txt));
    std::string added_tokens;
    if (!files.added_tokens_json.empty()) {
      LLMRT_ASSIGN_OR_RETURN(added_tokens, ReadFile(files.added_tokens_json));
    }
    std::string model_type;
    if (!files.config_json.empty()) {
      LLMRT_ASSIGN_OR_RETURN(std::string model_config_text, ReadFile(files.config_json));
      LLMRT_ASSIGN_OR_RETURN(Json model_config, ParseJson(model_config_text, files.config_json));
      if (model_config.is_object() && model_config.contains("model_type") &&
          model_config["model_type"].is_string()) {
        model_type = model_config["model_type"].get<std::string>();
      }
    }
    LLMRT_ASSIGN_OR_RETURN(spec, ImportVocabMerges(vocab, merges, added_tokens, config_json,
                                                   model_type, files.vocab_json));
  } else if (!files.tokenizer_model.empty()) {
    LLMRT_ASSIGN_OR_RETURN(std::string model, ReadFile(files.tokenizer_model));
    LLMRT_ASSIGN_OR_RETURN(spec, ImportTokenizerModel(model, config_json, files.tokenizer_model));
  } else if (!files.vocab_json.empty() || !files.merges_txt.empty()) {
    return absl::NotFoundError(absl::StrCat(
        files.model_dir, ": ", files.vocab_json.empty() ? "merges.txt" : "vocab.json", " needs ",
        files.vocab_json.empty() ? "vocab.json" : "merges.txt", ", which is missing"));
  } else {
    return absl::NotFoundError(absl::StrCat(files.model_dir,
                                            ": no tokenizer: expected tokenizer.json, vocab.json "
                                            "+ merges.txt, or tokenizer.model"));
  }
  // The template files replace the config's templates entirely, even a config "default" when
  // only additional_chat_templates/ exists (transformers overwrites init_kwargs["chat_template"]).
  // A file additional_chat_templates/default.jinja is read after chat_template.jinja and wins.
  std::vector<std::pair<std::string, std::string>> named;
  if (!files.chat_template_jinja.empty()) {
    LLMRT_ASSIGN_OR_RETURN(std::string source, ReadFile(files.chat_template_jinja));
    named.emplace_back("default", std::move(source));
  }
  for (const std::string& path : files.additional_chat_templates) {
    LLMRT_ASSIGN_OR_RETURN(std::string source, ReadFile(path));
    named.emplace_back(std::filesystem::path(path).stem().string(), std::move(source));
  }
  if (!named.empty()) tokenizer_internal::SetChatTemplates(named, spec);
  return spec;
}

}  // namespace llmc
