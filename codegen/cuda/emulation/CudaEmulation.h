//===- CudaEmulation.h - Run generated CUDA C on a CPU ----------*- C++ -*-===//
//
// Force-included (g++ -include) before a generated kernel source, this header lets the source
// compile as host C++ and execute on a CPU, so the kernels' logic is tested without a GPU:
//
//   - a launch runs the grid's blocks one after another; the threads of a block are fibers
//     on one OS thread, switched cooperatively, so __syncthreads() is a real barrier;
//   - `__shared__` becomes `static`: since blocks never overlap, one copy per kernel is
//     exactly per-block shared memory;
//   - warps are groups of 32 consecutive fibers: shuffles and votes exchange values through
//     a per-warp slot array between two warp barriers;
//   - __half / __nv_bfloat16 are 16-bit structs with round-to-nearest-even conversions;
//   - mmaM16N8K16 is the tensor-core wrapper of KernelLibrary.cuh, computed from PTX's
//     fragment layouts for mma.m16n8k16 (each lane contributes its registers, every lane
//     computes its own four outputs from the gathered fragments).
//
// Only what is defined here exists: generated code that uses another CUDA facility fails to
// compile under emulation, which is how the emitter and this header stay in step.
//
// Kernels register themselves (LLMC_REGISTER_KERNEL) and are run by name through the C
// entry point llmc_emu_launch, which a test reaches with dlsym.
//
// Thread-safety: one launch at a time per process (the scheduler state is global).
//
//===----------------------------------------------------------------------===//

#ifndef LLMC_CODEGEN_CUDA_EMULATION_CUDAEMULATION_H_
#define LLMC_CODEGEN_CUDA_EMULATION_CUDAEMULATION_H_

#define LLMC_EMULATION 1

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
typedef dim3 uint3;
// CUDA's 16-byte vector type (16-byte aligned, as the 128-bit loads that use it require).
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

