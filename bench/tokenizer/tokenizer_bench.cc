// Encoding and decoding throughput of the runtime tokenizer on English prose, per core (one
// thread). The goal is >= 5 MB/s of prose per core for encoding (issue 3).
//
//   build-*/bin/tokenizer_bench [--benchmark_filter=Encode]
//
// The prose is generated here with a fixed seed: sentences of common English words drawn with a
// Zipf-like law (word frequencies in real text follow one, which is what makes word caches pay
// off, for HF and for us), with capitals, punctuation, digits and paragraph breaks; 1 MiB.
#include <cctype>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "benchmark/benchmark.h"
#include "compiler/tokenizer/import_tokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace {

constexpr const char* kWords[] = {"the",
                                  "of",
                                  "and",
                                  "to",
                                  "a",
                                  "in",
                                  "is",
                                  "it",
                                  "you",
                                  "that",
                                  "he",
                                  "was",
                                  "for",
                                  "on",
                                  "are",
                                  "with",
                                  "as",
                                  "I",
                                  "his",
                                  "they",
                                  "be",
                                  "at",
                                  "one",
                                  "have",
                                  "this",
                                  "from",
                                  "or",
                                  "had",
                                  "by",
                                  "not",
                                  "word",
                                  "but",
                                  "what",
                                  "some",
                                  "we",
                                  "can",
                                  "out",
                                  "other",
                                  "were",
                                  "all",
                                  "there",
                                  "when",
                                  "up",
                                  "use",
                                  "your",
                                  "how",
                                  "said",
                                  "an",
                                  "each",
                                  "she",
                                  "which",
                                  "do",
                                  "their",
                                  "time",
                                  "if",
                                  "will",
                                  "way",
                                  "about",
                                  "many",
                                  "then",
                                  "them",
                                  "write",
                                  "would",
                                  "like",
                                  "so",
                                  "these",
                                  "her",
                                  "long",
                                  "make",
                                  "thing",
                                  "see",
                                  "him",
                                  "two",
                                  "has",
                                  "look",
                                  "more",
                                  "day",
                                  "could",
                                  "go",
                                  "come",
                                  "did",
                                  "number",
                                  "sound",
                                  "no",
                                  "most",
                                  "people",
                                  "my",
                                  "over",
                                  "know",
                                  "water",
                                  "than",
                                  "call",
                                  "first",
                                  "who",
                                  "may",
                                  "down",
                                  "side",
                                  "been",
                                  "now",
                                  "find",
                                  "any",
                                  "new",
                                  "work",
                                  "part",
                                  "take",
                                  "get",
                                  "place",
                                  "made",
                                  "live",
                                  "where",
                                  "after",
                                  "back",
                                  "little",
                                  "only",
                                  "round",
                                  "man",
                                  "year",
                                  "came",
                                  "show",
                                  "every",
                                  "good",
                                  "me",
                                  "give",
                                  "our",
                                  "under",
                                  "name",
                                  "very",
                                  "through",
                                  "just",
                                  "form",
                                  "sentence",
                                  "great",
                                  "think",
                                  "say",
                                  "help",
                                  "low",
                                  "line",
                                  "differ",
                                  "turn",
                                  "cause",
                                  "much",
                                  "mean",
                                  "before",
                                  "move",
                                  "right",
                                  "boy",
                                  "old",
                                  "too",
                                  "same",
                                  "tell",
                                  "does",
                                  "set",
                                  "three",
                                  "want",
                                  "air",
                                  "well",
                                  "also",
                                  "play",
                                  "small",
                                  "end",
                                  "put",
                                  "home",
                                  "read",
                                  "hand",
                                  "port",
                                  "large",
                                  "spell",
                                  "add",
                                  "even",
                                  "land",
                                  "here",
                                  "must",
                                  "big",
                                  "high",
                                  "such",
                                  "follow",
                                  "act",
                                  "why",
                                  "ask",
                                  "men",
                                  "change",
                                  "went",
                                  "light",
                                  "kind",
                                  "off",
                                  "need",
                                  "house",
                                  "picture",
                                  "try",
                                  "us",
                                  "again",
                                  "animal",
                                  "point",
                                  "mother",
                                  "world",
                                  "near",
                                  "build",
                                  "self",
                                  "earth",
                                  "father",
                                  "head",
                                  "stand",
                                  "own",
                                  "page",
                                  "should",
                                  "country",
                                  "found",
                                  "answer",
                                  "school",
                                  "grow",
                                  "study",
                                  "still",
                                  "learn",
                                  "plant",
                                  "cover",
                                  "food",
                                  "sun",
                                  "four",
                                  "between",
                                  "state",
                                  "keep",
                                  "eye",
                                  "never",
                                  "last",
                                  "let",
                                  "thought",
                                  "city",
                                  "tree",
                                  "cross",
                                  "farm",
                                  "hard",
                                  "start",
                                  "might",
                                  "story",
                                  "saw",
                                  "far",
                                  "sea",
                                  "draw",
                                  "left",
                                  "late",
                                  "run",
                                  "don't",
                                  "while",
                                  "press",
                                  "close",
                                  "night",
                                  "real",
                                  "life",
                                  "few",
                                  "north",
                                  "open",
                                  "seem",
                                  "together",
                                  "next",
                                  "white",
                                  "children",
                                  "begin",
                                  "got",
                                  "walk",
                                  "example",
                                  "ease",
                                  "paper",
                                  "group",
                                  "always",
                                  "music",
                                  "those",
                                  "both",
                                  "mark",
                                  "often",
                                  "letter",
                                  "until",
                                  "mile",
                                  "river",
                                  "car",
                                  "feet",
                                  "care",
                                  "second",
                                  "book",
                                  "carry",
                                  "took",
                                  "science",
                                  "eat",
                                  "room",
                                  "friend",
                                  "began",
                                  "idea",
                                  "fish",
                                  "mountain",
                                  "stop",
                                  "once",
                                  "base",
                                  "hear",
                                  "horse",
                                  "cut",
                                  "sure",
                                  "watch",
                                  "color",
                                  "face",
                                  "wood",
                                  "main",
                                  "enough",
                                  "plain",
                                  "girl",
                                  "usual",
                                  "young",
                                  "ready",
                                  "above",
                                  "ever",
                                  "red",
                                  "list",
                                  "though",
                                  "feel",
                                  "talk",
                                  "bird",
                                  "soon",
                                  "body",
                                  "dog",
                                  "family",
                                  "direct",
                                  "pose",
                                  "leave",
                                  "song",
                                  "measure",
                                  "door",
                                  "product",
                                  "black",
                                  "short",
                                  "numeral",
                                  "class",
                                  "wind",
                                  "question",
                                  "happen",
                                  "complete",
                                  "ship",
                                  "area",
                                  "half",
                                  "rock",
                                  "order",
                                  "fire",
                                  "south",
                                  "problem",
                                  "piece",
                                  "told",
                                  "knew",
                                  "pass",
                                  "since",
                                  "top",
                                  "whole",
                                  "king",
                                  "space",
                                  "heard",
                                  "best",
                                  "hour",
                                  "better",
                                  "true",
                                  "during",
                                  "hundred",
                                  "five",
                                  "remember",
                                  "step",
                                  "early",
                                  "hold",
                                  "west",
                                  "ground",
                                  "interest",
                                  "reach",
                                  "fast",
                                  "verb",
                                  "sing",
                                  "listen",
                                  "six",
                                  "table",
                                  "travel",
                                  "less",
                                  "morning",
                                  "ten",
                                  "simple",
                                  "several",
                                  "vowel",
                                  "toward",
                                  "war",
                                  "lay",
                                  "against",
                                  "pattern",
                                  "slow",
                                  "center",
                                  "love",
                                  "person",
                                  "money",
                                  "serve",
                                  "appear",
                                  "road",
                                  "map",
                                  "rain",
                                  "rule",
                                  "govern",
                                  "pull",
                                  "cold",
                                  "notice",
                                  "voice",
                                  "unit",
                                  "power",
                                  "town",
                                  "fine",
                                  "certain",
                                  "fly",
                                  "fall",
                                  "lead",
                                  "cry",
                                  "dark",
                                  "machine",
                                  "note",
                                  "wait",
                                  "plan",
                                  "figure",
                                  "star",
                                  "box",
                                  "noun",
                                  "field",
                                  "rest",
                                  "correct",
                                  "able",
                                  "pound",
                                  "done",
                                  "beauty",
                                  "drive",
                                  "stood",
                                  "contain",
                                  "front",
                                  "teach",
                                  "week",
                                  "final",
                                  "gave",
                                  "green",
                                  "oh",
                                  "quick",
                                  "develop",
                                  "ocean",
                                  "warm",
                                  "free",
                                  "minute",
                                  "strong",
                                  "special",
                                  "mind",
                                  "behind",
                                  "clear",
                                  "tail",
                                  "produce",
                                  "fact",
                                  "street",
                                  "inch",
                                  "multiply",
                                  "nothing",
                                  "course",
                                  "stay",
                                  "wheel",
                                  "full",
                                  "force",
                                  "blue",
                                  "object",
                                  "decide",
                                  "surface",
                                  "deep",
                                  "moon",
                                  "island",
                                  "foot",
                                  "system",
                                  "busy",
                                  "test",
                                  "record",
                                  "boat",
                                  "common",
                                  "gold",
                                  "possible",
                                  "plane",
                                  "stead",
                                  "dry",
                                  "wonder",
                                  "laugh",
                                  "thousand",
                                  "ago",
                                  "ran",
                                  "check",
                                  "game",
                                  "shape",
                                  "equate",
                                  "hot",
                                  "miss",
                                  "brought",
                                  "heat",
                                  "snow",
                                  "tire",
                                  "bring",
                                  "yes",
                                  "distant",
                                  "fill",
                                  "east",
                                  "paint",
                                  "language",
                                  "among",
                                  "Lily",
                                  "Tom",
                                  "Timmy",
                                  "wonderful",
                                  "extraordinary",
                                  "unbelievably",
                                  "responsibility",
                                  "internationalization"};

