// The runtime's defences against hostile models and requests, outside the HTTP server:
//   - prefix-cache hashes keyed per process (vLLM's predictable-hash advisory): a client who
//     can predict hashes can aim a prompt at another user's cached blocks;
//   - the chat-template sandbox (CVE-2024-34359: a model's chat template ran code): no access
//     beyond the data given, and bounded work for loops, recursion, strings and lists;
//   - vocabularies with huge ids and counts in the plan's TokenizerSpec (CVE-2025-49847:
//     llama.cpp overflowed while loading a vocabulary) give errors, never overflows.
#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/kv/block_pool.h"
#include "runtime/template/chat.h"
#include "runtime/template/template.h"
#include "runtime/template/test_json.h"
#include "runtime/tokenizer/tokenizer.h"
#include "tests/e2e/test_util.h"

namespace llmrt {
namespace {

using ::llmc::testing::RunCommand;
using ::llmc::testing::ToolPath;

// ---- Prefix-cache hashes ----

TEST(PrefixCacheKeyTest, TwoPoolsHashTheSameBlockDifferently) {
  const kv::BlockPool first(4, 16);
  const kv::BlockPool second(4, 16);
  const std::vector<int32_t> tokens(16, 7);
  EXPECT_NE(first.key(), second.key());
  EXPECT_NE(kv::HashBlock(first.key(), 0, tokens), kv::HashBlock(second.key(), 0, tokens));
  // Not the unkeyed hash either.
  EXPECT_NE(kv::HashBlock(first.key(), 0, tokens), kv::HashBlock({0, 0}, 0, tokens));
}

TEST(PrefixCacheKeyTest, FreshProcessesHashTheSameBlockDifferently) {
  // A per-process key drawn from a fixed seed would pass the test above and fail this one.
  const std::string probe = ToolPath("llmrt_fault_prefix_key_probe");
  const auto first = RunCommand(probe);
  const auto second = RunCommand(probe);
  ASSERT_EQ(first.exit_code, 0) << first.error;
  ASSERT_EQ(second.exit_code, 0) << second.error;
  ASSERT_EQ(first.output.size(), 17u) << first.output;
  EXPECT_NE(first.output, second.output);
}

// ---- Template sandbox ----

std::string SandboxReferencePath() {
  return ::llmc::testing::SourcePath("tests/fault/sandbox_reference.json");
}

absl::StatusOr<std::string> RenderWithMessages(const std::string& source,
                                               const jinja::RenderLimits& limits) {
  absl::StatusOr<jinja::Template> parsed = jinja::Template::Parse(source);
  if (!parsed.ok()) return parsed.status();
  jinja::ChatOptions options;
  options.render.limits = limits;
  return jinja::RenderChat(*parsed, {{"user", jinja::Value::String("hello")}}, options);
}

// Each payload of make_sandbox_reference.py: our output is jinja2's sandboxed output, or an
// error where jinja2's sandbox raised (we may refuse more, never allow more), and no payload
// creates the marker file.
TEST(TemplateSandboxTest, InjectionPayloadsGetNoFurtherThanJinja2Sandbox) {
  const nlohmann::ordered_json reference = jinja::ReadJsonFile(SandboxReferencePath());
  const std::string marker = reference["marker"].get<std::string>();
  ::unlink(marker.c_str());
  ASSERT_GE(reference["cases"].size(), 25u);
  for (const auto& test_case : reference["cases"]) {
    const std::string name = test_case["name"].get<std::string>();
    SCOPED_TRACE(name);
    const absl::StatusOr<std::string> rendered =
        RenderWithMessages(test_case["template"].get<std::string>(), jinja::RenderLimits());
    if (test_case.contains("error")) {
      EXPECT_FALSE(rendered.ok()) << "rendered '" << *rendered << "' where jinja2's sandbox "
                                  << "raised " << test_case["error"].get<std::string>();
    } else if (rendered.ok()) {
      EXPECT_EQ(*rendered, test_case["output"].get<std::string>());
    }
    if (rendered.ok()) {
      EXPECT_FALSE(absl::StrContains(*rendered, "__")) << *rendered;
      EXPECT_FALSE(absl::StrContains(*rendered, "root:")) << *rendered;
    }
    struct stat marker_stat;
    EXPECT_NE(::stat(marker.c_str(), &marker_stat), 0) << name << " created " << marker;
  }
}

// Work a template can ask for: every case ends with kResourceExhausted (or a plain error),
// quickly and within the limits' memory, where jinja2 itself would run out of memory or time.
struct BoundedWorkCase {
  const char* name;
  std::string source;
};

std::string Repeat(const std::string& text, int count) {
  std::string out;
  for (int i = 0; i < count; ++i) out += text;
  return out;
}

const BoundedWorkCase kBoundedWorkCases[] = {
    {"string_repeat", "{{ 'a' * 100000000 }}"},
    {"string_repeat_overflow", "{{ 'ab' * 9223372036854775807 }}"},
    {"string_doubling",
     "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
     "{% endfor %}{{ ns.s|length }}"},
    {"list_doubling",
     "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
     "{% endfor %}{{ ns.l|length }}"},
    {"list_repeat", "{{ ([0] * 1000000000)|length }}"},
    {"empty_string_repeat", "{{ '' * 9223372036854775807 }}"},
    {"empty_list_repeat", "{{ ([] * 9223372036854775807)|length }}"},
    {"list_join_doubling",
     "{% set ns = namespace(l=['xxxxxxxx']) %}{% for i in range(64) %}"
     "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|join(',') }}"},
    {"huge_range", "{{ range(1000000000000)|list|length }}"},
    {"nested_loops",
     "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}"},
    {"recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"},
    {"mutual_recursion",
     "{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"},
    {"replace_growth",
     "{% set ns = namespace(s='a') %}{% for i in range(64) %}"
     "{% set ns.s = ns.s|replace('a', 'aa') %}{% endfor %}{{ ns.s|length }}"},
    {"join_growth", "{{ range(100000)|join('x' * 100000) }}"},
    {"center_width", "{{ 'x'|center(2000000000) }}"},
    {"indent_width", "{{ 'x\ny'|indent(2000000000) }}"},
    {"format_width", "{{ '%2000000000d'|format(1) }}"},
    {"tojson_indent", "{{ messages|tojson(indent=2000000000) }}"},
    {"power", "{{ 2 ** 9223372036854775807 }}"},
    {"power_of_one", "{{ (1 ** 9223372036854775807) ~ ('x' * 10000000) }}"},
    {"int_overflow", "{{ 9223372036854775807 + 1 }}"},
    {"deep_parentheses", "{{ " + Repeat("(", 100000) + "1" + Repeat(")", 100000) + " }}"},
    {"deep_lists", "{{ " + Repeat("[", 100000) + Repeat("]", 100000) + " }}"},
    {"deep_ifs", Repeat("{% if true %}", 20000) + Repeat("{% endif %}", 20000)},
};

class TemplateBoundedWorkTest : public ::testing::TestWithParam<BoundedWorkCase> {};

TEST_P(TemplateBoundedWorkTest, EndsWithinTheLimits) {
  const jinja::RenderLimits limits;  // the defaults the server and CLI use
  const absl::StatusOr<std::string> rendered = RenderWithMessages(GetParam().source, limits);
  if (rendered.ok()) {
    EXPECT_LE(static_cast<int64_t>(rendered->size()), limits.max_output_bytes);
  } else {
    EXPECT_TRUE(rendered.status().code() == absl::StatusCode::kResourceExhausted ||
                rendered.status().code() == absl::StatusCode::kInvalidArgument)
        << rendered.status();
  }
}

INSTANTIATE_TEST_SUITE_P(Payloads, TemplateBoundedWorkTest, ::testing::ValuesIn(kBoundedWorkCases),
                         [](const ::testing::TestParamInfo<BoundedWorkCase>& info) {
                           return std::string(info.param.name);
                         });

// ---- Vocabularies in the plan ----

plan::TokenizerSpec SmallSpec() {
  plan::TokenizerSpec spec;
  spec.set_model(plan::TokenizerSpec::BPE);
  for (const char* piece : {"<unk>", "a", "b", "ab"}) spec.add_pieces(piece);
  auto* merge = spec.add_merges();
  merge->set_left(1);
  merge->set_right(2);
  merge->set_result(3);
  spec.set_unk_id(0);
  spec.set_bos_id(-1);
  spec.set_eos_id(-1);
  return spec;
}

TEST(VocabularyOverflowTest, SmallSpecWorks) {
  auto tokenizer = Tokenizer::Create(SmallSpec());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Encode("ab", false), std::vector<int32_t>({3}));
}

// Every id a TokenizerSpec carries is checked against the vocabulary before it indexes
// anything: INT32_MAX, INT32_MIN and the first id past the end.
TEST(VocabularyOverflowTest, OutOfRangeIdsAreErrors) {
  for (int32_t bad : {INT32_MAX, INT32_MIN, 4, -2}) {
    SCOPED_TRACE(bad);
    {
      plan::TokenizerSpec spec = SmallSpec();
      spec.mutable_merges(0)->set_result(bad);
      EXPECT_FALSE(Tokenizer::Create(spec).ok());
      spec = SmallSpec();
      spec.mutable_merges(0)->set_left(bad);
      EXPECT_FALSE(Tokenizer::Create(spec).ok());
    }
    {
      plan::TokenizerSpec spec = SmallSpec();
      auto* added = spec.add_added_tokens();
      added->set_id(bad);
      added->set_content("<x>");
      EXPECT_FALSE(Tokenizer::Create(spec).ok());
    }
    {
      plan::TokenizerSpec spec = SmallSpec();
      spec.add_post_template()->add_special_ids(bad);
      EXPECT_FALSE(Tokenizer::Create(spec).ok());
    }
    if (bad >= 4) {
      plan::TokenizerSpec spec = SmallSpec();
      spec.set_unk_id(bad);
      EXPECT_FALSE(Tokenizer::Create(spec).ok());
    }
  }
}

// bos/eos ids outside the vocabulary (they are not checked at Create: a plan may name none)
// and hostile decoder counts must not index outside anything when decoding.
TEST(VocabularyOverflowTest, HugeIdsAndCountsDecodeSafely) {
  plan::TokenizerSpec spec = SmallSpec();
  spec.set_bos_id(INT32_MAX);
  spec.set_eos_id(INT32_MIN);
  auto* strip = spec.add_decoders();
  strip->set_kind(plan::TokenizerSpec::Decoder::STRIP);
  strip->set_content(" ");
  strip->set_strip_start(INT32_MAX);
  strip->set_strip_stop(INT32_MAX);
  auto tokenizer = Tokenizer::Create(spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Decode({INT32_MAX, INT32_MIN, -1, 4, 3}, false), "ab");
  EXPECT_EQ((*tokenizer)->Decode({(*tokenizer)->bos_id(), (*tokenizer)->eos_id()}, false), "");
}

// A piece of 16 MiB and a vocabulary of 2^20 pieces: large but legal; loading and using them
// costs memory proportional to their size, nothing more.
TEST(VocabularyOverflowTest, HugePiecesAndCountsLoad) {
  plan::TokenizerSpec spec = SmallSpec();
  spec.add_pieces(std::string(16 << 20, 'x'));
  for (int32_t id = 5; id < (1 << 20); ++id) spec.add_pieces(absl::StrCat("p", id));
  auto tokenizer = Tokenizer::Create(spec);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->Decode({4}, false).size(), size_t{16} << 20);
  EXPECT_EQ((*tokenizer)->Decode({(1 << 20) - 1}, false), absl::StrCat("p", (1 << 20) - 1));
}

}  // namespace
}  // namespace llmrt
