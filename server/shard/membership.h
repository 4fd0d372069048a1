// One job's membership on one shard: the epochs the coordinator sent (who
// pushes from which clock on), each worker's clock (its latest
// ClockAdvance) and each worker's newest incarnation (which Hello may join).
// The consistency controllers read it through JobContext (consistency.h);
// Job forwards to it.
//
// NOTE: [member clocks]
// A worker's clock c means it finished every clock below c. A member that
// never advanced is at the effective clock of the epoch it joined in (the
// oldest of the unbroken run of newest epochs that list it), so a worker
// added at clock 7 does not hold back a bounded pull at clock 9 as if it
// were at 0. The slowest member (MinClock) is taken over the newest epoch
// only: a removed worker holds nothing back.
//
// NOTE: [rejoin clock]
// A worker that an epoch adds (a joiner or a rejoiner, any mode) forgets its
// old clock; its clock becomes the epoch's start clock
//     start = max(effective clock, passed)
// where `passed` is what the caller knows this shard already passed (sync:
// the newest chunk version), so a rejoiner never pulls MinClock back and a
// late sync join ([late join] in job.cc) starts where the shard is. Why:
// docs/design/rejoin-clock.md.
//
// NOTE: [departed] A worker that died (or failed, restarted, left on a
// signal) pushes nothing more. Its removal takes effect at the clock it never
// completed, unless a planned change (a scale-up joining at J) already holds
// a later clock: epochs only move forward, so the removal is then at J, and
// the rounds in between would wait for the dead worker forever. So an epoch
// also names the workers it lets go for good, and WorkerClock() of such a
// worker is "finished everything": every round that waits on it completes
// with the others ([lost rounds] in bsp_controller.cc), whatever its clock.
// A later epoch that adds the worker again (a new incarnation) clears it.
#ifndef GRADSTREAM_SERVER_SHARD_MEMBERSHIP_H_
#define GRADSTREAM_SERVER_SHARD_MEMBERSHIP_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/shard/checkpoint.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Thread-safe. Its lock is the innermost of a job's locks (see job.h): no
// method calls out while holding it.
class Membership {
 public:
  // Starts with the CreateJob epoch.
  explicit Membership(MembershipEpoch first);

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Records `worker`'s incarnation and returns the newest epoch.
  // FailedPrecondition for an incarnation older than the newest seen.
  [[nodiscard]] absl::StatusOr<uint64_t> Hello(uint64_t worker, uint64_t incarnation);
  // FailedPrecondition once a newer incarnation of `worker` said Hello.
  [[nodiscard]] absl::Status CheckIncarnation(uint64_t worker, uint64_t incarnation) const;

  // The worker finished clock-1. Returns false when that is not news (an
  // older or repeated advance, e.g. replayed after a reconnect).
  bool AdvanceClock(uint64_t worker, uint64_t clock);
  // `worker`'s latest advance; 0 when it never advanced; UINT64_MAX once it
  // departed (see [departed]).
  uint64_t WorkerClock(uint64_t worker) const;
  // `worker`'s clock for the windows (see [clock windows] in
  // consistency.h): its latest advance, or the clock it joined at (the
  // oldest of the unbroken run of newest epochs that list it) when later.
  uint64_t MemberClock(uint64_t worker) const;
  // Ok when `clock` is at most MemberClock(worker) + `window`, or while
  // `worker` catches up after a restore (AllowCatchUp); OutOfRange naming
  // `what`, the clock and the window otherwise.
  [[nodiscard]] absl::Status CheckClock(uint64_t worker, uint64_t clock, uint64_t window,
                                        const char* what) const;
  // Whether `worker` is listed in the newest epoch.
  bool IsCurrentMember(uint64_t worker) const;
  // The shard lost track of its members' clocks (restored from a
  // checkpoint): until each member's next ClockAdvance, CheckClock lets its
  // clocks through. See [clock windows].
  void AllowCatchUp();

  // Adds an epoch; returns the newest epoch. InvalidArgument when the
  // effective clock goes backwards; an epoch not newer than the newest is a
  // no-op.
  [[nodiscard]] absl::StatusOr<uint64_t> Update(MembershipEpoch epoch);
  // The workers an Update added and the clock they start at (see [rejoin
  // clock]).
  struct Joined {
    std::vector<uint64_t> workers;
    uint64_t start = 0;
  };
  // As Update(epoch); the workers it adds start at max(effective clock,
  // `passed`), and are listed in `joined` (not null).
  [[nodiscard]] absl::StatusOr<uint64_t> Update(MembershipEpoch epoch, uint64_t passed,
                                                Joined* joined);

  // As JobContext::MembersAt / NextStaffedClock / NextEpochClock /
  // LeftBefore (consistency.h).
  std::vector<uint64_t> MembersAt(uint64_t clock, uint64_t* epoch) const;
  std::optional<uint64_t> NextStaffedClock(uint64_t clock) const;
  std::optional<uint64_t> NextEpochClock(uint64_t clock) const;
  bool LeftBefore(uint64_t worker, uint64_t clock) const;

  // The slowest member of the newest epoch (see [member clocks]); the
  // epoch's effective clock when it has no members.
  uint64_t MinClock() const;

  struct Summary {
    uint64_t min_clock = 0;  // MinClock()
    uint64_t max_clock = 0;  // the fastest member of the newest epoch
    uint64_t epoch = 0;      // the newest epoch
    uint32_t members = 0;    // workers in it
  };
  Summary Summarize() const;

  // Copies epochs, worker clocks and incarnations into `snap`, and returns
  // MinClock() as of that copy.
  uint64_t SaveTo(JobSnapshot* snap) const;
  // Replaces the state with a checkpoint's. The current newest epoch (the
  // CreateJob one) is kept on top when it is newer than the checkpoint's.
  void RestoreFrom(const JobSnapshot& snap);
  // Replaces the epochs with `epochs` (the coordinator's, oldest first) and
  // raises every member's clock to at least the start of its run in them
  // (see [rejoin clock]). InvalidArgument, changing nothing, when they are
  // empty or not ordered by epoch and effective clock.
  [[nodiscard]] absl::Status ReplaceEpochs(std::vector<MembershipEpoch> epochs);

 private:
  // The epoch in effect at `clock` (nullptr before the first one).
  const MembershipEpoch* EpochAtLocked(uint64_t clock) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The clock of `worker`, a member of the newest epoch.
  uint64_t MemberClockLocked(uint64_t worker) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  uint64_t MinClockLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  uint64_t MemberClockForWindowLocked(uint64_t worker) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Sorted by effective clock; never empty.
  std::vector<MembershipEpoch> epochs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> clocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> incarnations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> departed_ ABSL_GUARDED_BY(mu_);  // see [departed]
  // After AllowCatchUp: members whose clock is known again (they advanced).
  bool catching_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_set<uint64_t> caught_up_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_MEMBERSHIP_H_
