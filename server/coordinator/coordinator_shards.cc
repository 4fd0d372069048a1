// The coordinator's housekeeping: Tick() and the shard calls it plans under
// the lock and makes outside it. See [membership epochs] in coordinator.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

namespace {

bool Unreachable(const absl::Status& s) {
  return absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
}

}  // namespace

struct Coordinator::ShardCall {
  enum Kind { kCreate, kUpdate, kDrop, kStats } kind;
  std::string job_id;        // "" for a plain health probe
  uint32_t shard_index = 0;  // within the job's map
  std::string address;
  uint64_t epoch = 0;
  ShardJob create;
  MembershipEpoch update;
  absl::Status status;
  ShardJobStats stats;
};

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
    calls = PlanShardCallsLocked(probe);
  }
  RunShardCalls(calls);
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  ApplyShardResultsLocked(calls);
  for (const auto& [id, job] : jobs_.records()) {
    CheckCompletionLocked(job);
    // Scaling needs the clock the shards are at now (see [membership epochs]);
    // the new epoch is persisted at once and goes out with the next tick.
    if (job.status.state == JobState::kRunning && job_shards_[id].stats_fresh) {
      PlanMembershipLocked(job);
    }
    CheckBelowMinLocked(job);
  }
  UpdateGaugesLocked();
  if (dirty_) (void)SaveLocked();
}

std::vector<Coordinator::ShardCall> Coordinator::PlanShardCallsLocked(bool probe) {
  std::vector<ShardCall> calls;
  for (const auto& [id, job] : jobs_.records()) {
    const ShardMap& map = job.status.shard_map;
    const JobShards& js = job_shards_[id];
    // A call about this job to the shard at index `i` of its map.
    const std::string& job_id = id;  // a structured binding cannot be captured in C++17
    auto call_to = [&](ShardCall::Kind kind, size_t i) {
      ShardCall call{kind};
      call.job_id = job_id;
      call.shard_index = static_cast<uint32_t>(i);
      call.address = map.shards[i];
      return call;
    };
    if (IsTerminal(job.status.state)) {
      if (js.dropped) continue;
      for (size_t i = 0; i < map.shards.size(); ++i) {
        calls.push_back(call_to(ShardCall::kDrop, i));
      }
      continue;
    }
    // A job is installed on its shards as soon as it has a map, with the
    // empty epoch 0 until workers are assigned.
    const std::vector<MembershipEpoch>& epochs = job.status.epochs;
    const uint64_t latest = epochs.size();
    for (size_t i = 0; i < map.shards.size(); ++i) {
      if (!js.created[i]) {
        ShardCall call = call_to(ShardCall::kCreate, i);
        call.epoch = latest;
        ShardJob& req = call.create;
        req.job_id = id;
        req.shard_index = static_cast<uint32_t>(i);
        req.spec = job.status.spec;
        for (const ChunkInfo& chunk : map.chunks) {
          if (chunk.shard == i) req.chunks.push_back(chunk);
        }
        if (latest > 0) {
          req.membership.epoch = epochs.back().epoch;
          req.membership.effective_clock = epochs.back().effective_clock;
          req.membership.worker_ids = epochs.back().worker_ids;
        }
        req.job_token = job.token;
        // A running job lost by a shard: its epochs replace a restored
        // checkpoint's, and without one the shard takes a live worker's
        // parameters from the slowest clock seen, below which no member
        // pushes any more (see [re-initialization] in server/shard/job.h).
        req.epochs = epochs;
        if (job.status.state == JobState::kRunning &&
            (job.status.spec.entrypoint.empty() || js.installed_once)) {
          req.resume = true;
          req.resume_clock = js.clocks.min_clock;
        }
        calls.push_back(std::move(call));
        continue;
      }
      // Every epoch the shard lacks, in order, so each change takes effect
      // at its own clock.
      for (uint64_t e = js.acked[i] + 1; e <= latest; ++e) {
        ShardCall call = call_to(ShardCall::kUpdate, i);
        call.epoch = e;
        call.update = epochs[e - 1];
        calls.push_back(std::move(call));
      }
      if (probe || job.status.state == JobState::kRunning) {
        calls.push_back(call_to(ShardCall::kStats, i));
      }
    }
  }
  if (probe) {
    for (const auto& s : shards_) {
      ShardCall call{ShardCall::kStats};
      call.address = s.status.address;
      calls.push_back(std::move(call));
    }
  }
  return calls;
}

