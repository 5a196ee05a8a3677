#include "runtime/server/tool_calls.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/template/chat.h"
#include "runtime/template/template.h"

namespace llmrt::server {
namespace {

using Json = nlohmann::ordered_json;

struct Result {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

void Append(Result& result, ParsedDelta delta) {
  result.reasoning += delta.reasoning;
  result.content += delta.content;
  for (ToolCall& call : delta.calls) result.calls.push_back(std::move(call));
}

void ExpectSame(const Result& streamed, const Result& whole, const std::string& text) {
  EXPECT_EQ(streamed.reasoning, whole.reasoning) << text;
  EXPECT_EQ(streamed.content, whole.content) << text;
  EXPECT_EQ(streamed.calls.size(), whole.calls.size()) << text;
  for (size_t index = 0; index < std::min(streamed.calls.size(), whole.calls.size()); ++index) {
    EXPECT_EQ(streamed.calls[index].name, whole.calls[index].name);
    EXPECT_EQ(streamed.calls[index].arguments, whole.calls[index].arguments);
  }
}

// The whole text at once, and byte by byte as a stream: both must give the same result.
Result Parse(ToolCallFormat format, const std::string& text, bool reasoning = false,
             bool starts_in_reasoning = false) {
  Result whole;
  {
    OutputParser parser(format, reasoning, starts_in_reasoning);
    Append(whole, parser.Push(text));
    Append(whole, parser.Finish());
  }
  Result streamed;
  {
    OutputParser parser(format, reasoning, starts_in_reasoning);
    for (char c : text) Append(streamed, parser.Push(std::string(1, c)));
    Append(streamed, parser.Finish());
  }
  ExpectSame(streamed, whole, text);
  return whole;
}

// Harmony: the whole text, byte by byte, and split in two at every byte, all alike.
Result ParseHarmony(const std::string& text, bool calls = true) {
  auto make = [calls] {
    return calls ? OutputParser(ToolCallFormat::kHarmony, false, false)
                 : OutputParser::HarmonyWithoutCalls();
  };
  Result result;
  {
    OutputParser parser = make();
    Append(result, parser.Push(text));
    Append(result, parser.Finish());
  }
  for (size_t split = 0; split <= text.size(); ++split) {
    Result parts;
    OutputParser parser = make();
    Append(parts, parser.Push(text.substr(0, split)));
    Append(parts, parser.Push(text.substr(split)));
    Append(parts, parser.Finish());
    ExpectSame(parts, result, text + " split at " + std::to_string(split));
  }
  Result bytes;
  OutputParser parser = make();
  for (char c : text) Append(bytes, parser.Push(std::string(1, c)));
  Append(bytes, parser.Finish());
  ExpectSame(bytes, result, text + " byte by byte");
  return result;
}

std::string ReadShared(const std::string& relative) {
  std::ifstream file(std::string(LLMRT_SHARED_TOKENIZERS_DIR) + "/" + relative, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

TEST(ToolCallFormat, NamesRoundTrip) {
  for (ToolCallFormat format :
       {ToolCallFormat::kNone, ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
        ToolCallFormat::kMistral, ToolCallFormat::kPhi4Mini, ToolCallFormat::kDeepSeekV3,
        ToolCallFormat::kHarmony}) {
    EXPECT_EQ(ToolCallFormatFromName(ToolCallFormatName(format)), format);
  }
  EXPECT_EQ(ToolCallFormatFromName(""), ToolCallFormat::kNone);
  EXPECT_FALSE(ToolCallFormatFromName("qwen").has_value());
  EXPECT_THAT(NewToolCallId(ToolCallFormat::kHermes),
              ::testing::MatchesRegex("call_[a-zA-Z0-9]{24}"));
  EXPECT_THAT(NewToolCallId(ToolCallFormat::kMistral), ::testing::MatchesRegex("[a-zA-Z0-9]{9}"));
}

TEST(OutputParser, HermesTextBeforeCallStaysContent) {
  const Result result = Parse(
      ToolCallFormat::kHermes,
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\", \"note\": \"a </tool_call> b\\\"\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"get_time\", \"arguments\": {}}\n</tool_call>\n");
  EXPECT_EQ(result.content, "Let me check.");
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(result.calls[0].arguments),
            Json::parse(R"({"city": "Paris", "note": "a </tool_call> b\""})"));
  EXPECT_EQ(result.calls[1].name, "get_time");
  EXPECT_EQ(result.calls[1].arguments, "{}");
  EXPECT_NE(result.calls[0].id, result.calls[1].id);
}

TEST(OutputParser, MalformedCallIsReturnedAsContent) {
  const std::string text =
      "Sure <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }</tool_call> ok";
  Result result = Parse(ToolCallFormat::kHermes, text);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, text);
  // A call the output never closes is parsed when complete JSON, else content.
  result =
      Parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}");
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.content, "");
  result = Parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"argu");
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, "<tool_call>{\"name\": \"f\", \"argu");
  // No name, or arguments that are not an object: not a call.
  result = Parse(ToolCallFormat::kHermes, "<tool_call>{\"arguments\": {}}</tool_call>");
  EXPECT_TRUE(result.calls.empty());
  result =
      Parse(ToolCallFormat::kHermes, "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>");
  EXPECT_TRUE(result.calls.empty());
}

