// Cost of structured output per decode step with the Qwen2 tokenizer (151,665 tokens): the
// allowed-token mask plus advancing the matcher, along a JSON document of a nested schema.
//   cold: a fresh compiled grammar each iteration (the first request with a new schema: every
//         parser state and mask is computed on the way);
//   warm: the grammar already walked once (later requests with the same response_format, and
//         repeated states such as a string's body, hit the per-state mask cache).
// Reported per step (the document is ~60 tokens). Not a timed test; CI runs a smoke run.
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "nlohmann/json.hpp"
#include "runtime/grammar/json_schema.h"
#include "runtime/grammar/matcher.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt::grammar {
namespace {

constexpr char kSchema[] = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
  "born": {"type": "string", "format": "date"},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
  "address": {"type": "object", "properties": {"city": {"type": "string"},
    "zip": {"type": "string", "pattern": "[0-9]{5}"}}, "required": ["city"],
    "additionalProperties": false}},
  "required": ["name", "age"], "additionalProperties": false})";
constexpr char kDocument[] =
    R"({"name": "Ada Lovelace", "age": 36, "born": "1815-12-10", "tags": ["math", )"
    R"("engines", "poetry"], "address": {"city": "London", "zip": "12345"}})";

struct Setup {
  std::shared_ptr<const TokenVocabulary> vocabulary;
  std::string gbnf;
  std::vector<int32_t> ids;
};

const Setup& GetSetup() {
  static const Setup* setup = [] {
    auto* made = new Setup;
    plan::TokenizerSpec spec = *llmc::ImportTokenizer(LLMRT_SHARED_TOKENIZERS_DIR "/qwen2");
    made->vocabulary = *TokenVocabulary::Create(spec, spec.pieces_size());
    made->gbnf = *JsonSchemaToGbnf(nlohmann::ordered_json::parse(kSchema));
    made->ids = (*Tokenizer::Create(spec))->Encode(kDocument, /*add_special_tokens=*/false);
    return made;
  }();
  return *setup;
}

void WalkDocument(const std::shared_ptr<const CompiledGrammar>& compiled,
                  std::vector<uint32_t>& mask) {
  GrammarMatcher matcher(compiled);
  for (int32_t id : GetSetup().ids) {
    if (!matcher.FillNextTokenMask(absl::MakeSpan(mask)).ok() || !matcher.Accept(id).ok()) {
      std::abort();
    }
  }
  benchmark::DoNotOptimize(mask.data());
}

void BM_MaskPerStepCold(benchmark::State& state) {
  const Setup& setup = GetSetup();
  std::vector<uint32_t> mask(sampling::MaskWords(setup.vocabulary->vocab_size()));
  for (auto _ : state) {
    WalkDocument(*CompileGrammar(setup.gbnf, setup.vocabulary), mask);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(setup.ids.size()));
}
BENCHMARK(BM_MaskPerStepCold)->Unit(benchmark::kMillisecond);

void BM_MaskPerStepWarm(benchmark::State& state) {
  const Setup& setup = GetSetup();
  std::vector<uint32_t> mask(sampling::MaskWords(setup.vocabulary->vocab_size()));
  std::shared_ptr<const CompiledGrammar> compiled = *CompileGrammar(setup.gbnf, setup.vocabulary);
  WalkDocument(compiled, mask);
  for (auto _ : state) WalkDocument(compiled, mask);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(setup.ids.size()));
}
BENCHMARK(BM_MaskPerStepWarm)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace llmrt::grammar

BENCHMARK_MAIN();
