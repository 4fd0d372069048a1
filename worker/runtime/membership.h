// A worker's place in a job, as the coordinator assigns it: the one reading
// of an assignment both front-ends (the built-in trainer and the C ABI under
// the Python package) and gs_worker's script runner use.
#ifndef GRADSTREAM_WORKER_RUNTIME_MEMBERSHIP_H_
#define GRADSTREAM_WORKER_RUNTIME_MEMBERSHIP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "coordinator.pb.h"

namespace gradstream::runtime {

// A worker's place in a job at one membership epoch (plain form of
// coordinator.proto's Assignment).
struct Assignment {
  std::string job_id;
  bool job_active = false;   // PENDING or RUNNING; false = stop now
  uint32_t rank = 0;
  uint32_t world_size = 1;
  uint64_t epoch = 0;
  uint64_t epoch_clock = 0;  // rank / world_size hold from this clock on
  uint64_t join_clock = 0;
  bool leave = false;        // scale-down: finish clocks < leave_clock, then leave
  uint64_t leave_clock = 0;
};

Assignment AssignmentFromProto(const v1::Assignment& p);

// Whether `a` is job `job`'s and the job still runs: false ends the
// worker's part in it (cancelled, failed, done, or moved off it).
bool StillOurs(const Assignment& a, const std::string& job);

// Whether `a` asks the worker to train: an active job, and not a leave at
// or before the clock it would join at (the coordinator shows that while a
// rejoin's epoch is not committed yet).
bool Trains(const Assignment& a);

// Whether a worker that finished clock `clock` (clocks < clock done) leaves
// now: a scale-down whose leave clock it reached.
bool LeavesAt(const Assignment& a, uint64_t clock);

// Whether `now` adds a worker that trained `trained` and left back to the
// same job, from a later join clock: recognized without waiting to be moved
// off first (docs/design/worker-runtime.md, "Rejoin").
bool RejoinsAfter(const Assignment& trained, const Assignment& now);

// `latest` as it holds at clock `clock`: the rank and world size of the
// newest of the job's committed `epochs` effective at or before `clock`
// (inactive when worker `worker_id` is not a member of it). `latest` itself
// when no epoch is effective yet.
Assignment MembershipAt(const Assignment& latest, const std::vector<v1::MembershipEpoch>& epochs,
                        uint64_t worker_id, uint64_t clock);

// The newest assignment, written by the heartbeat thread. Thread-safe.
class AssignmentFeed {
 public:
  void Set(Assignment a) ABSL_LOCKS_EXCLUDED(mu_);
  Assignment Get() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Assignment current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::runtime

#endif  // GRADSTREAM_WORKER_RUNTIME_MEMBERSHIP_H_
