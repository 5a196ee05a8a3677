// Test-only: JSON (nlohmann) to template Values, for the jinja2-made references. The library
// itself never parses JSON.
#ifndef LLMRT_TEMPLATE_TEST_JSON_H_
#define LLMRT_TEMPLATE_TEST_JSON_H_

#include <fstream>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"
#include "runtime/template/value.h"

namespace llmrt::jinja {

// Key order matters (dicts keep insertion order and tojson prints it): ordered_json keeps it.
inline nlohmann::ordered_json ReadJsonFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return nlohmann::ordered_json::parse(buffer.str());
}

inline Value JsonToValue(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Value::Items items;
      for (const auto& item : json) items.push_back(JsonToValue(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value::Entries entries;
      for (auto it = json.begin(); it != json.end(); ++it) {
        entries.emplace_back(Value::String(it.key()), JsonToValue(it.value()));
      }
      return Value::Dict(std::move(entries));
    }
    default:
      return Value::None();
  }
}

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_TEST_JSON_H_
