#include "tests/server/server_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include "gtest/gtest.h"
#include "tests/e2e/test_util.h"

namespace llmrt::testing {

using llmc::testing::CommandResult;
using llmc::testing::CopyDir;
using llmc::testing::MakeScratchDir;
using llmc::testing::ReadFile;
using llmc::testing::RunCommand;
using llmc::testing::SourcePath;
using llmc::testing::ToolPath;
using llmc::testing::WriteFile;

// A minimal template in transformers' conventions (bos_token, messages, add_generation_prompt);
// stories260K ships none.
constexpr char kChatTemplate[] =
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

std::string StoriesChatPlan() {
  static std::string plan;
  if (!plan.empty()) return plan;
  const std::string dir = MakeScratchDir("stories-chat");
  CopyDir(SourcePath("tests/data/stories260K"), dir + "/model");
  WriteFile(dir + "/model/chat_template.jinja", kChatTemplate);
  const CommandResult compiled =
      RunCommand(ToolPath("llmc") + " compile " + dir + "/model -o " + dir + "/stories.plan");
  EXPECT_EQ(compiled.exit_code, 0) << compiled.error;
  if (compiled.exit_code == 0) plan = dir + "/stories.plan";
  return plan;
}

std::string ShellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ServerProcess::error() const { return ReadFile(stderr_path_); }

bool ServerProcess::Start(const std::string& plan, const std::string& flags) {
  stderr_path_ = MakeScratchDir("server") + "/stderr";
  const std::string command =
      "exec " + ToolPath("llmrt") + " serve " + plan + " --port 0 " + flags + " 2>" + stderr_path_;
  pid_ = fork();
  if (pid_ == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  if (pid_ < 0) return false;
  const std::regex listening("listening on http://[0-9.]+:([0-9]+)");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::smatch match;
    const std::string text = ReadFile(stderr_path_);
    if (std::regex_search(text, match, listening)) {
      port_ = std::stoi(match[1].str());
      return true;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void ServerProcess::SendSigterm() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

int ServerProcess::Wait(double timeout_seconds) {
  if (pid_ <= 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

int ServerProcess::Terminate(double timeout_seconds) {
  SendSigterm();
  const int status = Wait(timeout_seconds);
  if (status == -1 && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  return status;
}

HttpResult Curl(const std::string& url, const std::string& arguments) {
  const std::string dir = MakeScratchDir("curl");
  const CommandResult result =
      RunCommand("curl -s -S -N -o " + dir + "/body -D " + dir + "/headers -w '%{http_code}' " +
                 arguments + " " + ShellQuote(url));
  HttpResult http;
  http.status = std::atoi(result.output.c_str());
  http.body = ReadFile(dir + "/body");
  http.headers = ReadFile(dir + "/headers");
  return http;
}

}  // namespace llmrt::testing
