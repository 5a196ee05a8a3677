// The compile-time check of a chat template: render it on sample conversations, so a template
// the runtime cannot render stops llmc instead of failing a user's first chat request.
#ifndef LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_
#define LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// OK when the tokenizer has no template (nothing to check) or when every template it carries
// (the default and each named one) renders, with add_generation_prompt, either
//   - the plain samples: a one-turn and a three-turn conversation without tools, or
//   - the tool samples: tools offered, and a round trip of two tool calls (arguments as a JSON
//     string or as a dict, whichever the template takes), their results and an answer,
// each output containing every user message. So a tool-use template that fails without tools
// (Hermes' tool_use iterates `tools`, command-r's too) compiles, and a plain template that
// refuses tool messages (Gemma raises on the tool role) compiles. A system-message sample and the
// samples the template did not need may fail; but a filter, test or method this interpreter lacks
// (kTemplateUnsupportedCode) fails the check in any sample. Variables beyond transformers' own
// that a template reads without a default (firefunction's `functions`, `datetime`) are caller
// keyword arguments: the check renders with them set to "" (the first 8 it finds). `source`
// names the template's origin in messages (e.g. "tokenizer_config.json" or the
// --chat-template file).
absl::Status CheckChatTemplate(const llmrt::plan::TokenizerSpec& tokenizer,
                               const std::string& source);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_
