#include "compiler/tokenizer/import_tokenizer.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llmc {
namespace {

using llmrt::plan::TokenizerSpec;

// A small but complete tokenizer.json; tests replace the @...@ markers.
constexpr char kTemplate[] = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 6, "content": "<|end|>", "single_word": false, "lstrip": true, "rstrip": true,
     "normalized": false, "special": true}
  ],
  "normalizer": @NORMALIZER@,
  "pre_tokenizer": null,
  "post_processor": @POST@,
  "decoder": @DECODER@,
  "model": {"type": "@MODEL@", "dropout": null, "unk_token": "<unk>",
            "continuing_subword_prefix": null, "end_of_word_suffix": null, "fuse_unk": true,
            "byte_fallback": false,
            "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "c": 4, "abc": 5},
            "merges": @MERGES@}
})";

std::string MakeJson(std::string normalizer = "null", std::string merges = R"(["a b", "ab c"])",
                     std::string decoder = "null", std::string post = "null",
                     std::string model = "BPE") {
  return absl::StrReplaceAll(kTemplate, {{"@NORMALIZER@", normalizer},
                                         {"@MERGES@", merges},
                                         {"@DECODER@", decoder},
                                         {"@POST@", post},
                                         {"@MODEL@", model}});
}

std::string ErrorOf(const std::string& json) {
  auto spec = ImportTokenizerFromJson(json, "");
  return spec.ok() ? "(no error)" : std::string(spec.status().message());
}

TEST(ImportTokenizerTest, Stories260K) {
  auto spec = ImportTokenizer(LLMC_SOURCE_DIR "/tests/data/stories260K");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), TokenizerSpec::BPE);
  EXPECT_EQ(spec->pieces_size(), 512);
  EXPECT_EQ(spec->pieces(1), "<s>");
  EXPECT_EQ(spec->pieces(3), "<0x00>");
  EXPECT_EQ(spec->merges_size(), 165);
  EXPECT_TRUE(spec->byte_fallback());
  EXPECT_TRUE(spec->fuse_unk());
  EXPECT_EQ(spec->unk_id(), 0);
  EXPECT_EQ(spec->bos_id(), 1);
  EXPECT_EQ(spec->eos_id(), 2);
  EXPECT_TRUE(spec->add_bos_token());
  EXPECT_FALSE(spec->add_eos_token());
  ASSERT_EQ(spec->normalizers_size(), 4);
  EXPECT_EQ(spec->normalizers(0).kind(), TokenizerSpec::Normalizer::REPLACE_REGEX);
  EXPECT_EQ(spec->normalizers(2).kind(), TokenizerSpec::Normalizer::PREPEND);
  EXPECT_EQ(spec->normalizers(3).kind(), TokenizerSpec::Normalizer::REPLACE_STRING);
  ASSERT_EQ(spec->decoders_size(), 4);
  EXPECT_EQ(spec->decoders(3).kind(), TokenizerSpec::Decoder::STRIP);
  EXPECT_EQ(spec->decoders(3).strip_start(), 1000000);
  ASSERT_EQ(spec->post_template_size(), 2);
  EXPECT_EQ(spec->post_template(0).special_ids(0), 1);
  EXPECT_TRUE(spec->post_template(1).is_sequence());
  ASSERT_EQ(spec->added_tokens_size(), 3);
  EXPECT_TRUE(spec->added_tokens(0).in_model_vocab());
}

TEST(ImportTokenizerTest, SmallTokenizerAndBothMergeForms) {
  for (const std::string merges : {R"(["a b", "ab c"])", R"([["a", "b"], ["ab", "c"]])"}) {
    auto spec = ImportTokenizerFromJson(MakeJson("null", merges), "");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->pieces_size(), 7);
    EXPECT_EQ(spec->pieces(6), "<|end|>");
    ASSERT_EQ(spec->merges_size(), 2);
    EXPECT_EQ(spec->merges(1).left(), 3);
    EXPECT_EQ(spec->merges(1).right(), 4);
    EXPECT_EQ(spec->merges(1).result(), 5);
    ASSERT_EQ(spec->added_tokens_size(), 2);
    EXPECT_FALSE(spec->added_tokens(1).in_model_vocab());
    EXPECT_TRUE(spec->added_tokens(1).lstrip());
    EXPECT_TRUE(spec->added_tokens(1).rstrip());
    EXPECT_EQ(spec->bos_id(), -1);
  }
}

