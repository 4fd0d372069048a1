// The pulls of one job that could not be answered when they arrived, parked
// until the job's state lets them be answered, their deadline passes, or the
// job closes (DropJob, shutdown). Nothing blocks a thread: a parked pull is
// its arguments plus the callback that delivers its result.
//
// NOTE: [parked pulls]
// A pull's callback runs exactly once. It is answered with parameters by the
// job (Job::Serve) or, without them, by PullWaitList::Fail, the one way a
// pull ends in an error: unknown chunk or clock out of its window, deadline
// passed (Expire), its stream ended (CancelStream), job closed (Close). Readiness is checked and a
// pull parked under the wait-list's lock, and every state change that may make a pull ready calls
// TakeReady, which takes the same lock afterwards: a pull is either seen ready by its own check or
// by the wake-up, never lost between the two. No lock is held while a callback runs.
#ifndef GRADSTREAM_SERVER_SHARD_PULL_WAITLIST_H_
#define GRADSTREAM_SERVER_SHARD_PULL_WAITLIST_H_

#include <cstddef>
#include <functional>
#include <list>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Delivers a pull's result; see [parked pulls].
using PullCallback = std::function<void(PullResult)>;

struct PendingPull {
  PullArgs args;
  PullCallback done;
};

// Thread-safe. Lock order: the wait-list's lock comes before any lock the
// `ready` predicates take (the job's membership, chunk state).
class PullWaitList {
 public:
  // Whether a pull may be answered now. Called with the wait-list's lock
  // held: it must not call back into the wait-list.
  using ReadyFn = absl::FunctionRef<bool(const PullArgs&)>;
  // The error a pull that is failed ends with.
  using StatusFn = absl::FunctionRef<absl::Status(const PullArgs&)>;

  PullWaitList() = default;
  PullWaitList(const PullWaitList&) = delete;
  PullWaitList& operator=(const PullWaitList&) = delete;

  // Answers `done` with `why` (not OK) and no parameters.
  static void Fail(const PullArgs& args, const PullCallback& done, absl::Status why);

  // Returns `pull` when `ready(pull.args)`: the caller answers it. Otherwise
  // parks it, or, once the list is closed, fails it with the close status;
  // both return nullopt.
  [[nodiscard]] std::optional<PendingPull> ParkUnlessReady(PendingPull pull, ReadyFn ready);

  // Unparks every pull that is ready now, in arrival order; the caller
  // answers them.
  [[nodiscard]] std::vector<PendingPull> TakeReady(ReadyFn ready);

  // Fails every parked pull whose deadline is at or before `now` with
  // `why(args)` (DeadlineExceeded, as the job words it). Returns the earliest
  // deadline of the pulls still parked (InfiniteFuture if none).
  absl::Time Expire(absl::Time now, StatusFn why);

  // Fails every parked pull, and every later one that would park, with `why`
  // (Cancelled when `why` is OK). Idempotent; the first status stays.
  void Close(const absl::Status& why);

  // Fails the parked pulls of Session stream `stream` (PullArgs::stream)
  // with `why`: a pull ends with its stream. The list stays open.
  void CancelStream(uint64_t stream, const absl::Status& why);

  // Parked pulls.
  size_t size() const;

 private:
  // The one way parked pulls end in an error (see [parked pulls]): unparks
  // those `which` selects and fails each with `why(args)`, no lock held.
  void FailIf(absl::FunctionRef<bool(const PullArgs&)> which, StatusFn why);

  mutable absl::Mutex mu_;
  std::list<PendingPull> parked_ ABSL_GUARDED_BY(mu_);  // arrival order
  absl::Status closed_ ABSL_GUARDED_BY(mu_);            // set by Close
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_PULL_WAITLIST_H_
