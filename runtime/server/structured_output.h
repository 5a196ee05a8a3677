// Structured output for the OpenAI endpoints: `response_format` checked and turned into the
// engine's per-request TokenConstraint (a runtime/grammar matcher).
//
// Accepted forms (/v1/chat/completions and /v1/completions):
//   {"type": "text"}                                   no constraint
//   {"type": "json_object"}                            any JSON object
//   {"type": "json_schema", "json_schema": {"name", "schema", "strict"?, "description"?}}
//                                                      the schema (runtime/grammar/json_schema.h;
//                                                      enforced whole whether strict or not)
//   {"type": "grammar", "grammar": "<GBNF>"}           runtime/grammar/grammar.h (start rule root)
//   {"type": "regex", "regex": "<regex>"}              runtime/grammar/regex_to_grammar.h
// Anything else, and any schema keyword or grammar construct we cannot enforce, is a 400 naming
// the field.
//
// Thread-safety: CheckResponseFormat is stateless. StructuredOutput is thread-safe (HTTP handler
// threads share it); the vocabulary is built on first use and compiled grammars are cached.
#ifndef LLMRT_SERVER_STRUCTURED_OUTPUT_H_
#define LLMRT_SERVER_STRUCTURED_OUTPUT_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/grammar/matcher.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/sampling/token_constraint.h"

namespace llmrt::server {

// InvalidArgument naming the field when `response_format` is malformed, or its schema, grammar
// or regex cannot be enforced.
absl::Status CheckResponseFormat(const nlohmann::ordered_json& response_format);

// The GBNF of a checked response_format; "" for {"type": "text"}.
absl::StatusOr<std::string> ResponseFormatGbnf(const nlohmann::ordered_json& response_format);

class StructuredOutput {
 public:
  // `meta` (its tokenizer and vocabulary size) must outlive this object.
  explicit StructuredOutput(const plan::PlanMeta& meta) : meta_(meta) {}

  // The constraint prototype for a checked response_format (null for "text"). Compiled
  // grammars are shared by requests with the same response_format.
  absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>> Constraint(
      const nlohmann::ordered_json& response_format);
  // The constraint prototype of a GBNF grammar (tool_grammar.h's forced calls); errors are
  // prefixed with `field`.
  absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>> GrammarConstraint(
      const std::string& gbnf, std::string_view field);

 private:
  // Compiled grammars kept for reuse (each holds its automaton and mask cache).
  static constexpr size_t kCachedGrammars = 32;

  const plan::PlanMeta& meta_;
  std::mutex mutex_;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::CompiledGrammar>>> cache_;
};

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_STRUCTURED_OUTPUT_H_
