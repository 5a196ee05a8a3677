#include "compiler/importer/config_reader.h"

#include "absl/strings/str_format.h"
#include "compiler/importer/json_util.h"

namespace llmc {

using importer_internal::DescribeJson;

absl::Status ConfigReader::Error(const char* field, const char* expected) const {
  const std::string found =
      Has(field) ? DescribeJson(object_.at(field)) : std::string("nothing (the field is missing)");
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: field \"%s\": expected %s, found %s", path_, field, expected, found));
}

absl::Status ConfigReader::Unsupported(const char* field, const std::string& detail) const {
  return absl::UnimplementedError(absl::StrFormat("%s: field \"%s\": %s", path_, field, detail));
}

absl::StatusOr<int64_t> ConfigReader::RequiredPositiveInt(const char* field) const {
  if (!Has(field)) return Error(field, "a positive integer");
  return PositiveInt(field, Get(field));
}

absl::StatusOr<int64_t> ConfigReader::PositiveIntOr(const char* field, int64_t fallback) const {
  if (!HasValue(field)) return fallback;
  return PositiveInt(field, Get(field));
}

absl::StatusOr<int64_t> ConfigReader::NonNegativeIntOr(const char* field, int64_t fallback) const {
  if (!HasValue(field)) return fallback;
  const Json& value = Get(field);
  if (value.is_number_integer() && value.get<int64_t>() == 0) return 0;
  absl::StatusOr<int64_t> positive = PositiveInt(field, value);
  if (!positive.ok()) return Error(field, "a non-negative integer");
  return positive;
}

absl::StatusOr<double> ConfigReader::PositiveNumberOr(const char* field, double fallback) const {
  if (!HasValue(field)) return fallback;
  return PositiveNumber(field, Get(field));
}

absl::StatusOr<double> ConfigReader::NumberOr(const char* field, double fallback) const {
  if (!HasValue(field)) return fallback;
  if (!Get(field).is_number()) return Error(field, "a number");
  return Get(field).get<double>();
}

absl::StatusOr<bool> ConfigReader::BoolOr(const char* field, bool fallback) const {
  if (!HasValue(field)) return fallback;
  if (!Get(field).is_boolean()) return Error(field, "true or false");
  return Get(field).get<bool>();
}

absl::StatusOr<std::string> ConfigReader::StringOr(const char* field,
                                                   const std::string& fallback) const {
  if (!HasValue(field)) return fallback;
  if (!Get(field).is_string()) return Error(field, "a string");
  return Get(field).get<std::string>();
}

absl::StatusOr<int64_t> ConfigReader::PositiveInt(const char* field, const Json& value) const {
  if (value.is_number_unsigned() && value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX) &&
      value.get<uint64_t>() > 0) {
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer() && value.get<int64_t>() > 0) return value.get<int64_t>();
  return Error(field, "a positive integer");
}

absl::StatusOr<double> ConfigReader::PositiveNumber(const char* field, const Json& value) const {
  if (value.is_number() && value.get<double>() > 0) return value.get<double>();
  return Error(field, "a positive number");
}

absl::Status ConfigReader::RefuseTrue(const char* field, const std::string& what) const {
  absl::StatusOr<bool> value = BoolOr(field, false);
  if (!value.ok()) return value.status();
  if (*value) return Unsupported(field, absl::StrFormat("%s (true) are not supported", what));
  return absl::OkStatus();
}

}  // namespace llmc
