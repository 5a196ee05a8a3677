// Compile-time self-check of an imported tokenizer: llmc runs the runtime tokenizer built from
// the spec it is about to write on sample strings, so a tokenizer that would fail or garble text
// at run time stops the compile instead.
#ifndef LLMC_TOKENIZER_SELF_CHECK_H_
#define LLMC_TOKENIZER_SELF_CHECK_H_

#include "absl/status/status.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmc {

// Creates the runtime tokenizer from `spec` and checks, on ASCII prose, digits, code, CJK,
// emoji (ZWJ and skin tones), combining accents and every special token:
//  - encoding gives ids inside the vocabulary, and non-empty ids for non-empty prose;
//  - each special token's text, alone and inside other text, encodes to its id;
//  - decode(encode(text)) gives the text back, where HF's tokenizer would too: only for
//    single-spaced prose when normalizers may change whitespace (stories260K collapses runs of
//    spaces), and not at all for tokenizers that lose characters by design (lowercasing, NFKC,
//    whitespace splitting, unknown tokens without byte fallback).
// An error names the sample string and what went wrong.
absl::Status SelfCheckTokenizer(const llmrt::plan::TokenizerSpec& spec);

}  // namespace llmc

#endif  // LLMC_TOKENIZER_SELF_CHECK_H_
