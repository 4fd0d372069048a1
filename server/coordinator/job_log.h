// The write path of the coordinator's durable state: every job's record
// (spec, state, members, membership epochs, shard map, committed epoch,
// progress) and the next job id, each change written to the StateStorage
// before it is applied in memory (LevelDB's VersionSet::LogAndApply).
//
// NOTE: [write durably, then apply] Create(), Update(), Checkpoint() and
// Remove() build the change on a copy, write it, and install the copy only
// once the write committed: what a shard or worker can hear of is on disk,
// and a failed write leaves memory as it was. Workers are assigned before
// the write that lists them and released after the one that removes them.
// See docs/design/coordinator-write-durably-then-apply.md.
//
// NOTE: [state writes off the lock] The file is written with the caller's
// lock released (`held`); the caller keeps every other writer out with a
// second lock (the Coordinator's write_mu_), so heartbeats that change
// nothing never wait for the disk. See
// docs/design/coordinator-state-writes-off-the-lock.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_JOB_LOG_H_
#define GRADSTREAM_SERVER_COORDINATOR_JOB_LOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// Appends membership epoch {epochs+1, clock, the non-leaving members} to
// `job` and renumbers the members' ranks in epoch order. The effective clock
// never goes back: it is raised to the previous epoch's. Call it only inside
// a JobLog edit.
void AppendEpoch(JobRecord& job, uint64_t effective_clock, const std::string& reason,
                 absl::Time now);

// The member `worker_id` of `job`, or nullptr.
const JobMember* FindMember(const JobStatus& job, uint64_t worker_id);

// Not thread-safe: the Coordinator calls it under its mutex (as LevelDB's
// DBImpl calls its VersionSet).
class JobLog {
 public:
  // Adds the parts of the state file the log does not own (shards, workers,
  // next worker id) to the state about to be written.
  using WriteRest = std::function<void(DurableState&)>;
  using Edit = absl::FunctionRef<void(JobRecord&)>;

  // `store` == nullptr keeps the state in memory only (every write
  // succeeds). `store` and `metrics` must outlive the log. `held`, if not
  // nullptr, is the mutex every caller holds: it is released while the file
  // is written and held again before the change is applied (see [state
  // writes off the lock]); the caller must keep every other writer out.
  JobLog(StateStorage* store, WriteRest write_rest, CoordinatorMetrics* metrics,
         absl::Mutex* held = nullptr);
  JobLog(const JobLog&) = delete;
  JobLog& operator=(const JobLog&) = delete;

  // Replaces the table with the one in `state` (at open, before any write).
  // The jobs are moved out of `state`.
  void Restore(DurableState& state);

  // A new job "job-NNNNNN" from `record` (its job_id is set here). Returns
  // the id; on a failed write (Internal / Unavailable) nothing changed and
  // the id is not used up.
  [[nodiscard]] absl::StatusOr<std::string> Create(JobRecord record);

  // Applies `edit` to job `id`'s record, see [write durably, then apply].
  // NotFound for an unknown job; the StateStorage's error on a failed write,
  // and then the record is unchanged. `edit` must not change the job id.
  [[nodiscard]] absl::Status Update(const std::string& id, Edit edit);

  // Applies `edit` to job `id`'s record in memory only, for a change a crash
  // may lose because nothing was decided on it: the next write of anything
  // carries it: a job that ended, as its members hear of the end (see
  // [ended jobs] in job_table.h).
  // NotFound for an unknown job.
  [[nodiscard]] absl::Status Amend(const std::string& id, Edit edit);

  // Sets every job's progress to `progress(record)` (the live counters of
  // its workers, folded into the record) and writes the jobs whose progress
  // changed with the worker pool and the shard table, e.g. after either
  // changed. A finished job without members, not amended since the last
  // write, is passed over: its progress is its record's, already written
  // (with 10,000 finished jobs this is most of a checkpoint's work). On a
  // failed write nothing changed.
  [[nodiscard]] absl::Status Checkpoint(
      absl::FunctionRef<JobProgress(const JobRecord&)> progress);

  // Deletes the jobs `ids` (unknown ids are skipped) with their epochs and
  // history: written first, then erased (see [write durably, then apply]).
  // On a failed write nothing changed. The Coordinator removes only finished
  // jobs no worker refers to (see --keep_finished).
  [[nodiscard]] absl::Status Remove(const std::vector<std::string>& ids);

  // nullptr for an unknown job. The pointer stays valid (the record's
  // content may change with Update) until Remove() of that job.
  const JobRecord* Find(const std::string& id) const;
  // Every job by id, oldest first.
  const std::map<std::string, JobRecord>& records() const { return records_; }
  uint64_t next_job() const { return next_job_; }

 private:
  // Writes the table with next job id `next_job`, with `replace` (if not
  // nullptr) standing in for (or added as) the record of `replace_id`, with
  // the jobs' progress from `progress` (if not nullptr), and without the
  // jobs in `drop` (if not nullptr).
  [[nodiscard]] absl::Status Write(const std::map<std::string, JobProgress>* progress,
                                   const std::string& replace_id, const JobRecord* replace,
                                   uint64_t next_job, const std::set<std::string>* drop = nullptr);

  StateStorage* const store_;
  const WriteRest write_rest_;
  CoordinatorMetrics* const metrics_;
  absl::Mutex* const held_;
  uint64_t next_job_ = 1;
  std::map<std::string, JobRecord> records_;
  // Jobs Amend()ed since the last write, with the amend_seq_ of their last
  // Amend: the next write carries them, and forgets those not amended again
  // while it was on disk (Amend needs no write lock, see [ended jobs]).
  std::map<std::string, uint64_t> amended_;
  uint64_t amend_seq_ = 0;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_JOB_LOG_H_
