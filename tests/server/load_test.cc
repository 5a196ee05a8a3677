// `llmrt serve` under load, at small scale (stories260K) so each test takes seconds:
//   - open-loop arrivals at 4x the measured sustainable rate: every request gets a complete 200
//     stream or a 429, none hangs or is lost, and the KV cache is empty afterwards;
//   - clients abandoning streams and plain requests at random points: their blocks are freed
//     (KV usage back to 0 within a second), and the server still answers exactly afterwards;
//   - SIGTERM with streams in flight and clients still arriving: every stream ends with a
//     finish_reason and [DONE], newcomers get 503 (or find the listener closed), exit 0;
//   - a KV pool far smaller than the load: preemption, and every request that fits alone
//     completes with the tokens it gives alone;
//   - a short run of the soak driver (bench/soak): the mix of valid, invalid and abandoned
//     requests, with the KV and RSS checks.
// Clients are cpp-httplib in threads: disconnects happen at exact points of the stream.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/e2e/test_util.h"
#include "tests/server/server_process.h"

namespace llmrt::testing {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using llmc::testing::CommandResult;
using llmc::testing::RunCommand;
using llmc::testing::ToolPath;
using ::testing::HasSubstr;

struct Reply {
  int status = 0;         // 0: no response (connection refused, timeout, or we hung up)
  std::string body;       // as received
  bool complete = false;  // the transfer ended normally
  double seconds = 0;
};

// POSTs `body` to `path`. `keep_going` (optional) sees the body so far after every chunk and
// may return false to hang up there.
Reply Post(int port, const std::string& path, const Json& body,
           const std::function<bool(const std::string&)>& keep_going = nullptr,
           int read_timeout_ms = 60000) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(read_timeout_ms / 1000, (read_timeout_ms % 1000) * 1000);
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.headers.emplace("Content-Type", "application/json");
  request.body = body.dump();
  Reply reply;
  request.response_handler = [&](const httplib::Response& response) {
    reply.status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    reply.body.append(data, size);
    return !keep_going || keep_going(reply.body);
  };
  const Clock::time_point start = Clock::now();
  httplib::Result result = client.send(request);
  reply.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  reply.complete = static_cast<bool>(result);
  return reply;
}

std::string MetricsPage(int port) {
  httplib::Client client("127.0.0.1", port);
  httplib::Result result = client.Get("/metrics");
  return result && result->status == 200 ? result->body : "";
}

