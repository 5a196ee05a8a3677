// The request catalogue and response checks of `llmrt-soak` (llmrt_soak.cc), kept apart from the
// network code so that every rule is unit-tested (soak_checks_test.cc).
//
// A soak request is one of:
//   success     a valid generation (completions or chat, streamed or not, random sampling
//               parameters, n, stop strings, logprobs, logit_bias, seeds) or a probe (/health,
//               /metrics, /v1/models, /tokenize, /detokenize). Allowed answers: 200 with a
//               well-formed body, or 429 (an OpenAI rate_limit_exceeded error) for generations.
//   error       an invalid request (negative or huge counts, wrong types, too many stop strings,
//               unknown model, a prompt beyond the context, ...). Allowed answer: exactly the
//               expected status with an OpenAI error object.
//   disconnect  a valid long generation the client abandons: a stream after a random number of
//               events, or a plain request after a random number of milliseconds. Anything the
//               server does is allowed except crashing or keeping the request's KV blocks
//               (which the final KV check catches).
//
// Thread-safety: stateless functions.
#ifndef LLMRT_BENCH_SOAK_SOAK_CHECKS_H_
#define LLMRT_BENCH_SOAK_SOAK_CHECKS_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace llmrt::soak {

enum class Expect { kSuccess, kError, kDisconnect };

struct SoakRequest {
  std::string name;  // catalogue entry, for the report ("completions_stream", "negative_n", ...)
  std::string method = "POST";
  std::string path;
  std::string body;
  Expect expect = Expect::kSuccess;
  int error_status = 0;  // kError: the one status allowed
  bool generation = false;
  bool stream = false;
  bool chat = false;
  bool include_usage = false;
  int32_t choices = 1;        // prompts x n
  int64_t max_tokens = 0;     // per choice
  bool exact_tokens = false;  // ignore_eos and no stop: every choice has max_tokens tokens
  int32_t disconnect_after_events = 0;  // kDisconnect and stream
  int32_t disconnect_after_ms = 0;      // kDisconnect and not stream
};

// What the catalogue needs to know about the server.
struct SoakContext {
  std::vector<int32_t> token_pool;  // valid token ids (the server's tokenization of words)
  int64_t max_context = 0;          // /v1/models max_model_len
  std::string model;                // /v1/models id
  int64_t max_body_bytes = 0;       // the server's --max-body-bytes; 0: not probed
  int64_t max_tokens = 48;          // largest max_tokens of a valid generation
};

// Draws one request: about 55% valid generations, 10% probes, 25% invalid, 10% disconnects.
SoakRequest RandomRequest(std::mt19937_64& random, const SoakContext& context);

// "" when (status, body) is an answer `request` allows; otherwise what is wrong. For streams,
// `body` is the whole event stream as received.
std::string CheckResponse(const SoakRequest& request, int status, const std::string& body);

}  // namespace llmrt::soak

#endif  // LLMRT_BENCH_SOAK_SOAK_CHECKS_H_
