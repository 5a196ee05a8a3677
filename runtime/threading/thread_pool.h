// ThreadPool: a fixed set of worker threads that split a range of work items with the caller.
//
// ParallelFor blocks until every item is done; the calling thread takes a share, so a pool of N
// threads starts N - 1 workers. Work is handed over through one atomic generation counter
// and finished through one atomic pending counter: no mutex, no condition variable and no
// allocation per ParallelFor (the body is passed as a function pointer plus context pointer,
// not a std::function). Waiting threads spin for kSpinNanoseconds (100 us, measured by the
// clock rather than by a pause count, whose cost differs 10x between CPU generations) and then
// sleep on a futex, so an idle pool stops using CPU soon and a decode step, whose ~150
// ParallelFors are each a few hundred microseconds apart at most, never pays a syscall.
//
// Work splitting: ParallelFor gives each thread one static, contiguous chunk of about
// num_items / num_threads, optionally rounded to a multiple of `grain` so that e.g. a chunk of
// matmul panels never straddles a cache line of output; a thread keeps the same items (and
// whatever of them its caches hold) from call to call. ParallelForDynamic hands out
// grain-sized chunks in order from one atomic counter to whichever thread is free, so a
// thread that is slowed down (by the memory system, an interrupt, a descheduling) takes
// fewer chunks instead of making every other thread wait for it at the join.
//
// Thread-safety: ParallelFor must not be called concurrently or from inside a body (the owner
// of the pool is single-threaded above it, like a backend's RunStep).
#ifndef LLMRT_THREADING_THREAD_POOL_H_
#define LLMRT_THREADING_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace llmrt::threading {

class ThreadPool {
 public:
  // num_threads <= 0: DefaultThreadCount().
  explicit ThreadPool(int32_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t num_threads() const { return num_threads_; }

  // Wakes workers that have gone to sleep (after kSpinNanoseconds without work) so they spin
  // again, without giving them work: a caller about to start a burst of ParallelFors after a
  // long serial stretch (a decode step after sampling) hides the futex wake-up latency (~20-50 us
  // here, measured on the first matmul of each step) behind its own serial work. Cheap when
  // every worker is already spinning (one load). Same thread-safety as ParallelFor.
  void WakeSleepers();

  // One thread per CPU this process may run on (its affinity mask, which taskset, cgroups'
  // cpusets and container runtimes narrow), so a pool never has more threads than cores to run
  // them: an oversubscribed spinning pool loses whole scheduler time slices at every join.
  static int32_t DefaultThreadCount();

  // Calls body(begin, end, thread_index) on disjoint contiguous sub-ranges covering
  // [0, num_items), at most one per thread, with thread_index in [0, num_threads()) (it indexes
  // per-thread scratch). Chunk boundaries are multiples of `grain` (except the end).
  template <typename Body>
  void ParallelFor(int64_t num_items, const Body& body, int64_t grain = 1) {
    if (num_items <= 0) return;
    if (num_threads_ == 1 || num_items <= grain) {
      body(int64_t{0}, num_items, 0);
      return;
    }
    Run(num_items, grain, /*dynamic=*/false, &Trampoline<Body>, &body);
  }

  // Calls body(begin, end, thread_index) for consecutive chunks of `grain` items (the last
  // one shorter) covering [0, num_items), each chunk once, claimed in order by whichever
  // thread asks next: any thread may run any number of chunks, possibly none.
  template <typename Body>
  void ParallelForDynamic(int64_t num_items, const Body& body, int64_t grain) {
    if (num_items <= 0) return;
    grain = grain < 1 ? 1 : grain;
    if (num_threads_ == 1 || num_items <= grain) {
      for (int64_t begin = 0; begin < num_items; begin += grain) {
        body(begin, begin + grain < num_items ? begin + grain : num_items, 0);
      }
      return;
    }
    Run(num_items, grain, /*dynamic=*/true, &Trampoline<Body>, &body);
  }

  // The range thread `thread_index` of `num_threads` gets in a ParallelFor over `num_items`.
  static void Chunk(int64_t num_items, int64_t grain, int32_t num_threads, int32_t thread_index,
                    int64_t* begin, int64_t* end);

 private:
  using Function = void (*)(const void* context, int64_t begin, int64_t end, int32_t thread);
  template <typename Body>
  static void Trampoline(const void* context, int64_t begin, int64_t end, int32_t thread) {
    (*static_cast<const Body*>(context))(begin, end, thread);
  }
  void Run(int64_t num_items, int64_t grain, bool dynamic, Function function, const void* context);
  void WorkerLoop(int32_t thread_index);
  void RunShare(int32_t thread_index);

  const int32_t num_threads_;
  std::vector<std::thread> workers_;
  // Written by the caller before `generation_` is bumped (release), read by workers after they
  // see the new generation (acquire).
  Function function_ = nullptr;
  const void* context_ = nullptr;
  int64_t num_items_ = 0;
  int64_t grain_ = 1;
  bool dynamic_ = false;
  // Separate cache lines: workers poll generation_ while they decrement pending_.
  alignas(64) std::atomic<uint32_t> generation_{0};  // futex word; 0x80000000 bit = stop
  alignas(64) std::atomic<uint32_t> pending_{0};     // futex word: workers still running
  alignas(64) std::atomic<int64_t> next_item_{0};    // ParallelForDynamic: first unclaimed item
  // Threads asleep in a futex wait on generation_ (workers) or pending_ (the caller): the
  // other side makes the wake-up system call only when these are non-zero.
  alignas(64) std::atomic<int32_t> sleeping_workers_{0};
  std::atomic<int32_t> sleeping_caller_{0};
};

}  // namespace llmrt::threading

#endif  // LLMRT_THREADING_THREAD_POOL_H_
