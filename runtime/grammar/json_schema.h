// JSON Schema to GBNF (grammar.h) for `response_format` json_schema / json_object.
//
// Output layout: compact JSON with json.dumps' default separators, ", " between items and ": "
// after keys, and no other whitespace (xgrammar's any_whitespace=False layout). Free whitespace
// would let a weak model spend its whole budget on spaces and newlines; one fixed layout keeps
// the output short and the automaton small. Object properties come in the schema's order.
// Number exponents have at most two digits, so every number a grammar allows is a finite double
// (1e400 is valid JSON that parsers refuse or make infinite).
//
// Supported keywords:
//   type (a name or a list), enum, const, anyOf, oneOf (as anyOf: the grammar cannot exclude
//   the overlap), allOf with one entry, $ref to "#", "#/$defs/..." or "#/definitions/..."
//   (recursion included), $defs / definitions;
//   object: properties, required, additionalProperties (false, true, absent = true, or a
//     schema; an additional key never repeats a declared property name);
//   array: items, minItems, maxItems;
//   string: minLength, maxLength, pattern (regex_to_grammar.h; matched whole), format: date,
//     time, date-time, email, uuid, uri (the shapes of RFC 3339 / 4122 / 3986 a regex can
//     state; email is the dot-atom form);
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum;
//   annotations that do not constrain: title, description, default, examples, $schema, $id,
//     $comment, deprecated, readOnly, writeOnly.
// Any other keyword, or a supported one in a combination the grammar cannot express (number
// bounds on non-integers, pattern together with a length, sibling keywords next to anyOf), is
// InvalidArgument naming the keyword and where it is (a JSON pointer into the schema) — a
// schema is never enforced only in part.
//
// Thread-safety: stateless.
#ifndef LLMRT_GRAMMAR_JSON_SCHEMA_H_
#define LLMRT_GRAMMAR_JSON_SCHEMA_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llmrt::grammar {

// GBNF whose start rule `root` matches exactly the JSON texts (in the layout above) that
// validate against `schema`.
absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema);

// The rules of `schema` alone, for grammars that hold several schemas (one per tool): the start
// rule is PREFIXroot, helpers PREFIXs1, PREFIXs2, ...; they use the shared JSON building blocks
// (json-string, json-value, json-object, ...), which JsonBaseGbnf() defines once per grammar.
// `prefix`: rule-name characters [a-zA-Z0-9_-], distinct per schema.
absl::StatusOr<std::string> JsonSchemaRules(const nlohmann::ordered_json& schema,
                                            std::string_view prefix);
std::string JsonBaseGbnf();

// GBNF for any JSON object (response_format json_object), in the same layout.
std::string JsonObjectGbnf();

}  // namespace llmrt::grammar

#endif  // LLMRT_GRAMMAR_JSON_SCHEMA_H_
