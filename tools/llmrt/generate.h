// The token loop `llmrt run` and `llmrt chat` share: sample, stop at EOS or a limit, stream text.
#ifndef LLMRT_TOOLS_LLMRT_GENERATE_H_
#define LLMRT_TOOLS_LLMRT_GENERATE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/engine/model.h"
#include "runtime/sampling/sampler.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {

struct GenerateLimits {
  int64_t max_new_tokens = 256;
  std::vector<int64_t> eos_ids;
  // Checked before every token; set from a signal handler to stop early (Ctrl-C).
  const std::atomic<bool>* cancel = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, EOS excluded; all but the last are in the KV cache
  std::string text;             // everything passed to on_text
  bool stopped_at_eos = false;
  // The session reached the model's context (Model::max_context) before max_new_tokens or EOS.
  bool stopped_at_context_limit = false;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Appends `input` to `session` (prefill), then samples up to max_new_tokens tokens, appending each
// but the last so the session holds input + all generated tokens but the final one. Streams
// whole-character text through `on_text` as it is decoded.
absl::StatusOr<GenerateResult> Generate(const engine::Model& model, engine::Session& session,
                                        const std::vector<int32_t>& input,
                                        sampling::Sampler& sampler, StreamDecoder& decoder,
                                        const GenerateLimits& limits,
                                        const std::function<void(const std::string&)>& on_text);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_GENERATE_H_
