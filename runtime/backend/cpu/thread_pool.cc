#include "runtime/backend/cpu/thread_pool.h"

namespace llmrt::cpu {

ThreadPool::ThreadPool(int32_t num_threads) {
  for (int32_t thread_index = 1; thread_index < num_threads; ++thread_index) {
    workers_.emplace_back([this, thread_index] { WorkerLoop(thread_index); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::RunShare(int32_t thread_index) {
  const int64_t threads = num_threads();
  const int64_t begin = num_items_ * thread_index / threads;
  const int64_t end = num_items_ * (thread_index + 1) / threads;
  if (begin < end) function_(context_, begin, end, thread_index);
}

void ThreadPool::Run(int64_t num_items, Function function, const void* context) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    function_ = function;
    context_ = context;
    num_items_ = num_items;
    pending_workers_ = static_cast<int32_t>(workers_.size());
    ++generation_;
  }
  work_ready_.notify_all();
  RunShare(0);
  std::unique_lock<std::mutex> lock(mutex_);
  work_done_.wait(lock, [this] { return pending_workers_ == 0; });
}

void ThreadPool::WorkerLoop(int32_t thread_index) {
  uint64_t seen_generation = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
    }
    RunShare(thread_index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_workers_ == 0) work_done_.notify_one();
    }
  }
}

}  // namespace llmrt::cpu