TEST(ImportTokenizerTest, ConfigGivesSpecialTokensAndTemplate) {
  const std::string config = R"({"add_bos_token": false, "add_eos_token": true,
      "bos_token": {"content": "<unk>"}, "eos_token": "<|end|>",
      "chat_template": "{{ messages }}"})";
  auto spec = ImportTokenizerFromJson(MakeJson(), config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->bos_id(), 0);
  EXPECT_EQ(spec->eos_id(), 6);
  EXPECT_TRUE(spec->add_eos_token());
  EXPECT_EQ(spec->chat_template(), "{{ messages }}");

  EXPECT_NE(ImportTokenizerFromJson(MakeJson(), R"({"eos_token": "<nope>"})")
                .status()
                .message()
                .find("tokenizer_config.json: eos_token: \"<nope>\" is not in the vocabulary"),
            std::string::npos);
}

TEST(ImportTokenizerTest, UnsupportedComponentsAreNamed) {
  EXPECT_EQ(ErrorOf(MakeJson(R"({"type": "Sequence", "normalizers": [
                {"type": "NFC"}, {"type": "BertNormalizer", "lowercase": true}]})")),
            "tokenizer.json: normalizer.normalizers[1]: normalizer \"BertNormalizer\" is not "
            "supported (supported: Sequence, Replace, Prepend, NFC, NFKC, Lowercase, Strip)");
  EXPECT_NE(ErrorOf(MakeJson("null", R"(["a b"])", R"({"type": "WordPiece"})"))
                .find("decoder \"WordPiece\" is not supported"),
            std::string::npos);
  // Every post-processor type HF has is supported; an unknown one and a malformed one are named.
  EXPECT_NE(ErrorOf(MakeJson("null", R"(["a b"])", "null", R"({"type": "PairProcessing"})"))
                .find("post_processor \"PairProcessing\" is not supported"),
            std::string::npos);
  EXPECT_NE(ErrorOf(MakeJson("null", R"(["a b"])", "null",
                             R"({"type": "RobertaProcessing", "sep": ["</s>", 2]})"))
                .find("post_processor.cls: expected [\"token\", id], found nothing"),
            std::string::npos);
  EXPECT_NE(ErrorOf(MakeJson("null", R"(["a b"])", "null", "null", "WordPiece"))
                .find("model \"WordPiece\" is not supported (supported: BPE)"),
            std::string::npos);
  std::string with_pre = MakeJson();
  with_pre = absl::StrReplaceAll(
      with_pre, {{R"("pre_tokenizer": null)", R"("pre_tokenizer": {"type": "BertPreTokenizer"})"}});
  EXPECT_NE(ErrorOf(with_pre).find("pre_tokenizer \"BertPreTokenizer\" is not supported"),
            std::string::npos);
  std::string with_dropout =
      absl::StrReplaceAll(MakeJson(), {{R"("dropout": null)", R"("dropout": 0.1)"}});
  EXPECT_NE(ErrorOf(with_dropout).find("model.dropout"), std::string::npos);
  std::string with_truncation = absl::StrReplaceAll(
      MakeJson(), {{R"("truncation": null)", R"("truncation": {"max_length": 8})"}});
  EXPECT_NE(ErrorOf(with_truncation).find("truncation is not supported"), std::string::npos);
}

TEST(ImportTokenizerTest, BadMergesAreNamed) {
  EXPECT_EQ(ErrorOf(MakeJson("null", R"(["a b", "ab zz"])")),
            "tokenizer.json: model.merges[1]: merge \"ab zz\": \"zz\" is not in the vocabulary");
  EXPECT_EQ(ErrorOf(MakeJson("null", R"(["b c"])")),
            "tokenizer.json: model.merges[0]: merge \"b c\": \"bc\" is not in the vocabulary");
  EXPECT_NE(ErrorOf(MakeJson("null", R"(["a  b"])")).find("not two pieces"), std::string::npos);
  EXPECT_NE(ErrorOf(MakeJson("null", R"([["a"]])")).find("model.merges[0]"), std::string::npos);
}

