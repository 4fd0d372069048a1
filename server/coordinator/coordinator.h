// The coordinator's state machine: shards, the worker pool, the job table,
// membership epochs and shard maps. The gRPC service (service.h) is a thin
// adapter over it; tests can drive it directly and call Tick().
//
// The state is split by what it holds, each part in its own file:
//   * job_log.h: the durable job records and epochs, changed only by
//     "write durably, then apply" (see [write durably, then apply]);
//   * worker_pool.h: registration, incarnations, heartbeats, liveness;
//   * membership_planner.h: who joins or leaves at which clock, a pure
//     function of its inputs (see [membership plan]);
//   * coordinator_metrics.h: the Prometheus series;
//   * here: the shard table and what the coordinator knows of each job's
//     shards (which have it, which epochs they acknowledged, their clocks),
//     which is rebuilt after a restart and never persisted.
//
// NOTE: [membership epochs]
// Every change of a job's member set is a new epoch {epoch, effective_clock,
// worker_ids}: pushes for clocks >= effective_clock count from exactly those
// workers. An epoch is persisted (JobLog::Update), then sent to every shard
// of the job (CreateJob for a shard that does not have the job yet,
// UpdateMembership in epoch order otherwise); once every shard acknowledged
// it, it is *committed* (persisted the same way) and only then do heartbeat
// replies reveal it to workers. So a shard always knows an epoch before any
// worker acts on it.
//   * submit: once healthy shards exist the job gets its shard map and is
//     installed on them (CreateJob) with the empty epoch 0.
//   * start: epoch 1, effective clock 0, the first workers (all `workers` of
//     the spec, or fewer after start_grace).
//   * scale-up: joiners start pushing at effective_clock J (their
//     Assignment.join_clock). J is planned right after a fresh GetStats of
//     every shard of the job, ahead of where the job is by what its clock
//     rate covers in two heartbeat intervals plus two ticks and half a
//     second (see [membership plan]). So the shards learn J well before any
//     round at J completes, and members hear of it before J.
//   * scale-down: the most recently joined members get leave_clock L (same
//     lead); they finish clocks < L, send Leave and report LEFT.
//   * death (no heartbeat for heartbeat_timeout, or an ERROR report): the epoch
//     takes effect at the clock the worker never completed (its last reported
//     clock, raised to the shards' slowest-member clock), so the round that
//     waits on it completes with the others, re-normalized by the shard.
// A dead worker's removal and scaling never share an epoch.
#ifndef GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_
#define GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/env/env.h"
#include "common/metrics/metrics.h"
#include "server/coordinator/clock_rate.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/membership_planner.h"
#include "server/coordinator/job_models.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/shard_fleet.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"
#include "server/coordinator/views.h"
#include "server/coordinator/worker_pool.h"

namespace gradstream::coordinator {

struct CoordinatorOptions {
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A pending job starts once `workers` idle workers exist, or once it has
  // waited this long with at least one.
  absl::Duration start_grace = absl::Seconds(2);
  absl::Duration tick_interval = absl::Milliseconds(100);
  absl::Duration probe_interval = absl::Seconds(1);  // shard GetStats
  bool drop_finished_jobs = false;                   // DropJob on the shards when a job completes
  // NOTE: [keep finished] Finished jobs (COMPLETED, FAILED, CANCELLED) are
  // kept, newest finished first, up to `keep_finished` of them and for
  // `keep_finished_for` after they ended; beyond either, a tick deletes
  // them with their epochs and history (at most 1000 a tick, one write),
  // once no worker refers to them and their shards dropped them.
  size_t keep_finished = 10000;
  absl::Duration keep_finished_for = absl::Hours(24 * 30);
  // The clock of heartbeat timeouts, grace periods, the ticker and every
  // time the coordinator records ([env time] in common/env/env.h). Not
  // owned; nullptr = Env::Default(). Tests pass a testing::FakeClockEnv.
  Env* env = nullptr;
  metrics::Registry* metrics = nullptr;  // nullptr = Registry::Default()
};

// Thread-safe. RPC handlers may run concurrently with the background ticker;
// one mutex guards the parts (job log, worker pool, shard table), which are
// not thread-safe themselves, and shard RPCs are never made while holding it.
// Whatever may change durable state also holds write_mu_, and the state file
// is written with mu_ released (see [state writes off the lock] in
// job_log.h): a heartbeat that changes nothing durable, and the status
// reads, never wait for the disk.
//
// Every call that changes durable state writes it before it answers; when
// the write fails (Internal / Unavailable from the StateStorage) a job record
// or epoch is left as it was, and the caller may retry.
class Coordinator {
 public:
  // Loads what `storage` holds (nullptr: state in memory only); fails with
  // its error (DataLoss for a damaged store). `shards` and `models` must
  // outlive the coordinator.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options,
                                                           ShardClient* shards,
                                                           const JobModels* models,
                                                           std::unique_ptr<StateStorage> storage);
  ~Coordinator();

  // Runs Tick() every tick_interval on a background thread until destruction.
  void StartTicker();

