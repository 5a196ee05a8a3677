#include "runtime/template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace llmrt::jinja {
namespace {

const Value::Items& EmptyItems() {
  static const Value::Items* const kEmpty = new Value::Items();
  return *kEmpty;
}

const Value::Entries& EmptyEntries() {
  static const Value::Entries* const kEmpty = new Value::Entries();
  return *kEmpty;
}

}  // namespace

Value Value::Undefined(std::string hint) {
  Value value;
  value.string_ = std::move(hint);
  return value;
}

Value Value::None() {
  Value value;
  value.kind_ = Kind::kNone;
  return value;
}

Value Value::Bool(bool flag) {
  Value value;
  value.kind_ = Kind::kBool;
  value.bool_ = flag;
  return value;
}

Value Value::Int(int64_t number) {
  Value value;
  value.kind_ = Kind::kInt;
  value.int_ = number;
  return value;
}

Value Value::Float(double number) {
  Value value;
  value.kind_ = Kind::kFloat;
  value.float_ = number;
  return value;
}

Value Value::String(std::string text) {
  Value value;
  value.kind_ = Kind::kString;
  value.string_ = std::move(text);
  return value;
}

Value Value::Markup(std::string text) {
  Value value = String(std::move(text));
  value.markup_ = true;
  return value;
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::List(Items items) {
  Value value;
  value.kind_ = Kind::kList;
  value.items_ = std::make_shared<Items>(std::move(items));
  return value;
}

Value Value::Tuple(Items items) {
  Value value = List(std::move(items));
  value.kind_ = Kind::kTuple;
  return value;
}

Value Value::NamedTuple(Items items, std::vector<std::string> field_names) {
  Value value = Tuple(std::move(items));
  value.field_names_ = std::make_shared<const std::vector<std::string>>(std::move(field_names));
  return value;
}

const Value* Value::Field(std::string_view name) const {
  if (!is_tuple() || field_names_ == nullptr) return nullptr;
  for (size_t index = 0; index < field_names_->size() && index < items().size(); ++index) {
    if ((*field_names_)[index] == name) return &items()[index];
  }
  return nullptr;
}

Value Value::Object(std::initializer_list<std::pair<std::string, Value>> entries) {
  Entries converted;
  converted.reserve(entries.size());
  for (const auto& [key, item] : entries) converted.emplace_back(String(key), item);
  return Dict(std::move(converted));
}

Value Value::Dict(Entries entries) {
  Value value;
  value.kind_ = Kind::kDict;
  // Later duplicates replace earlier ones but keep the first position, as a Python dict literal.
  Entries unique;
  unique.reserve(entries.size());
  for (auto& [key, item] : entries) {
    bool replaced = false;
    for (auto& [existing_key, existing_item] : unique) {
      if (existing_key.Equals(key)) {
        existing_item = std::move(item);
        replaced = true;
        break;
      }
    }
    if (!replaced) unique.emplace_back(std::move(key), std::move(item));
  }
  value.entries_ = std::make_shared<Entries>(std::move(unique));
  return value;
}

Value Value::Namespace(Entries entries) {
  Value value = Dict(std::move(entries));
  value.kind_ = Kind::kNamespace;
  return value;
}

Value Value::Callable(std::string name, Function function) {
  Value value;
  value.kind_ = Kind::kFunction;
  value.string_ = std::move(name);
  value.function_ = std::make_shared<Function>(std::move(function));
  return value;
}

const Value::Items& Value::items() const { return items_ ? *items_ : EmptyItems(); }

const Value::Entries& Value::entries() const { return entries_ ? *entries_ : EmptyEntries(); }

const Function& Value::function() const { return *function_; }

const Value* Value::Find(const Value& key) const {
  if (!entries_) return nullptr;
  for (const auto& [existing_key, item] : *entries_) {
    if (existing_key.Equals(key)) return &item;
  }
  return nullptr;
}

const Value* Value::Find(std::string_view key) const {
  if (!entries_) return nullptr;
  for (const auto& [existing_key, item] : *entries_) {
    if (existing_key.is_string() && existing_key.string_value() == key) return &item;
  }
  return nullptr;
}

void Value::SetAttribute(const std::string& name, Value value) const {
  if (!entries_) return;
  for (auto& [existing_key, item] : *entries_) {
    if (existing_key.is_string() && existing_key.string_value() == name) {
      item = std::move(value);
      return;
    }
  }
  entries_->emplace_back(String(name), std::move(value));
}

void Value::ClearAttributes() const {
  if (!entries_) return;
  // Destroyed after entries_ is empty, so a value that reaches this namespace again sees it empty.
  Entries dropped;
  dropped.swap(*entries_);
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !string_.empty();
    case Kind::kList:
    case Kind::kTuple:
      return !items().empty();
    case Kind::kDict:
      return !entries().empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form ("1.2345e+02"), then laid out as Python's repr:
  // positional when -4 <= exponent < 16, scientific otherwise, and always with a '.' or 'e'.
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  const size_t e_pos = scientific.find('e');
  std::string mantissa = scientific.substr(0, e_pos);
  const int exponent = std::stoi(scientific.substr(e_pos + 1));
  const bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exponent + 1) {
      out += digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  absl::StrAppendFormat(&out, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

std::string StringRepr(std::string_view text) {
  // Python prefers single quotes, and switches to double quotes when the text has a single quote
  // and no double quote.
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return string_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return absl::StrCat(int_);
    case Kind::kFloat:
      return FloatRepr(float_);
    case Kind::kString:
      return markup_ ? "Markup(" + StringRepr(string_) + ")" : StringRepr(string_);
    case Kind::kList:
    case Kind::kTuple: {
      std::string out = is_list() ? "[" : "(";
      for (size_t index = 0; index < items().size(); ++index) {
        if (index > 0) out += ", ";
        out += items()[index].Repr();
      }
      if (is_tuple() && items().size() == 1) out += ",";
      out += is_list() ? "]" : ")";
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : entries()) {
        if (!first) out += ", ";
        first = false;
        out += key.Repr() + ": " + item.Repr();
      }
      out += is_namespace() ? "}>" : "}";
      return out;
    }
    case Kind::kFunction:
      return "<function " + string_ + ">";
  }
  return "";
}

std::string_view Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return markup_ ? "Markup" : "str";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

bool Value::Equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return float_value() == other.float_value();
    return int_value() == other.int_value();
  }
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return string_ == other.string_;
    case Kind::kList:
    case Kind::kTuple: {
      if (items().size() != other.items().size()) return false;
      for (size_t index = 0; index < items().size(); ++index) {
        if (!items()[index].Equals(other.items()[index])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      // Python dict equality ignores order.
      if (entries().size() != other.entries().size()) return false;
      for (const auto& [key, item] : entries()) {
        const Value* found = other.Find(key);
        if (found == nullptr || !found->Equals(item)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
    case Kind::kFunction:
      return entries_ == other.entries_ && function_ == other.function_;
    default:
      return false;
  }
}

namespace {

// A code point of `text` at `index` (advanced past it); malformed bytes decode as themselves.
uint32_t NextCodePoint(std::string_view text, size_t& index) {
  const unsigned char lead = text[index];
  const int length = lead < 0x80       ? 1
                     : lead >> 5 == 6  ? 2
                     : lead >> 4 == 14 ? 3
                     : lead >> 3 == 30 ? 4
                                       : 1;
  if (length == 1 || index + length > text.size()) {
    ++index;
    return lead;
  }
  uint32_t point = lead & (0x7F >> length);
  for (int offset = 1; offset < length; ++offset) {
    point = (point << 6) | (static_cast<unsigned char>(text[index + offset]) & 0x3F);
  }
  index += length;
  return point;
}

void AppendJsonString(std::string_view text, bool ensure_ascii, std::string& out) {
  // json.dumps(ensure_ascii=False): only '"', '\\' and the C0 controls are escaped; everything
  // else, including non-ASCII and U+007F, is written as is. ensure_ascii=True also escapes
  // U+007F and everything above it.
  out += '"';
  for (size_t index = 0; index < text.size();) {
    const unsigned char c = text[index];
    if (ensure_ascii && c >= 0x7F) {
      const uint32_t point = NextCodePoint(text, index);
      if (point >= 0x10000) {
        const uint32_t offset = point - 0x10000;
        absl::StrAppendFormat(&out, "\\u%04x\\u%04x", 0xD800 + (offset >> 10),
                              0xDC00 + (offset & 0x3FF));
      } else {
        absl::StrAppendFormat(&out, "\\u%04x", point);
      }
      continue;
    }
    ++index;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string JsonFloat(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return FloatRepr(value);
}

absl::Status AppendJson(const Value& value, const JsonOptions& options, int depth,
                        std::string& out) {
  // 512 levels: deeper data is refused rather than risking the stack (Python would hit its own
  // recursion limit near 1000).
  if (depth > 512) return absl::InvalidArgumentError("tojson: nesting deeper than 512 levels");
  const std::string newline_indent = options.indent
                                         ? "\n" +
                                               [&] {
                                                 std::string indent;
                                                 for (int level = 0; level <= depth; ++level)
                                                   indent += *options.indent;
                                                 return indent;
                                               }()
                                         : "";
  const std::string closing_indent = options.indent
                                         ? "\n" +
                                               [&] {
                                                 std::string indent;
                                                 for (int level = 0; level < depth; ++level)
                                                   indent += *options.indent;
                                                 return indent;
                                               }()
                                         : "";
  const std::string item_separator = options.item_separator.value_or(options.indent ? "," : ", ");
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      out += value.bool_value() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(&out, value.int_value());
      return absl::OkStatus();
    case Value::Kind::kFloat:
      out += JsonFloat(value.float_value());
      return absl::OkStatus();
    case Value::Kind::kString:
      AppendJsonString(value.string_value(), options.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList:
    case Value::Kind::kTuple: {
      if (value.items().empty()) {
        out += "[]";
        return absl::OkStatus();
      }
      out += "[";
      for (size_t index = 0; index < value.items().size(); ++index) {
        if (index > 0) out += item_separator;
        out += newline_indent;
        if (absl::Status status = AppendJson(value.items()[index], options, depth + 1, out);
            !status.ok()) {
          return status;
        }
      }
      out += closing_indent + "]";
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      if (value.entries().empty()) {
        out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<Value, Value>*> ordered;
      for (const auto& entry : value.entries()) ordered.push_back(&entry);
      std::vector<std::string> keys;
      for (const auto* entry : ordered) {
        const Value& key = entry->first;
        // json.dumps converts the scalar keys Python allows and refuses the rest.
        switch (key.kind()) {
          case Value::Kind::kString:
            keys.push_back(key.string_value());
            break;
          case Value::Kind::kNone:
            keys.push_back("null");
            break;
          case Value::Kind::kBool:
            keys.push_back(key.bool_value() ? "true" : "false");
            break;
          case Value::Kind::kInt:
            keys.push_back(absl::StrCat(key.int_value()));
            break;
          case Value::Kind::kFloat:
            keys.push_back(JsonFloat(key.float_value()));
            break;
          default:
            return absl::InvalidArgumentError(absl::StrFormat(
                "TypeError: keys must be str, int, float, bool or None, not %s", key.TypeName()));
        }
      }
      std::vector<size_t> order(ordered.size());
      for (size_t index = 0; index < order.size(); ++index) order[index] = index;
      if (options.sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [&](size_t left, size_t right) { return keys[left] < keys[right]; });
      }
      out += "{";
      for (size_t position = 0; position < order.size(); ++position) {
        if (position > 0) out += item_separator;
        out += newline_indent;
        AppendJsonString(keys[order[position]], options.ensure_ascii, out);
        out += options.key_separator.value_or(": ");
        if (absl::Status status =
                AppendJson(ordered[order[position]]->second, options, depth + 1, out);
            !status.ok()) {
          return status;
        }
      }
      out += closing_indent + "}";
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "TypeError: Object of type %s is not JSON serializable", value.TypeName()));
  }
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& value, const JsonOptions& options) {
  std::string out;
  if (absl::Status status = AppendJson(value, options, 0, out); !status.ok()) return status;
  return out;
}

}  // namespace llmrt::jinja
