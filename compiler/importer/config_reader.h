// Typed reads of one JSON object of a HuggingFace config file. Every error starts with the
// file (and enclosing field) and names the field, what was expected and what was found:
// `config.json: field "hidden_size": expected a positive integer, found "abc"`.
#ifndef LLMC_COMPILER_IMPORTER_CONFIG_READER_H_
#define LLMC_COMPILER_IMPORTER_CONFIG_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace llmc {

class ConfigReader {
 public:
  using Json = nlohmann::json;

  ConfigReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  bool Has(const char* field) const { return object_.contains(field); }
  // Present and not null.
  bool HasValue(const char* field) const { return Has(field) && !object_.at(field).is_null(); }
  const Json& Get(const char* field) const { return object_.at(field); }
  const std::string& path() const { return path_; }

  // InvalidArgument: `path: field "F": expected EXPECTED, found <the value or nothing>`.
  absl::Status Error(const char* field, const char* expected) const;
  // Unimplemented: `path: field "F": DETAIL` for a valid value this project does not support.
  absl::Status Unsupported(const char* field, const std::string& detail) const;

  absl::StatusOr<int64_t> RequiredPositiveInt(const char* field) const;
  // `fallback` when absent or null.
  absl::StatusOr<int64_t> PositiveIntOr(const char* field, int64_t fallback) const;
  absl::StatusOr<int64_t> NonNegativeIntOr(const char* field, int64_t fallback) const;
  absl::StatusOr<double> PositiveNumberOr(const char* field, double fallback) const;
  absl::StatusOr<double> NumberOr(const char* field, double fallback) const;
  absl::StatusOr<bool> BoolOr(const char* field, bool fallback) const;
  absl::StatusOr<std::string> StringOr(const char* field, const std::string& fallback) const;
  absl::StatusOr<int64_t> PositiveInt(const char* field, const Json& value) const;
  absl::StatusOr<double> PositiveNumber(const char* field, const Json& value) const;

  // A field that must keep the value this project implements (e.g. "mlp_bias" false): an
  // Unimplemented error naming it otherwise.
  absl::Status RefuseTrue(const char* field, const std::string& what) const;

 private:
  const Json& object_;
  std::string path_;
};

}  // namespace llmc

#endif  // LLMC_COMPILER_IMPORTER_CONFIG_READER_H_
