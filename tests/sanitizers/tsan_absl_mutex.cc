// ThreadSanitizer support for the system's (uninstrumented) Abseil: makes
// absl::Mutex and absl::CondVar visible to TSan. Linked into every
// executable of a -DGS_SANITIZE=thread build (CMakeLists.txt); never into a
// normal build.
//
// Why: Debian's libabsl_synchronization.so is built without TSan, so its
// lock and unlock are invisible to it. TSan would then see no
// happens-before edge between two threads that take the same absl::Mutex
// and would report every ABSL_GUARDED_BY member of gradstream (and of
// gRPC, which locks through absl too) as a data race. An instrumented
// Abseil annotates its Mutex with __tsan_mutex_* calls; this file does the
// same from outside: it defines the Mutex/CondVar entry points in the
// executable, which the dynamic linker prefers over the library's (for
// calls from gRPC and Abseil themselves too), annotates, and forwards to the
// library's definitions found with dlsym(RTLD_NEXT).
//
// Semantics follow Abseil's own annotations (mutex.cc): lock and unlock are
// annotated around the real call; Await and CondVar::Wait release the mutex
// and take it again inside, so they are annotated as an unlock before and a
// lock after (at worst this adds an edge from a thread that held the mutex
// in between, which it then really did). The accesses the real calls make,
// including Condition functions Abseil evaluates on behalf of a waiter, run
// inside TSan's ignore window, as with an instrumented Abseil.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define GS_TSAN_STR2(x) #x
#define GS_TSAN_STR(x) GS_TSAN_STR2(x)

// The library's definition of absl::<ABSL_OPTION_INLINE_NAMESPACE_NAME>::<rest>,
// `rest` being the mangled tail after the inline namespace (see nm -D).
void* Real(const char* rest) {
  const std::string ns = GS_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + rest;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found: %s\n", name.c_str(), dlerror());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealFn(const char* rest) {
  return reinterpret_cast<Fn>(Real(rest));
}

// Calls the library makes into these entry points while one of them runs
// (through its PLT, e.g. a Condition that locks) are forwarded unannotated:
// the outer call already annotated the operation.
thread_local int depth = 0;
struct Nested {
  Nested() { ++depth; }
  ~Nested() { --depth; }
};

// Mutexes this thread holds and whether in reader mode, so a Wait or Await
// releases and retakes them in the mode they are held in.
thread_local std::vector<std::pair<const void*, bool>> held;

void Held(const void* mu, bool reader) { held.emplace_back(mu, reader); }
void Released(const void* mu) {
  for (size_t i = held.size(); i-- > 0;) {
    if (held[i].first == mu) {
      held.erase(held.begin() + i);
      return;
    }
  }
}
bool HeldAsReader(const void* mu) {
  for (size_t i = held.size(); i-- > 0;) {
    if (held[i].first == mu) return held[i].second;
  }
  return false;
}

unsigned Mode(bool reader) { return reader ? __tsan_mutex_read_lock : 0; }

// TSan checks the lock's read of the mutex word before it applies the
// lock's acquire, so the first lock of a mutex that another thread
// constructed, locked and unlocked races with the constructor's write unless
// something else ordered the two threads. Here that something is gRPC
// handing a new call's reactor to a completion thread, which TSan cannot
// see. So Lock first acquires what the last unlock released (a subset of
// what the lock acquires anyway; it must precede pre_lock, which turns sync
// annotations off until post_lock). A mutex published without ever being
// unlocked by its creator still reports.
void AcquireFirst(absl::Mutex* mu) { __tsan_acquire(mu); }

// Lock-like operations that always return holding `mu` (Lock, LockWhen...).
template <typename Call>
auto Acquire(absl::Mutex* mu, bool reader, Call call) {
  if (depth > 0) return call();
  Nested n;
  AcquireFirst(mu);
  __tsan_mutex_pre_lock(mu, Mode(reader));
  auto result = call();
  __tsan_mutex_post_lock(mu, Mode(reader), 0);
  Held(mu, reader);
  return result;
}

// Waits that release `mu` inside and hold it again on return.
template <typename Call>
auto ReleaseAndReacquire(absl::Mutex* mu, Call call) {
  if (depth > 0) return call();
  Nested n;
  const bool reader = HeldAsReader(mu);
  __tsan_mutex_pre_unlock(mu, Mode(reader));
  __tsan_mutex_post_unlock(mu, Mode(reader));
  __tsan_mutex_pre_lock(mu, Mode(reader));
  auto result = call();
  __tsan_mutex_post_lock(mu, Mode(reader), 0);
  return result;
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex4LockEv");
  Acquire(this, false, [&] { return (real(this), 0); });
}

void Mutex::ReaderLock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  Acquire(this, true, [&] { return (real(this), 0); });
}

bool Mutex::TryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  if (depth > 0) return real(this);
  Nested n;
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool ok = real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_try_lock | (ok ? 0 : __tsan_mutex_try_lock_failed),
                         0);
  if (ok) Held(this, false);
  return ok;
}

bool Mutex::ReaderTryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  if (depth > 0) return real(this);
  Nested n;
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_read_lock);
  const bool ok = real(this);
  __tsan_mutex_post_lock(
      this, __tsan_mutex_try_read_lock | (ok ? 0 : __tsan_mutex_try_lock_failed), 0);
  if (ok) Held(this, true);
  return ok;
}

void Mutex::Unlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex6UnlockEv");
  if (depth > 0) return real(this);
  Nested n;
  Released(this);
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

void Mutex::ReaderUnlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  if (depth > 0) return real(this);
  Nested n;
  Released(this);
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  Acquire(this, false, [&] { return (real(this, cond), 0); });
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  Acquire(this, true, [&] { return (real(this, cond), 0); });
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Acquire(this, false, [&] { return real(this, cond, timeout); });
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquire(this, false, [&] { return real(this, cond, deadline); });
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return Acquire(this, true, [&] { return real(this, cond, timeout); });
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return Acquire(this, true, [&] { return real(this, cond, deadline); });
}

void Mutex::Await(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  ReleaseAndReacquire(this, [&] { return (real(this, cond), 0); });
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  return ReleaseAndReacquire(this, [&] { return real(this, cond, timeout); });
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  return ReleaseAndReacquire(this, [&] { return real(this, cond, deadline); });
}

void CondVar::Wait(Mutex* mu) {
  static auto real = RealFn<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  ReleaseAndReacquire(mu, [&] { return (real(this, mu), 0); });
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  return ReleaseAndReacquire(mu, [&] { return real(this, mu, timeout); });
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  return ReleaseAndReacquire(mu, [&] { return real(this, mu, deadline); });
}

ABSL_NAMESPACE_END
}  // namespace absl
