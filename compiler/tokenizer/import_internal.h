// Shared between the importers of compiler/tokenizer: the tokenizer.json importer takes a parsed
// document, so the importers of vocab.json + merges.txt and tokenizer.model build the document
// transformers would write and reuse its validation instead of duplicating it.
#ifndef LLMC_TOKENIZER_IMPORT_INTERNAL_H_
#define LLMC_TOKENIZER_IMPORT_INTERNAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc::tokenizer_internal {

// Token ids must be below 2^22 (4,194,304): 16x the largest real vocabulary (Gemma: 256,000).
// Every importer checks ids against it before using one as a size or a loop bound, so a corrupt
// id cannot allocate more than ~130 MB of empty pieces or loop for hours (the class of
// llama.cpp's CVE-2025-49847).
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;

// `root` is a tokenizer.json document; `config_json` tokenizer_config.json's text or empty.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerDocument(
    const nlohmann::json& root, std::string_view config_json, std::string_view document_name,
    std::string_view config_json_name);

// Replaces the spec's chat templates with `named` ({name, source}), as transformers builds its
// tokenizer.chat_template dict: a later entry of a name replaces an earlier one; "default" goes
// to chat_template (empty when there is none), every other name to named_chat_templates in the
// order of first appearance.
void SetChatTemplates(const std::vector<std::pair<std::string, std::string>>& named,
                      llmrt::plan::TokenizerSpec& spec);

}  // namespace llmc::tokenizer_internal

#endif  // LLMC_TOKENIZER_IMPORT_INTERNAL_H_
