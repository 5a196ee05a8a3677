// A synthetic Llama-style (SentencePiece-converted) BPE tokenizer of any vocabulary size >= 259.
//
// Layout of the vocabulary, as in Llama-2 / TinyLlama tokenizers:
//   0 <unk>, 1 <s>, 2 </s>                special tokens
//   3 ... 258  <0x00> ... <0xFF>          byte fallback: every string encodes
//   259 ...    "▁" and printable ASCII    one piece per character
//   then       merges                     pair (a, b) of earlier pieces -> piece a+b
// Merges are enumerated deterministically: for k = 0, 1, 2, ... every pair of pieces whose
// larger index is k, (i, k) then (k, i), skipping concatenations already in the vocabulary,
// until the vocabulary is full. For vocab 32000 that gives pieces of up to 4 characters.
//
// The JSON is what transformers' LlamaTokenizerFast saves (normalizer: strip edges, squeeze
// spaces, prepend "▁", spaces -> "▁"; no pre-tokenizer; TemplateProcessing adding <s>; decoder
// ▁ -> space, ByteFallback, Fuse, Strip one leading space), so our importer, HF tokenizers and
// llama.cpp's convert_hf_to_gguf.py (LlamaHfVocab: BPE + byte_fallback + Sequence decoder)
// all accept it.
#ifndef LLMC_COMPILER_SYNTH_SYNTH_TOKENIZER_H_
#define LLMC_COMPILER_SYNTH_SYNTH_TOKENIZER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace llmc {

// 3 special tokens + 256 byte pieces.
inline constexpr int64_t kSynthMinVocab = 259;

// tokenizer.json text with exactly `vocab_size` pieces; an error below kSynthMinVocab.
absl::StatusOr<std::string> SynthTokenizerJson(int64_t vocab_size);
// tokenizer_config.json and special_tokens_map.json as transformers writes them for Llama.
std::string SynthTokenizerConfigJson(int64_t max_positions);
std::string SynthSpecialTokensMapJson();

}  // namespace llmc

#endif  // LLMC_COMPILER_SYNTH_SYNTH_TOKENIZER_H_
