#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/tokenizer/bpe.h"
#include "runtime/tokenizer/regex.h"
#include "runtime/tokenizer/unicode_normalize.h"
#include "runtime/tokenizer/utf8.h"

namespace llmrt {

using plan::TokenizerSpec;
using tokenizer_internal::AppendUtf8;
using tokenizer_internal::BpeModel;
using tokenizer_internal::DecodeChar;
using tokenizer_internal::IsWhitespace;
using tokenizer_internal::Regex;

namespace {

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// The pattern of HF's ByteLevel pre-tokenizer (GPT-2's), used when use_regex is set.
constexpr std::string_view kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Rust's char::is_whitespace set, spelled out: PCRE2's \s under UCP is not exactly White_Space.
constexpr std::string_view kWhitespaceClass =
    R"([\t\n\x{0B}\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}])";
// The word characters of HF's \w (Rust regex's and Oniguruma's Unicode \w): Alphabetic, marks,
// decimal digits, connector punctuation, join controls. PCRE2's \w under UCP is only letters,
// numbers and '_'.
#define LLMRT_WORD_CHARACTERS R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control})"
constexpr std::string_view kWordCharClass = "[" LLMRT_WORD_CHARACTERS "]";
// HF's Whitespace pre-tokenizer: \w+|[^\w\s]+ with those word characters and White_Space.
constexpr std::string_view kWordRunsPattern =
    "[" LLMRT_WORD_CHARACTERS "]+|[^" LLMRT_WORD_CHARACTERS R"(\p{White_Space}]+)";
#undef LLMRT_WORD_CHARACTERS
// char::is_ascii_punctuation || char::is_punctuation (general category P).
constexpr std::string_view kPunctuationClass = R"([\p{P}!-/:-@\[-`{-~])";

// A piece of the input on its way through the pipeline. `added_index` >= 0 marks an added
// token that was split out and is final; `at_text_start` says the piece begins at byte 0 of the
// caller's text (Metaspace's prepend_scheme "first" needs it, as HF checks the original offset).
struct Segment {
  std::string text;
  int32_t added_id = -1;
  bool at_text_start = false;
};

size_t CharLengthAt(std::string_view text, size_t pos) {
  const size_t length = tokenizer_internal::ValidSequenceLength(text, pos);
  return length == 0 ? 1 : length;
}

char32_t CharAt(std::string_view text, size_t pos, size_t* length) {
  if (tokenizer_internal::ValidSequenceLength(text, pos) == 0) {
    *length = 1;
    return 0xFFFD;
  }
  return DecodeChar(text, pos, length);
}

// Start of the run of whitespace that ends `text` (HF: \s*$).
size_t TrailingWhitespaceStart(std::string_view text) {
  size_t start = 0;  // all whitespace: the run starts at 0
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    const char32_t code_point = CharAt(text, pos, &length);
    if (!IsWhitespace(code_point)) start = pos + length;
    pos += length;
  }
  return std::min(start, text.size());
}

// `pattern` with \s as kWhitespaceClass and \S as its complement, inside character classes
// too (\S there is left to PCRE2: no tokenizer spells it so).
std::string SpellOutWhitespaceEscapes(std::string_view pattern) {
  const std::string_view members = kWhitespaceClass.substr(1, kWhitespaceClass.size() - 2);
  std::string out;
  out.reserve(pattern.size());
  bool in_class = false;
  for (size_t pos = 0; pos < pattern.size(); ++pos) {
    const char c = pattern[pos];
    if (c == '\\' && pos + 1 < pattern.size()) {
      const char next = pattern[++pos];
      if (next == 's') {
        out += in_class ? std::string(members) : std::string(kWhitespaceClass);
      } else if (next == 'S' && !in_class) {
        out += "[^";
        out += members;
        out += "]";
      } else {
        out += c;
        out += next;
      }
      continue;
    }
    if (in_class && c == '[' && pos + 1 < pattern.size() && pattern[pos + 1] == ':') {
      const size_t end = pattern.find(":]", pos + 2);  // a POSIX class [:name:]
      if (end != std::string_view::npos) {
        out += pattern.substr(pos, end + 2 - pos);
        pos = end + 1;
        continue;
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' first in the class (after an optional '^') is a member, not its end.
      if (pos + 1 < pattern.size() && pattern[pos + 1] == '^') out += pattern[++pos];
      if (pos + 1 < pattern.size() && pattern[pos + 1] == ']') out += pattern[++pos];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

// Length of the run of whitespace that starts `text` (HF: ^\s*).
size_t LeadingWhitespaceLength(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t length = 0;
    if (!IsWhitespace(CharAt(text, pos, &length))) break;
    pos += length;
  }
  return pos;
}

void ReplaceAllLiteral(std::string_view pattern, std::string_view content, std::string* text) {
  if (pattern.empty() || text->find(pattern) == std::string::npos) return;
  std::string result;
  result.reserve(text->size());
  size_t pos = 0;
  while (true) {
    const size_t found = text->find(pattern, pos);
    if (found == std::string::npos) break;
    result.append(*text, pos, found - pos);
    result.append(content);
    pos = found + pattern.size();
  }
  result.append(*text, pos, std::string::npos);
  *text = std::move(result);
}

void ReplaceAllRegex(const Regex& regex, std::string_view content, std::string* text) {
  const auto matches = regex.FindAll(*text);
  if (matches.empty()) return;
  std::string result;
  result.reserve(text->size());
  size_t pos = 0;
  for (const auto& [begin, end] : matches) {
    result.append(*text, pos, begin - pos);
    result.append(content);
    pos = end;
  }
  result.append(*text, pos, std::string::npos);
  *text = std::move(result);
}

// HF's bytes_char table: printable Latin-1 bytes stand for themselves, the other 68 bytes map to
// U+0100.. in byte order, so every byte becomes a visible character.
std::array<std::string, 256> MakeByteLevelChars() {
  std::array<std::string, 256> chars;
  char32_t next_extra = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
                           (byte >= 0xAE && byte <= 0xFF);
    AppendUtf8(printable ? static_cast<char32_t>(byte) : next_extra++, &chars[byte]);
  }
  return chars;
}

// Parses `<0xAB>` like HF's ByteFallback decoder (Rust's u8::from_str_radix on the two
// characters, which also takes a leading '+').
int ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  auto hex_value = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (token[3] == '+') return hex_value(token[4]);
  const int high = hex_value(token[3]), low = hex_value(token[4]);
  if (high < 0 || low < 0) return -1;
  return high * 16 + low;
}

enum class PrependScheme { kAlways, kFirst, kNever };

absl::StatusOr<PrependScheme> ParsePrependScheme(std::string_view scheme, std::string_view what) {
  if (scheme == "always" || scheme.empty()) return PrependScheme::kAlways;
  if (scheme == "first") return PrependScheme::kFirst;
  if (scheme == "never") return PrependScheme::kNever;
  return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", std::string(what),
                                                 ": prepend_scheme \"", std::string(scheme),
                                                 "\" is not one of always, first, never"));
}

