// The coordinator's core: the control plane's state machine over plain
// structs (types.h); the gRPC service and the state database are its edge
// (rpc/). It ties together, under one mutex:
//   * the job table (job_table.h): every durable change of a job record,
//     written before it is applied (see [write durably, then apply]);
//   * the worker pool (worker_pool.h): registration, incarnations, liveness;
//   * the shard fleet (shard_fleet.h): the shard table and what each job's
//     shards have, and the calls that install jobs and send epochs;
//   * the reconcile loop (reconciler.h): what changes, tick by tick and on
//     workers' reports, with the membership planner (membership_planner.h);
//   * the views (views.h): status, assignments, the cluster.
// Tests drive it through rpc/coordinator_api.h and call Tick().
//
// NOTE: [membership epochs] Every change of a job's member set is a new
// epoch {epoch, effective_clock, worker_ids}: pushes for clocks >=
// effective_clock count from exactly those workers. An epoch is written,
// then sent to every shard of the job, committed (written) once every shard
// acknowledged it, and only then revealed to workers: a shard always knows
// an epoch before any worker acts on it. See
// docs/design/coordinator-membership-epochs.md.
#ifndef GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_
#define GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/job_models.h"
#include "server/coordinator/job_table.h"
#include "server/coordinator/options.h"
#include "server/coordinator/reconciler.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/shard_fleet.h"
#include "server/coordinator/state_storage.h"
#include "server/coordinator/types.h"
#include "server/coordinator/views.h"
#include "server/coordinator/worker_pool.h"

namespace gradstream::coordinator {

// Thread-safe. RPC handlers may run concurrently with the background ticker;
// one mutex guards the parts (job table, worker pool, shard fleet, views,
// reconcile loop), which are not thread-safe themselves, and shard RPCs are
// never made while holding it.
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
  absl::StatusOr<std::vector<JobStatus>> ListJobs(uint32_t page_size, const std::string& page_token,
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

  // One round of the reconcile loop (see reconciler.h) around the shard
  // calls (see shard_fleet.h), then the gauges and a save.
  void Tick();

 private:
  Coordinator(CoordinatorOptions options, ShardClient* shards, const JobModels* models,
              std::unique_ptr<StateStorage> store);

  [[nodiscard]] absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the worker pool, the shard table and the jobs' progress (see
  // JobLog::Checkpoint); clears dirty_ on success.
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
  bool LeavesJobLocked(const WorkerRegistration& request) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Registered RegisterLocked(const WorkerRegistration& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time Now() const { return options_.env->Now(); }

  // Whether HeartbeatLocked(request, now) may change the job table; when it
  // returns false, HeartbeatLocked writes nothing and needs no write_mu_.
  bool HeartbeatWritesLocked(const HeartbeatReport& request, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Assignment> HeartbeatLocked(const HeartbeatReport& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ticker's wait overran by `lost`: see [coordinator stall].
  void ExcuseStall(absl::Duration lost) ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  ShardClient* const shards_client_;
  CoordinatorMetrics metrics_;
  const std::unique_ptr<StateStorage> store_;  // nullptr: memory only

  // Held by everything that may write the state file, before mu_ (see
  // [state writes off the lock]): one write at a time, and nothing changes
  // the job table while mu_ is released for a write.
  absl::Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  WorkerPool workers_ ABSL_GUARDED_BY(mu_);
  ShardFleet fleet_ ABSL_GUARDED_BY(mu_);
  Views views_ ABSL_GUARDED_BY(mu_);
  Reconciler reconciler_ ABSL_GUARDED_BY(mu_);
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