void Coordinator::RunShardCalls(std::vector<ShardCall>& calls) {
  // A failed update must not be followed by later epochs to the same shard.
  std::string failed_key;
  for (ShardCall& call : calls) {
    const std::string key = absl::StrCat(call.job_id, "/", call.address);
    if (call.kind == ShardCall::kUpdate && key == failed_key) {
      call.status = absl::AbortedError("skipped after an earlier failure");
      continue;
    }
    switch (call.kind) {
      case ShardCall::kCreate: {
        absl::StatusOr<ShardJobCreated> r = shards_client_->CreateJob(call.address, call.create);
        call.status = r.status();
        if (r.ok() && r->restored) {
          LOG(INFO) << "coordinator: shard " << call.address << " restored job " << call.job_id
                    << " at clock " << r->restored_clock;
        }
        break;
      }
      case ShardCall::kUpdate:
        call.status = shards_client_->UpdateMembership(call.address, call.job_id, call.update);
        break;
      case ShardCall::kDrop:
        call.status = shards_client_->DropJob(call.address, call.job_id);
        break;
      case ShardCall::kStats: {
        absl::StatusOr<ShardJobStats> r = shards_client_->GetStats(call.address, call.job_id);
        call.status = r.status();
        if (r.ok()) call.stats = *std::move(r);
        break;
      }
    }
    if (!call.status.ok() && call.kind == ShardCall::kUpdate) failed_key = key;
    if (!call.status.ok() && !(call.kind == ShardCall::kStats && call.job_id.empty())) {
      VLOG(1) << "coordinator: shard " << call.address << " job " << call.job_id << ": "
              << call.status;
    }
  }
}

void Coordinator::ApplyShardResultsLocked(const std::vector<ShardCall>& calls) {
  const absl::Time now = Now();
  struct JobStats {
    uint64_t min_clock = UINT64_MAX, max_version = 0, max_clock = 0, max_staleness = 0;
    uint64_t min_version = UINT64_MAX;
    size_t answers = 0;
  };
  std::map<std::string, JobStats> job_stats;
  std::map<std::string, bool> drop_ok;
  for (const ShardCall& call : calls) {
    if (absl::IsAborted(call.status)) continue;
    for (auto& s : shards_) {
      if (s.status.address != call.address) continue;
      if (Unreachable(call.status)) {
        if (s.status.healthy)
          LOG(WARNING) << "coordinator: shard " << call.address << " unreachable: " << call.status;
        s.status.healthy = false;
        s.status.message = std::string(call.status.message());
      } else {
        s.status.healthy = true;
        s.status.last_seen_unix_ms = absl::ToUnixMillis(now);
        s.status.message.clear();
      }
    }
    if (call.job_id.empty()) continue;
    auto js = job_shards_.find(call.job_id);
    if (js == job_shards_.end() || call.shard_index >= js->second.created.size()) continue;
    std::vector<bool>& created = js->second.created;
    std::vector<uint64_t>& acked = js->second.acked;
    const uint32_t i = call.shard_index;
    switch (call.kind) {
      case ShardCall::kCreate:
        if (call.status.ok()) {
          created[i] = true;
          acked[i] = std::max(acked[i], call.epoch);
        } else if (absl::IsAlreadyExists(call.status)) {
          // The shard kept the job (the coordinator restarted): replay every
          // epoch; the shard ignores the ones it has.
          created[i] = true;
          acked[i] = 0;
        } else if (!Unreachable(call.status)) {
          LOG(WARNING) << "coordinator: CreateJob " << call.job_id << " on " << call.address << ": "
                       << call.status;
        }
        if (std::all_of(created.begin(), created.end(), [](bool c) { return c; })) {
          js->second.installed_once = true;
        }
        break;
      case ShardCall::kUpdate:
        if (call.status.ok() || absl::IsAlreadyExists(call.status) ||
            absl::IsFailedPrecondition(call.status)) {
          if (!call.status.ok()) {
            LOG(WARNING) << "coordinator: UpdateMembership epoch " << call.epoch << " of "
                         << call.job_id << " on " << call.address << ": " << call.status
                         << " (treated as acknowledged)";
          }
          acked[i] = std::max(acked[i], call.epoch);
        } else if (absl::IsNotFound(call.status)) {
          created[i] = false;
        }
        break;
      case ShardCall::kDrop: {
        auto [it, inserted] = drop_ok.try_emplace(call.job_id, true);
        it->second = it->second && (call.status.ok() || absl::IsNotFound(call.status));
        break;
      }
      case ShardCall::kStats:
        if (call.status.ok()) {
          JobStats& stats = job_stats[call.job_id];
          stats.min_clock = std::min(stats.min_clock, call.stats.min_clock);
          stats.max_version = std::max(stats.max_version, call.stats.max_version);
          stats.max_clock = std::max(stats.max_clock, call.stats.max_clock);
          stats.min_version = std::min(stats.min_version, call.stats.min_version);
          js->second.checkpoint_failures.resize(created.size());
          js->second.checkpoint_errors.resize(created.size());
          js->second.checkpoint_failures[i] = call.stats.checkpoint_failures;
          js->second.checkpoint_errors[i] = call.stats.checkpoint_error;
          stats.max_staleness = std::max(stats.max_staleness, call.stats.max_staleness);
          ++stats.answers;
        } else if (absl::IsNotFound(call.status)) {
          created[i] = false;  // the shard lost the job (restart)
        }
        break;
    }
  }
  for (const auto& [id, ok] : drop_ok) {
    if (auto js = job_shards_.find(id); js != job_shards_.end() && ok) js->second.dropped = true;
  }
  for (auto& [id, js] : job_shards_) js.stats_fresh = false;
  for (const auto& [id, stats] : job_stats) {
    auto it = job_shards_.find(id);
    if (it == job_shards_.end()) continue;
    JobShards& js = it->second;
    js.clocks.min_clock = stats.min_clock == UINT64_MAX ? 0 : stats.min_clock;
    js.clocks.max_version = stats.max_version;
    js.clocks.max_clock = stats.max_clock;
    js.min_version = stats.min_version == UINT64_MAX ? 0 : stats.min_version;
    // See [shard progress].
    const JobRecord* job = jobs_.Find(id);
    const bool sync = job == nullptr || job->status.spec.consistency == ConsistencyMode::kSync;
    const uint64_t clock = sync ? js.min_version : js.clocks.min_clock;
    js.progress_known = js.progress_known || stats.max_version > 0 || stats.max_clock > 0;
    if (clock != js.progress_clock || js.progress_since == absl::InfiniteFuture()) {
      js.progress_clock = clock;
      js.progress_since = now;
    }
    js.max_staleness = std::max(js.max_staleness, stats.max_staleness);
    js.stats_fresh = stats.answers == js.created.size();
    js.clock_rate.Observe(now, js.clocks.min_clock);
  }
  CommitEpochsLocked();
}