TEST(OutputParser, PlainTextAndMarkerPrefixesSurvive) {
  // Text that only looks like the start of a marker is released once it is not one.
  for (const char* text : {"a <tool b", "x <tool_cal", "trailing space  \n", "<", "{json}"}) {
    const Result result = Parse(ToolCallFormat::kHermes, text);
    EXPECT_EQ(result.content, text);
    EXPECT_TRUE(result.calls.empty());
  }
  const Result none = Parse(ToolCallFormat::kNone, "<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_EQ(none.content, "<tool_call>{\"name\": \"f\"}</tool_call>");
  EXPECT_TRUE(none.calls.empty());
}

TEST(OutputParser, Llama3Json) {
  Result result = Parse(ToolCallFormat::kLlama3Json,
                        " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
                        "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\"}}");
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[0].name, "get_weather");
  EXPECT_EQ(result.calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(result.calls[1].arguments, R"({"tz":"CET"})");
  EXPECT_EQ(result.content, "");
  result = Parse(ToolCallFormat::kLlama3Json,
                 "<|python_tag|>{\"name\": \"f\", \"arguments\": {\"x\": [1, 2]}}");
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].arguments, R"({"x":[1,2]})");
  // A '{' later in the text is not a call; a brace that is not JSON goes back as content.
  result = Parse(ToolCallFormat::kLlama3Json, "Use {\"name\": \"f\"} like this");
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, "Use {\"name\": \"f\"} like this");
  result = Parse(ToolCallFormat::kLlama3Json, "{not json}");
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, "{not json}");
  // Builtin-tool calls (<|python_tag|>brave_search.call(...)) are code, returned as content.
  result = Parse(ToolCallFormat::kLlama3Json, "<|python_tag|>brave_search.call(query=\"x\")");
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, "<|python_tag|>brave_search.call(query=\"x\")");
}

TEST(OutputParser, MistralBothLayouts) {
  Result result = Parse(ToolCallFormat::kMistral,
                        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"k\": 1}}, {\"name\": "
                        "\"b\", \"arguments\": {}}]");
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[1].name, "b");
  EXPECT_EQ(result.calls[0].id.size(), 9u);
  result = Parse(ToolCallFormat::kMistral,
                 "[TOOL_CALLS]a[ARGS]{\"k\": 1}[TOOL_CALLS]b[ARGS]{\"s\": \"[ARGS]\"}");
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[0].arguments, R"({"k":1})");
  EXPECT_EQ(result.calls[1].arguments, R"({"s":"[ARGS]"})");
}

TEST(OutputParser, Phi4Mini) {
  const Result result = Parse(ToolCallFormat::kPhi4Mini,
                              "<|tool_call|>[{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}]<|/"
                              "tool_call|>");
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].arguments, R"({"a":"b"})");
  EXPECT_EQ(result.content, "");
}

TEST(OutputParser, ThinkingThenAnswer) {
  Result result = Parse(ToolCallFormat::kNone, "<think>\nLet me think.\n</think>\n\nThe answer.",
                        /*reasoning=*/true);
  EXPECT_EQ(result.reasoning, "Let me think.\n");
  EXPECT_EQ(result.content, "The answer.");
  // The template opened <think> in the prompt: the output starts inside it (DeepSeek-R1).
  result = Parse(ToolCallFormat::kHermes,
                 "I should call.\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n"
                 "</tool_call>",
                 true, /*starts_in_reasoning=*/true);
  EXPECT_EQ(result.reasoning, "I should call.\n");
  EXPECT_EQ(result.content, "");
  ASSERT_EQ(result.calls.size(), 1u);
  // Cut off while thinking: all reasoning. No <think> at the start: all content.
  result = Parse(ToolCallFormat::kNone, "<think>still going", true);
  EXPECT_EQ(result.reasoning, "still going");
  EXPECT_EQ(result.content, "");
  result = Parse(ToolCallFormat::kNone, "Direct <think> answer", true);
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "Direct <think> answer");
  result = Parse(ToolCallFormat::kNone, "<thi", true);
  EXPECT_EQ(result.content, "<thi");
}

