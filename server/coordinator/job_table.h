// The durable job table: every change of a job's record, each one write of
// the job log ([write durably, then apply] in job_log.h), with the workers
// it assigns or releases handled around that write. It decides nothing: the
// reconcile loop (reconciler.h) and the RPCs (coordinator.h) say what
// changes.
//
// NOTE: [ended jobs] A member leaving a job that ended decides nothing, so
// Detach() amends the record in memory and the next save writes it, not one
// write per member; a crash before that save restores the member, whose next
// heartbeat detaches it again. See docs/design/coordinator-ended-jobs.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_JOB_TABLE_H_
#define GRADSTREAM_SERVER_COORDINATOR_JOB_TABLE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/env/env.h"
#include "common/job/shard_map.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_log.h"
#include "server/coordinator/membership_planner.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"
#include "server/coordinator/worker_pool.h"

namespace gradstream::coordinator {

// NotFound naming job `id` and where to look.
absl::Status JobNotFound(const std::string& id);

// Not thread-safe: the Coordinator calls it under its mutex. Every change
// that fails to be written leaves the record (and the workers) as it was, and
// returns the storage's error; a change of a job that does not exist is
// NotFound. An `id` argument must not refer into a record: a change replaces
// the record's content.
class JobTable {
 public:
  // `store`, `write_rest`, `metrics` and `held` are the job log's (see
  // JobLog). `workers` and `env` must outlive the table; `*pool_changed` is
  // set whenever a change assigns or releases a worker, whose pool is
  // written lazily.
  JobTable(StateStorage* store, JobLog::WriteRest write_rest, CoordinatorMetrics* metrics,
           absl::Mutex* held, WorkerPool* workers, Env* env, bool* pool_changed);
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  const JobLog& log() const { return log_; }
  const JobRecord* Find(const std::string& id) const { return log_.Find(id); }
  const std::map<std::string, JobRecord>& records() const { return log_.records(); }
  void Restore(DurableState& state) { log_.Restore(state); }
  // See JobLog::Checkpoint.
  [[nodiscard]] absl::Status Checkpoint(absl::FunctionRef<JobProgress(const JobRecord&)> progress) {
    return log_.Checkpoint(progress);
  }
  // Deletes finished jobs, see JobLog::Remove.
  [[nodiscard]] absl::Status Remove(const std::vector<std::string>& ids) {
    return log_.Remove(ids);
  }

  // A pending job of `spec` with the secret `token`; returns its id.
  [[nodiscard]] absl::StatusOr<std::string> Submit(const JobSpec& spec, const std::string& token);
  // The desired worker count (an elastic job's MAX) and MIN.
  [[nodiscard]] absl::Status Scale(const std::string& id, uint32_t workers, uint32_t min_workers);

  // Takes `worker` out of job `id`: folds its counters into the record and,
  // when `epoch_reason` is not empty and the job has not ended, adds an epoch
  // at `clock` without it, which marks it departed. `also`, if set, changes
  // the record in the same write. Releases the worker once that is durable;
  // leaving a job that ended writes nothing at once ([ended jobs]).
  [[nodiscard]] absl::Status Detach(const std::string& id, WorkerRecord& worker, uint64_t clock,
                                    const std::string& epoch_reason,
                                    const std::function<void(JobRecord&)>& also = nullptr);
  // Applies a kJoin / kLeave plan as a new epoch (the joiners assigned before
  // the write, given back if it fails); `start` also marks the job RUNNING.
  // A kWait plan only sets the job's message.
  [[nodiscard]] absl::Status ApplyPlan(const std::string& id, const MembershipPlan& plan,
                                       bool start);
  // The job's message; a write only when it changes, and a message that
  // could not be written is dropped (the caller sets it again).
  void SetMessage(const std::string& id, const std::string& message);
  // The job ends in `state` with `message` and its final `progress`.
  [[nodiscard]] absl::Status Finish(const std::string& id, JobState state,
                                    const std::string& message, const JobProgress& progress);

  // Script jobs (see [script jobs] in reconciler.h): the map built from the
  // declaration, and the spec with the declared tensors.
  [[nodiscard]] absl::Status SetShardMap(const std::string& id, const ShardMap& map);
  [[nodiscard]] absl::Status SetSpec(const std::string& id, const JobSpec& spec);
  // Appends `point` to the job's history (see [progress history]).
  [[nodiscard]] absl::Status AddProgressPoint(const std::string& id, const ProgressPoint& point);
  // The newest epoch every shard acknowledged (see [membership epochs]).
  [[nodiscard]] absl::Status Commit(const std::string& id, uint64_t epoch);
  // Since when an elastic job is below its MIN (0: it is not).
  [[nodiscard]] absl::Status SetBelowMinSince(const std::string& id, int64_t unix_ms);

 private:
  absl::Time Now() const { return env_->Now(); }

  JobLog log_;
  WorkerPool* const workers_;
  Env* const env_;
  bool* const pool_changed_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_JOB_TABLE_H_
