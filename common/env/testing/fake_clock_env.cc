// A clock that tests move; see fake_clock_env.h.
#include "common/env/testing/fake_clock_env.h"

#include <atomic>
#include <vector>

#include "absl/base/thread_annotations.h"

#include "glog/logging.h"

namespace gradstream::testing {

// NOTE: [fake clock wake-up]
// absl evaluates a waiter's Condition only when someone releases the mutex
// it waits on, and the waiter's mutex is the caller's, not ours. So a wait
// registers itself; Advance() marks the waits its new time has reached as
// due and then locks and unlocks each one's mutex, which makes absl look at
// the condition again (it is "cond or due"). Advance() never holds mu_ while
// it takes a waiter's mutex, and a waiter that leaves lets go of its own
// mutex until no Advance() is about to touch it (`pokes`), because that mutex
// may die as soon as the wait returns. Lock order: a waiter's mutex, then mu_.
struct FakeClockEnv::Waiter {
  absl::Mutex* mu;  // the caller's; null for SleepFor, which waits on mu_
  absl::Time deadline;
  std::atomic<bool> due{false};
  int pokes = 0;  // guarded by FakeClockEnv::mu_: Advance() calls about to lock `mu`
};

FakeClockEnv::FakeClockEnv(Env* target, absl::Time start) : EnvWrapper(target), now_(start) {}

FakeClockEnv::~FakeClockEnv() {
  absl::MutexLock lock(&mu_);
  CHECK(waiters_.empty()) << "FakeClockEnv destroyed while a wait is in progress";
}

absl::Time FakeClockEnv::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClockEnv::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  Waiter w{nullptr, now_ + d};
  if (now_ >= w.deadline) return;
  waiters_.insert(&w);
  // On mu_, so Advance() wakes it by releasing mu_.
  mu_.Await(absl::Condition(
      +[](Waiter* x) { return x->due.load(std::memory_order_acquire); }, &w));
  waiters_.erase(&w);
}

bool FakeClockEnv::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                     absl::Time deadline) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  for (;;) {
    if (cond.Eval()) return true;
    Waiter w{mu, deadline};
    {
      absl::MutexLock lock(&mu_);
      if (now_ >= deadline) return false;
      waiters_.insert(&w);
    }
    struct Args {
      const absl::Condition* cond;
      Waiter* w;
    } args{&cond, &w};
    mu->Await(absl::Condition(
        +[](Args* a) { return a->w->due.load(std::memory_order_acquire) || a->cond->Eval(); },
        &args));
    bool left = false;
    {
      absl::MutexLock lock(&mu_);
      if (w.pokes == 0) {
        waiters_.erase(&w);
        left = true;
      }
    }
    if (!left) {
      // An Advance() is about to lock `mu` for this wait ([fake clock wake-up]).
      mu->Unlock();
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](Waiter* x) ABSL_NO_THREAD_SAFETY_ANALYSIS { return x->pokes == 0; }, &w));
        waiters_.erase(&w);
      }
      mu->Lock();
    }
    // `cond` again (it may have changed while `mu` was free), then the clock.
  }
}

void FakeClockEnv::Advance(absl::Duration d) {
  CHECK_GE(d, absl::ZeroDuration()) << "a clock does not go back";
  std::vector<Waiter*> poke;
  {
    absl::MutexLock lock(&mu_);
    now_ += d;  // SleepFor's conditions are on mu_: re-evaluated as it is released
    for (Waiter* w : waiters_) {
      if (w->deadline <= now_ && !w->due.load(std::memory_order_relaxed)) {
        w->due.store(true, std::memory_order_release);
        if (w->mu == nullptr) continue;  // SleepFor: waits on mu_
        ++w->pokes;
        poke.push_back(w);
      }
    }
  }
  for (Waiter* w : poke) {
    w->mu->Lock();
    w->mu->Unlock();  // absl re-evaluates the waiter's "cond or due"
    absl::MutexLock lock(&mu_);
    --w->pokes;
  }
}

size_t FakeClockEnv::PendingLocked() const {
  size_t n = 0;
  for (const Waiter* w : waiters_) n += w->due.load(std::memory_order_relaxed) ? 0 : 1;
  return n;
}

size_t FakeClockEnv::waiters() const {
  absl::MutexLock lock(&mu_);
  return PendingLocked();
}

bool FakeClockEnv::AwaitWaiters(size_t n, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  struct Args {
    const FakeClockEnv* env;
    size_t n;
  } args{this, n};
  return mu_.AwaitWithTimeout(
      absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->env->PendingLocked() >= a->n; },
          &args),
      timeout);
}

}  // namespace gradstream::testing
