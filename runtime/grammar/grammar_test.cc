// Unit tests of the GBNF parser, the automaton, the regex and JSON Schema converters, on a toy
// vocabulary. The masks of real tokenizers are checked against xgrammar in
// xgrammar_reference_test.cc.
#include "runtime/grammar/grammar.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "runtime/grammar/regex_to_grammar.h"

namespace llmrt::grammar {
namespace {

using ::testing::HasSubstr;

// Every byte as a token, so a grammar's language can be probed byte by byte.
std::shared_ptr<const TokenVocabulary> ByteVocabulary() {
  std::vector<std::string> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = std::string(1, static_cast<char>(i));
  return TokenVocabulary::FromBytes(bytes, std::vector<bool>(256, false), 256);
}

// Whether the grammar matches `text` exactly.
bool Matches(const std::string& gbnf, const std::string& text) {
  auto compiled = CompileGrammar(gbnf, ByteVocabulary());
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return false;
  GrammarMatcher matcher(*compiled);
  return matcher.AcceptBytes(text) && matcher.CanEnd();
}

TEST(GrammarTest, LiteralsClassesRepetition) {
  const std::string gbnf = R"(root ::= "a" [0-9]+ ("x" | "yz")? [^a-c]{2,3}  # comment
)";
  EXPECT_TRUE(Matches(gbnf, "a1dd"));
  EXPECT_TRUE(Matches(gbnf, "a12yzddd"));
  EXPECT_TRUE(Matches(gbnf, "a1x\xc3\xa9z"));  // é is one code point
  EXPECT_FALSE(Matches(gbnf, "a1dddd"));
  EXPECT_FALSE(Matches(gbnf, "a1ad"));
  EXPECT_FALSE(Matches(gbnf, "ax"));
  EXPECT_FALSE(Matches(gbnf, "a1xd\xc3"));  // half a character
}

TEST(GrammarTest, RulesAndRecursion) {
  const std::string gbnf = R"(
root ::= list
list ::= "[" (item ("," item)*)? "]"
item ::= [0-9] | list
)";
  EXPECT_TRUE(Matches(gbnf, "[]"));
  EXPECT_TRUE(Matches(gbnf, "[1,[2,[]],3]"));
  EXPECT_FALSE(Matches(gbnf, "[1,]"));
  EXPECT_FALSE(Matches(gbnf, "[[1]"));
}

TEST(GrammarTest, ClassesMatchOnlyWellFormedUtf8) {
  const std::string gbnf = "root ::= .";
  EXPECT_TRUE(Matches(gbnf, "\xf0\x9f\x98\x80"));
  EXPECT_TRUE(Matches(gbnf, "\xe2\x82\xac"));
  EXPECT_FALSE(Matches(gbnf, "\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(Matches(gbnf, "\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(Matches(gbnf, "\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(GrammarTest, ErrorsNameTheProblem) {
  EXPECT_THAT(ParseGrammar("root ::= a\na ::= a \"x\" | \"y\"").status().message(),
              HasSubstr("rule 'a' is left-recursive"));
  EXPECT_THAT(ParseGrammar("root ::= missing").status().message(),
              HasSubstr("rule 'missing' is not defined"));
  EXPECT_THAT(ParseGrammar("root ::= \"a\"\nroot ::= \"b\"").status().message(),
              HasSubstr("rule 'root' is defined twice"));
  EXPECT_THAT(ParseGrammar("root ::= \"a").status().message(),
              HasSubstr("line 1 column 10: unterminated string literal"));
  EXPECT_THAT(ParseGrammar("start ::= \"a\"").status().message(),
              HasSubstr("no rule named 'root'"));
}

TEST(MatcherTest, MaskFollowsTokensAcrossCharacterBoundaries) {
  // Tokens: "{", "}", "\"", "ab", "\xc3" (first byte of é), "\xa9\"" (its second byte + quote).
  std::vector<std::string> bytes = {"{", "}", "\"", "ab", "\xc3", "\xa9\"", "<s>"};
  std::vector<bool> special = {false, false, false, false, false, false, true};
  auto vocabulary = TokenVocabulary::FromBytes(bytes, special, 9);
  auto compiled = CompileGrammar(R"(root ::= "\"" [a-zé]* "\"")", vocabulary);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  GrammarMatcher matcher(*compiled);
  std::vector<uint32_t> mask(1);
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], 1u << 2);
  ASSERT_TRUE(matcher.Accept(2).ok());
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], (1u << 2) | (1u << 3) | (1u << 4));
  ASSERT_TRUE(matcher.Accept(4).ok());
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], 1u << 5);  // only the continuation byte may follow
  EXPECT_FALSE(matcher.CanEnd());
  ASSERT_TRUE(matcher.Accept(5).ok());
  EXPECT_TRUE(matcher.CanEnd());
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], 0u);
  EXPECT_FALSE(matcher.Accept(1).ok());
  EXPECT_FALSE(matcher.Accept(6).ok());  // special
  EXPECT_FALSE(matcher.Accept(8).ok());  // past the tokenizer's vocabulary
}

