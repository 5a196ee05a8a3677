// Conformance of the runtime tokenizer against HuggingFace `tokenizers`: the references in
// testdata/*.reference.json come from testdata/make_reference.py; the tokenizers are imported
// through llmc::ImportTokenizer exactly as the compiler embeds them in a plan.
#include "runtime/tokenizer/tokenizer.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/tokenizer/import_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tokenizer/utf8.h"

namespace llmrt {
namespace {

using Json = nlohmann::json;

constexpr char kTestdata[] = LLMRT_SOURCE_DIR "/runtime/tokenizer/testdata";

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& model_dir) {
  auto spec = llmc::ImportTokenizer(model_dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return nullptr;
  // Round-trip through the wire format, as a plan does.
  plan::TokenizerSpec parsed;
  EXPECT_TRUE(parsed.ParseFromString(spec->SerializeAsString()));
  auto tokenizer = Tokenizer::Create(parsed);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? std::move(*tokenizer) : nullptr;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string text;
  for (int32_t id : ids) text += std::to_string(id) + " ";
  return text;
}

// Streams `ids` after `prompt_ids` and returns the concatenated pieces; every piece must be
// valid UTF-8 on its own.
std::string StreamAll(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                      const std::vector<int32_t>& ids, bool skip_special_tokens) {
  StreamDecoder stream(tokenizer, prompt_ids, skip_special_tokens);
  std::string text;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    EXPECT_TRUE(tokenizer_internal::IsValidUtf8(piece)) << "piece after id " << id;
    text += piece;
  }
  const std::string rest = stream.Finish();
  EXPECT_TRUE(tokenizer_internal::IsValidUtf8(rest));
  return text + rest;
}

// Decode(prompt + generated) must equal Decode(prompt) + streamed text whenever the prompt ends on
// a whole character: Decode(prompt) is a prefix of the whole and does not end in U+FFFD (a prompt
// that ends inside a byte sequence has no well-defined share of that character).
void ExpectStreamMatchesDecode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                               bool skip_special_tokens, const std::string& context) {
  const std::string whole = tokenizer.Decode(ids, skip_special_tokens);
  EXPECT_EQ(StreamAll(tokenizer, {}, ids, skip_special_tokens), whole)
      << context << " ids " << Ids(ids) << " skip_special " << skip_special_tokens;
  for (size_t split = 1; split < ids.size(); ++split) {
    const std::vector<int32_t> prompt(ids.begin(), ids.begin() + split);
    const std::vector<int32_t> generated(ids.begin() + split, ids.end());
    const std::string prompt_text = tokenizer.Decode(prompt, skip_special_tokens);
    if (whole.compare(0, prompt_text.size(), prompt_text) != 0) continue;
    if (prompt_text.size() >= 3 &&
        prompt_text.compare(prompt_text.size() - 3, 3, "\xEF\xBF\xBD") == 0) {
      continue;
    }
    EXPECT_EQ(StreamAll(tokenizer, prompt, generated, skip_special_tokens),
              whole.substr(prompt_text.size()))
        << context << " split at " << split << " ids " << Ids(ids);
  }
}

struct ReferenceCase {
  const char* name;
  std::string model_dir;
  bool shared;  // the tokenizer lives in ../shared/tokenizers
};

void PrintTo(const ReferenceCase& reference_case, std::ostream* out) {
  *out << reference_case.name;
}

class ReferenceTest : public testing::TestWithParam<ReferenceCase> {};

