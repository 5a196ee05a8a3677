// Forced tool calls (tool_grammar.h): random walks through each format's grammar over a byte
// vocabulary with the format's special markers as special tokens; every finished walk must be
// read back by OutputParser (tool_calls.h) as calls of the offered tools with arguments of
// their schema. The end-to-end check with real tokenizers and Python jsonschema is
// tests/server/tool_choice_test.py.
#include "runtime/server/tool_grammar.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/grammar/matcher.h"

namespace llmrt::server {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::ordered_json;

const Json& Tools() {
  static const Json* tools = new Json(Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
      "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
      "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "now"}},
    {"type": "function", "function": {"name": "ping", "parameters": {}}}])"));
  return *tools;
}

// 256 byte tokens, then the markers of every format as special tokens.
struct Vocabulary {
  plan::TokenizerSpec spec;
  std::shared_ptr<const grammar::TokenVocabulary> tokens;
};

Vocabulary MakeVocabulary() {
  Vocabulary vocabulary;
  std::vector<std::string> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = std::string(1, static_cast<char>(i));
  std::vector<bool> special(256, false);
  for (std::string_view marker :
       {markers::kMistralCalls, markers::kDeepSeekCallsBegin, markers::kDeepSeekCallsEnd,
        markers::kDeepSeekCallBegin, markers::kDeepSeekCallEnd, markers::kDeepSeekSep,
        markers::kHarmonyStart, markers::kHarmonyChannel, markers::kHarmonyConstrain,
        markers::kHarmonyMessage, markers::kHarmonyEnd, markers::kHarmonyCall,
        markers::kHarmonyReturn}) {
    plan::TokenizerSpec::AddedToken* token = vocabulary.spec.add_added_tokens();
    token->set_id(static_cast<int32_t>(bytes.size()));
    token->set_content(std::string(marker));
    token->set_special(true);
    bytes.emplace_back(marker);
    special.push_back(true);
  }
  const int32_t size = static_cast<int32_t>(bytes.size());
  vocabulary.tokens = grammar::TokenVocabulary::FromBytes(bytes, special, size);
  return vocabulary;
}

// Samples one output of the grammar: random allowed tokens, with closing characters and
// special markers preferred so that walks end soon. nullopt if it does not end in 4000 tokens.
std::optional<std::string> Walk(const std::string& gbnf, const Vocabulary& vocabulary,
                                std::mt19937& random) {
  auto compiled = grammar::CompileGrammar(gbnf, vocabulary.tokens);
  EXPECT_TRUE(compiled.ok()) << compiled.status() << "\n" << gbnf;
  if (!compiled.ok()) return std::nullopt;
  grammar::GrammarMatcher matcher(*compiled);
  const int32_t size = vocabulary.tokens->vocab_size();
  std::vector<uint32_t> mask((size + 31) / 32);
  std::string text;
  for (int step = 0; step < 4000; ++step) {
    EXPECT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
    std::vector<int32_t> allowed, preferred;
    for (int32_t id = 0; id < size; ++id) {
      if (!((mask[id >> 5] >> (id & 31)) & 1)) continue;
      allowed.push_back(id);
      if (id >= 256 || id == '"' || id == '}' || id == ']') preferred.push_back(id);
    }
    if (allowed.empty() || (matcher.CanEnd() && random() % 4 == 0)) {
      EXPECT_TRUE(matcher.CanEnd());
      return text;
    }
    const std::vector<int32_t>& from =
        !preferred.empty() && random() % 3 == 0 ? preferred : allowed;
    const int32_t token = from[random() % from.size()];
    EXPECT_TRUE(matcher.Accept(token).ok());
    text += vocabulary.tokens->TokenBytes(token);
  }
  return std::nullopt;
}

void ExpectValidCalls(const std::vector<ToolCall>& calls, const ForcedToolCalls& forced) {
  ASSERT_FALSE(calls.empty());
  if (!forced.parallel) EXPECT_EQ(calls.size(), 1u);
  for (const ToolCall& call : calls) {
    if (!forced.function.empty()) EXPECT_EQ(call.name, forced.function);
    const Json arguments = Json::parse(call.arguments);
    if (call.name == "now") {
      EXPECT_EQ(arguments, Json::object());
      continue;
    }
    if (call.name == "ping") {  // an empty schema: any object
      EXPECT_TRUE(arguments.is_object()) << call.arguments;
      continue;
    }
    ASSERT_EQ(call.name, "get_weather");
    ASSERT_TRUE(arguments.contains("city") && arguments["city"].is_string()) << call.arguments;
    // maxLength counts characters: the bytes that do not continue a UTF-8 sequence.
    int characters = 0;
    for (char c : arguments["city"].get<std::string>()) characters += (c & 0xC0) != 0x80;
    EXPECT_LE(characters, 6) << call.arguments;
    EXPECT_TRUE(arguments["unit"] == "c" || arguments["unit"] == "f") << call.arguments;
    if (arguments.contains("days")) {
      EXPECT_GE(arguments["days"].get<int>(), 1);
      EXPECT_LE(arguments["days"].get<int>(), 7);
    }
    for (auto it = arguments.begin(); it != arguments.end(); ++it) {
      EXPECT_TRUE(it.key() == "city" || it.key() == "unit" || it.key() == "days") << it.key();
    }
  }
}

