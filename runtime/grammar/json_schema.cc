#include "runtime/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/base/status_macros.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/regex_to_grammar.h"

namespace llmrt::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The JSON building blocks every converted schema may use. json-char is what may stand inside a
// string: any character but '"', '\' and control characters, or an escape. json-number's
// exponent has at most two digits: a number past a double's range (1e400) is valid JSON, but
// parsers refuse it (nlohmann's, and so the server's tool-call parser) or make it infinity
// (Python's).
constexpr char kBaseRules[] =
    R"(json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])
json-string ::= "\"" json-char* "\""
json-integer ::= "0" | "-"? [1-9] [0-9]*
json-number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [+\-]? [0-9] [0-9]?)?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-array ::= "[" (json-value (", " json-value)*)? "]"
json-object ::= "{" (json-string ": " json-value (", " json-string ": " json-value)*)? "}"
)";

// Regexes of the formats (over the decoded string). date-time and time follow RFC 3339's
// grammar (seconds 00-60 for leap seconds, optional fraction, Z or an offset); uuid is RFC 4122's
// 8-4-4-4-12 hex form; email the dot-atom form of RFC 5321; uri a scheme, ':' and characters
// that RFC 3986 allows unescaped.
const std::map<std::string, std::string>& Formats() {
  static const auto* formats = new std::map<std::string, std::string>{
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"email",
       R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+)"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"uri", R"([A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+)"},
  };
  return *formats;
}

const absl::flat_hash_set<std::string>& Annotations() {
  static const auto* annotations = new absl::flat_hash_set<std::string>{
      "title", "description", "default",    "examples", "$schema",
      "$id",   "$comment",    "deprecated", "readOnly", "writeOnly"};
  return *annotations;
}

