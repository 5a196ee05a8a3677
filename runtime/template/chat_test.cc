#include "runtime/template/chat.h"

#include <map>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/template/plan_chat_template.h"
#include "runtime/template/test_json.h"

namespace llmrt::jinja {
namespace {

RenderOptions PinnedClock() {
  // make_reference.py pins strftime_now to 2024-07-26 10:00:00.
  RenderOptions options;
  std::tm when = {};
  when.tm_year = 2024 - 1900;
  when.tm_mon = 6;
  when.tm_mday = 26;
  when.tm_hour = 10;
  when.tm_wday = 5;
  when.tm_yday = 207;
  options.now = when;
  return options;
}

// Every real chat template (../shared/tokenizers: extra/, more/ and the templates inside
// tokenizer_config files included) on every reference conversation (tools, tool calls with dict
// and string arguments, tool results, template keyword variables), with and without
// add_generation_prompt, against jinja2 through transformers' render_jinja_template:
// byte-identical output, or the same raised message.
TEST(ChatConformanceTest, EveryTemplateMatchesTransformers) {
  const nlohmann::ordered_json reference =
      ReadJsonFile(std::string(LLMRT_TEMPLATE_TESTDATA) + "/chat_reference.json");
  std::map<std::string, nlohmann::ordered_json> templates;
  for (const auto& entry : reference["templates"]) {
    templates[entry["name"].get<std::string>()] = entry;
  }
  std::map<std::string, nlohmann::ordered_json> conversations;
  for (const auto& entry : reference["conversations"]) {
    conversations[entry["name"].get<std::string>()] = entry;
  }
  ASSERT_GE(templates.size(), 35u);
  ASSERT_GE(conversations.size(), 14u);
  int rendered_cases = 0, raised_cases = 0;
  std::map<std::string, Template> parsed;
  for (const auto& [name, entry] : templates) {
    absl::StatusOr<Template> chat_template = Template::Parse(entry["source"].get<std::string>());
    ASSERT_TRUE(chat_template.ok()) << name << ": " << chat_template.status();
    parsed.emplace(name, *chat_template);
  }
  for (const auto& test_case : reference["cases"]) {
    const std::string template_name = test_case["template"].get<std::string>();
    const std::string conversation_name = test_case["conversation"].get<std::string>();
    const bool add_generation_prompt = test_case["add_generation_prompt"].get<bool>();
    SCOPED_TRACE(template_name + " / " + conversation_name +
                 (add_generation_prompt ? " / add_generation_prompt" : ""));
    const nlohmann::ordered_json& entry = templates.at(template_name);
    const nlohmann::ordered_json& conversation = conversations.at(conversation_name);

    ChatOptions options;
    options.add_generation_prompt = add_generation_prompt;
    if (!entry["bos_token"].is_null()) options.bos_token = entry["bos_token"].get<std::string>();
    if (!entry["eos_token"].is_null()) options.eos_token = entry["eos_token"].get<std::string>();
    if (conversation.contains("tools")) options.tools = JsonToValue(conversation["tools"]);
    if (conversation.contains("kwargs")) {
      for (auto it = conversation["kwargs"].begin(); it != conversation["kwargs"].end(); ++it) {
        options.extra_variables.emplace_back(it.key(), JsonToValue(it.value()));
      }
    }
    options.render = PinnedClock();
    std::vector<ChatMessage> messages;
    for (const auto& message : conversation["messages"]) {
      ChatMessage chat_message;
      for (auto it = message.begin(); it != message.end(); ++it) {
        if (it.key() == "role") {
          chat_message.role = it.value().get<std::string>();
        } else if (it.key() == "content") {
          chat_message.content = JsonToValue(it.value());
        } else {
          chat_message.fields.emplace_back(it.key(), JsonToValue(it.value()));
        }
      }
      messages.push_back(std::move(chat_message));
    }
    absl::StatusOr<std::string> rendered = RenderChat(parsed.at(template_name), messages, options);
    if (test_case.contains("output")) {
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      EXPECT_EQ(*rendered, test_case["output"].get<std::string>());
      ++rendered_cases;
      continue;
    }
    ++raised_cases;
    const std::string type = test_case["error_type"].get<std::string>();
    const std::string message = test_case["error"].get<std::string>();
    ASSERT_FALSE(rendered.ok()) << "rendered where jinja2 raised " << type << ": " << message;
    if (type == "TemplateError") {
      EXPECT_EQ(rendered.status().code(), kTemplateRaisedCode) << rendered.status();
      EXPECT_EQ(rendered.status().message(), message);
    } else if (type == "RecursionError") {
      // Python's recursion limit; ours is RenderLimits::max_call_depth.
      EXPECT_EQ(rendered.status().code(), absl::StatusCode::kResourceExhausted)
          << rendered.status();
    } else {
      EXPECT_TRUE(absl::EndsWith(rendered.status().message(), type + ": " + message))
          << rendered.status() << " vs jinja2 " << type << ": " << message;
    }
  }
  // The reference has both kinds; a reference that lost either would weaken this test.
  EXPECT_GE(rendered_cases, 800);
  EXPECT_GE(raised_cases, 150);
}

TEST(RenderChatTest, GemmaRefusesASystemMessageWithItsOwnMessage) {
  absl::StatusOr<Template> gemma = Template::Parse(
      "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role "
      "not supported') }}{% endif %}{% for message in messages %}{{ message['content'] }}"
      "{% endfor %}");
  ASSERT_TRUE(gemma.ok());
  ChatOptions options;
  options.bos_token = "<bos>";
  absl::StatusOr<std::string> rendered =
      RenderChat(*gemma, {{"system", Value::String("be nice")}}, options);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), kTemplateRaisedCode);
  EXPECT_EQ(rendered.status().message(), "System role not supported");
  rendered = RenderChat(*gemma, {{"user", Value::String("hi")}}, options);
  ASSERT_TRUE(rendered.ok());
  EXPECT_EQ(*rendered, "<bos>hi");
}

