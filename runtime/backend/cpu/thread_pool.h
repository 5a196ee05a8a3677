// ThreadPool: a fixed set of workers that split a range of work items with the caller.
//
// ParallelFor blocks until every item is done; the calling thread takes a share, so a pool of
// N threads starts N - 1 workers. Dispatch is a function pointer and a context pointer (no
// std::function), so a parallel loop does not allocate.
//
// Thread-safety: one ParallelFor at a time (the backend's step is single-threaded above it).
#ifndef LLMRT_BACKEND_CPU_THREAD_POOL_H_
#define LLMRT_BACKEND_CPU_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace llmrt::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int32_t num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int32_t num_threads() const { return static_cast<int32_t>(workers_.size()) + 1; }

  // Calls body(begin, end, thread_index) on disjoint sub-ranges covering [0, num_items), with
  // thread_index in [0, num_threads()) unique among concurrent calls (it indexes per-thread
  // scratch). Sub-ranges are contiguous chunks of about num_items / num_threads().
  template <typename Body>
  void ParallelFor(int64_t num_items, const Body& body) {
    if (num_items <= 0) return;
    if (workers_.empty() || num_items == 1) {
      body(int64_t{0}, num_items, 0);
      return;
    }
    Run(num_items, &Trampoline<Body>, &body);
  }

 private:
  using Function = void (*)(const void* context, int64_t begin, int64_t end, int32_t thread);
  template <typename Body>
  static void Trampoline(const void* context, int64_t begin, int64_t end, int32_t thread) {
    (*static_cast<const Body*>(context))(begin, end, thread);
  }
  void Run(int64_t num_items, Function function, const void* context);
  void WorkerLoop(int32_t thread_index);
  void RunShare(int32_t thread_index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  uint64_t generation_ = 0;  // incremented per ParallelFor; workers wait for a new one
  int32_t pending_workers_ = 0;
  bool stopping_ = false;
  Function function_ = nullptr;
  const void* context_ = nullptr;
  int64_t num_items_ = 0;
};

}  // namespace llmrt::cpu

#endif  // LLMRT_BACKEND_CPU_THREAD_POOL_H_