absl::StatusOr<char32_t> SingleChar(std::string_view text, std::string_view what) {
  size_t length = 0;
  if (text.empty() || tokenizer_internal::ValidSequenceLength(text, 0) != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", std::string(what),
                                                   " must be exactly one character, found \"",
                                                   std::string(text), "\""));
  }
  return DecodeChar(text, 0, &length);
}

// Finds added tokens in text: leftmost match first, and among matches starting there the
// longest, like the Aho-Corasick automaton (MatchKind::LeftmostLongest) HF uses.
class AddedTokenMatcher {
 public:
  void Add(std::string_view content, int32_t added_index) {
    if (content.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    int32_t node = 0;
    for (unsigned char byte : content) {
      int32_t child = Child(node, byte);
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    nodes_[node].added_index = added_index;
    first_bytes_[static_cast<unsigned char>(content[0])] = true;
  }

  bool empty() const { return nodes_.empty(); }

  // The next match at or after `from`: [*begin, *end) and the added token's index.
  bool FindNext(std::string_view text, size_t from, size_t* begin, size_t* end,
                int32_t* added_index) const {
    if (nodes_.empty()) return false;
    for (size_t start = from; start < text.size(); ++start) {
      if (!first_bytes_[static_cast<unsigned char>(text[start])]) continue;
      int32_t node = 0;
      int32_t best_index = -1;
      size_t best_end = 0;
      for (size_t pos = start; pos < text.size(); ++pos) {
        node = Child(node, static_cast<unsigned char>(text[pos]));
        if (node < 0) break;
        if (nodes_[node].added_index >= 0) {
          best_index = nodes_[node].added_index;
          best_end = pos + 1;
        }
      }
      if (best_index >= 0) {
        *begin = start;
        *end = best_end;
        *added_index = best_index;
        return true;
      }
    }
    return false;
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t added_index = -1;
  };
  int32_t Child(int32_t node, unsigned char byte) const {
    for (const auto& [child_byte, child] : nodes_[node].children) {
      if (child_byte == byte) return child;
    }
    return -1;
  }
  std::vector<Node> nodes_;
  std::array<bool, 256> first_bytes_{};
};

struct CompiledNormalizer {
  TokenizerSpec::Normalizer::Kind kind;
  std::string pattern;
  std::string content;
  bool strip_left = false;
  bool strip_right = false;
  std::unique_ptr<Regex> regex;
};

struct CompiledPreTokenizer {
  TokenizerSpec::PreTokenizer::Kind kind;
  std::unique_ptr<Regex> regex;
  TokenizerSpec::PreTokenizer::SplitBehavior behavior = TokenizerSpec::PreTokenizer::ISOLATED;
  bool invert = false;
  bool add_prefix_space = false;
  bool use_regex = false;
  std::string replacement;
  PrependScheme prepend_scheme = PrependScheme::kAlways;
  bool split = false;
};

struct CompiledDecoder {
  TokenizerSpec::Decoder::Kind kind;
  std::string pattern;
  std::string content;
  std::unique_ptr<Regex> regex;
  char32_t strip_char = 0;
  int32_t strip_start = 0;
  int32_t strip_stop = 0;
  char32_t replacement = 0;
  PrependScheme prepend_scheme = PrependScheme::kAlways;
};

// Splits `segment` at `matches` the way HF's NormalizedString::split does for a pattern and a
// SplitDelimiterBehavior, dropping empty pieces as PreTokenizedString::split does.
void SplitSegment(const Segment& segment, const std::vector<std::pair<size_t, size_t>>& matches,
                  TokenizerSpec::PreTokenizer::SplitBehavior behavior, bool invert,
                  std::vector<Segment>* out) {
  struct Part {
    size_t begin;
    size_t end;
    bool is_match;
  };
  const std::string& text = segment.text;
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t previous = 0;
  for (const auto& [begin, end] : matches) {
    if (previous != begin) parts.push_back({previous, begin, false});
    parts.push_back({begin, end, true});
    previous = end;
  }
  if (previous != text.size()) parts.push_back({previous, text.size(), false});
  if (invert) {
    for (Part& part : parts) part.is_match = !part.is_match;
  }
  // Each kept part: [begin, end) and whether to drop it.
  std::vector<Part> kept;  // is_match reused as "remove"
  kept.reserve(parts.size());
  switch (behavior) {
    case TokenizerSpec::PreTokenizer::REMOVED:
      kept = parts;
      break;
    case TokenizerSpec::PreTokenizer::ISOLATED:
      for (const Part& part : parts) kept.push_back({part.begin, part.end, false});
      break;
    case TokenizerSpec::PreTokenizer::MERGED_WITH_PREVIOUS: {
      bool previous_match = false;
      for (const Part& part : parts) {
        if (part.is_match && !previous_match && !kept.empty()) {
          kept.back().end = part.end;
        } else {
          kept.push_back({part.begin, part.end, false});
        }
        previous_match = part.is_match;
      }
      break;
    }
    case TokenizerSpec::PreTokenizer::MERGED_WITH_NEXT: {
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case TokenizerSpec::PreTokenizer::CONTIGUOUS: {
      bool previous_match = false;
      bool first = true;
      for (const Part& part : parts) {
        if (!first && part.is_match == previous_match) {
          kept.back().end = part.end;
        } else {
          kept.push_back({part.begin, part.end, false});
        }
        first = false;
        previous_match = part.is_match;
      }
      break;
    }
    default:
      kept.push_back({0, text.size(), false});
      break;
  }
  for (const Part& part : kept) {
    if (part.is_match || part.begin == part.end) continue;
    out->push_back({text.substr(part.begin, part.end - part.begin), -1,
                    segment.at_text_start && part.begin == 0});
  }
}

}  // namespace

struct Tokenizer::Impl {
  const TokenizerSpec spec;
  std::unique_ptr<BpeModel> model;
  std::vector<CompiledNormalizer> normalizers;
  std::vector<CompiledPreTokenizer> pre_tokenizers;
  std::vector<CompiledDecoder> decoders;
  std::unique_ptr<Regex> word_char;       // HF's \w for single_word added tokens
  AddedTokenMatcher raw_matcher;          // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher;   // the others, matched against normalized text
  std::vector<uint8_t> is_special;        // by id
  std::vector<int16_t> byte_token_value;  // by id: the byte of a `<0xAB>` piece, or -1
  std::array<std::string, 256> byte_level_chars;
  absl::flat_hash_map<char32_t, uint8_t> byte_level_bytes;
  bool has_byte_fallback_decoder = false;
  // A stream may restart decoding after a completed token (see StreamDecoder::Push) unless a
  // decoder looks at the end of the whole text.
  bool stream_restartable = true;

  explicit Impl(const TokenizerSpec& spec_in) : spec(spec_in) {}

  absl::Status Compile();
  // `first_char_kept` (optional): cleared when a normalizer removed the text's first character,
  // so the normalized text no longer starts at the same original offset.
  void Normalize(std::string* text, bool* first_char_kept = nullptr) const;
  void SplitAddedTokens(const Segment& segment, const AddedTokenMatcher& matcher,
                        std::vector<Segment>* out) const;
  void PreTokenize(const CompiledPreTokenizer& pre_tokenizer, const Segment& segment,
                   std::vector<Segment>* out) const;
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;
  // `raw_bytes`: byte-fallback and byte-level bytes stay as they are instead of invalid UTF-8
  // becoming U+FFFD.
  std::string DecodeIds(const int32_t* ids, size_t count, bool skip_special_tokens,
                        bool at_text_start, bool raw_bytes = false) const;
  bool IsWordChar(std::string_view text, size_t pos, bool before) const;
};

absl::Status Tokenizer::Impl::Compile() {
  const int32_t vocab_size = spec.pieces_size();
  if (spec.model() != TokenizerSpec::BPE) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: model type ",
                                                   TokenizerSpec::ModelType_Name(spec.model()),
                                                   " is not supported (supported: BPE)"));
  }
  auto model_or = BpeModel::Create(spec);
  if (!model_or.ok()) return model_or.status();
  model = std::move(*model_or);

  for (int index = 0; index < spec.normalizers_size(); ++index) {
    const auto& normalizer = spec.normalizers(index);
    const std::string what = absl::StrCat("normalizer ", index);
    CompiledNormalizer compiled{normalizer.kind(),        normalizer.pattern(),
                                normalizer.content(),     normalizer.strip_left(),
                                normalizer.strip_right(), nullptr};
    switch (normalizer.kind()) {
      case TokenizerSpec::Normalizer::REPLACE_REGEX: {
        auto regex = Regex::Compile(normalizer.pattern(), what);
        if (!regex.ok()) return regex.status();
        compiled.regex = std::move(*regex);
        break;
      }
      case TokenizerSpec::Normalizer::REPLACE_STRING:
      case TokenizerSpec::Normalizer::PREPEND:
      case TokenizerSpec::Normalizer::STRIP:
        break;
      case TokenizerSpec::Normalizer::NFC:
      case TokenizerSpec::Normalizer::NFKC:
      case TokenizerSpec::Normalizer::LOWERCASE:
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", what, " has unknown kind ",
                                                       static_cast<int>(normalizer.kind())));
    }
    normalizers.push_back(std::move(compiled));
  }

  for (int index = 0; index < spec.pre_tokenizers_size(); ++index) {
    const auto& pre = spec.pre_tokenizers(index);
    const std::string what = absl::StrCat("pre_tokenizer ", index);
    CompiledPreTokenizer compiled;
    compiled.kind = pre.kind();
    compiled.behavior = pre.behavior();
    compiled.invert = pre.invert();
    compiled.add_prefix_space = pre.add_prefix_space();
    compiled.use_regex = pre.use_regex();
    compiled.split = pre.split();
    std::string pattern;
    switch (pre.kind()) {
      case TokenizerSpec::PreTokenizer::SPLIT_REGEX:
        pattern = pre.pattern();
        break;
      case TokenizerSpec::PreTokenizer::BYTE_LEVEL:
        if (pre.use_regex()) pattern = std::string(kByteLevelPattern);
        break;
      case TokenizerSpec::PreTokenizer::METASPACE: {
        auto replacement = SingleChar(pre.replacement(), what + " replacement");
        if (!replacement.ok()) return replacement.status();
        compiled.replacement = pre.replacement();
        auto scheme = ParsePrependScheme(pre.prepend_scheme(), what);
        if (!scheme.ok()) return scheme.status();
        compiled.prepend_scheme = *scheme;
        break;
      }
      case TokenizerSpec::PreTokenizer::DIGITS:
        // One match per digit; Contiguous then joins runs, as HF's char-predicate split does.
        pattern = R"(\p{N})";
        compiled.behavior = pre.individual_digits() ? TokenizerSpec::PreTokenizer::ISOLATED
                                                    : TokenizerSpec::PreTokenizer::CONTIGUOUS;
        compiled.invert = false;
        break;
      case TokenizerSpec::PreTokenizer::PUNCTUATION:
        pattern = std::string(kPunctuationClass);
        compiled.invert = false;
        break;
      case TokenizerSpec::PreTokenizer::WHITESPACE:
        // HF's Whitespace: the matches of \w+|[^\w\s]+ (Oniguruma), the rest removed. \w is
        // spelled out as Unicode's word class (Alphabetic, marks, decimal digits, connector
        // punctuation, join controls) and \s as White_Space, which is what Oniguruma uses.
        pattern = std::string(kWordRunsPattern);
        compiled.behavior = TokenizerSpec::PreTokenizer::REMOVED;
        compiled.invert = true;
        break;
      case TokenizerSpec::PreTokenizer::WHITESPACE_SPLIT:
        pattern = std::string(kWhitespaceClass);
        compiled.behavior = TokenizerSpec::PreTokenizer::REMOVED;
        compiled.invert = false;
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer: ", what, " has kind ", TokenizerSpec::PreTokenizer::Kind_Name(pre.kind()),
            ", which this runtime does not execute"));
    }
    // HF's \s is White_Space (Oniguruma, Rust); PCRE2's also matches U+180E.
    if (!pattern.empty()) pattern = SpellOutWhitespaceEscapes(pattern);
    if (!pattern.empty()) {
      auto regex = Regex::Compile(pattern, what);
      if (!regex.ok()) return regex.status();
      compiled.regex = std::move(*regex);
    }
    pre_tokenizers.push_back(std::move(compiled));
  }

  bool fused = false;
  for (int index = 0; index < spec.decoders_size(); ++index) {
    const auto& decoder = spec.decoders(index);
    const std::string what = absl::StrCat("decoder ", index);
    CompiledDecoder compiled;
    compiled.kind = decoder.kind();
    compiled.pattern = decoder.pattern();
    compiled.content = decoder.content();
    switch (decoder.kind()) {
      case TokenizerSpec::Decoder::REPLACE:
        if (decoder.pattern_is_regex()) {
          auto regex = Regex::Compile(decoder.pattern(), what);
          if (!regex.ok()) return regex.status();
          compiled.regex = std::move(*regex);
        }
        break;
      case TokenizerSpec::Decoder::BYTE_FALLBACK:
        has_byte_fallback_decoder = true;
        break;
      case TokenizerSpec::Decoder::FUSE:
      case TokenizerSpec::Decoder::BYTE_LEVEL:
        fused = true;
        break;
      case TokenizerSpec::Decoder::STRIP: {
        auto strip_char = SingleChar(decoder.content(), what + " content");
        if (!strip_char.ok()) return strip_char.status();
        if (decoder.strip_start() < 0 || decoder.strip_stop() < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("tokenizer: ", what, ": strip counts must be >= 0, found ",
                           decoder.strip_start(), " and ", decoder.strip_stop()));
        }
        compiled.strip_char = *strip_char;
        compiled.strip_start = decoder.strip_start();
        compiled.strip_stop = decoder.strip_stop();
        if (fused && decoder.strip_stop() > 0) stream_restartable = false;
        break;
      }
      case TokenizerSpec::Decoder::METASPACE: {
        auto replacement = SingleChar(decoder.replacement(), what + " replacement");
        if (!replacement.ok()) return replacement.status();
        compiled.replacement = *replacement;
        auto scheme = ParsePrependScheme(decoder.prepend_scheme(), what);
        if (!scheme.ok()) return scheme.status();
        compiled.prepend_scheme = *scheme;
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", what, " has unknown kind ",
                                                       static_cast<int>(decoder.kind())));
    }
    decoders.push_back(std::move(compiled));
  }

  auto word_char_or = Regex::Compile(kWordCharClass, "single_word check");
  if (!word_char_or.ok()) return word_char_or.status();
  word_char = std::move(*word_char_or);

  is_special.assign(vocab_size, 0);
  for (int index = 0; index < spec.added_tokens_size(); ++index) {
    const auto& added = spec.added_tokens(index);
    if (added.id() < 0 || added.id() >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: added token \"", added.content(),
                                                     "\" has id ", added.id(),
                                                     ", outside the vocabulary"));
    }
    if (!tokenizer_internal::IsValidUtf8(added.content())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: added token ", added.id(), " is not valid UTF-8"));
    }
    if (added.special()) is_special[added.id()] = 1;
    if (added.normalized()) {
      // HF matches normalized added tokens by their normalized form.
      std::string content = added.content();
      Normalize(&content);
      normalized_matcher.Add(content, index);
    } else {
      raw_matcher.Add(added.content(), index);
    }
  }
  byte_token_value.assign(vocab_size, -1);
  for (int32_t id = 0; id < vocab_size; ++id) {
    byte_token_value[id] = static_cast<int16_t>(ParseByteToken(spec.pieces(id)));
  }
  byte_level_chars = MakeByteLevelChars();
  for (int byte = 0; byte < 256; ++byte) {
    size_t length = 0;
    byte_level_bytes[DecodeChar(byte_level_chars[byte], 0, &length)] = static_cast<uint8_t>(byte);
  }
  for (const auto& piece : spec.post_template()) {
    for (int32_t id : piece.special_ids()) {
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer: post_template refers to token id ", id, ", outside the vocabulary"));
      }
    }
  }
  return absl::OkStatus();
}

