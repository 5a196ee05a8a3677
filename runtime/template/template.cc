#include "runtime/template/template.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/base/status_macros.h"
#include "runtime/template/lexer.h"
#include "runtime/template/parser.h"

namespace llmrt::jinja {
namespace {

constexpr char kBodyPlaceholder[] = " body";

// ---- UTF-8 helpers: Python strings index by code point. ----

std::vector<std::string> CodePoints(const std::string& text) {
  std::vector<std::string> out;
  for (size_t index = 0; index < text.size();) {
    const unsigned char lead = text[index];
    size_t length = lead < 0x80       ? 1
                    : lead >> 5 == 6  ? 2
                    : lead >> 4 == 14 ? 3
                    : lead >> 3 == 30 ? 4
                                      : 1;
    length = std::min(length, text.size() - index);
    out.push_back(text.substr(index, length));
    index += length;
  }
  return out;
}

int64_t CodePointCount(const std::string& text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

// Python's str.isspace() code points that appear in practice: ASCII whitespace, the separators
// U+001C..U+001F, U+0085, U+00A0 and the Unicode spaces.
bool IsPythonSpace(const std::string& code_point) {
  if (code_point.size() == 1) {
    const unsigned char c = code_point[0];
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  }
  static const char* const kSpaces[] = {"\u0085", "\u00a0", "\u1680", "\u2000", "\u2001",
                                        "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                        "\u2007", "\u2008", "\u2009", "\u200a", "\u2028",
                                        "\u2029", "\u202f", "\u205f", "\u3000"};
  for (const char* space : kSpaces) {
    if (code_point == space) return true;
  }
  return false;
}

std::string Strip(const std::string& text, const std::optional<std::string>& chars, bool left,
                  bool right) {
  const std::vector<std::string> points = CodePoints(text);
  std::vector<std::string> strip_set;
  if (chars) strip_set = CodePoints(*chars);
  auto strippable = [&](const std::string& point) {
    if (!chars) return IsPythonSpace(point);
    return std::find(strip_set.begin(), strip_set.end(), point) != strip_set.end();
  };
  size_t begin = 0, end = points.size();
  if (left) {
    while (begin < end && strippable(points[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(points[end - 1])) --end;
  }
  std::string out;
  for (size_t index = begin; index < end; ++index) out += points[index];
  return out;
}

// ASCII case mapping; non-ASCII letters pass through unchanged (see the report's limits).
std::string AsciiUpper(std::string text) {
  for (char& c : text) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return text;
}
std::string AsciiLower(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsCased(unsigned char c) { return IsAsciiAlpha(static_cast<char>(c)) || c >= 0x80; }

// Python's str.title(): a letter after a cased letter is lowered, otherwise uppered.
std::string PythonTitle(const std::string& text) {
  std::string out = text;
  bool previous_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = previous_cased ? AsciiLower(std::string(1, c))[0] : AsciiUpper(std::string(1, c))[0];
      previous_cased = true;
    } else {
      previous_cased = static_cast<unsigned char>(c) >= 0x80 ? previous_cased : false;
      if (static_cast<unsigned char>(c) >= 0x80) previous_cased = IsCased(c);
    }
  }
  return out;
}

// jinja2's title filter: split at runs of "-", whitespace, "(", "{", "[", "<"; each word gets an
// upper first character and lower rest.
std::string JinjaTitle(const std::string& text) {
  std::string out;
  bool word_start = true;
  for (char c : text) {
    const bool separator = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                           c == '\v' || c == '\f' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      out += c;
      word_start = true;
    } else if (word_start) {
      out += AsciiUpper(std::string(1, c));
      word_start =
          static_cast<unsigned char>(c) >= 0x80 && (static_cast<unsigned char>(c) & 0xC0) != 0xC0
              ? word_start
              : false;
    } else {
      out += AsciiLower(std::string(1, c));
    }
  }
  return out;
}

std::string Capitalize(const std::string& text) {
  if (text.empty()) return text;
  return AsciiUpper(text.substr(0, 1)) + AsciiLower(text.substr(1));
}

// What a str contributes to Markup: itself when already Markup, else HTML-escaped (markupsafe).
std::string MarkupText(const Value& value) {
  return value.is_markup() ? value.string_value() : HtmlEscape(value.Str());
}

// `text` as Markup when `original` is Markup: Markup's own methods return Markup.
Value SameStringKind(const Value& original, std::string text) {
  return original.is_markup() ? Value::Markup(std::move(text)) : Value::String(std::move(text));
}

// jinja2's builtin filters and tests plus transformers' tojson: what `is filter` / `is test`
// answer. The ones without an implementation here are in kUnsupportedFilters.
constexpr const char* kFilterNames[] = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
constexpr const char* kUnsupportedFilters[] = {"filesizeformat", "pprint", "random",   "striptags",
                                               "urlencode",      "urlize", "wordwrap", "xmlattr"};
constexpr const char* kTestNames[] = {
    "!=",       "<",        "<=",          "==",       ">",           ">=",       "boolean",
    "callable", "defined",  "divisibleby", "eq",       "equalto",     "escaped",  "even",
    "false",    "filter",   "float",       "ge",       "greaterthan", "gt",       "in",
    "integer",  "iterable", "le",          "lessthan", "lower",       "lt",       "mapping",
    "ne",       "none",     "number",      "odd",      "sameas",      "sequence", "string",
    "test",     "true",     "undefined",   "upper"};

template <size_t N>
bool IsOneOf(const char* const (&names)[N], std::string_view name) {
  for (const char* candidate : names) {
    if (name == candidate) return true;
  }
  return false;
}
bool IsFilterName(std::string_view name) { return IsOneOf(kFilterNames, name); }
bool IsTestName(std::string_view name) { return IsOneOf(kTestNames, name); }

std::string PythonReplace(const std::string& text, const std::string& old_text,
                          const std::string& new_text, int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` between every code point and at both ends.
    const std::vector<std::string> points = CodePoints(text);
    int64_t done = 0;
    for (const std::string& point : points) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      out += point;
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t position = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = text.find(old_text, position);
    if (found == std::string::npos) break;
    out.append(text, position, found - position);
    out += new_text;
    position = found + old_text.size();
    ++done;
  }
  out.append(text, position, std::string::npos);
  return out;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string current;
  for (size_t index = 0; index < text.size(); ++index) {
    const char c = text[index];
    if (c == '\n' || c == '\r') {
      lines.push_back(current);
      current.clear();
      if (c == '\r' && index + 1 < text.size() && text[index + 1] == '\n') ++index;
    } else {
      current += c;
    }
  }
  if (!current.empty()) lines.push_back(current);
  return lines;
}

// Python's floor division and modulo on int64.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t quotient = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --quotient;
  return quotient;
}
int64_t FloorMod(int64_t a, int64_t b) {
  int64_t remainder = a % b;
  if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
  return remainder;
}

std::string ObjectTypeRepr(const Value& value) {
  if (value.is_none()) return "None";
  return std::string(value.TypeName()) + " object";
}

Value MissingAttribute(const Value& object, const std::string& name) {
  return Value::Undefined(
      absl::StrFormat("'%s' has no attribute '%s'", ObjectTypeRepr(object), name));
}
Value MissingElement(const Value& object, const Value& key) {
  return Value::Undefined(
      absl::StrFormat("%s has no element %s", ObjectTypeRepr(object), key.Repr()));
}

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError("TypeError: " + std::string(message));
}
absl::Status UndefinedError(const Value& undefined) {
  return absl::InvalidArgumentError(absl::StrCat("UndefinedError: ", undefined.undefined_hint()));
}

// Looks up a call argument by position or keyword; `fallback` when absent.
const Value* Argument(const CallArguments& arguments, size_t position, std::string_view name) {
  for (const auto& [key, value] : arguments.keyword) {
    if (key == name) return &value;
  }
  if (position < arguments.positional.size()) return &arguments.positional[position];
  return nullptr;
}

// Python's str.center(width, fill): the extra fill goes right when the padding is odd, except
// that an odd width with an odd length puts it left (CPython: left = pad / 2 + (pad & width & 1)).
std::string Center(const std::string& text, int64_t width, const std::string& fill) {
  const int64_t length = CodePointCount(text);
  if (width <= length) return text;
  const int64_t pad = width - length;
  const int64_t left = pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t index = 0; index < left; ++index) out += fill;
  out += text;
  for (int64_t index = 0; index < pad - left; ++index) out += fill;
  return out;
}

std::string PadTo(const std::string& text, int64_t width, const std::string& fill, bool left) {
  std::string padding;
  for (int64_t index = CodePointCount(text); index < width; ++index) padding += fill;
  return left ? padding + text : text + padding;
}

// Python's printf-style `format % values` (the `format` filter and the `%` operator): conversions
// s r d i u f F e E g G x X o c and %%, with a mapping key, flags "-+ 0#", width and precision.
// `into_markup`: the format is Markup, whose % escapes what %s and %r insert (markupsafe).
absl::StatusOr<std::string> PrintfFormat(const std::string& format, const Value& values,
                                         bool into_markup) {
  const bool by_name = values.is_dict();
  std::vector<Value> positional;
  if (values.is_tuple()) {
    positional = values.items();
  } else if (!by_name) {
    positional.push_back(values);
  }
  size_t next = 0;
  std::string out;
  for (size_t index = 0; index < format.size(); ++index) {
    if (format[index] != '%') {
      out += format[index];
      continue;
    }
    if (++index >= format.size())
      return absl::InvalidArgumentError("ValueError: incomplete format");
    const Value* argument = nullptr;
    if (format[index] == '(') {
      const size_t close = format.find(')', index);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError("ValueError: incomplete format key");
      }
      if (!by_name) return TypeError("format requires a mapping");
      argument = values.Find(format.substr(index + 1, close - index - 1));
      if (argument == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("KeyError: ", StringRepr(format.substr(index + 1, close - index - 1))));
      }
      index = close + 1;
    }
    std::string flags;
    while (index < format.size() &&
           std::string_view("-+ 0#").find(format[index]) != std::string::npos) {
      flags += format[index++];
    }
    std::string width, precision;
    while (index < format.size() && std::isdigit(static_cast<unsigned char>(format[index]))) {
      width += format[index++];
    }
    bool has_precision = false;
    if (index < format.size() && format[index] == '.') {
      has_precision = true;
      ++index;
      while (index < format.size() && std::isdigit(static_cast<unsigned char>(format[index]))) {
        precision += format[index++];
      }
    }
    if (index >= format.size()) return absl::InvalidArgumentError("ValueError: incomplete format");
    const char conversion = format[index];
    if (conversion == '%') {
      out += '%';
      continue;
    }
    if (argument == nullptr) {
      if (by_name) return TypeError("format requires a mapping");
      if (next >= positional.size()) return TypeError("not enough arguments for format string");
      argument = &positional[next++];
    }
    const int64_t width_value = width.empty() ? 0 : std::stoll(width.substr(0, 6));
    const bool left = flags.find('-') != std::string::npos;
    if (conversion == 's' || conversion == 'r' || conversion == 'a' || conversion == 'c') {
      std::string text = conversion == 's'   ? argument->Str()
                         : conversion == 'c' ? argument->Str().substr(0, 4)
                                             : argument->Repr();
      if (into_markup && conversion == 's') text = MarkupText(*argument);
      if (into_markup && conversion != 's') text = HtmlEscape(text);
      if (has_precision) {
        const std::vector<std::string> points = CodePoints(text);
        const size_t keep =
            std::min<size_t>(points.size(), std::stoul("0" + precision.substr(0, 6)));
        text.clear();
        for (size_t point = 0; point < keep; ++point) text += points[point];
      }
      out += PadTo(text, width_value, " ", !left);
      continue;
    }
    if (std::string_view("diufFeEgGxXo").find(conversion) == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ValueError: unsupported format character '%c'", conversion));
    }
    if (!argument->is_number()) {
      return TypeError(absl::StrFormat("%%%c format: a real number is required, not %s", conversion,
                                       argument->TypeName()));
    }
    // Width and precision up to 999 keep every result inside the buffer below (a double prints
    // at most 309 integer digits).
    const std::string spec = "%" + flags + width.substr(0, 3) +
                             (has_precision ? "." + precision.substr(0, 3) : std::string());
    const bool integral = std::string_view("diuxXo").find(conversion) != std::string_view::npos;
    // The spec is built from digits and flags only, so snprintf cannot read past its argument.
    char buffer[2048];
    if (integral) {
      long long number = argument->is_float() ? static_cast<long long>(argument->float_value())
                                              : static_cast<long long>(argument->int_value());
      const char c_conversion = conversion == 'i' || conversion == 'u' ? 'd' : conversion;
      std::string sign;
      if (c_conversion != 'd' && number < 0) {
        // Python prints a sign and the magnitude; C would print the two's complement.
        sign = "-";
        number = -number;
      }
      std::snprintf(buffer, sizeof(buffer), (spec + "ll" + c_conversion).c_str(), number);
      out += sign + buffer;
    } else {
      std::snprintf(buffer, sizeof(buffer), (spec + conversion).c_str(), argument->float_value());
      out += buffer;
    }
  }
  if (!by_name && next < positional.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

// Python's str.format for the forms templates use: {} {0} {name} and {{ }}; a format spec or
// conversion ({:>8}, {!r}) is not supported.
absl::StatusOr<std::string> BraceFormat(const std::string& format, const CallArguments& arguments) {
  std::string out;
  size_t automatic = 0;
  for (size_t index = 0; index < format.size(); ++index) {
    const char c = format[index];
    if (c == '}') {
      if (index + 1 < format.size() && format[index + 1] == '}') {
        out += '}';
        ++index;
        continue;
      }
      return absl::InvalidArgumentError("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (index + 1 < format.size() && format[index + 1] == '{') {
      out += '{';
      ++index;
      continue;
    }
    const size_t close = format.find('}', index);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("ValueError: Single '{' encountered in format string");
    }
    const std::string field = format.substr(index + 1, close - index - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return absl::Status(kTemplateUnsupportedCode,
                          absl::StrCat("str.format: the field {", field,
                                       "} (a format spec, conversion, attribute or index) is not "
                                       "supported by this interpreter"));
    }
    const Value* value = nullptr;
    size_t position;
    if (field.empty()) {
      position = automatic++;
      if (position >= arguments.positional.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "IndexError: Replacement index %d out of range for positional args tuple", position));
      }
      value = &arguments.positional[position];
    } else if (absl::SimpleAtoi(field, &position)) {
      if (position >= arguments.positional.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "IndexError: Replacement index %d out of range for positional args tuple", position));
      }
      value = &arguments.positional[position];
    } else {
      for (const auto& [key, keyword_value] : arguments.keyword) {
        if (key == field) value = &keyword_value;
      }
      if (value == nullptr) return absl::InvalidArgumentError("KeyError: " + StringRepr(field));
    }
    out += value->Str();
    index = close;
  }
  return out;
}

// jinja2's truncate filter.
std::string Truncate(const std::string& text, int64_t length, bool kill_words,
                     const std::string& end, int64_t leeway) {
  const std::vector<std::string> points = CodePoints(text);
  if (static_cast<int64_t>(points.size()) <= length + leeway) return text;
  const int64_t keep =
      std::clamp<int64_t>(length - CodePointCount(end), 0, static_cast<int64_t>(points.size()));
  std::string head;
  for (int64_t index = 0; index < keep; ++index) head += points[index];
  if (kill_words) return head + end;
  const size_t space = head.rfind(' ');
  if (space != std::string::npos) head.resize(space);
  return head + end;
}

// jinja2's wordcount: the number of \w+ runs (Unicode letters and digits count as word
// characters; every non-ASCII byte is taken as part of a word).
int64_t WordCount(const std::string& text) {
  int64_t count = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    const bool word = std::isalnum(c) || c == '_' || c >= 0x80;
    if (word && !in_word) ++count;
    in_word = word;
  }
  return count;
}

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> variables;

  const Value* Find(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent.get()) {
      for (const auto& [key, value] : scope->variables) {
        if (key == name) return &value;
      }
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) {
    for (auto& [key, existing] : variables) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// Lifetimes: a macro must see the scope it was defined in for as long as it can be called, also
// after that scope's block ended (a macro defined in a loop and kept in a namespace, a `caller`
// handed on). The macro is stored in that very scope, so a shared_ptr from the macro to its scope
// would be a cycle that outlives the render (it leaked a few kB per render of every template that
// defines a macro). Instead the Renderer owns the defining scopes (`macro_scopes_`) and a macro
// holds only an index into them; they are released with the Renderer when the render returns.
// Namespaces are the one mutable value and can hold themselves (`set ns.me = ns`); the Renderer
// clears every namespace the render created when it ends. Nothing a render creates can outlive
// it: Render returns a string, and a template cannot change the values it was given.
class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {}
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  ~Renderer() {
    for (const Value& created : namespaces_) created.ClearAttributes();
  }

  absl::StatusOr<std::string> Run(const Body& body, const Value& variables) {
    if (!variables.is_dict()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("template variables must be a dict, got %s", variables.TypeName()));
    }
    auto globals = std::make_shared<Scope>();
    InstallGlobals(*globals);
    for (const auto& [key, value] : variables.entries()) {
      if (!key.is_string())
        return absl::InvalidArgumentError("template variable names must be strings");
      globals->Set(key.string_value(), value);
    }
    auto scope = std::make_shared<Scope>();
    scope->parent = globals;
    std::string out;
    LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(body, scope, out));
    (void)flow;
    return out;
  }

 private:
  // ---- Output ----

  absl::Status Append(std::string& out, std::string_view text) {
    if (static_cast<int64_t>(out.size() + text.size()) > options_.limits.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "template output exceeds max_output_bytes (%d)", options_.limits.max_output_bytes));
    }
    out.append(text);
    return absl::OkStatus();
  }

  absl::Status CheckSize(size_t bytes) const {
    if (static_cast<int64_t>(bytes) > options_.limits.max_output_bytes) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "a template string exceeds max_output_bytes (%d)", options_.limits.max_output_bytes));
    }
    return absl::OkStatus();
  }

  absl::Status CountIterations(int64_t count) {
    loop_iterations_ += count;
    if (loop_iterations_ > options_.limits.max_loop_iterations) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "template loops exceed max_loop_iterations (%d)", options_.limits.max_loop_iterations));
    }
    return absl::OkStatus();
  }

  static absl::Status AtLine(absl::Status status, int line) {
    if (status.ok() || (status.code() != absl::StatusCode::kInvalidArgument &&
                        status.code() != kTemplateUnsupportedCode)) {
      return status;
    }
    if (absl::StartsWith(status.message(), "template line")) return status;
    return absl::Status(status.code(),
                        absl::StrFormat("template line %d: %s", line, status.message()));
  }

  // ---- Statements ----

  absl::StatusOr<Flow> RenderBody(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StatementPtr& statement : body) {
      absl::StatusOr<Flow> flow = RenderStatement(*statement, scope, out);
      if (!flow.ok()) return AtLine(flow.status(), statement->line);
      if (*flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Flow> RenderStatement(const Statement& statement, const ScopePtr& scope,
                                       std::string& out) {
    switch (statement.kind) {
      case Statement::Kind::kData:
        LLMRT_RETURN_IF_ERROR(Append(out, statement.text));
        return Flow::kNormal;
      case Statement::Kind::kOutput: {
        LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*statement.expression, scope));
        LLMRT_RETURN_IF_ERROR(Append(out, value.Str()));
        return Flow::kNormal;
      }
      case Statement::Kind::kIf:
        for (size_t index = 0; index < statement.bodies.size(); ++index) {
          if (index < statement.conditions.size()) {
            LLMRT_ASSIGN_OR_RETURN(Value condition, Evaluate(*statement.conditions[index], scope));
            if (!condition.Truthy()) continue;
          }
          return RenderBody(statement.bodies[index], scope, out);
        }
        return Flow::kNormal;
      case Statement::Kind::kFor:
        return RenderFor(statement, scope, out);
      case Statement::Kind::kSet: {
        LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*statement.expression, scope));
        LLMRT_RETURN_IF_ERROR(Assign(statement, value, scope));
        return Flow::kNormal;
      }
      case Statement::Kind::kSetBlock: {
        std::string captured;
        LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(statement.body, scope, captured));
        (void)flow;
        Value value = Value::String(std::move(captured));
        if (statement.expression) {
          LLMRT_ASSIGN_OR_RETURN(value, ApplyPlaceholderChain(*statement.expression, value, scope));
        }
        scope->Set(statement.targets[0], std::move(value));
        return Flow::kNormal;
      }
      case Statement::Kind::kMacro:
        scope->Set(statement.name, MakeMacro(statement, scope, statement.name));
        return Flow::kNormal;
      case Statement::Kind::kCallBlock: {
        const Expression& call = *statement.expression;
        Value caller = MakeMacro(statement, scope, "caller");
        LLMRT_ASSIGN_OR_RETURN(Value callee, Evaluate(*call.operands[0], scope));
        LLMRT_ASSIGN_OR_RETURN(CallArguments arguments, EvaluateArguments(call, scope));
        arguments.keyword.emplace_back("caller", caller);
        LLMRT_ASSIGN_OR_RETURN(Value result, Call(callee, arguments));
        LLMRT_RETURN_IF_ERROR(Append(out, result.Str()));
        return Flow::kNormal;
      }
      case Statement::Kind::kFilterBlock: {
        std::string captured;
        LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(statement.body, scope, captured));
        (void)flow;
        LLMRT_ASSIGN_OR_RETURN(Value value,
                               ApplyPlaceholderChain(*statement.expression,
                                                     Value::String(std::move(captured)), scope));
        LLMRT_RETURN_IF_ERROR(Append(out, value.Str()));
        return Flow::kNormal;
      }
      case Statement::Kind::kBreak:
        return Flow::kBreak;
      case Statement::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  absl::StatusOr<Value> ApplyPlaceholderChain(const Expression& chain, Value value,
                                              const ScopePtr& scope) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    inner->Set(kBodyPlaceholder, std::move(value));
    return Evaluate(chain, inner);
  }

  absl::Status Unpack(const std::vector<std::string>& targets, const Value& value,
                      const ScopePtr& scope) {
    if (targets.size() == 1) {
      scope->Set(targets[0], value);
      return absl::OkStatus();
    }
    LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
    if (items.size() != targets.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "ValueError: cannot unpack %d values into %d names", items.size(), targets.size()));
    }
    for (size_t index = 0; index < targets.size(); ++index)
      scope->Set(targets[index], items[index]);
    return absl::OkStatus();
  }

  absl::Status Assign(const Statement& statement, const Value& value, const ScopePtr& scope) {
    if (statement.attribute.empty()) return Unpack(statement.targets, value, scope);
    const Value* target = scope->Find(statement.targets[0]);
    if (target == nullptr || !target->is_namespace()) {
      return absl::InvalidArgumentError(
          "TemplateRuntimeError: cannot assign attribute on non-namespace object");
    }
    if (!statement.attribute.empty() && statement.attribute[0] == '_') {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
          "namespace, but got '%s'. Please rename the attribute.",
          statement.attribute));
    }
    target->SetAttribute(statement.attribute, value);
    return absl::OkStatus();
  }

  absl::StatusOr<Flow> RenderFor(const Statement& statement, const ScopePtr& scope,
                                 std::string& out) {
    LLMRT_ASSIGN_OR_RETURN(Value iterable, Evaluate(*statement.expression, scope));
    LLMRT_ASSIGN_OR_RETURN(std::vector<Value> all_items, Iterate(iterable));
    std::vector<Value> items;
    if (statement.condition) {
      for (Value& item : all_items) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        LLMRT_RETURN_IF_ERROR(Unpack(statement.targets, item, probe));
        LLMRT_ASSIGN_OR_RETURN(Value keep, Evaluate(*statement.condition, probe));
        if (keep.Truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all_items);
    }
    if (items.empty()) {
      if (statement.else_body.empty()) return Flow::kNormal;
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(statement.else_body, inner, out));
      (void)flow;
      return Flow::kNormal;
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t index = 0; index < length; ++index) {
      LLMRT_RETURN_IF_ERROR(CountIterations(1));
      auto inner = std::make_shared<Scope>();
      inner->parent = scope;
      LLMRT_RETURN_IF_ERROR(Unpack(statement.targets, items[index], inner));
      Value::Entries loop = {
          {Value::String("index"), Value::Int(index + 1)},
          {Value::String("index0"), Value::Int(index)},
          {Value::String("revindex"), Value::Int(length - index)},
          {Value::String("revindex0"), Value::Int(length - index - 1)},
          {Value::String("first"), Value::Bool(index == 0)},
          {Value::String("last"), Value::Bool(index == length - 1)},
          {Value::String("length"), Value::Int(length)},
          {Value::String("depth"), Value::Int(1)},
          {Value::String("depth0"), Value::Int(0)},
      };
      if (index > 0) loop.emplace_back(Value::String("previtem"), items[index - 1]);
      if (index + 1 < length) loop.emplace_back(Value::String("nextitem"), items[index + 1]);
      loop.emplace_back(
          Value::String("cycle"),
          Value::Callable("loop.cycle",
                          [index](const CallArguments& arguments) -> absl::StatusOr<Value> {
                            if (arguments.positional.empty()) {
                              return TypeError("no items for cycling given");
                            }
                            return arguments.positional[index % arguments.positional.size()];
                          }));
      inner->Set("loop", Value::Dict(std::move(loop)));
      LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(statement.body, inner, out));
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value MakeMacro(const Statement& statement, const ScopePtr& defining_scope, std::string name) {
    // Several macros of one scope share its entry (a template's top-level macros, a call block in
    // a loop body). A loop that defines a macro keeps each iteration's scope until the render
    // ends: ~3.5 kB each (the loop dict), 1.6 GB for 450k iterations; max_loop_iterations bounds
    // their number. Before, the same scopes were kept forever.
    if (macro_scopes_.empty() || macro_scopes_.back() != defining_scope)
      macro_scopes_.push_back(defining_scope);
    const size_t scope_index = macro_scopes_.size() - 1;
    return Value::Callable(name,
                           [this, &statement, scope_index,
                            name](const CallArguments& arguments) -> absl::StatusOr<Value> {
                             if (++call_depth_ > options_.limits.max_call_depth) {
                               --call_depth_;
                               return absl::ResourceExhaustedError(absl::StrFormat(
                                   "template macro calls nest deeper than max_call_depth (%d)",
                                   options_.limits.max_call_depth));
                             }
                             // A copy: the call may define macros, which grows the vector.
                             const ScopePtr defining_scope = macro_scopes_[scope_index];
                             absl::StatusOr<Value> result =
                                 InvokeMacro(statement, defining_scope, name, arguments);
                             --call_depth_;
                             return result;
                           });
  }

  absl::StatusOr<Value> InvokeMacro(const Statement& statement, const ScopePtr& defining_scope,
                                    const std::string& name, const CallArguments& arguments) {
    auto scope = std::make_shared<Scope>();
    scope->parent = defining_scope;
    const std::vector<MacroParameter>& parameters = statement.parameters;
    std::vector<bool> bound(parameters.size(), false);
    Value::Items varargs;
    for (size_t index = 0; index < arguments.positional.size(); ++index) {
      if (index < parameters.size()) {
        scope->Set(parameters[index].name, arguments.positional[index]);
        bound[index] = true;
      } else {
        varargs.push_back(arguments.positional[index]);
      }
    }
    Value::Entries kwargs;
    for (const auto& [key, value] : arguments.keyword) {
      bool matched = false;
      for (size_t index = 0; index < parameters.size(); ++index) {
        if (parameters[index].name == key) {
          if (bound[index]) {
            return TypeError(
                absl::StrFormat("macro '%s' got multiple values for argument '%s'", name, key));
          }
          scope->Set(key, value);
          bound[index] = true;
          matched = true;
        }
      }
      if (!matched) {
        if (key == "caller") {
          scope->Set("caller", value);
        } else {
          kwargs.emplace_back(Value::String(key), value);
        }
      }
    }
    for (size_t index = 0; index < parameters.size(); ++index) {
      if (bound[index]) continue;
      if (parameters[index].default_value) {
        LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*parameters[index].default_value, scope));
        scope->Set(parameters[index].name, std::move(value));
      } else {
        scope->Set(parameters[index].name,
                   Value::Undefined(
                       absl::StrFormat("parameter '%s' was not provided", parameters[index].name)));
      }
    }
    scope->Set("varargs", Value::Tuple(std::move(varargs)));
    scope->Set("kwargs", Value::Dict(std::move(kwargs)));
    std::string out;
    LLMRT_ASSIGN_OR_RETURN(Flow flow, RenderBody(statement.body, scope, out));
    (void)flow;
    return Value::String(std::move(out));
  }

  // ---- Globals ----

  void InstallGlobals(Scope& globals) {
    globals.Set("raise_exception",
                Value::Callable(
                    "raise_exception", [](const CallArguments& arguments) -> absl::StatusOr<Value> {
                      const Value* message = Argument(arguments, 0, "message");
                      return absl::Status(kTemplateRaisedCode, message ? message->Str() : "");
                    }));
    globals.Set("strftime_now",
                Value::Callable("strftime_now",
                                [this](const CallArguments& arguments) -> absl::StatusOr<Value> {
                                  const Value* format = Argument(arguments, 0, "format");
                                  if (format == nullptr || !format->is_string()) {
                                    return TypeError("strftime_now() needs a format string");
                                  }
                                  std::tm when;
                                  if (options_.now) {
                                    when = *options_.now;
                                  } else {
                                    const std::time_t now = std::time(nullptr);
                                    localtime_r(&now, &when);
                                  }
                                  char buffer[512];
                                  const size_t written =
                                      std::strftime(buffer, sizeof(buffer),
                                                    format->string_value().c_str(), &when);
                                  return Value::String(std::string(buffer, written));
                                }));
    auto make_dict = [](const CallArguments& arguments,
                        bool is_namespace) -> absl::StatusOr<Value> {
      Value::Entries entries;
      for (const Value& positional : arguments.positional) {
        if (!positional.is_dict() && !positional.is_namespace()) {
          return TypeError(absl::StrFormat("'%s' object is not a mapping", positional.TypeName()));
        }
        for (const auto& entry : positional.entries()) entries.push_back(entry);
      }
      for (const auto& [key, value] : arguments.keyword)
        entries.emplace_back(Value::String(key), value);
      if (is_namespace) {
        for (const auto& [key, value] : entries) {
          if (key.is_string() && !key.string_value().empty() && key.string_value()[0] == '_') {
            return absl::InvalidArgumentError(absl::StrFormat(
                "SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
                "namespace, but got '%s'. Please rename the attribute.",
                key.string_value()));
          }
        }
        return Value::Namespace(std::move(entries));
      }
      return Value::Dict(std::move(entries));
    };
    globals.Set(
        "namespace",
        Value::Callable("namespace",
                        [this, make_dict](const CallArguments& arguments) -> absl::StatusOr<Value> {
                          LLMRT_ASSIGN_OR_RETURN(Value created, make_dict(arguments, true));
                          namespaces_.push_back(created);
                          return created;
                        }));
    globals.Set("dict", Value::Callable("dict", [make_dict](const CallArguments& arguments) {
                  return make_dict(arguments, false);
                }));
    globals.Set(
        "range",
        Value::Callable("range", [this](const CallArguments& arguments) -> absl::StatusOr<Value> {
          int64_t start = 0, stop = 0, step = 1;
          const auto& args = arguments.positional;
          for (const Value& arg : args) {
            if (!arg.is_int() && !arg.is_bool()) {
              return TypeError(absl::StrFormat("'%s' object cannot be interpreted as an integer",
                                               arg.TypeName()));
            }
          }
          if (args.size() == 1) {
            stop = args[0].int_value();
          } else if (args.size() == 2 || args.size() == 3) {
            start = args[0].int_value();
            stop = args[1].int_value();
            if (args.size() == 3) step = args[2].int_value();
          } else {
            return TypeError("range expected 1 to 3 arguments");
          }
          if (step == 0)
            return absl::InvalidArgumentError("ValueError: range() arg 3 must not be zero");
          Value::Items items;
          for (int64_t value = start; step > 0 ? value < stop : value > stop; value += step) {
            LLMRT_RETURN_IF_ERROR(CountIterations(1));
            items.push_back(Value::Int(value));
          }
          return Value::List(std::move(items));
        }));
  }

  // ---- Expressions ----

  absl::StatusOr<CallArguments> EvaluateArguments(const Expression& call, const ScopePtr& scope) {
    CallArguments arguments;
    for (const ExpressionPtr& argument : call.arguments) {
      LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*argument, scope));
      arguments.positional.push_back(std::move(value));
    }
    for (const KeywordArgument& keyword : call.keywords) {
      LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*keyword.value, scope));
      arguments.keyword.emplace_back(keyword.name, std::move(value));
    }
    return arguments;
  }

  absl::StatusOr<Value> Call(const Value& callee, const CallArguments& arguments) {
    if (callee.is_undefined()) return UndefinedError(callee);
    if (!callee.is_function()) {
      return TypeError(absl::StrFormat("'%s' object is not callable", callee.TypeName()));
    }
    return callee.function()(arguments);
  }

  absl::StatusOr<Value> Evaluate(const Expression& expression, const ScopePtr& scope) {
    switch (expression.kind) {
      case Expression::Kind::kConstant:
        return expression.value;
      case Expression::Kind::kName: {
        const Value* value = scope->Find(expression.name);
        if (value == nullptr) {
          return Value::Undefined(absl::StrFormat("'%s' is undefined", expression.name));
        }
        return *value;
      }
      case Expression::Kind::kAttribute: {
        LLMRT_ASSIGN_OR_RETURN(Value object, Evaluate(*expression.operands[0], scope));
        return GetAttribute(object, expression.name);
      }
      case Expression::Kind::kItem: {
        LLMRT_ASSIGN_OR_RETURN(Value object, Evaluate(*expression.operands[0], scope));
        LLMRT_ASSIGN_OR_RETURN(Value key, Evaluate(*expression.operands[1], scope));
        return GetItem(object, key);
      }
      case Expression::Kind::kSlice:
        return EvaluateSlice(expression, scope);
      case Expression::Kind::kCall: {
        LLMRT_ASSIGN_OR_RETURN(Value callee, Evaluate(*expression.operands[0], scope));
        LLMRT_ASSIGN_OR_RETURN(CallArguments arguments, EvaluateArguments(expression, scope));
        return Call(callee, arguments);
      }
      case Expression::Kind::kFilter: {
        LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*expression.operands[0], scope));
        LLMRT_ASSIGN_OR_RETURN(CallArguments arguments, EvaluateArguments(expression, scope));
        return ApplyFilter(expression.name, value, arguments);
      }
      case Expression::Kind::kTest: {
        LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*expression.operands[0], scope));
        LLMRT_ASSIGN_OR_RETURN(CallArguments arguments, EvaluateArguments(expression, scope));
        LLMRT_ASSIGN_OR_RETURN(bool result, ApplyTest(expression.name, value, arguments));
        return Value::Bool(result != expression.negated);
      }
      case Expression::Kind::kUnary: {
        LLMRT_ASSIGN_OR_RETURN(Value operand, Evaluate(*expression.operands[0], scope));
        if (expression.name == "not") return Value::Bool(!operand.Truthy());
        if (operand.is_undefined()) return UndefinedError(operand);
        if (!operand.is_number()) {
          return TypeError(absl::StrFormat("bad operand type for unary %s: '%s'", expression.name,
                                           operand.TypeName()));
        }
        if (expression.name == "+")
          return operand.is_float() ? operand : Value::Int(operand.int_value());
        if (operand.is_float()) return Value::Float(-operand.float_value());
        return Value::Int(-operand.int_value());
      }
      case Expression::Kind::kBinary: {
        LLMRT_ASSIGN_OR_RETURN(Value left, Evaluate(*expression.operands[0], scope));
        if (expression.name == "and") {
          if (!left.Truthy()) return left;
          return Evaluate(*expression.operands[1], scope);
        }
        if (expression.name == "or") {
          if (left.Truthy()) return left;
          return Evaluate(*expression.operands[1], scope);
        }
        LLMRT_ASSIGN_OR_RETURN(Value right, Evaluate(*expression.operands[1], scope));
        return Binary(expression.name, left, right);
      }
      case Expression::Kind::kCompare: {
        LLMRT_ASSIGN_OR_RETURN(Value left, Evaluate(*expression.operands[0], scope));
        for (size_t index = 0; index < expression.compare_ops.size(); ++index) {
          LLMRT_ASSIGN_OR_RETURN(Value right, Evaluate(*expression.operands[index + 1], scope));
          LLMRT_ASSIGN_OR_RETURN(bool result, Compare(expression.compare_ops[index], left, right));
          if (!result) return Value::Bool(false);
          left = std::move(right);
        }
        return Value::Bool(true);
      }
      case Expression::Kind::kConditional: {
        LLMRT_ASSIGN_OR_RETURN(Value condition, Evaluate(*expression.operands[0], scope));
        if (condition.Truthy()) return Evaluate(*expression.operands[1], scope);
        if (expression.operands[2]) return Evaluate(*expression.operands[2], scope);
        return Value::Undefined("the inline if-expression on line " +
                                std::to_string(expression.line) +
                                " evaluated to false and no else section was defined.");
      }
      case Expression::Kind::kList:
      case Expression::Kind::kTuple: {
        Value::Items items;
        for (const ExpressionPtr& operand : expression.operands) {
          LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*operand, scope));
          items.push_back(std::move(value));
        }
        return expression.kind == Expression::Kind::kList ? Value::List(std::move(items))
                                                          : Value::Tuple(std::move(items));
      }
      case Expression::Kind::kDict: {
        Value::Entries entries;
        for (size_t index = 0; index + 1 < expression.operands.size(); index += 2) {
          LLMRT_ASSIGN_OR_RETURN(Value key, Evaluate(*expression.operands[index], scope));
          LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*expression.operands[index + 1], scope));
          if (key.is_list() || key.is_dict() || key.is_undefined()) {
            return TypeError(absl::StrFormat("unhashable type: '%s'", key.TypeName()));
          }
          entries.emplace_back(std::move(key), std::move(value));
        }
        return Value::Dict(std::move(entries));
      }
    }
    return absl::InternalError("unknown expression kind");
  }

  absl::StatusOr<Value> EvaluateSlice(const Expression& expression, const ScopePtr& scope) {
    LLMRT_ASSIGN_OR_RETURN(Value object, Evaluate(*expression.operands[0], scope));
    std::optional<int64_t> bounds[3];
    for (int part = 0; part < 3; ++part) {
      if (!expression.operands[part + 1]) continue;
      LLMRT_ASSIGN_OR_RETURN(Value value, Evaluate(*expression.operands[part + 1], scope));
      if (value.is_none()) continue;
      if (!value.is_int() && !value.is_bool()) {
        return TypeError("slice indices must be integers or None");
      }
      bounds[part] = value.int_value();
    }
    if (object.is_undefined()) return UndefinedError(object);
    std::vector<Value> source;
    std::vector<std::string> points;
    int64_t length;
    if (object.is_string()) {
      points = CodePoints(object.string_value());
      length = static_cast<int64_t>(points.size());
    } else if (object.is_sequence_of_items()) {
      length = static_cast<int64_t>(object.items().size());
    } else {
      return TypeError(absl::StrFormat("'%s' object is not subscriptable", object.TypeName()));
    }
    const int64_t step = bounds[2].value_or(1);
    if (step == 0) return absl::InvalidArgumentError("ValueError: slice step cannot be zero");
    auto clamp = [&](std::optional<int64_t> bound, int64_t default_value) {
      if (!bound) return default_value;
      int64_t value = *bound;
      if (value < 0) value += length;
      if (step > 0) return std::clamp<int64_t>(value, 0, length);
      return std::clamp<int64_t>(value, -1, length - 1);
    };
    const int64_t start = clamp(bounds[0], step > 0 ? 0 : length - 1);
    const int64_t stop = clamp(bounds[1], step > 0 ? length : -1);
    std::vector<int64_t> indices;
    for (int64_t index = start; step > 0 ? index < stop : index > stop; index += step) {
      indices.push_back(index);
    }
    if (object.is_string()) {
      std::string out;
      for (int64_t index : indices) out += points[index];
      return SameStringKind(object, std::move(out));
    }
    Value::Items items;
    for (int64_t index : indices) items.push_back(object.items()[index]);
    return object.is_list() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
  }

  absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
    if (object.is_undefined()) return UndefinedError(object);
    if (object.is_dict() || object.is_namespace()) {
      if (const Value* found = object.Find(key)) return *found;
      if (key.is_string()) return GetAttribute(object, key.string_value());
      return MissingElement(object, key);
    }
    if (object.is_sequence_of_items() || object.is_string()) {
      if (key.is_int() || key.is_bool()) {
        int64_t index = key.int_value();
        if (object.is_string()) {
          const std::vector<std::string> points = CodePoints(object.string_value());
          const int64_t length = static_cast<int64_t>(points.size());
          if (index < 0) index += length;
          if (index < 0 || index >= length) return MissingElement(object, key);
          return SameStringKind(object, points[index]);
        }
        const int64_t length = static_cast<int64_t>(object.items().size());
        if (index < 0) index += length;
        if (index < 0 || index >= length) return MissingElement(object, key);
        return object.items()[index];
      }
      if (key.is_string()) return GetAttribute(object, key.string_value());
      return MissingElement(object, key);
    }
    if (key.is_string()) return GetAttribute(object, key.string_value());
    return MissingElement(object, key);
  }

  Value Method(const Value& self, const std::string& name,
               std::function<absl::StatusOr<Value>(const Value&, const CallArguments&)> body) {
    return Value::Callable(
        std::string(self.TypeName()) + "." + name,
        [self, body](const CallArguments& arguments) { return body(self, arguments); });
  }

  static Value Unsafe(const Value& self, const std::string& name) {
    const std::string message = absl::StrFormat(
        "SecurityError: access to attribute '%s' of '%s' object is unsafe.", name, self.TypeName());
    return Value::Callable(name, [message](const CallArguments&) -> absl::StatusOr<Value> {
      return absl::InvalidArgumentError(message);
    });
  }

  absl::StatusOr<Value> GetAttribute(const Value& object, const std::string& name) {
    if (object.is_undefined()) return UndefinedError(object);
    if (object.is_dict()) {
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        return DictMethod(object, name);
      }
      if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" ||
          name == "clear") {
        return Unsafe(object, name);
      }
      if (const Value* found = object.Find(name)) return *found;
      return MissingAttribute(object, name);
    }
    if (object.is_namespace()) {
      if (const Value* found = object.Find(name)) return *found;
      return MissingAttribute(object, name);
    }
    if (object.is_string()) {
      absl::StatusOr<Value> method = StringMethod(object, name);
      if (method.ok()) return method;
      return MissingAttribute(object, name);
    }
    if (const Value* field = object.Field(name)) return *field;
    if (object.is_sequence_of_items()) {
      if (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
          name == "remove" || name == "reverse" || name == "sort" || name == "clear") {
        if (object.is_list()) return Unsafe(object, name);
      }
      if (name == "index" || name == "count") {
        return Method(
            object, name,
            [name](const Value& self, const CallArguments& arguments) -> absl::StatusOr<Value> {
              const Value* needle = Argument(arguments, 0, "value");
              if (needle == nullptr) return TypeError(name + "() takes exactly one argument");
              int64_t count = 0;
              for (size_t index = 0; index < self.items().size(); ++index) {
                if (self.items()[index].Equals(*needle)) {
                  if (name == "index") return Value::Int(static_cast<int64_t>(index));
                  ++count;
                }
              }
              if (name == "index") {
                return absl::InvalidArgumentError(
                    absl::StrFormat("ValueError: %s is not in list", needle->Repr()));
              }
              return Value::Int(count);
            });
      }
    }
    return MissingAttribute(object, name);
  }

  Value DictMethod(const Value& object, const std::string& name) {
    return Method(
        object, name,
        [name](const Value& self, const CallArguments& arguments) -> absl::StatusOr<Value> {
          if (name == "get") {
            const Value* key = Argument(arguments, 0, "key");
            if (key == nullptr) return TypeError("get expected at least 1 argument, got 0");
            if (const Value* found = self.Find(*key)) return *found;
            const Value* fallback = Argument(arguments, 1, "default");
            return fallback ? *fallback : Value::None();
          }
          Value::Items items;
          for (const auto& [key, value] : self.entries()) {
            if (name == "items") {
              items.push_back(Value::Tuple({key, value}));
            } else {
              items.push_back(name == "keys" ? key : value);
            }
          }
          return Value::List(std::move(items));
        });
  }

  absl::StatusOr<Value> StringMethod(const Value& object, const std::string& name) {
    static const char* const kMethods[] = {
        "strip",        "lstrip",  "rstrip",  "split",     "rsplit",     "startswith",
        "endswith",     "upper",   "lower",   "title",     "capitalize", "replace",
        "find",         "rfind",   "count",   "join",      "splitlines", "isdigit",
        "isalpha",      "isspace", "isalnum", "islower",   "isupper",    "removeprefix",
        "removesuffix", "format",  "index",   "partition", "rpartition", "center",
        "ljust",        "rjust",   "zfill",   "swapcase"};
    bool known = false;
    for (const char* method : kMethods) known |= name == method;
    if (!known) return absl::NotFoundError(name);
    return Method(
        object, name,
        [this, name](const Value& self, const CallArguments& arguments) -> absl::StatusOr<Value> {
          if (!self.is_markup()) return CallStringMethod(self.string_value(), name, arguments);
          // Markup's methods return Markup (lists of it from the splits) and escape the text
          // they insert: replace's new text, join's items, format's arguments.
          CallArguments escaped = arguments;
          auto escape = [](Value& value) { value = Value::Markup(MarkupText(value)); };
          if (name == "replace" && escaped.positional.size() > 1) escape(escaped.positional[1]);
          for (auto& [key, value] : escaped.keyword) {
            if (name == "format" || (name == "replace" && key == "new")) escape(value);
          }
          if (name == "format") {
            for (Value& value : escaped.positional) escape(value);
          }
          if (name == "join" && !escaped.positional.empty()) {
            LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(escaped.positional[0]));
            for (Value& item : items) {
              if (item.is_string()) item = Value::Markup(MarkupText(item));
            }
            escaped.positional[0] = Value::List(std::move(items));
          }
          LLMRT_ASSIGN_OR_RETURN(Value result,
                                 CallStringMethod(self.string_value(), name, escaped));
          if (result.is_string()) return Value::Markup(result.string_value());
          if (result.is_list() && (name == "split" || name == "rsplit" || name == "splitlines")) {
            Value::Items parts;
            for (const Value& part : result.items())
              parts.push_back(Value::Markup(part.string_value()));
            return Value::List(std::move(parts));
          }
          return result;
        });
  }

  absl::StatusOr<Value> CallStringMethod(const std::string& text, const std::string& name,
                                         const CallArguments& arguments) {
    auto string_argument = [&](size_t position,
                               const char* keyword) -> absl::StatusOr<std::optional<std::string>> {
      const Value* value = Argument(arguments, position, keyword);
      if (value == nullptr || value->is_none()) return std::optional<std::string>();
      if (!value->is_string()) {
        return TypeError(
            absl::StrFormat("%s arg must be None or str, not %s", name, value->TypeName()));
      }
      return std::optional<std::string>(value->string_value());
    };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      LLMRT_ASSIGN_OR_RETURN(std::optional<std::string> chars, string_argument(0, "chars"));
      return Value::String(Strip(text, chars, name != "rstrip", name != "lstrip"));
    }
    if (name == "upper") return Value::String(AsciiUpper(text));
    if (name == "lower") return Value::String(AsciiLower(text));
    if (name == "title") return Value::String(PythonTitle(text));
    if (name == "capitalize") return Value::String(Capitalize(text));
    if (name == "startswith" || name == "endswith") {
      const Value* affix = Argument(arguments, 0, "prefix");
      if (affix == nullptr) return TypeError(name + "() takes at least 1 argument (0 given)");
      std::vector<Value> candidates;
      if (affix->is_tuple()) {
        candidates = affix->items();
      } else {
        candidates.push_back(*affix);
      }
      for (const Value& candidate : candidates) {
        if (!candidate.is_string()) {
          return TypeError(absl::StrFormat("%s first arg must be str or a tuple of str, not %s",
                                           name, candidate.TypeName()));
        }
        const std::string& needle = candidate.string_value();
        if (needle.size() > text.size()) continue;
        if (name == "startswith"
                ? text.compare(0, needle.size(), needle) == 0
                : text.compare(text.size() - needle.size(), needle.size(), needle) == 0) {
          return Value::Bool(true);
        }
      }
      return Value::Bool(false);
    }
    if (name == "split" || name == "rsplit") {
      LLMRT_ASSIGN_OR_RETURN(std::optional<std::string> separator, string_argument(0, "sep"));
      const Value* max_split_value = Argument(arguments, 1, "maxsplit");
      int64_t max_split = max_split_value ? max_split_value->int_value() : -1;
      Value::Items parts;
      if (separator) {
        if (separator->empty()) return absl::InvalidArgumentError("ValueError: empty separator");
        std::vector<std::string> pieces;
        if (name == "split") {
          size_t position = 0;
          while (max_split < 0 || static_cast<int64_t>(pieces.size()) < max_split) {
            const size_t found = text.find(*separator, position);
            if (found == std::string::npos) break;
            pieces.push_back(text.substr(position, found - position));
            position = found + separator->size();
          }
          pieces.push_back(text.substr(position));
        } else {
          size_t end = text.size();
          std::vector<std::string> reversed;
          while (max_split < 0 || static_cast<int64_t>(reversed.size()) < max_split) {
            if (end < separator->size()) break;
            const size_t found = text.rfind(*separator, end - separator->size());
            if (found == std::string::npos) break;
            reversed.push_back(
                text.substr(found + separator->size(), end - found - separator->size()));
            end = found;
          }
          reversed.push_back(text.substr(0, end));
          pieces.assign(reversed.rbegin(), reversed.rend());
        }
        for (std::string& piece : pieces) parts.push_back(Value::String(std::move(piece)));
      } else {
        // Runs of whitespace separate; leading and trailing whitespace gives no empty parts.
        const std::vector<std::string> points = CodePoints(text);
        std::string current;
        bool in_word = false;
        int64_t splits = 0;
        for (size_t index = 0; index < points.size(); ++index) {
          if (IsPythonSpace(points[index]) && (max_split < 0 || splits < max_split || !in_word)) {
            if (in_word) {
              parts.push_back(Value::String(current));
              current.clear();
              in_word = false;
              ++splits;
            }
          } else {
            current += points[index];
            in_word = true;
          }
        }
        if (in_word) parts.push_back(Value::String(Strip(current, std::nullopt, false, true)));
      }
      return Value::List(std::move(parts));
    }
    if (name == "replace") {
      const Value* old_text = Argument(arguments, 0, "old");
      const Value* new_text = Argument(arguments, 1, "new");
      if (old_text == nullptr || new_text == nullptr || !old_text->is_string() ||
          !new_text->is_string()) {
        return TypeError("replace() needs two str arguments");
      }
      const Value* count = Argument(arguments, 2, "count");
      std::string out = PythonReplace(text, old_text->string_value(), new_text->string_value(),
                                      count ? count->int_value() : -1);
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return Value::String(std::move(out));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      LLMRT_ASSIGN_OR_RETURN(std::optional<std::string> needle, string_argument(0, "sub"));
      if (!needle) return TypeError(name + "() needs a str argument");
      if (name == "count") {
        if (needle->empty()) return Value::Int(CodePointCount(text) + 1);
        int64_t count = 0;
        for (size_t position = text.find(*needle); position != std::string::npos;
             position = text.find(*needle, position + needle->size())) {
          ++count;
        }
        return Value::Int(count);
      }
      const size_t found = name == "rfind" ? text.rfind(*needle) : text.find(*needle);
      if (found == std::string::npos) {
        if (name == "index") return absl::InvalidArgumentError("ValueError: substring not found");
        return Value::Int(-1);
      }
      return Value::Int(CodePointCount(text.substr(0, found)));
    }
    if (name == "join") {
      const Value* iterable = Argument(arguments, 0, "iterable");
      if (iterable == nullptr) return TypeError("join() takes exactly one argument (0 given)");
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(*iterable));
      std::string out;
      for (size_t index = 0; index < items.size(); ++index) {
        if (!items[index].is_string()) {
          return TypeError(absl::StrFormat("sequence item %d: expected str instance, %s found",
                                           index, items[index].TypeName()));
        }
        if (index > 0) out += text;
        out += items[index].string_value();
        LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      }
      return Value::String(std::move(out));
    }
    if (name == "format") {
      LLMRT_ASSIGN_OR_RETURN(std::string out, BraceFormat(text, arguments));
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return Value::String(std::move(out));
    }
    if (name == "partition" || name == "rpartition") {
      const Value* separator = Argument(arguments, 0, "sep");
      if (separator == nullptr || !separator->is_string()) {
        return TypeError(
            absl::StrFormat("must be str, not %s", separator ? separator->TypeName() : "nothing"));
      }
      const std::string& needle = separator->string_value();
      if (needle.empty()) return absl::InvalidArgumentError("ValueError: empty separator");
      const size_t found = name == "partition" ? text.find(needle) : text.rfind(needle);
      if (found == std::string::npos) {
        return name == "partition"
                   ? Value::Tuple({Value::String(text), Value::String(""), Value::String("")})
                   : Value::Tuple({Value::String(""), Value::String(""), Value::String(text)});
      }
      return Value::Tuple({Value::String(text.substr(0, found)), Value::String(needle),
                           Value::String(text.substr(found + needle.size()))});
    }
    if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") {
      const Value* width = Argument(arguments, 0, "width");
      if (width == nullptr || !(width->is_int() || width->is_bool())) {
        return TypeError(name + "() needs an integer width");
      }
      const int64_t columns =
          std::min<int64_t>(width->int_value(), options_.limits.max_output_bytes);
      if (name == "zfill") {
        const bool signed_text = !text.empty() && (text[0] == '-' || text[0] == '+');
        const std::string digits = signed_text ? text.substr(1) : text;
        const std::string padded = PadTo(digits, columns - (signed_text ? 1 : 0), "0", true);
        return Value::String(signed_text ? text.substr(0, 1) + padded : padded);
      }
      LLMRT_ASSIGN_OR_RETURN(std::optional<std::string> fill, string_argument(1, "fillchar"));
      if (fill && CodePointCount(*fill) != 1) {
        return TypeError("The fill character must be exactly one character long");
      }
      const std::string fill_char = fill.value_or(" ");
      if (name == "center") return Value::String(Center(text, columns, fill_char));
      return Value::String(PadTo(text, columns, fill_char, name == "rjust"));
    }
    if (name == "swapcase") {
      std::string out = text;
      for (char& c : out) {
        if (c >= 'a' && c <= 'z') {
          c = static_cast<char>(c - 'a' + 'A');
        } else if (c >= 'A' && c <= 'Z') {
          c = static_cast<char>(c - 'A' + 'a');
        }
      }
      return Value::String(std::move(out));
    }
    if (name == "splitlines") {
      Value::Items lines;
      for (std::string& line : SplitLines(text)) lines.push_back(Value::String(std::move(line)));
      return Value::List(std::move(lines));
    }
    if (name == "removeprefix" || name == "removesuffix") {
      LLMRT_ASSIGN_OR_RETURN(std::optional<std::string> affix, string_argument(0, "affix"));
      if (!affix) return TypeError(name + "() needs a str argument");
      if (name == "removeprefix" && absl::StartsWith(text, *affix)) {
        return Value::String(text.substr(affix->size()));
      }
      if (name == "removesuffix" && absl::EndsWith(text, *affix) && !affix->empty()) {
        return Value::String(text.substr(0, text.size() - affix->size()));
      }
      return Value::String(text);
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
        name == "islower" || name == "isupper") {
      if (text.empty()) return Value::Bool(false);
      bool has_cased = false;
      for (const std::string& point : CodePoints(text)) {
        const char c = point.size() == 1 ? point[0] : 0;
        const bool digit = c >= '0' && c <= '9';
        const bool alpha = IsAsciiAlpha(c);
        if (name == "isdigit" && !digit) return Value::Bool(false);
        if (name == "isalpha" && !alpha) return Value::Bool(false);
        if (name == "isalnum" && !alpha && !digit) return Value::Bool(false);
        if (name == "isspace" && !IsPythonSpace(point)) return Value::Bool(false);
        if (name == "islower" && c >= 'A' && c <= 'Z') return Value::Bool(false);
        if (name == "isupper" && c >= 'a' && c <= 'z') return Value::Bool(false);
        has_cased |= alpha;
      }
      if (name == "islower" || name == "isupper") return Value::Bool(has_cased);
      return Value::Bool(true);
    }
    return absl::Status(kTemplateUnsupportedCode,
                        absl::StrFormat("str.%s is not supported by this interpreter", name));
  }

  // Python iteration: list/tuple items, dict keys, string code points; Undefined is empty.
  absl::StatusOr<std::vector<Value>> Iterate(const Value& value) {
    switch (value.kind()) {
      case Value::Kind::kUndefined:
        return std::vector<Value>();
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        return value.items();
      case Value::Kind::kDict: {
        std::vector<Value> keys;
        for (const auto& [key, item] : value.entries()) keys.push_back(key);
        return keys;
      }
      case Value::Kind::kString: {
        std::vector<Value> points;
        for (std::string& point : CodePoints(value.string_value())) {
          points.push_back(Value::String(std::move(point)));
        }
        return points;
      }
      default:
        return TypeError(absl::StrFormat("'%s' object is not iterable", value.TypeName()));
    }
  }

  absl::StatusOr<Value> Binary(const std::string& op, const Value& left, const Value& right) {
    if (op == "~") {
      std::string out = left.Str() + right.Str();
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return Value::String(std::move(out));
    }
    if (left.is_undefined()) return UndefinedError(left);
    if (right.is_undefined()) return UndefinedError(right);
    auto unsupported = [&]() {
      return TypeError(absl::StrFormat("unsupported operand type(s) for %s: '%s' and '%s'", op,
                                       left.TypeName(), right.TypeName()));
    };
    if (left.is_number() && right.is_number()) {
      const bool floating = left.is_float() || right.is_float();
      const int64_t a = left.int_value(), b = right.int_value();
      const double x = left.float_value(), y = right.float_value();
      int64_t result;
      if (op == "+") {
        if (floating) return Value::Float(x + y);
        if (__builtin_add_overflow(a, b, &result)) return IntegerOverflow();
        return Value::Int(result);
      }
      if (op == "-") {
        if (floating) return Value::Float(x - y);
        if (__builtin_sub_overflow(a, b, &result)) return IntegerOverflow();
        return Value::Int(result);
      }
      if (op == "*") {
        if (floating) return Value::Float(x * y);
        if (__builtin_mul_overflow(a, b, &result)) return IntegerOverflow();
        return Value::Int(result);
      }
      if (op == "/") {
        if (y == 0) return absl::InvalidArgumentError("ZeroDivisionError: division by zero");
        return Value::Float(x / y);
      }
      if (op == "//" || op == "%") {
        if (floating) {
          if (y == 0) {
            return absl::InvalidArgumentError(
                op == "//" ? "ZeroDivisionError: float floor division by zero"
                           : "ZeroDivisionError: float modulo");
          }
          double modulo = std::fmod(x, y);
          if (modulo != 0 && ((modulo < 0) != (y < 0))) modulo += y;
          if (op == "%") return Value::Float(modulo);
          return Value::Float(std::floor((x - modulo) / y + 0.5) == (x - modulo) / y
                                  ? (x - modulo) / y
                                  : std::floor(x / y));
        }
        if (b == 0) {
          return absl::InvalidArgumentError(
              op == "//" ? "ZeroDivisionError: integer division or modulo by zero"
                         : "ZeroDivisionError: integer modulo by zero");
        }
        return Value::Int(op == "//" ? FloorDiv(a, b) : FloorMod(a, b));
      }
      if (op == "**") {
        if (!floating && b >= 0) {
          int64_t power = 1;
          for (int64_t step = 0; step < b; ++step) {
            if (__builtin_mul_overflow(power, a, &power)) return IntegerOverflow();
            if (power == 0 || power == 1) break;
          }
          if (a == -1) power = (b % 2 == 0) ? 1 : -1;
          return Value::Int(power);
        }
        return Value::Float(std::pow(x, y));
      }
      return unsupported();
    }
    if (op == "+") {
      if (left.is_string() && right.is_string()) {
        LLMRT_RETURN_IF_ERROR(CheckSize(left.string_value().size() + right.string_value().size()));
        if (left.is_markup() || right.is_markup()) {
          return Value::Markup(MarkupText(left) + MarkupText(right));
        }
        return Value::String(left.string_value() + right.string_value());
      }
      if ((left.is_list() && right.is_list()) || (left.is_tuple() && right.is_tuple())) {
        // Counted like the items of `list * n`: a list doubled in a loop would otherwise grow
        // to 2^64 items within 64 iterations.
        LLMRT_RETURN_IF_ERROR(
            CountIterations(static_cast<int64_t>(left.items().size() + right.items().size())));
        Value::Items items = left.items();
        items.insert(items.end(), right.items().begin(), right.items().end());
        return left.is_list() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
      }
      if (left.is_string() || left.is_list() || left.is_tuple()) {
        return TypeError(absl::StrFormat("can only concatenate %s (not \"%s\") to %s",
                                         left.TypeName(), right.TypeName(), left.TypeName()));
      }
      return unsupported();
    }
    if (op == "*") {
      const Value* sequence = nullptr;
      const Value* count = nullptr;
      if ((left.is_string() || left.is_sequence_of_items()) &&
          (right.is_int() || right.is_bool())) {
        sequence = &left;
        count = &right;
      } else if ((right.is_string() || right.is_sequence_of_items()) &&
                 (left.is_int() || left.is_bool())) {
        sequence = &right;
        count = &left;
      }
      if (sequence == nullptr) {
        if (left.is_string() || right.is_string()) {
          return TypeError(absl::StrFormat("can't multiply sequence by non-int of type '%s'",
                                           left.is_string() ? right.TypeName() : left.TypeName()));
        }
        return unsupported();
      }
      // An empty sequence stays empty: no loop of up to 2^63 steps appending nothing.
      const bool empty =
          sequence->is_string() ? sequence->string_value().empty() : sequence->items().empty();
      const int64_t times = empty ? 0 : std::max<int64_t>(0, count->int_value());
      if (sequence->is_string()) {
        LLMRT_RETURN_IF_ERROR(CheckSize(static_cast<size_t>(
            std::min<double>(1e18, static_cast<double>(sequence->string_value().size()) * times))));
        std::string out;
        for (int64_t step = 0; step < times; ++step) out += sequence->string_value();
        return SameStringKind(*sequence, std::move(out));
      }
      LLMRT_RETURN_IF_ERROR(CountIterations(
          static_cast<int64_t>(std::min<double>(1e15, double(sequence->items().size()) * times))));
      Value::Items items;
      for (int64_t step = 0; step < times; ++step) {
        items.insert(items.end(), sequence->items().begin(), sequence->items().end());
      }
      return sequence->is_list() ? Value::List(std::move(items)) : Value::Tuple(std::move(items));
    }
    if (op == "%" && left.is_string()) {
      LLMRT_ASSIGN_OR_RETURN(std::string out,
                             PrintfFormat(left.string_value(), right, left.is_markup()));
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return SameStringKind(left, std::move(out));
    }
    return unsupported();
  }

  static absl::Status IntegerOverflow() {
    return absl::InvalidArgumentError(
        "OverflowError: integer result does not fit in 64 bits (Python ints are unbounded)");
  }

  absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
    switch (container.kind()) {
      case Value::Kind::kString:
        if (!item.is_string()) {
          return TypeError(absl::StrFormat("'in <string>' requires string as left operand, not %s",
                                           item.TypeName()));
        }
        return container.string_value().find(item.string_value()) != std::string::npos;
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        for (const Value& element : container.items()) {
          if (element.Equals(item)) return true;
        }
        return false;
      case Value::Kind::kDict:
        return container.Find(item) != nullptr;
      case Value::Kind::kUndefined:
        return false;
      default:
        return TypeError(
            absl::StrFormat("argument of type '%s' is not iterable", container.TypeName()));
    }
  }

  absl::StatusOr<int> Order(const std::string& op, const Value& left, const Value& right) {
    if (left.is_undefined()) return UndefinedError(left);
    if (right.is_undefined()) return UndefinedError(right);
    if (left.is_number() && right.is_number()) {
      if (left.is_float() || right.is_float()) {
        const double x = left.float_value(), y = right.float_value();
        return x < y ? -1 : x > y ? 1 : 0;
      }
      const int64_t a = left.int_value(), b = right.int_value();
      return a < b ? -1 : a > b ? 1 : 0;
    }
    if (left.is_string() && right.is_string()) {
      const int order = left.string_value().compare(right.string_value());
      return order < 0 ? -1 : order > 0 ? 1 : 0;
    }
    if ((left.is_list() && right.is_list()) || (left.is_tuple() && right.is_tuple())) {
      const size_t common = std::min(left.items().size(), right.items().size());
      for (size_t index = 0; index < common; ++index) {
        if (left.items()[index].Equals(right.items()[index])) continue;
        return Order(op, left.items()[index], right.items()[index]);
      }
      const size_t a = left.items().size(), b = right.items().size();
      return a < b ? -1 : a > b ? 1 : 0;
    }
    return TypeError(absl::StrFormat("'%s' not supported between instances of '%s' and '%s'", op,
                                     left.TypeName(), right.TypeName()));
  }

  absl::StatusOr<bool> Compare(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return left.Equals(right);
    if (op == "!=") return !left.Equals(right);
    if (op == "in") return Contains(right, left);
    if (op == "not in") {
      LLMRT_ASSIGN_OR_RETURN(bool contained, Contains(right, left));
      return !contained;
    }
    LLMRT_ASSIGN_OR_RETURN(int order, Order(op, left, right));
    if (op == "<") return order < 0;
    if (op == "<=") return order <= 0;
    if (op == ">") return order > 0;
    return order >= 0;
  }

  // ---- Tests ----

  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& value,
                                 const CallArguments& arguments) {
    const Value* argument = Argument(arguments, 0, "other");
    auto need_argument = [&]() -> absl::Status {
      if (argument == nullptr)
        return TypeError(absl::StrFormat("test '%s' needs an argument", name));
      return absl::OkStatus();
    };
    if (name == "defined") return !value.is_undefined();
    if (name == "undefined") return value.is_undefined();
    if (name == "none") return value.is_none();
    if (name == "string") return value.is_string();
    if (name == "mapping") return value.is_dict();
    if (name == "iterable") {
      return value.is_string() || value.is_sequence_of_items() || value.is_dict() ||
             value.is_undefined();
    }
    if (name == "sequence") {
      return value.is_string() || value.is_sequence_of_items() || value.is_dict() ||
             value.is_undefined();
    }
    if (name == "number") return value.is_number();
    if (name == "integer") return value.is_int();
    if (name == "float") return value.is_float();
    if (name == "boolean") return value.is_bool();
    if (name == "true") return value.is_bool() && value.bool_value();
    if (name == "false") return value.is_bool() && !value.bool_value();
    if (name == "callable") return value.is_function();
    if (name == "escaped") return value.is_markup();
    if (name == "filter" || name == "test") {
      // Whether the name is one this interpreter has (jinja2 asks its environment).
      if (!value.is_string()) return false;
      return name == "filter" ? IsFilterName(value.string_value())
                              : IsTestName(value.string_value());
    }
    if (name == "lower" || name == "upper") {
      const std::string text = value.Str();
      return name == "lower" ? AsciiLower(text) == text : AsciiUpper(text) == text;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (value.is_undefined()) return UndefinedError(value);
      if (!value.is_number()) return TypeError("odd/even/divisibleby need a number");
      const int64_t number = value.int_value();
      if (name == "odd") return FloorMod(number, 2) == 1;
      if (name == "even") return FloorMod(number, 2) == 0;
      const Value* divisor = Argument(arguments, 0, "num");
      if (divisor == nullptr || !divisor->is_number() || divisor->int_value() == 0) {
        return TypeError("divisibleby needs a non-zero number");
      }
      return FloorMod(number, divisor->int_value()) == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") {
      LLMRT_RETURN_IF_ERROR(need_argument());
      return value.Equals(*argument);
    }
    if (name == "ne" || name == "!=") {
      LLMRT_RETURN_IF_ERROR(need_argument());
      return !value.Equals(*argument);
    }
    if (name == "sameas") {
      LLMRT_RETURN_IF_ERROR(need_argument());
      if (value.is_none() || value.is_bool())
        return value.Equals(*argument) && value.kind() == argument->kind();
      return false;
    }
    if (name == "in") {
      const Value* container = Argument(arguments, 0, "seq");
      if (container == nullptr) return TypeError("test 'in' needs an argument");
      return Contains(*container, value);
    }
    static const std::pair<const char*, const char*> kOrderTests[] = {
        {"lt", "<"}, {"lessthan", "<"},    {"<", "<"}, {"le", "<="}, {"<=", "<="},
        {"gt", ">"}, {"greaterthan", ">"}, {">", ">"}, {"ge", ">="}, {">=", ">="}};
    for (const auto& [test_name, op] : kOrderTests) {
      if (name == test_name) {
        LLMRT_RETURN_IF_ERROR(need_argument());
        return Compare(op, value, *argument);
      }
    }
    return absl::Status(kTemplateUnsupportedCode,
                        absl::StrFormat("TemplateRuntimeError: No test named '%s'.", name));
  }

  // ---- Filters ----

  absl::StatusOr<Value> Length(const Value& value) {
    switch (value.kind()) {
      case Value::Kind::kUndefined:
        return Value::Int(0);
      case Value::Kind::kString:
        return Value::Int(CodePointCount(value.string_value()));
      case Value::Kind::kList:
      case Value::Kind::kTuple:
        return Value::Int(static_cast<int64_t>(value.items().size()));
      case Value::Kind::kDict:
        return Value::Int(static_cast<int64_t>(value.entries().size()));
      default:
        return TypeError(absl::StrFormat("object of type '%s' has no len()", value.TypeName()));
    }
  }

  // Attribute lookup for map/selectattr/sort/join: dotted paths and integer parts, as jinja2's
  // make_attrgetter.
  absl::StatusOr<Value> AttributePath(const Value& item, const Value& attribute) {
    if (!attribute.is_string()) return GetItem(item, attribute);
    Value current = item;
    for (absl::string_view part : absl::StrSplit(attribute.string_value(), '.')) {
      int64_t index;
      if (absl::SimpleAtoi(part, &index)) {
        LLMRT_ASSIGN_OR_RETURN(current, GetItem(current, Value::Int(index)));
      } else {
        LLMRT_ASSIGN_OR_RETURN(current, GetItem(current, Value::String(std::string(part))));
      }
    }
    return current;
  }

  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& value,
                                    const CallArguments& arguments) {
    auto positional_tail = [&](size_t from) {
      CallArguments tail;
      for (size_t index = from; index < arguments.positional.size(); ++index) {
        tail.positional.push_back(arguments.positional[index]);
      }
      tail.keyword = arguments.keyword;
      return tail;
    };
    if (IsOneOf(kUnsupportedFilters, name)) {
      return absl::Status(
          kTemplateUnsupportedCode,
          absl::StrFormat("the filter '%s' is not supported by this interpreter", name));
    }
    if (name == "length" || name == "count") return Length(value);
    // string, trim, upper, lower and capitalize keep Markup (soft_str and Markup's methods).
    if (name == "string") return value.is_markup() ? value : Value::String(value.Str());
    if (name == "safe") return value.is_markup() ? value : Value::Markup(value.Str());
    if (name == "e" || name == "escape") {
      return value.is_markup() ? value : Value::Markup(HtmlEscape(value.Str()));
    }
    if (name == "forceescape") return Value::Markup(HtmlEscape(value.Str()));
    if (name == "trim") {
      const Value* chars = Argument(arguments, 0, "chars");
      std::optional<std::string> set;
      if (chars != nullptr && !chars->is_none()) set = chars->Str();
      return SameStringKind(value, Strip(value.Str(), set, true, true));
    }
    if (name == "upper") return SameStringKind(value, AsciiUpper(value.Str()));
    if (name == "lower") return SameStringKind(value, AsciiLower(value.Str()));
    if (name == "title") return Value::String(JinjaTitle(value.Str()));
    if (name == "capitalize") return SameStringKind(value, Capitalize(value.Str()));
    if (name == "center") {
      const Value* width = Argument(arguments, 0, "width");
      const int64_t columns = width == nullptr ? 80 : width->int_value();
      return Value::String(
          Center(value.Str(), std::min<int64_t>(columns, options_.limits.max_output_bytes), " "));
    }
    if (name == "wordcount") return Value::Int(WordCount(value.Str()));
    if (name == "truncate") {
      const Value* length = Argument(arguments, 0, "length");
      const Value* kill_words = Argument(arguments, 1, "killwords");
      const Value* end = Argument(arguments, 2, "end");
      const Value* leeway = Argument(arguments, 3, "leeway");
      const int64_t max_length = length ? length->int_value() : 255;
      // jinja2's policy truncate.leeway defaults to 5.
      const int64_t margin = leeway && !leeway->is_none() ? leeway->int_value() : 5;
      const int64_t end_length = CodePointCount(end ? end->Str() : "...");
      if (max_length < end_length) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "AssertionError: expected length >= %d, got %d", end_length, max_length));
      }
      if (margin < 0) {
        return absl::InvalidArgumentError("AssertionError: expected leeway >= 0, got " +
                                          std::to_string(margin));
      }
      return Value::String(Truncate(value.Str(), max_length, kill_words && kill_words->Truthy(),
                                    end ? end->Str() : "...", margin));
    }
    if (name == "format") {
      if (!arguments.positional.empty() && !arguments.keyword.empty()) {
        return absl::InvalidArgumentError(
            "FilterArgumentError: can't handle positional and keyword arguments at the same time");
      }
      Value values;
      if (!arguments.keyword.empty()) {
        Value::Entries entries;
        for (const auto& [key, item] : arguments.keyword)
          entries.emplace_back(Value::String(key), item);
        values = Value::Dict(std::move(entries));
      } else {
        values = Value::Tuple(arguments.positional);
      }
      LLMRT_ASSIGN_OR_RETURN(std::string out, PrintfFormat(value.Str(), values, value.is_markup()));
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return SameStringKind(value, std::move(out));
    }
    if (name == "attr") {
      // The object's attribute only, never an item: a dict's keys are not attributes.
      const Value* attribute = Argument(arguments, 0, "name");
      if (attribute == nullptr || !attribute->is_string()) return TypeError("attr needs a name");
      if (value.is_dict()) {
        return MissingAttribute(value, attribute->string_value());
      }
      return GetAttribute(value, attribute->string_value());
    }
    if (name == "reverse") {
      if (value.is_string()) {
        std::vector<std::string> points = CodePoints(value.string_value());
        std::reverse(points.begin(), points.end());
        return SameStringKind(value, absl::StrJoin(points, ""));
      }
      if (!value.is_sequence_of_items() && !value.is_dict() && !value.is_undefined()) {
        return absl::InvalidArgumentError("FilterArgumentError: argument must be iterable");
      }
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "batch" || name == "slice") {
      const Value* count = Argument(arguments, 0, name == "batch" ? "linecount" : "slices");
      const Value* fill = Argument(arguments, 1, "fill_with");
      if (count == nullptr || !(count->is_int() || count->is_bool()) || count->int_value() <= 0) {
        return TypeError(name + " needs a positive integer count");
      }
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      const int64_t size = count->int_value();
      LLMRT_RETURN_IF_ERROR(CountIterations(std::min<int64_t>(size, 1'000'000'000)));
      Value::Items groups;
      if (name == "batch") {
        for (size_t start = 0; start < items.size(); start += size) {
          Value::Items group(items.begin() + start,
                             items.begin() + std::min<size_t>(items.size(), start + size));
          while (fill && !fill->is_none() && static_cast<int64_t>(group.size()) < size) {
            group.push_back(*fill);
          }
          groups.push_back(Value::List(std::move(group)));
        }
        return Value::List(std::move(groups));
      }
      // slice: `size` columns; the first (length % size) get one item more, the others get
      // fill_with appended when it is given (jinja2's do_slice).
      const int64_t length = static_cast<int64_t>(items.size());
      const int64_t per_slice = length / size, with_extra = length % size;
      int64_t offset = 0;
      for (int64_t slice = 0; slice < size; ++slice) {
        const int64_t start = offset + slice * per_slice;
        if (slice < with_extra) ++offset;
        const int64_t end = offset + (slice + 1) * per_slice;
        Value::Items group(items.begin() + start, items.begin() + end);
        if (fill && !fill->is_none() && slice >= with_extra) group.push_back(*fill);
        groups.push_back(Value::List(std::move(group)));
      }
      return Value::List(std::move(groups));
    }
    if (name == "groupby") {
      const Value* attribute = Argument(arguments, 0, "attribute");
      const Value* fallback = Argument(arguments, 1, "default");
      const Value* case_sensitive = Argument(arguments, 2, "case_sensitive");
      if (attribute == nullptr) return TypeError("groupby needs an attribute");
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      const bool fold_case = !(case_sensitive && case_sensitive->Truthy());
      std::vector<std::pair<Value, Value>> keyed;  // (sort key, item)
      for (const Value& item : items) {
        LLMRT_ASSIGN_OR_RETURN(Value key, AttributePath(item, *attribute));
        if (key.is_undefined() && fallback != nullptr) key = *fallback;
        if (fold_case && key.is_string()) key = Value::String(AsciiLower(key.string_value()));
        keyed.emplace_back(std::move(key), item);
      }
      absl::Status error;
      std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
        absl::StatusOr<int> order = Order("<", a.first, b.first);
        if (!order.ok()) {
          error = order.status();
          return false;
        }
        return *order < 0;
      });
      LLMRT_RETURN_IF_ERROR(error);
      Value::Items groups;
      for (size_t start = 0; start < keyed.size();) {
        size_t end = start + 1;
        while (end < keyed.size() && keyed[end].first.Equals(keyed[start].first)) ++end;
        Value::Items members;
        for (size_t index = start; index < end; ++index) members.push_back(keyed[index].second);
        // The grouper is the first member's own value (its case kept), as jinja2 does.
        Value grouper = keyed[start].first;
        if (fold_case) {
          LLMRT_ASSIGN_OR_RETURN(grouper, AttributePath(members[0], *attribute));
          if (grouper.is_undefined() && fallback != nullptr) grouper = *fallback;
        }
        groups.push_back(
            Value::NamedTuple({grouper, Value::List(std::move(members))}, {"grouper", "list"}));
        start = end;
      }
      return Value::List(std::move(groups));
    }
    if (name == "default" || name == "d") {
      const Value* fallback = Argument(arguments, 0, "default_value");
      const Value* boolean = Argument(arguments, 1, "boolean");
      const bool use_fallback =
          value.is_undefined() || (boolean != nullptr && boolean->Truthy() && !value.Truthy());
      if (!use_fallback) return value;
      return fallback ? *fallback : Value::String("");
    }
    if (name == "tojson") {
      // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None,
      // sort_keys=False), which is json.dumps with those arguments.
      JsonOptions json;
      if (const Value* ensure_ascii = Argument(arguments, 0, "ensure_ascii")) {
        json.ensure_ascii = ensure_ascii->Truthy();
      }
      if (const Value* indent = Argument(arguments, 1, "indent"); indent && !indent->is_none()) {
        if (indent->is_string()) {
          json.indent = indent->string_value();
        } else if (indent->is_int()) {
          json.indent =
              std::string(std::max<int64_t>(0, std::min<int64_t>(indent->int_value(), 64)), ' ');
        } else {
          return TypeError("tojson indent must be an int or a str");
        }
      }
      if (const Value* separators = Argument(arguments, 2, "separators");
          separators && !separators->is_none()) {
        if (!separators->is_sequence_of_items() || separators->items().size() != 2 ||
            !separators->items()[0].is_string() || !separators->items()[1].is_string()) {
          return absl::InvalidArgumentError(
              "ValueError: tojson separators must be a pair of strings (item, key)");
        }
        json.item_separator = separators->items()[0].string_value();
        json.key_separator = separators->items()[1].string_value();
      }
      if (const Value* sort_keys = Argument(arguments, 3, "sort_keys")) {
        json.sort_keys = sort_keys->Truthy();
      }
      LLMRT_ASSIGN_OR_RETURN(std::string text, ToJson(value, json));
      LLMRT_RETURN_IF_ERROR(CheckSize(text.size()));
      return Value::String(std::move(text));
    }
    if (name == "items") {
      if (value.is_undefined()) return Value::List({});
      if (!value.is_dict()) return TypeError("Can only get item pairs from a mapping.");
      Value::Items items;
      for (const auto& [key, item] : value.entries()) items.push_back(Value::Tuple({key, item}));
      return Value::List(std::move(items));
    }
    if (name == "list") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      return Value::List(std::move(items));
    }
    if (name == "first") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
      return items.front();
    }
    if (name == "last") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
      return items.back();
    }
    if (name == "join") {
      const Value* separator = Argument(arguments, 0, "d");
      const Value* attribute = Argument(arguments, 1, "attribute");
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      std::string out;
      for (size_t index = 0; index < items.size(); ++index) {
        if (index > 0 && separator) out += separator->Str();
        if (attribute && !attribute->is_none()) {
          LLMRT_ASSIGN_OR_RETURN(Value part, AttributePath(items[index], *attribute));
          out += part.Str();
        } else {
          out += items[index].Str();
        }
        LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      }
      return Value::String(std::move(out));
    }
    if (name == "replace") {
      const Value* old_text = Argument(arguments, 0, "old");
      const Value* new_text = Argument(arguments, 1, "new");
      const Value* count = Argument(arguments, 2, "count");
      if (old_text == nullptr || new_text == nullptr) return TypeError("replace needs old and new");
      std::string out = PythonReplace(value.Str(), old_text->Str(), new_text->Str(),
                                      count && !count->is_none() ? count->int_value() : -1);
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return Value::String(std::move(out));
    }
    if (name == "int" || name == "float") {
      const Value* fallback = Argument(arguments, 0, "default");
      const bool is_int = name == "int";
      Value default_value = fallback ? *fallback : is_int ? Value::Int(0) : Value::Float(0);
      if (value.is_number()) {
        if (is_int) {
          if (value.is_float()) {
            if (!std::isfinite(value.float_value()) || std::fabs(value.float_value()) > 9.2e18) {
              return default_value;
            }
            return Value::Int(static_cast<int64_t>(value.float_value()));
          }
          return Value::Int(value.int_value());
        }
        return Value::Float(value.float_value());
      }
      if (value.is_string()) {
        const std::string text = Strip(value.string_value(), std::nullopt, true, true);
        int64_t integer;
        double floating;
        if (is_int) {
          if (absl::SimpleAtoi(text, &integer)) return Value::Int(integer);
          if (absl::SimpleAtod(text, &floating) && std::isfinite(floating) &&
              std::fabs(floating) < 9.2e18) {
            return Value::Int(static_cast<int64_t>(floating));
          }
          return default_value;
        }
        if (absl::SimpleAtod(text, &floating)) return Value::Float(floating);
      }
      return default_value;
    }
    if (name == "abs") {
      if (value.is_undefined()) return UndefinedError(value);
      if (value.is_float()) return Value::Float(std::fabs(value.float_value()));
      if (value.is_number()) {
        if (value.int_value() == INT64_MIN) return IntegerOverflow();
        return Value::Int(std::llabs(value.int_value()));
      }
      return TypeError(absl::StrFormat("bad operand type for abs(): '%s'", value.TypeName()));
    }
    if (name == "round") {
      const Value* precision = Argument(arguments, 0, "precision");
      const Value* method = Argument(arguments, 1, "method");
      const std::string how = method ? method->Str() : "common";
      if (how != "common" && how != "ceil" && how != "floor") {
        return TypeError("method must be common, ceil or floor");
      }
      if (!value.is_number()) return TypeError("round needs a number");
      const int64_t digits = precision ? precision->int_value() : 0;
      const double scale = std::pow(10.0, static_cast<double>(digits));
      const double scaled = value.float_value() * scale;
      double rounded;
      if (how == "ceil") {
        rounded = std::ceil(scaled);
      } else if (how == "floor") {
        rounded = std::floor(scaled);
      } else {
        rounded = std::nearbyint(scaled);  // round half to even, as Python's round()
      }
      return Value::Float(rounded / scale);
    }
    if (name == "indent") {
      const Value* width = Argument(arguments, 0, "width");
      const Value* first = Argument(arguments, 1, "first");
      const Value* blank = Argument(arguments, 2, "blank");
      std::string indentation =
          width == nullptr ? "    "
          : width->is_string()
              ? width->string_value()
              : std::string(std::max<int64_t>(0, std::min<int64_t>(width->int_value(), 1024)), ' ');
      std::string text = value.Str() + "\n";
      std::vector<std::string> lines = SplitLines(text);
      std::string out;
      if (blank && blank->Truthy()) {
        out = absl::StrJoin(lines, "\n" + indentation);
      } else if (!lines.empty()) {
        out = lines[0];
        for (size_t index = 1; index < lines.size(); ++index) {
          out += "\n";
          if (!lines[index].empty()) out += indentation;
          out += lines[index];
        }
      }
      if (first && first->Truthy()) out = indentation + out;
      LLMRT_RETURN_IF_ERROR(CheckSize(out.size()));
      return Value::String(std::move(out));
    }
    // map, select, reject, selectattr and rejectattr yield nothing for a falsy input (None, "",
    // 0, an empty list) instead of iterating it: jinja2 guards them with `if seq:`.
    const bool falsy = !value.Truthy();
    if (name == "map") {
      LLMRT_ASSIGN_OR_RETURN(
          std::vector<Value> items,
          falsy ? absl::StatusOr<std::vector<Value>>(std::vector<Value>()) : Iterate(value));
      const Value* attribute = nullptr;
      const Value* fallback = nullptr;
      for (const auto& [key, item] : arguments.keyword) {
        if (key == "attribute") attribute = &item;
        if (key == "default") fallback = &item;
      }
      Value::Items out;
      if (attribute != nullptr) {
        for (const Value& item : items) {
          LLMRT_ASSIGN_OR_RETURN(Value mapped, AttributePath(item, *attribute));
          if (mapped.is_undefined() && fallback != nullptr) mapped = *fallback;
          out.push_back(std::move(mapped));
        }
        return Value::List(std::move(out));
      }
      if (arguments.positional.empty() || !arguments.positional[0].is_string()) {
        return TypeError("map needs a filter name or attribute=");
      }
      const std::string filter = arguments.positional[0].string_value();
      const CallArguments tail = positional_tail(1);
      for (const Value& item : items) {
        LLMRT_ASSIGN_OR_RETURN(Value mapped, ApplyFilter(filter, item, tail));
        out.push_back(std::move(mapped));
      }
      return Value::List(std::move(out));
    }
    if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
      const bool by_attribute = name == "selectattr" || name == "rejectattr";
      const bool keep_when = name == "select" || name == "selectattr";
      LLMRT_ASSIGN_OR_RETURN(
          std::vector<Value> items,
          falsy ? absl::StatusOr<std::vector<Value>>(std::vector<Value>()) : Iterate(value));
      size_t next = 0;
      const Value* attribute = nullptr;
      if (by_attribute) {
        if (arguments.positional.empty()) return TypeError(name + " needs an attribute name");
        attribute = &arguments.positional[next++];
      }
      std::optional<std::string> test;
      if (next < arguments.positional.size()) test = arguments.positional[next++].Str();
      const CallArguments tail = positional_tail(next);
      Value::Items out;
      for (const Value& item : items) {
        Value probe = item;
        if (attribute) {
          LLMRT_ASSIGN_OR_RETURN(probe, AttributePath(item, *attribute));
        }
        bool passed;
        if (test) {
          LLMRT_ASSIGN_OR_RETURN(passed, ApplyTest(*test, probe, tail));
        } else {
          passed = probe.Truthy();
        }
        if (passed == keep_when) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "unique") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      const Value* case_sensitive = Argument(arguments, 0, "case_sensitive");
      const Value* attribute = Argument(arguments, 1, "attribute");
      Value::Items out;
      std::vector<Value> seen;
      for (const Value& item : items) {
        Value key = item;
        if (attribute && !attribute->is_none()) {
          LLMRT_ASSIGN_OR_RETURN(key, AttributePath(item, *attribute));
        }
        if (key.is_string() && !(case_sensitive && case_sensitive->Truthy())) {
          key = Value::String(AsciiLower(key.string_value()));
        }
        bool duplicate = false;
        for (const Value& previous : seen) duplicate |= previous.Equals(key);
        if (duplicate) continue;
        seen.push_back(key);
        out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "dictsort") {
      if (!value.is_dict()) return TypeError("dictsort needs a mapping");
      const Value* case_sensitive = Argument(arguments, 0, "case_sensitive");
      const Value* by = Argument(arguments, 1, "by");
      const Value* reverse = Argument(arguments, 2, "reverse");
      const bool by_value = by && by->Str() == "value";
      if (by && by->Str() != "key" && by->Str() != "value") {
        return absl::InvalidArgumentError(
            "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
      }
      Value::Items pairs;
      for (const auto& [key, item] : value.entries()) pairs.push_back(Value::Tuple({key, item}));
      absl::Status error;
      auto sort_key = [&](const Value& pair) {
        Value key = pair.items()[by_value ? 1 : 0];
        if (key.is_string() && !(case_sensitive && case_sensitive->Truthy())) {
          key = Value::String(AsciiLower(key.string_value()));
        }
        return key;
      };
      std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
        absl::StatusOr<int> order = Order("<", sort_key(a), sort_key(b));
        if (!order.ok()) {
          error = order.status();
          return false;
        }
        return reverse && reverse->Truthy() ? *order > 0 : *order < 0;
      });
      if (!error.ok()) return error;
      return Value::List(std::move(pairs));
    }
    if (name == "sort") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      const Value* reverse = Argument(arguments, 0, "reverse");
      const Value* case_sensitive = Argument(arguments, 1, "case_sensitive");
      const Value* attribute = Argument(arguments, 2, "attribute");
      absl::Status error;
      auto sort_key = [&](const Value& item) -> Value {
        Value key = item;
        if (attribute && !attribute->is_none()) {
          absl::StatusOr<Value> found = AttributePath(item, *attribute);
          if (!found.ok()) {
            error = found.status();
            return Value::None();
          }
          key = *found;
        }
        if (key.is_string() && !(case_sensitive && case_sensitive->Truthy())) {
          key = Value::String(AsciiLower(key.string_value()));
        }
        return key;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        absl::StatusOr<int> order = Order("<", sort_key(a), sort_key(b));
        if (!order.ok()) {
          error = order.status();
          return false;
        }
        return reverse && reverse->Truthy() ? *order > 0 : *order < 0;
      });
      if (!error.ok()) return error;
      return Value::List(std::move(items));
    }
    if (name == "min" || name == "max" || name == "sum") {
      LLMRT_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
      if (name == "sum") {
        Value total = Value::Int(0);
        for (const Value& item : items) {
          LLMRT_ASSIGN_OR_RETURN(total, Binary("+", total, item));
        }
        return total;
      }
      if (items.empty())
        return Value::Undefined(absl::StrFormat("No aggregated item, sequence was empty."));
      Value best = items[0];
      for (size_t index = 1; index < items.size(); ++index) {
        LLMRT_ASSIGN_OR_RETURN(int order, Order("<", items[index], best));
        if (name == "min" ? order < 0 : order > 0) best = items[index];
      }
      return best;
    }
    return absl::Status(kTemplateUnsupportedCode,
                        absl::StrFormat("TemplateRuntimeError: No filter named '%s'.", name));
  }

  const RenderOptions& options_;
  int64_t loop_iterations_ = 0;
  int call_depth_ = 0;
  // Owned for the whole render; see the comment above the class.
  std::vector<ScopePtr> macro_scopes_;
  std::vector<Value> namespaces_;
};

}  // namespace

absl::StatusOr<Template> Template::Parse(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source, LexerOptions{});
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<Body> body = jinja::Parse(*tokens);
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(std::move(*body)));
}

absl::StatusOr<std::string> Template::Render(const Value& variables,
                                             const RenderOptions& options) const {
  Renderer renderer(options);
  return renderer.Run(*body_, variables);
}

}  // namespace llmrt::jinja
