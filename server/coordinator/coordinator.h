// The coordinator's state machine: shards, the worker pool, the job table,
// membership epochs and shard maps. The gRPC service (service.h) is a thin
// adapter over it; tests can drive it directly and call Tick().
//
// NOTE: [membership epochs]
// Every change of a job's member set is a new epoch {epoch, effective_clock,
// worker_ids}: pushes for clocks >= effective_clock count from exactly those
// workers. An epoch is persisted, then sent to every shard of the job
// (CreateJob for a shard that does not have the job yet, UpdateMembership in
// epoch order otherwise); once every shard acknowledged it, it is *committed*
// and only then do heartbeat replies reveal it to workers. So a shard always
// knows an epoch before any worker acts on it.
//   * submit: once healthy shards exist the job gets its shard map and is
//     installed on them (CreateJob) with the empty epoch 0.
//   * start: epoch 1, effective clock 0, the first workers (all `workers` of
//     the spec, or fewer after start_grace).
//   * scale-up: joiners start pushing at effective_clock J (their
//     Assignment.join_clock). J is planned right after a fresh GetStats of
//     every shard of the job: the current clock (shards' slowest member,
//     plus the staleness bound; members' heartbeats) plus what the job's
//     clock rate (measured from the shards' stats) covers in two heartbeat
//     intervals plus a tick and half a second. So the shards learn J well
//     before any round at J completes, and members hear of it before J.
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
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics/metrics.h"
#include "coordinator.pb.h"
#include "server/coordinator/shard_client.h"
#include "server/coordinator/state_store.h"

namespace gradstream::coordinator {

struct CoordinatorOptions {
  std::string state_file;  // "" = keep state in memory only
  Env* env = nullptr;      // writes the state file; nullptr = Env::Default()
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A pending job starts once `workers` idle workers exist, or once it has
  // waited this long with at least one.
  absl::Duration start_grace = absl::Seconds(2);
  absl::Duration tick_interval = absl::Milliseconds(100);
  absl::Duration probe_interval = absl::Seconds(1);  // shard GetStats
  bool drop_finished_jobs = false;                   // DropJob on the shards when a job completes
  std::function<absl::Time()> now = [] { return absl::Now(); };
  metrics::Registry* metrics = nullptr;  // nullptr = Registry::Default()
};

// Thread-safe. RPC handlers may run concurrently with the background ticker;
// shard RPCs are never made while holding the lock.
class Coordinator {
 public:
  // Loads `options.state_file` when it exists (DataLoss if it is damaged).
  // `shards` must outlive the coordinator.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Open(CoordinatorOptions options,
                                                           ShardClient* shards);
  ~Coordinator();

  // Runs Tick() every tick_interval on a background thread until destruction.
  void StartTicker();

  // A shard announcing itself: healthy from now on.
  absl::StatusOr<gradstream::v1::RegisterShardResponse> RegisterShard(
      const gradstream::v1::RegisterShardRequest& request);
  // Shards from configuration (--shards): known, but healthy only once they
  // answer a probe, so a job's map never starts with a shard that is down.
  [[nodiscard]] absl::Status AddConfiguredShards(const std::vector<std::string>& addresses);
  absl::StatusOr<gradstream::v1::RegisterWorkerResponse> RegisterWorker(
      const gradstream::v1::RegisterWorkerRequest& request);
  // NotFound: unknown worker; FailedPrecondition: stale incarnation or removed.
  absl::StatusOr<gradstream::v1::HeartbeatResponse> Heartbeat(
      const gradstream::v1::HeartbeatRequest& request);
  // InvalidArgument naming the bad field(s).
  absl::StatusOr<gradstream::v1::SubmitJobResponse> SubmitJob(
      const gradstream::v1::SubmitJobRequest& request);
  absl::StatusOr<gradstream::v1::JobStatus> GetJob(const gradstream::v1::GetJobRequest& request);
  gradstream::v1::ListJobsResponse ListJobs();
  // NotFound; FailedPrecondition for a finished job; InvalidArgument for 0.
  absl::StatusOr<gradstream::v1::ScaleJobResponse> ScaleJob(
      const gradstream::v1::ScaleJobRequest& request);
  absl::StatusOr<gradstream::v1::CancelJobResponse> CancelJob(
      const gradstream::v1::CancelJobRequest& request);
  gradstream::v1::ClusterStatus GetCluster();

