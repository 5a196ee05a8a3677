// llmrt-bench serve: a load generator for OpenAI-compatible servers (`llmrt serve`, vLLM,
// llama-server), measured the way vLLM's benchmark_serving measures:
//   TTFT  send -> first streamed token;   TPOT (e2e - TTFT) / (output tokens - 1);
//   ITL   gaps between streamed chunks;    e2e send -> [DONE].
// Requests use token-id prompts of the chosen lengths (ids drawn from the server's own
// tokenization of a word list, so any vocabulary works), ignore_eos and max_tokens, so every
// request produces exactly its output length; one that returns fewer tokens counts as failed.
//
//   llmrt-bench serve --url http://127.0.0.1:8080 [--num-requests 64] [--concurrency 16]
//       [--rate R] [--arrivals poisson|fixed] [--input-len 32] [--output-len 64]
//       [--range-ratio 0] [--lengths FILE] [--endpoint completions|chat] [--model NAME]
//       [--api-key K] [--seed 0] [--timeout 600] [--accept-429] [--json]
//
// --accept-429: an overload run. A request answered 429 with an OpenAI error object counts as
// rejected, not failed; every other request must still complete. Without it a 429 is a failure.
// The exit status is 0 when no request failed, 3 otherwise.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/serve/http_client.h"
#include "bench/serve/load_stats.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace llmrt::bench {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr char kUsage[] =
    "usage: llmrt-bench serve --url http://HOST:PORT [--num-requests 64] [--concurrency 16]\n"
    "         [--rate REQ_PER_S (default: all at once)] [--arrivals poisson|fixed]\n"
    "         [--input-len 32] [--output-len 64] [--range-ratio 0] [--lengths FILE]\n"
    "         [--endpoint completions|chat] [--model NAME] [--api-key K] [--seed 0]\n"
    "         [--timeout 600] [--accept-429] [--json]\n";

struct Options {
  std::string url;
  int64_t num_requests = 64;
  int64_t concurrency = 16;
  double rate = 0.0;
  bool poisson = true;
  int64_t input_len = 32;
  int64_t output_len = 64;
  double range_ratio = 0.0;
  std::string lengths_file;
  bool chat = false;
  std::string model;
  std::string api_key;
  uint64_t seed = 0;
  int64_t timeout_seconds = 600;
  bool accept_429 = false;
  bool json = false;
};

struct Result {
  int status = 0;  // HTTP status; 0: no response
  bool ok = false;
  bool error_object = false;  // a non-200 answer carried an OpenAI error object
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
};

httplib::Headers Headers(const Options& options) { return AuthHeaders(options.api_key); }

std::unique_ptr<httplib::Client> NewClient(const Options& options) {
  return bench::NewClient(options.url, options.timeout_seconds);
}

Result RunOne(const Options& options, const Json& body) {
  Result result;
  std::unique_ptr<httplib::Client> client = NewClient(options);
  httplib::Request request;
  request.method = "POST";
  request.path = options.chat ? "/v1/chat/completions" : "/v1/completions";
  request.headers = Headers(options);
  request.headers.emplace("Content-Type", "application/json");
  request.body = body.dump();
  SseParser parser;
  std::vector<std::string> events;
  std::string error_body;
  bool done = false, first = true;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  int status = 0;
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, size);
      return true;
    }
    events.clear();
    parser.Feed(std::string_view(data, size), events);
    const Clock::time_point now = Clock::now();
    for (const std::string& event : events) {
      if (event == "[DONE]") {
        done = true;
        continue;
      }
      const Json chunk = Json::parse(event, nullptr, false);
      if (chunk.is_discarded()) {
        result.error = "a data event is not JSON: " + event.substr(0, 200);
        continue;
      }
      if (chunk.contains("error")) {
        result.error = chunk["error"].value("message", "error event");
        continue;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        result.output_tokens = chunk["usage"].value("completion_tokens", 0);
        result.prompt_tokens = chunk["usage"].value("prompt_tokens", 0);
      }
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const Json& choice = chunk["choices"][0];
      std::string text;
      if (options.chat) {
        if (choice.contains("delta") && choice["delta"].contains("content")) {
          text = choice["delta"]["content"].get<std::string>();
        }
      } else {
        text = choice.value("text", "");
      }
      if (text.empty()) continue;
      if (first) {
        result.ttft = std::chrono::duration<double>(now - start).count();
        first = false;
      } else {
        result.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    }
    return true;
  };
  httplib::Result response = client->send(request);
  result.status = status;
  result.e2e = std::chrono::duration<double>(Clock::now() - start).count();
  if (!response) {
    result.error = "no response: " + httplib::to_string(response.error());
    return result;
  }
  if (status != 200) {
    const Json error = Json::parse(error_body, nullptr, false);
    result.error_object = error.is_object() && error.contains("error");
    result.error = absl::StrFormat("HTTP %d: %s", status,
                                   error.is_object() && error.contains("error")
                                       ? error["error"].value("message", "")
                                       : error_body.substr(0, 200));
    return result;
  }
  if (!done && result.error.empty()) result.error = "the stream ended without data: [DONE]";
  result.ok = result.error.empty();
  return result;
}

