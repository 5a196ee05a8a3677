// The plan file format.
//
//   offset 0        Header, 64 bytes, little-endian (struct PlanHeader below).
//   data_offset     Weight blobs, each starting at a multiple of kBlobAlignment (256 bytes:
//                   at least any SIMD register width and cache line, so kernels may use
//                   aligned loads straight from the mmapped file).
//   meta_offset     PlanMeta (plan.proto, protobuf lite), after the blobs: the meta records
//                   every blob's offset and checksum, so writing it last lets the writer
//                   stream blobs in one pass without holding them in memory.
//   file_size       The file is zero-padded to a multiple of kFilePadding (64 KiB, the largest
//                   page size in use on arm64) so the whole file maps with whole pages.
//
// Versions: a plan whose major version differs from kPlanMajorVersion is refused with a message
// naming both; minor versions only add optional fields and are accepted in both directions.
#ifndef LLMRT_PLAN_PLAN_FORMAT_H_
#define LLMRT_PLAN_PLAN_FORMAT_H_

#include <cstddef>
#include <cstdint>

namespace llmrt::plan {

inline constexpr char kPlanMagic[8] = {'L', 'L', 'M', 'P', 'L', 'A', 'N', '\0'};
// 2.0: typed op attributes (Op.attrs: one message per op kind) instead of 1.x's flat fields.
inline constexpr uint16_t kPlanMajorVersion = 2;
// 2.1: MoE ops (ROUTER, EXPERT_MATMUL, MOE_COMBINE, CLAMPED_SWIGLU), EXPERT_IDS values, 3-D
// expert weights, MXFP4 (FP4_E2M1 + E8M0), attention sinks. A 2.0 reader refuses a 2.1 plan that
// uses them by CheckProgram's "unknown op kind" / "unknown kind" errors.
inline constexpr uint16_t kPlanMinorVersion = 1;
inline constexpr uint64_t kBlobAlignment = 256;
inline constexpr uint64_t kFilePadding = 64 * 1024;
inline constexpr size_t kHeaderSize = 64;

// Exactly the 64 on-disk bytes on a little-endian host (every target we build for).
struct PlanHeader {
  char magic[8];
  uint16_t major;
  uint16_t minor;
  uint32_t flags;  // reserved, 0
  uint64_t meta_offset;
  uint64_t meta_size;
  uint64_t data_offset;
  uint64_t file_size;
  uint64_t meta_checksum;  // xxh64, seed 0, of the meta bytes
  uint64_t reserved;
};
static_assert(sizeof(PlanHeader) == kHeaderSize, "the header is 64 bytes on disk");

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_PLAN_FORMAT_H_
