// The coordinator's worker pool: registration, incarnations, heartbeats and
// liveness. A worker belongs to at most one job (status.job_id); which
// workers a job has, and from which clock, is the job's record (job_log.h).
#ifndef GRADSTREAM_SERVER_COORDINATOR_WORKER_POOL_H_
#define GRADSTREAM_SERVER_COORDINATOR_WORKER_POOL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/coordinator/clock_rate.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// One registered worker.
struct WorkerRecord {
  WorkerStatus status;      // persisted part (id, incarnation, name, job)
  WorkerProgress progress;  // from its last heartbeat for its job
  absl::Time last_heartbeat;
  bool dead = false;  // missed heartbeats or declared dead: must register again
  ClockRate clock_rate{absl::Milliseconds(50)};
  // Examples trained in its current job, integrated from its reported rates
  // (a script job's estimate, see [run average] in views.h).
  double reported_samples = 0;
  absl::Time last_report = absl::InfinitePast();
};

// Not thread-safe: the Coordinator calls it under its mutex. Records stay at
// their address for the pool's lifetime (workers are never forgotten).
class WorkerPool {
 public:
  explicit WorkerPool(absl::Duration heartbeat_timeout) : heartbeat_timeout_(heartbeat_timeout) {}
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Restores the pool from the state file. A coordinator restart is not the
  // workers' fault: each gets a full timeout from `now` to reach the new
  // process before it is declared dead.
  void Restore(const DurableState& state, absl::Time now);
  // Adds the workers and the next worker id to `state`.
  void WriteTo(DurableState& state) const;

  // nullptr for an unknown id.
  WorkerRecord* Find(uint64_t id);
  const WorkerRecord* Find(uint64_t id) const;

  // True when `request` comes from the process `worker` already is (same
  // incarnation, not declared dead): the coordinator restarted, not the
  // worker. Otherwise registering starts a new incarnation, and the caller
  // must first take the worker out of its job.
  static bool SameProcess(const WorkerRecord& worker, const WorkerRegistration& request);

  // Registers a worker (a new id for worker_id 0, a new incarnation for a
  // known one of another process) and stamps its heartbeat. A new
  // incarnation is IDLE without a job.
  WorkerRecord& Register(const WorkerRegistration& request, absl::Time now);

  // Checks a heartbeat and stamps the worker's liveness and state (the state
  // it reports for its current job; IDLE when it reports another job).
  // NotFound: unknown worker; FailedPrecondition: declared dead or stale
  // incarnation.
  absl::StatusOr<WorkerRecord*> Beat(const HeartbeatReport& request, absl::Time now);
  // Records a heartbeat's progress for the worker's current job, which it
  // joined at `join_clock`: its clock rate is measured from there (see
  // [joiner rate]), and starts over after a `capped` clock ([claimed
  // clocks] in reconciler.cc).
  static void Report(WorkerRecord& worker, const WorkerProgress& progress, absl::Time now,
                     uint64_t join_clock = 0, bool capped = false);
  // Examples `worker` trained in its job of `spec` since `join_clock` (see
  // [run average] in views.h).
  static uint64_t Samples(const WorkerRecord& worker, const JobSpec& spec, uint64_t join_clock);

  // Live workers whose last heartbeat is older than the timeout at `now`.
  std::vector<uint64_t> Overdue(absl::Time now) const;
  // The coordinator did not run for `lost` (see [coordinator stall]): moves
  // every live worker's last heartbeat on by that much, to `now` at most.
  void Excuse(absl::Duration lost, absl::Time now);
  // Declares a worker dead: its heartbeats are refused until it registers.
  static void MarkDead(WorkerRecord& worker);
  // Live when not declared dead and heard from within the timeout.
  bool Healthy(const WorkerRecord& worker, absl::Time now) const;

  // Live workers without a job that are not stopping, by id.
  std::vector<uint64_t> Free() const;
  // Gives `worker` to job `job_id`.
  static void Assign(WorkerRecord& worker, const std::string& job_id);
  // Takes `worker` out of its job: IDLE, without progress or clock rate.
  static void Release(WorkerRecord& worker);

  const std::map<uint64_t, WorkerRecord>& workers() const { return workers_; }

 private:
  const absl::Duration heartbeat_timeout_;
  uint64_t next_worker_id_ = 1;
  std::map<uint64_t, WorkerRecord> workers_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_WORKER_POOL_H_