TEST_P(ReferenceTest, MatchesHuggingFaceTokenizers) {
  const ReferenceCase& param = GetParam();
  const std::string& model_dir = param.model_dir;
  // The shared tokenizers are always next to the repository in CI (the uncut qwen2, gpt2 and
  // llama3 ones are checked by conformance_test.cc).
  ASSERT_TRUE(Exists(model_dir + "/tokenizer.json"))
      << model_dir << "/tokenizer.json is missing" << (param.shared ? " (../shared)" : "");
  const std::string reference_path = std::string(kTestdata) + "/" + param.name + ".reference.json";
  const Json reference = Json::parse(ReadFileOrEmpty(reference_path), nullptr, false);
  ASSERT_FALSE(reference.is_discarded()) << reference_path;
  auto tokenizer = LoadTokenizer(model_dir);
  ASSERT_NE(tokenizer, nullptr);

  int case_index = 0;
  for (const Json& item : reference["cases"]) {
    const std::string text = item["text"].get<std::string>();
    const std::string context = std::string(param.name) + " case " + std::to_string(case_index++) +
                                " \"" + text.substr(0, 60) + "\"";
    const auto ids = item["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(Ids(tokenizer->Encode(text, true)), Ids(ids)) << context;
    EXPECT_EQ(Ids(tokenizer->Encode(text, false)),
              Ids(item["ids_no_special"].get<std::vector<int32_t>>()))
        << context;
    EXPECT_EQ(tokenizer->Decode(ids, false), item["decoded"].get<std::string>()) << context;
    EXPECT_EQ(tokenizer->Decode(ids, true), item["decoded_skip_special"].get<std::string>())
        << context;
    for (bool skip : {false, true}) ExpectStreamMatchesDecode(*tokenizer, ids, skip, context);
  }
  case_index = 0;
  for (const Json& item : reference["decode_cases"]) {
    const std::string context =
        std::string(param.name) + " decode case " + std::to_string(case_index++);
    const auto ids = item["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tokenizer->Decode(ids, false), item["decoded"].get<std::string>())
        << context << " ids " << Ids(ids);
    EXPECT_EQ(tokenizer->Decode(ids, true), item["decoded_skip_special"].get<std::string>())
        << context << " ids " << Ids(ids);
    for (bool skip : {false, true}) ExpectStreamMatchesDecode(*tokenizer, ids, skip, context);
  }
  EXPECT_GT(case_index, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, ReferenceTest,
    testing::Values(
        ReferenceCase{"stories260k", LLMRT_SOURCE_DIR "/tests/data/stories260K", false},
        ReferenceCase{"phi3", LLMRT_SHARED_TOKENIZERS_DIR "/phi3", true},
        ReferenceCase{"qwen2_mini", std::string(kTestdata) + "/qwen2_mini", false},
        ReferenceCase{"gpt2_mini", std::string(kTestdata) + "/gpt2_mini", false},
        ReferenceCase{"llama3_mini", std::string(kTestdata) + "/llama3_mini", false},
        ReferenceCase{"metaspace_mix", std::string(kTestdata) + "/metaspace_mix", false},
        ReferenceCase{"bytelevel_split", std::string(kTestdata) + "/bytelevel_split", false},
        ReferenceCase{"suffix_words", std::string(kTestdata) + "/suffix_words", false}),
    [](const testing::TestParamInfo<ReferenceCase>& info) { return std::string(info.param.name); });

class Stories260KTest : public testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = LoadTokenizer(LLMRT_SOURCE_DIR "/tests/data/stories260K");
    ASSERT_NE(tokenizer_, nullptr);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

// The numbers documented in tests/data/stories260K/README.md.
TEST_F(Stories260KTest, DocumentedPromptAndStory) {
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  EXPECT_EQ(tokenizer_->Encode("Once upon a time", true), prompt);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  const std::vector<int32_t> story = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
                                      426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
                                      411, 322, 265, 282, 295, 433, 426, 385, 328, 432,
                                      358, 394, 261, 370, 432, 352, 266, 268, 388, 426};
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), story.begin(), story.end());
  const std::string expected =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park. One day, she saw a big, red ball.";
  EXPECT_EQ(tokenizer_->Decode(all, true), expected);
  // HF keeps the space of "▁Once" after "<s>": Strip only removes spaces at the text's start.
  EXPECT_EQ(tokenizer_->Decode(all, false), "<s> " + expected);
  StreamDecoder stream(*tokenizer_, prompt);
  std::string streamed;
  for (int32_t id : story) streamed += stream.Push(id);
  streamed += stream.Finish();
  EXPECT_EQ(streamed, expected.substr(std::string("Once upon a time").size()));
}

