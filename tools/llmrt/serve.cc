#include "tools/llmrt/serve.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/model.h"
#include "runtime/kv/kv_storage.h"
#include "runtime/server/kv_events.h"
#include "runtime/server/server.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

constexpr char kServeUsage[] =
    "usage: llmrt serve PLAN [--host 127.0.0.1] [--port 8080] [--api-key K] [--max-queued N]\n"
    "                        [--max-seqs N] [--max-batched-tokens N] [--prefill-chunk-tokens N]\n"
    "                        [--kv-memory BYTES]"
    " [--kv-memory-fraction F] [--max-seq-len N] [--kv-block-size N]\n"
    "                        [--threads N] [--drain-timeout S] [--kv-cache f32|f16|bf16|int8]\n"
    "                        [--model-name NAME] [--chat-template FILE] [--max-body-bytes N]\n"
    "                        [--mem-bandwidth GB/s] [--tool-call-format NAME] [--verify]\n"
    "                        [--metrics-public] [--expert-metrics]\n"
    "                        [--kv-events-endpoint ZMQ_ENDPOINT]\n"
    "                        [--kv-events-topic TOPIC] [--kv-events-encoding map|array]\n"
    "                        [--kv-events-replay-endpoint ZMQ_ENDPOINT]\n"
    "  --port 0 picks a free port; the address is printed as 'listening on http://HOST:PORT'.\n"
    "  KV pool: --kv-memory bytes, else --kv-memory-fraction of the memory available now, else\n"
    "  one context of the model's length (at most 8192 tokens). --max-seq-len caps one sequence.\n"
    "  --prefill-chunk-tokens: prompt tokens a step may run while sequences decode (0: 32;\n"
    "  -1: no cap beyond --max-batched-tokens); smaller keeps inter-token latency low.\n"
    "  --mem-bandwidth: this machine's read bandwidth (`llmrt bench --bandwidth`) for the\n"
    "  llmrt:decode_mbu gauge of /metrics.\n"
    "  --tool-call-format: how tool calls are read from the output: hermes, llama3_json,\n"
    "  mistral, phi4_mini, deepseek_v3, or none (default: the plan's, set by llmc from the\n"
    "  chat template).\n"
    "  Without --api-key, the key is read from LLMRT_API_KEY if set (keeps it out of `ps`).\n"
    "  --metrics-public: GET /metrics without the API key (for a Prometheus scraper).\n"
    "  --expert-metrics: MoE plans: per-expert token counters on /metrics,\n"
    "  llmrt:moe_expert_tokens_total{layer,expert} (layers x experts series; the expert union\n"
    "  counters llmrt:moe_active_experts_total / moe_layer_steps_total are always there).\n"
    "  --kv-events-endpoint: publish KV-cache events (vLLM's schema, msgpack over a ZMQ PUB\n"
    "  socket bound there, e.g. tcp://*:5557; tcp://127.0.0.1:* picks a free port and prints\n"
    "  'kv events on ENDPOINT'); --kv-events-topic: the topic frame (default empty);\n"
    "  --kv-events-encoding: map (vLLM's current events, default) or array (its older ones);\n"
    "  --kv-events-replay-endpoint: a ROUTER socket that resends the last 10000 batches on\n"
    "  request (vLLM's replay protocol; prints 'kv events replay on ENDPOINT').\n"
    "  SIGTERM or SIGINT drains: new requests get 503, running ones finish (at most\n"
    "  --drain-timeout seconds, default 30), then the server exits 0.\n";

int ServeUsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt serve: %s\n%s", message.c_str(), kServeUsage);
  return 2;
}

int ServeFail(const std::string& message) {
  std::fprintf(stderr, "llmrt serve: %s\n", message.c_str());
  return 1;
}

std::string Stem(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  const size_t dot = name.find_last_of('.');
  if (dot != std::string::npos && dot > 0) name.resize(dot);
  return name.empty() ? "llmrt" : name;
}

}  // namespace

