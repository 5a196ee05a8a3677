// Shared between the importers of compiler/tokenizer: the tokenizer.json importer takes a parsed
// document, so the importers of vocab.json + merges.txt and tokenizer.model build the document
// transformers would write and reuse its validation instead of duplicating it.
#ifndef LLMC_TOKENIZER_IMPORT_INTERNAL_H_
#define LLMC_TOKENIZER_IMPORT_INTERNAL_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::tokenizer_internal {

// `root` is a tokenizer.json document; `config_json` tokenizer_config.json's text or empty.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerDocument(
    const nlohmann::json& root, std::string_view config_json, std::string_view document_name,
    std::string_view config_json_name);

}  // namespace llmc::tokenizer_internal

#endif  // LLMC_TOKENIZER_IMPORT_INTERNAL_H_
