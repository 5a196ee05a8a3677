#include "tools/llmrt/tokenize.h"

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "runtime/plan/plan_reader.h"
#include "runtime/tokenizer/tokenizer.h"

namespace llmrt {
namespace {

constexpr char kTokenizeUsage[] =
    "usage: llmrt tokenize PLAN TEXT [--special] [--ids-only]\n"
    "  TEXT: the text to encode; \"-\" reads it from stdin\n"
    "  --special: add the special tokens of the tokenizer's template (BOS ...), as HF's\n"
    "             add_special_tokens=True\n"
    "  --ids-only: print just the ids, space-separated, on one line\n"
    "  Otherwise one line per token: the id, a tab, and the piece as stored in the vocabulary\n"
    "  (quoted; control characters, quotes and backslashes escaped).\n";

int UsageError(const std::string& message) {
  std::fprintf(stderr, "llmrt tokenize: %s\n%s", message.c_str(), kTokenizeUsage);
  return 2;
}

std::string Quoted(const std::string& piece) {
  std::string out = "\"";
  for (unsigned char c : piece) {
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += absl::StrFormat("\\x%02x", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

}  // namespace

int Tokenize(int argc, char** argv) {
  std::vector<std::string> positional;
  bool special = false;
  bool ids_only = false;
  for (int index = 2; index < argc; ++index) {
    const std::string argument = argv[index];
    if (argument == "--special") {
      special = true;
    } else if (argument == "--ids-only") {
      ids_only = true;
    } else if (argument == "-h" || argument == "--help") {
      std::fputs(kTokenizeUsage, stdout);
      return 0;
    } else if (argument.size() > 1 && argument[0] == '-' && argument != "-") {
      return UsageError("unknown flag " + argument);
    } else {
      positional.push_back(argument);
    }
  }
  if (positional.size() != 2) {
    return UsageError(positional.empty()       ? "missing the plan file"
                      : positional.size() == 1 ? "missing the text"
                                               : "too many arguments");
  }
  std::string text = positional[1];
  if (text == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  auto plan = plan::Plan::Open(positional[0], {});
  if (!plan.ok()) {
    std::fprintf(stderr, "llmrt tokenize: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }
  auto tokenizer = Tokenizer::Create((*plan)->meta().tokenizer());
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "llmrt tokenize: %s: %s\n", positional[0].c_str(),
                 std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text, special);
  std::string out;
  if (ids_only) {
    for (size_t index = 0; index < ids.size(); ++index) {
      if (index > 0) out += ' ';
      out += std::to_string(ids[index]);
    }
    out += '\n';
  } else {
    for (int32_t id : ids) {
      out += absl::StrFormat("%d\t%s\n", id, Quoted((*tokenizer)->Piece(id)));
    }
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace llmrt