std::string MakeProse(size_t bytes) {
  std::mt19937 rng(20261121);
  const size_t word_count = sizeof(kWords) / sizeof(kWords[0]);
  // Zipf: P(rank r) ~ 1 / (r + 1).
  std::vector<double> weights(word_count);
  for (size_t rank = 0; rank < word_count; ++rank) weights[rank] = 1.0 / (rank + 1.0);
  std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
  std::uniform_int_distribution<int> percent(0, 99);
  std::string text;
  bool sentence_start = true;
  while (text.size() < bytes) {
    std::string word = kWords[pick(rng)];
    if (sentence_start) word[0] = static_cast<char>(std::toupper(word[0]));
    sentence_start = false;
    text += word;
    const int roll = percent(rng);
    if (roll < 7) {
      text += ". ";
      sentence_start = true;
    } else if (roll < 10) {
      text += ", ";
    } else if (roll < 11) {
      text += " " + std::to_string(rng() % 2000) + " ";
    } else if (roll < 12) {
      text += ".\n\n";
      sentence_start = true;
    } else {
      text += ' ';
    }
  }
  return text;
}

const std::string& Prose() {
  static const std::string* prose = new std::string(MakeProse(1 << 20));
  return *prose;
}

std::unique_ptr<llmrt::Tokenizer> Load(const std::string& dir, std::string* error) {
  auto spec = llmc::ImportTokenizer(dir);
  if (!spec.ok()) {
    *error = std::string(spec.status().message());
    return nullptr;
  }
  auto tokenizer = llmrt::Tokenizer::Create(*spec);
  if (!tokenizer.ok()) {
    *error = std::string(tokenizer.status().message());
    return nullptr;
  }
  return std::move(*tokenizer);
}