TEST(ToolGrammar, EveryFormatsForcedCallsParseAndFollowTheSchema) {
  const Vocabulary vocabulary = MakeVocabulary();
  std::mt19937 random(7);
  for (ToolCallFormat format :
       {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral,
        ToolCallFormat::kPhi4Mini, ToolCallFormat::kDeepSeekV3, ToolCallFormat::kHarmony}) {
    for (const ForcedToolCalls& forced :
         {ForcedToolCalls{"", true, false}, ForcedToolCalls{"get_weather", false, false},
          ForcedToolCalls{"", false, true}}) {
      SCOPED_TRACE(std::string(ToolCallFormatName(format)) + " function=" + forced.function +
                   " parallel=" + (forced.parallel ? "1" : "0"));
      absl::StatusOr<std::string> gbnf = ToolCallGbnf(format, Tools(), forced, vocabulary.spec);
      ASSERT_TRUE(gbnf.ok()) << gbnf.status();
      int several = 0;
      for (int walk = 0; walk < 40; ++walk) {
        std::optional<std::string> text = Walk(*gbnf, vocabulary, random);
        ASSERT_TRUE(text.has_value());
        // The parser of the server's responses reads the calls back; with close_reasoning the
        // output starts after an (empty) <think> the prompt opened.
        OutputParser parser(format, forced.close_reasoning, forced.close_reasoning);
        ParsedDelta delta = parser.Push(*text);
        ParsedDelta rest = parser.Finish();
        for (ToolCall& call : rest.calls) delta.calls.push_back(call);
        EXPECT_EQ(delta.content + rest.content, "") << *text;
        EXPECT_EQ(delta.reasoning + rest.reasoning, "") << *text;
        ExpectValidCalls(delta.calls, forced);
        several += delta.calls.size() > 1;
      }
      // Parallel grammars do write several calls (the walk ends a third of the time it may).
      if (forced.parallel) EXPECT_GT(several, 0);
    }
  }
}

TEST(ToolGrammar, SpecialMarkersAreWholeTokens) {
  const Vocabulary vocabulary = MakeVocabulary();
  absl::StatusOr<std::string> gbnf =
      ToolCallGbnf(ToolCallFormat::kMistral, Tools(), {"now", false, false}, vocabulary.spec);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  EXPECT_THAT(*gbnf, HasSubstr("<[256]>"));
  // The text "[TOOL_CALLS]" spelled in bytes is not the marker.
  auto compiled = grammar::CompileGrammar(*gbnf, vocabulary.tokens);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  grammar::GrammarMatcher matcher(*compiled);
  EXPECT_FALSE(matcher.Accept('[').ok());
  ASSERT_TRUE(matcher.Accept(256).ok());
  EXPECT_TRUE(matcher.AcceptBytes(R"([{"name": "now", "arguments": {}}])"));
  EXPECT_TRUE(matcher.CanEnd());
}

TEST(ToolGrammar, HarmonyMarkersAreWholeTokens) {
  const Vocabulary vocabulary = MakeVocabulary();
  absl::StatusOr<std::string> gbnf =
      ToolCallGbnf(ToolCallFormat::kHarmony, Tools(), {"now", false, false}, vocabulary.spec);
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  auto id = [&](std::string_view marker) {
    for (const auto& token : vocabulary.spec.added_tokens()) {
      if (token.content() == marker) return token.id();
    }
    return -1;
  };
  auto compiled = grammar::CompileGrammar(*gbnf, vocabulary.tokens);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  grammar::GrammarMatcher matcher(*compiled);
  // No analysis first, and "<|channel|>" spelled in bytes is not the marker.
  EXPECT_FALSE(matcher.Accept('<').ok());
  ASSERT_TRUE(matcher.Accept(id(markers::kHarmonyChannel)).ok());
  EXPECT_TRUE(matcher.AcceptBytes("commentary to=functions.now "));
  EXPECT_FALSE(matcher.AcceptBytes("<|constrain|>"));
  ASSERT_TRUE(matcher.Accept(id(markers::kHarmonyConstrain)).ok());
  EXPECT_TRUE(matcher.AcceptBytes("json"));
  ASSERT_TRUE(matcher.Accept(id(markers::kHarmonyMessage)).ok());
  EXPECT_TRUE(matcher.AcceptBytes("{}"));
  EXPECT_FALSE(matcher.CanEnd());  // <|call|> ends the message
  ASSERT_TRUE(matcher.Accept(id(markers::kHarmonyCall)).ok());
  EXPECT_TRUE(matcher.CanEnd());
}

TEST(ToolGrammar, RefusalsNameTheField) {
  const Vocabulary vocabulary = MakeVocabulary();
  auto message = [&](ToolCallFormat format, const Json& tools, const std::string& function) {
    return std::string(
        ToolCallGbnf(format, tools, {function, true, false}, vocabulary.spec).status().message());
  };
  EXPECT_THAT(message(ToolCallFormat::kNone, Tools(), ""), HasSubstr("no tool-call format"));
  EXPECT_THAT(message(ToolCallFormat::kHermes, Tools(), "nope"),
              HasSubstr("the function 'nope', which is not among"));
  const Json unsupported = Json::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "string", "not": {}}}}}}])");
  const std::string refused = message(ToolCallFormat::kHermes, unsupported, "");
  EXPECT_THAT(refused, HasSubstr("'tools[0].function.parameters'"));
  EXPECT_THAT(refused, HasSubstr("'not'"));
  const Json not_object = Json::parse(
      R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}])");
  EXPECT_THAT(message(ToolCallFormat::kHermes, not_object, ""),
              HasSubstr("'tools[0].function.parameters.type' must be \"object\""));
  // Only the candidates are converted: a named function's neighbours may use anything.
  Json mixed = unsupported;
  mixed.push_back(Tools()[1]);
  EXPECT_TRUE(
      ToolCallGbnf(ToolCallFormat::kHermes, mixed, {"now", true, false}, vocabulary.spec).ok());
}

}  // namespace
}  // namespace llmrt::server
