#include "bench/soak/soak_checks.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/serve/load_stats.h"
#include "nlohmann/json.hpp"

namespace llmrt::soak {
namespace {

using Json = nlohmann::json;

const char* const kWords[] = {"once", "upon",  "a",    "time",  "there", "was",   "little",
                              "girl", "named", "Lily", "she",   "loved", "to",    "play",
                              "with", "her",   "dog",  "in",    "the",   "park",  "sun",
                              "big",  "red",   "ball", "happy", "tree",  "friend"};
const char* const kStops[] = {"\n", ".", " the", "Lily", "dog", "!", ", "};

int64_t Uniform(std::mt19937_64& random, int64_t low, int64_t high) {  // [low, high]
  return std::uniform_int_distribution<int64_t>(low, high)(random);
}
double UniformReal(std::mt19937_64& random, double low, double high) {
  return std::uniform_real_distribution<double>(low, high)(random);
}
bool Chance(std::mt19937_64& random, double probability) {
  return std::bernoulli_distribution(probability)(random);
}

std::string Words(std::mt19937_64& random, int64_t count) {
  std::string text;
  for (int64_t index = 0; index < count; ++index) {
    if (index > 0) text += ' ';
    text += kWords[Uniform(random, 0, std::size(kWords) - 1)];
  }
  return text;
}

std::vector<int32_t> PoolIds(std::mt19937_64& random, const SoakContext& context, int64_t count) {
  std::vector<int32_t> ids;
  for (int64_t index = 0; index < count; ++index) {
    ids.push_back(context.token_pool[Uniform(random, 0, context.token_pool.size() - 1)]);
  }
  return ids;
}

Json Messages(std::mt19937_64& random) {
  Json messages = Json::array();
  const int64_t turns = Uniform(random, 0, 1) * 2 + 1;  // 1 or 3, ending with the user
  for (int64_t turn = 0; turn < turns; ++turn) {
    const std::string role = turn % 2 == 0 ? "user" : "assistant";
    if (Chance(random, 0.1)) {
      messages.push_back(
          {{"role", role},
           {"content", Json::array({{{"type", "text"}, {"text", Words(random, 3)}},
                                    {{"type", "text"}, {"text", Words(random, 2)}}})}});
    } else {
      messages.push_back({{"role", role}, {"content", Words(random, Uniform(random, 1, 12))}});
    }
  }
  return messages;
}

SoakRequest Generation(std::mt19937_64& random, const SoakContext& context) {
  SoakRequest request;
  request.generation = true;
  request.chat = Chance(random, 0.4);
  request.stream = Chance(random, 0.5);
  request.path = request.chat ? "/v1/chat/completions" : "/v1/completions";
  Json body = Json::object();
  if (!context.model.empty() && Chance(random, 0.5)) body["model"] = context.model;
  int32_t prompts = 1;
  if (request.chat) {
    body["messages"] = Messages(random);
  } else if (Chance(random, 0.1)) {
    prompts = 2;
    body["prompt"] =
        Json::array({Words(random, Uniform(random, 1, 10)), PoolIds(random, context, 5)});
  } else if (Chance(random, 0.3)) {
    body["prompt"] = PoolIds(random, context, Uniform(random, 1, 40));
  } else {
    body["prompt"] = Words(random, Uniform(random, 1, 30));
  }
  const int32_t n = static_cast<int32_t>(Chance(random, 0.7) ? 1 : Uniform(random, 2, 3));
  if (n > 1 || Chance(random, 0.2)) body["n"] = n;
  request.choices = prompts * n;
  request.max_tokens = Uniform(random, 1, std::max<int64_t>(1, context.max_tokens));
  body[request.chat && Chance(random, 0.5) ? "max_completion_tokens" : "max_tokens"] =
      request.max_tokens;
  const bool ignore_eos = Chance(random, 0.5);
  if (ignore_eos) body["ignore_eos"] = true;
  bool stops = false;
  if (Chance(random, 0.3)) {
    Json stop = Json::array();
    for (int64_t count = Uniform(random, 1, 3); count > 0; --count) {
      stop.push_back(kStops[Uniform(random, 0, std::size(kStops) - 1)]);
    }
    body["stop"] = stop;
    stops = true;
  }
  if (Chance(random, 0.1)) {
    body["stop_token_ids"] = PoolIds(random, context, 1);
    stops = true;
  }
  request.exact_tokens = ignore_eos && !stops;
  if (Chance(random, 0.3)) {
    body["temperature"] = 0;
  } else if (Chance(random, 0.7)) {
    body["temperature"] = UniformReal(random, 0.1, 1.5);
  }
  if (Chance(random, 0.4)) body["top_p"] = UniformReal(random, 0.3, 1.0);
  if (Chance(random, 0.3)) body["top_k"] = Uniform(random, 1, 50);
  if (Chance(random, 0.2)) body["min_p"] = UniformReal(random, 0.0, 0.3);
  if (Chance(random, 0.2)) body["presence_penalty"] = UniformReal(random, -1.0, 1.0);
  if (Chance(random, 0.2)) body["frequency_penalty"] = UniformReal(random, -1.0, 1.0);
  if (Chance(random, 0.2)) body["repetition_penalty"] = UniformReal(random, 0.8, 1.3);
  if (Chance(random, 0.5)) body["seed"] = Uniform(random, 0, int64_t{1} << 40);
  if (Chance(random, 0.2)) {
    if (request.chat) {
      body["logprobs"] = true;
      body["top_logprobs"] = Uniform(random, 0, 5);
    } else {
      body["logprobs"] = Uniform(random, 0, 5);
    }
  }
  if (Chance(random, 0.15)) {
    Json bias = Json::object();
    for (int32_t id : PoolIds(random, context, Uniform(random, 1, 5))) {
      bias[std::to_string(id)] = UniformReal(random, -100, 100);
    }
    body["logit_bias"] = bias;
  }
  if (request.stream) {
    body["stream"] = true;
    if (Chance(random, 0.5)) {
      body["stream_options"] = {{"include_usage", true}};
      request.include_usage = true;
    }
  }
  request.name =
      absl::StrCat(request.chat ? "chat" : "completions", request.stream ? "_stream" : "");
  request.body = body.dump();
  return request;
}

SoakRequest Probe(std::mt19937_64& random, const SoakContext& context) {
  SoakRequest request;
  switch (Uniform(random, 0, 4)) {
    case 0:
      request.method = "GET";
      request.path = "/health";
      break;
    case 1:
      request.method = "GET";
      request.path = "/metrics";
      break;
    case 2:
      request.method = "GET";
      request.path = "/v1/models";
      break;
    case 3:
      request.path = "/tokenize";
      request.body = Json{{"prompt", Words(random, Uniform(random, 0, 20))}}.dump();
      break;
    default:
      request.path = "/detokenize";
      request.body = Json{{"tokens", PoolIds(random, context, Uniform(random, 0, 20))}}.dump();
  }
  request.name = "probe" + request.path;
  return request;
}

SoakRequest Invalid(std::mt19937_64& random, const SoakContext& context) {
  SoakRequest request;
  request.expect = Expect::kError;
  request.error_status = 400;
  request.path = "/v1/completions";
  Json body = {{"prompt", Words(random, 3)}, {"max_tokens", 4}};
  Json chat = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}};
  auto set = [&](const char* name, Json json) {
    request.name = name;
    request.body = json.dump();
  };
  auto with = [&](const char* name, const char* field, Json value) {
    Json copy = body;
    copy[field] = std::move(value);
    set(name, copy);
  };
  auto chat_with = [&](const char* name, Json fields) {
    Json copy = chat;
    for (auto it = fields.begin(); it != fields.end(); ++it) copy[it.key()] = it.value();
    request.path = "/v1/chat/completions";
    set(name, copy);
  };
  const int64_t cases = context.max_body_bytes > 0 ? 36 : 35;
  switch (Uniform(random, 0, cases - 1)) {
    case 0:
      request.name = "malformed_json";
      request.body = "{\"prompt\": \"Once";
      break;
    case 1:
      request.name = "body_not_an_object";
      request.body = "[1, 2, 3]";
      break;
    case 2:
      with("negative_max_tokens", "max_tokens", -1);
      break;
    case 3:
      with("zero_max_tokens", "max_tokens", 0);
      break;
    case 4:
      with("huge_max_tokens", "max_tokens", int64_t{1} << 50);
      break;
    case 5:
      with("negative_n", "n", -3);
      break;
    case 6:
      with("huge_n", "n", int64_t{1} << 40);
      break;
    case 7:
      with("negative_logprobs", "logprobs", -1);
      break;
    case 8:
      with("huge_logprobs", "logprobs", 100000);
      break;
    case 9:
      chat_with("negative_top_logprobs", {{"logprobs", true}, {"top_logprobs", -1}});
      break;
    case 10:
      chat_with("huge_top_logprobs", {{"logprobs", true}, {"top_logprobs", int64_t{1} << 40}});
      break;
    case 11: {
      Json stop = Json::array();
      for (int index = 0; index < 17; ++index) stop.push_back(absl::StrCat("s", index));
      with("too_many_stop_strings", "stop", stop);
      break;
    }
    case 12:
      with("stop_string_too_long", "stop", std::string(600, 'x'));
      break;
    case 13:
      with("empty_stop_string", "stop", Json::array({""}));
      break;
    case 14: {
      Json bias = Json::object();
      for (int index = 0; index < 1025; ++index) bias[std::to_string(index)] = 1;
      with("too_many_logit_bias_entries", "logit_bias", bias);
      break;
    }
    case 15:
      with("negative_logit_bias_id", "logit_bias", {{"-5", 1}});
      break;
    case 16:
      with("huge_logit_bias_value", "logit_bias", {{"5", 1e6}});
      break;
    case 17:
      with("logit_bias_id_outside_vocab", "logit_bias", {{"1073741824", 1}});
      break;
    case 18:
      with("negative_temperature", "temperature", -0.5);
      break;
    case 19:
      with("zero_top_p", "top_p", 0);
      break;
    case 20:
      with("negative_top_k", "top_k", -7);
      break;
    case 21:
      request.error_status = 404;
      with("unknown_model", "model", "no-such-model");
      break;
    case 22:
      with("prompt_beyond_context", "prompt", PoolIds(random, context, context.max_context + 1));
      break;
    case 23: {
      Json copy = body;
      copy["prompt"] = PoolIds(random, context, std::max<int64_t>(1, context.max_context - 2));
      copy["max_tokens"] = 10;
      set("prompt_plus_max_tokens_beyond_context", copy);
      break;
    }
    case 24:
      with("token_id_outside_vocab", "prompt", Json::array({1, int64_t{1} << 30}));
      break;
    case 25:
      with("negative_token_id", "prompt", Json::array({-1}));
      break;
    case 26:
      with("n_as_string", "n", "2");
      break;
    case 27:
      request.path = "/v1/chat/completions";
      set("messages_not_an_array", {{"messages", "hi"}});
      break;
    case 28:
      request.path = "/v1/chat/completions";
      set("message_without_role", {{"messages", {{{"content", "hi"}}}}});
      break;
    case 29:
      with("stream_options_without_stream", "stream_options", {{"include_usage", true}});
      break;
    case 30:
      request.error_status = 404;
      request.path = "/v1/nothing";
      set("unknown_route", body);
      break;
    case 31: {
      Json prompts = Json::array();
      for (int index = 0; index < 65; ++index) prompts.push_back("hi");
      with("too_many_prompts", "prompt", prompts);
      break;
    }
    case 32:
      with("negative_stop_token_id", "stop_token_ids", Json::array({-4}));
      break;
    case 33:
      request.path = "/detokenize";
      set("detokenize_negative_id", {{"tokens", {-1}}});
      break;
    case 34:
      with("negative_seed_as_float", "seed", -1.5);
      break;
    default:
      request.error_status = 413;
      request.name = "body_too_large";
      request.body = Json{{"prompt", std::string(context.max_body_bytes, 'a')}}.dump();
  }
  return request;
}

