// The compile-time check of a chat template: render it on sample conversations, so a template
// the runtime cannot render stops llmc instead of failing a user's first chat request.
#ifndef LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_
#define LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// OK when the tokenizer has no template (nothing to check) or when the template renders a
// one-turn and a three-turn conversation, each containing every user message. A conversation
// with a system message may be refused by the template's own raise_exception (Gemma refuses
// system messages by design); any other error fails. `source` names the template's origin in
// messages (e.g. "tokenizer_config.json" or the --chat-template file).
absl::Status CheckChatTemplate(const llmrt::plan::TokenizerSpec& tokenizer,
                               const std::string& source);

}  // namespace llmc

#endif  // LLMC_COMPILER_PIPELINE_CHAT_TEMPLATE_CHECK_H_
