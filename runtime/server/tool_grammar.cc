#include "runtime/server/tool_grammar.h"

#include <string_view>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/grammar/grammar.h"
#include "runtime/grammar/json_schema.h"

namespace llmrt::server {
namespace {

using Json = nlohmann::ordered_json;

// A marker as a grammar item: a special token whole, anything else as text.
std::string Marker(const plan::TokenizerSpec& tokenizer, std::string_view text) {
  for (const plan::TokenizerSpec::AddedToken& token : tokenizer.added_tokens()) {
    if (token.special() && token.content() == text) return absl::StrFormat("<[%d]>", token.id());
  }
  return grammar::GbnfLiteral(text);
}

// How the calls of a format sit in the output: open, calls joined by `separator`, close.
struct Layout {
  std::string open, separator, close;
  std::string call_open, call_close;  // around each call
  bool deepseek = false;              // name and fenced arguments instead of a JSON object
  bool harmony = false;               // a message header naming the function, then arguments
  const char* arguments_key = "arguments";
};

absl::StatusOr<Layout> LayoutOf(ToolCallFormat format, const plan::TokenizerSpec& tokenizer) {
  Layout layout;
  switch (format) {
    case ToolCallFormat::kHermes:
      layout.separator = grammar::GbnfLiteral("\n");
      layout.call_open = Marker(tokenizer, "<tool_call>") + " " + grammar::GbnfLiteral("\n");
      layout.call_close = grammar::GbnfLiteral("\n") + " " + Marker(tokenizer, "</tool_call>");
      return layout;
    case ToolCallFormat::kLlama3Json:
      layout.separator = grammar::GbnfLiteral("; ");
      layout.arguments_key = "parameters";
      return layout;
    case ToolCallFormat::kMistral:
      layout.open = Marker(tokenizer, markers::kMistralCalls) + " \"[\"";
      layout.separator = grammar::GbnfLiteral(", ");
      layout.close = "\"]\"";
      return layout;
    case ToolCallFormat::kPhi4Mini:
      layout.open = Marker(tokenizer, "<|tool_call|>") + " \"[\"";
      layout.separator = grammar::GbnfLiteral(", ");
      layout.close = "\"]\" " + Marker(tokenizer, "<|/tool_call|>");
      return layout;
    case ToolCallFormat::kDeepSeekV3:
      layout.open = Marker(tokenizer, markers::kDeepSeekCallsBegin);
      layout.separator = grammar::GbnfLiteral("\n");
      layout.close = Marker(tokenizer, markers::kDeepSeekCallsEnd);
      layout.call_open = Marker(tokenizer, markers::kDeepSeekCallBegin) + " " +
                         grammar::GbnfLiteral("function") + " " +
                         Marker(tokenizer, markers::kDeepSeekSep);
      layout.call_close = Marker(tokenizer, markers::kDeepSeekCallEnd);
      layout.deepseek = true;
      return layout;
    case ToolCallFormat::kHarmony:
      // Each call is a commentary message ended by <|call|> (an EOS token: the engine stops
      // there, so in practice one call; with EOS ignored the next message follows).
      layout.separator = absl::StrJoin(
          {Marker(tokenizer, markers::kHarmonyCall), Marker(tokenizer, markers::kHarmonyStart),
           grammar::GbnfLiteral("assistant")},
          " ");
      layout.close = Marker(tokenizer, markers::kHarmonyCall);
      layout.harmony = true;
      return layout;
    case ToolCallFormat::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      "'tool_choice' forces a tool call, but this model has no tool-call format (the plan "
      "records none; start the server with --tool-call-format); use \"auto\" or \"none\"");
}

}  // namespace

absl::StatusOr<std::string> ToolCallGbnf(ToolCallFormat format, const Json& tools,
                                         const ForcedToolCalls& forced,
                                         const plan::TokenizerSpec& tokenizer) {
  if (!tools.is_array() || tools.empty()) {
    return absl::InvalidArgumentError(
        "'tool_choice' forces a tool call, but the request has no 'tools'");
  }
  absl::StatusOr<Layout> layout = LayoutOf(format, tokenizer);
  if (!layout.ok()) return layout.status();
  std::string rules;
  std::vector<std::string> calls;
  for (size_t index = 0; index < tools.size(); ++index) {
    const Json& function = tools[index]["function"];
    const std::string name = function["name"].get<std::string>();
    if (!forced.function.empty() && name != forced.function) continue;
    const std::string prefix = absl::StrFormat("tool%d-", index);
    std::string arguments = grammar::GbnfLiteral("{}");  // no parameters: no arguments
    if (auto parameters = function.find("parameters");
        parameters != function.end() && !parameters->is_null()) {
      // The arguments are a JSON object whatever the schema says: "type" is added where it is
      // left out (an empty schema, bare "properties"), and any other type is refused.
      Json object_schema = *parameters;
      if (object_schema.is_object() && !object_schema.contains("type") &&
          !object_schema.contains("anyOf") && !object_schema.contains("oneOf") &&
          !object_schema.contains("$ref")) {
        object_schema["type"] = "object";
      }
      if (object_schema.is_object() && object_schema.contains("type") &&
          object_schema["type"] != "object") {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'tools[%d].function.parameters.type' must be \"object\" (arguments are a JSON "
            "object), found %s",
            index, object_schema["type"].dump()));
      }
      absl::StatusOr<std::string> schema = grammar::JsonSchemaRules(object_schema, prefix);
      if (!schema.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "'tools[%d].function.parameters' cannot be enforced for tool_choice: %s", index,
            schema.status().message()));
      }
      rules += *schema;
      arguments = prefix + "root";
    }
    std::string call;
    if (layout->harmony) {
      call = absl::StrJoin(
          {Marker(tokenizer, markers::kHarmonyChannel),
           grammar::GbnfLiteral("commentary to=functions." + name + " "),
           Marker(tokenizer, markers::kHarmonyConstrain), grammar::GbnfLiteral("json"),
           Marker(tokenizer, markers::kHarmonyMessage), arguments},
          " ");
    } else if (layout->deepseek) {
      call = absl::StrJoin({grammar::GbnfLiteral(name), grammar::GbnfLiteral("\n```json\n"),
                            arguments, grammar::GbnfLiteral("\n```")},
                           " ");
    } else {
      call = absl::StrJoin({grammar::GbnfLiteral("{\"name\": " + Json(name).dump() + ", \"" +
                                                 layout->arguments_key + "\": "),
                            arguments, grammar::GbnfLiteral("}")},
                           " ");
    }
    calls.push_back(absl::StrJoin({layout->call_open, call, layout->call_close}, " "));
  }
  if (calls.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "'tool_choice' names the function '%s', which is not among the request's 'tools'",
        forced.function));
  }
  std::string root = "root ::= ";
  if (forced.close_reasoning && !layout->harmony) {  // harmony has no <think>
    root += Marker(tokenizer, "</think>") + " " + grammar::GbnfLiteral("\n\n") + " ";
  }
  root += absl::StrJoin({layout->open, std::string("call")}, " ");
  if (forced.parallel) root += " (" + layout->separator + " call)*";
  root += " " + layout->close + "\n";
  return root + "call ::= " + absl::StrJoin(calls, " | ") + "\n" + rules + grammar::JsonBaseGbnf();
}

}  // namespace llmrt::server
