// The session state file of llmrt_session_save / llmrt_session_restore.
//
// Layout, little-endian, version 1:
//   offset 0   magic "LLMRTSES" (8 bytes)
//          8   u32 version (1)
//         12   u32 flags (0; reserved for a KV-contents section, see below)
//         16   u64 plan_checksum: the xxh64 meta checksum from the plan's header, so a state is
//              never restored into another plan (or the same model compiled differently)
//         24   u64 num_tokens
//         32   u64 tokens_checksum: xxh64 (seed 0) of the token bytes that follow
//         40   i32 tokens[num_tokens]
//   The file ends right after the tokens; anything else is DATA_LOSS.
//
// Version 1 stores the tokens and restore recomputes their KV (one prefill). The backend
// interface (runtime/backend/backend.h) has no way to read or write KV blocks yet; a version 2
// adds the raw blocks behind a flag once it does, which makes restoring free of compute at the
// price of a file 2 * layers * kv_heads * head_dim * dtype bytes per token larger.
//
// Thread-safety: free functions without shared state.
#ifndef LLMRT_RUNTIME_CAPI_SESSION_FILE_H_
#define LLMRT_RUNTIME_CAPI_SESSION_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace llmrt::capi {

inline constexpr char kSessionMagic[8] = {'L', 'L', 'M', 'R', 'T', 'S', 'E', 'S'};
inline constexpr uint32_t kSessionVersion = 1;
inline constexpr size_t kSessionHeaderSize = 40;

struct SessionState {
  uint64_t plan_checksum = 0;
  std::vector<int32_t> tokens;
};

// Writes `state` to `path` through `path`.tmp renamed into place.
absl::Status WriteSessionFile(const std::string& path, const SessionState& state);
// Reads and checks a session file (magic, version, sizes, checksum); DATA_LOSS naming the file
// and what is wrong for a damaged one, FAILED_PRECONDITION for another version.
absl::StatusOr<SessionState> ReadSessionFile(const std::string& path);

}  // namespace llmrt::capi

#endif  // LLMRT_RUNTIME_CAPI_SESSION_FILE_H_
