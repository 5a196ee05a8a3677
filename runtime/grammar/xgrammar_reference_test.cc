// Our token masks against Python xgrammar's on real tokenizers: for every state of every
// document in testdata/xgrammar_masks.json (made by testdata/make_xgrammar_masks.py), the set
// of allowed tokens (special added tokens left out on both sides) must be the same, and the end
// of sequence must be allowed exactly where xgrammar allows its stop token. The tokenizers are
// imported through llmc's importer, as a plan gets them; schemas go through our own converter
// and xgrammar's, so this also checks that both accept the same JSON in the compact layout.
#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"

namespace llmrt::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::string TokenizerDir(const std::string& name) {
  if (name == "stories260K") return LLMRT_SOURCE_DIR "/tests/data/stories260K";
  return LLMRT_SHARED_TOKENIZERS_DIR "/" + name;
}

// FNV-1a over the allowed ids as little-endian int32, as the script computes it.
std::string MaskHash(const std::vector<int32_t>& ids) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= static_cast<uint8_t>(id >> shift);
      hash *= 0x100000001b3ull;
    }
  }
  return absl::StrFormat("%016x", hash);
}

TEST(XgrammarReferenceTest, MasksEqualXgrammarsOnEveryState) {
  std::ifstream file(LLMRT_SOURCE_DIR "/runtime/grammar/testdata/xgrammar_masks.json");
  ASSERT_TRUE(file.good());
  std::stringstream contents;
  contents << file.rdbuf();
  const Json reference = Json::parse(contents.str());
  std::map<std::string, std::shared_ptr<const TokenVocabulary>> vocabularies;
  int64_t states = 0;
  for (const Json& test_case : reference["cases"]) {
    const std::string tokenizer = test_case["tokenizer"];
    const std::string name = test_case["name"].get<std::string>() + "/" + tokenizer;
    const int32_t vocab_size = test_case["vocab_size"];
    if (vocabularies.count(tokenizer) == 0) {
      absl::StatusOr<plan::TokenizerSpec> spec = llmc::ImportTokenizer(TokenizerDir(tokenizer));
      ASSERT_TRUE(spec.ok()) << spec.status();
      absl::StatusOr<std::shared_ptr<const TokenVocabulary>> vocabulary =
          TokenVocabulary::Create(*spec, vocab_size);
      ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
      vocabularies[tokenizer] = *vocabulary;
    }
    std::string gbnf = test_case["source"];
    if (test_case["kind"] == "schema") {
      absl::StatusOr<std::string> converted = JsonSchemaToGbnf(Json::parse(gbnf));
      ASSERT_TRUE(converted.ok()) << name << ": " << converted.status();
      gbnf = *converted;
    }
    absl::StatusOr<std::shared_ptr<const CompiledGrammar>> compiled =
        CompileGrammar(gbnf, vocabularies[tokenizer]);
    ASSERT_TRUE(compiled.ok()) << name << ": " << compiled.status();
    std::vector<bool> excluded(vocab_size, false);
    for (int32_t id : test_case["excluded_ids"]) excluded[id] = true;
    for (const Json& document : test_case["documents"]) {
      GrammarMatcher matcher(*compiled);
      const std::vector<int32_t> ids = document["ids"];
      std::vector<uint32_t> mask(sampling::MaskWords(vocab_size));
      for (size_t position = 0; position <= ids.size(); ++position) {
        const Json& step = document["steps"][position];
        ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab_size; ++id) {
          if (!excluded[id] && sampling::MaskAllows(mask.data(), id)) allowed.push_back(id);
        }
        ++states;
        const std::string where = absl::StrFormat("%s, document %s, before token %d of %d", name,
                                                  document["text"].dump(), position, ids.size());
        EXPECT_EQ(static_cast<int64_t>(allowed.size()), step["count"].get<int64_t>()) << where;
        EXPECT_EQ(MaskHash(allowed), step["hash"].get<std::string>()) << where;
        EXPECT_EQ(matcher.CanEnd(), step["end"].get<bool>()) << where;
        if (position < ids.size()) {
          ASSERT_TRUE(matcher.Accept(ids[position]).ok()) << where;
        }
      }
    }
  }
  EXPECT_GT(states, 1000);
}

}  // namespace
}  // namespace llmrt::grammar
