#include "runtime/server/structured_output.h"

#include <string_view>

#include "absl/strings/str_format.h"
#include "runtime/base/status_macros.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/regex_to_grammar.h"

namespace llmrt::server {
namespace {

using Json = nlohmann::ordered_json;

absl::Status FieldError(std::string_view field, std::string_view expected, const Json& found) {
  return absl::InvalidArgumentError(
      absl::StrFormat("'%s' must be %s, found %s", field, expected,
                      found.dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 200)));
}

// Refuses members of `object` outside `known` (an accepted field is never ignored).
absl::Status OnlyFields(const Json& object, std::string_view where,
                        std::initializer_list<std::string_view> known) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool found = false;
    for (std::string_view name : known) found = found || it.key() == name;
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrFormat("'%s.%s' is not supported; leave it out", where, it.key()));
    }
  }
  return absl::OkStatus();
}

const Json* StringMember(const Json& object, const char* name) {
  auto found = object.find(name);
  return found != object.end() && found->is_string() ? &*found : nullptr;
}

absl::Status Prefixed(std::string_view field, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrFormat("'%s': %s", field, status.message()));
}

}  // namespace

absl::StatusOr<std::string> ResponseFormatGbnf(const Json& format) {
  if (!format.is_object()) return FieldError("response_format", "an object", format);
  const Json* type = StringMember(format, "type");
  if (type == nullptr) {
    return FieldError("response_format.type",
                      "\"text\", \"json_object\", \"json_schema\", \"grammar\" or \"regex\"",
                      format.value("type", Json()));
  }
  if (*type == "text" || *type == "json_object") {
    LLMRT_RETURN_IF_ERROR(OnlyFields(format, "response_format", {"type"}));
    return *type == "text" ? std::string() : grammar::JsonObjectGbnf();
  }
  if (*type == "json_schema") {
    LLMRT_RETURN_IF_ERROR(OnlyFields(format, "response_format", {"type", "json_schema"}));
    auto spec = format.find("json_schema");
    if (spec == format.end() || !spec->is_object()) {
      return FieldError("response_format.json_schema",
                        "an object {\"name\", \"schema\", \"strict\"}",
                        spec == format.end() ? Json() : *spec);
    }
    LLMRT_RETURN_IF_ERROR(OnlyFields(*spec, "response_format.json_schema",
                                     {"name", "schema", "strict", "description"}));
    if (spec->contains("name") && !(*spec)["name"].is_string()) {
      return FieldError("response_format.json_schema.name", "a string", (*spec)["name"]);
    }
    if (spec->contains("strict") && !(*spec)["strict"].is_boolean() &&
        !(*spec)["strict"].is_null()) {
      return FieldError("response_format.json_schema.strict", "a boolean", (*spec)["strict"]);
    }
    if (!spec->contains("schema")) {
      return absl::InvalidArgumentError("'response_format.json_schema.schema' is required");
    }
    absl::StatusOr<std::string> gbnf = grammar::JsonSchemaToGbnf((*spec)["schema"]);
    if (!gbnf.ok()) return Prefixed("response_format.json_schema.schema", gbnf.status());
    return gbnf;
  }
  if (*type == "grammar") {
    LLMRT_RETURN_IF_ERROR(OnlyFields(format, "response_format", {"type", "grammar"}));
    const Json* text = StringMember(format, "grammar");
    if (text == nullptr) {
      return FieldError("response_format.grammar", "a GBNF grammar string",
                        format.value("grammar", Json()));
    }
    const std::string gbnf = text->get<std::string>();
    if (absl::Status status = grammar::ParseGrammar(gbnf).status(); !status.ok()) {
      return Prefixed("response_format.grammar", status);
    }
    return gbnf;
  }
  if (*type == "regex") {
    LLMRT_RETURN_IF_ERROR(OnlyFields(format, "response_format", {"type", "regex"}));
    const Json* regex = StringMember(format, "regex");
    if (regex == nullptr) {
      return FieldError("response_format.regex", "a regular expression string",
                        format.value("regex", Json()));
    }
    absl::StatusOr<std::string> body =
        grammar::RegexToGbnf(regex->get<std::string>(), /*json_string=*/false);
    if (!body.ok()) return Prefixed("response_format.regex", body.status());
    return "root ::= " + *body + "\n";
  }
  return FieldError("response_format.type",
                    "\"text\", \"json_object\", \"json_schema\", \"grammar\" or \"regex\"", *type);
}

absl::Status CheckResponseFormat(const Json& format) { return ResponseFormatGbnf(format).status(); }

absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>> StructuredOutput::Constraint(
    const Json& format) {
  LLMRT_ASSIGN_OR_RETURN(const std::string gbnf, ResponseFormatGbnf(format));
  if (gbnf.empty()) return std::shared_ptr<const sampling::TokenConstraint>();
  return GrammarConstraint(gbnf, "response_format");
}

absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>>
StructuredOutput::GrammarConstraint(const std::string& gbnf, std::string_view field) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (vocabulary_ == nullptr) {
    LLMRT_ASSIGN_OR_RETURN(
        vocabulary_, grammar::TokenVocabulary::Create(
                         meta_.tokenizer(), static_cast<int32_t>(meta_.config().vocab_size())));
  }
  std::shared_ptr<const grammar::CompiledGrammar> compiled;
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->first != gbnf) continue;
    // A grammar whose automaton reached its state limit is rebuilt from scratch.
    if (!it->second->Saturated()) compiled = it->second;
    cache_.erase(it);
    break;
  }
  if (compiled == nullptr) {
    absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> made =
        grammar::CompileGrammar(gbnf, vocabulary_);
    if (!made.ok()) return Prefixed(field, made.status());
    compiled = *std::move(made);
  }
  cache_.emplace_front(gbnf, compiled);
  if (cache_.size() > kCachedGrammars) cache_.pop_back();
  return std::shared_ptr<const sampling::TokenConstraint>(
      std::make_shared<grammar::GrammarMatcher>(compiled));
}

}  // namespace llmrt::server