SoakRequest Disconnect(std::mt19937_64& random, const SoakContext& context) {
  SoakRequest request;
  request.expect = Expect::kDisconnect;
  request.generation = true;
  request.stream = Chance(random, 0.6);
  request.path = "/v1/completions";
  request.choices = static_cast<int32_t>(Uniform(random, 1, 4));
  request.max_tokens = std::max<int64_t>(1, std::min<int64_t>(200, context.max_context - 64));
  Json body = {{"prompt", Words(random, Uniform(random, 1, 20))},
               {"max_tokens", request.max_tokens},
               {"n", request.choices},
               {"ignore_eos", true},
               {"temperature", 0.8}};
  if (request.stream) {
    body["stream"] = true;
    request.disconnect_after_events = static_cast<int32_t>(Uniform(random, 1, 20));
    request.name = "disconnect_stream";
  } else {
    request.disconnect_after_ms = static_cast<int32_t>(Uniform(random, 5, 200));
    request.name = "disconnect_plain";
  }
  request.body = body.dump();
  return request;
}

// "" for an OpenAI error object, else what is wrong with it.
std::string CheckErrorBody(const std::string& body) {
  const Json json = Json::parse(body, nullptr, false);
  if (!json.is_object() || !json.contains("error") || !json["error"].is_object()) {
    return "not an OpenAI error object: " + body.substr(0, 200);
  }
  const Json& error = json["error"];
  if (!error.contains("message") || !error["message"].is_string() ||
      error["message"].get<std::string>().empty() || !error.contains("type") ||
      !error["type"].is_string() || !error.contains("param") || !error.contains("code")) {
    return "error object lacks message/type/param/code: " + body.substr(0, 200);
  }
  return "";
}