TEST(ImportTokenizerTest, IdsMustBeDense) {
  std::string gap = absl::StrReplaceAll(MakeJson(), {{R"("abc": 5})", R"("abc": 9})"}});
  EXPECT_NE(ErrorOf(gap).find("id 5 has no piece"), std::string::npos) << ErrorOf(gap);
  std::string clash = absl::StrReplaceAll(MakeJson(), {{R"("abc": 5})", R"("abc": 4})"}});
  EXPECT_NE(ErrorOf(clash).find("id 4 is given to both"), std::string::npos) << ErrorOf(clash);
}

TEST(ImportTokenizerTest, BadJsonGivesLineAndColumn) {
  const std::string error = ErrorOf("{\n  \"model\": {,\n}");
  EXPECT_NE(error.find("tokenizer.json: invalid JSON"), std::string::npos) << error;
  EXPECT_NE(error.find("line 2, column 13"), std::string::npos) << error;
  EXPECT_NE(ErrorOf("[1, 2]").find("expected an object"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"model": {"vocab": {"a": "zero"}}})").find("model.vocab"),
            std::string::npos);
}

// nlohmann reports a number too large for a double as out_of_range, not parse_error; found by
// llmc_tokenizer_fuzzer. Both files, and nesting deep enough to overflow the stack, are errors.
TEST(ImportTokenizerTest, OverflowingNumbersAndDeepNestingAreErrors) {
  const std::string huge = ErrorOf(R"({"model": {"vocab": {"a": 1e99999}}})");
  EXPECT_NE(huge.find("tokenizer.json: invalid JSON"), std::string::npos) << huge;
  EXPECT_NE(huge.find("number overflow"), std::string::npos) << huge;
  const std::string deep = ErrorOf(std::string(100000, '['));
  EXPECT_NE(deep.find("nested deeper than"), std::string::npos) << deep;
  auto vocab = ImportVocabMerges(R"({"a": 0, "b": 1, "ab": 1e99999})", "a b\n", "", "");
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("(vocab.json): invalid JSON"), std::string::npos)
      << vocab.status();
}

TEST(ImportTokenizerTest, MissingFilesAreNamed) {
  const std::string dir = testing::TempDir() + "/import_tokenizer_missing";
  std::remove((dir + "/vocab.json").c_str());
  ::mkdir(dir.c_str(), 0755);
  auto spec = ImportTokenizer(dir);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find(dir + ": no tokenizer: expected tokenizer.json"),
            std::string::npos)
      << spec.status();

  std::ofstream(dir + "/vocab.json") << "{}";
  spec = ImportTokenizer(dir);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("vocab.json needs merges.txt"), std::string::npos)
      << spec.status();
  std::remove((dir + "/vocab.json").c_str());
}

// vocab.json + merges.txt: the family comes from tokenizer_class, the pieces from the files.
TEST(ImportVocabMergesTest, BuildsQwen2AndGpt2Families) {
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<|endoftext|>": 4})";
  auto gpt2 = ImportVocabMerges(vocab, "#version: 0.2\na b\n", "", "");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  ASSERT_EQ(gpt2->pre_tokenizers_size(), 1);
  EXPECT_EQ(gpt2->pre_tokenizers(0).kind(), TokenizerSpec::PreTokenizer::BYTE_LEVEL);
  EXPECT_TRUE(gpt2->pre_tokenizers(0).use_regex());
  ASSERT_EQ(gpt2->merges_size(), 1);
  EXPECT_EQ(gpt2->merges(0).result(), 2);
  ASSERT_EQ(gpt2->added_tokens_size(), 1);  // <|endoftext|>: unk, bos and eos of GPT2Tokenizer
  EXPECT_EQ(gpt2->added_tokens(0).id(), 4);
  EXPECT_TRUE(gpt2->added_tokens(0).special());

  auto qwen2 = ImportVocabMerges(vocab, "a b\r\n", R"({"<|im_end|>": 5})",
                                 R"({"tokenizer_class": "Qwen2TokenizerFast",
                                     "eos_token": "<|im_end|>"})");
  ASSERT_TRUE(qwen2.ok()) << qwen2.status();
  ASSERT_EQ(qwen2->normalizers_size(), 1);
  EXPECT_EQ(qwen2->normalizers(0).kind(), TokenizerSpec::Normalizer::NFC);
  ASSERT_EQ(qwen2->pre_tokenizers_size(), 2);
  EXPECT_EQ(qwen2->pre_tokenizers(0).kind(), TokenizerSpec::PreTokenizer::SPLIT_REGEX);
  EXPECT_EQ(qwen2->pieces_size(), 6);
  EXPECT_EQ(qwen2->eos_id(), 5);
}

