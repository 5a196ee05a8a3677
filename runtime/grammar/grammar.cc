#include "runtime/grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"
#include "runtime/grammar/code_ranges.h"

namespace llmrt::grammar {
namespace {

// Repetition bounds above this are refused: {m,n} unrolls into n - m nested helper rules, and
// 10,000 is far more than any schema's maxItems/maxLength a model will be asked to honour.
constexpr int64_t kMaxRepeat = 10000;

// The parsed form before lowering to elements.
struct Expr {
  enum class Type { kSequence, kAlternation, kLiteral, kClass, kReference, kRepeat, kToken };
  Type type = Type::kSequence;
  std::vector<std::unique_ptr<Expr>> children;  // sequence, alternation, repeat (one)
  std::string bytes;                            // literal
  CodeRanges ranges;                            // class (already negated if ^)
  std::string name;                             // reference
  int64_t min = 0, max = 0;                     // repeat; max -1: unbounded
  int32_t token = 0;                            // token
  size_t offset = 0;                            // in the text, for messages
};

CodeRanges WithoutSurrogates(const CodeRanges& ranges) {
  CodeRanges result;
  for (auto [low, high] : ranges) {
    if (high < 0xD800 || low > 0xDFFF) {
      result.emplace_back(low, high);
      continue;
    }
    if (low < 0xD800) result.emplace_back(low, 0xD7FF);
    if (high > 0xDFFF) result.emplace_back(0xE000, high);
  }
  return result;
}

int EncodeUtf8(uint32_t code, uint8_t* out) {
  if (code < 0x80) {
    out[0] = static_cast<uint8_t>(code);
    return 1;
  }
  if (code < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (code >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (code & 0x3F));
    return 2;
  }
  if (code < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (code >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((code >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (code & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (code >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((code >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((code >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (code & 0x3F));
  return 4;
}

using ByteRangeSequence = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [low, high] (no surrogates inside) into byte-range sequences whose concatenated
// languages are exactly the UTF-8 encodings of the range: first at the encoded-length
// boundaries, then wherever a trailing byte would not span its full 0x80-0xBF.
void SplitUtf8(uint32_t low, uint32_t high, std::vector<ByteRangeSequence>& out) {
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (low <= boundary && high > boundary) {
      SplitUtf8(low, boundary, out);
      SplitUtf8(boundary + 1, high, out);
      return;
    }
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t mask = (1u << (6 * i)) - 1;
    if ((low & ~mask) != (high & ~mask)) {
      if ((low & mask) != 0) {
        SplitUtf8(low, low | mask, out);
        SplitUtf8((low | mask) + 1, high, out);
        return;
      }
      if ((high & mask) != mask) {
        SplitUtf8(low, (high & ~mask) - 1, out);
        SplitUtf8(high & ~mask, high, out);
        return;
      }
    }
  }
  uint8_t low_bytes[4], high_bytes[4];
  const int length = EncodeUtf8(low, low_bytes);
  EncodeUtf8(high, high_bytes);
  ByteRangeSequence sequence;
  for (int i = 0; i < length; ++i) sequence.emplace_back(low_bytes[i], high_bytes[i]);
  out.push_back(std::move(sequence));
}

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::Status Parse(std::vector<std::pair<std::string, std::unique_ptr<Expr>>>& rules) {
    SkipSpace();
    while (pos_ < text_.size()) {
      const size_t start = pos_;
      std::string name = ReadName();
      if (name.empty()) return Error(start, "expected a rule name");
      SkipSpace();
      if (text_.substr(pos_, 3) != "::=") {
        return Error(pos_, absl::StrFormat("expected '::=' after rule name '%s'", name));
      }
      pos_ += 3;
      LLMRT_ASSIGN_OR_RETURN(std::unique_ptr<Expr> body, ParseAlternation(/*nested=*/false));
      rules.emplace_back(std::move(name), std::move(body));
      SkipSpace();
    }
    if (rules.empty()) return absl::InvalidArgumentError("grammar: the grammar has no rules");
    return absl::OkStatus();
  }

  std::string Where(size_t offset) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::StrFormat("line %d column %d", line, column);
  }

 private:
  absl::Status Error(size_t offset, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrFormat("grammar: %s: %s", Where(offset), message));
  }

  void SkipSpace() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        return;
      }
    }
  }

  std::string ReadName() {
    const size_t start = pos_;
    while (pos_ < text_.size() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether the text at pos_ starts the next rule (`name ::=`).
  bool AtRuleStart() {
    const size_t saved = pos_;
    const std::string name = ReadName();
    SkipSpace();
    const bool rule_start = !name.empty() && text_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return rule_start;
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseAlternation(bool nested) {
    auto alternation = std::make_unique<Expr>();
    alternation->type = Expr::Type::kAlternation;
    alternation->offset = pos_;
    while (true) {
      LLMRT_ASSIGN_OR_RETURN(std::unique_ptr<Expr> sequence, ParseSequence(nested));
      alternation->children.push_back(std::move(sequence));
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return alternation;
    }
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseSequence(bool nested) {
    auto sequence = std::make_unique<Expr>();
    sequence->type = Expr::Type::kSequence;
    sequence->offset = pos_;
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size()) return sequence;
      const char c = text_[pos_];
      if (c == '|' || (c == ')' && nested)) return sequence;
      if (!nested && IsNameChar(c) && AtRuleStart()) return sequence;
      LLMRT_ASSIGN_OR_RETURN(std::unique_ptr<Expr> item, ParseItem());
      LLMRT_ASSIGN_OR_RETURN(item, ParsePostfix(std::move(item)));
      sequence->children.push_back(std::move(item));
    }
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParseItem() {
    const size_t start = pos_;
    const char c = text_[pos_];
    auto item = std::make_unique<Expr>();
    item->offset = start;
    if (c == '"' || c == '\'') {
      ++pos_;
      item->type = Expr::Type::kLiteral;
      while (true) {
        if (pos_ >= text_.size()) return Error(start, "unterminated string literal");
        if (text_[pos_] == c) {
          ++pos_;
          break;
        }
        LLMRT_ASSIGN_OR_RETURN(uint32_t code, ReadChar());
        uint8_t bytes[4];
        item->bytes.append(reinterpret_cast<const char*>(bytes), EncodeUtf8(code, bytes));
      }
      return item;
    }
    if (c == '<' && text_.substr(pos_, 2) == "<[") {
      // <[ID]>: one whole token by id (llama.cpp's syntax), for special tokens that no byte
      // string spells.
      pos_ += 2;
      item->type = Expr::Type::kToken;
      const size_t digits = pos_;
      int64_t id = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9' && id <= INT32_MAX) {
        id = id * 10 + (text_[pos_++] - '0');
      }
      if (pos_ == digits || id > INT32_MAX || text_.substr(pos_, 2) != "]>") {
        return Error(start, "expected a token id and ']>' in '<[ID]>'");
      }
      pos_ += 2;
      item->token = static_cast<int32_t>(id);
      return item;
    }
    if (c == '[') {
      ++pos_;
      item->type = Expr::Type::kClass;
      bool negated = false;
      if (pos_ < text_.size() && text_[pos_] == '^') {
        negated = true;
        ++pos_;
      }
      CodeRanges ranges;
      while (true) {
        if (pos_ >= text_.size()) return Error(start, "unterminated character class");
        if (text_[pos_] == ']') {
          ++pos_;
          break;
        }
        LLMRT_ASSIGN_OR_RETURN(uint32_t low, ReadChar());
        uint32_t high = low;
        if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
          ++pos_;
          LLMRT_ASSIGN_OR_RETURN(high, ReadChar());
          if (high < low) {
            return Error(start,
                         absl::StrFormat("character range U+%04X-U+%04X is reversed", low, high));
          }
        }
        ranges.emplace_back(low, high);
      }
      item->ranges = negated ? ComplementRanges(ranges) : NormalizeRanges(ranges);
      return item;
    }
    if (c == '.') {
      ++pos_;
      item->type = Expr::Type::kClass;
      item->ranges = {{0, kMaxCodePoint}};
      return item;
    }
    if (c == '(') {
      ++pos_;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == '=') {
        return Error(start, "lookahead assertions '(= ...)' are not supported");
      }
      LLMRT_ASSIGN_OR_RETURN(item, ParseAlternation(/*nested=*/true));
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ')') return Error(start, "unclosed '('");
      ++pos_;
      return item;
    }
    if (IsNameChar(c)) {
      item->type = Expr::Type::kReference;
      item->name = ReadName();
      return item;
    }
    return Error(start, absl::StrFormat("unexpected character '%c'", c));
  }

  absl::StatusOr<std::unique_ptr<Expr>> ParsePostfix(std::unique_ptr<Expr> item) {
    while (pos_ < text_.size()) {
      const size_t start = pos_;
      const char c = text_[pos_];
      int64_t min = 0, max = -1;
      if (c == '*') {
        ++pos_;
      } else if (c == '+') {
        min = 1;
        ++pos_;
      } else if (c == '?') {
        max = 1;
        ++pos_;
      } else if (c == '{') {
        ++pos_;
        LLMRT_ASSIGN_OR_RETURN(min, ReadNumber(start));
        max = min;
        SkipSpace();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          SkipSpace();
          max = -1;
          if (pos_ < text_.size() && text_[pos_] != '}') {
            LLMRT_ASSIGN_OR_RETURN(max, ReadNumber(start));
          }
        }
        SkipSpace();
        if (pos_ >= text_.size() || text_[pos_] != '}') return Error(start, "expected '}'");
        ++pos_;
        if (max >= 0 && max < min) {
          return Error(start, absl::StrFormat("repetition {%d,%d} has max < min", min, max));
        }
        if (min > kMaxRepeat || max > kMaxRepeat) {
          return Error(start, absl::StrFormat("repetition bounds above %d", kMaxRepeat));
        }
      } else {
        return item;
      }
      auto repeat = std::make_unique<Expr>();
      repeat->type = Expr::Type::kRepeat;
      repeat->offset = start;
      repeat->min = min;
      repeat->max = max;
      repeat->children.push_back(std::move(item));
      item = std::move(repeat);
    }
    return item;
  }

  absl::StatusOr<int64_t> ReadNumber(size_t start) {
    SkipSpace();
    const size_t begin = pos_;
    int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      value = value * 10 + (text_[pos_++] - '0');
      if (value > kMaxRepeat)
        return Error(start, absl::StrFormat("repetition bounds above %d", kMaxRepeat));
    }
    if (pos_ == begin) return Error(start, "expected a number in '{...}'");
    return value;
  }