void Tokenizer::Impl::Normalize(std::string* text, bool* first_char_kept) const {
  bool unused = true;
  bool& kept = first_char_kept != nullptr ? *first_char_kept : unused;
  for (const CompiledNormalizer& normalizer : normalizers) {
    switch (normalizer.kind) {
      case TokenizerSpec::Normalizer::REPLACE_STRING:
        // A replacement takes over the alignment of what it replaces; an empty one removes it.
        if (normalizer.content.empty() && !text->empty() &&
            text->compare(0, normalizer.pattern.size(), normalizer.pattern) == 0) {
          kept = false;
        }
        ReplaceAllLiteral(normalizer.pattern, normalizer.content, text);
        break;
      case TokenizerSpec::Normalizer::REPLACE_REGEX:
        if (normalizer.content.empty()) {
          const auto matches = normalizer.regex->FindAll(*text);
          if (!matches.empty() && matches[0].first == 0 && matches[0].second > 0) kept = false;
        }
        ReplaceAllRegex(*normalizer.regex, normalizer.content, text);
        break;
      case TokenizerSpec::Normalizer::PREPEND:
        if (!text->empty()) text->insert(0, normalizer.content);
        break;
      case TokenizerSpec::Normalizer::STRIP: {
        size_t begin = 0, end = text->size();
        if (normalizer.strip_left) begin = LeadingWhitespaceLength(*text);
        if (begin > 0) kept = false;
        if (normalizer.strip_right) end = std::max(begin, TrailingWhitespaceStart(*text));
        *text = text->substr(begin, end - begin);
        break;
      }
      case TokenizerSpec::Normalizer::NFC:
        *text = tokenizer_internal::NormalizeNfc(*text);
        break;
      case TokenizerSpec::Normalizer::NFKC:
        *text = tokenizer_internal::NormalizeNfkc(*text);
        break;
      case TokenizerSpec::Normalizer::LOWERCASE:
        *text = tokenizer_internal::Lowercase(*text);
        break;
      default:
        break;
    }
  }
}

