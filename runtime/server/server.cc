#include "runtime/server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "runtime/server/anthropic.h"
#include "runtime/server/chat_page.h"
#include "runtime/server/metrics.h"
#include "runtime/server/peer_watch.h"
#include "runtime/server/responses.h"
#include "runtime/server/template_input.h"
#include "runtime/server/tool_grammar.h"
#include "runtime/template/chat.h"

namespace llmrt::server {

using Clock = std::chrono::steady_clock;

namespace {

// How often a waiting handler looks for new output, a closed client or the drain deadline.
// 10 ms is below one decode step of any model worth serving (stories260K on one core: ~1 ms per
// step, but outputs still arrive through the condition variable at once; the interval bounds only
// disconnect and deadline checks).
constexpr auto kPollInterval = std::chrono::milliseconds(10);

double Seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

// The error in the shape of the endpoint's API (Anthropic's for /v1/messages). A 429 says when
// to come back: the queue moves within a few decode steps.
void SendError(httplib::Response& response, const absl::Status& status,
               Endpoint endpoint = Endpoint::kChatCompletions) {
  const ApiError error = ErrorFromStatus(status);
  response.status = error.http_status;
  if (error.http_status == 429) response.set_header("Retry-After", "1");
  response.set_content(
      endpoint == Endpoint::kMessages ? AnthropicErrorBody(error) : ErrorBody(error),
      "application/json");
}

// Whose error shape a path answers in: Anthropic's under /v1/messages, OpenAI's elsewhere.
Endpoint ErrorShapeFor(const std::string& path) {
  return absl::StartsWith(path, "/v1/messages") ? Endpoint::kMessages : Endpoint::kChatCompletions;
}

// The methods a path of this server takes, or nullptr for an unknown path.
const char* AllowedMethods(const std::string& path) {
  for (const char* get : {"/", "/health", "/metrics", "/v1/models", "/kv_cache/blocks"}) {
    if (path == get) return "GET";
  }
  if (absl::StartsWith(path, "/v1/models/")) return "GET";
  for (const char* post :
       {"/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens",
        "/v1/responses", "/tokenize", "/detokenize"}) {
    if (path == post) return "POST";
  }
  return nullptr;
}

// cpp-httplib (a shared library here, so its CPPHTTPLIB_LISTEN_BACKLOG cannot be raised at
// build time) listens with a backlog of 5, and connections past it in a burst (32 agents
// starting at once) were reset. Every admitted sequence may connect at once, so the listening
// socket of `port` gets the kernel's cap instead: listen() again on a listening socket only
// changes its backlog. httplib keeps the socket private; it is found among this process's
// descriptors by its port.
void WidenListenBacklog(int port) {
  rlimit limit{};
  const int max_fd = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < 65536
                         ? static_cast<int>(limit.rlim_cur)
                         : 65536;
  for (int fd = 0; fd < max_fd; ++fd) {
    int listening = 0;
    socklen_t size = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
    sockaddr_storage address{};
    socklen_t address_size = sizeof(address);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &address_size) != 0) continue;
    int bound = -1;
    if (address.ss_family == AF_INET) {
      bound = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    } else if (address.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
    }
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
}

void SendJson(httplib::Response& response, const Json& json) {
  response.status = 200;
  response.set_content(DumpJson(json), "application/json");
}

}  // namespace

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents; a length mismatch is
  // folded into the same accumulator instead of returning early.
  const size_t length = std::max(a.size(), b.size());
  unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t index = 0; index < length; ++index) {
    const unsigned char left = index < a.size() ? static_cast<unsigned char>(a[index]) : 0;
    const unsigned char right = index < b.size() ? static_cast<unsigned char>(b[index]) : 0;
    difference |= left ^ right;
  }
  return difference == 0;
}

// State shared between the HTTP side and engine callbacks; held by shared_ptr from both so
// either may go first.
struct Server::Shared {
  ServerMetrics metrics;
  std::mutex mutex;
  std::condition_variable idle;  // signalled when active_sequences or open_responses reach 0
  int64_t active_sequences = 0;  // under mutex
  // Generation responses not completely written yet (under mutex). Drain waits for these, not
  // only for the engine: the last chunks of a stream are written after its sequences finish.
  int64_t open_responses = 0;
  absl::flat_hash_set<engine::RequestId> live_requests;  // under mutex; cancelled on drain
};

namespace {

// Counts one generation response as open from construction until destruction. Streams keep it
// in their content provider, which httplib destroys only after the last byte is written.
class OpenResponse {
 public:
  explicit OpenResponse(std::shared_ptr<Server::Shared> shared) : shared_(std::move(shared)) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    ++shared_->open_responses;
  }
  ~OpenResponse() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (--shared_->open_responses == 0) shared_->idle.notify_all();
  }
  OpenResponse(const OpenResponse&) = delete;
  OpenResponse& operator=(const OpenResponse&) = delete;

 private:
  std::shared_ptr<Server::Shared> shared_;
};

