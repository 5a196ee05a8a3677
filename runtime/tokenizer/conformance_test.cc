// Conformance of the whole tokenizer path (llmc's importers, the plan's TokenizerSpec, the
// runtime's Encode/Decode) against HuggingFace on every real tokenizer in ../shared/tokenizers
// and stories260K: a corpus of 5,300 strings (testdata/conformance/corpus.txt) and the ids and
// decodes that `tokenizers` / `transformers` give for it (testdata/conformance/*.expected, made
// by testdata/conformance/make_conformance.py; the file format is described there).
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/tokenizer/import_tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

using Json = nlohmann::json;

constexpr char kConformanceDir[] = LLMRT_SOURCE_DIR "/runtime/tokenizer/testdata/conformance";
constexpr char kRepoDir[] = LLMRT_SOURCE_DIR;
constexpr char kSharedDir[] = LLMRT_SHARED_TOKENIZERS_DIR;
// Strings longer than this have their ids and decodes stored as hashes (make_conformance.py).
constexpr size_t kLongBytes = 4000;

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

std::string ReadFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields;
  size_t pos = 0;
  while (true) {
    const size_t tab = line.find('\t', pos);
    fields.push_back(line.substr(pos, tab == std::string::npos ? std::string::npos : tab - pos));
    if (tab == std::string::npos) break;
    pos = tab + 1;
  }
  return fields;
}

uint64_t Fnv1a(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string Hex64(uint64_t value) {
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(value));
  return buffer;
}

// The stored form of `ids` for a string of `text_bytes` bytes: 3 base64url digits per id, or
// "#count:hash" for long strings.
std::string PackIds(const std::vector<int32_t>& ids, size_t text_bytes) {
  if (text_bytes > kLongBytes) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (int32_t id : ids) {
      const unsigned char le[4] = {
          static_cast<unsigned char>(id), static_cast<unsigned char>(id >> 8),
          static_cast<unsigned char>(id >> 16), static_cast<unsigned char>(id >> 24)};
      hash = Fnv1a(le, 4, hash);
    }
    return "#" + std::to_string(ids.size()) + ":" + Hex64(hash);
  }
  static constexpr char kDigits[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string packed;
  for (int32_t id : ids) {
    if (id < 0 || id >= (1 << 18)) return "(id out of range " + std::to_string(id) + ")";
    packed += kDigits[id >> 12];
    packed += kDigits[(id >> 6) & 63];
    packed += kDigits[id & 63];
  }
  return packed;
}

std::vector<int32_t> UnpackIds(const std::string& packed) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '-' ? 62 : 63;
  };
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 < packed.size(); i += 3) {
    ids.push_back(value(packed[i]) << 12 | value(packed[i + 1]) << 6 | value(packed[i + 2]));
  }
  return ids;
}

