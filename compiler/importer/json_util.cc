#include "compiler/importer/json_util.h"

#include <errno.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace llmc::importer_internal {
namespace {

struct TextPosition {
  int line = 1;
  int column = 1;
};

TextPosition PositionOf(std::string_view text, size_t offset) {
  TextPosition position;
  for (size_t index = 0; index < offset && index < text.size(); ++index) {
    if (text[index] == '\n') {
      ++position.line;
      position.column = 1;
    } else {
      ++position.column;
    }
  }
  return position;
}

// Offset of the first bracket that opens level kMaxJsonDepth + 1, or npos.
size_t FindTooDeepNesting(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t index = 0; index < text.size(); ++index) {
    const char c = text[index];
    if (in_string) {
      if (c == '\\') {
        ++index;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return index;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace

absl::StatusOr<nlohmann::json> ParseJson(std::string_view text, const std::string& path) {
  const size_t too_deep = FindTooDeepNesting(text);
  if (too_deep != std::string_view::npos) {
    const TextPosition position = PositionOf(text, too_deep);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: invalid JSON at line %d, column %d: nested deeper than %d levels",
                        path, position.line, position.column, kMaxJsonDepth));
  }
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte counts characters read, the offending one included.
    const TextPosition position = PositionOf(text, error.byte == 0 ? 0 : error.byte - 1);
    // what() is "[json.exception.parse_error.101] parse error at line 3, column 5: <detail>";
    // keep the detail, the position is ours.
    std::string detail = error.what();
    const size_t column_label = detail.find("column ");
    if (column_label != std::string::npos) {
      const size_t colon = detail.find(": ", column_label);
      if (colon != std::string::npos) detail = detail.substr(colon + 2);
    }
    return absl::InvalidArgumentError(absl::StrFormat("%s: invalid JSON at line %d, column %d: %s",
                                                      path, position.line, position.column,
                                                      detail));
  } catch (const nlohmann::json::exception& error) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: invalid JSON: %s", path, error.what()));
  }
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  // A FIFO or a device would block the open or never end; only regular files are inputs.
  std::error_code status_error;
  const std::filesystem::file_status status = std::filesystem::status(path, status_error);
  if (!status_error && std::filesystem::exists(status) &&
      !std::filesystem::is_regular_file(status)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: not a regular file (%s)", path,
        std::filesystem::is_directory(status) ? "a directory" : "a FIFO, socket or device"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = absl::StrFormat("%s: cannot open: %s", path, std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(absl::StrFormat("%s: read failed", path));
  }
  return contents.str();
}

std::string DescribeJson(const nlohmann::json& value) {
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kMaxLength = 80;
  if (text.size() > kMaxLength) text = text.substr(0, kMaxLength - 3) + "...";
  return text;
}

}  // namespace llmc::importer_internal