// The JSON text of a value in the output layout (", " and ": " separators).
std::string Dump(const Json& value) {
  if (value.is_object()) {
    std::vector<std::string> members;
    for (auto it = value.begin(); it != value.end(); ++it) {
      members.push_back(Json(it.key()).dump() + ": " + Dump(it.value()));
    }
    return "{" + absl::StrJoin(members, ", ") + "}";
  }
  if (value.is_array()) {
    std::vector<std::string> items;
    for (const Json& item : value) items.push_back(Dump(item));
    return "[" + absl::StrJoin(items, ", ") + "]";
  }
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string PointerEscape(const std::string& key) {
  std::string escaped;
  for (char c : key) {
    if (c == '~') {
      escaped += "~0";
    } else if (c == '/') {
      escaped += "~1";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

// Decimal digits of a non-negative integer.
std::string Digits(int64_t value) { return std::to_string(value); }

// GBNF for the decimal strings of [low, high], both with the same number of digits.
std::string SameLengthRange(const std::string& low, const std::string& high) {
  if (low.empty()) return "\"\"";
  if (low[0] == high[0]) {
    return absl::StrFormat("\"%c\" %s", low[0], SameLengthRange(low.substr(1), high.substr(1)));
  }
  const size_t rest = low.size() - 1;
  const bool low_rest_zero = low.find_first_not_of('0', 1) == std::string::npos;
  const bool high_rest_nine = high.find_first_not_of('9', 1) == std::string::npos;
  std::string any_rest = rest == 0 ? "" : absl::StrFormat(" [0-9]{%d}", rest);
  std::vector<std::string> options;
  char first = low[0], last = high[0];
  if (!low_rest_zero) {
    options.push_back(absl::StrFormat("\"%c\" (%s)", low[0],
                                      SameLengthRange(low.substr(1), std::string(rest, '9'))));
    ++first;
  }
  if (!high_rest_nine) --last;
  if (first <= last) options.push_back(absl::StrFormat("[%c-%c]%s", first, last, any_rest));
  if (!high_rest_nine) {
    options.push_back(absl::StrFormat("\"%c\" (%s)", high[0],
                                      SameLengthRange(std::string(rest, '0'), high.substr(1))));
  }
  return "(" + absl::StrJoin(options, " | ") + ")";
}

// Non-negative integers in [low, high]; high < 0: unbounded.
std::string NonNegativeRange(int64_t low, int64_t high) {
  std::vector<std::string> options;
  const std::string low_digits = Digits(low);
  const size_t max_length = high < 0 ? low_digits.size() : Digits(high).size();
  for (size_t length = low_digits.size(); length <= max_length; ++length) {
    const int64_t smallest = length == 1 ? 0 : static_cast<int64_t>(std::pow(10, length - 1));
    const int64_t largest = static_cast<int64_t>(std::pow(10, length)) - 1;
    const int64_t from = std::max(low, smallest);
    const int64_t to = high < 0 ? largest : std::min(high, largest);
    if (from <= to) options.push_back(SameLengthRange(Digits(from), Digits(to)));
  }
  if (high < 0) {
    // Every longer number: a non-zero digit and at least max_length more digits.
    options.push_back(absl::StrFormat("[1-9] [0-9]{%d,}", max_length));
  }
  return "(" + absl::StrJoin(options, " | ") + ")";
}

// Integers in [low, high]; nullopt: unbounded on that side.
std::string IntegerRange(std::optional<int64_t> low, std::optional<int64_t> high) {
  std::vector<std::string> options;
  // Negative part: "-" followed by a magnitude in [max(1, -high), -low].
  if (!low.has_value() || *low < 0) {
    const int64_t magnitude_low = high.has_value() && *high < 0 ? -*high : 1;
    const int64_t magnitude_high = low.has_value() ? -*low : -1;
    options.push_back("\"-\" " + NonNegativeRange(magnitude_low, magnitude_high));
  }
  if (!high.has_value() || *high >= 0) {
    options.push_back(NonNegativeRange(low.has_value() ? std::max<int64_t>(*low, 0) : 0,
                                       high.has_value() ? *high : -1));
  }
  return "(" + absl::StrJoin(options, " | ") + ")";
}

class Converter {
 public:
  Converter(const Json& root, std::string_view prefix) : root_(root), prefix_(prefix) {}

  // The schema's rules, without the building blocks.
  absl::StatusOr<std::string> Convert() {
    LLMRT_ASSIGN_OR_RETURN(std::string root_expression, Visit(root_, ""));
    std::string text = prefix_ + "root ::= " + root_expression + "\n";
    for (const std::string& rule : rules_) text += rule;
    return text;
  }

 private:
  absl::Status Unsupported(const std::string& path, const std::string& keyword,
                           std::string_view why = "") const {
    return absl::InvalidArgumentError(
        absl::StrFormat("JSON schema: keyword '%s' at '%s' is not supported%s%s", keyword,
                        path.empty() ? "#" : "#" + path, why.empty() ? "" : ": ", why));
  }
  absl::Status Invalid(const std::string& path, const std::string& keyword,
                       std::string_view expected, const Json& found) const {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JSON schema: '%s' at '%s' must be %s, found %s", keyword, path.empty() ? "#" : "#" + path,
        expected, found.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 100)));
  }

  std::string NewRule(const std::string& body) {
    const std::string name = absl::StrFormat("%ss%d", prefix_, next_rule_++);
    rules_.push_back(name + " ::= " + body + "\n");
    return name;
  }

  absl::StatusOr<std::string> Visit(const Json& schema, const std::string& path) {
    if (++depth_ > 200) return absl::InvalidArgumentError("JSON schema: nested too deeply");
    absl::StatusOr<std::string> result = VisitInner(schema, path);
    --depth_;
    return result;
  }

  absl::StatusOr<std::string> VisitInner(const Json& schema, const std::string& path) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return std::string("json-value");
      return absl::InvalidArgumentError(
          absl::StrFormat("JSON schema: the schema at '%s' is false; no value can match it",
                          path.empty() ? "#" : "#" + path));
    }
    if (!schema.is_object()) return Invalid(path, "schema", "an object or a boolean", schema);
    if (schema.contains("$ref")) return Reference(schema, path);
    for (const char* combinator : {"anyOf", "oneOf", "allOf"}) {
      if (schema.contains(combinator)) return Combination(schema, path, combinator);
    }
    if (schema.contains("enum") || schema.contains("const")) return Enumeration(schema, path);

    std::vector<std::string> types;
    if (const auto type = schema.find("type"); type != schema.end()) {
      if (type->is_string()) {
        types.push_back(type->get<std::string>());
      } else if (type->is_array() && !type->empty()) {
        for (const Json& name : *type) {
          if (!name.is_string())
            return Invalid(path, "type", "a type name or a list of them", *type);
          types.push_back(name.get<std::string>());
        }
      } else {
        return Invalid(path, "type", "a type name or a list of them", *type);
      }
    }
    LLMRT_RETURN_IF_ERROR(CheckKeywords(schema, path, types));
    if (types.empty()) {
      // No type: the keywords present say which kinds they constrain; the others are free.
      const bool object = schema.contains("properties") || schema.contains("required") ||
                          schema.contains("additionalProperties");
      const bool array =
          schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems");
      const bool string = schema.contains("pattern") || schema.contains("format") ||
                          schema.contains("minLength") || schema.contains("maxLength");
      const bool integer = schema.contains("minimum") || schema.contains("maximum") ||
                           schema.contains("exclusiveMinimum") ||
                           schema.contains("exclusiveMaximum");
      if (!object && !array && !string && !integer) return std::string("json-value");
      if (integer) {
        return Unsupported(path, "minimum", "bounds need \"type\": \"integer\"");
      }
      types = {object ? "object" : "", array ? "array" : "", string ? "string" : ""};
      types.erase(std::remove(types.begin(), types.end(), ""), types.end());
    }
    std::vector<std::string> options;
    for (const std::string& type : types) {
      LLMRT_ASSIGN_OR_RETURN(std::string option, TypedValue(schema, path, type));
      options.push_back(std::move(option));
    }
    if (options.size() == 1) return options[0];
    return "(" + absl::StrJoin(options, " | ") + ")";
  }

  // Refuses every keyword this converter does not enforce.
  absl::Status CheckKeywords(const Json& schema, const std::string& path,
                             const std::vector<std::string>& types) const {
    static const absl::flat_hash_set<std::string> kKnown = {
        "type",       "properties",       "required",         "additionalProperties",
        "items",      "minItems",         "maxItems",         "minLength",
        "maxLength",  "pattern",          "format",           "minimum",
        "maximum",    "exclusiveMinimum", "exclusiveMaximum", "$defs",
        "definitions"};
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (kKnown.contains(it.key()) || Annotations().contains(it.key())) continue;
      return Unsupported(path, it.key());
    }
    if ((schema.contains("minimum") || schema.contains("maximum") ||
         schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")) &&
        std::find(types.begin(), types.end(), "number") != types.end()) {
      return Unsupported(path, schema.contains("minimum") ? "minimum" : "maximum",
                         "bounds are enforced for \"type\": \"integer\" only");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> TypedValue(const Json& schema, const std::string& path,
                                         const std::string& type) {
    if (type == "object") return Object(schema, path);
    if (type == "array") return Array(schema, path);
    if (type == "string") return String(schema, path);
    if (type == "integer") return Integer(schema, path);
    if (type == "number") return std::string("json-number");
    if (type == "boolean") return std::string("json-boolean");
    if (type == "null") return std::string("json-null");
    return Invalid(path, "type", "one of object, array, string, integer, number, boolean, null",
                   Json(type));
  }

  absl::StatusOr<std::string> Reference(const Json& schema, const std::string& path) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != "$ref" && !Annotations().contains(it.key()) && it.key() != "$defs" &&
          it.key() != "definitions") {
        return Unsupported(path, it.key(), "keywords next to $ref");
      }
    }
    const Json& ref = schema["$ref"];
    if (!ref.is_string()) return Invalid(path, "$ref", "a string", ref);
    const std::string target = ref.get<std::string>();
    if (auto found = ref_rules_.find(target); found != ref_rules_.end()) return found->second;
    if (target.empty() || target[0] != '#') {
      return Unsupported(path, "$ref", "only references inside the schema (\"#...\")");
    }
    // Resolve the JSON pointer after '#'.
    const Json* node = &root_;
    std::string pointer = target.substr(1);
    size_t pos = 0;
    while (pos < pointer.size()) {
      if (pointer[pos] != '/') return Invalid(path, "$ref", "a JSON pointer \"#/...\"", ref);
      size_t end = pointer.find('/', pos + 1);
      if (end == std::string::npos) end = pointer.size();
      std::string token = pointer.substr(pos + 1, end - pos - 1);
      std::string key;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size()) {
          key += token[i + 1] == '1' ? '/' : '~';
          ++i;
        } else {
          key += token[i];
        }
      }
      if (node->is_object() && node->contains(key)) {
        node = &(*node)[key];
      } else if (node->is_array() && !key.empty() &&
                 key.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoull(key) < node->size()) {
        node = &(*node)[std::stoull(key)];
      } else {
        return absl::InvalidArgumentError(
            absl::StrFormat("JSON schema: $ref '%s' at '%s' points at nothing", target,
                            path.empty() ? "#" : "#" + path));
      }
      pos = end;
    }
    // The rule name is taken before its body is converted, so recursive references find it.
    const std::string name = absl::StrFormat("%ss%d", prefix_, next_rule_++);
    ref_rules_[target] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back();
    LLMRT_ASSIGN_OR_RETURN(std::string body, Visit(*node, pointer));
    rules_[slot] = name + " ::= " + body + "\n";
    return name;
  }

  absl::StatusOr<std::string> Combination(const Json& schema, const std::string& path,
                                          const char* combinator) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != combinator && !Annotations().contains(it.key()) && it.key() != "$defs" &&
          it.key() != "definitions") {
        return Unsupported(path, it.key(), absl::StrFormat("keywords next to %s", combinator));
      }
    }
    const Json& list = schema[combinator];
    if (!list.is_array() || list.empty()) {
      return Invalid(path, combinator, "a non-empty array of schemas", list);
    }
    if (std::string_view(combinator) == "allOf" && list.size() != 1) {
      return Unsupported(path, "allOf", "only with one schema");
    }
    std::vector<std::string> options;
    for (size_t i = 0; i < list.size(); ++i) {
      LLMRT_ASSIGN_OR_RETURN(std::string option,
                             Visit(list[i], absl::StrFormat("%s/%s/%d", path, combinator, i)));
      options.push_back(std::move(option));
    }
    return "(" + absl::StrJoin(options, " | ") + ")";
  }

  absl::StatusOr<std::string> Enumeration(const Json& schema, const std::string& path) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (it.key() != "enum" && it.key() != "const" && it.key() != "type" &&
          !Annotations().contains(it.key())) {
        return Unsupported(path, it.key(), "keywords next to enum/const");
      }
    }
    std::vector<Json> values;
    if (schema.contains("const")) {
      values.push_back(schema["const"]);
    } else {
      const Json& list = schema["enum"];
      if (!list.is_array() || list.empty()) {
        return Invalid(path, "enum", "a non-empty array", list);
      }
      values.assign(list.begin(), list.end());
    }
    std::vector<std::string> options;
    for (const Json& value : values) options.push_back(GbnfLiteral(Dump(value)));
    return "(" + absl::StrJoin(options, " | ") + ")";
  }

  absl::StatusOr<int64_t> Count(const Json& schema, const std::string& path, const char* keyword,
                                int64_t fallback) const {
    if (!schema.contains(keyword)) return fallback;
    const Json& value = schema[keyword];
    if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
      return Invalid(path, keyword, "a non-negative integer", value);
    }
    const int64_t count = value.get<int64_t>();
    if (count > 10000) return Unsupported(path, keyword, "values above 10000");
    return count;
  }

  absl::StatusOr<std::string> Object(const Json& schema, const std::string& path) {
    struct Property {
      std::string name;
      std::string value;  // GBNF expression
      bool required;
    };
    std::vector<Property> properties;
    std::set<std::string> required;
    if (schema.contains("required")) {
      const Json& list = schema["required"];
      if (!list.is_array()) return Invalid(path, "required", "an array of names", list);
      for (const Json& name : list) {
        if (!name.is_string()) return Invalid(path, "required", "an array of names", list);
        required.insert(name.get<std::string>());
      }
    }
    if (schema.contains("properties")) {
      const Json& map = schema["properties"];
      if (!map.is_object()) return Invalid(path, "properties", "an object", map);
      for (auto it = map.begin(); it != map.end(); ++it) {
        LLMRT_ASSIGN_OR_RETURN(std::string value,
                               Visit(it.value(), path + "/properties/" + PointerEscape(it.key())));
        properties.push_back({it.key(), value, required.count(it.key()) > 0});
      }
    }
    for (const std::string& name : required) {
      bool declared = false;
      for (const Property& property : properties) declared |= property.name == name;
      if (!declared) properties.push_back({name, "json-value", true});
    }
    std::string additional;  // GBNF of one additional member; empty: none allowed
    if (!schema.contains("additionalProperties") || schema["additionalProperties"] == true) {
      additional = "json-value";
    } else if (schema["additionalProperties"].is_object()) {
      LLMRT_ASSIGN_OR_RETURN(additional,
                             Visit(schema["additionalProperties"], path + "/additionalProperties"));
    } else if (schema["additionalProperties"] != false) {
      return Invalid(path, "additionalProperties", "a boolean or a schema",
                     schema["additionalProperties"]);
    }
    std::string extra_member;
    if (!additional.empty()) {
      std::vector<std::string> names;
      for (const Property& property : properties) names.push_back(property.name);
      extra_member = KeyNotIn(names) + " \": \" " + additional;
    }
    // start_i: members from property i on, none written yet; after_i: some already written.
    const size_t count = properties.size();
    std::vector<std::string> start(count + 1), after(count + 1);
    after[count] = extra_member.empty() ? "\"\"" : "(\", \" " + extra_member + ")*";
    start[count] =
        extra_member.empty() ? "\"\"" : "(" + extra_member + " (\", \" " + extra_member + ")*)?";
    for (size_t i = count; i-- > 0;) {
      const std::string member =
          GbnfLiteral(
              Json(properties[i].name).dump(-1, ' ', false, Json::error_handler_t::replace)) +
          " \": \" " + properties[i].value;
      const std::string next_after = NewRule(after[i + 1]);
      const std::string next_start = NewRule(start[i + 1]);
      if (properties[i].required) {
        after[i] = "\", \" " + member + " " + next_after;
        start[i] = member + " " + next_after;
      } else {
        after[i] = "\", \" " + member + " " + next_after + " | " + next_after;
        start[i] = member + " " + next_after + " | " + next_start;
      }
    }
    return "\"{\" " + NewRule(start[0]) + " \"}\"";
  }

  // A JSON string that is none of `names` (so an additional property never repeats a declared
  // one): a trie over the names' characters, where each node may end the string only if no
  // name ends there, and may leave the trie with any other character.
  std::string KeyNotIn(const std::vector<std::string>& names) {
    if (names.empty()) return "json-string";
    struct Node {
      std::map<std::string, int> children;  // next character (UTF-8, JSON-escaped) -> node
      bool terminal = false;
    };
    std::vector<Node> nodes(1);
    for (const std::string& name : names) {
      // The name as it appears between the quotes of its JSON key.
      const std::string quoted = Json(name).dump(-1, ' ', false, Json::error_handler_t::replace);
      const std::string body = quoted.substr(1, quoted.size() - 2);
      int node = 0;
      for (size_t pos = 0; pos < body.size();) {
        // One character of the body: an escape (\x or \uXXXX) or one UTF-8 character.
        size_t length = 1;
        const auto byte = static_cast<uint8_t>(body[pos]);
        if (body[pos] == '\\') {
          length = body[pos + 1] == 'u' ? 6 : 2;
        } else if (byte >= 0xF0) {
          length = 4;
        } else if (byte >= 0xE0) {
          length = 3;
        } else if (byte >= 0xC0) {
          length = 2;
        }
        const std::string character = body.substr(pos, length);
        pos += length;
        auto [it, inserted] = nodes[node].children.try_emplace(character, 0);
        if (inserted) {
          it->second = static_cast<int>(nodes.size());
          nodes.emplace_back();
        }
        node = it->second;
      }
      nodes[node].terminal = true;
    }
    // Rules are made bottom-up: a node's rule names its children's.
    std::vector<std::string> rule_of(nodes.size());
    for (size_t i = nodes.size(); i-- > 0;) {
      const Node& node = nodes[i];
      std::vector<std::string> options;
      if (!node.terminal) options.push_back("\"\\\"\"");
      // Leaving the trie: a plain character that starts no child, or an escape that is not a
      // child; then any rest of a string.
      std::string excluded = "\"\\\\\\x00-\\x1F";
      std::vector<std::string> child_escapes;
      for (const auto& [character, child] : node.children) {
        options.push_back(GbnfLiteral(character) + " " + rule_of[child]);
        if (character[0] == '\\') {
          child_escapes.push_back(character);
        } else {
          // Written as a \U escape so any character is safe inside the class.
          size_t pos = 0;
          uint32_t code = static_cast<uint8_t>(character[0]);
          if (character.size() > 1) {
            code &= 0xFF >> (character.size() + 1);
            for (pos = 1; pos < character.size(); ++pos) {
              code = code << 6 | (static_cast<uint8_t>(character[pos]) & 0x3F);
            }
          }
          excluded += absl::StrFormat("\\U%08X", code);
        }
      }
      options.push_back("[^" + excluded + "] json-char* \"\\\"\"");
      // Escapes that start no child leave the trie too. A child that is a \u escape removes
      // every \u escape from this exit (a key spelled with \u escapes is rare; the grammar then
      // allows slightly fewer keys, never a declared one).
      std::set<char> seconds = {'"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u'};
      for (const std::string& escape : child_escapes) seconds.erase(escape[1]);
      std::string escape_class;
      for (char second : seconds) {
        if (second == 'u') continue;
        if (second == '"' || second == '\\') escape_class += '\\';
        escape_class += second;
      }
      std::vector<std::string> escape_options;
      if (!escape_class.empty()) escape_options.push_back("[" + escape_class + "]");
      if (seconds.count('u') > 0) escape_options.push_back("\"u\" [0-9a-fA-F]{4}");
      if (!escape_options.empty()) {
        options.push_back("\"\\\\\" (" + absl::StrJoin(escape_options, " | ") +
                          ") json-char* \"\\\"\"");
      }
      rule_of[i] = NewRule(absl::StrJoin(options, " | "));
    }
    return "\"\\\"\" " + rule_of[0];
  }

  absl::StatusOr<std::string> Array(const Json& schema, const std::string& path) {
    std::string item = "json-value";
    if (schema.contains("items")) {
      LLMRT_ASSIGN_OR_RETURN(item, Visit(schema["items"], path + "/items"));
    }
    LLMRT_ASSIGN_OR_RETURN(const int64_t min_items, Count(schema, path, "minItems", 0));
    LLMRT_ASSIGN_OR_RETURN(const int64_t max_items, Count(schema, path, "maxItems", -1));
    if (max_items >= 0 && max_items < min_items) {
      return Invalid(path, "maxItems", absl::StrFormat(">= minItems (%d)", min_items),
                     schema["maxItems"]);
    }
    if (max_items == 0) return std::string("\"[\" \"]\"");
    const std::string item_rule = NewRule(item);
    const std::string more =
        max_items < 0
            ? absl::StrFormat("{%d,}", std::max<int64_t>(min_items - 1, 0))
            : absl::StrFormat("{%d,%d}", std::max<int64_t>(min_items - 1, 0), max_items - 1);
    const std::string items = absl::StrFormat("%s (\", \" %s)%s", item_rule, item_rule, more);
    return min_items == 0 ? "\"[\" (" + items + ")? \"]\"" : "\"[\" " + items + " \"]\"";
  }

  absl::StatusOr<std::string> String(const Json& schema, const std::string& path) {
    const bool has_length = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("pattern") || schema.contains("format")) {
      const char* keyword = schema.contains("pattern") ? "pattern" : "format";
      if (schema.contains("pattern") && schema.contains("format")) {
        return Unsupported(path, "format", "together with pattern");
      }
      if (has_length) {
        return Unsupported(path, schema.contains("minLength") ? "minLength" : "maxLength",
                           absl::StrFormat("together with %s", keyword));
      }
      const Json& value = schema[keyword];
      if (!value.is_string()) return Invalid(path, keyword, "a string", value);
      std::string regex = value.get<std::string>();
      if (std::string_view(keyword) == "format") {
        auto found = Formats().find(regex);
        if (found == Formats().end()) {
          return Unsupported(path + "/format", regex,
                             "formats are date, time, date-time, email, uuid, uri");
        }
        regex = found->second;
      }
      absl::StatusOr<std::string> body = RegexToGbnf(regex, /*json_string=*/true);
      if (!body.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat("JSON schema: '%s' at '%s': %s", keyword,
                                                          path.empty() ? "#" : "#" + path,
                                                          body.status().message()));
      }
      return "\"\\\"\" " + NewRule(*body) + " \"\\\"\"";
    }
    if (!has_length) return std::string("json-string");
    LLMRT_ASSIGN_OR_RETURN(const int64_t min_length, Count(schema, path, "minLength", 0));
    LLMRT_ASSIGN_OR_RETURN(const int64_t max_length, Count(schema, path, "maxLength", -1));
    if (max_length >= 0 && max_length < min_length) {
      return Invalid(path, "maxLength", absl::StrFormat(">= minLength (%d)", min_length),
                     schema["maxLength"]);
    }
    const std::string repeat = max_length < 0 ? absl::StrFormat("{%d,}", min_length)
                                              : absl::StrFormat("{%d,%d}", min_length, max_length);
    return "\"\\\"\" json-char" + repeat + " \"\\\"\"";
  }

  absl::StatusOr<std::optional<int64_t>> Bound(const Json& schema, const std::string& path,
                                               const char* keyword, bool lower, bool exclusive) {
    if (!schema.contains(keyword)) return std::optional<int64_t>();
    const Json& value = schema[keyword];
    if (!value.is_number()) return Invalid(path, keyword, "a number", value);
    const double number = value.get<double>();
    if (std::fabs(number) > 1e15) return Unsupported(path, keyword, "bounds beyond 1e15");
    // The nearest integer inside the bound.
    double bound = lower ? std::ceil(number) : std::floor(number);
    if (exclusive && bound == number) bound += lower ? 1 : -1;
    return std::optional<int64_t>(static_cast<int64_t>(bound));
  }

  absl::StatusOr<std::string> Integer(const Json& schema, const std::string& path) {
    std::optional<int64_t> low, high;
    LLMRT_ASSIGN_OR_RETURN(low, Bound(schema, path, "minimum", true, false));
    LLMRT_ASSIGN_OR_RETURN(std::optional<int64_t> exclusive_low,
                           Bound(schema, path, "exclusiveMinimum", true, true));
    LLMRT_ASSIGN_OR_RETURN(high, Bound(schema, path, "maximum", false, false));
    LLMRT_ASSIGN_OR_RETURN(std::optional<int64_t> exclusive_high,
                           Bound(schema, path, "exclusiveMaximum", false, true));
    if (exclusive_low.has_value())
      low = low.has_value() ? std::max(*low, *exclusive_low) : exclusive_low;
    if (exclusive_high.has_value()) {
      high = high.has_value() ? std::min(*high, *exclusive_high) : exclusive_high;
    }
    if (!low.has_value() && !high.has_value()) return std::string("json-integer");
    if (low.has_value() && high.has_value() && *low > *high) {
      return absl::InvalidArgumentError(
          absl::StrFormat("JSON schema: at '%s' no integer lies in [%d, %d]",
                          path.empty() ? "#" : "#" + path, *low, *high));
    }
    return NewRule(IntegerRange(low, high));
  }

  const Json& root_;
  const std::string prefix_;
  std::vector<std::string> rules_;
  std::map<std::string, std::string> ref_rules_;
  int next_rule_ = 1;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema) {
  LLMRT_ASSIGN_OR_RETURN(std::string rules, Converter(schema, "").Convert());
  return rules + kBaseRules;
}

absl::StatusOr<std::string> JsonSchemaRules(const nlohmann::ordered_json& schema,
                                            std::string_view prefix) {
  return Converter(schema, prefix).Convert();
}

std::string JsonBaseGbnf() { return kBaseRules; }

std::string JsonObjectGbnf() { return std::string("root ::= json-object\n") + kBaseRules; }

}  // namespace llmrt::grammar