void Coordinator::CommitEpochsLocked() {
  for (const auto& [id, job] : jobs_.records()) {
    const JobShards& js = job_shards_[id];
    if (IsTerminal(job.status.state)) continue;
    if (js.acked.empty()) {
      // A script job before its declaration has no shard to acknowledge an
      // epoch: commit it, so that the workers start the script ([script jobs]).
      const uint64_t latest = job.status.epochs.size();
      if (AwaitsDeclaration(job.status.spec) && latest > job.status.committed_epoch) {
        (void)jobs_.Update(id, [&](JobRecord& j) { j.status.committed_epoch = latest; });
      }
      continue;
    }
    bool all_created = true;
    uint64_t committed = UINT64_MAX;
    for (size_t i = 0; i < js.acked.size(); ++i) {
      all_created = all_created && js.created[i];
      committed = std::min(committed, js.acked[i]);
    }
    if (all_created && committed > job.status.committed_epoch && committed != UINT64_MAX) {
      // Not durable: it stays uncommitted and the next tick tries again.
      (void)jobs_.Update(id, [&](JobRecord& j) { j.status.committed_epoch = committed; });
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
    JobShards& js = job_shards_[id];
    const bool final = IsTerminal(job.status.state) && job.status.members.empty();
    if (final && (js.final_exported || finals >= kFinalPerTick)) continue;
    finals += final ? 1 : 0;
    metrics_.ExportJob(id, ProgressLocked(job), static_cast<uint32_t>(job.status.members.size()),
                       job.status.desired_workers, job.status.epochs.size());
    js.final_exported = final;
  }
  for (const auto& [id, w] : workers_.workers()) {
    w.dead ? ++counts.workers_dead : ++counts.workers_healthy;
    if (!w.dead && w.status.job_id.empty()) ++counts.workers_idle;
  }
  for (const auto& s : shards_) s.status.healthy ? ++counts.shards_healthy : ++counts.shards_unhealthy;
  metrics_.ExportCluster(counts);
}

}  // namespace gradstream::coordinator