bool Tokenizer::Impl::IsWordChar(std::string_view text, size_t pos, bool before) const {
  if (before) {
    if (pos == 0) return false;
    size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    return !word_char->FindAll(text.substr(start, pos - start)).empty();
  }
  if (pos >= text.size()) return false;
  return !word_char->FindAll(text.substr(pos, CharLengthAt(text, pos))).empty();
}

// HF's AddedVocabulary::find_matches + split_with_indices.
void Tokenizer::Impl::SplitAddedTokens(const Segment& segment, const AddedTokenMatcher& matcher,
                                       std::vector<Segment>* out) const {
  const std::string& text = segment.text;
  if (text.empty()) return;  // HF drops empty pieces
  if (matcher.empty()) {
    out->push_back(segment);
    return;
  }
  size_t start_offset = 0;
  size_t search_from = 0;
  size_t begin = 0, end = 0;
  int32_t added_index = -1;
  while (search_from < text.size() &&
         matcher.FindNext(text, search_from, &begin, &end, &added_index)) {
    search_from = end;
    const auto& added = spec.added_tokens(added_index);
    size_t start = begin, stop = end;
    if (added.single_word()) {
      const bool start_ok = start == 0 || !IsWordChar(text, start, /*before=*/true);
      const bool stop_ok = stop == text.size() || !IsWordChar(text, stop, /*before=*/false);
      if (!start_ok || !stop_ok) continue;
    }
    if (added.lstrip()) {
      start =
          std::max(TrailingWhitespaceStart(std::string_view(text).substr(0, start)), start_offset);
    }
    if (added.rstrip()) stop += LeadingWhitespaceLength(std::string_view(text).substr(stop));
    if (start_offset < start) {
      out->push_back({text.substr(start_offset, start - start_offset), -1,
                      segment.at_text_start && start_offset == 0});
    }
    out->push_back({text.substr(start, stop - start), added.id(), false});
    start_offset = stop;
  }
  if (start_offset < text.size()) {
    out->push_back({text.substr(start_offset), -1, segment.at_text_start && start_offset == 0});
  }
}