// One HTTP request's view of its engine requests: outputs queue up here on the engine thread and
// are taken by the handler thread.
struct Tracker {
  struct Item {
    int32_t choice = 0;  // prompt_index * n + output.index
    engine::RequestOutput output;
  };
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Item> pending;
  int32_t open_choices = 0;
  std::vector<engine::RequestId> ids;
  // Per choice, for the latency histograms (engine thread only).
  std::vector<Clock::time_point> last_token_time;
  std::vector<bool> has_token;
  Clock::time_point arrival;
};

// The parsed results of one HTTP request's choices (handler thread only).
struct ChoiceOutputs {
  std::vector<ChoiceResult> choices;
  std::vector<OutputParser> parsers;
  std::vector<Usage> prompt_usage;  // per prompt

  // Takes one engine output of choice `index` (prompts hold `n` choices each); returns what it
  // added to the choice.
  ParsedDelta Apply(int32_t index, int32_t n, const engine::RequestOutput& output) {
    ChoiceResult& choice = choices[index];
    OutputParser& parser = parsers[index];
    ParsedDelta delta = parser.Push(output.text);
    Usage& usage = prompt_usage[index / n];
    usage.prompt_tokens = output.prompt_tokens;
    usage.cached_prompt_tokens = output.cached_prompt_tokens;
    if (output.finished) {
      ParsedDelta rest = parser.Finish();
      delta.reasoning += rest.reasoning;
      delta.content += rest.content;
      for (ToolCall& call : rest.calls) delta.calls.push_back(std::move(call));
      choice.finish_reason = output.finish_reason;
      choice.stop_string = output.stop_string;
      usage.completion_tokens += output.completion_tokens;
    }
    choice.text += delta.content;
    choice.reasoning += delta.reasoning;
    for (const ToolCall& call : delta.calls) choice.tool_calls.push_back(call);
    for (const engine::TokenOutput& token : output.tokens) choice.tokens.push_back(token);
    return delta;
  }

  Usage TotalUsage() const {
    Usage total;
    for (const Usage& part : prompt_usage) {
      total.prompt_tokens += part.prompt_tokens;
      total.completion_tokens += part.completion_tokens;
      total.cached_prompt_tokens += part.cached_prompt_tokens;
    }
    return total;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(engine::Engine& engine,
                                                       const Tokenizer& tokenizer,
                                                       const plan::PlanMeta& meta,
                                                       const ServerOptions& options) {
  std::unique_ptr<Server> server(new Server(engine, tokenizer, meta, options));
  plan::TokenizerSpec templates = meta.tokenizer();
  if (!options.chat_template_override.empty()) {
    templates.set_chat_template(options.chat_template_override);
  }
  if (!templates.chat_template().empty() || !templates.named_chat_templates().empty()) {
    absl::StatusOr<jinja::PlanChatTemplate> parsed = jinja::PlanChatTemplate::Create(templates);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s",
          options.chat_template_override.empty() ? "the plan's chat templates" : "--chat-template",
          parsed.status().message()));
    }
    server->chat_templates_ = *std::move(parsed);
  }
  const std::string& format_name = options.tool_call_format.empty()
                                       ? meta.tokenizer().tool_call_format()
                                       : options.tool_call_format;
  std::optional<ToolCallFormat> format = ToolCallFormatFromName(format_name);
  if (!format.has_value()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s '%s' is not a tool-call format; known: %s",
        options.tool_call_format.empty() ? "the plan's tool_call_format" : "--tool-call-format",
        format_name, ToolCallFormatNames()));
  }
  server->tool_format_ = *format;
  return server;
}

Server::Server(engine::Engine& engine, const Tokenizer& tokenizer, const plan::PlanMeta& meta,
               const ServerOptions& options)
    : engine_(engine),
      tokenizer_(tokenizer),
      meta_(meta),
      structured_output_(std::make_unique<StructuredOutput>(meta)),
      options_(options),
      shared_(std::make_shared<Shared>()),
      http_(std::make_unique<httplib::Server>()) {
  generation_defaults_ = sampling::SamplingFromGenerationConfig(meta.generation());
  const std::vector<int32_t> anchor = tokenizer.Encode("a", /*add_special_tokens=*/false);
  if (!anchor.empty()) logprob_anchor_ = anchor.front();
  shared_->metrics.peak_bandwidth_bytes_per_second = options.mem_bandwidth_bytes_per_second;
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();

  // Workers: every admitted sequence may hold a thread (streams and waits), plus headroom so a
  // 429/503/health/metrics request is always answered. 2048 caps the stack reservations
  // (8 MiB of virtual memory each).
  const size_t workers = static_cast<size_t>(
      std::min<int64_t>(2048, int64_t{options.max_seqs} + options.max_queued + 32));
  http_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  http_->set_payload_max_length(options.max_body_bytes);
  // A streamed response may pause for a long prefill of other requests; writes of a blocked
  // client are given 60 s before the connection is dropped.
  http_->set_write_timeout(60, 0);
  Routes();
}

Server::~Server() { Stop(); }

int64_t Server::active_sequences() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->active_sequences;
}

absl::Status Server::Bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ < 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen on %s:%d (address in use, or not an address of this machine)", options_.host,
        options_.port));
  }
  WidenListenBacklog(port_);
  return absl::OkStatus();
}

absl::Status Server::Serve() {
  if (port_ < 0) return absl::FailedPreconditionError("Serve() before a successful Bind()");
  if (!http_->listen_after_bind() && !draining_.load()) {
    return absl::InternalError("the HTTP listener stopped unexpectedly");
  }
  return absl::OkStatus();
}

