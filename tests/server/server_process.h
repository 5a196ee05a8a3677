// Test helpers: a real `llmrt serve` child process on a free loopback port, and curl.
#ifndef LLMRT_TESTS_SERVER_SERVER_PROCESS_H_
#define LLMRT_TESTS_SERVER_SERVER_PROCESS_H_

#include <sys/types.h>

#include <string>

namespace llmrt::testing {

// stories260K with a small chat template added, compiled once per test process with the
// built llmc; returns the plan path ("" and a gtest failure when compiling fails).
std::string StoriesChatPlan();

// `llmrt serve PLAN --port 0 FLAGS`: the server picks a free port and prints it; Start() waits
// for that line (up to 60 s: the machine may be loaded).
class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();  // SIGKILLs a server still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Returns false (with the server's stderr in `error()`) when it did not start.
  bool Start(const std::string& plan, const std::string& flags = "");
  // SIGTERM, then waits up to `timeout_seconds`; the exit status, or -1 (then SIGKILLed).
  int Terminate(double timeout_seconds = 60);
  void SendSigterm();
  // Waits for exit after SendSigterm(); the exit status or -1 on timeout.
  int Wait(double timeout_seconds);

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string error() const;

 private:
  pid_t pid_ = -1;
  int port_ = -1;
  std::string stderr_path_;
};

struct HttpResult {
  int status = 0;    // 0: curl failed to connect
  std::string body;  // response body
  std::string headers;
};
// Runs curl with `arguments` (already shell-quoted) against `url`; -s, no retries.
HttpResult Curl(const std::string& url, const std::string& arguments = "");
// Single-quotes `text` for /bin/sh.
std::string ShellQuote(const std::string& text);

}  // namespace llmrt::testing

#endif  // LLMRT_TESTS_SERVER_SERVER_PROCESS_H_