bool IsFinishReason(const Json& value) {
  return value.is_string() && (value == "stop" || value == "length");
}

std::string CheckWhole(const SoakRequest& request, const Json& json) {
  const char* object = request.chat ? "chat.completion" : "text_completion";
  if (!json.is_object() || json.value("object", "") != object) {
    return absl::StrCat("expected object ", object);
  }
  if (!json.contains("choices") || !json["choices"].is_array() ||
      static_cast<int32_t>(json["choices"].size()) != request.choices) {
    return absl::StrFormat("expected %d choices", request.choices);
  }
  std::set<int64_t> indices;
  for (const Json& choice : json["choices"]) {
    if (!choice.contains("index") || !choice["index"].is_number_integer()) return "choice index";
    indices.insert(choice["index"].get<int64_t>());
    if (!IsFinishReason(choice["finish_reason"])) {
      return "finish_reason " + choice["finish_reason"].dump();
    }
    if (request.exact_tokens && choice["finish_reason"] != "length") {
      return "ignore_eos without stops must end by length, got " + choice["finish_reason"].dump();
    }
    const bool has_text = request.chat ? choice.contains("message") &&
                                             choice["message"].value("role", "") == "assistant" &&
                                             choice["message"]["content"].is_string()
                                       : choice.contains("text") && choice["text"].is_string();
    if (!has_text) return "choice without text: " + choice.dump().substr(0, 200);
  }
  if (static_cast<int32_t>(indices.size()) != request.choices || *indices.begin() != 0 ||
      *indices.rbegin() != request.choices - 1) {
    return "choice indices are not 0..n-1";
  }
  if (!json.contains("usage") || !json["usage"].is_object()) return "no usage";
  const int64_t completion = json["usage"].value("completion_tokens", int64_t{-1});
  if (request.exact_tokens ? completion != request.choices * request.max_tokens
                           : completion < 0 || completion > request.choices * request.max_tokens) {
    return absl::StrFormat("usage.completion_tokens %d for %d choices of max_tokens %d%s",
                           completion, request.choices, request.max_tokens,
                           request.exact_tokens ? " (exact)" : "");
  }
  if (json["usage"].value("prompt_tokens", int64_t{0}) < 1) return "usage.prompt_tokens < 1";
  return "";
}

