// `llmrt eval` and `llmrt perplexity`: what a plan computes, for comparing plans with each other
// and with other implementations (eval.cc, perplexity.cc).
#ifndef LLMRT_TOOLS_LLMRT_EVAL_H_
#define LLMRT_TOOLS_LLMRT_EVAL_H_

namespace llmrt {

// `llmrt eval PLAN --tokens FILE --logits-out OUT`: the logits of every position of the token
// ids in FILE, as raw float32 [num_tokens, vocab]. argv[1] is "eval"; returns the process exit
// status (0, 1 error, 2 usage error).
int Eval(int argc, char** argv);

// `llmrt perplexity PLAN TEXT_FILE [--ctx N] [--kl-base FILE] [--save-logits FILE]`: perplexity
// over windows of the text, and KL / top-1 agreement against a base plan's saved logits.
// argv[1] is "perplexity"; returns the process exit status (0, 1 error, 2 usage error).
int Perplexity(int argc, char** argv);

}  // namespace llmrt

#endif  // LLMRT_TOOLS_LLMRT_EVAL_H_
