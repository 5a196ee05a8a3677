// Per-thread scratch that only grows, for kernels that need a buffer per call (I4 panels
// unpacked by the quantized GEMM, activations rounded to bf16 by the BF16 matmul): each pool
// thread keeps its own, so a step allocates only when a matrix is larger than any before and
// the hot loops never do.
//
// Thread-safety: the buffer belongs to the calling thread; it stays valid until that thread's
// next call with the same Tag and a larger count, or the thread's exit.
#ifndef LLMRT_BACKEND_CPU_THREAD_BUFFER_H_
#define LLMRT_BACKEND_CPU_THREAD_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "hwy/aligned_allocator.h"

namespace llmrt::cpu {

// At least `count` elements of T, aligned for any vector load. `Tag` (any type, usually one
// declared by the caller) keeps each user's buffer apart.
template <typename Tag, typename T>
T* ThreadLocalBuffer(int64_t count) {
  static thread_local hwy::AlignedFreeUniquePtr<T[]> buffer;
  static thread_local int64_t capacity = 0;
  if (capacity < count) {
    buffer = hwy::AllocateAligned<T>(static_cast<size_t>(count));
    capacity = count;
  }
  return buffer.get();
}

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_THREAD_BUFFER_H_