std::string CheckStream(const SoakRequest& request, const std::string& body) {
  bench::SseParser parser;
  std::vector<std::string> events;
  parser.Feed(body, events);
  if (events.empty() || events.back() != "[DONE]") return "the stream does not end with [DONE]";
  // Every byte must belong to an event: the parser keeps an unterminated tail to itself.
  if (body.size() < 14 || body.compare(body.size() - 14, 14, "data: [DONE]\n\n") != 0) {
    return "bytes after data: [DONE]";
  }
  const char* object = request.chat ? "chat.completion.chunk" : "text_completion";
  std::string id;
  std::vector<bool> finished(request.choices, false), role_seen(request.choices, false);
  int usage_chunks = 0;
  int64_t usage_completion = -1;
  for (size_t index = 0; index + 1 < events.size(); ++index) {
    const Json chunk = Json::parse(events[index], nullptr, false);
    if (!chunk.is_object()) return "an event is not a JSON object: " + events[index].substr(0, 200);
    if (chunk.contains("error")) return "error event: " + events[index].substr(0, 200);
    if (chunk.value("object", "") != object) return absl::StrCat("chunk object is not ", object);
    const std::string chunk_id = chunk.value("id", "");
    if (id.empty()) id = chunk_id;
    if (chunk_id.empty() || chunk_id != id) return "chunk ids differ";
    if (!chunk.contains("choices") || !chunk["choices"].is_array()) return "chunk without choices";
    if (chunk["choices"].empty()) {
      ++usage_chunks;
      if (!chunk.contains("usage") || !chunk["usage"].is_object()) return "empty chunk, no usage";
      usage_completion = chunk["usage"].value("completion_tokens", int64_t{-1});
      continue;
    }
    if (request.include_usage && !(chunk.contains("usage") && chunk["usage"].is_null())) {
      return "include_usage: content chunks must carry \"usage\": null";
    }
    for (const Json& choice : chunk["choices"]) {
      const int64_t choice_index = choice.value("index", int64_t{-1});
      if (choice_index < 0 || choice_index >= request.choices) return "choice index out of range";
      if (finished[choice_index]) return "a chunk after the choice's finish_reason";
      if (request.chat) {
        const bool has_role = choice.contains("delta") && choice["delta"].contains("role");
        if (has_role != !role_seen[choice_index]) return "role not exactly on the first delta";
        role_seen[choice_index] = true;
      }
      if (!choice["finish_reason"].is_null()) {
        if (!IsFinishReason(choice["finish_reason"])) {
          return "finish_reason " + choice["finish_reason"].dump();
        }
        if (request.exact_tokens && choice["finish_reason"] != "length") {
          return "ignore_eos without stops must end by length";
        }
        finished[choice_index] = true;
      }
    }
  }
  for (int32_t index = 0; index < request.choices; ++index) {
    if (!finished[index]) return absl::StrFormat("choice %d has no finish_reason", index);
  }
  if (usage_chunks != (request.include_usage ? 1 : 0)) {
    return absl::StrFormat("%d usage chunks, include_usage %d", usage_chunks,
                           request.include_usage);
  }
  if (request.include_usage && request.exact_tokens &&
      usage_completion != request.choices * request.max_tokens) {
    return absl::StrFormat("usage.completion_tokens %d, expected %d", usage_completion,
                           request.choices * request.max_tokens);
  }
  return "";
}