// The calls a real chat template writes for an assistant turn parse back to the same calls: the
// template, not this file, is the reference for each format's syntax.
struct TemplateCase {
  const char* file;  // under shared/tokenizers
  ToolCallFormat format;
  const char* turn_start;  // the text just before the assistant's output
  const char* turn_end;    // the end-of-turn text after it
  bool string_arguments;   // the template pastes arguments as a string
  bool reasoning = false;  // the template writes an (empty) <think> block before the calls
};

TEST(OutputParser, RoundTripsRealTemplates) {
  const TemplateCase cases[] = {
      {"qwen2/chat_template.jinja", ToolCallFormat::kHermes, "<|im_start|>assistant\n",
       "<|im_end|>\n", false},
      {"qwen3/chat_template.jinja", ToolCallFormat::kHermes, "<|im_start|>assistant\n",
       "<|im_end|>\n", false, true},
      {"hermes3/chat_template.tool_use.jinja", ToolCallFormat::kHermes, "<|im_start|>assistant\n",
       "<|im_end|>\n", false},
      {"mistral/more/chat_template.Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral,
       "[/INST]", "</s>", false},
      {"mistral/more/chat_template.mistral-common-v11.jinja", ToolCallFormat::kMistral, "[/INST]",
       "</s>", false},
      {"llama3/more/chat_template.Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3Json,
       "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", false},
      // DeepSeek-R1's template (deepseek/chat_template.jinja) writes a turn's calls only when
      // its content is None, which transformers 5's apply_chat_template drops (and so do we):
      // with "" the calls vanish, without the key it fails. V3.1 covers the format.
      // V3.1 writes </think> after the turn start when it does not think.
      {"deepseek/more/chat_template.DeepSeek-V3.1.jinja", ToolCallFormat::kDeepSeekV3,
       "<\xEF\xBD\x9C"
       "Assistant\xEF\xBD\x9C></think>",
       "<\xEF\xBD\x9C"
       "end\xE2\x96\x81"
       "of\xE2\x96\x81"
       "sentence\xEF\xBD\x9C>",
       true},
  };
  const Json expected_arguments[] = {Json::parse(R"({"city": "Paris", "days": 3})"),
                                     Json::parse(R"({"query": "a \"quoted\" word"})")};
  const char* names[] = {"get_weather", "search"};
  for (const TemplateCase& test : cases) {
    SCOPED_TRACE(test.file);
    const std::string source = ReadShared(test.file);
    ASSERT_FALSE(source.empty());
    absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    // One call for Llama 3.1 (its template takes exactly one), two for the others.
    const int count = test.format == ToolCallFormat::kLlama3Json ? 1 : 2;
    jinja::Value::Items calls;
    for (int index = 0; index < count; ++index) {
      jinja::Value arguments = jinja::Value::None();
      const Json& json = expected_arguments[index];
      if (test.string_arguments) {
        arguments = jinja::Value::String(json.dump());
      } else {
        jinja::Value::Entries entries;
        for (auto it = json.begin(); it != json.end(); ++it) {
          entries.emplace_back(jinja::Value::String(it.key()),
                               it->is_string() ? jinja::Value::String(it->get<std::string>())
                                               : jinja::Value::Int(it->get<int64_t>()));
        }
        arguments = jinja::Value::Dict(std::move(entries));
      }
      calls.push_back(jinja::Value::Dict(
          {{jinja::Value::String("id"),
            jinja::Value::String(index == 0 ? "abcDEF123" : "xyz987QRS")},
           {jinja::Value::String("type"), jinja::Value::String("function")},
           {jinja::Value::String("function"),
            jinja::Value::Dict({{jinja::Value::String("name"), jinja::Value::String(names[index])},
                                {jinja::Value::String("arguments"), arguments}})}}));
    }
    std::vector<jinja::ChatMessage> messages(2);
    messages[0].role = "user";
    messages[0].content = jinja::Value::String("What is the weather?");
    messages[1].role = "assistant";
    // As the server sends a turn of calls only (ReadMessages): content "", not None.
    messages[1].content = jinja::Value::String("");
    messages[1].fields.emplace_back("tool_calls", jinja::Value::List(std::move(calls)));
    jinja::ChatOptions options;
    options.bos_token = "<s>";
    options.eos_token = "</s>";
    // Tool-use templates (Hermes 3) need the tool list.
    jinja::Value::Items tools;
    for (const char* name : names) {
      tools.push_back(jinja::Value::Object(
          {{"type", jinja::Value::String("function")},
           {"function", jinja::Value::Object(
                            {{"name", jinja::Value::String(name)},
                             {"description", jinja::Value::String("a tool")},
                             {"parameters", jinja::Value::Object(
                                                {{"type", jinja::Value::String("object")}})}})}}));
    }
    options.tools = jinja::Value::List(std::move(tools));
    absl::StatusOr<std::string> rendered = jinja::RenderChat(*parsed, messages, options);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    const size_t start = rendered->rfind(test.turn_start);
    ASSERT_NE(start, std::string::npos) << *rendered;
    std::string output = rendered->substr(start + strlen(test.turn_start));
    const size_t end = output.rfind(test.turn_end);
    ASSERT_NE(end, std::string::npos) << output;
    output.resize(end);
    const Result result = Parse(test.format, output, test.reasoning);
    EXPECT_EQ(result.content, "") << output;
    ASSERT_EQ(result.calls.size(), static_cast<size_t>(count)) << output;
    for (int index = 0; index < count; ++index) {
      EXPECT_EQ(result.calls[index].name, names[index]);
      EXPECT_EQ(Json::parse(result.calls[index].arguments), expected_arguments[index]) << output;
    }
  }
}

