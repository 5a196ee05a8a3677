#include "runtime/server/template_input.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

namespace llmrt::server {

jinja::Value TemplateValue(const Json& json) {
  switch (json.type()) {
    case Json::value_t::boolean:
      return jinja::Value::Bool(json.get<bool>());
    case Json::value_t::number_integer:
      return jinja::Value::Int(json.get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return jinja::Value::Float(static_cast<double>(value));
      }
      return jinja::Value::Int(static_cast<int64_t>(value));
    }
    case Json::value_t::number_float:
      return jinja::Value::Float(json.get<double>());
    case Json::value_t::string:
      return jinja::Value::String(json.get<std::string>());
    case Json::value_t::array: {
      jinja::Value::Items items;
      for (const Json& item : json) items.push_back(TemplateValue(item));
      return jinja::Value::List(std::move(items));
    }
    case Json::value_t::object: {
      jinja::Value::Entries entries;
      for (auto it = json.begin(); it != json.end(); ++it) {
        entries.emplace_back(jinja::Value::String(it.key()), TemplateValue(it.value()));
      }
      return jinja::Value::Dict(std::move(entries));
    }
    default:
      return jinja::Value::None();
  }
}

std::vector<jinja::ChatMessage> ChatMessages(const Json& messages) {
  std::vector<jinja::ChatMessage> converted;
  converted.reserve(messages.size());
  for (const Json& message : messages) {
    jinja::ChatMessage chat_message;
    chat_message.content = jinja::Value::None();  // left out unless given (chat.h)
    for (auto it = message.begin(); it != message.end(); ++it) {
      if (it.key() == "role") {
        chat_message.role = it.value().get<std::string>();
      } else if (it.key() == "content") {
        chat_message.content = TemplateValue(it.value());
      } else {
        chat_message.fields.emplace_back(it.key(), TemplateValue(it.value()));
      }
    }
    converted.push_back(std::move(chat_message));
  }
  return converted;
}

}  // namespace llmrt::server