TEST(MatcherTest, SpecialTokensOnlyWhereNamedWhole) {
  // Token 2 is special: its content "<T>" is no text, so only <[2]> allows it.
  std::vector<std::string> bytes = {"a", "<T>", "<T>", "<", "T>"};
  std::vector<bool> special = {false, false, true, false, false};
  auto vocabulary = TokenVocabulary::FromBytes(bytes, special, 6);
  auto compiled = CompileGrammar(R"(root ::= <[2]> "a" | "<T>")", vocabulary);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  GrammarMatcher matcher(*compiled);
  std::vector<uint32_t> mask(1);
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], (1u << 1) | (1u << 2) | (1u << 3));
  std::unique_ptr<sampling::TokenConstraint> text = matcher.CloneInitial();
  ASSERT_TRUE(matcher.Accept(2).ok());
  ASSERT_TRUE(matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok());
  EXPECT_EQ(mask[0], 1u << 0);
  EXPECT_FALSE(matcher.CanEnd());
  ASSERT_TRUE(matcher.Accept(0).ok());
  EXPECT_TRUE(matcher.CanEnd());
  // The text "<T>" ends the other alternative and cannot be followed by the special token.
  ASSERT_TRUE(text->Accept(1).ok());
  EXPECT_TRUE(text->CanEnd());
  EXPECT_FALSE(text->Accept(2).ok());

  EXPECT_THAT(CompileGrammar("root ::= <[0]>", vocabulary).status().message(),
              HasSubstr("<[0]> is a text token"));
  EXPECT_THAT(CompileGrammar("root ::= <[6]>", vocabulary).status().message(),
              HasSubstr("outside the vocabulary"));
  EXPECT_THAT(ParseGrammar("root ::= <[x]>").status().message(), HasSubstr("'<[ID]>'"));
}

TEST(RegexTest, Subset) {
  auto matches = [](const std::string& regex, const std::string& text) {
    absl::StatusOr<std::string> body = RegexToGbnf(regex, false);
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() && Matches("root ::= " + *body, text);
  };
  EXPECT_TRUE(matches("^\\d{3}-[A-Z]{2,}$", "123-AB"));
  EXPECT_FALSE(matches("^\\d{3}-[A-Z]{2,}$", "123-A"));
  EXPECT_TRUE(matches("(?:ab|c)+x?", "abcab"));
  EXPECT_TRUE(matches("[^\\s]+", "a\xc3\xa9"));
  EXPECT_FALSE(matches("[^\\s]+", "a b"));
  EXPECT_THAT(RegexToGbnf("(a)\\1", false).status().message(), HasSubstr("backreferences"));
  EXPECT_THAT(RegexToGbnf("(?=a)", false).status().message(), HasSubstr("lookaround"));
  EXPECT_THAT(RegexToGbnf("a^b", false).status().message(), HasSubstr("'^'"));
  // In a JSON string, '"' and '\' come escaped.
  absl::StatusOr<std::string> json = RegexToGbnf("[a\"\\\\]+", true);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(Matches("root ::= " + *json, "a\\\"\\\\"));
  EXPECT_FALSE(Matches("root ::= " + *json, "a\""));
}

