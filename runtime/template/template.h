// Chat templates: our own Jinja interpreter, written to render exactly what Python jinja2 renders
// under the settings transformers' apply_chat_template uses (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loop controls, its tojson filter and its raise_exception and
// strftime_now globals).
//
//   absl::StatusOr<Template> chat = Template::Parse(source);   // once
//   absl::StatusOr<std::string> prompt = chat->Render(variables, options);   // many times
//
// Sandboxed: a template sees only the variables it is given and the globals below; it cannot
// change lists or dicts (as jinja2's immutable sandbox), and output size, loop iterations and
// macro recursion are bounded (RenderLimits). Every breach or runtime error is a Status, never a
// crash. A Template is immutable after Parse and safe to render from several threads.
//
// Globals: raise_exception(message), strftime_now(format), namespace(...), dict(...), range(...).
#ifndef LLMRT_TEMPLATE_TEMPLATE_H_
#define LLMRT_TEMPLATE_TEMPLATE_H_

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/template/ast.h"
#include "runtime/template/value.h"

namespace llmrt::jinja {

struct RenderLimits {
  // 1 MiB: a chat prompt is at most a few hundred kB (a 128k-token context is ~500 kB of text);
  // also bounds every intermediate string ('x' * n, join, replace).
  int64_t max_output_bytes = 1 << 20;
  // Iterations of all loops together, plus the items produced by range().
  int64_t max_loop_iterations = 1'000'000;
  // Nested macro calls (recursion).
  int max_call_depth = 64;
};

struct RenderOptions {
  RenderLimits limits;
  // What strftime_now() formats; the local time now when unset. Tests fix it for determinism.
  std::optional<std::tm> now;
};

// A template raised an error through raise_exception(message): the status has this code and
// exactly the template's message. Other render errors are kInvalidArgument (bad data or template
// logic, with the template line) or kResourceExhausted (a RenderLimits limit, named).
inline constexpr absl::StatusCode kTemplateRaisedCode = absl::StatusCode::kFailedPrecondition;
// The template uses a filter, test or str method this interpreter does not have (jinja2's
// random, urlize, wordwrap, xmlattr, ...; see docs/chat-templates.md): a gap of ours, not the
// template's, so llmc's compile-time check refuses it whatever sample it appears in.
inline constexpr absl::StatusCode kTemplateUnsupportedCode = absl::StatusCode::kUnimplemented;

class Template {
 public:
  // Syntax errors give line and column: "template syntax error at line 3, column 7: ...".
  static absl::StatusOr<Template> Parse(std::string_view source);

  // `variables` must be a dict (Value::Object / Value::Dict) with string keys.
  absl::StatusOr<std::string> Render(const Value& variables, const RenderOptions& options) const;

 private:
  explicit Template(std::shared_ptr<const Body> body) : body_(std::move(body)) {}
  std::shared_ptr<const Body> body_;
};

}  // namespace llmrt::jinja

#endif  // LLMRT_TEMPLATE_TEMPLATE_H_
