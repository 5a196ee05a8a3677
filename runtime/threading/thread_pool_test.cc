#include "runtime/threading/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace llmrt::threading {
namespace {

TEST(ThreadPoolTest, EveryItemRunsExactlyOnce) {
  for (int32_t threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t items : {1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(items);
      pool.ParallelFor(items, [&](int64_t begin, int64_t end, int32_t thread) {
        EXPECT_GE(thread, 0);
        EXPECT_LT(thread, threads);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < items; ++i) ASSERT_EQ(hits[i].load(), 1) << items << " " << i;
    }
  }
}

TEST(ThreadPoolTest, ChunksAreMultiplesOfTheGrain) {
  ThreadPool pool(3);
  std::vector<int64_t> begins(3, -1);
  pool.ParallelFor(
      100,
      [&](int64_t begin, int64_t end, int32_t thread) {
        begins[thread] = begin;
        EXPECT_TRUE(end == 100 || end % 8 == 0) << end;
      },
      8);
  for (int64_t begin : begins) EXPECT_TRUE(begin == -1 || begin % 8 == 0) << begin;
}

TEST(ThreadPoolTest, DynamicChunksCoverEveryItemOnceInGrainSizedPieces) {
  for (int32_t threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t items : {1, 5, 8, 9, 100, 1001}) {
      std::vector<std::atomic<int>> hits(items);
      std::atomic<int64_t> chunks{0};
      pool.ParallelForDynamic(
          items,
          [&](int64_t begin, int64_t end, int32_t thread) {
            EXPECT_GE(thread, 0);
            EXPECT_LT(thread, threads);
            EXPECT_EQ(begin % 8, 0) << begin;
            EXPECT_TRUE(end - begin == 8 || end == items) << begin << " " << end;
            chunks.fetch_add(1);
            for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
          },
          8);
      for (int64_t i = 0; i < items; ++i) ASSERT_EQ(hits[i].load(), 1) << items << " " << i;
      EXPECT_EQ(chunks.load(), (items + 7) / 8) << items;
    }
  }
}

// A thread that is held up takes fewer chunks: the others run the rest instead of waiting.
TEST(ThreadPoolTest, DynamicChunksGoToTheThreadsThatAreFree) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> per_thread(2);
  pool.ParallelForDynamic(
      64,
      [&](int64_t begin, int64_t, int32_t thread) {
        // Whichever thread claims chunk 0 is stalled until the other has run 40 chunks.
        if (begin == 0) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (per_thread[1 - thread].load() < 40 &&
                 std::chrono::steady_clock::now() < deadline) {
            std::this_thread::yield();
          }
        }
        per_thread[thread].fetch_add(1);
      },
      1);
  EXPECT_EQ(per_thread[0].load() + per_thread[1].load(), 64);
  EXPECT_GE(std::max(per_thread[0].load(), per_thread[1].load()), 40);
}

TEST(ThreadPoolTest, ThreadIndicesAreDistinctWithinOneCall) {
  ThreadPool pool(4);
  for (int repeat = 0; repeat < 200; ++repeat) {
    std::vector<std::atomic<int>> used(4);
    pool.ParallelFor(4, [&](int64_t, int64_t, int32_t thread) { used[thread].fetch_add(1); });
    for (auto& count : used) ASSERT_EQ(count.load(), 1);
  }
}

// Many back-to-back calls, as a decode step makes: each call reads what the other thread wrote
// in the previous call, so a missing happens-before edge shows up as a wrong count.
TEST(ThreadPoolTest, ConsecutiveCallsSeeEachOthersResults) {
  ThreadPool pool(2);
  std::vector<int64_t> buffers[2] = {std::vector<int64_t>(64, 0), std::vector<int64_t>(64, 0)};
  constexpr int kRounds = 2000;
  for (int round = 0; round < kRounds; ++round) {
    const std::vector<int64_t>& source = buffers[round % 2];
    std::vector<int64_t>& destination = buffers[1 - round % 2];
    pool.ParallelFor(64, [&](int64_t begin, int64_t end, int32_t) {
      for (int64_t i = begin; i < end; ++i) destination[i] = source[(i + 32) % 64] + 1;
    });
  }
  for (int64_t value : buffers[kRounds % 2]) ASSERT_EQ(value, kRounds);
}

TEST(ThreadPoolTest, DefaultIsOneThreadPerAllowedCpu) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.num_threads(), ThreadPool::DefaultThreadCount());
#if defined(__linux__)
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  EXPECT_EQ(pool.num_threads(), CPU_COUNT(&allowed));
#endif
}

// A worker that went to sleep on the futex (the pool idle for longer than the spin) must still
// wake for the next call.
TEST(ThreadPoolTest, WakesAfterSleeping) {
  ThreadPool pool(2);
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> items{0};
    pool.ParallelFor(2, [&](int64_t begin, int64_t end, int32_t) {
      items.fetch_add(static_cast<int>(end - begin));
    });
    ASSERT_EQ(items.load(), 2);
  }
}

// The wake-up system calls are skipped unless a thread sleeps: gaps around the 100 us spin
// limit make workers (and, with a slow worker, the caller) fall asleep just as work arrives,
// where a lost wake-up would hang this test. WakeSleepers() before some calls must neither run
// anything nor leave a worker behind.
TEST(ThreadPoolTest, NoWakeUpIsLostAroundTheSpinLimit) {
  ThreadPool pool(3);
  for (int round = 0; round < 300; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(50 + (round * 37) % 150));
    if (round % 3 == 0) pool.WakeSleepers();
    std::atomic<int> items{0};
    pool.ParallelFor(3, [&](int64_t begin, int64_t end, int32_t thread) {
      // A worker slower than the spin limit makes the caller sleep on the join.
      if (thread != 0 && round % 5 == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(150));
      }
      items.fetch_add(static_cast<int>(end - begin));
    });
    ASSERT_EQ(items.load(), 3) << round;
  }
}

}  // namespace
}  // namespace llmrt::threading
