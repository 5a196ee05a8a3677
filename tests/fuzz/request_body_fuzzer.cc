// libFuzzer target: any bytes as the JSON body of POST /v1/completions and
// /v1/chat/completions, through the same ParseRequest the HTTP handlers call (no sockets).
// Parsing must return a request or a status, never crash, recurse without bound or allocate
// beyond what the body and RequestLimits allow; an accepted request must resolve to sampling
// parameters and an error must map to an OpenAI error body.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/server/protocol.h"

namespace {

void ParseOne(llmrt::server::Endpoint endpoint, std::string_view body) {
  using llmrt::server::ParsedRequest;
  const llmrt::server::RequestLimits limits;
  absl::StatusOr<ParsedRequest> request = llmrt::server::ParseRequest(endpoint, body, limits);
  if (!request.ok()) {
    (void)llmrt::server::ErrorBody(llmrt::server::ErrorFromStatus(request.status()));
    return;
  }
  (void)llmrt::server::ResolveSampling(*request, llmrt::sampling::SamplingParams());
  (void)llmrt::server::DumpJson(request->messages);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  ParseOne(llmrt::server::Endpoint::kCompletions, body);
  ParseOne(llmrt::server::Endpoint::kChatCompletions, body);
  return 0;
}