  // One code point of a literal or class: an escape or one UTF-8 character.
  absl::StatusOr<uint32_t> ReadChar() {
    const size_t start = pos_;
    const auto byte = static_cast<uint8_t>(text_[pos_]);
    if (byte == '\\') {
      if (pos_ + 1 >= text_.size()) return Error(start, "dangling '\\'");
      const char escape = text_[pos_ + 1];
      pos_ += 2;
      int digits = 0;
      switch (escape) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '0':
          return 0;
        case 'x':
          digits = 2;
          break;
        case 'u':
          digits = 4;
          break;
        case 'U':
          digits = 8;
          break;
        default:
          return static_cast<uint32_t>(static_cast<uint8_t>(escape));
      }
      uint32_t code = 0;
      for (int i = 0; i < digits; ++i) {
        if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
          return Error(start, absl::StrFormat("'\\%c' needs %d hex digits", escape, digits));
        }
        const char h = text_[pos_++];
        code = code * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      }
      if (code > kMaxCodePoint || (code >= 0xD800 && code <= 0xDFFF)) {
        return Error(start, absl::StrFormat("escape U+%X is not a Unicode scalar value", code));
      }
      return code;
    }
    int length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 0;
    if (length == 0 || pos_ + length > text_.size()) return Error(start, "invalid UTF-8");
    uint32_t code = length == 1 ? byte : byte & (0xFF >> (length + 1));
    for (int i = 1; i < length; ++i) {
      const auto next = static_cast<uint8_t>(text_[pos_ + i]);
      if ((next & 0xC0) != 0x80) return Error(start, "invalid UTF-8");
      code = code << 6 | (next & 0x3F);
    }
    pos_ += length;
    return code;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// Lowers parsed rules to the element array, adding helper rules for groups, classes and
// repetitions.
class Lowering {
 public:
  Lowering(Grammar& grammar, const Parser& parser) : grammar_(grammar), parser_(parser) {}