void Tokenizer::Impl::PreTokenize(const CompiledPreTokenizer& pre, const Segment& segment,
                                  std::vector<Segment>* out) const {
  switch (pre.kind) {
    case TokenizerSpec::PreTokenizer::BYTE_LEVEL: {
      Segment prefixed = segment;
      if (pre.add_prefix_space && (prefixed.text.empty() || prefixed.text[0] != ' ')) {
        prefixed.text.insert(0, " ");
      }
      const size_t first = out->size();
      if (pre.use_regex) {
        SplitSegment(prefixed, pre.regex->FindAll(prefixed.text),
                     TokenizerSpec::PreTokenizer::ISOLATED, false, out);
      } else if (!prefixed.text.empty()) {
        out->push_back(std::move(prefixed));
      }
      for (size_t index = first; index < out->size(); ++index) {
        std::string mapped;
        mapped.reserve((*out)[index].text.size() * 2);
        for (unsigned char byte : (*out)[index].text) mapped += byte_level_chars[byte];
        (*out)[index].text = std::move(mapped);
      }
      return;
    }
    case TokenizerSpec::PreTokenizer::METASPACE: {
      Segment replaced = segment;
      ReplaceAllLiteral(" ", pre.replacement, &replaced.text);
      const bool starts_with_replacement =
          replaced.text.compare(0, pre.replacement.size(), pre.replacement) == 0;
      if (!starts_with_replacement &&
          (pre.prepend_scheme == PrependScheme::kAlways ||
           (pre.prepend_scheme == PrependScheme::kFirst && segment.at_text_start))) {
        replaced.text.insert(0, pre.replacement);
      }
      if (!pre.split) {
        if (!replaced.text.empty()) out->push_back(std::move(replaced));
        return;
      }
      std::vector<std::pair<size_t, size_t>> matches;
      for (size_t pos = replaced.text.find(pre.replacement); pos != std::string::npos;
           pos = replaced.text.find(pre.replacement, pos + pre.replacement.size())) {
        matches.emplace_back(pos, pos + pre.replacement.size());
      }
      SplitSegment(replaced, matches, TokenizerSpec::PreTokenizer::MERGED_WITH_NEXT, false, out);
      return;
    }
    default:
      SplitSegment(segment, pre.regex->FindAll(segment.text), pre.behavior, pre.invert, out);
      return;
  }
}

