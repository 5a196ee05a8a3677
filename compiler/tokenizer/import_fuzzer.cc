// libFuzzer target for tokenizer import: tokenizer.json, vocab.json + merges.txt and
// tokenizer.model (SentencePiece protobuf or tiktoken ranks), each with a tokenizer_config.json;
// whatever imports is then loaded by the runtime and run on a little text. Nothing may crash,
// hang or allocate without bound; errors are fine.
//
// Input: a tokenizer.json as it is (it starts with '{'), optionally followed by NUL, a
// tokenizer_config.json, NUL and text to encode. Otherwise byte 0 picks the importer (mod 3:
// tokenizer.json, vocab.json + merges.txt, tokenizer.model) and the rest is split at NUL bytes
// into that importer's files in order, then the text to encode.
//
//   CC=clang-16 CXX=clang++-16 cmake -S . -B build-fuzz -G Ninja -DLLMRT_BUILD_FUZZERS=ON
//   ninja -C build-fuzz llmc_tokenizer_fuzzer
//   build-fuzz/bin/llmc_tokenizer_fuzzer -max_total_time=60 -rss_limit_mb=2048 \
//     compiler/tokenizer/fuzz_corpus
// (scripts/fuzz.sh builds and runs every fuzzer this way.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/tokenizer/import_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace {

std::vector<std::string_view> SplitAtNul(std::string_view data, size_t parts) {
  std::vector<std::string_view> pieces;
  while (pieces.size() + 1 < parts) {
    const size_t nul = data.find('\0');
    if (nul == std::string_view::npos) break;
    pieces.push_back(data.substr(0, nul));
    data.remove_prefix(nul + 1);
  }
  pieces.push_back(data);
  while (pieces.size() < parts) pieces.push_back({});
  return pieces;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool whole_json = data[0] == '{';
  const std::string_view input(reinterpret_cast<const char*>(data) + (whole_json ? 0 : 1),
                               size - (whole_json ? 0 : 1));
  absl::StatusOr<llmrt::plan::TokenizerSpec> spec;
  std::string_view text;
  switch (whole_json ? 0 : data[0] % 3) {
    case 0: {
      const auto parts = SplitAtNul(input, 3);
      spec = llmc::ImportTokenizerFromJson(parts[0], parts[1]);
      text = parts[2];
      break;
    }
    case 1: {
      const auto parts = SplitAtNul(input, 5);
      spec = llmc::ImportVocabMerges(parts[0], parts[1], parts[2], parts[3]);
      text = parts[4];
      break;
    }
    default: {
      // A SentencePiece model is binary and may hold NUL bytes: the config and text come first.
      const auto parts = SplitAtNul(input, 3);
      spec = llmc::ImportTokenizerModel(parts[2], parts[0]);
      text = parts[1];
      break;
    }
  }
  if (!spec.ok()) return 0;
  auto tokenizer = llmrt::Tokenizer::Create(*spec);
  if (!tokenizer.ok()) return 0;
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text, /*add_special_tokens=*/true);
  (*tokenizer)->Decode(ids, /*skip_special_tokens=*/false);
  (*tokenizer)->Decode(ids, /*skip_special_tokens=*/true);
  return 0;
}