std::string CheckProbe(const SoakRequest& request, const std::string& body) {
  if (request.path == "/metrics") {
    return body.find("llmrt:kv_cache_usage_perc") != std::string::npos ? "" : "metrics page";
  }
  const Json json = Json::parse(body, nullptr, false);
  if (!json.is_object()) return "not a JSON object: " + body.substr(0, 200);
  if (request.path == "/health") return json.value("status", "") == "ok" ? "" : "health body";
  if (request.path == "/v1/models") {
    return json.contains("data") && json["data"].is_array() && !json["data"].empty() ? ""
                                                                                     : "models";
  }
  if (request.path == "/tokenize") {
    return json.contains("tokens") && json["tokens"].is_array() ? "" : "tokenize body";
  }
  return json.contains("prompt") && json["prompt"].is_string() ? "" : "detokenize body";
}

}  // namespace

SoakRequest RandomRequest(std::mt19937_64& random, const SoakContext& context) {
  const double draw = UniformReal(random, 0.0, 1.0);
  if (draw < 0.55) return Generation(random, context);
  if (draw < 0.65) return Probe(random, context);
  if (draw < 0.90) return Invalid(random, context);
  return Disconnect(random, context);
}

std::string CheckResponse(const SoakRequest& request, int status, const std::string& body) {
  switch (request.expect) {
    case Expect::kDisconnect:
      return "";
    case Expect::kError: {
      if (status != request.error_status) {
        return absl::StrFormat("expected HTTP %d, got %d: %s", request.error_status, status,
                               body.substr(0, 200));
      }
      return CheckErrorBody(body);
    }
    case Expect::kSuccess:
      break;
  }
  if (request.generation && status == 429) {
    const std::string error = CheckErrorBody(body);
    if (!error.empty()) return error;
    return body.find("rate_limit_exceeded") != std::string::npos ? "" : "429 without rate_limit";
  }
  if (status != 200) return absl::StrFormat("HTTP %d: %s", status, body.substr(0, 200));
  if (!request.generation) return CheckProbe(request, body);
  if (request.stream) return CheckStream(request, body);
  const Json json = Json::parse(body, nullptr, false);
  if (json.is_discarded()) return "the body is not JSON: " + body.substr(0, 200);
  return CheckWhole(request, json);
}

}  // namespace llmrt::soak
