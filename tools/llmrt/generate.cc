#include "tools/llmrt/generate.h"

#include <chrono>

namespace llmrt {

absl::StatusOr<GenerateResult> Generate(const engine::Model& model, engine::Session& session,
                                        const std::vector<int32_t>& input,
                                        sampling::Sampler& sampler, StreamDecoder& decoder,
                                        const GenerateLimits& limits,
                                        const std::function<void(const std::string&)>& on_text) {
  GenerateResult result;
  auto emit = [&](const std::string& text) {
    if (text.empty()) return;
    result.text += text;
    on_text(text);
  };
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<float>> logits = session.Append(input, false);
  if (!logits.ok()) return logits.status();
  const auto prefilled = std::chrono::steady_clock::now();
  // The penalties count the input and what is generated, as in the engine (in `chat`, the
  // input is this turn's tokens).
  sampler.SetPrompt(input);
  while (static_cast<int64_t>(result.tokens.size()) < limits.max_new_tokens) {
    if (limits.cancel && limits.cancel->load(std::memory_order_relaxed)) break;
    const int32_t token = sampler.Sample(logits->data(), static_cast<int32_t>(logits->size()));
    for (int64_t eos : limits.eos_ids) result.stopped_at_eos |= token == eos;
    if (result.stopped_at_eos) break;
    result.tokens.push_back(token);
    sampler.Accept(token);
    emit(decoder.Push(token));
    if (static_cast<int64_t>(result.tokens.size()) == limits.max_new_tokens) break;
    if (session.num_tokens() >= model.max_context()) {
      result.stopped_at_context_limit = true;
      break;
    }
    logits = session.Append({token}, false);
    if (!logits.ok()) return logits.status();
  }
  emit(decoder.Finish());
  const auto end = std::chrono::steady_clock::now();
  result.prefill_seconds = std::chrono::duration<double>(prefilled - start).count();
  result.decode_seconds = std::chrono::duration<double>(end - prefilled).count();
  return result;
}

}  // namespace llmrt
