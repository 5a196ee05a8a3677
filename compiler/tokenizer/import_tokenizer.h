// Import of a HuggingFace tokenizer into the plan's TokenizerSpec (compile time only; the
// runtime never parses JSON).
//
// Reads `tokenizer.json` (model, added tokens, normalizer, pre-tokenizer, post-processor,
// decoder) and, when present, `tokenizer_config.json` (add_bos_token, add_eos_token, bos/eos
// tokens, chat_template) and `chat_template.jinja`. Every component type or option that the
// runtime does not execute exactly is an error naming it; nothing is approximated.
#ifndef LLMC_TOKENIZER_IMPORT_TOKENIZER_H_
#define LLMC_TOKENIZER_IMPORT_TOKENIZER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// `model_dir` is a HuggingFace model directory. Missing tokenizer.json is an error naming the
// file (vocab.json + merges.txt and tokenizer.model are not imported yet).
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizer(const std::string& model_dir);

// The same from file contents; `config_json` may be empty (no tokenizer_config.json). The names
// are used in error messages.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerFromJson(
    std::string_view tokenizer_json, std::string_view config_json,
    std::string_view tokenizer_json_name = "tokenizer.json",
    std::string_view config_json_name = "tokenizer_config.json");

}  // namespace llmc

#endif  // LLMC_TOKENIZER_IMPORT_TOKENIZER_H_