// Token ids to build prompts from: the server's tokenization of plain English words.
absl::StatusOr<std::vector<int32_t>> TokenPool(const Options& options) {
  return Tokenize(*NewClient(options), options.url,
                  "once upon a time there was a little girl named lily she liked to play outside "
                  "in the park with her friends one day she saw a big red ball and a small dog "
                  "they were happy",
                  Headers(options));
}

std::string ModelName(const Options& options) {
  if (!options.model.empty()) return options.model;
  const std::optional<Json> model = FirstModel(*NewClient(options), Headers(options));
  return model ? model->value("id", "") : "";
}

int ServeBench(int argc, char** argv) {
  Options options;
  std::string error;
  FlagReader flags(argc, argv, 2, error);
  while (flags.Next()) {
    const std::string& flag = flags.flag();
    if (flag == "--url") {
      options.url = flags.Value();
    } else if (flag == "--num-requests") {
      flags.Number(options.num_requests);
    } else if (flag == "--concurrency") {
      flags.Number(options.concurrency);
    } else if (flag == "--rate") {
      flags.Number(options.rate);
    } else if (flag == "--arrivals") {
      const std::string kind = flags.Value();
      if (kind != "poisson" && kind != "fixed") error = "--arrivals is poisson or fixed";
      options.poisson = kind == "poisson";
    } else if (flag == "--input-len") {
      flags.Number(options.input_len);
    } else if (flag == "--output-len") {
      flags.Number(options.output_len);
    } else if (flag == "--range-ratio") {
      flags.Number(options.range_ratio);
    } else if (flag == "--lengths") {
      options.lengths_file = flags.Value();
    } else if (flag == "--endpoint") {
      const std::string kind = flags.Value();
      if (kind != "completions" && kind != "chat") error = "--endpoint is completions or chat";
      options.chat = kind == "chat";
    } else if (flag == "--model") {
      options.model = flags.Value();
    } else if (flag == "--api-key") {
      options.api_key = flags.Value();
    } else if (flag == "--seed") {
      flags.Number(options.seed);
    } else if (flag == "--timeout") {
      flags.Number(options.timeout_seconds);
    } else if (flag == "--accept-429") {
      options.accept_429 = true;
    } else if (flag == "--json") {
      options.json = true;
    } else {
      error = "unknown flag " + flag;
    }
  }
  if (error.empty() && options.url.empty()) error = "--url is required";
  if (error.empty() &&
      (options.num_requests < 1 || options.concurrency < 1 || options.input_len < 1 ||
       options.output_len < 1 || options.range_ratio < 0 || options.range_ratio >= 1)) {
    error =
        "--num-requests, --concurrency, --input-len, --output-len must be >= 1 and "
        "--range-ratio in [0, 1)";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "llmrt-bench serve: %s\n%s", error.c_str(), kUsage);
    return 2;
  }

  std::vector<RequestShape> shapes;
  if (!options.lengths_file.empty()) {
    absl::StatusOr<std::vector<RequestShape>> loaded =
        ShapesFromFile(options.lengths_file, options.num_requests);
    if (!loaded.ok()) {
      std::fprintf(stderr, "llmrt-bench serve: %s\n",
                   std::string(loaded.status().message()).c_str());
      return 1;
    }
    shapes = *loaded;
  } else {
    shapes = RandomShapes(options.num_requests, options.input_len, options.output_len,
                          options.range_ratio, options.seed);
  }
  absl::StatusOr<std::vector<int32_t>> pool = TokenPool(options);
  if (!pool.ok()) {
    std::fprintf(stderr, "llmrt-bench serve: %s\n", std::string(pool.status().message()).c_str());
    return 1;
  }
  const std::string model = ModelName(options);

  // Bodies are built before the clock starts.
  std::mt19937_64 random(options.seed);
  std::vector<Json> bodies;
  for (const RequestShape& shape : shapes) {
    std::vector<int32_t> ids;
    for (int64_t token = 0; token < shape.input_tokens; ++token) {
      ids.push_back((*pool)[random() % pool->size()]);
    }
    Json body = {{"max_tokens", shape.output_tokens},
                 {"ignore_eos", true},
                 {"temperature", 0.0},
                 {"stream", true},
                 {"stream_options", {{"include_usage", true}}}};
    if (!model.empty()) body["model"] = model;
    if (options.chat) {
      // Chat needs text: the ids' detokenization is not at hand here, so each id becomes a
      // word; the prompt length is then approximate (the template adds its own tokens).
      std::string text;
      for (int32_t id : ids) text += absl::StrFormat("w%d ", id % 1000);
      body["messages"] = Json::array({{{"role", "user"}, {"content", text}}});
    } else {
      body["prompt"] = ids;
    }
    bodies.push_back(std::move(body));
  }
  const std::vector<double> arrivals =
      ArrivalTimes(options.num_requests, options.rate, options.poisson, options.seed + 1);

  std::vector<Result> results(options.num_requests);
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t worker = 0; worker < std::min(options.concurrency, options.num_requests); ++worker) {
    workers.emplace_back([&] {
      while (true) {
        const int64_t index = next.fetch_add(1);
        if (index >= options.num_requests) return;
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(arrivals[index])));
        results[index] = RunOne(options, bodies[index]);
        if (results[index].ok && results[index].output_tokens != shapes[index].output_tokens) {
          results[index].ok = false;
          results[index].error =
              absl::StrFormat("truncated: %d of %d tokens", results[index].output_tokens,
                              shapes[index].output_tokens);
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, rejected = 0, input_tokens = 0, output_tokens = 0;
  std::map<std::string, int64_t> failures;
  std::map<int, int64_t> statuses;
  for (const Result& result : results) {
    ++statuses[result.status];
    if (options.accept_429 && result.status == 429 && result.error_object) {
      ++rejected;
      continue;
    }
    if (!result.ok) {
      ++failures[result.error.substr(0, 120)];
      continue;
    }
    ++completed;
    input_tokens += result.prompt_tokens;
    output_tokens += result.output_tokens;
    ttft.push_back(result.ttft);
    e2e.push_back(result.e2e);
    if (result.output_tokens > 1) {
      tpot.push_back((result.e2e - result.ttft) / static_cast<double>(result.output_tokens - 1));
    }
    itl.insert(itl.end(), result.itl.begin(), result.itl.end());
  }
  const Summary ttft_summary = Summarize(ttft), tpot_summary = Summarize(tpot),
                itl_summary = Summarize(itl), e2e_summary = Summarize(e2e);
  const int64_t failed = options.num_requests - completed - rejected;
  if (options.json) {
    auto summary_json = [](const Summary& summary) {
      return Json{{"mean_ms", summary.mean * 1e3},
                  {"p50_ms", summary.p50 * 1e3},
                  {"p99_ms", summary.p99 * 1e3}};
    };
    const Json report = {{"requests", options.num_requests},
                         {"completed", completed},
                         {"rejected_429", rejected},
                         {"failed", failed},
                         {"http_status", CountsJson(statuses)},
                         {"failures", CountsJson(failures)},
                         {"duration_s", duration},
                         {"request_throughput", completed / duration},
                         {"input_token_throughput", input_tokens / duration},
                         {"output_token_throughput", output_tokens / duration},
                         {"ttft", summary_json(ttft_summary)},
                         {"tpot", summary_json(tpot_summary)},
                         {"itl", summary_json(itl_summary)},
                         {"e2e", summary_json(e2e_summary)}};
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf(
        "requests %lld  completed %lld  rejected (429) %lld  failed %lld  duration %.2f s\n",
        static_cast<long long>(options.num_requests), static_cast<long long>(completed),
        static_cast<long long>(rejected), static_cast<long long>(failed), duration);
    for (const auto& [status, count] : statuses) {
      std::printf("  HTTP %d: %lld\n", status, static_cast<long long>(count));
    }
    for (const auto& [message, count] : failures) {
      std::printf("  failure x%lld: %s\n", static_cast<long long>(count), message.c_str());
    }
    std::printf("request throughput %.2f req/s, input %.1f tok/s, output %.1f tok/s\n",
                completed / duration, input_tokens / duration, output_tokens / duration);
    std::printf("%-6s %10s %10s %10s   (ms)\n", "", "mean", "p50", "p99");
    const std::pair<const char*, const Summary*> rows[] = {{"TTFT", &ttft_summary},
                                                           {"TPOT", &tpot_summary},
                                                           {"ITL", &itl_summary},
                                                           {"E2E", &e2e_summary}};
    for (const auto& [name, summary] : rows) {
      std::printf("%-6s %10.2f %10.2f %10.2f\n", name, summary->mean * 1e3, summary->p50 * 1e3,
                  summary->p99 * 1e3);
    }
  }
  return failed == 0 ? 0 : 3;
}

}  // namespace
}  // namespace llmrt::bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "serve") return llmrt::bench::ServeBench(argc, argv);
  std::fprintf(stderr, "usage: llmrt-bench serve ...   (llmrt-bench serve --help)\n%s",
               llmrt::bench::kUsage);
  return 2;
}