namespace llmc_emu {

// --- 16-bit floating-point types ---------------------------------------------------------------
inline uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
inline float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline float halfToFloat(uint16_t half) {
  const uint32_t sign = (uint32_t)(half & 0x8000) << 16;
  const uint32_t exponent = (half >> 10) & 0x1f;
  const uint32_t mantissa = half & 0x3ff;
  if (exponent == 0x1f)
    return bitsFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in f32.
    const float magnitude = std::ldexp((float)mantissa, -24);
    return sign ? -magnitude : magnitude;
  }
  return bitsFloat(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t floatToHalf(float value) {
  // Round to nearest even through a double: ldexp/rint are exact on these magnitudes.
  const uint32_t bits = floatBits(value);
  const uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
  if (std::isnan(value))
    return sign | 0x7e00;
  double magnitude = std::fabs((double)value);
  if (magnitude >= 65520.0)
    return sign | 0x7c00; // rounds to infinity
  if (magnitude < std::ldexp(1.0, -14)) {
    // Subnormal (or zero): units of 2^-24.
    return sign | (uint16_t)std::nearbyint(magnitude * std::ldexp(1.0, 24));
  }
  int exponent;
  const double fraction = std::frexp(magnitude, &exponent); // [0.5, 1)
  double mantissa = std::nearbyint(fraction * 2048.0);      // 11 significant bits
  if (mantissa == 2048.0) {
    mantissa = 1024.0;
    ++exponent;
  }
  const int biased = exponent - 1 + 15;
  if (biased >= 31)
    return sign | 0x7c00;
  return sign | (uint16_t)(biased << 10) | (uint16_t)((int)mantissa - 1024);
}

inline float bfloat16ToFloat(uint16_t value) { return bitsFloat((uint32_t)value << 16); }
inline uint16_t floatToBfloat16(float value) {
  uint32_t bits = floatBits(value);
  if (std::isnan(value))
    return (uint16_t)((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
  return (uint16_t)(bits >> 16);
}

} // namespace llmc_emu

struct __half {
  uint16_t bits = 0;
};
struct __nv_bfloat16 {
  uint16_t bits = 0;
};
inline float __half2float(__half value) { return llmc_emu::halfToFloat(value.bits); }
inline __half __float2half_rn(float value) { return __half{llmc_emu::floatToHalf(value)}; }
inline unsigned short __half_as_ushort(__half value) { return value.bits; }
inline float __bfloat162float(__nv_bfloat16 value) { return llmc_emu::bfloat16ToFloat(value.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  return __nv_bfloat16{llmc_emu::floatToBfloat16(value)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 value) { return value.bits; }
inline float __int_as_float(int value) { return llmc_emu::bitsFloat((uint32_t)value); }
inline int __float_as_int(float value) { return (int)llmc_emu::floatBits(value); }

// --- fibers and the block scheduler ------------------------------------------------------------
namespace llmc_emu {

// Calls one kernel with a `const LlmcKernelParams*` (the struct is defined after this header).
typedef void (*KernelFunction)(const void *params);

// 64 KiB per thread: the generated kernels keep at most a few hundred bytes of locals, the rest
// is headroom for the emulation calls and libm.
constexpr size_t kStackBytes = 64 * 1024;
constexpr int kMaxThreads = 1024;

struct Fiber {
#if defined(__x86_64__)
  void *stackPointer = nullptr;
#else
  ucontext_t context;
#endif
  dim3 threadIdx;
  int linear = 0;
  bool done = false;
};

struct Barrier {
  int arrived = 0; // threads waiting in the current generation
  int alive = 0;
  unsigned generation = 0;
};

struct Warp {
  Barrier barrier;
  uint64_t slots[32];
  // mma operands of every lane: a[4], b[2], c[4] as raw bits.
  uint32_t mmaA[32][4];
  uint32_t mmaB[32][2];
  float mmaC[32][4];
};

struct Scheduler {
  std::vector<Fiber> fibers;
  std::vector<char> stacks;
  std::vector<Warp> warps;
  Barrier block;
  int current = -1;
  // Arrivals at and releases of barriers; a scheduler pass that changes nothing is a deadlock.
  unsigned long long events = 0;
  dim3 blockIdx, blockDim, gridDim;
  KernelFunction kernel = nullptr;
  const void *params = nullptr;
#if defined(__x86_64__)
  void *schedulerStack = nullptr;
#else
  ucontext_t schedulerContext;
#endif
};

inline std::map<std::string, KernelFunction> &registry() {
  static std::map<std::string, KernelFunction> kernels;
  return kernels;
}
struct Registrar {
  Registrar(const char *name, KernelFunction function) { registry()[name] = function; }
};

inline Scheduler &scheduler() {
  static Scheduler instance;
  return instance;
}
inline Fiber &currentFiber() { return scheduler().fibers[scheduler().current]; }

#if defined(__x86_64__)
// Saves the callee-saved registers of the System V ABI on the current stack, stores the stack
// pointer in *from and continues on the stack `to` (which was saved the same way).
extern "C" void llmc_emu_switch(void **from, void *to);
asm(R"(
  .text
  .p2align 4
  .type llmc_emu_switch,@function
llmc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size llmc_emu_switch, .-llmc_emu_switch
)");
#endif

inline void switchToScheduler() {
  Scheduler &s = scheduler();
#if defined(__x86_64__)
  llmc_emu_switch(&s.fibers[s.current].stackPointer, s.schedulerStack);
#else
  swapcontext(&s.fibers[s.current].context, &s.schedulerContext);
#endif
}

inline void releaseIfComplete(Barrier &barrier) {
  if (barrier.arrived > 0 && barrier.arrived >= barrier.alive) {
    barrier.arrived = 0;
    ++barrier.generation;
    ++scheduler().events;
  }
}

inline void wait(Barrier &barrier) {
  const unsigned generation = barrier.generation;
  ++barrier.arrived;
  ++scheduler().events;
  releaseIfComplete(barrier);
  while (barrier.generation == generation)
    switchToScheduler();
}

inline Warp &currentWarp() { return scheduler().warps[currentFiber().linear / 32]; }
inline int laneId() { return currentFiber().linear % 32; }

inline void fiberMain() {
  Scheduler &s = scheduler();
  s.kernel(s.params);
  Fiber &fiber = currentFiber();
  fiber.done = true;
  --s.block.alive;
  releaseIfComplete(s.block);
  Warp &warp = s.warps[fiber.linear / 32];
  --warp.barrier.alive;
  releaseIfComplete(warp.barrier);
  switchToScheduler();
  std::abort(); // a finished fiber is never resumed
}

inline void fiberEntry() { fiberMain(); }

// Runs one block to completion. Returns false on a deadlock (a barrier some threads never reach).
inline bool runBlock() {
  Scheduler &s = scheduler();
  const int numThreads = (int)(s.blockDim.x * s.blockDim.y * s.blockDim.z);
  s.block = Barrier();
  s.block.alive = numThreads;
  s.warps.assign((numThreads + 31) / 32, Warp());
  for (int w = 0; w < (int)s.warps.size(); ++w)
    s.warps[w].barrier.alive = std::min(32, numThreads - 32 * w);
  for (int t = 0; t < numThreads; ++t) {
    Fiber &fiber = s.fibers[t];
    fiber.done = false;
    fiber.linear = t;
    fiber.threadIdx.x = t % s.blockDim.x;
    fiber.threadIdx.y = (t / s.blockDim.x) % s.blockDim.y;
    fiber.threadIdx.z = t / (s.blockDim.x * s.blockDim.y);
    char *top = s.stacks.data() + (size_t)(t + 1) * kStackBytes;
#if defined(__x86_64__)
    // Stack as llmc_emu_switch leaves it: six saved registers, then the "return address" (the
    // entry function), then a fake return address of the entry, so that on entry
    // rsp % 16 == 8 as after a call.
    void **stack = reinterpret_cast<void **>(top);
    *--stack = nullptr;
    *--stack = reinterpret_cast<void *>(&fiberEntry);
    for (int r = 0; r < 6; ++r)
      *--stack = nullptr;
    fiber.stackPointer = stack;
#else
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = top - kStackBytes;
    fiber.context.uc_stack.ss_size = kStackBytes;
    fiber.context.uc_link = nullptr;
    makecontext(&fiber.context, fiberEntry, 0);
#endif
  }
  int remaining = numThreads;
  while (remaining > 0) {
    const unsigned long long eventsBefore = s.events;
    bool finished = false;
    for (int t = 0; t < numThreads; ++t) {
      Fiber &fiber = s.fibers[t];
      if (fiber.done)
        continue;
      s.current = t;
#if defined(__x86_64__)
      llmc_emu_switch(&s.schedulerStack, fiber.stackPointer);
#else
      swapcontext(&s.schedulerContext, &fiber.context);
#endif
      if (fiber.done) {
        --remaining;
        finished = true;
      }
    }
    if (!finished && s.events == eventsBefore)
      return false; // every live thread waits at a barrier nobody else will reach
  }
  return true;
}

// Runs kernel `name` over the grid. Returns false with a message in `error`.
inline bool launch(const char *name, const unsigned grid[3], const unsigned block[3],
                   const void *params, std::string *error) {
  auto found = registry().find(name);
  char message[512];
  if (found == registry().end()) {
    std::snprintf(message, sizeof(message), "no kernel named %s in the emulated module", name);
    *error = message;
    return false;
  }
  const long long threads = (long long)block[0] * block[1] * block[2];
  if (threads <= 0 || threads > kMaxThreads) {
    std::snprintf(message, sizeof(message), "%s: block of %lld threads, expected 1..%d", name,
                  threads, kMaxThreads);
    *error = message;
    return false;
  }
  Scheduler &s = scheduler();
  s.kernel = found->second;
  s.params = params;
  s.blockDim.x = block[0];
  s.blockDim.y = block[1];
  s.blockDim.z = block[2];
  s.gridDim.x = grid[0];
  s.gridDim.y = grid[1];
  s.gridDim.z = grid[2];
  s.fibers.resize(threads);
  if (s.stacks.size() < (size_t)threads * kStackBytes)
    s.stacks.resize((size_t)threads * kStackBytes);
  for (unsigned z = 0; z < grid[2]; ++z)
    for (unsigned y = 0; y < grid[1]; ++y)
      for (unsigned x = 0; x < grid[0]; ++x) {
        s.blockIdx.x = x;
        s.blockIdx.y = y;
        s.blockIdx.z = z;
        if (!runBlock()) {
          std::snprintf(message, sizeof(message),
                        "%s: block (%u, %u, %u) deadlocked: a barrier not reached by every "
                        "live thread",
                        name, x, y, z);
          *error = message;
          return false;
        }
      }
  return true;
}

} // namespace llmc_emu

#define threadIdx (llmc_emu::currentFiber().threadIdx)
#define blockIdx (llmc_emu::scheduler().blockIdx)
#define blockDim (llmc_emu::scheduler().blockDim)
#define gridDim (llmc_emu::scheduler().gridDim)

inline void __syncthreads() { llmc_emu::wait(llmc_emu::scheduler().block); }
inline void __syncwarp(unsigned = 0xffffffffu) { llmc_emu::wait(llmc_emu::currentWarp().barrier); }

namespace llmc_emu {
// Every lane publishes `value`, then reads lane `source`'s.
template <typename T> T exchange(T value, int source) {
  static_assert(sizeof(T) <= 8, "shuffles move at most 64 bits");
  Warp &warp = currentWarp();
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  warp.slots[laneId()] = bits;
  wait(warp.barrier);
  T result;
  bits = warp.slots[source & 31];
  std::memcpy(&result, &bits, sizeof(T));
  wait(warp.barrier); // nobody overwrites a slot before every lane has read
  return result;
}
} // namespace llmc_emu

template <typename T> T __shfl_sync(unsigned, T value, int source, int = 32) {
  return llmc_emu::exchange(value, source);
}
template <typename T> T __shfl_xor_sync(unsigned, T value, int mask, int = 32) {
  return llmc_emu::exchange(value, llmc_emu::laneId() ^ mask);
}
template <typename T> T __shfl_down_sync(unsigned, T value, unsigned delta, int = 32) {
  const int source = llmc_emu::laneId() + (int)delta;
  return llmc_emu::exchange(value, source < 32 ? source : llmc_emu::laneId());
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned result = 0;
  for (int lane = 0; lane < 32; ++lane) {
    // One exchange per lane keeps this simple; votes are rare in the generated code.
    if (llmc_emu::exchange(predicate != 0 ? 1 : 0, lane))
      result |= 1u << lane;
  }
  return result;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, !predicate) == 0; }

// Atomics: fibers switch only at barriers and shuffles, so a read-modify-write is atomic.
template <typename T> T atomicAdd(T *address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
inline int atomicMax(int *address, int value) {
  const int old = *address;
  if (value > old)
    *address = value;
  return old;
}
inline unsigned atomicCAS(unsigned *address, unsigned compare, unsigned value) {
  const unsigned old = *address;
  if (old == compare)
    *address = value;
  return old;
}

// expf, sqrtf, cosf, sinf, fmaxf come from <cmath> (glibc declares them globally).
inline float rsqrtf(float value) { return 1.0f / std::sqrt(value); }

// --- tensor-core MMA, m16n8k16, f32 accumulate -------------------------------------------------
namespace llmc_emu {
inline float element(uint32_t packed, int half, __half) {
  return halfToFloat((uint16_t)(half ? packed >> 16 : packed & 0xffff));
}
inline float element(uint32_t packed, int half, __nv_bfloat16) {
  return bfloat16ToFloat((uint16_t)(half ? packed >> 16 : packed & 0xffff));
}

// PTX ISA, "Matrix Fragments for mma.m16n8k16" (f16/bf16), with groupID = lane / 4 and
// threadID_in_group = lane % 4:
//   A (16x16, row-major), a0..a7 in 4 registers (2 per register, lower index in the low half):
//     row = groupID for a0,a1,a4,a5 and groupID + 8 for a2,a3,a6,a7;
//     col = threadID_in_group * 2 + (i & 1), plus 8 for a4..a7.
//   B (16x8, column-major), b0..b3 in 2 registers:
//     row (k) = threadID_in_group * 2 + (i & 1), plus 8 for b2,b3; col = groupID.
//   C/D (16x8 f32), c0..c3: row = groupID for c0,c1 and groupID + 8 for c2,c3;
//     col = threadID_in_group * 2 + (i & 1).
template <typename T> float aElement(const Warp &warp, int row, int col) {
  const int lane = (row % 8) * 4 + (col % 8) / 2;
  const int reg = (row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0);
  return element(warp.mmaA[lane][reg], col & 1, T());
}
template <typename T> float bElement(const Warp &warp, int k, int col) {
  const int lane = col * 4 + (k % 8) / 2;
  const int reg = k >= 8 ? 1 : 0;
  return element(warp.mmaB[lane][reg], k & 1, T());
}

template <typename T> void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  Warp &warp = currentWarp();
  const int lane = laneId();
  for (int i = 0; i < 4; ++i) {
    warp.mmaA[lane][i] = a[i];
    warp.mmaC[lane][i] = d[i];
  }
  warp.mmaB[lane][0] = b[0];
  warp.mmaB[lane][1] = b[1];
  wait(warp.barrier);
  const int group = lane / 4, thread = lane % 4;
  float result[4];
  for (int i = 0; i < 4; ++i) {
    const int row = group + (i >= 2 ? 8 : 0);
    const int col = thread * 2 + (i & 1);
    // The hardware adds the 16 products at higher internal precision; a double sum is the
    // closest a CPU gets to that.
    double sum = warp.mmaC[lane][i];
    for (int k = 0; k < 16; ++k)
      sum += (double)aElement<T>(warp, row, k) * (double)bElement<T>(warp, k, col);
    result[i] = (float)sum;
  }
  wait(warp.barrier);
  for (int i = 0; i < 4; ++i)
    d[i] = result[i];
}
} // namespace llmc_emu

namespace llmc {
inline void mmaM16N8K16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], __half) {
  llmc_emu::mma<__half>(d, a, b);
}
inline void mmaM16N8K16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                        __nv_bfloat16) {
  llmc_emu::mma<__nv_bfloat16>(d, a, b);
}
} // namespace llmc

// --- kernel registry and launch ----------------------------------------------------------------

#define LLMC_REGISTER_KERNEL(name)                                                                 \
  static void llmc_invoke_##name(const void *params) {                                             \
    name(*static_cast<const LlmcKernelParams *>(params));                                          \
  }                                                                                                \
  static llmc_emu::Registrar llmc_registrar_##name(#name, &llmc_invoke_##name);

// The C entry point a test reaches with dlsym. Returns 0, or -1 with a message in `error`.
extern "C" __attribute__((visibility("default"))) int
llmc_emu_launch(const char *name, const unsigned grid[3], const unsigned block[3],
                const void *params, char *error, size_t errorSize) {
  std::string message;
  if (llmc_emu::launch(name, grid, block, params, &message))
    return 0;
  std::snprintf(error, errorSize, "%s", message.c_str());
  return -1;
}

#endif // LLMC_CODEGEN_CUDA_EMULATION_CUDAEMULATION_H_