bool SchemaMatches(const std::string& schema, const std::string& text) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema));
  EXPECT_TRUE(gbnf.ok()) << gbnf.status();
  return gbnf.ok() && Matches(*gbnf, text);
}

TEST(JsonSchemaTest, Objects) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"],
      "additionalProperties": false})";
  EXPECT_TRUE(SchemaMatches(schema, R"({"b": "x"})"));
  EXPECT_TRUE(SchemaMatches(schema, R"({"a": -5, "b": "x", "c": true})"));
  EXPECT_TRUE(SchemaMatches(schema, R"({"b": "x", "c": false})"));
  EXPECT_FALSE(SchemaMatches(schema, R"({"a": 1})"));
  EXPECT_FALSE(SchemaMatches(schema, R"({"b": "x", "d": 1})"));
  EXPECT_FALSE(SchemaMatches(schema, R"({"b":"x"})"));  // layout: ": " and ", "
  const std::string open = R"({"type": "object", "properties": {"ab": {"type": "integer"}}})";
  EXPECT_TRUE(SchemaMatches(open, R"({"ab": 1, "abc": [1, {"x": null}]})"));
  EXPECT_TRUE(SchemaMatches(open, R"({"a": "x"})"));
  EXPECT_FALSE(SchemaMatches(open, R"({"ab": 1, "ab": 2})"));  // no repeated declared key
}

TEST(JsonSchemaTest, ArraysEnumsRefsNumbers) {
  EXPECT_TRUE(SchemaMatches(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2,
      "maxItems": 3})",
                            "[1, 2, 3]"));
  EXPECT_FALSE(SchemaMatches(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2,
      "maxItems": 3})",
                             "[1]"));
  EXPECT_TRUE(SchemaMatches(R"({"enum": ["a", 1, null, {"k": [true]}]})", R"({"k": [true]})"));
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["children"], "additionalProperties": false}}, "$ref": "#/$defs/node"})";
  EXPECT_TRUE(SchemaMatches(tree, R"({"children": [{"children": []}, {"children": []}]})"));
  const std::string range = R"({"type": "integer", "minimum": -12, "maximum": 305})";
  for (int value = -20; value <= 320; ++value) {
    EXPECT_EQ(SchemaMatches(range, std::to_string(value)), value >= -12 && value <= 305) << value;
  }
  EXPECT_TRUE(SchemaMatches(R"({"type": "integer", "exclusiveMinimum": 99})", "123456"));
  EXPECT_FALSE(SchemaMatches(R"({"type": "integer", "exclusiveMinimum": 99})", "99"));
  EXPECT_TRUE(SchemaMatches(R"({"type": "string", "format": "date-time"})",
                            "\"2024-02-29T13:45:00.5+01:00\""));
  EXPECT_TRUE(SchemaMatches(R"({"type": "string", "format": "uuid"})",
                            "\"123e4567-e89b-12d3-a456-426614174000\""));
  EXPECT_TRUE(SchemaMatches(R"({"type": "string", "minLength": 2, "maxLength": 3})", "\"ab\""));
  EXPECT_FALSE(SchemaMatches(R"({"type": "string", "minLength": 2, "maxLength": 3})", "\"a\""));
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreNamed) {
  auto error = [](const std::string& schema) {
    return std::string(JsonSchemaToGbnf(nlohmann::ordered_json::parse(schema)).status().message());
  };
  EXPECT_THAT(error(R"({"type": "object", "patternProperties": {}})"),
              HasSubstr("keyword 'patternProperties' at '#' is not supported"));
  EXPECT_THAT(error(R"({"type": "object", "properties": {"x": {"type": "array",
      "uniqueItems": true}}})"),
              HasSubstr("keyword 'uniqueItems' at '#/properties/x'"));
  EXPECT_THAT(error(R"({"type": "number", "minimum": 0.5})"), HasSubstr("'minimum'"));
  EXPECT_THAT(error(R"({"type": "string", "format": "hostname"})"), HasSubstr("hostname"));
  EXPECT_THAT(error(R"({"$ref": "#/$defs/none"})"), HasSubstr("points at nothing"));
}

}  // namespace
}  // namespace llmrt::grammar
