#include "runtime/grammar/regex_to_grammar.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/grammar/code_ranges.h"

namespace llmrt::grammar {
namespace {

using Ranges = CodeRanges;

Ranges Subtract(const Ranges& ranges, const Ranges& removed) {
  Ranges result;
  const Ranges keep = ComplementRanges(removed);
  for (auto [low, high] : NormalizeRanges(ranges)) {
    for (auto [keep_low, keep_high] : keep) {
      const uint32_t from = std::max(low, keep_low), to = std::min(high, keep_high);
      if (from <= to) result.emplace_back(from, to);
    }
  }
  return result;
}

bool Contains(const Ranges& ranges, uint32_t code) {
  for (auto [low, high] : ranges) {
    if (code >= low && code <= high) return true;
  }
  return false;
}

std::string ClassChar(uint32_t code) {
  if (code == ']' || code == '\\' || code == '^' || code == '-' || code == '[') {
    return std::string("\\") + static_cast<char>(code);
  }
  if (code < 0x20 || code == 0x7F) return absl::StrFormat("\\x%02X", code);
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  if (code <= 0xFFFF) return absl::StrFormat("\\u%04X", code);
  return absl::StrFormat("\\U%08X", code);
}

std::string ClassText(const Ranges& ranges) {
  std::string text = "[";
  for (auto [low, high] : NormalizeRanges(ranges)) {
    text += ClassChar(low);
    if (high != low) text += "-" + ClassChar(high);
  }
  return text + "]";
}

// One option as is, several as a parenthesized alternation.
std::string Choice(const std::vector<std::string>& options) {
  if (options.size() == 1) return options[0];
  return "(" + absl::StrJoin(options, " | ") + ")";
}

class RegexConverter {
 public:
  RegexConverter(std::string_view regex, bool json_string)
      : regex_(regex), json_string_(json_string) {}

  absl::StatusOr<std::string> Convert() {
    if (!regex_.empty() && regex_[0] == '^') ++pos_;
    LLMRT_ASSIGN_OR_RETURN(std::string expression, Alternation());
    if (pos_ < regex_.size()) return Error("unbalanced ')'");
    return expression;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("regex \"%s\": %s at offset %d", regex_, what, pos_));
  }

  bool AtEnd() const { return pos_ >= regex_.size(); }

  absl::StatusOr<std::string> Alternation() {
    std::vector<std::string> options;
    while (true) {
      LLMRT_ASSIGN_OR_RETURN(std::string sequence, Sequence());
      options.push_back(std::move(sequence));
      if (!AtEnd() && regex_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    return Choice(options);
  }

  absl::StatusOr<std::string> Sequence() {
    std::string text = "(\"\"";
    while (!AtEnd() && regex_[pos_] != '|' && regex_[pos_] != ')') {
      if (regex_[pos_] == '$') {
        ++pos_;
        if (!AtEnd() && regex_[pos_] != ')' && regex_[pos_] != '|') {
          return Error("'$' is supported only at the end");
        }
        continue;
      }
      LLMRT_ASSIGN_OR_RETURN(std::string atom, Atom());
      LLMRT_ASSIGN_OR_RETURN(std::string quantifier, Quantifier());
      text += " (" + atom + ")" + quantifier;
    }
    return text + ")";
  }

  absl::StatusOr<std::string> Quantifier() {
    if (AtEnd()) return std::string();
    std::string quantifier;
    const char c = regex_[pos_];
    if (c == '*' || c == '+' || c == '?') {
      quantifier = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = regex_.find('}', pos_);
      if (close == std::string_view::npos) return Error("unclosed '{'");
      const std::string_view body = regex_.substr(pos_ + 1, close - pos_ - 1);
      if (body.empty() || body.find_first_not_of("0123456789,") != std::string_view::npos ||
          body[0] == ',') {
        return Error("a '{' quantifier must be {m}, {m,} or {m,n}");
      }
      quantifier = "{" + std::string(body) + "}";
      pos_ = close + 1;
    } else {
      return std::string();
    }
    if (!AtEnd() && regex_[pos_] == '?') ++pos_;  // lazy: same language
    if (!AtEnd() && (regex_[pos_] == '*' || regex_[pos_] == '+' || regex_[pos_] == '?' ||
                     regex_[pos_] == '{')) {
      return Error("possessive or repeated quantifiers are not supported");
    }
    return quantifier;
  }

  absl::StatusOr<std::string> Atom() {
    const char c = regex_[pos_];
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && regex_[pos_] == '?') {
        if (pos_ + 1 < regex_.size() && regex_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          return Error("lookaround, named groups and inline flags '(?' are not supported");
        }
      }
      LLMRT_ASSIGN_OR_RETURN(std::string inner, Alternation());
      if (AtEnd() || regex_[pos_] != ')') return Error("unclosed '('");
      ++pos_;
      return inner;
    }
    if (c == '[') return ClassAtom();
    if (c == '.') {
      ++pos_;
      return Emit(ComplementRanges({{'\n', '\n'}}));
    }
    if (c == '^') return Error("'^' is supported only at the start");
    if (c == '*' || c == '+' || c == '?' || c == '{')
      return Error("a quantifier with nothing to repeat");
    Ranges ranges;
    LLMRT_ASSIGN_OR_RETURN(ranges, Escape(/*in_class=*/false));
    return Emit(ranges);
  }