std::string Dir(const std::string& name) {
  if (name == "stories260K") return LLMRT_SOURCE_DIR "/tests/data/stories260K";
  return std::string(LLMRT_SHARED_TOKENIZERS_DIR) + "/" + name;
}

// One tokenizer per name, loaded once for all benchmarks.
llmrt::Tokenizer* Get(const std::string& name, std::string* error) {
  static auto* loaded = new std::vector<std::pair<std::string, std::unique_ptr<llmrt::Tokenizer>>>;
  for (auto& [loaded_name, tokenizer] : *loaded) {
    if (loaded_name == name) return tokenizer.get();
  }
  auto tokenizer = Load(Dir(name), error);
  if (tokenizer == nullptr) return nullptr;
  loaded->emplace_back(name, std::move(tokenizer));
  return loaded->back().second.get();
}

void BM_EncodeProse(benchmark::State& state, const std::string& name) {
  std::string error;
  llmrt::Tokenizer* tokenizer = Get(name, &error);
  if (tokenizer == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string& prose = Prose();
  size_t tokens = 0;
  for (auto _ : state) {
    std::vector<int32_t> ids = tokenizer->Encode(prose, /*add_special_tokens=*/false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose.size()));
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes_per_token"] = static_cast<double>(prose.size()) / tokens;
}

void BM_DecodeProse(benchmark::State& state, const std::string& name) {
  std::string error;
  llmrt::Tokenizer* tokenizer = Get(name, &error);
  if (tokenizer == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::vector<int32_t> ids = tokenizer->Encode(Prose(), false);
  for (auto _ : state) {
    std::string text = tokenizer->Decode(ids, /*skip_special_tokens=*/false);
    benchmark::DoNotOptimize(text.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Prose().size()));
}

BENCHMARK_CAPTURE(BM_EncodeProse, stories260K, std::string("stories260K"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeProse, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeProse, qwen2, std::string("qwen2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeProse, llama3, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_EncodeProse, tinyllama, std::string("tinyllama"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeProse, stories260K, std::string("stories260K"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_DecodeProse, gpt2, std::string("gpt2"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