TEST(RenderChatTest, PassesToolsExtraVariablesAndMessageFields) {
  absl::StatusOr<Template> chat_template = Template::Parse(
      "{{ tools is none }}|{{ date_string }}|{% for m in messages %}{{ m.role }}:"
      "{{ m.tool_call_id | default('-') }};{% endfor %}{{ add_generation_prompt }}");
  ASSERT_TRUE(chat_template.ok());
  ChatOptions options;
  options.add_generation_prompt = true;
  options.extra_variables.emplace_back("date_string", Value::String("1 Jan 2025"));
  ChatMessage tool{"tool", Value::String("42"), {{"tool_call_id", Value::String("call_7")}}};
  absl::StatusOr<std::string> rendered =
      RenderChat(*chat_template, {{"user", Value::String("q")}, tool}, options);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "True|1 Jan 2025|user:-;tool:call_7;True");
}

// Which template renders, against transformers' get_chat_template(name, tools) on the templates
// it loaded (chat_template_selection.json): the same source, or an error where it raises. Where
// transformers takes a name it does not know as the template text itself, we refuse the name
// (a template source is given at compile time, never in place of a name); "default" always
// names the default template.
TEST(PlanChatTemplateTest, SelectsAsTransformersGetChatTemplate) {
  const nlohmann::ordered_json reference =
      ReadJsonFile(std::string(LLMRT_TEMPLATE_TESTDATA) + "/chat_template_selection.json");
  int checked = 0;
  for (const auto& scenario : reference["scenarios"]) {
    SCOPED_TRACE(scenario["name"].get<std::string>());
    plan::TokenizerSpec spec;
    std::map<std::string, std::string> sources;
    if (scenario["loaded"].is_string()) {
      spec.set_chat_template(scenario["loaded"].get<std::string>());
      sources[kDefaultTemplateName] = spec.chat_template();
    } else {
      for (const auto& [name, source] : scenario["loaded"].items()) {
        sources[name] = source.get<std::string>();
        if (name == kDefaultTemplateName) {
          spec.set_chat_template(source.get<std::string>());
        } else {
          auto* named = spec.add_named_chat_templates();
          named->set_name(name);
          named->set_source(source.get<std::string>());
        }
      }
    }
    absl::StatusOr<PlanChatTemplate> chat_template = PlanChatTemplate::Create(spec);
    ASSERT_TRUE(chat_template.ok()) << chat_template.status();
    for (const auto& request : scenario["requests"]) {
      const std::string requested =
          request["name"].is_null() ? "" : request["name"].get<std::string>();
      const bool has_tools = !request["tools"].is_null();
      SCOPED_TRACE("name '" + requested + "', tools " + (has_tools ? "given" : "none"));
      absl::StatusOr<std::string> selected = chat_template->Select(requested, has_tools);
      ++checked;
      if (request.contains("error")) {
        ASSERT_FALSE(selected.ok());
        EXPECT_EQ(selected.status().code(), absl::StatusCode::kFailedPrecondition);
        continue;
      }
      const std::string expected = request["template"].get<std::string>();
      if (!requested.empty() && expected == requested) {
        // transformers took the name as template text: with one template it does so even for
        // "default", which names that template for us.
        if (sources.count(requested)) {
          ASSERT_TRUE(selected.ok()) << selected.status();
          EXPECT_EQ(*selected, requested);
          continue;
        }
        ASSERT_FALSE(selected.ok());
        EXPECT_EQ(selected.status().code(), absl::StatusCode::kNotFound);
        EXPECT_TRUE(absl::StrContains(selected.status().message(), "it has: "))
            << selected.status();
        continue;
      }
      ASSERT_TRUE(selected.ok()) << selected.status();
      EXPECT_EQ(sources.at(*selected), expected);
    }
  }
  EXPECT_GE(checked, 50);
}

