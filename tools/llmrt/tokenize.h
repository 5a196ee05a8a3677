// `llmrt tokenize PLAN TEXT [--special] [--ids-only]`: the ids (and pieces) the plan's tokenizer
// gives for TEXT, as HF's tokenizer.encode(TEXT, add_special_tokens=--special) would.
#ifndef LLMRT_TOOLS_LLMRT_TOKENIZE_H_
#define LLMRT_TOOLS_LLMRT_TOKENIZE_H_

namespace llmrt {

// argv[1] is "tokenize"; returns the process exit status (0, 1 error, 2 usage error).
int Tokenize(int argc, char** argv);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_TOKENIZE_H_
