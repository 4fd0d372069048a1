// Which workers join or leave a job, and at which clock. Pure functions of
// their inputs: no clock, no threads, no RPCs, no coordinator state; the
// reconcile loop (reconciler.h) gathers the inputs and applies the plan
// through the job table (see [membership epochs] in coordinator.h).
//
// NOTE: [membership plan] A change takes effect at a clock boundary every
// party hears of before anyone reaches it: in worker clocks, never chunk
// versions, at the job's current clock plus what the fastest rate covers in
// the lead time (plus 10); with no active member, where the job stopped; a
// departure at the clock the worker never completed. See
// docs/design/coordinator-membership-plan.md.
//
// NOTE: [elastic jobs] A job with a range MIN:MAX starts once MIN workers
// are idle, grows towards MAX as workers idle, shrinks without failing when
// members go, and below MIN keeps training while it waits for workers, for
// at most min_workers_timeout_s. See docs/design/coordinator-elastic-jobs.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_MEMBERSHIP_PLANNER_H_
#define GRADSTREAM_SERVER_COORDINATOR_MEMBERSHIP_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace gradstream::coordinator {

// One member of the job as the planner sees it.
struct MemberClock {
  uint64_t worker_id = 0;
  bool leaving = false;   // has a leave clock already; not counted as active
  uint64_t clock = 0;     // last heartbeat's clock (0 when unknown)
  double clock_rate = 0;  // clocks per second from its heartbeats ([planning rate])
};

// Where the job's shards are, from one round of GetStats.
struct ShardClocks {
  uint64_t min_clock = 0;    // slowest member's clock, over the job's shards
  uint64_t max_version = 0;  // sync rounds applied (0 in other modes: versions count pushes)
  uint64_t max_clock = 0;    // fastest member's clock, over the job's shards
};

// Everything a plan depends on.
struct PlanInput {
  uint32_t desired_workers = 0;  // an elastic job's MAX
  uint32_t min_workers = 0;      // an elastic job's MIN; 0 = not elastic ([elastic jobs])
  std::vector<MemberClock> members;   // the job's members, oldest first
  std::vector<uint64_t> free_workers;  // healthy workers without a job, preferred first
  ShardClocks shards;
  bool bounded = false;         // BOUNDED consistency ...
  uint64_t staleness = 0;       // ... with this bound
  double job_clock_rate = 0;    // clocks per second, from the shards ([planning rate])
  uint64_t last_epoch_clock = 0;  // newest epoch's effective clock (0: none)
  uint64_t steps = 0;           // the job's last step
  absl::Duration lead_time;     // how long members need to hear of a change
};

// What to do with the job's members.
struct MembershipPlan {
  enum class Action {
    kNone,   // nothing to change; leave the job's message as it is
    kWait,   // a change is wanted but cannot be made now: show `message`
    kJoin,   // `join` start pushing at `clock`
    kLeave,  // `leave` finish the clocks before `clock`, then leave
  };
  Action action = Action::kNone;
  std::vector<uint64_t> join;
  std::vector<uint64_t> leave;
  uint64_t clock = 0;
  std::string reason;   // for kJoin / kLeave: the new epoch's reason
  std::string message;  // for kWait: why nothing changes
};

// The first members of a pending job: the first `desired` free workers, once
// there are that many, or once `grace_over` with at least one. An elastic job
// (`min_workers` > 0, see [elastic jobs]) starts once `min_workers` are free,
// with up to `desired` of them, grace or not. The plan joins them at clock 0
// (reason "start") or waits.
MembershipPlan PlanStart(uint32_t desired, const std::vector<uint64_t>& free_workers,
                         bool grace_over, uint32_t min_workers = 0);

// Scaling a running job towards `desired_workers` (see [membership plan]):
// free workers join at the lead clock (or where the idle job stopped), or
// the most recently joined active members leave at the lead clock, so rank 0
// (initialization, evaluation) stays. An elastic job below MAX with no free
// worker waits only when it is below MIN (see [elastic jobs]).
MembershipPlan PlanScaling(const PlanInput& in);

// The clock a change planned now must take effect at, while members run.
uint64_t LeadClock(const PlanInput& in);

// Where joiners start when no member is active: no lead.
uint64_t IdleJoinClock(const PlanInput& in);

// The clock a departed worker's epoch takes effect at: the one it never
// completed.
inline uint64_t DepartureClock(uint64_t last_clock, uint64_t shard_min_clock) {
  return last_clock > shard_min_clock ? last_clock : shard_min_clock;
}

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_MEMBERSHIP_PLANNER_H_