  // One round of housekeeping: dead workers, job starts, membership changes,
  // shard calls, shard probes, completion, persistence.
  void Tick();

  uint32_t heartbeat_interval_ms() const;

 private:
  struct Shard {
    gradstream::v1::ShardStatus status;
  };
  struct Worker {
    gradstream::v1::WorkerStatus status;  // persisted part
    gradstream::v1::WorkerProgress progress;
    absl::Time last_heartbeat;
    bool dead = false;
    double clock_rate = 0;  // clocks per second, smoothed
    absl::Time rate_time;
    uint64_t rate_clock = 0;
  };
  struct Job {
    gradstream::v1::JobStatus status;  // persisted part (spec, epochs, members, map...)
    gradstream::v1::JobProgress retired;
    std::string token;  // [auth tokens]: members and shards only, never in a JobStatus
    // Per shard index of the map: has the job, newest acknowledged epoch.
    std::vector<bool> shard_created;
    std::vector<uint64_t> shard_acked;
    bool dropped = false;
    absl::Time ready_since = absl::InfiniteFuture();
    // From the shards' GetStats, refreshed every tick while the job runs.
    uint64_t shard_min_clock = 0;    // slowest member's clock, over shards
    uint64_t shard_max_version = 0;  // sync: rounds applied
    uint64_t shard_max_staleness = 0;
    bool stats_fresh = false;  // answered by every shard this tick
    double clock_rate = 0;     // clocks per second, smoothed
    absl::Time rate_time = absl::InfinitePast();
    uint64_t rate_clock = 0;
  };
  // One shard RPC planned under the lock and made outside it.
  struct ShardCall;

  Coordinator(CoordinatorOptions options, ShardClient* shards);

  [[nodiscard]] absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] absl::Status SaveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint32_t> AddShardLocked(const std::string& address, bool healthy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time Now() const { return options_.now(); }

  Job* FindJobLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  gradstream::v1::JobStatus RenderJobLocked(const Job& job, bool full) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  gradstream::v1::JobProgress ProgressLocked(const Job& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  gradstream::v1::Assignment AssignmentLocked(const Worker& worker)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DetachLocked(Job& job, Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(Job& job, gradstream::v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tick phases.
  void ReapDeadWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartPendingJobLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlanMembershipLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckCompletionLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddEpochLocked(Job& job, uint64_t effective_clock, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LeadClockLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where workers joining a job that has no active member start: where the
  // shards and the last epoch stopped, with no lead (nobody is running).
  uint64_t IdleJoinClockLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True (with a message on the job) when the job's last step comes before
  // `clock`, so a membership change there would never take effect.
  bool EndsBeforeLocked(Job& job, uint64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ShardCall> PlanShardCallsLocked(bool probe) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunShardCalls(std::vector<ShardCall>& calls) ABSL_LOCKS_EXCLUDED(mu_);
  void ApplyShardResultsLocked(const std::vector<ShardCall>& calls)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  ShardClient* const shards_client_;
  metrics::Registry* const metrics_;
  std::unique_ptr<StateStore> store_;

  mutable absl::Mutex mu_;
  uint64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_worker_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<Shard> shards_ ABSL_GUARDED_BY(mu_);  // index = shard_id - 1
  std::map<uint64_t, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Job> jobs_ ABSL_GUARDED_BY(mu_);
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_probe_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Mutex tick_mu_;  // one Tick at a time
  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_H_