int Serve(int argc, char** argv) {
  // clang-format off
  const std::vector<std::string> valued = {
      "--host",           "--port",          "--api-key",
      "--max-queued",     "--max-seqs",      "--max-batched-tokens",
      "--kv-memory",      "--kv-block-size", "--threads",
      "--drain-timeout",  "--model-name",    "--chat-template",
      "--max-body-bytes", "--mem-bandwidth", "--kv-memory-fraction",
      "--max-seq-len",    "--kv-cache",      "--prefill-chunk-tokens",
      "--tool-call-format", "--kv-events-endpoint", "--kv-events-topic",
      "--kv-events-encoding", "--kv-events-replay-endpoint"};
  // clang-format on
  std::map<std::string, std::string> values;
  bool verify = false;
  bool metrics_public = false;
  bool expert_metrics = false;
  std::string plan_path;
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    if (std::find(valued.begin(), valued.end(), argument) != valued.end()) {
      if (index + 1 >= argc) return ServeUsageError("flag " + argument + " needs a value");
      values[argument] = argv[++index];
    } else if (argument == "--verify") {
      verify = true;
    } else if (argument == "--metrics-public") {
      metrics_public = true;
    } else if (argument == "--expert-metrics") {
      expert_metrics = true;
    } else if (argument == "-h" || argument == "--help") {
      std::fputs(kServeUsage, stdout);
      return 0;
    } else if (!argument.empty() && argument[0] == '-') {
      return ServeUsageError("unknown flag " + argument);
    } else if (plan_path.empty()) {
      plan_path = argument;
    } else {
      return ServeUsageError("unexpected argument " + argument);
    }
  }
  if (plan_path.empty()) return ServeUsageError("missing the plan file");

  std::string error;
  auto integer = [&](const char* flag, int64_t low, int64_t high, int64_t& out) {
    auto found = values.find(flag);
    if (found == values.end()) return true;
    if (!absl::SimpleAtoi(found->second, &out) || out < low || out > high) {
      error = absl::StrFormat("flag %s: expected an integer in [%d, %d], found '%s'", flag, low,
                              high, found->second);
      return false;
    }
    return true;
  };
  auto real = [&](const char* flag, double low, double& out) {
    auto found = values.find(flag);
    if (found == values.end()) return true;
    if (!absl::SimpleAtod(found->second, &out) || !(out >= low)) {
      error =
          absl::StrFormat("flag %s: expected a number >= %g, found '%s'", flag, low, found->second);
      return false;
    }
    return true;
  };

  server::ServerOptions options;
  int64_t port = 8080, max_queued = 256, max_seqs = 0, max_batched_tokens = 0, kv_memory = 0,
          kv_block_size = 0, threads = 0, max_body_bytes = options.max_body_bytes;
  int64_t max_seq_len = 0, prefill_chunk_tokens = 0;
  double drain_timeout = 30.0, mem_bandwidth_gbps = 0.0, kv_memory_fraction = 0.0;
  if (!integer("--port", 0, 65535, port) || !integer("--max-queued", 0, 1 << 20, max_queued) ||
      !integer("--max-seqs", 0, 4096, max_seqs) ||
      !integer("--max-batched-tokens", 0, 1 << 20, max_batched_tokens) ||
      !integer("--prefill-chunk-tokens", -1, 1 << 20, prefill_chunk_tokens) ||
      !integer("--kv-memory", 0, int64_t{1} << 50, kv_memory) ||
      !integer("--kv-block-size", 0, 4096, kv_block_size) ||
      !integer("--threads", 0, 4096, threads) ||
      !integer("--max-body-bytes", 1024, int64_t{1} << 32, max_body_bytes) ||
      !real("--drain-timeout", 0.0, drain_timeout) ||
      !real("--mem-bandwidth", 0.0, mem_bandwidth_gbps) ||
      !integer("--max-seq-len", 0, int64_t{1} << 30, max_seq_len) ||
      !real("--kv-memory-fraction", 0.0, kv_memory_fraction)) {
    return ServeUsageError(error);
  }
  if (kv_memory_fraction > 1.0) {
    return ServeUsageError(absl::StrFormat(
        "flag --kv-memory-fraction: expected a fraction in (0, 1], found %g", kv_memory_fraction));
  }
  if (values.count("--host")) options.host = values["--host"];
  options.port = static_cast<int>(port);
  options.metrics_public = metrics_public;
  for (const char* event_flag :
       {"--kv-events-topic", "--kv-events-encoding", "--kv-events-replay-endpoint"}) {
    if (values.count(event_flag) && !values.count("--kv-events-endpoint")) {
      return ServeUsageError(absl::StrFormat("%s needs --kv-events-endpoint", event_flag));
    }
  }
  server::KvEventEncoding kv_events_encoding = server::KvEventEncoding::kMap;
  if (values.count("--kv-events-encoding")) {
    absl::StatusOr<server::KvEventEncoding> encoding =
        server::ParseKvEventEncoding(values["--kv-events-encoding"]);
    if (!encoding.ok()) return ServeUsageError(std::string(encoding.status().message()));
    kv_events_encoding = *encoding;
  }
  if (values.count("--api-key")) {
    options.api_key = values["--api-key"];
  } else if (const char* key = std::getenv("LLMRT_API_KEY"); key != nullptr) {
    options.api_key = key;
  }
  options.model_name = values.count("--model-name") ? values["--model-name"] : Stem(plan_path);
  options.max_queued = static_cast<int32_t>(max_queued);
  options.drain_timeout_seconds = drain_timeout;
  options.max_body_bytes = static_cast<size_t>(max_body_bytes);
  options.mem_bandwidth_bytes_per_second = mem_bandwidth_gbps * 1e9;
  if (values.count("--tool-call-format")) {
    options.tool_call_format = values["--tool-call-format"];
    if (options.tool_call_format.empty() ||
        !server::ToolCallFormatFromName(options.tool_call_format).has_value()) {
      return ServeUsageError(absl::StrFormat("--tool-call-format: '%s' is not one of %s",
                                             options.tool_call_format,
                                             server::ToolCallFormatNames()));
    }
  }
  if (values.count("--chat-template")) {
    std::ifstream file(values["--chat-template"], std::ios::binary);
    if (!file) return ServeFail(absl::StrFormat("%s: cannot open", values["--chat-template"]));
    std::stringstream text;
    text << file.rdbuf();
    options.chat_template_override = text.str();
    if (options.chat_template_override.empty()) {
      return ServeFail(
          absl::StrFormat("%s: the chat template is empty", values["--chat-template"]));
    }
  }

  // Signals: blocked here, before any thread starts, so every thread inherits the mask and only
  // the waiter below receives them. SIGPIPE (a client gone mid-write) is ignored: the failed
  // write already tells the handler.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  engine::ModelOptions model_options;
  model_options.num_threads = static_cast<int32_t>(threads);
  model_options.kv_block_size = static_cast<int32_t>(kv_block_size);
  model_options.kv_memory_bytes = kv_memory;
  model_options.kv_memory_fraction = kv_memory_fraction;
  model_options.max_seq_len = max_seq_len;
  model_options.verify = verify;
  if (values.count("--kv-cache")) {
    absl::StatusOr<plan::DType> kv_dtype = kv::ParseKvDType(values["--kv-cache"]);
    if (!kv_dtype.ok()) return ServeUsageError(std::string(kv_dtype.status().message()));
    model_options.kv_cache_dtype = *kv_dtype;
  }
  if (max_batched_tokens > 0)
    model_options.max_tokens_per_step = static_cast<int32_t>(max_batched_tokens);
  absl::StatusOr<std::unique_ptr<engine::Model>> model =
      engine::Model::Load(plan_path, model_options);
  if (!model.ok()) return ServeFail(std::string(model.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Create((*model)->meta().tokenizer());
  if (!tokenizer.ok()) {
    return ServeFail(absl::StrFormat("%s: tokenizer: %s", plan_path, tokenizer.status().message()));
  }

  engine::EngineOptions engine_options;
  engine_options.max_batched_tokens = static_cast<int32_t>(max_batched_tokens);
  engine_options.max_seqs = static_cast<int32_t>(max_seqs);
  engine_options.prefill_chunk_tokens = static_cast<int32_t>(prefill_chunk_tokens);
  engine_options.expert_token_counts = expert_metrics;
  // EngineOptions::max_seqs 0 means 256 (engine.h).
  options.max_seqs = max_seqs > 0 ? static_cast<int32_t>(max_seqs) : 256;
  // Declared before the engine, so it outlives the engine's last callback.
  std::unique_ptr<server::KvEventPublisher> kv_events;
  if (values.count("--kv-events-endpoint")) {
    server::KvEventOptions kv_event_options;
    kv_event_options.endpoint = values["--kv-events-endpoint"];
    kv_event_options.topic = values.count("--kv-events-topic") ? values["--kv-events-topic"] : "";
    kv_event_options.block_size = (*model)->kv_block_size();
    kv_event_options.encoding = kv_events_encoding;
    if (values.count("--kv-events-replay-endpoint")) {
      kv_event_options.replay_endpoint = values["--kv-events-replay-endpoint"];
    }
    absl::StatusOr<std::unique_ptr<server::KvEventPublisher>> publisher =
        server::KvEventPublisher::Create(kv_event_options);
    if (!publisher.ok()) return ServeFail(std::string(publisher.status().message()));
    kv_events = std::move(*publisher);
    engine_options.on_kv_events = [publisher =
                                       kv_events.get()](std::vector<kv::KvCacheEvent> events) {
      publisher->Publish(std::move(events));
    };
    std::fprintf(stderr, "llmrt serve: kv events on %s\n", kv_events->bound_endpoint().c_str());
    if (!kv_events->bound_replay_endpoint().empty()) {
      std::fprintf(stderr, "llmrt serve: kv events replay on %s\n",
                   kv_events->bound_replay_endpoint().c_str());
    }
  }
  engine::Engine engine(**model, tokenizer->get(), engine_options);

  absl::StatusOr<std::unique_ptr<server::Server>> server =
      server::Server::Create(engine, **tokenizer, (*model)->meta(), options);
  if (!server.ok()) return ServeFail(std::string(server.status().message()));
  if (absl::Status status = (*server)->Bind(); !status.ok()) {
    return ServeFail(std::string(status.message()));
  }
  engine.Start();

  std::atomic<bool> serving_done{false};
  std::thread signal_waiter([&] {
    int received = 0;
    sigwait(&stop_signals, &received);
    if (serving_done.load()) return;  // woken by the exit path below
    std::fprintf(stderr, "llmrt serve: %s: draining (at most %g s)\n",
                 received == SIGTERM ? "SIGTERM" : "SIGINT", options.drain_timeout_seconds);
    (*server)->Drain();
  });

  std::fprintf(stderr,
               "llmrt serve: listening on http://%s:%d (model '%s', context %lld tokens, "
               "max %d sequences + %d queued%s)\n",
               options.host.c_str(), (*server)->port(), options.model_name.c_str(),
               static_cast<long long>(engine.max_context()), options.max_seqs, options.max_queued,
               options.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);
  const absl::Status served = (*server)->Serve();
  serving_done.store(true);
  // Wakes the waiter if the listener stopped for another reason than a signal.
  pthread_kill(signal_waiter.native_handle(), SIGTERM);
  signal_waiter.join();
  engine.Stop();
  if (!served.ok()) return ServeFail(std::string(served.message()));
  std::fprintf(stderr, "llmrt serve: stopped\n");
  return 0;
}

}  // namespace llmrt
