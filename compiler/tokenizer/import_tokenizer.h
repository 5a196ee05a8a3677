// Import of a HuggingFace tokenizer into the plan's TokenizerSpec (compile time only; the
// runtime never parses JSON).
//
// Reads `tokenizer.json` (model, added tokens, normalizer, pre-tokenizer, post-processor,
// decoder) and, when present, `tokenizer_config.json` (add_bos_token, add_eos_token, bos/eos
// tokens, chat_template), `chat_template.jinja` and `additional_chat_templates/*.jinja`. Every
// component type or option that the
// runtime does not execute exactly is an error naming it; nothing is approximated.
#ifndef LLMC_TOKENIZER_IMPORT_TOKENIZER_H_
#define LLMC_TOKENIZER_IMPORT_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// The tokenizer files of a model directory; an empty path means the file is absent.
struct TokenizerFiles {
  std::string model_dir;  // for error messages only
  std::string tokenizer_json;
  std::string vocab_json;  // byte-level BPE (GPT-2, Qwen2) with merges_txt
  std::string merges_txt;
  std::string added_tokens_json;  // {content: id}, read when the config has no added_tokens_decoder
  std::string tokenizer_model;    // SentencePiece ModelProto or tiktoken ranks (Llama 3)
  std::string tokenizer_config_json;
  std::string config_json;  // the model's config.json (model_type picks a family)
  std::string chat_template_jinja;
  // additional_chat_templates/NAME.jinja, sorted by path: the named templates of transformers 5.
  std::vector<std::string> additional_chat_templates;
};

// The files of `model_dir` that exist. tokenizer.json wins over the others, as in transformers.
TokenizerFiles FindTokenizerFiles(const std::string& model_dir);

// Imports what `files` names, in transformers' order of preference: tokenizer.json; else
// vocab.json + merges.txt (GPT2Tokenizer / Qwen2Tokenizer by tokenizer_config's tokenizer_class
// or config.json's model_type); else tokenizer.model, which is a tiktoken rank file (Llama 3,
// as TikTokenConverter converts it) or a SentencePiece BPE model (as transformers'
// LlamaTokenizer builds it: Metaspace with prepend_scheme "first" unless `legacy`, byte
// fallback, <s>/</s> per add_bos_token/add_eos_token). No usable file is an error naming what
// was looked for.
// Chat templates as transformers' from_pretrained picks them: when chat_template.jinja or any
// additional_chat_templates/NAME.jinja exists, those files are the templates (chat_template.jinja
// is "default", each other file the template NAME) and tokenizer_config.json's "chat_template"
// is not used at all; otherwise the config's string, or its list of named templates.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerFiles(const TokenizerFiles& files);

// ImportTokenizerFiles(FindTokenizerFiles(model_dir)).
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizer(const std::string& model_dir);

// The importers of the files other than tokenizer.json, from their contents; `config_json`
// (tokenizer_config.json) and `added_tokens_json` may be empty. `name` prefixes error messages.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportVocabMerges(
    std::string_view vocab_json, std::string_view merges_txt, std::string_view added_tokens_json,
    std::string_view config_json, std::string_view model_type = "", std::string_view name = "");
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerModel(std::string_view model_bytes,
                                                                std::string_view config_json,
                                                                std::string_view name = "");

// The same from file contents; `config_json` may be empty (no tokenizer_config.json). The names
// are used in error messages.
absl::StatusOr<llmrt::plan::TokenizerSpec> ImportTokenizerFromJson(
    std::string_view tokenizer_json, std::string_view config_json,
    std::string_view tokenizer_json_name = "tokenizer.json",
    std::string_view config_json_name = "tokenizer_config.json");

}  // namespace llmc

#endif  // LLMC_TOKENIZER_IMPORT_TOKENIZER_H_
