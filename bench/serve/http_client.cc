#include "bench/serve/http_client.h"

#include "absl/status/status.h"

namespace llmrt::bench {

using Json = nlohmann::json;

httplib::Headers AuthHeaders(const std::string& api_key) {
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  return headers;
}

std::unique_ptr<httplib::Client> NewClient(const std::string& url, int64_t timeout_seconds) {
  auto client = std::make_unique<httplib::Client>(url);
  client->set_connection_timeout(10, 0);
  client->set_read_timeout(timeout_seconds, 0);
  client->set_write_timeout(timeout_seconds, 0);
  return client;
}

std::optional<Json> FirstModel(httplib::Client& client, const httplib::Headers& headers) {
  httplib::Result response = client.Get("/v1/models", headers);
  if (!response || response->status != 200) return std::nullopt;
  const Json reply = Json::parse(response->body, nullptr, false);
  if (!reply.is_object() || !reply.contains("data") || reply["data"].empty()) return std::nullopt;
  return reply["data"][0];
}

absl::StatusOr<std::vector<int32_t>> Tokenize(httplib::Client& client, const std::string& url,
                                              const std::string& prompt,
                                              const httplib::Headers& headers) {
  const Json body = {{"prompt", prompt}, {"add_special_tokens", false}};
  httplib::Result response = client.Post("/tokenize", headers, body.dump(), "application/json");
  if (!response) {
    return absl::UnavailableError(
        absl::StrFormat("%s/tokenize: %s", url, httplib::to_string(response.error())));
  }
  const Json reply = Json::parse(response->body, nullptr, false);
  if (response->status != 200 || !reply.is_object() || !reply.contains("tokens") ||
      reply["tokens"].empty()) {
    return absl::UnavailableError(absl::StrFormat("%s/tokenize answered %d: %s", url,
                                                  response->status, response->body.substr(0, 200)));
  }
  return reply["tokens"].get<std::vector<int32_t>>();
}

}  // namespace llmrt::bench