  absl::Status Declare(const std::vector<std::pair<std::string, std::unique_ptr<Expr>>>& rules) {
    for (const auto& [name, body] : rules) {
      if (rule_ids_.contains(name)) {
        return absl::InvalidArgumentError(absl::StrFormat("grammar: %s: rule '%s' is defined twice",
                                                          parser_.Where(body->offset), name));
      }
      rule_ids_[name] = NewRule(name);
    }
    return absl::OkStatus();
  }

  absl::Status Define(const std::string& name, const Expr& body) {
    std::vector<std::vector<Grammar::Element>> alternatives;
    LLMRT_RETURN_IF_ERROR(Alternatives(body, alternatives));
    pending_[rule_ids_[name]] = std::move(alternatives);
    return absl::OkStatus();
  }

  // Writes every rule's alternatives into grammar_.elements.
  void Emit() {
    for (size_t rule = 0; rule < grammar_.rules.size(); ++rule) {
      for (const auto& alternative : pending_[rule]) {
        grammar_.rules[rule].alternatives.push_back(static_cast<int32_t>(grammar_.elements.size()));
        grammar_.elements.insert(grammar_.elements.end(), alternative.begin(), alternative.end());
        grammar_.elements.push_back({Grammar::Kind::kEnd, 0});
      }
    }
  }

