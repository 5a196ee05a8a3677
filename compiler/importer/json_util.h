// JSON helpers shared by the importer's readers (safetensors headers, config.json,
// generation_config.json, the shard index) and the tokenizer import (compiler/tokenizer).
#ifndef LLMC_COMPILER_IMPORTER_JSON_UTIL_H_
#define LLMC_COMPILER_IMPORTER_JSON_UTIL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llmc::importer_internal {

// nlohmann::json recurses when it copies, dumps or compares values; 1 MB of '[' overflows
// the stack. Real HF files nest 4 levels at most, so anything deeper than this is refused
// before parsing.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text`; errors read "<path>: invalid JSON at line 3, column 5: <parser message>".
absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& path);

// Reads a whole (small) file. NotFound when it does not exist.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

// A value for an error message: its JSON text, cut to 80 characters.
std::string DescribeJson(const nlohmann::json& value);

}  // namespace llmc::importer_internal

#endif  // LLMC_COMPILER_IMPORTER_JSON_UTIL_H_
