// The coordinator's housekeeping: Tick() and the shard calls it plans under
// the lock and makes outside it. See [membership epochs] in coordinator.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

void Coordinator::Tick() {
  absl::MutexLock tick_lock(&tick_mu_);
  std::vector<ShardCall> calls;
  {
    absl::MutexLock write(&write_mu_);
    absl::MutexLock lock(&mu_);
    ReapDeadWorkersLocked();
    PruneFinishedLocked();
    for (const auto& [id, job] : jobs_.records()) {
      if (job.status.state == JobState::kPending) StartPendingJobLocked(job);
      CheckCompletionLocked(job);
    }
    const bool probe = Now() - last_probe_ >= options_.probe_interval;
    if (probe) {
      last_probe_ = Now();
      dirty_ = true;  // progress counters: persisted about once per probe interval
    }
    // Epochs are durable already (see [write durably, then apply]); this
    // writes the worker pool, the shard table and the progress counters.
    if (dirty_) (void)SaveLocked();
    calls = fleet_.Plan(jobs_.records(), probe);
  }
  RunShardCalls(shards_client_, calls);
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  fleet_.Apply(calls, jobs_.records(), Now());
  CommitEpochsLocked();
  for (const auto& [id, job] : jobs_.records()) {
    CheckCompletionLocked(job);
    // Scaling needs the clock the shards are at now (see [membership epochs]);
    // the new epoch is persisted at once and goes out with the next tick.
    if (job.status.state == JobState::kRunning && fleet_.Job(id).stats_fresh) {
      PlanMembershipLocked(job);
    }
    CheckBelowMinLocked(job);
  }
  UpdateGaugesLocked();
  if (dirty_) (void)SaveLocked();
}

void Coordinator::CommitEpochsLocked() {
  for (const auto& [id, job] : jobs_.records()) {
    if (IsTerminal(job.status.state)) continue;
    if (fleet_.Job(id).acked.empty()) {
      // A script job before its declaration has no shard to acknowledge an
      // epoch: commit it, so that the workers start the script ([script jobs]).
      const uint64_t latest = job.status.epochs.size();
      if (AwaitsDeclaration(job.status.spec) && latest > job.status.committed_epoch) {
        (void)jobs_.Commit(id, latest);
      }
      continue;
    }
    const std::optional<uint64_t> acked = fleet_.Acknowledged(id);
    if (acked && *acked > job.status.committed_epoch) {
      // Not durable: it stays uncommitted and the next tick tries again.
      (void)jobs_.Commit(id, *acked);
    }
  }
}

void Coordinator::UpdateGaugesLocked() {
  ClusterCounts counts;
  // NOTE: [final gauges] A finished job without members has its final
  // values: its series are set once, at most kFinalPerTick of them a tick.
  // See docs/design/coordinator-final-gauges.md.
  constexpr int kFinalPerTick = 500;
  int finals = 0;
  for (const auto& [id, job] : jobs_.records()) {
    ++counts.jobs_by_state[job.status.state];
    JobShards& js = fleet_.Job(id);
    const bool final = IsTerminal(job.status.state) && job.status.members.empty();
    if (final && (js.final_exported || finals >= kFinalPerTick)) continue;
    finals += final ? 1 : 0;
    metrics_.ExportJob(id, views_.Progress(job), static_cast<uint32_t>(job.status.members.size()),
                       job.status.desired_workers, job.status.epochs.size());
    js.final_exported = final;
  }
  for (const auto& [id, w] : workers_.workers()) {
    w.dead ? ++counts.workers_dead : ++counts.workers_healthy;
    if (!w.dead && w.status.job_id.empty()) ++counts.workers_idle;
  }
  for (const ShardStatus& s : fleet_.shards()) {
    s.healthy ? ++counts.shards_healthy : ++counts.shards_unhealthy;
  }
  metrics_.ExportCluster(counts);
}

}  // namespace gradstream::coordinator
