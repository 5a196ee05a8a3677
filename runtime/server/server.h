// Server: the OpenAI-compatible HTTP front of an Engine (cpp-httplib). Not part of the embeddable
// runtime core: it links an HTTP library and a JSON parser.
//
//   POST /v1/chat/completions   the plan's chat template (or --chat-template), then generation
//   POST /v1/completions        text or token-id prompts, one or many
//   POST /v1/messages           Anthropic Messages (anthropic.h); /v1/messages/count_tokens
//   POST /v1/responses          OpenAI Responses, stateless (responses.h)
//   GET  /v1/models             the one model this server runs; /v1/models/{id} that model
//   GET  /health                200 {"status": "ok"}, 503 while draining; never needs the key
//   GET  /metrics               Prometheus text (metrics.h); without the key with metrics_public
//   GET  /                      the chat page (chat_page.html, compiled in); never needs the key:
//                               it holds no data, and its API calls send the key typed into it
//   GET  /kv_cache/blocks       the prefix cache's registered blocks (Engine::CachedBlocks()):
//                               what a KV-event subscriber's mirror must hold (kv_events.h)
//   POST /tokenize              {"prompt" | "messages", "add_special_tokens"} -> token ids
//   POST /detokenize            {"tokens"} -> {"prompt": text}
//
// Admission: a request needs one engine sequence per choice (prompts x n). While the sequences
// in flight would exceed max_seqs + max_queued the request is answered 429 at once, so a client
// never waits on a queue the server cannot serve soon. HTTP worker threads are sized above that
// bound so that a 429 (or 503) can always be answered.
//
// Disconnects: every waiting request polls its socket (PeerWatch) every kPollInterval; a closed
// client cancels its engine requests, whose blocks the engine frees at the start of its next
// step.
//
// Drain (SIGTERM): Drain() answers new generation requests 503, waits for those in flight up to
// drain_timeout, cancels what is left (their streams end with finish_reason "abort"), then stops
// the listener; Serve() returns once every handler has returned.
//
// Lifetimes: the engine, tokenizer and meta must outlive the Server. The engine's callbacks hold
// their own reference to the shared counters, so the engine may also outlive the Server.
// Thread-safety: Bind/Serve from one thread; Drain/Stop from any thread.
#ifndef LLMRT_SERVER_SERVER_H_
#define LLMRT_SERVER_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/engine/engine.h"
#include "runtime/plan/proto/plan.pb.h"
#include "runtime/server/protocol.h"
#include "runtime/server/structured_output.h"
#include "runtime/template/plan_chat_template.h"
#include "runtime/tokenizer/tokenizer.h"

namespace httplib {
class Server;
class Request;
struct Response;
}  // namespace httplib

namespace llmrt::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (see Server::port())
  std::string api_key;  // empty: no authentication
  // GET /metrics without the API key, for a Prometheus scraper that holds none. The page shows
  // load and latency figures, never request content.
  bool metrics_public = false;
  std::string model_name = "llmrt";
  // Sequences the engine runs at once (EngineOptions::max_seqs as resolved) and how many more
  // may wait; beyond their sum requests get 429.
  int32_t max_seqs = 256;
  int32_t max_queued = 256;
  double drain_timeout_seconds = 30.0;
  // 16 MiB: the largest legitimate body is a long chat (a 128k-token context is ~0.5 MB of
  // text, JSON-escaped at most ~6x); more is a mistake or an attack.
  size_t max_body_bytes = 16 << 20;
  RequestLimits limits;
  // A chat template that replaces the plan's default one (source text; named templates stay);
  // empty: the plan's.
  std::string chat_template_override;
  // How tool calls are parsed out of the output (tool_calls.h names, "none"); empty: the plan's
  // TokenizerSpec.tool_call_format.
  std::string tool_call_format;
  // The machine's read bandwidth for the decode MBU gauge; 0: no MBU gauge.
  double mem_bandwidth_bytes_per_second = 0.0;
};

class Server {
 public:
  // Fails when the chat template (plan's or override) does not parse.
  static absl::StatusOr<std::unique_ptr<Server>> Create(engine::Engine& engine,
                                                        const Tokenizer& tokenizer,
                                                        const plan::PlanMeta& meta,
                                                        const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the listening socket; the port is known afterwards.
  absl::Status Bind();
  int port() const { return port_; }
  // Accepts connections until Stop() or the end of Drain(); blocks.
  absl::Status Serve();

  // Graceful shutdown, see above. Blocks until the listener is stopped.
  void Drain();
  // Immediate stop of the listener (in-flight handlers still finish).
  void Stop();
  bool draining() const { return draining_.load(); }

  // Sequences admitted and not yet finished.
  int64_t active_sequences() const;

  struct Shared;  // counters shared with engine callbacks (server.cc)

 private:
  Server(engine::Engine& engine, const Tokenizer& tokenizer, const plan::PlanMeta& meta,
         const ServerOptions& options);
  void Routes();
  void HandleGenerate(Endpoint endpoint, const httplib::Request& request,
                      httplib::Response& response);
  void HandleTokenize(const httplib::Request& request, httplib::Response& response);
  void HandleDetokenize(const httplib::Request& request, httplib::Response& response);
  void HandleModels(httplib::Response& response);
  void HandleModel(const std::string& id, httplib::Response& response);
  Json ModelJson() const;
  void HandleCountTokens(const httplib::Request& request, httplib::Response& response);
  absl::StatusOr<ParsedRequest> ParseFor(Endpoint endpoint, const std::string& body) const;
  // The prompt text the chat template makes from a chat-shaped request: messages, tools (unless
  // tool_choice is "none"), chat_template_kwargs, reasoning_effort, continue_final_message,
  // through the plan's template that request.chat_template names or transformers would pick.
  struct RenderedChat {
    std::string text;
    bool reasoning = false;  // the template knows </think>: split the reasoning
  };
  absl::StatusOr<RenderedChat> RenderChat(const ParsedRequest& request) const;
  // The text one token adds in the middle of a sequence; `raw_bytes`: its bytes, before invalid
  // UTF-8 becomes U+FFFD (Tokenizer::DecodeBytes).
  std::string TokenText(int32_t id, bool raw_bytes) const;

  engine::Engine& engine_;
  const Tokenizer& tokenizer_;
  const plan::PlanMeta& meta_;
  std::unique_ptr<StructuredOutput> structured_output_;  // response_format
  ServerOptions options_;
  // The plan's templates (--chat-template replaces the default one; named ones stay).
  std::optional<jinja::PlanChatTemplate> chat_templates_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  int32_t logprob_anchor_ = -1;  // a plain token that TokenText() decodes after (see there)
  sampling::SamplingParams generation_defaults_;  // the plan's generation_config.json
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> draining_{false};
  int port_ = -1;
  int64_t created_ = 0;  // unix time the server started (for /v1/models)
};

// Compares two secrets in time that depends only on their lengths, never on where they differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_SERVER_H_