  const absl::flat_hash_map<std::string, int32_t>& rule_ids() const { return rule_ids_; }

 private:
  int32_t NewRule(std::string name) {
    grammar_.rules.push_back({std::move(name), {}});
    pending_.emplace_back();
    return static_cast<int32_t>(grammar_.rules.size() - 1);
  }

  int32_t HelperRule(std::vector<std::vector<Grammar::Element>> alternatives) {
    const int32_t rule = NewRule(absl::StrFormat("%s_%d", current_name_, helper_count_++));
    pending_[rule] = std::move(alternatives);
    return rule;
  }

  int32_t ByteSetIndex(const ByteSet& set) {
    for (size_t i = 0; i < grammar_.byte_sets.size(); ++i) {
      if (grammar_.byte_sets[i] == set) return static_cast<int32_t>(i);
    }
    grammar_.byte_sets.push_back(set);
    return static_cast<int32_t>(grammar_.byte_sets.size() - 1);
  }

  absl::Status Alternatives(const Expr& expr, std::vector<std::vector<Grammar::Element>>& out) {
    if (expr.type == Expr::Type::kAlternation) {
      for (const auto& child : expr.children) {
        std::vector<Grammar::Element> sequence;
        LLMRT_RETURN_IF_ERROR(Sequence(*child, sequence));
        out.push_back(std::move(sequence));
      }
      return absl::OkStatus();
    }
    std::vector<Grammar::Element> sequence;
    LLMRT_RETURN_IF_ERROR(Sequence(expr, sequence));
    out.push_back(std::move(sequence));
    return absl::OkStatus();
  }