double Metric(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series);
  if (at == std::string::npos) return -1;
  const size_t line_end = page.find('\n', at + 1);
  const std::string line = page.substr(at + 1, line_end - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

// Polls /metrics until nothing runs, waits or holds KV; returns how long that took (or -1).
double SecondsUntilEmpty(int port, double limit_seconds) {
  const Clock::time_point start = Clock::now();
  while (true) {
    const std::string page = MetricsPage(port);
    if (Metric(page, "llmrt:num_requests_running") == 0 &&
        Metric(page, "llmrt:num_requests_waiting") == 0 &&
        Metric(page, "llmrt:kv_cache_usage_perc") == 0) {
      return std::chrono::duration<double>(Clock::now() - start).count();
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > limit_seconds) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

int CountOf(const std::string& text, const std::string& part) {
  int count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++count;
  }
  return count;
}

bool EndsWithDone(const std::string& body) {
  constexpr char kDone[] = "data: [DONE]\n\n";
  return body.size() >= sizeof(kDone) - 1 &&
         body.compare(body.size() - (sizeof(kDone) - 1), sizeof(kDone) - 1, kDone) == 0;
}

// The streamed completion text of choice 0.
std::string StreamedText(const std::string& body) {
  std::string text;
  for (size_t at = body.find("data: {"); at != std::string::npos;
       at = body.find("data: {", at + 1)) {
    const Json chunk = Json::parse(body.substr(at + 6, body.find("\n\n", at) - at - 6));
    if (!chunk["choices"].empty()) text += chunk["choices"][0].value("text", "");
  }
  return text;
}

class LoadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { plan_ = new std::string(StoriesChatPlan()); }
  static void TearDownTestSuite() { delete plan_; }
  void SetUp() override { ASSERT_FALSE(plan_->empty()) << "compiling stories260K failed"; }
  static std::string* plan_;
};
std::string* LoadTest::plan_ = nullptr;

Json LongStream(int64_t max_tokens, int n = 1) {
  return {{"prompt", "Once upon a time"},
          {"max_tokens", max_tokens},
          {"ignore_eos", true},
          {"temperature", 0.8},
          {"n", n},
          {"stream", true}};
}

TEST_F(LoadTest, FourTimesTheSustainableRateGets200Or429AndNothingIsLost) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1 --max-seqs 4 --max-queued 4")) << server.error();
  const Json body = LongStream(96);
  // Sustainable rate: 8 requests, 4 at a time (what --max-seqs runs at once).
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> closed_loop;
  std::atomic<int> completed{0};
  for (int worker = 0; worker < 4; ++worker) {
    closed_loop.emplace_back([&] {
      for (int index = 0; index < 2; ++index) {
        const Reply reply = Post(server.port(), "/v1/completions", body);
        if (reply.status == 200 && EndsWithDone(reply.body)) ++completed;
      }
    });
  }
  for (std::thread& thread : closed_loop) thread.join();
  ASSERT_EQ(completed.load(), 8);
  const double sustainable_rate = 8.0 / std::chrono::duration<double>(Clock::now() - start).count();

  // Open loop at 4x that rate: 48 arrivals, each on its own connection.
  constexpr int kArrivals = 48;
  const double gap_seconds = 1.0 / (4 * sustainable_rate);
  std::vector<Reply> replies(kArrivals);
  std::vector<std::thread> clients;
  const Clock::time_point open_start = Clock::now();
  for (int index = 0; index < kArrivals; ++index) {
    std::this_thread::sleep_until(
        open_start + std::chrono::microseconds(static_cast<int64_t>(index * gap_seconds * 1e6)));
    clients.emplace_back([&, index] {
      replies[index] = Post(server.port(), "/v1/completions", body, nullptr, 60000);
    });
  }
  for (std::thread& thread : clients) thread.join();
  int ok = 0, rejected = 0;
  for (int index = 0; index < kArrivals; ++index) {
    const Reply& reply = replies[index];
    ASSERT_TRUE(reply.complete) << "request " << index << " got no complete answer (hung?)";
    if (reply.status == 429) {
      ++rejected;
      EXPECT_THAT(reply.body, HasSubstr("rate_limit_exceeded"));
      continue;
    }
    ASSERT_EQ(reply.status, 200) << "request " << index << ": " << reply.body;
    ++ok;
    EXPECT_TRUE(EndsWithDone(reply.body)) << "stream " << index << " cut";
    EXPECT_EQ(CountOf(reply.body, "\"finish_reason\":\"length\""), 1) << reply.body;
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(rejected, 0) << "4x the sustainable rate never filled the queue (rate "
                         << sustainable_rate << "/s)";
  EXPECT_GE(SecondsUntilEmpty(server.port(), 10), 0) << MetricsPage(server.port());
  const std::string page = MetricsPage(server.port());
  EXPECT_EQ(Metric(page, "llmrt:request_rejected_queue_full_total"), rejected);
  // Queueing happened and was measured: requests waited behind the 4 running ones.
  EXPECT_GT(Metric(page, "llmrt:request_queue_time_seconds_count{model_name=\"stories\"}"), 0);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(LoadTest, ClientsHangingUpAtRandomPointsLeaveNoBlocksBehind) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1")) << server.error();
  const int port = server.port();
  const Json greedy = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const Reply before = Post(port, "/v1/completions", greedy);
  ASSERT_EQ(before.status, 200) << before.body;

  // 32 clients, 8 at a time: streams cut after 1..60 events, plain requests after 1..80 ms,
  // and every fourth stream read to the end.
  constexpr int kClients = 32;
  std::atomic<int> next{0}, cut{0}, streams_cut{0}, finished{0};
  std::vector<std::thread> workers;
  for (int worker = 0; worker < 8; ++worker) {
    workers.emplace_back([&, worker] {
      std::mt19937 random(1234 + worker);
      for (int index = next++; index < kClients; index = next++) {
        const int n = 1 + static_cast<int>(random() % 3);
        if (index % 4 == 3) {
          const Reply reply = Post(port, "/v1/completions", LongStream(60, n));
          EXPECT_EQ(reply.status, 200);
          EXPECT_TRUE(EndsWithDone(reply.body)) << reply.body;
          ++finished;
        } else if (index % 2 == 0) {
          const int events = 1 + static_cast<int>(random() % 60);
          Post(port, "/v1/completions", LongStream(300, n),
               [events](const std::string& body) { return CountOf(body, "\n\n") < events; });
          ++cut;
          ++streams_cut;
        } else {
          Json plain = LongStream(300, n);
          plain.erase("stream");
          Post(port, "/v1/completions", plain, nullptr, 1 + static_cast<int>(random() % 80));
          ++cut;
        }
      }
    });
  }
  for (std::thread& thread : workers) thread.join();
  EXPECT_EQ(cut + finished, kClients);
  // Every hang-up is seen within the server's 10 ms poll and freed at the next step (2 s
  // leaves room for a loaded machine).
  const double drained = SecondsUntilEmpty(port, 5);
  EXPECT_GE(drained, 0) << MetricsPage(port);
  EXPECT_LT(drained, 2.0);
  // Every cut stream had started (it got events), so each was cancelled in the engine; a plain
  // request may be dropped before its handler ran.
  const std::string page = MetricsPage(port);
  EXPECT_GE(Metric(page,
                   "llmrt:request_success_total{model_name=\"stories\",finished_reason="
                   "\"abort\"}"),
            streams_cut.load());
  // Nothing was corrupted: the same greedy answer as before.
  const Reply after = Post(port, "/v1/completions", greedy);
  ASSERT_EQ(after.status, 200);
  EXPECT_EQ(Json::parse(after.body)["choices"][0]["text"],
            Json::parse(before.body)["choices"][0]["text"]);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(LoadTest, SigtermUnderLoadFinishesEveryStreamAndRefusesNewcomers) {
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1 --drain-timeout 60")) << server.error();
  const int port = server.port();
  constexpr int kStreams = 12;
  std::vector<Reply> streams(kStreams);
  std::vector<std::thread> clients;
  std::atomic<int> started{0};
  for (int index = 0; index < kStreams; ++index) {
    clients.emplace_back([&, index] {
      streams[index] = Post(port, "/v1/completions", LongStream(200, 1 + index % 2),
                            [&started, counted = false](const std::string& body) mutable {
                              if (!counted && body.find("data: {") != std::string::npos) {
                                counted = true;
                                ++started;
                              }
                              return true;
                            });
    });
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(30);
  while (started.load() < kStreams && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(started.load(), kStreams);
  server.SendSigterm();
  httplib::Client health("127.0.0.1", port);
  const Clock::time_point drain_seen_deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < drain_seen_deadline) {
    httplib::Result result = health.Get("/health");
    if (!result || result->status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Newcomers keep arriving during the drain: 503 while the listener is up, then no
  // connection at all; never a 200 and never a hang.
  std::atomic<int> refused_503{0}, unreachable{0}, other{0};
  std::thread newcomers([&] {
    for (int index = 0; index < 200; ++index) {
      const Reply reply = Post(port, "/v1/completions", LongStream(8), nullptr, 10000);
      if (reply.status == 503) {
        ++refused_503;
        EXPECT_THAT(reply.body, HasSubstr("shutting down"));
      } else if (reply.status == 0) {
        ++unreachable;
        break;
      } else {
        ++other;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (std::thread& thread : clients) thread.join();
  newcomers.join();
  EXPECT_EQ(server.Wait(60), 0) << server.error();
  EXPECT_GT(refused_503.load(), 0);
  EXPECT_EQ(other.load(), 0);
  for (int index = 0; index < kStreams; ++index) {
    const Reply& reply = streams[index];
    EXPECT_EQ(reply.status, 200);
    EXPECT_TRUE(EndsWithDone(reply.body)) << "stream " << index << " cut";
    EXPECT_EQ(CountOf(reply.body, "\"finish_reason\":\"length\""), 1 + index % 2)
        << "stream " << index;
  }
}

TEST_F(LoadTest, KvPoolExhaustionPreemptsAndEveryRequestThatFitsAloneCompletes) {
  // 160 KiB of KV: 8 blocks of 16 tokens with f32 KV (stories260K: 2 x 5 layers x 4 kv heads x
  // 8 dims x 4 bytes = 1280 bytes per token), 16 with 16-bit KV: 128 or 256 tokens for 12
  // requests of ~105 tokens each, every one of which fits alone.
  ServerProcess server;
  ASSERT_TRUE(server.Start(*plan_, "--threads 1 --kv-memory 163840")) << server.error();
  const int port = server.port();
  constexpr int kRequests = 12;
  const std::vector<std::string> prompts = {"Once upon a time", "The dog", "Lily saw a big",
                                            "Tom and Sam"};
  auto request = [&](int index) {
    return Json{{"prompt", prompts[index % prompts.size()]},
                {"max_tokens", 100},
                {"ignore_eos", true},
                {"temperature", 0},
                {"stream", true}};
  };
  std::vector<std::string> alone;
  for (size_t index = 0; index < prompts.size(); ++index) {
    const Reply reply = Post(port, "/v1/completions", request(static_cast<int>(index)));
    ASSERT_EQ(reply.status, 200) << reply.body;
    alone.push_back(StreamedText(reply.body));
  }
  std::vector<Reply> replies(kRequests);
  std::vector<std::thread> clients;
  for (int index = 0; index < kRequests; ++index) {
    clients.emplace_back(
        [&, index] { replies[index] = Post(port, "/v1/completions", request(index)); });
  }
  for (std::thread& thread : clients) thread.join();
  for (int index = 0; index < kRequests; ++index) {
    ASSERT_EQ(replies[index].status, 200) << replies[index].body;
    EXPECT_TRUE(EndsWithDone(replies[index].body));
    EXPECT_EQ(CountOf(replies[index].body, "\"finish_reason\":\"length\""), 1);
    EXPECT_EQ(StreamedText(replies[index].body), alone[index % prompts.size()])
        << "request " << index << " differs from its run alone after preemption";
  }
  const std::string page = MetricsPage(port);
  EXPECT_GT(Metric(page, "llmrt:num_preemptions_total"), 0);
  EXPECT_GE(SecondsUntilEmpty(port, 5), 0);
  EXPECT_EQ(server.Terminate(), 0);
}

TEST_F(LoadTest, ShortSoakAnswersEverythingAndLeaksNothing) {
  ServerProcess server;
  ASSERT_TRUE(
      server.Start(*plan_, "--threads 1 --max-seqs 8 --max-queued 8 --max-body-bytes 65536"))
      << server.error();
  const CommandResult soak = RunCommand(
      ToolPath("llmrt-soak") + " --url " + server.url() +
      " --duration 10 --warmup 2 --max-requests 100000 --concurrency 6 --max-body-bytes 65536" +
      " --server-pid " + std::to_string(server.pid()));
  EXPECT_EQ(soak.exit_code, 0) << soak.output << soak.error;
  EXPECT_THAT(soak.output, HasSubstr("OK"));
  EXPECT_EQ(server.Terminate(), 0);
}

}  // namespace
}  // namespace llmrt::testing
