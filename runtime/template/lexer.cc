#include "runtime/template/lexer.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace llmrt::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

void AppendUtf8(uint32_t code_point, std::string& out) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : source_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t position = 0;
    bool line_starting = true;
    while (position < source_.size()) {
      size_t tag = FindTagStart(position);
      std::string text = source_.substr(position, tag - position);
      if (tag == source_.size()) {
        Emit(Token::Kind::kData, std::move(text), position);
        break;
      }
      const char type = source_[tag + 1];  // '{', '%' or '#'
      size_t after = tag + 2;
      char sign = 0;
      if (after < source_.size() && (source_[after] == '-' || source_[after] == '+')) {
        sign = source_[after++];
      }
      // {% raw %} is matched as a whole by the root rule, as in jinja2.
      size_t raw_end = std::string::npos;
      if (type == '%') raw_end = MatchRawBegin(after);
      if (sign == '-') {
        text = RightStrip(text);
      } else if (sign != '+' && options_.lstrip_blocks && type != '{') {
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line_begin > 0 || line_starting) {
          if (std::all_of(text.begin() + line_begin, text.end(), IsSpace)) {
            text.erase(line_begin);
          }
        }
      }
      Emit(Token::Kind::kData, std::move(text), position);
      if (raw_end != std::string::npos) {
        line_starting = source_[raw_end - 1] == '\n';
        absl::StatusOr<size_t> next = LexRaw(tag, raw_end, line_starting);
        if (!next.ok()) return next.status();
        position = *next;
        line_starting = position > 0 && source_[position - 1] == '\n';
        continue;
      }
      line_starting = false;
      absl::StatusOr<size_t> next = type == '#' ? LexComment(tag, after) : LexTag(tag, type, after);
      if (!next.ok()) return next.status();
      position = *next;
      line_starting = position > 0 && source_[position - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Kind::kEnd, "", 0, 0});
    SetPosition(tokens_.back(), source_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t index = from; index + 1 < source_.size(); ++index) {
      if (source_[index] == '{') {
        const char next = source_[index + 1];
        if (next == '{' || next == '%' || next == '#') return index;
      }
    }
    return source_.size();
  }

  static std::string RightStrip(const std::string& text) {
    size_t end = text.size();
    while (end > 0 && IsSpace(text[end - 1])) --end;
    return text.substr(0, end);
  }

  size_t SkipSpaces(size_t position) const {
    while (position < source_.size() && IsSpace(source_[position])) ++position;
    return position;
  }

  bool StartsWith(size_t position, std::string_view text) const {
    return source_.compare(position, text.size(), text) == 0;
  }

  // After "{%" and its sign: "\s*raw\s*(-%}\s*|%})". Returns the end of the match or npos.
  size_t MatchRawBegin(size_t position) const {
    position = SkipSpaces(position);
    if (!StartsWith(position, "raw")) return std::string::npos;
    position = SkipSpaces(position + 3);
    if (StartsWith(position, "-%}")) return SkipSpaces(position + 3);
    if (StartsWith(position, "%}")) return position + 2;
    return std::string::npos;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag, size_t body_begin, bool line_starting) {
    for (size_t index = body_begin; index + 1 < source_.size(); ++index) {
      if (source_[index] != '{' || source_[index + 1] != '%') continue;
      size_t position = index + 2;
      char sign = 0;
      if (position < source_.size() && (source_[position] == '-' || source_[position] == '+')) {
        sign = source_[position++];
      }
      position = SkipSpaces(position);
      if (!StartsWith(position, "endraw")) continue;
      position = SkipSpaces(position + 6);
      size_t end;
      if (StartsWith(position, "+%}")) {
        end = position + 3;
      } else if (StartsWith(position, "-%}")) {
        end = SkipSpaces(position + 3);
      } else if (StartsWith(position, "%}")) {
        end = position + 2;
        if (options_.trim_blocks && end < source_.size() && source_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = source_.substr(body_begin, index - body_begin);
      if (sign == '-') {
        text = RightStrip(text);
      } else if (sign != '+' && options_.lstrip_blocks) {
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_begin > 0 || line_starting) &&
            std::all_of(text.begin() + line_begin, text.end(), IsSpace)) {
          text.erase(line_begin);
        }
      }
      Emit(Token::Kind::kData, std::move(text), body_begin);
      return end;
    }
    return Error(tag, "missing end of raw directive ({% endraw %})");
  }

  absl::StatusOr<size_t> LexComment(size_t tag, size_t position) {
    for (size_t index = position; index + 1 < source_.size(); ++index) {
      if ((source_[index] == '-' || source_[index] == '+') && StartsWith(index + 1, "#}")) {
        if (source_[index] == '-') return SkipSpaces(index + 3);
        return index + 3;
      }
      if (StartsWith(index, "#}")) {
        size_t end = index + 2;
        if (options_.trim_blocks && end < source_.size() && source_[end] == '\n') ++end;
        return end;
      }
    }
    return Error(tag, "missing end of comment tag (#})");
  }

  absl::StatusOr<size_t> LexTag(size_t tag, char type, size_t position) {
    const bool is_block = type == '%';
    Emit(is_block ? Token::Kind::kBlockBegin : Token::Kind::kVariableBegin, "", tag);
    const char end_char = is_block ? '%' : '}';
    std::vector<char> brackets;
    while (true) {
      if (position >= source_.size()) {
        return Error(tag, is_block ? "unexpected end of template: missing %}"
                                   : "unexpected end of template: missing }}");
      }
      const char c = source_[position];
      // The tag's end is recognized only outside brackets: "{{ {'a': {'b': 1}} }}".
      if (brackets.empty()) {
        if (c == '-' && position + 2 < source_.size() + 0 && source_[position + 1] == end_char &&
            position + 2 < source_.size() && source_[position + 2] == '}') {
          Emit(is_block ? Token::Kind::kBlockEnd : Token::Kind::kVariableEnd, "", position);
          return SkipSpaces(position + 3);
        }
        if (is_block && c == '+' && StartsWith(position + 1, "%}")) {
          Emit(Token::Kind::kBlockEnd, "", position);
          return position + 3;
        }
        if (c == end_char && position + 1 < source_.size() && source_[position + 1] == '}') {
          Emit(is_block ? Token::Kind::kBlockEnd : Token::Kind::kVariableEnd, "", position);
          size_t end = position + 2;
          if (is_block && options_.trim_blocks && end < source_.size() && source_[end] == '\n') {
            ++end;
          }
          return end;
        }
      }
      if (IsSpace(c)) {
        ++position;
        continue;
      }
      if (IsDigit(c)) {
        absl::StatusOr<size_t> next = LexNumber(position);
        if (!next.ok()) return next.status();
        position = *next;
        continue;
      }
      if (IsNameStart(c)) {
        size_t end = position;
        while (end < source_.size() && IsNameChar(source_[end])) ++end;
        Emit(Token::Kind::kName, source_.substr(position, end - position), position);
        position = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> next = LexString(position);
        if (!next.ok()) return next.status();
        position = *next;
        continue;
      }
      static constexpr std::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", ">=", "<="};
      bool matched = false;
      for (std::string_view op : kTwoCharOperators) {
        if (StartsWith(position, op)) {
          Emit(Token::Kind::kOperator, std::string(op), position);
          position += 2;
          matched = true;
          break;
        }
      }
      if (matched) continue;
      static constexpr std::string_view kOneCharOperators = "+-/*%~[](){}><=.:|,;";
      if (kOneCharOperators.find(c) == std::string_view::npos) {
        return Error(position, absl::StrFormat("unexpected character '%c'", c));
      }
      if (c == '(' || c == '[' || c == '{') {
        brackets.push_back(c);
      } else if (c == ')' || c == ']' || c == '}') {
        const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (brackets.empty() || brackets.back() != open) {
          return Error(position, absl::StrFormat("unexpected '%c'", c));
        }
        brackets.pop_back();
      }
      Emit(Token::Kind::kOperator, std::string(1, c), position);
      ++position;
    }
  }

  absl::StatusOr<size_t> LexNumber(size_t position) {
    // Decimal integers and floats with optional '_' separators and an exponent, as jinja2's
    // integer_re and float_re.
    auto digits = [&](size_t at) {
      size_t end = at;
      while (end < source_.size() &&
             (IsDigit(source_[end]) || (source_[end] == '_' && end + 1 < source_.size() &&
                                        IsDigit(source_[end + 1]) && end > at))) {
        ++end;
      }
      return end;
    };
    size_t end = digits(position);
    bool is_float = false;
    if (end + 1 < source_.size() && source_[end] == '.' && IsDigit(source_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      size_t exponent = end + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) {
        ++exponent;
      }
      if (exponent < source_.size() && IsDigit(source_[exponent])) {
        end = digits(exponent);
        is_float = true;
      }
    }
    std::string text;
    for (size_t index = position; index < end; ++index) {
      if (source_[index] != '_') text += source_[index];
    }
    Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInteger, std::move(text), position);
    return end;
  }

  absl::StatusOr<size_t> LexString(size_t position) {
    // Python string-literal escapes, as jinja2 decodes them with "unicode-escape"; an unknown
    // escape keeps its backslash.
    const char quote = source_[position];
    std::string value;
    size_t index = position + 1;
    while (true) {
      if (index >= source_.size()) return Error(position, "unterminated string literal");
      const char c = source_[index];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++index;
        continue;
      }
      if (index + 1 >= source_.size()) return Error(position, "unterminated string literal");
      const char escape = source_[index + 1];
      index += 2;
      switch (escape) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\n':
          break;  // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const int width = escape == 'x' ? 2 : escape == 'u' ? 4 : 8;
          uint32_t code_point = 0;
          for (int digit = 0; digit < width; ++digit) {
            const int hex = index < source_.size() ? HexValue(source_[index]) : -1;
            if (hex < 0) {
              return Error(index,
                           absl::StrFormat("truncated \\%c escape in a string literal", escape));
            }
            code_point = code_point * 16 + hex;
            ++index;
          }
          if (code_point > 0x10FFFF) {
            return Error(index, "\\U escape beyond U+10FFFF in a string literal");
          }
          AppendUtf8(code_point, value);
          break;
        }
        default:
          if (escape >= '0' && escape <= '7') {
            uint32_t code_point = escape - '0';
            for (int digit = 0; digit < 2 && index < source_.size() && source_[index] >= '0' &&
                                source_[index] <= '7';
                 ++digit) {
              code_point = code_point * 8 + (source_[index++] - '0');
            }
            AppendUtf8(code_point, value);
          } else {
            value += '\\';
            value += escape;
          }
      }
    }
    Emit(Token::Kind::kString, std::move(value), position);
    return index + 1;
  }

  void SetPosition(Token& token, size_t offset) {
    // An empty template emits nothing before its end token, so the table may not exist yet.
    if (line_starts_.empty()) ComputeLineStarts();
    const auto line = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    token.line = static_cast<int>(line - line_starts_.begin());
    token.column = static_cast<int>(offset - *(line - 1)) + 1;
  }

  void Emit(Token::Kind kind, std::string text, size_t offset) {
    if (kind == Token::Kind::kData && text.empty()) return;
    if (line_starts_.empty()) ComputeLineStarts();
    Token token{kind, std::move(text), 0, 0};
    SetPosition(token, offset);
    tokens_.push_back(std::move(token));
  }

  void ComputeLineStarts() {
    line_starts_.push_back(0);
    for (size_t index = 0; index < source_.size(); ++index) {
      if (source_[index] == '\n') line_starts_.push_back(index + 1);
    }
  }

  absl::Status Error(size_t offset, std::string_view message) {
    if (line_starts_.empty()) ComputeLineStarts();
    Token where{Token::Kind::kEnd, "", 0, 0};
    SetPosition(where, offset);
    return absl::InvalidArgumentError(absl::StrFormat(
        "template syntax error at line %d, column %d: %s", where.line, where.column, message));
  }

  std::string source_;
  LexerOptions options_;
  std::vector<Token> tokens_;
  std::vector<size_t> line_starts_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  // jinja2 turns "\r\n" and "\r" into "\n" and, without keep_trailing_newline, drops one final
  // newline of the template.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t index = 0; index < source.size(); ++index) {
    if (source[index] == '\r') {
      normalized += '\n';
      if (index + 1 < source.size() && source[index + 1] == '\n') ++index;
    } else {
      normalized += source[index];
    }
  }
  if (!options.keep_trailing_newline && !normalized.empty() && normalized.back() == '\n') {
    normalized.pop_back();
  }
  return Lexer(std::move(normalized), options).Run();
}

}  // namespace llmrt::jinja
