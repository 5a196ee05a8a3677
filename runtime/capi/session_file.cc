#include "runtime/capi/session_file.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/plan/output_file.h"

namespace llmrt::capi {

namespace {

// Explicit little-endian encoding, so a file saved on one machine reads the same on another.
void PutU32(std::string& out, uint32_t value) {
  for (int byte = 0; byte < 4; ++byte) out.push_back(static_cast<char>(value >> (8 * byte)));
}
void PutU64(std::string& out, uint64_t value) {
  for (int byte = 0; byte < 8; ++byte) out.push_back(static_cast<char>(value >> (8 * byte)));
}
uint32_t GetU32(const char* in) {
  uint32_t value = 0;
  for (int byte = 0; byte < 4; ++byte)
    value |= uint32_t{static_cast<uint8_t>(in[byte])} << (8 * byte);
  return value;
}
uint64_t GetU64(const char* in) {
  uint64_t value = 0;
  for (int byte = 0; byte < 8; ++byte)
    value |= uint64_t{static_cast<uint8_t>(in[byte])} << (8 * byte);
  return value;
}

std::string TokenBytes(const std::vector<int32_t>& tokens) {
  std::string bytes;
  bytes.reserve(tokens.size() * 4);
  for (int32_t token : tokens) PutU32(bytes, static_cast<uint32_t>(token));
  return bytes;
}

}  // namespace

absl::Status WriteSessionFile(const std::string& path, const SessionState& state) {
  const std::string token_bytes = TokenBytes(state.tokens);
  std::string file(kSessionMagic, sizeof(kSessionMagic));
  PutU32(file, kSessionVersion);
  PutU32(file, 0);
  PutU64(file, state.plan_checksum);
  PutU64(file, state.tokens.size());
  PutU64(file, XXH64(token_bytes.data(), token_bytes.size(), 0));
  file += token_bytes;

  absl::StatusOr<std::unique_ptr<OutputFile>> out = OutputFile::Create(path);
  if (!out.ok()) return out.status();
  if (absl::Status status = (*out)->Write(file.data(), file.size()); !status.ok()) return status;
  return (*out)->Commit();
}

absl::StatusOr<SessionState> ReadSessionFile(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a regular file, so not a session file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("%s: cannot open the session file: %s", path, std::strerror(errno)));
  }
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.size() < kSessionHeaderSize ||
      std::memcmp(file.data(), kSessionMagic, sizeof(kSessionMagic)) != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: not an llmrt session file (expected the magic \"LLMRTSES\" and a %d-byte header, "
        "found %d bytes)",
        path, kSessionHeaderSize, file.size()));
  }
  const uint32_t version = GetU32(file.data() + 8);
  if (version != kSessionVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: session file version %d; this runtime reads version %d", path, version,
                        kSessionVersion));
  }
  const uint32_t flags = GetU32(file.data() + 12);
  if (flags != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: session file flags 0x%x; version 1 defines none", path, flags));
  }
  SessionState state;
  state.plan_checksum = GetU64(file.data() + 16);
  const uint64_t num_tokens = GetU64(file.data() + 24);
  const uint64_t tokens_checksum = GetU64(file.data() + 32);
  const uint64_t body = file.size() - kSessionHeaderSize;
  if (num_tokens > body / 4 || body != num_tokens * 4) {
    return absl::DataLossError(
        absl::StrFormat("%s: the header says %d tokens (4 bytes each) but %d bytes follow it", path,
                        num_tokens, body));
  }
  const char* token_bytes = file.data() + kSessionHeaderSize;
  if (XXH64(token_bytes, body, 0) != tokens_checksum) {
    return absl::DataLossError(absl::StrFormat(
        "%s: the tokens' checksum does not match the header's (the file is damaged)", path));
  }
  state.tokens.resize(num_tokens);
  for (uint64_t index = 0; index < num_tokens; ++index) {
    state.tokens[index] = static_cast<int32_t>(GetU32(token_bytes + 4 * index));
  }
  return state;
}

}  // namespace llmrt::capi
