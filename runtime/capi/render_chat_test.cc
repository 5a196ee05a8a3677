// llmrt_plan_render_chat with and without the chat-template interpreter in the library
// (LLMRT_WITH_TEMPLATES): rendered when it is there, a clear UNIMPLEMENTED when it is compiled
// out. The plan is written here (no compiler needed), so the test also runs in core-only and
// cross builds; tests/capi covers rendering real templates.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "llmrt/llmrt.h"
#include "runtime/plan/plan_writer.h"
#include "runtime/plan/proto/plan.pb.h"

namespace {

// A plan with no weights whose tokenizer carries `chat_template` (and `named`, {name, source});
// returns its path.
std::string WriteTemplatePlan(const std::string& chat_template,
                              const std::vector<std::pair<std::string, std::string>>& named = {}) {
  const std::string path =
      ::testing::TempDir() + "render_chat_" + std::to_string(getpid()) + ".plan";
  auto writer = llmrt::plan::PlanWriter::Create(path);
  EXPECT_TRUE(writer.ok()) << writer.status();
  if (!writer.ok()) return path;
  llmrt::plan::PlanMeta meta;
  meta.set_producer("render_chat_test");
  meta.mutable_tokenizer()->set_chat_template(chat_template);
  for (const auto& [name, source] : named) {
    auto* entry = meta.mutable_tokenizer()->add_named_chat_templates();
    entry->set_name(name);
    entry->set_source(source);
  }
  meta.mutable_tokenizer()->set_bos_id(-1);
  meta.mutable_tokenizer()->set_eos_id(-1);
  const absl::Status finished = (*writer)->Finish(meta);
  EXPECT_TRUE(finished.ok()) << finished;
  return path;
}

TEST(RenderChatTest, RendersOrSaysTheInterpreterIsCompiledOut) {
  const std::string path =
      WriteTemplatePlan("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  llmrt_plan_t* plan = nullptr;
  llmrt_status_t* status = llmrt_plan_open(path.c_str(), nullptr, &plan);
  ASSERT_EQ(status, nullptr) << llmrt_status_get_message(status);

  llmrt_model_config config;
  llmrt_model_config_init(&config);
  ASSERT_EQ(llmrt_plan_get_config(plan, &config), nullptr);
  EXPECT_EQ(config.has_chat_template, 1);  // carried either way

  const llmrt_chat_message messages[] = {{"user", "hi"}, {"assistant", "hello"}};
  char* text = nullptr;
  size_t size = 0;
  status = llmrt_plan_render_chat(plan, messages, 2, 0, &text, &size);
#ifdef LLMRT_WITH_TEMPLATES
  ASSERT_EQ(status, nullptr) << llmrt_status_get_message(status);
  EXPECT_EQ(std::string(text, size), "[user]hi[assistant]hello");
  llmrt_free(text);
#else
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(llmrt_status_get_code(status), LLMRT_STATUS_UNIMPLEMENTED);
  const std::string message = llmrt_status_get_message(status);
  EXPECT_NE(message.find("llmrt_plan_render_chat: this libllmrt was built without chat templates"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("LLMRT_WITH_TEMPLATES=OFF"), std::string::npos) << message;
  llmrt_status_free(status);
  EXPECT_EQ(text, nullptr);
#endif
  // The source stays available, so an app can render it with its own engine.
  const char* source = nullptr;
  ASSERT_EQ(llmrt_plan_get_chat_template(plan, &source, &size), nullptr);
  EXPECT_EQ(std::string(source, size).substr(0, 6), "{% for");
  llmrt_plan_close(plan);
  std::remove(path.c_str());
}

TEST(RenderChatTest, NamedTemplateByName) {
  const std::string path =
      WriteTemplatePlan("{% for m in messages %}{{ m.content }}{% endfor %}",
                        {{"tool_use", "{% for m in messages %}<{{ m.content }}>{% endfor %}"}});
  llmrt_plan_t* plan = nullptr;
  llmrt_status_t* status = llmrt_plan_open(path.c_str(), nullptr, &plan);
  ASSERT_EQ(status, nullptr) << llmrt_status_get_message(status);
  const llmrt_chat_message messages[] = {{"user", "hi"}};
  char* text = nullptr;
  size_t size = 0;
  status = llmrt_plan_render_chat_with_template(plan, "tool_use", messages, 1, 0, &text, &size);
#ifdef LLMRT_WITH_TEMPLATES
  ASSERT_EQ(status, nullptr) << llmrt_status_get_message(status);
  EXPECT_EQ(std::string(text, size), "<hi>");
  llmrt_free(text);
  status = llmrt_plan_render_chat_with_template(plan, nullptr, messages, 1, 0, &text, &size);
  ASSERT_EQ(status, nullptr) << llmrt_status_get_message(status);
  EXPECT_EQ(std::string(text, size), "hi");
  llmrt_free(text);
  text = nullptr;
  status = llmrt_plan_render_chat_with_template(plan, "rag", messages, 1, 0, &text, &size);
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(llmrt_status_get_code(status), LLMRT_STATUS_NOT_FOUND);
  EXPECT_EQ(std::string(llmrt_status_get_message(status)),
            "llmrt_plan_render_chat_with_template: chat template: the plan has no chat template "
            "named \"rag\"; it has: default, tool_use");
  llmrt_status_free(status);
  EXPECT_EQ(text, nullptr);
#else
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(llmrt_status_get_code(status), LLMRT_STATUS_UNIMPLEMENTED);
  llmrt_status_free(status);
#endif
  llmrt_plan_close(plan);
  std::remove(path.c_str());
}

}  // namespace