  absl::Status Sequence(const Expr& expr, std::vector<Grammar::Element>& out) {
    switch (expr.type) {
      case Expr::Type::kSequence:
        for (const auto& child : expr.children) LLMRT_RETURN_IF_ERROR(Sequence(*child, out));
        return absl::OkStatus();
      case Expr::Type::kLiteral:
        for (char c : expr.bytes) {
          ByteSet set;
          set.Add(static_cast<uint8_t>(c));
          out.push_back({Grammar::Kind::kBytes, ByteSetIndex(set)});
        }
        return absl::OkStatus();
      case Expr::Type::kClass:
        return Class(expr.ranges, out);
      case Expr::Type::kReference: {
        auto found = rule_ids_.find(expr.name);
        if (found == rule_ids_.end()) {
          return absl::InvalidArgumentError(absl::StrFormat("grammar: %s: rule '%s' is not defined",
                                                            parser_.Where(expr.offset), expr.name));
        }
        out.push_back({Grammar::Kind::kRule, found->second});
        return absl::OkStatus();
      }
      case Expr::Type::kAlternation: {
        if (expr.children.size() == 1) return Sequence(*expr.children[0], out);
        std::vector<std::vector<Grammar::Element>> alternatives;
        LLMRT_RETURN_IF_ERROR(Alternatives(expr, alternatives));
        out.push_back({Grammar::Kind::kRule, HelperRule(std::move(alternatives))});
        return absl::OkStatus();
      }
      case Expr::Type::kRepeat:
        return Repeat(expr, out);
      case Expr::Type::kToken:
        out.push_back({Grammar::Kind::kToken, expr.token});
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::Status Class(const CodeRanges& code_ranges, std::vector<Grammar::Element>& out) {
    const CodeRanges ranges = WithoutSurrogates(code_ranges);
    if (ranges.empty()) {
      return absl::InvalidArgumentError("grammar: a character class matches nothing");
    }
    std::vector<ByteRangeSequence> sequences;
    for (auto [low, high] : ranges) SplitUtf8(low, high, sequences);
    // Single-byte sequences share one byte set; longer ones each become an alternative.
    ByteSet single;
    bool has_single = false;
    std::vector<std::vector<Grammar::Element>> alternatives;
    for (const ByteRangeSequence& sequence : sequences) {
      if (sequence.size() == 1) {
        single.AddRange(sequence[0].first, sequence[0].second);
        has_single = true;
        continue;
      }
      std::vector<Grammar::Element> alternative;
      for (auto [low, high] : sequence) {
        ByteSet set;
        set.AddRange(low, high);
        alternative.push_back({Grammar::Kind::kBytes, ByteSetIndex(set)});
      }
      alternatives.push_back(std::move(alternative));
    }
    if (has_single) {
      const Grammar::Element element{Grammar::Kind::kBytes, ByteSetIndex(single)};
      if (alternatives.empty()) {
        out.push_back(element);
        return absl::OkStatus();
      }
      alternatives.insert(alternatives.begin(), std::vector<Grammar::Element>{element});
    }
    auto cached = class_rules_.find(alternatives);
    if (cached == class_rules_.end()) {
      std::vector<std::vector<Grammar::Element>> key = alternatives;
      cached = class_rules_.emplace(std::move(key), HelperRule(std::move(alternatives))).first;
    }
    out.push_back({Grammar::Kind::kRule, cached->second});
    return absl::OkStatus();
  }

  absl::Status Repeat(const Expr& expr, std::vector<Grammar::Element>& out) {
    // The repeated item as one element (a helper rule unless it already is one element).
    std::vector<Grammar::Element> item;
    LLMRT_RETURN_IF_ERROR(Sequence(*expr.children[0], item));
    if (item.size() != 1) {
      item = {{Grammar::Kind::kRule, HelperRule({item})}};
    }
    for (int64_t i = 0; i < expr.min; ++i) out.push_back(item[0]);
    if (expr.max < 0) {
      // r ::= item r | ""
      const int32_t loop = NewRule(absl::StrFormat("%s_%d", current_name_, helper_count_++));
      pending_[loop] = {{item[0], {Grammar::Kind::kRule, loop}}, {}};
      out.push_back({Grammar::Kind::kRule, loop});
    } else if (expr.max > expr.min) {
      // o_1 ::= item | "";  o_k ::= item o_(k-1) | ""
      int32_t previous = HelperRule({{item[0]}, {}});
      for (int64_t k = 2; k <= expr.max - expr.min; ++k) {
        previous = HelperRule({{item[0], {Grammar::Kind::kRule, previous}}, {}});
      }
      out.push_back({Grammar::Kind::kRule, previous});
    }
    return absl::OkStatus();
  }

 public:
  void set_current(const std::string& name) {
    current_name_ = name;
    helper_count_ = 1;
  }

 private:
  struct ElementsHash {
    size_t operator()(const std::vector<std::vector<Grammar::Element>>& value) const {
      size_t hash = value.size();
      for (const auto& alternative : value) {
        for (const Grammar::Element& element : alternative) {
          hash = hash * 1000003u ^
                 (static_cast<size_t>(element.kind) << 28 ^ static_cast<size_t>(element.value));
        }
        hash = hash * 31u + 7u;
      }
      return hash;
    }
  };
  struct ElementsEqual {
    bool operator()(const std::vector<std::vector<Grammar::Element>>& a,
                    const std::vector<std::vector<Grammar::Element>>& b) const {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].size() != b[i].size()) return false;
        for (size_t j = 0; j < a[i].size(); ++j) {
          if (a[i][j].kind != b[i][j].kind || a[i][j].value != b[i][j].value) return false;
        }
      }
      return true;
    }
  };

