// The reconcile loop: brings every job to what its spec, its workers and its
// shards say. Each tick it removes dead workers, deletes finished jobs past
// the keep limits, places and starts pending jobs, writes the membership
// planner's changes to the job table (the shard fleet sends them on),
// commits the epochs every shard acknowledged, and completes or fails jobs.
// Between ticks it applies what workers report: departures, evaluations, a
// script's declaration. Decisions only: the job table writes, the fleet
// talks to the shards, the views compute progress.
//
// NOTE: [script jobs] A job with an entrypoint gets its tensor list from its
// training script: its workers start without a map (its first epoch is
// committed at once), rank 0's declared tensors become the model and the
// map, which workers see only once every shard has the job; a member that is
// DONE while others train leaves at its clock, and a script that fails fails
// the job. See docs/design/coordinator-script-jobs.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RECONCILER_H_
#define GRADSTREAM_SERVER_COORDINATOR_RECONCILER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_models.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership_planner.h"
#include "server/coordinator/options.h"
#include "server/coordinator/shard_fleet.h"
#include "server/coordinator/types.h"
#include "server/coordinator/views.h"
#include "server/coordinator/worker_pool.h"

namespace gradstream::coordinator {

// Not thread-safe: the Coordinator calls it under its mutex, and with its
// write lock held for whatever may write (see [state writes off the lock]).
// Every pointer must outlive it; `*pool_changed` is set when the worker pool
// changes (it is written lazily).
class Reconciler {
 public:
  Reconciler(const CoordinatorOptions* options, JobTable* jobs, WorkerPool* workers,
             ShardFleet* fleet, const Views* views, const JobModels* models,
             CoordinatorMetrics* metrics, bool* pool_changed);
  Reconciler(const Reconciler&) = delete;
  Reconciler& operator=(const Reconciler&) = delete;

  // One tick, in two halves around the shard calls. Before: dead workers
  // out, finished jobs past the keep limits deleted, pending jobs placed and
  // started, completion. After the answers: epochs committed, completion,
  // the membership plans of the jobs whose shards all answered, and the
  // elastic jobs below their MIN. A write that fails is retried next tick.
  void BeforeShardCalls();
  void AfterShardCalls();

  // Whether Report(worker, report, now) may write: when false it writes
  // nothing and needs no write lock. `worker` is the reporting one, alive.
  bool ReportWrites(const WorkerRecord& worker, const HeartbeatReport& report,
                    absl::Time now) const;
  // A heartbeat about `worker`'s current job: its progress, an evaluation
  // for the history, a script's declaration, and a departure (LEFT, ERROR,
  // a script DONE early). A departure that cannot be written is the
  // storage's error; the worker reports it again.
  [[nodiscard]] absl::Status Report(WorkerRecord& worker, const HeartbeatReport& report,
                                    absl::Time now);
  // A new process of `worker` registers while it is in a job: its place
  // there ends where it stopped.
  [[nodiscard]] absl::Status Restarted(WorkerRecord& worker);
  // Job `id` ends in `state`; its shards drop it unless it completed and
  // finished jobs are kept on them. NotFound; the storage's error.
  [[nodiscard]] absl::Status Finish(const std::string& id, JobState state,
                                    const std::string& message);

 private:
  absl::Time Now() const { return options_->env->Now(); }
  // How long a planned membership change needs to reach every member.
  absl::Duration LeadTime() const;
  // The planner's view of a running job.
  PlanInput PlanInputFor(const JobRecord& job) const;

  void ReapDeadWorkers();
  // See [keep finished]; a failed write deletes nothing.
  void PruneFinished();
  void StartPending(const JobRecord& job);
  void PlanMembership(const JobRecord& job);
  void CheckCompletion(const JobRecord& job);
  // An elastic job below its MIN: notes since when (durably), and fails it
  // once that is longer than its min_workers_timeout_s; back at MIN clears
  // it (see [elastic jobs]).
  void CheckBelowMin(const JobRecord& job);
  // Commits every job's newest epoch that all its shards acknowledged (see
  // [membership epochs]).
  void CommitEpochs();
  // `report` with its clocks held to what the job's shards make possible
  // ([claimed clocks] in reconciler.cc).
  WorkerProgress Claimed(const JobRecord& job, uint64_t worker_id,
                         const WorkerProgress& report) const;
  // Adds a point to the job's history when `report` brings a newer
  // evaluation (see [progress history]).
  void RecordProgress(const JobRecord& job, const WorkerProgress& report, absl::Time now);

  // Script jobs ([script jobs]). Builds job `id`'s shard map on the healthy
  // shards unless it has one; false while it cannot yet (no shards, tensors
  // not declared) or failed.
  bool Place(const std::string& id);
  // Rank 0's declared tensors become the job's model, then its map.
  void Declare(const std::string& job_id, uint64_t worker_id, const HeartbeatReport& report);
  // A script job's member reports DONE while another member trains on.
  bool DoneEarly(const JobRecord& job, uint64_t worker_id, WorkerState state) const;

  const CoordinatorOptions* const options_;
  JobTable* const jobs_;
  WorkerPool* const workers_;
  ShardFleet* const fleet_;
  const Views* const views_;
  const JobModels* const models_;
  CoordinatorMetrics* const metrics_;
  bool* const pool_changed_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RECONCILER_H_