// Harmony (gpt-oss): the channels and the calls, as the model writes them after the prompt's
// "<|start|>assistant". <|call|> and <|return|> end the generation (EOS), so most outputs end
// inside their last message.
TEST(OutputParser, HarmonyAnalysisThenFinal) {
  Result result = ParseHarmony(
      "<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final"
      "<|message|>Hello! How can I help?");
  EXPECT_EQ(result.reasoning, "User greets. Reply.");
  EXPECT_EQ(result.content, "Hello! How can I help?");
  EXPECT_TRUE(result.calls.empty());
  // <|return|> in the text (EOS ignored) ends the message; nothing follows.
  result = ParseHarmony("<|channel|>final<|message|>Done.<|return|>");
  EXPECT_EQ(result.content, "Done.");
  EXPECT_EQ(result.reasoning, "");
  // Cut off in the analysis: all reasoning so far.
  result = ParseHarmony("<|channel|>analysis<|message|>Thinking about <|en");
  EXPECT_EQ(result.reasoning, "Thinking about <|en");
  EXPECT_EQ(result.content, "");
}

TEST(OutputParser, HarmonyCallWithRecipientAfterOrBeforeTheChannel) {
  // As the model writes it.
  Result result = ParseHarmony(
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"note\": "
      "\"a <|call|> b\"}<|call|>");
  EXPECT_EQ(result.reasoning, "Need weather.");
  EXPECT_EQ(result.content, "");
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(result.calls[0].arguments),
            Json::parse(R"({"city": "Paris", "note": "a <|call|> b"})"));
  EXPECT_THAT(result.calls[0].id, ::testing::MatchesRegex("call_[a-zA-Z0-9]{24}"));
  // As the template renders history (recipient first, bare content type), ended by EOS.
  result = ParseHarmony(
      " to=functions.get_time<|channel|>commentary json<|message|>{\"zone\": \"CET\"}");
  ASSERT_EQ(result.calls.size(), 1u);
  EXPECT_EQ(result.calls[0].name, "get_time");
  EXPECT_EQ(result.calls[0].arguments, R"({"zone":"CET"})");
  EXPECT_EQ(result.content, "");
}

TEST(OutputParser, HarmonyTwoCallsAndAPreamble) {
  const Result result = ParseHarmony(
      "<|channel|>commentary<|message|>Let me check both.<|end|><|start|>assistant<|channel|>"
      "commentary to=functions.a <|constrain|>json<|message|>{\"k\": 1}<|call|><|start|>"
      "assistant to=functions.b<|channel|>commentary json<|message|>{}<|call|>");
  EXPECT_EQ(result.content, "Let me check both.");
  ASSERT_EQ(result.calls.size(), 2u);
  EXPECT_EQ(result.calls[0].name, "a");
  EXPECT_EQ(result.calls[0].arguments, R"({"k":1})");
  EXPECT_EQ(result.calls[1].name, "b");
  EXPECT_EQ(result.calls[1].arguments, "{}");
  EXPECT_NE(result.calls[0].id, result.calls[1].id);
}

