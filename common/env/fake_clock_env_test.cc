// The Env's clock and threads ([env time]): the real one, and the fake one
// that tests of deadlines move by hand.
#include <pthread.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/env/env.h"
#include "common/env/testing/fake_clock_env.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

// A bound for the test's own real-time waits, never what it checks.
constexpr absl::Duration kGenerous = absl::Seconds(30);

TEST(EnvClock, RealAwaitEndsAtItsDeadlineOrWhenTheConditionHolds) {
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(Env::Default()->AwaitWithDeadline(&mu, absl::Condition(&flag), absl::Now()));
  flag = true;
  EXPECT_TRUE(Env::Default()->AwaitWithTimeout(&mu, absl::Condition(&flag), absl::Hours(1)));
}

TEST(EnvClock, StartThreadNamesTheThread) {
  std::string name;
  std::thread t = Env::Default()->StartThread("gs-a-long-thread-name", [&name] {
    char buf[32] = {};
    ::pthread_getname_np(::pthread_self(), buf, sizeof(buf));
    name = buf;
  });
  t.join();
  EXPECT_EQ(name, "gs-a-long-threa");  // the kernel keeps 15 bytes
}

TEST(FakeClock, MovesOnlyWhenAdvanced) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  testing::FakeClockEnv env(Env::Default(), start);
  EXPECT_EQ(env.Now(), start);
  env.Advance(absl::Seconds(3));
  EXPECT_EQ(env.Now(), start + absl::Seconds(3));
}

TEST(FakeClock, SleepEndsWhenTheClockPassesItsEndNotBefore) {
  testing::FakeClockEnv env;
  const absl::Time start = env.Now();
  std::thread sleeper([&] { env.SleepFor(absl::Seconds(10)); });
  ASSERT_TRUE(env.AwaitWaiters(1, kGenerous));
  env.Advance(absl::Seconds(9));
  EXPECT_EQ(env.waiters(), 1u);  // 1 s short: still asleep
  env.Advance(absl::Seconds(1));
  sleeper.join();
  EXPECT_EQ(env.Now(), start + absl::Seconds(10));
}

// One thread waiting on a FakeClockEnv for `flag` (under `mu`) for
// `timeout`; `result` is what the wait returned once the thread is joined.
struct FlagWaiter {
  testing::FakeClockEnv env;
  absl::Mutex mu;
  bool flag ABSL_GUARDED_BY(mu) = false;
  bool result = false;
  std::thread thread;

  explicit FlagWaiter(absl::Duration timeout) {
    thread = std::thread([this, timeout] {
      absl::MutexLock lock(&mu);
      result = env.AwaitWithTimeout(&mu, absl::Condition(&flag), timeout);
    });
  }
  ~FlagWaiter() {
    if (thread.joinable()) thread.join();
  }
};

TEST(FakeClock, AwaitTimesOutExactlyAtItsDeadline) {
  FlagWaiter w(absl::Seconds(5));
  ASSERT_TRUE(w.env.AwaitWaiters(1, kGenerous));
  w.env.Advance(absl::Milliseconds(4999));
  EXPECT_EQ(w.env.waiters(), 1u);
  w.env.Advance(absl::Milliseconds(1));
  w.thread.join();
  EXPECT_FALSE(w.result);
  EXPECT_EQ(w.env.waiters(), 0u);
}

TEST(FakeClock, AwaitEndsWhenItsConditionHoldsWithoutTheClock) {
  FlagWaiter w(absl::Hours(1));
  ASSERT_TRUE(w.env.AwaitWaiters(1, kGenerous));
  {
    absl::MutexLock lock(&w.mu);
    w.flag = true;
  }
  w.thread.join();
  EXPECT_TRUE(w.result);
}

// Each wait wakes when the clock reaches its own deadline; one Advance past
// several deadlines wakes them all.
TEST(FakeClock, AdvanceWakesExactlyTheWaitsItsTimeReaches) {
  testing::FakeClockEnv env;
  absl::Mutex mu;
  const bool never = false;
  std::vector<int> timed_out(4, 0);
  std::vector<std::thread> threads;
  const absl::Time t0 = env.Now();
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      absl::MutexLock lock(&mu);
      const bool held =
          env.AwaitWithDeadline(&mu, absl::Condition(&never), t0 + absl::Seconds(i + 1));
      timed_out[i] = held ? 0 : 1;
    });
  }
  ASSERT_TRUE(env.AwaitWaiters(4, kGenerous));
  env.Advance(absl::Seconds(1));
  threads[0].join();
  EXPECT_EQ(env.waiters(), 3u);
  env.Advance(absl::Seconds(10));
  for (int i = 1; i < 4; ++i) threads[i].join();
  EXPECT_EQ(timed_out, std::vector<int>({1, 1, 1, 1}));
}

}  // namespace
}  // namespace gradstream