TEST(ImportVocabMergesTest, ErrorsNameTheProblem) {
  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  auto bad_line = ImportVocabMerges(vocab, "#version: 0.2\na b c\n", "", "", "", "gpt");
  EXPECT_FALSE(bad_line.ok());
  EXPECT_NE(bad_line.status().message().find("line 2"), std::string::npos) << bad_line.status();
  auto unknown = ImportVocabMerges(vocab, "a b\n", "", R"({"tokenizer_class": "BertTokenizer"})");
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("\"BertTokenizer\""), std::string::npos)
      << unknown.status();
  auto missing = ImportVocabMerges(vocab, "a x\n", "", "");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("\"x\" is not in the vocabulary"), std::string::npos)
      << missing.status();
}

std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

std::string Bytes(int field, const std::string& payload) {
  return Varint(field << 3 | 2) + Varint(payload.size()) + payload;
}

std::string VarintField(int field, uint64_t value) { return Varint(field << 3) + Varint(value); }

// A SentencePiece ModelProto with `pieces` (piece, type) and trainer_spec.model_type.
std::string SentencePieceModel(const std::vector<std::pair<std::string, int>>& pieces,
                               int model_type) {
  std::string proto;
  for (const auto& [piece, type] : pieces) {
    proto += Bytes(1, Bytes(1, piece) + VarintField(3, type));
  }
  proto += Bytes(2, VarintField(3, model_type));
  return proto;
}

TEST(ImportTokenizerModelTest, SentencePieceBpeAsTransformersLlamaTokenizer) {
  const std::string metaspace = "\xE2\x96\x81";
  const std::string model = SentencePieceModel({{"<unk>", 2},
                                                {"<s>", 3},
                                                {"</s>", 3},
                                                {metaspace, 1},
                                                {"a", 1},
                                                {metaspace + "a", 1},
                                                {"<tool>", 4}},
                                               /*model_type=*/2);
  auto spec = ImportTokenizerModel(model, R"({"add_bos_token": true, "legacy": false})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->byte_fallback());
  EXPECT_EQ(spec->bos_id(), 1);
  EXPECT_EQ(spec->eos_id(), 2);
  ASSERT_EQ(spec->pre_tokenizers_size(), 1);
  EXPECT_EQ(spec->pre_tokenizers(0).prepend_scheme(), "first");
  ASSERT_EQ(spec->merges_size(), 1);  // "▁a" = "▁" + "a"
  EXPECT_EQ(spec->merges(0).result(), 5);
  ASSERT_EQ(spec->post_template_size(), 2);
  EXPECT_EQ(spec->post_template(0).special_ids(0), 1);
  ASSERT_EQ(spec->added_tokens_size(), 4);  // <unk>, <s>, </s> special; <tool> not special
  EXPECT_EQ(spec->added_tokens(3).content(), "<tool>");
  EXPECT_FALSE(spec->added_tokens(3).special());

  auto legacy = ImportTokenizerModel(model, R"({"legacy": true})");
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  EXPECT_EQ(legacy->pre_tokenizers(0).prepend_scheme(), "always");
  EXPECT_EQ(legacy->post_template_size(), 1);  // no BOS unless add_bos_token
}

TEST(ImportTokenizerModelTest, RejectsWhatItCannotImport) {
  auto unigram = ImportTokenizerModel(SentencePieceModel({{"<unk>", 2}, {"a", 1}}, 1), "");
  EXPECT_FALSE(unigram.ok());
  EXPECT_NE(unigram.status().message().find("model_type 1 (Unigram) is not supported"),
            std::string::npos)
      << unigram.status();
  auto truncated = ImportTokenizerModel(SentencePieceModel({{"abc", 1}}, 2).substr(0, 4), "");
  EXPECT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("malformed"), std::string::npos)
      << truncated.status();
  auto neither = ImportTokenizerModel("hello world\n", "");
  EXPECT_FALSE(neither.ok());
  EXPECT_NE(neither.status().message().find("neither a SentencePiece model"), std::string::npos)
      << neither.status();
  auto bad_rank = ImportTokenizerModel("YQ== 0\nYg== x\n", "");
  EXPECT_FALSE(bad_rank.ok());
  EXPECT_NE(bad_rank.status().message().find("line 2"), std::string::npos) << bad_rank.status();
}