  // A shard announcing itself: healthy from now on. Returns its shard id,
  // stable per address; InvalidArgument for an address that is not host:port.
  absl::StatusOr<uint32_t> RegisterShard(const std::string& address);
  // Shards from configuration (--shards): known, but healthy only once they
  // answer a probe, so a job's map never starts with a shard that is down.
  [[nodiscard]] absl::Status AddConfiguredShards(const std::vector<std::string>& addresses);
  absl::StatusOr<RegisteredWorker> RegisterWorker(const WorkerRegistration& request);
  // NotFound: unknown worker; FailedPrecondition: stale incarnation or
  // removed. A LEFT or ERROR report whose epoch cannot be written is an
  // error too; the worker keeps reporting it until it is moved off the job.
  absl::StatusOr<Assignment> Heartbeat(const HeartbeatReport& request);
  // Adds a pending job of a normalized `spec` (see [normalized spec] in
  // common/job/job_spec.h; the edge validates it) with the secret `token`
  // ([auth tokens]). Returns its id.
  absl::StatusOr<std::string> SubmitJob(const JobSpec& spec, const std::string& token);
  // The job with its epochs and history, and its shard map when `shard_map`.
  // NotFound.
  absl::StatusOr<JobStatus> GetJob(const std::string& job_id, bool shard_map);
  // Up to `page_size` jobs (0 = 100, at most 1000), newest first, starting
  // below `page_token` ("" = the newest), each without its shard map,
  // epochs and history; `next_page_token` is "" on the last page.
  // InvalidArgument for a page token that is not a job id.
  absl::StatusOr<std::vector<JobStatus>> ListJobs(uint32_t page_size,
                                                  const std::string& page_token,
                                                  std::string* next_page_token);
  // `workers` is the new desired count (an elastic job's MAX), `workers_min`
  // an elastic job's new MIN (0 = keep it, lowered to `workers` when above).
  // REQUIRES: 1 <= workers, workers_min <= workers (the edge checks the
  // request). NotFound; FailedPrecondition for a finished job or a MIN on a
  // job that is not elastic.
  absl::StatusOr<JobStatus> ScaleJob(const std::string& job_id, uint32_t workers,
                                     uint32_t workers_min);
  // NotFound; FailedPrecondition for a job that already ended.
  absl::StatusOr<JobStatus> CancelJob(const std::string& job_id);
  ClusterStatus GetCluster();

  // One round of housekeeping: dead workers, job starts, membership changes,
  // shard calls, shard probes, completion, persistence.
  void Tick();

  uint32_t heartbeat_interval_ms() const;

 private:
  Coordinator(CoordinatorOptions options, ShardClient* shards, const JobModels* models,
              std::unique_ptr<StateStorage> store);

  [[nodiscard]] absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the whole state (see JobLog::Checkpoint); clears dirty_ on success.
  [[nodiscard]] absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The shard table and the worker pool, for the state file.
  void WriteRestLocked(DurableState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A registration in the pool, not yet durable unless a save since carried
  // it (see [registration group commit]).
  struct Registered {
    RegisteredWorker response;
    uint64_t sequence = 0;  // registrations_ after it
  };
  // Whether `request` is a new process of a worker that is in a job, which
  // must first leave it (a write).
  bool LeavesJobLocked(const WorkerRegistration& request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Registered RegisterLocked(const WorkerRegistration& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time Now() const { return options_.env->Now(); }
  // How long a planned membership change needs to reach every member.
  absl::Duration LeadTime() const;

  // Adds a point to the job's history when `report` brings a newer
  // evaluation (see [progress history]).
  void RecordProgressLocked(const JobRecord& job, const WorkerProgress& report,
                            absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Whether HeartbeatLocked(request, now) may change the job log; when it
  // returns false, HeartbeatLocked writes nothing and needs no write_mu_.
  bool HeartbeatWritesLocked(const HeartbeatReport& request, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Assignment> HeartbeatLocked(const HeartbeatReport& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  [[nodiscard]] absl::Status FinishLocked(const std::string& job_id,
                                          JobState state,
                                          const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Script jobs (coordinator_script.cc, see [script jobs]).
  // Builds job `id`'s shard map on the healthy shards unless it has one;
  // false while it cannot yet (no shards, tensors not declared) or failed.
  bool PlaceJobLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0's declared tensors become the job's tensor list, then its map.
  void DeclareTensorsLocked(const std::string& job_id, uint64_t worker_id,
                            const HeartbeatReport& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A script job's member reports DONE while another member trains on: it
  // leaves the job at its clock, so no round waits for it.
  bool ScriptDoneEarlyLocked(const JobRecord& job, uint64_t worker_id,
                             WorkerState state) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The planner's view of a running job.
  PlanInput PlanInputLocked(const JobRecord& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tick phases.
  void ReapDeadWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // See [keep finished]; a failed write deletes nothing (the next tick retries).
  void PruneFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPendingJobLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanMembershipLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckCompletionLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An elastic job below its MIN: notes since when (durably), and fails it
  // once that is longer than its min_workers_timeout_s; back at MIN clears
  // it (see [elastic jobs]).
  void CheckBelowMinLocked(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits (durably) every job's newest epoch that all its shards
  // acknowledged: from then on heartbeats reveal it (see [membership
  // epochs]). A failed write leaves it uncommitted until the next tick.
  void CommitEpochsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  ShardClient* const shards_client_;
  const JobModels* const models_;
  CoordinatorMetrics metrics_;
  const std::unique_ptr<StateStorage> store_;  // nullptr: memory only

  // Held by everything that may write the state file, before mu_ (see
  // [state writes off the lock]): one write at a time, and nothing changes
  // the job log while mu_ is released for a write.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  WorkerPool workers_ ABSL_GUARDED_BY(mu_);
  ShardFleet fleet_ ABSL_GUARDED_BY(mu_);
  Views views_ ABSL_GUARDED_BY(mu_);
  // The worker pool or the shard table changed since the last write.
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  // Registrations so far, in the state being written, and known written
  // (see [registration group commit]).
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t copied_registrations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t saved_registrations_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time last_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Mutex tick_mu_ ABSL_ACQUIRED_BEFORE(write_mu_);  // one Tick at a time
  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;  // the ticker ends
  std::thread ticker_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_
