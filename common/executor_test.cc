// The one ParallelFor (executor.h): every item exactly once, from any thread,
// with any number of pool threads, and the pool's FIFO Submit.
#include "common/executor.h"

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(Executor, ParallelForRunsEveryItemExactlyOnce) {
  for (int threads : {0, 1, 3}) {
    Executor executor(threads);
    for (size_t n : {0u, 1u, 2u, 7u, 100u}) {
      std::vector<std::atomic<int>> hits(n);
      executor.ParallelFor(n, 4, [&](size_t i) { hits[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " i=" << i;
      }
    }
  }
}

TEST(Executor, ParallelForUsesThePoolThreads) {
  // Two items that each wait for the other: only finishes if a pool thread
  // runs one while the caller runs the other.
  Executor executor(1);
  absl::Notification first, second;
  std::atomic<int> met{0};
  executor.ParallelFor(2, 1, [&](size_t i) {
    (i == 0 ? first : second).Notify();
    if ((i == 0 ? second : first).WaitForNotificationWithTimeout(absl::Seconds(30))) {
      met.fetch_add(1);
    }
  });
  EXPECT_EQ(met.load(), 2);
}

TEST(Executor, ParallelForFromAPoolThreadWithEveryOtherThreadBusy) {
  // The caller does the work itself instead of waiting for a helper that
  // cannot start.
  Executor executor(2);
  absl::Notification release, done;
  executor.Submit([&] { release.WaitForNotification(); });
  std::atomic<int> sum{0};
  executor.Submit([&] {
    executor.ParallelFor(10, 4, [&](size_t i) { sum.fetch_add(static_cast<int>(i)); });
    done.Notify();
  });
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(sum.load(), 45);
  release.Notify();
}

TEST(Executor, SubmitRunsInOrderAndTheDestructorDrainsTheQueue) {
  std::vector<int> order;
  {
    Executor executor(1);
    for (int i = 0; i < 50; ++i) executor.Submit([&order, i] { order.push_back(i); });
  }
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace gradstream