TEST(OutputParser, HarmonyWhatIsNotACallIsContentAsWritten) {
  // A body that is not a JSON object.
  std::string text =
      "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\": <|call|>";
  Result result = ParseHarmony(text);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, text);
  result = ParseHarmony("<|channel|>commentary to=functions.f<|message|>[1, 2]");
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, "<|channel|>commentary to=functions.f<|message|>[1, 2]");
  // A built-in tool (browser, python) is not a function of the request.
  text =
      "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary "
      "to=browser.search<|message|>{\"query\": \"q\"}<|call|>";
  result = ParseHarmony(text);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.reasoning, "x");
  EXPECT_EQ(result.content,
            "<|start|>assistant<|channel|>commentary to=browser.search<|message|>{\"query\": "
            "\"q\"}<|call|>");
  // Without tools in the request, a message to a function is content too.
  text = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}";
  result = ParseHarmony(text, /*calls=*/false);
  EXPECT_TRUE(result.calls.empty());
  EXPECT_EQ(result.content, text);
  // Text that is no message, and a header the output never finishes.
  result = ParseHarmony("Plain answer.<|end|>");
  EXPECT_EQ(result.content, "Plain answer.");
  result = ParseHarmony("<|channel|>final<|message|>ok<|end|><|start|>assistant<|chan");
  EXPECT_EQ(result.content, "ok<|start|>assistant<|chan");
  // A header broken by an end marker, and another role's header.
  result = ParseHarmony("<|channel|>analysis<|end|><|channel|>final<|message|>ok");
  EXPECT_EQ(result.content, "<|channel|>analysis<|end|>ok");
  result = ParseHarmony("<|start|>user<|message|>hi<|end|>");
  EXPECT_EQ(result.content, "<|start|>user<|message|>hi<|end|>");
}

// What the real gpt-oss template renders for an assistant turn with a call (recipient before
// the channel, "json" after it, <|call|>) parses back to the call.
TEST(OutputParser, HarmonyRoundTripsTheGptOssTemplate) {
  const std::string source = ReadShared("gpt-oss/chat_template.jinja");
  ASSERT_FALSE(source.empty());
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const Json expected = Json::parse(R"({"city": "Paris", "note": "a \"quoted\" word"})");
  jinja::Value::Entries entries;
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    entries.emplace_back(jinja::Value::String(it.key()),
                         jinja::Value::String(it->get<std::string>()));
  }
  jinja::Value call = jinja::Value::Dict(
      {{jinja::Value::String("id"), jinja::Value::String("call_1")},
       {jinja::Value::String("type"), jinja::Value::String("function")},
       {jinja::Value::String("function"),
        jinja::Value::Dict(
            {{jinja::Value::String("name"), jinja::Value::String("get_weather")},
             {jinja::Value::String("arguments"), jinja::Value::Dict(std::move(entries))}})}});
  std::vector<jinja::ChatMessage> messages(2);
  messages[0].role = "user";
  messages[0].content = jinja::Value::String("Weather?");
  messages[1].role = "assistant";
  messages[1].content = jinja::Value::String("");
  messages[1].fields.emplace_back("thinking", jinja::Value::String("Need the weather."));
  messages[1].fields.emplace_back("tool_calls", jinja::Value::List({call}));
  absl::StatusOr<std::string> rendered = jinja::RenderChat(*parsed, messages, {});
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  // The output after the generation prompt "<|start|>assistant" that this history stands for.
  const std::string prompt_end = "<|start|>user<|message|>Weather?<|end|><|start|>assistant";
  const size_t start = rendered->find(prompt_end);
  ASSERT_NE(start, std::string::npos) << *rendered;
  const std::string output = rendered->substr(start + prompt_end.size());
  const Result result = ParseHarmony(output);
  EXPECT_EQ(result.reasoning, "Need the weather.") << output;
  EXPECT_EQ(result.content, "") << output;
  ASSERT_EQ(result.calls.size(), 1u) << output;
  EXPECT_EQ(result.calls[0].name, "get_weather");
  EXPECT_EQ(Json::parse(result.calls[0].arguments), expected);
}

}  // namespace
}  // namespace llmrt::server