// A leading-space Strip decoder removes spaces only at the very start of the text: a stream that
// begins with space-only pieces strips all of them, and keeps the ones that follow real text.
TEST_F(Stories260KTest, StreamKeepsSpacesAfterStart) {
  int32_t space_id = -1;
  for (int32_t id = 0; id < tokenizer_->vocab_size(); ++id) {
    if (tokenizer_->Piece(id) == "\xE2\x96\x81") space_id = id;
  }
  ASSERT_GE(space_id, 0);
  std::vector<int32_t> ids = {space_id, space_id};
  for (int32_t id : tokenizer_->Encode("Once", false)) ids.push_back(id);
  ids.push_back(space_id);
  ids.push_back(space_id);
  for (int32_t id : tokenizer_->Encode("upon", false)) ids.push_back(id);
  EXPECT_EQ(tokenizer_->Decode(ids), "Once   upon");
  EXPECT_EQ(StreamAll(*tokenizer_, {}, ids, true), "Once   upon");
}

TEST_F(Stories260KTest, BpeIsFast) {
  std::string text;
  while (text.size() < (1 << 20)) {
    text += "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tokenizer_->Encode(text, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(ids.size(), text.size() / 8);
  // ≥ 1 MB/s even on a loaded 2-core machine; the measured rate is printed for humans.
  EXPECT_LT(seconds, 1.0) << text.size() / seconds / 1e6 << " MB/s";
  std::printf("stories260K encode: %.1f MB/s\n", text.size() / seconds / 1e6);
  EXPECT_EQ(tokenizer_->Decode(ids), text.substr(0, text.size() - 1));
}

TEST(ByteLevelSpeedTest, Qwen2MiniEncodesFast) {
  auto tokenizer = LoadTokenizer(std::string(kTestdata) + "/qwen2_mini");
  ASSERT_NE(tokenizer, nullptr);
  std::string text;
  while (text.size() < (1 << 20)) {
    text += "It's 2024: the quick brown fox jumps over 13 lazy dogs!\n  Indented code(x) {}\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tokenizer->Encode(text, false);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0) << text.size() / seconds / 1e6 << " MB/s";
  std::printf("qwen2_mini encode: %.1f MB/s\n", text.size() / seconds / 1e6);
  EXPECT_EQ(tokenizer->Decode(ids), text);
}

TEST_F(Stories260KTest, InvalidUtf8InputDoesNotCrash) {
  const std::string bad = "ab\xFF\xE4\xB8 c\x80";
  const auto ids = tokenizer_->Encode(bad, false);
  EXPECT_EQ(tokenizer_->Decode(ids), "ab\xEF\xBF\xBD\xEF\xBF\xBD c\xEF\xBF\xBD");
}

// A token holding part of a character decodes to U+FFFD alone; DecodeBytes gives its own bytes,
// from which the character is rebuilt (OpenAI logprobs' "bytes").
TEST_F(Stories260KTest, DecodeBytesKeepsByteFallbackBytes) {
  const std::string quote = "\xE4\xB8\xAD";  // U+4E2D, three <0x..> byte tokens here
  const std::vector<int32_t> ids = tokenizer_->Encode(quote, false);
  std::string rebuilt;
  for (int32_t id : ids) rebuilt += tokenizer_->DecodeBytes({id});
  // SentencePiece's dummy prefix "\xE2\x96\x81" leads the first piece at the text's start.
  EXPECT_EQ(rebuilt.substr(rebuilt.size() - quote.size()), quote) << Ids(ids);
  EXPECT_EQ(tokenizer_->Decode({ids.back()}), "\xEF\xBF\xBD");
  EXPECT_EQ(tokenizer_->DecodeBytes({ids.back()}), "\xAD");
  EXPECT_EQ(tokenizer_->DecodeBytes(ids), tokenizer_->Decode(ids));
}

TEST(ByteLevelDecodeBytesTest, PiecesOfACharacterKeepTheirBytes) {
  auto tokenizer = LoadTokenizer(std::string(kTestdata) + "/qwen2_mini");
  ASSERT_NE(tokenizer, nullptr);
  const std::string text = "\xF0\x9F\x98\x80 \xE2\x80\x9Cq\xE2\x80\x9D";  // emoji, quotes
  const std::vector<int32_t> ids = tokenizer->Encode(text, false);
  std::string rebuilt;
  bool some_piece_is_partial = false;
  for (int32_t id : ids) {
    rebuilt += tokenizer->DecodeBytes({id});
    some_piece_is_partial =
        some_piece_is_partial || !tokenizer_internal::IsValidUtf8(tokenizer->DecodeBytes({id}));
  }
  EXPECT_EQ(rebuilt, text) << Ids(ids);
  EXPECT_TRUE(some_piece_is_partial) << "the test needs a character split across tokens";
}

TEST_F(Stories260KTest, OutOfRangeIdsAreDropped) {
  EXPECT_EQ(tokenizer_->Decode({-5, 403, 100000, 407}), "Once upon");
  StreamDecoder stream(*tokenizer_, {});
  EXPECT_EQ(stream.Push(-1) + stream.Push(403) + stream.Push(99999) + stream.Finish(), "Once");
}

// Random bytes (mostly invalid UTF-8) and random code points through every committed tokenizer:
// no crash, ids in range, and streaming agrees with Decode. Run under ASan/UBSan in CI.
TEST(TokenizerRobustnessTest, RandomInputs) {
  std::mt19937 random(20240607);
  for (const char* name :
       {"qwen2_mini", "llama3_mini", "metaspace_mix", "bytelevel_split", "suffix_words"}) {
    auto tokenizer = LoadTokenizer(std::string(kTestdata) + "/" + name);
    ASSERT_NE(tokenizer, nullptr);
    for (int iteration = 0; iteration < 200; ++iteration) {
      std::string text;
      const int length = static_cast<int>(random() % 40);
      for (int i = 0; i < length; ++i) {
        if (iteration % 2 == 0) {
          text.push_back(static_cast<char>(random() % 256));
        } else {
          const char32_t kPicks[] = {U' ',      U'\n',     U'a',      U'Z',          U'7',
                                     U'\u00e9', U'\u0301', U'\u4e2d', U'\U0001F600', U'\u200d',
                                     U'<',      U'>',      U'|'};
          tokenizer_internal::AppendUtf8(kPicks[random() % 13], &text);
        }
      }
      const std::vector<int32_t> ids = tokenizer->Encode(text, true);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer->vocab_size()) << name;
      ExpectStreamMatchesDecode(*tokenizer, ids, false, name);
    }
  }
}

TEST(TokenizerCreateTest, RejectsBadSpecs) {
  plan::TokenizerSpec spec;
  spec.set_model(plan::TokenizerSpec::BPE);
  spec.add_pieces("a");
  spec.add_pieces("b");
  auto* merge = spec.add_merges();
  merge->set_left(0);
  merge->set_right(1);
  merge->set_result(7);
  auto status = Tokenizer::Create(spec).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("merge 0"), std::string::npos) << status;

  spec.clear_merges();
  auto* pre = spec.add_pre_tokenizers();
  pre->set_kind(plan::TokenizerSpec::PreTokenizer::SPLIT_REGEX);
  pre->set_pattern("(unclosed");
  status = Tokenizer::Create(spec).status();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("pre_tokenizer 0"), std::string::npos) << status;

  spec.clear_pre_tokenizers();
  spec.set_model(plan::TokenizerSpec::MODEL_UNSPECIFIED);
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
}

}  // namespace
}  // namespace llmrt