  Grammar& grammar_;
  const Parser& parser_;
  absl::flat_hash_map<std::string, int32_t> rule_ids_;
  std::vector<std::vector<std::vector<Grammar::Element>>> pending_;
  absl::flat_hash_map<std::vector<std::vector<Grammar::Element>>, int32_t, ElementsHash,
                      ElementsEqual>
      class_rules_;
  std::string current_name_;
  int helper_count_ = 1;
};

// InvalidArgument naming a rule that can reach itself without consuming a byte.
absl::Status CheckLeftRecursion(const Grammar& grammar) {
  const size_t num_rules = grammar.rules.size();
  std::vector<bool> nullable(num_rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t rule = 0; rule < num_rules; ++rule) {
      if (nullable[rule]) continue;
      for (int32_t position : grammar.rules[rule].alternatives) {
        bool all_nullable = true;
        for (int32_t p = position; grammar.elements[p].kind != Grammar::Kind::kEnd; ++p) {
          const Grammar::Element& element = grammar.elements[p];
          if (element.kind != Grammar::Kind::kRule || !nullable[element.value]) {
            all_nullable = false;
            break;
          }
        }
        if (all_nullable) {
          nullable[rule] = true;
          changed = true;
          break;
        }
      }
    }
  }
  // Rules reachable at the left edge of each rule.
  std::vector<std::vector<int32_t>> left_edges(num_rules);
  for (size_t rule = 0; rule < num_rules; ++rule) {
    for (int32_t position : grammar.rules[rule].alternatives) {
      for (int32_t p = position; grammar.elements[p].kind == Grammar::Kind::kRule; ++p) {
        left_edges[rule].push_back(grammar.elements[p].value);
        if (!nullable[grammar.elements[p].value]) break;
      }
    }
  }
  // 0 unvisited, 1 on the DFS path, 2 done.
  std::vector<int> color(num_rules, 0);
  std::function<int32_t(int32_t)> visit = [&](int32_t rule) -> int32_t {
    color[rule] = 1;
    for (int32_t next : left_edges[rule]) {
      if (color[next] == 1) return next;
      if (color[next] == 0) {
        if (int32_t found = visit(next); found >= 0) return found;
      }
    }
    color[rule] = 2;
    return -1;
  };
  for (size_t rule = 0; rule < num_rules; ++rule) {
    if (color[rule] != 0) continue;
    if (int32_t found = visit(static_cast<int32_t>(rule)); found >= 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "grammar: rule '%s' is left-recursive (it can reach itself before matching any "
          "character); rewrite it with repetition, e.g. a ::= b (\"x\" b)*",
          grammar.rules[found].name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Grammar> ParseGrammar(std::string_view text, std::string_view root_rule) {
  Parser parser(text);
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> rules;
  LLMRT_RETURN_IF_ERROR(parser.Parse(rules));
  Grammar grammar;
  Lowering lowering(grammar, parser);
  LLMRT_RETURN_IF_ERROR(lowering.Declare(rules));
  for (const auto& [name, body] : rules) {
    lowering.set_current(name);
    LLMRT_RETURN_IF_ERROR(lowering.Define(name, *body));
  }
  lowering.Emit();
  auto root = lowering.rule_ids().find(std::string(root_rule));
  if (root == lowering.rule_ids().end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar: no rule named '%s' (the start rule)", root_rule));
  }
  grammar.root = root->second;
  LLMRT_RETURN_IF_ERROR(CheckLeftRecursion(grammar));
  return grammar;
}

std::string GbnfLiteral(std::string_view text) {
  std::string literal = "\"";
  for (char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      literal += '\\';
      literal += c;
    } else if (byte < 0x20 || byte == 0x7F) {
      literal += absl::StrFormat("\\x%02X", byte);
    } else {
      literal += c;
    }
  }
  literal += '"';
  return literal;
}

}  // namespace llmrt::grammar