std::vector<int32_t> Tokenizer::Impl::Encode(std::string_view text, bool add_special_tokens) const {
  // HF only takes valid Unicode strings; bytes that are not UTF-8 are read as U+FFFD so the
  // regex engine never sees invalid input.
  Segment whole;
  whole.text = tokenizer_internal::IsValidUtf8(text) ? std::string(text)
                                                     : tokenizer_internal::ToValidUtf8Lossy(text);
  whole.at_text_start = true;

  std::vector<Segment> raw_split;
  SplitAddedTokens(whole, raw_matcher, &raw_split);
  std::vector<Segment> segments;
  for (Segment& segment : raw_split) {
    if (segment.added_id >= 0) {
      segments.push_back(std::move(segment));
      continue;
    }
    // HF re-slices every normalized piece, so Metaspace's "first" sees the original offset of
    // the first character left after normalization: after a leading strip it is not 0.
    bool first_char_kept = true;
    Normalize(&segment.text, &first_char_kept);
    segment.at_text_start = segment.at_text_start && first_char_kept;
    SplitAddedTokens(segment, normalized_matcher, &segments);
  }

  std::vector<int32_t> sequence_ids;
  std::vector<Segment> words, next_words;
  for (Segment& segment : segments) {
    if (segment.added_id >= 0) {
      sequence_ids.push_back(segment.added_id);
      continue;
    }
    words.clear();
    words.push_back(std::move(segment));
    for (const CompiledPreTokenizer& pre : pre_tokenizers) {
      next_words.clear();
      for (const Segment& word : words) PreTokenize(pre, word, &next_words);
      words.swap(next_words);
    }
    for (const Segment& word : words) model->Tokenize(word.text, &sequence_ids);
  }

  if (!add_special_tokens || spec.post_template_size() == 0) return sequence_ids;
  std::vector<int32_t> ids;
  ids.reserve(sequence_ids.size() + 4);
  for (const auto& piece : spec.post_template()) {
    if (piece.is_sequence()) {
      ids.insert(ids.end(), sequence_ids.begin(), sequence_ids.end());
    } else {
      ids.insert(ids.end(), piece.special_ids().begin(), piece.special_ids().end());
    }
  }
  return ids;
}

