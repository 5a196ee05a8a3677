// libFuzzer target: any bytes as a template, parsed and rendered with a small chat. Neither may
// crash, hang or exceed the limits; errors are fine. Built only with clang and
// -DLLMRT_BUILD_FUZZERS=ON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "runtime/template/chat.h"
#include "runtime/template/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmrt::jinja::Value;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<llmrt::jinja::Template> parsed = llmrt::jinja::Template::Parse(source);
  if (!parsed.ok()) return 0;
  llmrt::jinja::ChatOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.add_generation_prompt = true;
  // Small limits keep each input fast: 64 kB output, 10k iterations, 16 nested calls.
  options.render.limits.max_output_bytes = 1 << 16;
  options.render.limits.max_loop_iterations = 10000;
  options.render.limits.max_call_depth = 16;
  std::tm fixed = {};
  options.render.now = fixed;
  (void)llmrt::jinja::RenderChat(
      *parsed, {{"system", Value::String("sys")}, {"user", Value::String("hi {{ x }}")}}, options);
  return 0;
}