void Server::Stop() { http_->stop(); }

void Server::Drain() {
  draining_.store(true);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options_.drain_timeout_seconds));
  {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    auto idle = [&] { return shared_->active_sequences == 0 && shared_->open_responses == 0; };
    shared_->idle.wait_until(lock, deadline, idle);
    if (!idle()) {
      for (engine::RequestId id : shared_->live_requests) engine_.Cancel(id);
      // Cancellations take effect at the start of the next step, then the handlers write the
      // final "abort" chunks; a step of a large model takes well under 5 s.
      shared_->idle.wait_for(lock, std::chrono::seconds(5), idle);
    }
  }
  Stop();
}

std::string Server::TokenText(int32_t id, bool raw_bytes) const {
  auto decode = [&](const std::vector<int32_t>& ids) {
    return raw_bytes ? tokenizer_.DecodeBytes(ids) : tokenizer_.Decode(ids, false);
  };
  // Decoding a token alone drops what decoders strip at the start of a text (SentencePiece's
  // leading space), so " upon" would read "upon". Decoding it after an anchor token and keeping
  // the difference gives the text the token adds in the middle of a sequence.
  if (logprob_anchor_ < 0) return decode({id});
  const std::string anchor = decode({logprob_anchor_});
  const std::string both = decode({logprob_anchor_, id});
  if (both.compare(0, anchor.size(), anchor) != 0) return decode({id});
  return both.substr(anchor.size());
}

absl::StatusOr<Server::RenderedChat> Server::RenderChat(const ParsedRequest& request) const {
  if (!chat_templates_.has_value()) {
    return absl::InvalidArgumentError(
        "this model has no chat template (the plan's TokenizerSpec.chat_template is empty); use "
        "/v1/completions, or start the server with --chat-template FILE");
  }
  // tool_choice "none": the model is not told about the tools (and its output is not parsed
  // for calls), so it answers in text; earlier calls and results in the messages still render.
  const bool render_tools = !request.tools.is_null() && request.tool_choice != "none";
  absl::StatusOr<std::string> name = chat_templates_->Select(request.chat_template, render_tools);
  if (!name.ok()) {
    // Template text is not taken from requests: it is code the server would run unchecked
    // (llmc's compile-time check renders only the plan's templates), so a request names one.
    const bool looks_like_text = absl::StrContains(request.chat_template, "{{") ||
                                 absl::StrContains(request.chat_template, "{%");
    return absl::InvalidArgumentError(absl::StrFormat(
        "'chat_template' %s; this model's templates are: %s",
        looks_like_text
            ? "takes the name of one of the model's chat templates, not template "
              "text (requests do not run their own template code)"
            : absl::StrFormat("\"%s\" is not a chat template of this model", request.chat_template),
        absl::StrJoin(chat_templates_->names(), ", ")));
  }
  const std::string* source = chat_templates_->Source(*name);  // Select returned one of its names
  const std::vector<jinja::ChatMessage> chat_messages = ChatMessages(request.messages);
  jinja::ChatOptions options;
  options.add_generation_prompt = request.add_generation_prompt;
  if (render_tools) options.tools = TemplateValue(request.tools);
  if (request.reasoning_effort.has_value()) {
    // Accepted only where it changes something: a template that reads the variable (gpt-oss).
    if (!absl::StrContains(*source, "reasoning_effort")) {
      return absl::InvalidArgumentError(
          "'reasoning_effort' is not used by this model's chat template (it never reads the "
          "variable reasoning_effort); leave it out");
    }
    options.extra_variables.emplace_back("reasoning_effort",
                                         jinja::Value::String(*request.reasoning_effort));
  }
  if (request.chat_template_kwargs.is_object()) {
    for (auto it = request.chat_template_kwargs.begin(); it != request.chat_template_kwargs.end();
         ++it) {
      options.extra_variables.emplace_back(it.key(), TemplateValue(it.value()));
    }
  }
  absl::StatusOr<std::string> prompt = chat_templates_->Render(chat_messages, options, *name);
  if (!prompt.ok()) {
    // The template's own raise_exception messages ("Conversation roles must alternate...") are
    // the client's mistake: 400.
    return absl::InvalidArgumentError(prompt.status().message());
  }
  if (request.continue_final_message) {
    // As transformers' continue_final_message: the prompt ends right after the final
    // message's content, so the template's end-of-turn is cut and the model continues it.
    const Json& content = request.messages.back()["content"];
    const std::string final_text =
        content.is_string() ? std::string(absl::StripAsciiWhitespace(content.get<std::string>()))
                            : "";
    const size_t at = final_text.empty() ? std::string::npos : prompt->rfind(final_text);
    if (at == std::string::npos) {
      return absl::InvalidArgumentError(
          "'continue_final_message': the final message needs text content that the chat "
          "template writes unchanged");
    }
    prompt->resize(at + final_text.size());
  }
  // <think> families: the template strips or writes </think> around earlier reasoning.
  return RenderedChat{*std::move(prompt), absl::StrContains(*source, "</think>")};
}