// HF's Tokenizer::decode: ids to pieces (unknown ids dropped, special ones too when asked), then
// the decoder chain. `at_text_start` false decodes a continuation: decoders that treat the very
// start of the text specially (Metaspace's first token, Strip after Fuse) leave it alone.
std::string Tokenizer::Impl::DecodeIds(const int32_t* ids, size_t count, bool skip_special_tokens,
                                       bool at_text_start, bool raw_bytes) const {
  std::vector<std::string> tokens;
  tokens.reserve(count);
  for (size_t index = 0; index < count; ++index) {
    const int32_t id = ids[index];
    if (id < 0 || id >= spec.pieces_size()) continue;
    if (skip_special_tokens && is_special[id]) continue;
    tokens.push_back(spec.pieces(id));
  }
  if (decoders.empty()) {
    std::string joined = !at_text_start && !tokens.empty() ? " " : "";
    for (size_t index = 0; index < tokens.size(); ++index) {
      if (index > 0) joined += ' ';
      joined += tokens[index];
    }
    return joined;
  }
  bool fused = false;
  for (const CompiledDecoder& decoder : decoders) {
    switch (decoder.kind) {
      case TokenizerSpec::Decoder::REPLACE:
        for (std::string& token : tokens) {
          if (decoder.regex != nullptr) {
            ReplaceAllRegex(*decoder.regex, decoder.content, &token);
          } else {
            ReplaceAllLiteral(decoder.pattern, decoder.content, &token);
          }
        }
        break;
      case TokenizerSpec::Decoder::BYTE_FALLBACK: {
        std::vector<std::string> result;
        result.reserve(tokens.size());
        std::string pending_bytes;
        auto flush = [&]() {
          if (pending_bytes.empty()) return;
          if (raw_bytes || tokenizer_internal::IsValidUtf8(pending_bytes)) {
            result.push_back(pending_bytes);
          } else {
            // HF replaces every byte of an invalid run, not each maximal subpart.
            for (size_t i = 0; i < pending_bytes.size(); ++i) {
              result.emplace_back(kReplacementChar);
            }
          }
          pending_bytes.clear();
        };
        for (std::string& token : tokens) {
          const int byte = ParseByteToken(token);
          if (byte >= 0) {
            pending_bytes.push_back(static_cast<char>(byte));
          } else {
            flush();
            result.push_back(std::move(token));
          }
        }
        flush();
        tokens.swap(result);
        break;
      }
      case TokenizerSpec::Decoder::FUSE: {
        std::string joined;
        for (const std::string& token : tokens) joined += token;
        tokens.assign(1, std::move(joined));
        fused = true;
        break;
      }
      case TokenizerSpec::Decoder::STRIP:
        for (size_t index = 0; index < tokens.size(); ++index) {
          std::string& token = tokens[index];
          std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
          for (size_t pos = 0; pos < token.size();) {
            size_t length = 0;
            chars.emplace_back(pos, CharAt(token, pos, &length));
            pos += length;
          }
          size_t start_cut = 0;
          if (!fused || at_text_start || index > 0) {
            for (size_t i = 0; i < chars.size() && i < static_cast<size_t>(decoder.strip_start);
                 ++i) {
              if (chars[i].second != decoder.strip_char) break;
              start_cut = i + 1;
            }
          }
          size_t stop_cut = chars.size();
          for (size_t i = 0; i < static_cast<size_t>(decoder.strip_stop) && i < chars.size(); ++i) {
            const size_t char_index = chars.size() - i - 1;
            if (chars[char_index].second != decoder.strip_char) break;
            stop_cut = char_index;
          }
          const size_t begin = start_cut < chars.size() ? chars[start_cut].first : token.size();
          const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : token.size();
          token = begin < end ? token.substr(begin, end - begin) : std::string();
        }
        break;
      case TokenizerSpec::Decoder::BYTE_LEVEL: {
        std::string bytes;
        for (const std::string& token : tokens) {
          const size_t mark = bytes.size();
          bool all_mapped = true;
          for (size_t pos = 0; pos < token.size();) {
            size_t length = 0;
            auto it = byte_level_bytes.find(CharAt(token, pos, &length));
            if (it == byte_level_bytes.end()) {
              all_mapped = false;
              break;
            }
            bytes.push_back(static_cast<char>(it->second));
            pos += length;
          }
          if (!all_mapped) {
            bytes.resize(mark);
            bytes += token;
          }
        }
        tokens.assign(1,
                      raw_bytes ? std::move(bytes) : tokenizer_internal::ToValidUtf8Lossy(bytes));
        fused = true;
        break;
      }
      case TokenizerSpec::Decoder::METASPACE:
        for (size_t index = 0; index < tokens.size(); ++index) {
          const bool drop =
              index == 0 && at_text_start && decoder.prepend_scheme != PrependScheme::kNever;
          std::string& token = tokens[index];
          std::string result;
          result.reserve(token.size());
          for (size_t pos = 0; pos < token.size();) {
            size_t length = 0;
            const char32_t code_point = CharAt(token, pos, &length);
            if (code_point == decoder.replacement) {
              if (!drop) result.push_back(' ');
            } else {
              result.append(token, pos, length);
            }
            pos += length;
          }
          token = std::move(result);
        }
        break;
      default:
        break;
    }
  }
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Create(const plan::TokenizerSpec& spec) {
  auto impl = std::make_unique<Impl>(spec);
  absl::Status status = impl->Compile();
  if (!status.ok()) return status;
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  return impl_->Encode(text, add_special_tokens);
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return impl_->DecodeIds(ids.data(), ids.size(), skip_special_tokens, /*at_text_start=*/true);
}

std::string Tokenizer::DecodeBytes(const std::vector<int32_t>& ids) const {
  return impl_->DecodeIds(ids.data(), ids.size(), /*skip_special_tokens=*/false,
                          /*at_text_start=*/true, /*raw_bytes=*/true);
}

int32_t Tokenizer::vocab_size() const { return impl_->spec.pieces_size(); }
int32_t Tokenizer::bos_id() const { return impl_->spec.bos_id(); }
int32_t Tokenizer::eos_id() const { return impl_->spec.eos_id(); }
bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->is_special[id] != 0;
}
const std::string& Tokenizer::Piece(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? impl_->spec.pieces(id) : kEmpty;
}