  absl::StatusOr<std::string> ClassAtom() {
    ++pos_;  // '['
    bool negated = false;
    if (!AtEnd() && regex_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    Ranges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("unclosed '['");
      if (regex_[pos_] == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      LLMRT_ASSIGN_OR_RETURN(Ranges low, Escape(/*in_class=*/true));
      if (low.size() == 1 && low[0].first == low[0].second && pos_ + 1 < regex_.size() &&
          regex_[pos_] == '-' && regex_[pos_ + 1] != ']') {
        ++pos_;
        LLMRT_ASSIGN_OR_RETURN(Ranges high, Escape(/*in_class=*/true));
        if (high.size() != 1 || high[0].first != high[0].second || high[0].first < low[0].first) {
          return Error("bad character range");
        }
        ranges.emplace_back(low[0].first, high[0].first);
        continue;
      }
      ranges.insert(ranges.end(), low.begin(), low.end());
    }
    return Emit(negated ? ComplementRanges(ranges) : NormalizeRanges(ranges));
  }

  // One character or escape as a set of code points; pos_ moves past it.
  absl::StatusOr<Ranges> Escape(bool in_class) {
    const auto byte = static_cast<uint8_t>(regex_[pos_]);
    if (byte != '\\') {
      const int length = byte < 0x80    ? 1
                         : byte >= 0xF0 ? 4
                         : byte >= 0xE0 ? 3
                         : byte >= 0xC0 ? 2
                                        : 0;
      if (length == 0 || pos_ + length > regex_.size()) return Error("invalid UTF-8");
      uint32_t code = length == 1 ? byte : byte & (0xFF >> (length + 1));
      for (int i = 1; i < length; ++i) {
        code = code << 6 | (static_cast<uint8_t>(regex_[pos_ + i]) & 0x3F);
      }
      pos_ += length;
      return Ranges{{code, code}};
    }
    if (pos_ + 1 >= regex_.size()) return Error("dangling '\\'");
    const char escape = regex_[pos_ + 1];
    pos_ += 2;
    const Ranges digits = {{'0', '9'}};
    const Ranges word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    const Ranges space = {{'\t', '\r'}, {' ', ' '}};
    switch (escape) {
      case 'd':
        return digits;
      case 'D':
        return ComplementRanges(digits);
      case 'w':
        return word;
      case 'W':
        return ComplementRanges(word);
      case 's':
        return space;
      case 'S':
        return ComplementRanges(space);
      case 'n':
        return Ranges{{'\n', '\n'}};
      case 'r':
        return Ranges{{'\r', '\r'}};
      case 't':
        return Ranges{{'\t', '\t'}};
      case 'f':
        return Ranges{{'\f', '\f'}};
      case 'v':
        return Ranges{{'\v', '\v'}};
      case '0':
        return Ranges{{0, 0}};
      case 'x':
      case 'u': {
        const int count = escape == 'x' ? 2 : 4;
        uint32_t code = 0;
        for (int i = 0; i < count; ++i) {
          if (AtEnd() || !std::isxdigit(static_cast<unsigned char>(regex_[pos_]))) {
            return Error(absl::StrFormat("'\\%c' needs %d hex digits", escape, count));
          }
          const char h = regex_[pos_++];
          code = code * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        return Ranges{{code, code}};
      }
      case 'b':
        if (in_class) return Ranges{{'\b', '\b'}};
        return Error("word boundaries '\\b' are not supported");
      case 'B':
        return Error("'\\B' is not supported");
      default:
        if (escape >= '1' && escape <= '9') return Error("backreferences are not supported");
        if ((escape >= 'a' && escape <= 'z') || (escape >= 'A' && escape <= 'Z')) {
          return Error(absl::StrFormat("unknown escape '\\%c'", escape));
        }
        return Ranges{{static_cast<uint8_t>(escape), static_cast<uint8_t>(escape)}};
    }
  }

  // A GBNF expression for one character of `ranges` (in JSON-string form when asked).
  absl::StatusOr<std::string> Emit(const Ranges& ranges) {
    if (ranges.empty()) return Error("a character class that matches nothing");
    if (!json_string_) return ClassText(ranges);
    // Characters JSON must escape: control characters, '"' and '\'.
    const Ranges special = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::vector<std::string> options;
    const Ranges raw = Subtract(ranges, special);
    if (!raw.empty()) options.push_back(ClassText(raw));
    for (uint32_t code = 0; code < 0x20; ++code) {
      if (!Contains(ranges, code)) continue;
      // JSON's short escapes where it has one, else \u00XX.
      const char* short_escape = code == '\b'   ? "b"
                                 : code == '\f' ? "f"
                                 : code == '\n' ? "n"
                                 : code == '\r' ? "r"
                                 : code == '\t' ? "t"
                                                : nullptr;
      options.push_back(short_escape != nullptr ? absl::StrFormat("\"\\\\%s\"", short_escape)
                                                : absl::StrFormat("\"\\\\u%04x\"", code));
    }
    if (Contains(ranges, '"')) options.push_back("\"\\\\\\\"\"");
    if (Contains(ranges, '\\')) options.push_back("\"\\\\\\\\\"");
    return Choice(options);
  }

  std::string_view regex_;
  bool json_string_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<std::string> RegexToGbnf(std::string_view regex, bool json_string) {
  return RegexConverter(regex, json_string).Convert();
}

}  // namespace llmrt::grammar
