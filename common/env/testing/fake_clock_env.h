// An Env whose clock moves only when a test moves it ([env time] in
// ../env.h): tests of deadlines, heartbeats, staleness and rate limits decide
// by logic, in no real time, and the same on a loaded machine as on an idle
// one.
#ifndef GRADSTREAM_COMMON_ENV_TESTING_FAKE_CLOCK_ENV_H_
#define GRADSTREAM_COMMON_ENV_TESTING_FAKE_CLOCK_ENV_H_

#include <cstddef>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/env/env.h"

namespace gradstream::testing {

// Files and threads come from `target`; the clock is its own. Thread-safe.
//
// Now() starts at `start` and changes only in Advance(). SleepFor() and
// AwaitWithDeadline() end by timeout exactly when an Advance() brings Now()
// to their deadline, never before, however long they wait in real time; an
// AwaitWithDeadline() whose condition becomes true ends then, as on the real
// clock. A test usually lets the code under test reach its wait
// (AwaitWaiters), then advances past the deadline it means to pass.
class FakeClockEnv : public EnvWrapper {
 public:
  explicit FakeClockEnv(Env* target = Env::Default(),
                        absl::Time start = absl::FromUnixSeconds(1'700'000'000));
  ~FakeClockEnv() override;  // no wait may still be in progress

  absl::Time Now() override ABSL_LOCKS_EXCLUDED(mu_);
  void SleepFor(absl::Duration d) override ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_LOCKS_EXCLUDED(mu_);

  // Moves the clock on by `d` (>= 0) and wakes every wait whose deadline
  // that reaches. Must not be called with a mutex held that a waiter waits
  // on.
  void Advance(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits in SleepFor() or AwaitWithDeadline() whose deadline the clock has
  // not reached yet (one that is due but has not returned is not counted).
  size_t waiters() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits in real time, up to `timeout` (a test's generous bound, not a
  // measurement), until at least `n` such waits are pending: the code under
  // test is parked, so an Advance() now passes a deadline it is waiting
  // for. False on timeout.
  [[nodiscard]] bool AwaitWaiters(size_t n, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter;

  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  size_t PendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Every wait in progress, each on its caller's stack.
  std::set<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::testing

#endif  // GRADSTREAM_COMMON_ENV_TESTING_FAKE_CLOCK_ENV_H_
