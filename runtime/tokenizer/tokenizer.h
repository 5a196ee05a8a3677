// Tokenizer: encodes and decodes text from a plan's TokenizerSpec (no JSON at run time).
//
// Thread-safety: a Tokenizer is immutable after Create(); Encode/Decode may be called from any
// number of threads. A StreamDecoder is per sequence and not thread-safe.
#ifndef LLMRT_TOKENIZER_TOKENIZER_H_
#define LLMRT_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/plan/proto/plan.pb.h"

namespace llmrt {

class Tokenizer {
 public:
  // Fails on a spec the runtime cannot execute (unknown component kind, bad regex, ids out of
  // range), naming the component.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Create(const plan::TokenizerSpec& spec);
  ~Tokenizer();

  // Like HF tokenizers' `Tokenizer.encode(text, add_special_tokens).ids`: added tokens split out
  // first, then normalizers, pre-tokenizers, BPE, and the post_template only when
  // add_special_tokens. Bytes that are not valid UTF-8 are read as U+FFFD (HF accepts only
  // valid strings). tokenizer_config.json's add_bos_token is not applied here; the template is.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = true) const;
  // Like HF `tokenizer.decode(ids, skip_special_tokens=...)`; invalid UTF-8 becomes U+FFFD.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // Decode(ids) before invalid UTF-8 becomes U+FFFD: a byte-fallback token <0xE2> alone is the
  // byte 0xE2, a byte-level piece of an emoji its bytes (OpenAI logprobs' "bytes", from which
  // clients rebuild characters split across tokens). Special tokens are kept.
  std::string DecodeBytes(const std::vector<int32_t>& ids) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1: none
  int32_t eos_id() const;  // -1: none
  bool IsSpecial(int32_t id) const;
  // The vocabulary entry of `id` as stored (e.g. "\xe2\x96\x81the", "<0x0A>"); empty when out of
  // range. The reference lives as long as the Tokenizer.
  const std::string& Piece(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenization for streaming: Push() returns the text that became final with
// this token, always whole UTF-8 characters; a character split across tokens is held back
// until complete. Finish() flushes what is left (invalid bytes become U+FFFD). The
// concatenation of all returned pieces equals Tokenizer::Decode(ids, skip_special_tokens) of all
// pushed ids, including the start-of-text rules (Strip after Fuse strips only at the very start;
// Metaspace drops only the first token's marker), which HF's own DecodeStream gets wrong.
// Text is held back while the last token is a byte-fallback byte `<0xAB>` (HF decodes a run of
// them as a whole, all U+FFFD if invalid, so a later byte can change earlier text) or while the
// text ends in U+FFFD. Each Push re-decodes only the ids since the last safe point (usually one).
// A prompt that ends inside a character: the part of that character's bytes already in the
// prompt is re-emitted once the character completes.
class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder. `prompt_ids` gives context (e.g. so a leading-space
  // strip applies only at the very start of the text); their text is not returned.
  StreamDecoder(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_ids,
                bool skip_special_tokens = true);
  std::string Push(int32_t id);
  std::string Finish();

 private:
  std::string DecodeWindow() const;

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  // Ids whose text may still change, re-decoded on every Push (usually one or two tokens).
  std::vector<int32_t> window_;
  size_t emitted_in_window_ = 0;  // bytes of DecodeWindow() already returned
  bool window_at_text_start_ = true;
};

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_TOKENIZER_H_
