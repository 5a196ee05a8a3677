// Where each 4-bit code of an I4 matrix row lives: plan.proto's Tensor.Layout LANE_CHUNKS, the
// one layout the compiler writes and every kernel reads.
//
// A row's columns form runs of 32 (kInt4Run: one activation block, one scale group at g32), and
// runs form chunks of 8 (kInt4ChunkRuns); the last chunk of a row holds the remaining n <= 8
// runs. A chunk of n runs takes 16n bytes, cut into 4 slices of 4n bytes; in slice v, the 4
// bytes at 4j hold run j's columns 8v..8v+3 in their low nibbles and 8v+4..8v+7 in their high
// nibbles. So a 32-byte load of a full chunk's slice puts every run in its own 32-bit lane:
// one AND (low nibbles) and one shift + AND (high nibbles) give 8 codes per run and lane, and
// an integer multiply-add over 4 bytes per lane (AVX2 maddubs + madd, NEON sdot, CUDA dp4a)
// leaves each run's sum in its lane: the 8 block sums come out in lanes 0..7 without the
// shuffles a run-contiguous layout needs (+46% dot-product rate on AVX2, docs/quantization.md).
//
// Header-only, no dependencies: the compiler packs with PackInt4Row, kernels and references
// find a code with Int4CodeAt.
#ifndef LLMRT_PLAN_INT4_LAYOUT_H_
#define LLMRT_PLAN_INT4_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace llmrt::plan {

inline constexpr int64_t kInt4Run = 32;
inline constexpr int64_t kInt4ChunkRuns = 8;
inline constexpr int64_t kInt4ChunkBytes = kInt4ChunkRuns * kInt4Run / 2;

// Runs in the chunk that holds run `run` of a row of `cols` columns (8, or fewer for the last).
inline int64_t Int4RunsInChunk(int64_t cols, int64_t run) {
  const int64_t first = run / kInt4ChunkRuns * kInt4ChunkRuns;
  return std::min<int64_t>(kInt4ChunkRuns, cols / kInt4Run - first);
}

// The byte of a row (cols a multiple of kInt4Run) that holds column `col`, and the shift of its
// nibble (0 low, 4 high).
struct Int4Position {
  int64_t byte;
  int shift;
};

// The byte offset within a row of the 4 bytes that hold columns 8 * slice .. 8 * slice + 7 of
// run `run` (slice < 4).
inline int64_t Int4SliceOffset(int64_t cols, int64_t run, int64_t slice) {
  return run / kInt4ChunkRuns * kInt4ChunkBytes + slice * 4 * Int4RunsInChunk(cols, run) +
         run % kInt4ChunkRuns * 4;
}

inline Int4Position Int4PositionOf(int64_t cols, int64_t col) {
  const int64_t offset = col % kInt4Run;
  return {Int4SliceOffset(cols, col / kInt4Run, offset / 8) + offset % 4, offset % 8 < 4 ? 0 : 4};
}

// The code (0..15) of column `col` of a packed row.
inline int Int4CodeAt(const uint8_t* row, int64_t cols, int64_t col) {
  const Int4Position position = Int4PositionOf(cols, col);
  return (row[position.byte] >> position.shift) & 15;
}

// Packs a row of `cols` codes (one per byte, 0..15; cols a multiple of kInt4Run) into cols / 2
// bytes, a slice of a run (4 bytes) at a time.
inline void PackInt4Row(const uint8_t* codes, int64_t cols, uint8_t* packed) {
  for (int64_t run = 0; run < cols / kInt4Run; ++run) {
    for (int64_t slice = 0; slice < 4; ++slice) {
      const uint8_t* columns = codes + run * kInt4Run + 8 * slice;
      uint8_t* bytes = packed + Int4SliceOffset(cols, run, slice);
      for (int64_t i = 0; i < 4; ++i) {
        bytes[i] = static_cast<uint8_t>((columns[i] & 15) | ((columns[4 + i] & 15) << 4));
      }
    }
  }
}

// The chunk of a row that starts at run `first` (a multiple of kInt4ChunkRuns) as a full chunk
// would lie: slice v at 32 * v, the lanes of runs past the row's last zero. Lets a kernel read
// a row's last, shorter chunk with its full-chunk code.
inline void ExpandInt4Chunk(const uint8_t* row, int64_t cols, int64_t first,
                            uint8_t out[kInt4ChunkBytes]) {
  const int64_t runs = Int4RunsInChunk(cols, first);
  std::fill(out, out + kInt4ChunkBytes, uint8_t{0});
  for (int64_t slice = 0; slice < 4; ++slice) {
    std::copy_n(row + Int4SliceOffset(cols, first, slice), 4 * runs, out + 32 * slice);
  }
}

}  // namespace llmrt::plan

#endif  // LLMRT_PLAN_INT4_LAYOUT_H_