// Streaming keeps a window of ids whose text is not final yet and re-decodes only that window.
// The window restarts after a token when decoding is known to be concatenative there: the token
// is not a byte-fallback byte (a byte run is decoded as a whole and may still turn invalid), the
// text does not end in U+FFFD (ByteLevel's lossy UTF-8 may still complete a character), and the
// start-of-text rules (Strip after Fuse, Metaspace's first token) have produced visible text.
// Those rules are the reason HF's DecodeStream can disagree with decode(): it re-decodes a
// one-token window with the start rules applied to a mid-text token.
StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                             bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  for (int32_t id : prompt_ids) Push(id);
  if (!window_.empty()) {
    // Prompt text held back is not the caller's to see, except a trailing U+FFFD run that a
    // generated byte may still complete into a character.
    std::string text = DecodeWindow();
    while (text.size() >= kReplacementChar.size() &&
           text.compare(text.size() - kReplacementChar.size(), kReplacementChar.size(),
                        kReplacementChar) == 0) {
      text.resize(text.size() - kReplacementChar.size());
    }
    emitted_in_window_ = text.size();
  }
}

std::string StreamDecoder::DecodeWindow() const {
  return tokenizer_.impl_->DecodeIds(window_.data(), window_.size(), skip_special_tokens_,
                                     window_at_text_start_);
}

std::string StreamDecoder::Push(int32_t id) {
  const Tokenizer::Impl& impl = *tokenizer_.impl_;
  if (id < 0 || id >= tokenizer_.vocab_size()) return "";
  if (skip_special_tokens_ && impl.is_special[id]) return "";
  window_.push_back(id);
  if (impl.has_byte_fallback_decoder && impl.byte_token_value[id] >= 0) return "";
  const std::string text = DecodeWindow();
  if (text.size() >= kReplacementChar.size() &&
      text.compare(text.size() - kReplacementChar.size(), kReplacementChar.size(),
                   kReplacementChar) == 0) {
    return "";
  }
  std::string piece =
      text.size() > emitted_in_window_ ? text.substr(emitted_in_window_) : std::string();
  emitted_in_window_ = std::max(emitted_in_window_, text.size());
  if (impl.stream_restartable && (!window_at_text_start_ || !text.empty())) {
    window_.clear();
    emitted_in_window_ = 0;
    window_at_text_start_ = false;
  }
  return piece;
}

std::string StreamDecoder::Finish() {
  const std::string text = DecodeWindow();
  std::string piece =
      text.size() > emitted_in_window_ ? text.substr(emitted_in_window_) : std::string();
  emitted_in_window_ = std::max(emitted_in_window_, text.size());
  if (tokenizer_.impl_->stream_restartable && (!window_at_text_start_ || !text.empty())) {
    window_.clear();
    emitted_in_window_ = 0;
    window_at_text_start_ = false;
  }
  return piece;
}

}  // namespace llmrt