TEST(ImportTokenizerModelTest, TiktokenAsTransformersTikTokenConverter) {
  // a=0 b=1 ab=2 then special tokens from added_tokens_decoder with a gap at 4.
  auto spec = ImportTokenizerModel("YQ== 0\nYg== 1\nYWI= 2\n", R"({"added_tokens_decoder": {
      "3": {"content": "<|bos|>", "special": true},
      "5": {"content": "<|eot|>", "special": true}}, "bos_token": "<|bos|>"})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->ignore_merges());
  ASSERT_EQ(spec->pieces_size(), 6);
  EXPECT_EQ(spec->pieces(4), "<|reserved_token_4|>");
  EXPECT_EQ(spec->bos_id(), 3);
  ASSERT_EQ(spec->merges_size(), 1);
  EXPECT_EQ(spec->post_template_size(), 0);  // no BOS unless add_bos_token
}

// The class of llama.cpp's CVE-2025-49847 (an overflow while loading a vocabulary): huge ids
// and lengths in every tokenizer file are errors. The tiktoken case looped once per id up to
// the largest added_tokens_decoder key (10^12 here) until it ran out of memory; added_tokens.json
// ids of INT64_MAX overflowed `id + 1`.
TEST(ImportTokenizerModelTest, HugeIdsAndLengthsAreErrors) {
  auto tiktoken = ImportTokenizerModel(
      "YQ== 0\nYg== 1\n",
      R"({"added_tokens_decoder": {"1000000000000": {"content": "<|x|>", "special": true}}})");
  ASSERT_FALSE(tiktoken.ok());
  EXPECT_NE(tiktoken.status().message().find("out of range"), std::string::npos)
      << tiktoken.status();
  auto tiktoken_rank = ImportTokenizerModel("YQ== 9223372036854775807\n", "");
  EXPECT_FALSE(tiktoken_rank.ok());

  const std::string vocab = R"({"a": 0, "b": 1, "ab": 2})";
  for (const char* added : {R"({"<x>": 9223372036854775807})", R"({"<x>": 18446744073709551615})",
                            R"({"<x>": -1})", R"({"<x>": 4194304})"}) {
    auto merges = ImportVocabMerges(vocab, "a b\n", added, "");
    ASSERT_FALSE(merges.ok()) << added;
    EXPECT_NE(merges.status().message().find("expected an id"), std::string::npos)
        << merges.status();
  }

  // tokenizer.json: ids past 2^22 in the vocabulary and the added tokens.
  for (const std::string& json :
       {absl::StrReplaceAll(MakeJson(), {{R"("abc": 5)", R"("abc": 2147483647)"}}),
        absl::StrReplaceAll(MakeJson(), {{R"({"id": 6,)", R"({"id": 4194304,)"}})}) {
    auto spec = ImportTokenizerFromJson(json, "");
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find("out of range"), std::string::npos) << spec.status();
  }

  // tokenizer.model: a piece whose length field claims 2^62 bytes, and one claiming more bytes
  // than the file has left.
  const std::string huge_length = Varint(1 << 3 | 2) + Varint(uint64_t{1} << 62) + "abc";
  const std::string past_end =
      Varint(1 << 3 | 2) + Varint(10) + Varint(1 << 3 | 2) + Varint(1000) + "abcdefg";
  for (const std::string& model : {huge_length, past_end}) {
    auto spec = ImportTokenizerModel(model, "");
    ASSERT_FALSE(spec.ok());
    EXPECT_NE(spec.status().message().find("malformed"), std::string::npos) << spec.status();
  }
}