// The stored form of a decoded text: a JSON string, or "#bytes:hash" for long strings.
std::string StoredText(const std::string& decoded, size_t text_bytes) {
  if (text_bytes > kLongBytes) {
    return "#" + std::to_string(decoded.size()) + ":" +
           Hex64(Fnv1a(decoded.data(), decoded.size()));
  }
  return Json(decoded).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Expected(const std::string& field) {
  if (!field.empty() && field[0] == '#') return field;
  return Json(Json::parse(field).get<std::string>())
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Show(const std::string& text) {
  std::string shown =
      Json(text.substr(0, 200)).dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 200 ? shown + "... (" + std::to_string(text.size()) + " bytes)" : shown;
}

std::string IdsText(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size() && i < 64; ++i) text += std::to_string(ids[i]) + " ";
  if (ids.size() > 64) text += "... (" + std::to_string(ids.size()) + " ids)";
  return text;
}

struct Case {
  const char* name;
  // Paths relative to ../shared/tokenizers; "repo:" the repository, "here:" the conformance
  // folder. The same table is in make_conformance.py.
  const char* tokenizer_json;
  const char* vocab_json;
  const char* merges_txt;
  const char* added_tokens_json;
  const char* tokenizer_model;
  const char* tokenizer_config;
};

void PrintTo(const Case& test_case, std::ostream* out) { *out << test_case.name; }

const Case kCases[] = {
    {"stories260k", "repo:tests/data/stories260K/tokenizer.json", "", "", "", "", ""},
    {"phi3", "phi3/tokenizer.json", "", "", "", "", "phi3/tokenizer_config.json"},
    {"gpt2", "", "gpt2/vocab.json", "gpt2/merges.txt", "", "", ""},
    {"qwen2", "", "qwen2/vocab.json", "qwen2/merges.txt", "qwen2/added_tokens.json", "",
     "qwen2/tokenizer_config.json"},
    {"llama3", "", "", "", "", "llama3/tokenizer.model", "llama3/tokenizer_config.json"},
    {"tinyllama", "", "", "", "", "tinyllama/tokenizer.model",
     "tinyllama/llama2_tokenizer_config.json"},
    {"mistral_v0.1", "", "", "", "", "mistral/tokenizer.model",
     "here:mistral_v0.1_tokenizer_config.json"},
    {"mistral_v0.3", "", "", "", "", "mistral/v0.3/tokenizer.model",
     "here:mistral_v0.3_tokenizer_config.json"},
    // Trained by make_conformance.py for the Whitespace pre-tokenizer, RobertaProcessing,
    // BertProcessing, NFKC + Lowercase, unk without byte fallback and no decoder.
    {"whitespace_roberta", "here:whitespace_roberta.json", "", "", "", "", ""},
    {"whitespace_bert", "here:whitespace_bert.json", "", "", "", "", ""},
};

std::string Resolve(const char* spec) {
  const std::string path = spec;
  if (path.empty()) return "";
  if (path.rfind("repo:", 0) == 0) return std::string(kRepoDir) + "/" + path.substr(5);
  if (path.rfind("here:", 0) == 0) return std::string(kConformanceDir) + "/" + path.substr(5);
  return std::string(kSharedDir) + "/" + path;
}

class ConformanceTest : public testing::TestWithParam<Case> {};

TEST_P(ConformanceTest, MatchesHuggingFaceOnCorpus) {
  const Case& test_case = GetParam();
  // CI always has ../shared next to the repository; its absence is a broken setup, not a skip.
  ASSERT_TRUE(Exists(std::string(kSharedDir) + "/README.md"))
      << "the shared tokenizers are missing: expected " << kSharedDir
      << "/README.md (../shared/tokenizers next to the repository root)";
  llmc::TokenizerFiles files;
  files.tokenizer_json = Resolve(test_case.tokenizer_json);
  files.vocab_json = Resolve(test_case.vocab_json);
  files.merges_txt = Resolve(test_case.merges_txt);
  files.added_tokens_json = Resolve(test_case.added_tokens_json);
  files.tokenizer_model = Resolve(test_case.tokenizer_model);
  files.tokenizer_config_json = Resolve(test_case.tokenizer_config);
  for (const std::string* path :
       {&files.tokenizer_json, &files.vocab_json, &files.merges_txt, &files.added_tokens_json,
        &files.tokenizer_model, &files.tokenizer_config_json}) {
    ASSERT_TRUE(path->empty() || Exists(*path)) << "missing tokenizer file " << *path;
  }
  auto spec = llmc::ImportTokenizerFiles(files);
  ASSERT_TRUE(spec.ok()) << spec.status();
  // Through the wire format, as a plan carries it.
  plan::TokenizerSpec parsed;
  ASSERT_TRUE(parsed.ParseFromString(spec->SerializeAsString()));
  auto tokenizer_or = Tokenizer::Create(parsed);
  ASSERT_TRUE(tokenizer_or.ok()) << tokenizer_or.status();
  const Tokenizer& tokenizer = **tokenizer_or;

  const std::vector<std::string> corpus_lines =
      Lines(ReadFile(std::string(kConformanceDir) + "/corpus.txt"));
  const std::vector<std::string> lines =
      Lines(ReadFile(std::string(kConformanceDir) + "/" + test_case.name + ".expected"));
  ASSERT_GE(corpus_lines.size(), 5000u);
  ASSERT_FALSE(lines.empty());
  const Json header = Json::parse(lines[0]);
  // The real tokenizers cover the whole corpus, the small trained ones its first 1,000 strings.
  const size_t strings = header["strings"].get<size_t>();
  ASSERT_LE(strings, corpus_lines.size());
  ASSERT_GT(lines.size(), strings + 1);
  const std::vector<int32_t> prefix = header["prefix"].get<std::vector<int32_t>>();
  const std::vector<int32_t> suffix = header["suffix"].get<std::vector<int32_t>>();
  const std::string decode_prefix = header["decode_prefix"];
  const std::string decode_suffix = header["decode_suffix"];

  int failures = 0;
  constexpr int kMaxReported = 12;
  auto report = [&](const std::string& message) {
    if (++failures <= kMaxReported) ADD_FAILURE() << test_case.name << ": " << message;
  };
  size_t checked = 0;
  for (size_t index = 0; index < strings; ++index) {
    const std::string text = Json::parse(corpus_lines[index]).get<std::string>();
    const std::vector<std::string> fields = Fields(lines[index + 1]);
    ASSERT_EQ(fields.size(), 4u) << "line " << index + 2 << " of " << test_case.name << ".expected";
    const std::vector<int32_t> plain = tokenizer.Encode(text, /*add_special_tokens=*/false);
    const std::vector<int32_t> with_special = tokenizer.Encode(text, /*add_special_tokens=*/true);
    const std::string plain_packed = PackIds(plain, text.size());
    if (plain_packed != fields[0]) {
      report("string " + std::to_string(index) + " " + Show(text) +
             ": ids without special tokens differ\n  ours: " + IdsText(plain) +
             "\n  HF:   " + (fields[0][0] == '#' ? fields[0] : IdsText(UnpackIds(fields[0]))));
      continue;
    }
    std::string expected_special = fields[1];
    if (expected_special.empty()) {
      std::vector<int32_t> expected_ids = prefix;
      expected_ids.insert(expected_ids.end(), plain.begin(), plain.end());
      expected_ids.insert(expected_ids.end(), suffix.begin(), suffix.end());
      expected_special = PackIds(expected_ids, text.size());
    }
    if (PackIds(with_special, text.size()) != expected_special) {
      report("string " + std::to_string(index) + " " + Show(text) +
             ": ids with special tokens differ\n  ours: " + IdsText(with_special));
      continue;
    }
    const std::string skip = tokenizer.Decode(with_special, /*skip_special_tokens=*/true);
    const std::string full = tokenizer.Decode(with_special, /*skip_special_tokens=*/false);
    const std::string expected_skip =
        fields[2].empty() ? StoredText(text, text.size()) : Expected(fields[2]);
    if (StoredText(skip, text.size()) != expected_skip) {
      report("string " + std::to_string(index) + " " + Show(text) +
             ": decode(skip_special_tokens=True) differs\n  ours: " + Show(skip) +
             "\n  HF:   " + expected_skip.substr(0, 200));
      continue;
    }
    const std::string expected_full =
        fields[3].empty() ? StoredText(decode_prefix + skip + decode_suffix, text.size())
                          : Expected(fields[3]);
    if (StoredText(full, text.size()) != expected_full) {
      report("string " + std::to_string(index) + " " + Show(text) +
             ": decode(skip_special_tokens=False) differs\n  ours: " + Show(full) +
             "\n  HF:   " + expected_full.substr(0, 200));
      continue;
    }
    ++checked;
  }
  // Decode-only cases: random ids, byte-fallback runs, special tokens anywhere.
  size_t decode_line = strings + 1;
  ASSERT_EQ(lines[decode_line], "#decode");
  size_t decode_cases = 0;
  for (++decode_line; decode_line < lines.size(); ++decode_line) {
    const std::vector<std::string> fields = Fields(lines[decode_line]);
    ASSERT_EQ(fields.size(), 3u);
    const std::vector<int32_t> ids = UnpackIds(fields[0]);
    ++decode_cases;
    const std::string skip = tokenizer.Decode(ids, true);
    const std::string full = tokenizer.Decode(ids, false);
    if (skip != Json::parse(fields[1]).get<std::string>() ||
        full != Json::parse(fields[2]).get<std::string>()) {
      report("decode of " + IdsText(ids) + "differs\n  ours: " + Show(full) + " / " + Show(skip) +
             "\n  HF:   " + fields[2] + " / " + fields[1]);
    }
  }
  EXPECT_EQ(failures, 0) << test_case.name << ": " << failures << " mismatches ("
                         << (failures > kMaxReported ? "first " : "") << "reported above)";
  EXPECT_GE(decode_cases, 100u);
  std::fprintf(stderr, "%s: %zu of %zu strings identical to HF, %zu decode cases\n", test_case.name,
               checked, strings, decode_cases);
}

INSTANTIATE_TEST_SUITE_P(Shared, ConformanceTest, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.name;
                           for (char& c : name) {
                             if (c == '.') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace llmrt
