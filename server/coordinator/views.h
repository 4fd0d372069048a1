// What the coordinator shows: a job's status and progress, a worker's
// assignment, the cluster. Read-only over the job log, the worker pool and
// the shard fleet.
//
// NOTE: [run average] Once a job ended, its throughput, and each rank's, is
// the run's average (samples trained over the time from start to end), not
// the members' last rate windows. See docs/design/coordinator-run-average.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_VIEWS_H_
#define GRADSTREAM_SERVER_COORDINATOR_VIEWS_H_

#include "absl/time/time.h"
#include "common/env/env.h"
#include "server/coordinator/job_log.h"
#include "server/coordinator/shard_fleet.h"
#include "server/coordinator/types.h"
#include "server/coordinator/worker_pool.h"

namespace gradstream::coordinator {

// Not thread-safe: the Coordinator calls it under the mutex that guards
// what it reads. `jobs`, `workers`, `fleet` and `env` must outlive it.
class Views {
 public:
  Views(const JobLog* jobs, const WorkerPool* workers, const ShardFleet* fleet, Env* env,
        absl::Duration heartbeat_timeout);
  Views(const Views&) = delete;
  Views& operator=(const Views&) = delete;

  // The job's progress now: its members' reports folded into its record,
  // the clock from its shards while it runs ([shard progress]).
  JobProgress Progress(const JobRecord& job) const;
  // The job as status shows it; without `full`, without its shard map,
  // epochs and history.
  JobStatus Render(const JobRecord& job, bool full) const;
  // The worker's place in its job: the newest committed epoch that lists it
  // (see [membership epochs] in coordinator.h), or only the job's state once
  // it ended; no job while its epoch is not committed.
  Assignment AssignmentOf(const WorkerRecord& worker) const;
  ClusterStatus Cluster() const;

 private:
  absl::Time Now() const { return env_->Now(); }
  // Per tensor, its chunks' pull precision as the shards last reported it.
  std::vector<TensorPrecision> TensorPrecisions(const JobRecord& job) const;
  // Per table of the job, its partitions' rows summed (the shards' last answers).
  std::vector<TableProgress> Tables(const JobRecord& job) const;

  const JobLog* const jobs_;
  const WorkerPool* const workers_;
  const ShardFleet* const fleet_;
  Env* const env_;
  const absl::Duration heartbeat_timeout_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_VIEWS_H_