// The chat templates transformers loads from a model folder (tokenizer_config.json's string or
// list, chat_template.jinja, additional_chat_templates/*.jinja), recorded by
// runtime/template/testdata/make_reference.py: the plan must carry the same set.
TEST(ImportTokenizerTest, ChatTemplatesAsTransformersLoadsThem) {
  std::ifstream file(LLMC_SOURCE_DIR "/runtime/template/testdata/chat_template_selection.json");
  ASSERT_TRUE(file.good());
  const nlohmann::ordered_json reference = nlohmann::ordered_json::parse(file);
  ASSERT_GE(reference["scenarios"].size(), 8u);
  for (const auto& scenario : reference["scenarios"]) {
    const std::string name = scenario["name"].get<std::string>();
    SCOPED_TRACE(name);
    const std::string dir = testing::TempDir() + "/chat_templates_" + name;
    ::mkdir(dir.c_str(), 0755);
    ::mkdir((dir + "/additional_chat_templates").c_str(), 0755);
    std::ofstream(dir + "/tokenizer.json") << reference["tokenizer_json"].dump();
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    if (!scenario["config_chat_template"].is_null()) {
      config["chat_template"] = scenario["config_chat_template"];
    }
    std::ofstream(dir + "/tokenizer_config.json") << config.dump();
    for (const auto& [path, text] : scenario["files"].items()) {
      std::ofstream(dir + "/" + path) << text.get<std::string>();
    }
    absl::StatusOr<TokenizerSpec> spec = ImportTokenizer(dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    // transformers keeps a lone "default" as a plain string, several templates as a dict.
    nlohmann::ordered_json loaded;
    if (spec->named_chat_templates().empty()) {
      loaded = spec->chat_template();
    } else {
      loaded = nlohmann::ordered_json::object();
      if (!spec->chat_template().empty()) loaded["default"] = spec->chat_template();
      for (const auto& named : spec->named_chat_templates()) loaded[named.name()] = named.source();
    }
    // A dict holding only "default" renders as that one string does (a list in the config stays
    // a dict in transformers). Order is not part of the contract (transformers globs the folder
    // in directory order).
    nlohmann::json expected = scenario["loaded"];
    if (expected.is_object() && expected.size() == 1 && expected.contains("default")) {
      expected = expected["default"];
    }
    EXPECT_EQ(nlohmann::json(loaded), expected);
    for (const char* file_name :
         {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
      std::remove((dir + "/" + file_name).c_str());
    }
  }
}

TEST(ImportTokenizerTest, ChatTemplateListErrorsNameTheEntry) {
  auto error = [](const std::string& chat_template) {
    auto spec = ImportTokenizerFromJson(MakeJson(), R"({"chat_template": )" + chat_template + "}");
    return spec.ok() ? "(no error)" : std::string(spec.status().message());
  };
  EXPECT_EQ(error(R"([{"name": "default", "template": 3}])"),
            "tokenizer_config.json: chat_template[0].template: expected a string, found number");
  EXPECT_EQ(error(R"([{"name": "default", "template": "x"}, "y"])"),
            "tokenizer_config.json: chat_template[1]: expected an object {\"name\", "
            "\"template\"}, found string");
  EXPECT_EQ(error(R"([{"template": "x"}])"),
            "tokenizer_config.json: chat_template[0].name: expected a string, found nothing");
  EXPECT_EQ(error("7"),
            "tokenizer_config.json: chat_template: expected a string or a list of {\"name\", "
            "\"template\"}, found number");
}

}  // namespace
}  // namespace llmc
