#include "runtime/threading/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace llmrt::threading {
namespace {

// How long a waiting thread spins before it sleeps. A TinyLlama decode step runs ~150
// ParallelFors in ~50-90 ms: the gap a worker waits through is the caller's serial work
// between two of them (tens of microseconds) or, at a join, the slowest thread's lag. A futex
// wake-up costs ~5-10 us of latency per op here (measured: BM_ParallelForEmpty), i.e. ~1 ms a
// step, so anything up to 100 us is worth spinning through; an idle pool stops burning a core
// 100 us after its last call.
constexpr int64_t kSpinNanoseconds = 100'000;
// Pauses between two clock reads: a pause is 10-140 cycles depending on the core, a clock
// read ~20 ns; 64 keeps the clock cost negligible and the overshoot under ~5 us.
constexpr int kPausesPerClockRead = 64;
constexpr uint32_t kStopBit = 0x80000000u;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  std::this_thread::yield();
#endif
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
#endif
}

// Waits until *word != value: spins for kSpinNanoseconds, then sleeps on the futex, counted in
// *sleepers while it does, so that the thread changing *word makes the wake-up system call only
// when someone sleeps (a FUTEX_WAKE without waiters still costs ~1 us here, twice per
// ParallelFor). After every wake-up it spins again, so WakeSleepers() can turn sleepers back
// into spinners ahead of a burst of work.
//
// No lost wake-up: the waiter increments *sleepers and then the futex re-checks *word in the
// kernel; the changer modifies *word and then reads *sleepers; all four are sequentially
// consistent, so either the changer sees the sleeper or the futex sees the new value.
uint32_t WaitWhileEqual(std::atomic<uint32_t>* word, uint32_t value,
                        std::atomic<int32_t>* sleepers) {
  using Clock = std::chrono::steady_clock;
  while (true) {
    const Clock::time_point deadline = Clock::now() + std::chrono::nanoseconds(kSpinNanoseconds);
    do {
      for (int i = 0; i < kPausesPerClockRead; ++i) {
        const uint32_t now = word->load(std::memory_order_acquire);
        if (now != value) return now;
        CpuRelax();
      }
    } while (Clock::now() < deadline);
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    const uint32_t now = word->load(std::memory_order_seq_cst);
    if (now == value) FutexWait(word, value);
    sleepers->fetch_sub(1, std::memory_order_seq_cst);
    if (now != value) return now;
  }
}

}  // namespace

int32_t ThreadPool::DefaultThreadCount() {
#if defined(__linux__)
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    return std::max(1, CPU_COUNT(&allowed));
  }
#endif
  return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}

ThreadPool::ThreadPool(int32_t num_threads)
    : num_threads_(num_threads > 0 ? num_threads : DefaultThreadCount()) {
  workers_.reserve(num_threads_ - 1);
  try {
    for (int32_t thread_index = 1; thread_index < num_threads_; ++thread_index) {
      workers_.emplace_back([this, thread_index] { WorkerLoop(thread_index); });
    }
  } catch (...) {
    // The system refused a thread (std::system_error): stop and join those already started,
    // so the exception reaches the caller instead of std::terminate from a joinable thread.
    generation_.fetch_or(kStopBit, std::memory_order_seq_cst);
    FutexWakeAll(&generation_);
    for (std::thread& worker : workers_) worker.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  generation_.fetch_or(kStopBit, std::memory_order_seq_cst);
  FutexWakeAll(&generation_);
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Chunk(int64_t num_items, int64_t grain, int32_t num_threads, int32_t thread_index,
                       int64_t* begin, int64_t* end) {
  const int64_t grains = (num_items + grain - 1) / grain;
  *begin = std::min(num_items, grains * thread_index / num_threads * grain);
  *end = std::min(num_items, grains * (thread_index + 1) / num_threads * grain);
}

void ThreadPool::RunShare(int32_t thread_index) {
  if (dynamic_) {
    while (true) {
      const int64_t begin = next_item_.fetch_add(grain_, std::memory_order_relaxed);
      if (begin >= num_items_) return;
      function_(context_, begin, std::min(num_items_, begin + grain_), thread_index);
    }
  }
  int64_t begin, end;
  Chunk(num_items_, grain_, num_threads_, thread_index, &begin, &end);
  if (begin < end) function_(context_, begin, end, thread_index);
}

void ThreadPool::Run(int64_t num_items, int64_t grain, bool dynamic, Function function,
                     const void* context) {
  function_ = function;
  context_ = context;
  num_items_ = num_items;
  grain_ = std::max<int64_t>(grain, 1);
  dynamic_ = dynamic;
  next_item_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  // Release (and sequentially consistent, see WaitWhileEqual): the fields above are visible to
  // a worker that sees the new generation.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&generation_);
  RunShare(0);
  uint32_t pending = pending_.load(std::memory_order_acquire);
  while (pending != 0) pending = WaitWhileEqual(&pending_, pending, &sleeping_caller_);
}

void ThreadPool::WakeSleepers() {
  if (sleeping_workers_.load(std::memory_order_relaxed) != 0) FutexWakeAll(&generation_);
}

void ThreadPool::WorkerLoop(int32_t thread_index) {
  // Generation 0 is the one before any work; loading generation_ here instead would miss a
  // ParallelFor that started before this thread got scheduled.
  uint32_t seen = 0;
  while (true) {
    seen = WaitWhileEqual(&generation_, seen, &sleeping_workers_);
    if (seen & kStopBit) return;
    RunShare(thread_index);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        sleeping_caller_.load(std::memory_order_seq_cst) != 0) {
      FutexWakeAll(&pending_);
    }
  }
}

}  // namespace llmrt::threading