TEST(PlanChatTemplateTest, RendersTheSelectedTemplateAndNamesItInErrors) {
  plan::TokenizerSpec spec;
  spec.set_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}");
  auto* tool_use = spec.add_named_chat_templates();
  tool_use->set_name("tool_use");
  tool_use->set_source("{% for t in tools %}{{ t.name }};{% endfor %}{{ messages[0].content }}");
  absl::StatusOr<PlanChatTemplate> chat_template = PlanChatTemplate::Create(spec);
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  EXPECT_EQ(chat_template->names(), (std::vector<std::string>{"default", "tool_use"}));
  ASSERT_NE(chat_template->Source("tool_use"), nullptr);
  EXPECT_EQ(*chat_template->Source("tool_use"), tool_use->source());
  EXPECT_EQ(*chat_template->Source("default"), spec.chat_template());
  EXPECT_EQ(chat_template->Source("rag"), nullptr);
  const std::vector<ChatMessage> messages = {{"user", Value::String("hi")}};
  ChatOptions options;
  EXPECT_EQ(*chat_template->Render(messages, options), "hi");
  options.tools = Value::List({Value::Object({{"name", Value::String("f")}})});
  EXPECT_EQ(*chat_template->Render(messages, options), "f;hi");
  EXPECT_EQ(*chat_template->Render(messages, options, "default"), "hi");
  // Without tools the tool_use template iterates None: the error names the template.
  absl::StatusOr<std::string> failed = chat_template->Render(messages, ChatOptions{}, "tool_use");
  ASSERT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StartsWith(failed.status().message(), "chat template \"tool_use\": "))
      << failed.status();

  tool_use->set_source("{% if %}");
  absl::StatusOr<PlanChatTemplate> broken = PlanChatTemplate::Create(spec);
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(absl::StartsWith(broken.status().message(), "chat template \"tool_use\": "))
      << broken.status();
  EXPECT_EQ(PlanChatTemplate::Create(plan::TokenizerSpec()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace llmrt::jinja