void Server::Routes() {
  http_->set_pre_routing_handler([this](const httplib::Request& request,
                                        httplib::Response& response) {
    if (options_.api_key.empty() || request.path == "/health" || request.path == "/" ||
        (options_.metrics_public && request.path == "/metrics")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string header = request.get_header_value("Authorization");
    constexpr char kBearer[] = "Bearer ";
    const bool has_bearer = header.rfind(kBearer, 0) == 0;
    // Anthropic's clients send the key as x-api-key.
    const bool has_x_api_key = request.has_header("x-api-key");
    const std::string presented =
        has_bearer ? header.substr(sizeof(kBearer) - 1) : request.get_header_value("x-api-key");
    if ((has_bearer || has_x_api_key) && ConstantTimeEquals(presented, options_.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(response,
              absl::UnauthenticatedError(
                  has_bearer || has_x_api_key
                      ? "Incorrect API key provided."
                      : "Missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'."),
              ErrorShapeFor(request.path));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Fills the body of errors httplib produces itself (404 route, 413 body too large, 400 bad
  // request line); our own errors already have one.
  http_->set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (!response.body.empty()) return;
    std::string message;
    // httplib answers 404 for a known path with another method; that is a 405 with the methods
    // the path takes.
    const char* allowed = AllowedMethods(request.path);
    if (response.status == 404 && allowed != nullptr) {
      response.status = 405;
      response.set_header("Allow", allowed);
    }
    switch (response.status) {
      case 404:
        message = absl::StrFormat("no route %s %s", request.method, request.path);
        break;
      case 405:
        message =
            absl::StrFormat("%s does not take %s; use %s", request.path, request.method, allowed);
        break;
      case 413:
        message = "the request body is larger than the server accepts";
        break;
      default:
        message = absl::StrFormat("HTTP %d", response.status);
    }
    ApiError error;
    error.http_status = response.status;
    error.type = response.status >= 500 ? "server_error" : "invalid_request_error";
    error.message = message;
    response.set_content(ErrorBody(error), "application/json");
  });
  http_->set_exception_handler([](const httplib::Request& request, httplib::Response& response,
                                  std::exception_ptr exception) {
    std::string what = "unknown exception";
    try {
      if (exception) std::rethrow_exception(exception);
    } catch (const std::exception& caught) {
      what = caught.what();
    } catch (...) {
    }
    SendError(response, absl::InternalError(absl::StrFormat("internal error: %s", what)),
              ErrorShapeFor(request.path));
  });

  http_->Get("/health", [this](const httplib::Request&, httplib::Response& response) {
    if (draining_.load()) {
      SendError(response, absl::UnavailableError("the server is draining"));
      return;
    }
    SendJson(response, {{"status", "ok"}});
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(RenderMetrics(shared_->metrics, engine_.GetStats(), options_.model_name),
                         "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& response) {
    const std::string_view page = ChatPageHtml();
    response.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  http_->Get("/kv_cache/blocks", [this](const httplib::Request&, httplib::Response& response) {
    Json blocks = Json::array();
    for (const kv::CachedBlock& cached : engine_.CachedBlocks()) {
      blocks.push_back({{"block", cached.block},
                        {"hash", cached.hash},
                        {"parent_hash", cached.has_parent ? Json(cached.parent_hash) : Json()},
                        {"token_ids", cached.token_ids}});
    }
    SendJson(response, {{"block_size", engine_.GetStats().kv_block_size}, {"blocks", blocks}});
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& response) {
    HandleModels(response);
  });
  http_->Get(R"(/v1/models/(.+))",
             [this](const httplib::Request& request, httplib::Response& response) {
               HandleModel(request.matches[1].str(), response);
             });
  http_->Post("/v1/messages", [this](const httplib::Request& request, httplib::Response& response) {
    HandleGenerate(Endpoint::kMessages, request, response);
  });
  http_->Post("/v1/messages/count_tokens",
              [this](const httplib::Request& request, httplib::Response& response) {
                HandleCountTokens(request, response);
              });
  http_->Post("/v1/responses",
              [this](const httplib::Request& request, httplib::Response& response) {
                HandleGenerate(Endpoint::kResponses, request, response);
              });
  http_->Post("/v1/completions",
              [this](const httplib::Request& request, httplib::Response& response) {
                HandleGenerate(Endpoint::kCompletions, request, response);
              });
  http_->Post("/v1/chat/completions",
              [this](const httplib::Request& request, httplib::Response& response) {
                HandleGenerate(Endpoint::kChatCompletions, request, response);
              });
  http_->Post("/tokenize", [this](const httplib::Request& request, httplib::Response& response) {
    HandleTokenize(request, response);
  });
  http_->Post("/detokenize", [this](const httplib::Request& request, httplib::Response& response) {
    HandleDetokenize(request, response);
  });
}

Json Server::ModelJson() const {
  return {{"id", options_.model_name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "llmrt"},
          {"max_model_len", engine_.max_context()}};
}

void Server::HandleModels(httplib::Response& response) {
  SendJson(response, {{"object", "list"}, {"data", Json::array({ModelJson()})}});
}

void Server::HandleModel(const std::string& id, httplib::Response& response) {
  if (id != options_.model_name) {
    return SendError(response, absl::NotFoundError(absl::StrFormat(
                                   "The model '%s' does not exist; this server runs '%s'", id,
                                   options_.model_name)));
  }
  SendJson(response, ModelJson());
}

void Server::HandleCountTokens(const httplib::Request& request, httplib::Response& response) {
  absl::StatusOr<ParsedRequest> parsed = ParseMessagesRequest(request.body, options_.limits,
                                                              /*count_tokens=*/true);
  if (!parsed.ok()) return SendError(response, parsed.status(), Endpoint::kMessages);
  absl::StatusOr<RenderedChat> prompt = RenderChat(*parsed);
  if (!prompt.ok()) return SendError(response, prompt.status(), Endpoint::kMessages);
  SendJson(response, {{"input_tokens",
                       tokenizer_.Encode(prompt->text, /*add_special_tokens=*/false).size()}});
}

void Server::HandleTokenize(const httplib::Request& request, httplib::Response& response) {
  const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    SendError(response, absl::InvalidArgumentError("the request body must be a JSON object"));
    return;
  }
  std::vector<int32_t> tokens;
  if (body.contains("messages")) {
    absl::StatusOr<ParsedRequest> parsed =
        ParseRequest(Endpoint::kChatCompletions, request.body, options_.limits);
    if (!parsed.ok()) return SendError(response, parsed.status());
    absl::StatusOr<RenderedChat> prompt = RenderChat(*parsed);
    if (!prompt.ok()) return SendError(response, prompt.status());
    tokens = tokenizer_.Encode(prompt->text, /*add_special_tokens=*/false);
  } else {
    auto prompt = body.find("prompt");
    if (prompt == body.end() || !prompt->is_string()) {
      return SendError(response, absl::InvalidArgumentError(
                                     "'prompt' (a string) or 'messages' (an array) is required"));
    }
    bool add_special_tokens = true;
    auto flag = body.find("add_special_tokens");
    if (flag != body.end()) {
      if (!flag->is_boolean()) {
        return SendError(response,
                         absl::InvalidArgumentError("'add_special_tokens' must be a boolean"));
      }
      add_special_tokens = flag->get<bool>();
    }
    tokens = tokenizer_.Encode(prompt->get<std::string>(), add_special_tokens);
  }
  SendJson(
      response,
      {{"tokens", tokens}, {"count", tokens.size()}, {"max_model_len", engine_.max_context()}});
}

void Server::HandleDetokenize(const httplib::Request& request, httplib::Response& response) {
  const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return SendError(response,
                     absl::InvalidArgumentError("the request body must be a JSON object"));
  }
  auto tokens = body.find("tokens");
  if (tokens == body.end() || !tokens->is_array()) {
    return SendError(response,
                     absl::InvalidArgumentError("'tokens' (an array of ids) is required"));
  }
  std::vector<int32_t> ids;
  const int64_t vocab = tokenizer_.vocab_size();
  for (size_t index = 0; index < tokens->size(); ++index) {
    const Json& token = (*tokens)[index];
    if (!token.is_number_integer() || token.get<int64_t>() < 0 || token.get<int64_t>() >= vocab) {
      return SendError(response, absl::InvalidArgumentError(absl::StrFormat(
                                     "'tokens[%d]' must be a token id in [0, %d), found %s", index,
                                     vocab, token.dump())));
    }
    ids.push_back(static_cast<int32_t>(token.get<int64_t>()));
  }
  SendJson(response, {{"prompt", tokenizer_.Decode(ids, /*skip_special_tokens=*/false)}});
}

absl::StatusOr<ParsedRequest> Server::ParseFor(Endpoint endpoint, const std::string& body) const {
  switch (endpoint) {
    case Endpoint::kMessages:
      return ParseMessagesRequest(body, options_.limits);
    case Endpoint::kResponses:
      return ParseResponsesRequest(body, options_.limits);
    default:
      return ParseRequest(endpoint, body, options_.limits);
  }
}

void Server::HandleGenerate(Endpoint endpoint, const httplib::Request& request,
                            httplib::Response& response) {
  const Clock::time_point arrival = Clock::now();
  auto fail = [&response, endpoint](const absl::Status& status) {
    SendError(response, status, endpoint);
  };
  if (draining_.load()) {
    return fail(absl::UnavailableError("the server is shutting down; retry on another one"));
  }
  absl::StatusOr<ParsedRequest> parsed = ParseFor(endpoint, request.body);
  if (!parsed.ok()) return fail(parsed.status());
  if (!parsed->model.empty() && parsed->model != options_.model_name) {
    return fail(
        absl::NotFoundError(absl::StrFormat("The model '%s' does not exist; this server runs '%s'",
                                            parsed->model, options_.model_name)));
  }

  // Prompts to token ids, and how the output is split into reasoning, content and tool calls.
  std::vector<std::vector<int32_t>> prompts;
  const bool chat = endpoint != Endpoint::kCompletions;
  ToolCallFormat tool_format = ToolCallFormat::kNone;
  bool starts_in_reasoning = false;
  bool reasoning = false;  // the template splits <think> reasoning from the content
  // Harmony (gpt-oss) replies are messages on channels whatever the request: the parser always
  // splits them, and reads calls only when tools are given.
  const bool harmony = chat && tool_format_ == ToolCallFormat::kHarmony;
  std::shared_ptr<const sampling::TokenConstraint> forced_calls;  // tool_choice "required"
  if (chat) {
    absl::StatusOr<RenderedChat> rendered = RenderChat(*parsed);
    if (!rendered.ok()) return fail(rendered.status());
    const std::string& text = rendered->text;
    reasoning = rendered->reasoning || harmony;
    // The template writes the special tokens (BOS) itself, as in transformers and vLLM.
    prompts.push_back(tokenizer_.Encode(text, /*add_special_tokens=*/false));
    if (!parsed->tools.is_null() && parsed->tool_choice != "none") {
      // Tools the model is told about but whose calls the server cannot read would come back
      // as raw text: refused, like a forcing tool_choice on such a model, unless the operator
      // turned parsing off on purpose (--tool-call-format none: calls stay content).
      if (tool_format_ == ToolCallFormat::kNone && options_.tool_call_format.empty()) {
        return fail(absl::InvalidArgumentError(
            "'tools': this model has no tool-call format (the plan's "
            "TokenizerSpec.tool_call_format is empty), so its calls cannot be parsed; start the "
            "server with --tool-call-format NAME, or leave 'tools' out"));
      }
      tool_format = tool_format_;
    }
    // A generation prompt that opens <think> (DeepSeek-R1, Qwen3-Thinking) puts the output
    // inside the reasoning from its first token.
    starts_in_reasoning =
        rendered->reasoning && absl::EndsWith(absl::StripTrailingAsciiWhitespace(text), "<think>");
    if (parsed->tool_choice == "required") {
      if (!parsed->response_format.is_null()) {
        return fail(absl::InvalidArgumentError(
            "'response_format' and a forcing 'tool_choice' both constrain the whole output; "
            "send one of them"));
      }
      ForcedToolCalls forced;
      forced.function = parsed->tool_choice_function;
      forced.parallel = parsed->parallel_tool_calls;
      forced.close_reasoning = starts_in_reasoning;
      absl::StatusOr<std::string> gbnf =
          ToolCallGbnf(tool_format_, parsed->tools, forced, meta_.tokenizer());
      if (!gbnf.ok()) return fail(gbnf.status());
      absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>> constraint =
          structured_output_->GrammarConstraint(*gbnf, "tool_choice");
      if (!constraint.ok()) return fail(constraint.status());
      forced_calls = *std::move(constraint);
    }
  } else {
    for (const Prompt& prompt : parsed->prompts) {
      prompts.push_back(
          prompt.is_ids ? prompt.ids : tokenizer_.Encode(prompt.text, /*add_special_tokens=*/true));
    }
  }
  // Completions default to 16 tokens (OpenAI's legacy default); chat runs to the context's end.
  const int64_t max_tokens =
      parsed->max_tokens.value_or(endpoint == Endpoint::kCompletions ? 16 : -1);
  const int64_t context_tokens = engine_.max_context();
  for (size_t index = 0; index < prompts.size(); ++index) {
    const int64_t prompt_size = static_cast<int64_t>(prompts[index].size());
    if (prompt_size == 0) {
      return fail(absl::InvalidArgumentError(
          absl::StrFormat("prompt %d encodes to no tokens; give some text", index)));
    }
    const int64_t requested = prompt_size + std::max<int64_t>(max_tokens, 0);
    if (requested > context_tokens || prompt_size >= context_tokens) {
      return fail(absl::InvalidArgumentError(absl::StrFormat(
          "This model's maximum context length is %d tokens. However, "
          "you requested %d tokens (%d in the prompt, %d for the "
          "completion). Please reduce the prompt or max_tokens.",
          context_tokens, requested, prompt_size, std::max<int64_t>(max_tokens, 0))));
    }
  }

  // Every engine-side check (token ids and logit_bias against the vocabulary, sampling ranges)
  // runs before admission, so that a bad request is a 400 even when the queue is full.
  const int32_t n = parsed->n;
  const sampling::SamplingParams sampling = ResolveSampling(*parsed, generation_defaults_);
  const int64_t prompt_tokens = static_cast<int64_t>(prompts.front().size());
  std::vector<engine::GenerationRequest> generations(prompts.size());
  for (size_t prompt_index = 0; prompt_index < prompts.size(); ++prompt_index) {
    engine::GenerationRequest& generation = generations[prompt_index];
    generation.prompt_ids = std::move(prompts[prompt_index]);
    generation.sampling = sampling;
    if (parsed->seed.has_value()) generation.seed = *parsed->seed + prompt_index;
    generation.max_tokens = max_tokens;
    generation.stop = parsed->stop;
    generation.stop_token_ids = parsed->stop_token_ids;
    generation.ignore_eos = parsed->ignore_eos;
    generation.logprobs = parsed->logprobs;
    generation.top_logprobs = parsed->top_logprobs;
    generation.n = n;
    if (!parsed->response_format.is_null()) {
      absl::StatusOr<std::shared_ptr<const sampling::TokenConstraint>> constraint =
          structured_output_->Constraint(parsed->response_format);
      if (!constraint.ok()) return fail(constraint.status());
      generation.constraint = *std::move(constraint);
    }
    if (forced_calls != nullptr) generation.constraint = forced_calls;
    // Tool-call markers are special tokens in several families (<|python_tag|>,
    // [TOOL_CALLS]), and harmony's channel markers always are; the parser must see them, so
    // they are kept while it looks for calls or channels.
    generation.skip_special_tokens =
        parsed->skip_special_tokens && tool_format == ToolCallFormat::kNone && !harmony;
    if (absl::Status status = engine_.Validate(generation); !status.ok()) {
      if (status.code() == absl::StatusCode::kOutOfRange) {
        status = absl::InvalidArgumentError(status.message());
      }
      return fail(status);
    }
  }

  // Admission.
  const int64_t sequences = static_cast<int64_t>(prompts.size()) * n;
  const int64_t capacity = int64_t{options_.max_seqs} + options_.max_queued;
  if (sequences > capacity) {
    return fail(absl::InvalidArgumentError(
        absl::StrFormat("the request needs %d sequences (prompts x n); this server "
                        "holds at most %d",
                        sequences, capacity)));
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->active_sequences + sequences > capacity) {
      shared_->metrics.rejected_queue_full.fetch_add(1);
      return fail(absl::ResourceExhaustedError(
          absl::StrFormat("the server is busy: %d sequences running or queued, the "
                          "limit is %d (--max-seqs + --max-queued); retry later",
                          shared_->active_sequences, capacity)));
    }
    shared_->active_sequences += sequences;
  }

  auto open_response = std::make_shared<OpenResponse>(shared_);
  auto tracker = std::make_shared<Tracker>();
  tracker->arrival = arrival;
  tracker->open_choices = static_cast<int32_t>(sequences);
  tracker->last_token_time.assign(sequences, arrival);
  tracker->has_token.assign(sequences, false);

  std::shared_ptr<Shared> shared = shared_;
  for (size_t prompt_index = 0; prompt_index < prompts.size(); ++prompt_index) {
    engine::GenerationRequest& generation = generations[prompt_index];
    const int32_t base = static_cast<int32_t>(prompt_index) * n;
    generation.on_output = [tracker, shared, base](const engine::RequestOutput& output) {
      const Clock::time_point now = Clock::now();
      const int32_t choice = base + output.index;
      ServerMetrics& metrics = shared->metrics;
      if (!output.tokens.empty() && choice >= 0 &&
          choice < static_cast<int32_t>(tracker->has_token.size())) {
        if (!tracker->has_token[choice]) {
          metrics.time_to_first_token.Observe(Seconds(now - tracker->arrival));
          tracker->has_token[choice] = true;
        } else {
          // A step can keep several tokens (not today); spread the interval over them.
          const double interval = Seconds(now - tracker->last_token_time[choice]) /
                                  static_cast<double>(output.tokens.size());
          for (size_t token = 0; token < output.tokens.size(); ++token) {
            metrics.inter_token_latency.Observe(interval);
          }
        }
        tracker->last_token_time[choice] = now;
      }
      if (output.finished && output.index == 0 && output.queue_seconds >= 0) {
        metrics.request_queue_time.Observe(output.queue_seconds);  // once per engine request
      }
      if (output.finished) {
        metrics.e2e_request_latency.Observe(Seconds(now - tracker->arrival));
        switch (output.finish_reason) {
          case engine::FinishReason::kStop:
            metrics.finished_stop.fetch_add(1);
            break;
          case engine::FinishReason::kLength:
            metrics.finished_length.fetch_add(1);
            break;
          case engine::FinishReason::kCancelled:
            metrics.finished_abort.fetch_add(1);
            break;
          default:
            metrics.finished_error.fetch_add(1);
        }
      }
      bool request_done = false;
      {
        std::lock_guard<std::mutex> lock(tracker->mutex);
        tracker->pending.push_back({choice, output});
        if (output.finished) {
          --tracker->open_choices;
          request_done = tracker->open_choices == 0;
        }
      }
      tracker->ready.notify_all();
      if (output.finished) {
        std::lock_guard<std::mutex> lock(shared->mutex);
        --shared->active_sequences;
        if (request_done) {
          for (engine::RequestId id : tracker->ids) shared->live_requests.erase(id);
        }
        if (shared->active_sequences == 0) shared->idle.notify_all();
      }
    };
    // The ids are recorded under the tracker lock before the engine may finish them, so the
    // callback's erase above never runs before the insert below.
    std::unique_lock<std::mutex> tracker_lock(tracker->mutex);
    absl::StatusOr<engine::RequestId> id = engine_.Submit(std::move(generation));
    if (!id.ok()) {
      tracker_lock.unlock();
      // Earlier prompts of this request were accepted: cancel them; their callbacks release
      // their sequences. This prompt's and the later ones' sequences are released here.
      for (engine::RequestId submitted : tracker->ids) engine_.Cancel(submitted);
      {
        std::lock_guard<std::mutex> lock(shared_->mutex);
        shared_->active_sequences -= static_cast<int64_t>(prompts.size() - prompt_index) * n;
        if (shared_->active_sequences == 0) shared_->idle.notify_all();
      }
      absl::Status status = id.status();
      if (status.code() == absl::StatusCode::kOutOfRange) {
        status = absl::InvalidArgumentError(status.message());
      }
      return fail(status);
    }
    tracker->ids.push_back(*id);
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->live_requests.insert(*id);
  }

  ResponseContext context;
  context.endpoint = endpoint;
  context.id = NewResponseId(endpoint);
  context.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  context.model = options_.model_name;
  context.logprobs = parsed->logprobs;
  context.top_logprobs = parsed->top_logprobs;
  context.reasoning = chat && reasoning;
  context.token_text = [this](int32_t id) { return TokenText(id, /*raw_bytes=*/false); };
  context.token_bytes = [this](int32_t id) { return TokenText(id, /*raw_bytes=*/true); };
  std::shared_ptr<ApiWriter> writer;
  switch (endpoint) {
    case Endpoint::kMessages:
      writer = MakeMessagesWriter(context, prompt_tokens);
      break;
    case Endpoint::kResponses:
      writer = MakeResponsesWriter(context, parsed->api_echo);
      break;
    default:
      writer = MakeOpenAiWriter(context, static_cast<int32_t>(sequences), parsed->include_usage);
  }

  // Per choice: the parser and everything parsed so far. Completions parse nothing (kNone, no
  // reasoning): their text passes through unchanged.
  auto outputs = std::make_shared<ChoiceOutputs>();
  outputs->choices.resize(sequences);
  for (int32_t index = 0; index < sequences; ++index) {
    outputs->choices[index].index = index;
    if (harmony && tool_format == ToolCallFormat::kNone) {
      outputs->parsers.push_back(OutputParser::HarmonyWithoutCalls());
    } else {
      outputs->parsers.emplace_back(tool_format, context.reasoning, starts_in_reasoning);
    }
  }
  outputs->prompt_usage.resize(prompts.size());

  auto peer = std::make_shared<PeerWatch>(request.local_addr, request.local_port,
                                          request.remote_addr, request.remote_port);
  engine::Engine& engine = engine_;
  auto cancel_all = [tracker, &engine] {
    std::vector<engine::RequestId> ids;
    {
      std::lock_guard<std::mutex> lock(tracker->mutex);
      ids = tracker->ids;
    }
    for (engine::RequestId id : ids) engine.Cancel(id);
  };
  // Waits up to one poll interval for engine outputs; true when every choice has finished.
  auto take = [tracker](std::deque<Tracker::Item>& items) {
    std::unique_lock<std::mutex> lock(tracker->mutex);
    tracker->ready.wait_for(lock, kPollInterval, [&] {
      return !tracker->pending.empty() || tracker->open_choices == 0;
    });
    items.swap(tracker->pending);
    return tracker->open_choices == 0;
  };

  if (!parsed->stream) {
    absl::Status failure;
    while (true) {
      std::deque<Tracker::Item> items;
      const bool done = take(items);
      for (Tracker::Item& item : items) {
        outputs->Apply(item.choice, n, item.output);
        if (item.output.finished && item.output.finish_reason == engine::FinishReason::kError &&
            failure.ok()) {
          failure = item.output.status;
        }
      }
      if (done) break;
      if (peer->PeerClosed()) {
        cancel_all();
        return;  // nobody to answer; the callbacks release the sequences
      }
    }
    if (!failure.ok()) {
      return fail(absl::InternalError(absl::StrFormat("generation failed: %s", failure.message())));
    }
    return SendJson(response, writer->Response(outputs->choices, outputs->TotalUsage()));
  }

  // Streaming. State lives in the provider (httplib calls it repeatedly until done()).
  struct StreamState {
    bool started = false;
    bool finished = false;
  };
  auto state = std::make_shared<StreamState>();
  response.set_header("Cache-Control", "no-cache");
  response.set_chunked_content_provider(
      "text/event-stream",
      [tracker, state, outputs, writer, peer, cancel_all, take, n, open_response](
          size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& events) {
          return events.empty() || sink.write(events.data(), events.size());
        };
        if (!state->started) {
          state->started = true;
          if (!write(writer->StreamStart())) {
            cancel_all();
            return false;
          }
          return true;
        }
        std::deque<Tracker::Item> items;
        const bool done = take(items);
        for (Tracker::Item& item : items) {
          const engine::RequestOutput& output = item.output;
          const ParsedDelta delta = outputs->Apply(item.choice, n, output);
          std::string events;
          if (output.finished && output.finish_reason == engine::FinishReason::kError) {
            events = writer->StreamError(ErrorFromStatus(absl::InternalError(
                absl::StrFormat("generation failed: %s", output.status.message()))));
          } else {
            const ChoiceResult& choice = outputs->choices[item.choice];
            events = writer->StreamDelta(choice, delta, output);
            if (output.finished) events += writer->StreamFinish(choice);
          }
          if (!write(events)) {
            cancel_all();
            return false;
          }
        }
        if (done) {
          if (!write(writer->StreamEnd(outputs->choices, outputs->TotalUsage()))) return false;
          state->finished = true;
          sink.done();
          return true;
        }
        if (items.empty() && peer->PeerClosed()) {
          cancel_all();
          return false;
        }
        return true;
      },
      [state, cancel_all](bool) {
        // A failed write or a server stop ends the stream early: nobody reads the rest.
        if (!state->finished) cancel_all();
      });
}

}  // namespace llmrt::server
