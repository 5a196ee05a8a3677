#include "compiler/tokenizer/self_check.h"

#include <string>

#include "compiler/tokenizer/import_tokenizer.h"
#include "gtest/gtest.h"

namespace llmc {
namespace {

constexpr char kShared[] = LLMC_SHARED_TOKENIZERS_DIR;

llmrt::plan::TokenizerSpec Import(const TokenizerFiles& files) {
  auto spec = ImportTokenizerFiles(files);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : llmrt::plan::TokenizerSpec();
}

TEST(SelfCheckTest, PassesOnEveryRealTokenizer) {
  std::vector<std::pair<std::string, TokenizerFiles>> cases;
  cases.push_back({"stories260K", FindTokenizerFiles(LLMC_SOURCE_DIR "/tests/data/stories260K")});
  for (const char* folder : {"gpt2", "qwen2", "llama3", "phi3", "tinyllama", "mistral"}) {
    cases.push_back({folder, FindTokenizerFiles(std::string(kShared) + "/" + folder)});
  }
  TokenizerFiles mistral3;
  mistral3.tokenizer_model = std::string(kShared) + "/mistral/v0.3/tokenizer.model";
  cases.push_back({"mistral v0.3", mistral3});
  for (const auto& [name, files] : cases) {
    SCOPED_TRACE(name);
    ASSERT_FALSE(files.tokenizer_json.empty() && files.vocab_json.empty() &&
                 files.tokenizer_model.empty())
        << "no tokenizer files for " << name << " (is ../shared/tokenizers there?)";
    EXPECT_TRUE(SelfCheckTokenizer(Import(files)).ok()) << SelfCheckTokenizer(Import(files));
  }
}

TEST(SelfCheckTest, NamesTheStringThatDoesNotRoundTrip) {
  TokenizerFiles files;
  files.vocab_json = std::string(kShared) + "/gpt2/vocab.json";
  files.merges_txt = std::string(kShared) + "/gpt2/merges.txt";
  llmrt::plan::TokenizerSpec spec = Import(files);
  ASSERT_TRUE(SelfCheckTokenizer(spec).ok());
  // A decoder that garbles text: every "a" comes back as "b".
  auto* garble = spec.add_decoders();
  garble->set_kind(llmrt::plan::TokenizerSpec::Decoder::REPLACE);
  garble->set_pattern("a");
  garble->set_content("b");
  const absl::Status status = SelfCheckTokenizer(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("self-check failed on \"Once upon a time"), std::string::npos)
      << status;
  EXPECT_NE(status.message().find("instead of the text"), std::string::npos) << status;
}

// stories260K collapses runs of spaces, so only its prose sample must round-trip, and does.
TEST(SelfCheckTest, ChecksProseOnTokenizersThatChangeWhitespace) {
  llmrt::plan::TokenizerSpec spec =
      Import(FindTokenizerFiles(LLMC_SOURCE_DIR "/tests/data/stories260K"));
  ASSERT_TRUE(SelfCheckTokenizer(spec).ok());
  auto* garble = spec.add_decoders();
  garble->set_kind(llmrt::plan::TokenizerSpec::Decoder::REPLACE);
  garble->set_pattern("a");
  garble->set_content("b");
  const absl::Status status = SelfCheckTokenizer(spec);
  EXPECT_NE(status.message().find("self-check failed on \"Once upon a time"), std::string::npos)
      << status;
}

TEST(SelfCheckTest, NamesASpecialTokenThatIsNotMatched) {
  TokenizerFiles files;
  files.vocab_json = std::string(kShared) + "/gpt2/vocab.json";
  files.merges_txt = std::string(kShared) + "/gpt2/merges.txt";
  llmrt::plan::TokenizerSpec spec = Import(files);
  ASSERT_EQ(spec.added_tokens_size(), 1);
  // A special token whose text the runtime splits into ordinary pieces.
  spec.mutable_added_tokens(0)->set_content("<|endoftext|>");
  spec.mutable_added_tokens(0)->set_id(100);  // "<|endoftext|>" is not piece 100
  const absl::Status status = SelfCheckTokenizer(spec);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("<|endoftext|>"), std::string::npos) << status;
}

TEST(SelfCheckTest, RejectsASpecTheRuntimeCannotLoad) {
  llmrt::plan::TokenizerSpec spec;
  const absl::Status status = SelfCheckTokenizer(spec);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("runtime cannot load"), std::string::npos) << status;
}

}  // namespace
}  // namespace llmc
