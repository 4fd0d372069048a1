// The coordinator's housekeeping: Tick() and the shard calls it plans under
// the lock and makes outside it. See [membership epochs] in coordinator.h.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

bool Terminal(v1::JobState s) {
  return s == v1::COMPLETED || s == v1::FAILED || s == v1::CANCELLED;
}

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
  v1::CreateJobRequest create;
  v1::MembershipUpdate update;
  absl::Status status;
  v1::StatsResponse stats;
};

void Coordinator::Tick() {
  absl::MutexLock tick_lock(&tick_mu_);
  std::vector<ShardCall> calls;
  {
    absl::MutexLock lock(&mu_);
    ReapDeadWorkersLocked();
    for (auto& [id, job] : jobs_) {
      if (job.status.state() == v1::PENDING) StartPendingJobLocked(job);
      CheckCompletionLocked(job);
    }
    const bool probe = Now() - last_probe_ >= options_.probe_interval;
    if (probe) {
      last_probe_ = Now();
      dirty_ = true;  // progress counters: persisted about once per probe interval
    }
    // Epochs are durable before any shard hears of them.
    if (dirty_) (void)SaveLocked();
    calls = PlanShardCallsLocked(probe);
  }
  RunShardCalls(calls);
  absl::MutexLock lock(&mu_);
  ApplyShardResultsLocked(calls);
  for (auto& [id, job] : jobs_) {
    CheckCompletionLocked(job);
    // Scaling needs the clock the shards are at now (see [membership epochs]);
    // the new epoch goes out with the next tick, after it is persisted.
    if (job.status.state() == v1::RUNNING && job.stats_fresh) PlanMembershipLocked(job);
  }
  UpdateGaugesLocked();
  if (dirty_) (void)SaveLocked();
}

std::vector<Coordinator::ShardCall> Coordinator::PlanShardCallsLocked(bool probe) {
  std::vector<ShardCall> calls;
  for (auto& [id, job] : jobs_) {
    const v1::ShardMap& map = job.status.shard_map();
    if (Terminal(job.status.state())) {
      if (job.dropped) continue;
      for (int i = 0; i < map.shards_size(); ++i) {
        ShardCall call{ShardCall::kDrop};
        call.job_id = id;
        call.shard_index = i;
        call.address = map.shards(i);
        calls.push_back(std::move(call));
      }
      continue;
    }
    // A job is installed on its shards as soon as it has a map, with the
    // empty epoch 0 until workers are assigned.
    const uint64_t latest = job.status.epochs_size();
    const v1::MembershipEpoch last =
        latest == 0 ? v1::MembershipEpoch() : job.status.epochs(static_cast<int>(latest - 1));
    for (int i = 0; i < map.shards_size(); ++i) {
      if (!job.shard_created[i]) {
        ShardCall call{ShardCall::kCreate};
        call.job_id = id;
        call.shard_index = i;
        call.address = map.shards(i);
        call.epoch = latest;
        v1::CreateJobRequest& req = call.create;
        req.set_job_id(id);
        *req.mutable_optimizer() = job.status.spec().optimizer();
        *req.mutable_consistency() = job.status.spec().consistency();
        for (const auto& chunk : map.chunks()) {
          if (chunk.shard() == static_cast<uint32_t>(i)) *req.add_chunks() = chunk;
        }
        v1::Membership* m = req.mutable_membership();
        m->set_epoch(last.epoch());
        m->set_effective_clock(last.effective_clock());
        *m->mutable_worker_ids() = last.worker_ids();
        req.set_checkpoint_every(job.status.spec().checkpoint_every());
        req.set_shard_index(i);
        req.set_job_token(job.token);
        calls.push_back(std::move(call));
        continue;
      }
      // Every epoch the shard lacks, in order, so each change takes effect
      // at its own clock.
      for (uint64_t e = job.shard_acked[i] + 1; e <= latest; ++e) {
        const v1::MembershipEpoch& epoch = job.status.epochs(static_cast<int>(e - 1));
        ShardCall call{ShardCall::kUpdate};
        call.job_id = id;
        call.shard_index = i;
        call.address = map.shards(i);
        call.epoch = e;
        call.update.set_job_id(id);
        v1::Membership* m = call.update.mutable_membership();
        m->set_epoch(epoch.epoch());
        m->set_effective_clock(epoch.effective_clock());
        *m->mutable_worker_ids() = epoch.worker_ids();
        calls.push_back(std::move(call));
      }
      if (probe || job.status.state() == v1::RUNNING) {
        ShardCall call{ShardCall::kStats};
        call.job_id = id;
        call.shard_index = i;
        call.address = map.shards(i);
        calls.push_back(std::move(call));
      }
    }
  }
  if (probe) {
    for (const auto& s : shards_) {
      ShardCall call{ShardCall::kStats};
      call.address = s.status.address();
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
        absl::StatusOr<v1::CreateJobResponse> r =
            shards_client_->CreateJob(call.address, call.create);
        call.status = r.status();
        if (r.ok() && r->restored()) {
          LOG(INFO) << "coordinator: shard " << call.address << " restored job " << call.job_id
                    << " at clock " << r->restored_clock();
        }
        break;
      }
      case ShardCall::kUpdate:
        call.status = shards_client_->UpdateMembership(call.address, call.update);
        break;
      case ShardCall::kDrop:
        call.status = shards_client_->DropJob(call.address, call.job_id);
        break;
      case ShardCall::kStats: {
        v1::StatsRequest req;
        req.set_job_id(call.job_id);
        absl::StatusOr<v1::StatsResponse> r = shards_client_->GetStats(call.address, req);
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
    uint64_t min_clock = UINT64_MAX, max_version = 0, max_staleness = 0;
    size_t answers = 0;
  };
  std::map<std::string, JobStats> stats;
  std::map<std::string, bool> drop_ok;
  for (const ShardCall& call : calls) {
    if (absl::IsAborted(call.status)) continue;
    for (auto& s : shards_) {
      if (s.status.address() != call.address) continue;
      if (Unreachable(call.status)) {
        if (s.status.healthy())
          LOG(WARNING) << "coordinator: shard " << call.address << " unreachable: " << call.status;
        s.status.set_healthy(false);
        s.status.set_message(std::string(call.status.message()));
      } else {
        s.status.set_healthy(true);
        s.status.set_last_seen_unix_ms(absl::ToUnixMillis(now));
        s.status.clear_message();
      }
    }
    if (call.job_id.empty()) continue;
    Job* job = FindJobLocked(call.job_id);
    if (job == nullptr || call.shard_index >= job->shard_created.size()) continue;
    const uint32_t i = call.shard_index;
    switch (call.kind) {
      case ShardCall::kCreate:
        if (call.status.ok()) {
          job->shard_created[i] = true;
          job->shard_acked[i] = std::max(job->shard_acked[i], call.epoch);
        } else if (absl::IsAlreadyExists(call.status)) {
          // The shard kept the job (the coordinator restarted): replay every
          // epoch; the shard ignores the ones it has.
          job->shard_created[i] = true;
          job->shard_acked[i] = 0;
        } else if (!Unreachable(call.status)) {
          LOG(WARNING) << "coordinator: CreateJob " << call.job_id << " on " << call.address << ": "
                       << call.status;
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
          job->shard_acked[i] = std::max(job->shard_acked[i], call.epoch);
        } else if (absl::IsNotFound(call.status)) {
          job->shard_created[i] = false;
        }
        break;
      case ShardCall::kDrop: {
        auto [it, inserted] = drop_ok.try_emplace(call.job_id, true);
        it->second = it->second && (call.status.ok() || absl::IsNotFound(call.status));
        break;
      }
      case ShardCall::kStats:
        if (call.status.ok()) {
          JobStats& js = stats[call.job_id];
          js.min_clock = std::min(js.min_clock, call.stats.min_clock());
          js.max_version = std::max(js.max_version, call.stats.max_version());
          js.max_staleness = std::max(js.max_staleness, call.stats.max_staleness());
          ++js.answers;
        } else if (absl::IsNotFound(call.status)) {
          job->shard_created[i] = false;  // the shard lost the job (restart)
        }
        break;
    }
  }
  for (const auto& [id, ok] : drop_ok) {
    if (Job* job = FindJobLocked(id); job != nullptr && ok) job->dropped = true;
  }
  for (auto& [id, job] : jobs_) job.stats_fresh = false;
  for (const auto& [id, s] : stats) {
    Job* job = FindJobLocked(id);
    if (job == nullptr) continue;
    job->shard_min_clock = s.min_clock == UINT64_MAX ? 0 : s.min_clock;
    job->shard_max_version = s.max_version;
    job->shard_max_staleness = std::max(job->shard_max_staleness, s.max_staleness);
    job->stats_fresh = s.answers == job->shard_created.size();
    // The job's clock rate, from the slowest member's clock over >= 0.5 s.
    const absl::Duration dt = now - job->rate_time;
    if (job->rate_time == absl::InfinitePast() || job->shard_min_clock < job->rate_clock) {
      job->rate_time = now;
      job->rate_clock = job->shard_min_clock;
    } else if (dt >= absl::Milliseconds(500)) {
      const double rate = (job->shard_min_clock - job->rate_clock) / absl::ToDoubleSeconds(dt);
      job->clock_rate = job->clock_rate == 0 ? rate : 0.5 * job->clock_rate + 0.5 * rate;
      job->rate_time = now;
      job->rate_clock = job->shard_min_clock;
    }
  }
  for (auto& [id, job] : jobs_) {
    if (job.shard_acked.empty() || Terminal(job.status.state())) continue;
    bool all_created = true;
    uint64_t committed = UINT64_MAX;
    for (size_t i = 0; i < job.shard_acked.size(); ++i) {
      all_created = all_created && job.shard_created[i];
      committed = std::min(committed, job.shard_acked[i]);
    }
    if (all_created && committed > job.status.committed_epoch() && committed != UINT64_MAX) {
      job.status.set_committed_epoch(committed);
      dirty_ = true;
    }
  }
}

void Coordinator::UpdateGaugesLocked() {
  std::map<v1::JobState, int> by_state;
  for (auto& [id, job] : jobs_) {
    ++by_state[job.status.state()];
    const v1::JobProgress p = ProgressLocked(job);
    const metrics::Labels l = {{"job", id}};
    auto gauge = [&](const char* name, const char* help, double v) {
      metrics_->GetGauge(name, help, l)->Set(v);
    };
    const uint32_t active = static_cast<uint32_t>(job.status.members_size());
    gauge("gs_job_clock", "Slowest active worker's clock.", p.clock());
    gauge("gs_job_clock_lag", "Fastest minus slowest active worker's clock.",
          p.max_clock() >= p.clock() ? p.max_clock() - p.clock() : 0);
    gauge("gs_job_active_workers", "Workers pushing for the job (leaving ones included).", active);
    gauge("gs_job_desired_workers", "Desired workers of the job.", job.status.desired_workers());
    gauge("gs_job_epoch", "Newest membership epoch.", job.status.epochs_size());
    gauge("gs_job_loss", "Mean training loss of the active workers.", p.loss());
    gauge("gs_job_accuracy", "Latest test accuracy.", p.accuracy());
    gauge("gs_job_samples_per_second", "Training throughput over all workers.",
          p.samples_per_sec());
    gauge("gs_job_bytes_pushed", "Encoded gradient bytes pushed.", p.bytes_pushed());
    gauge("gs_job_compression_ratio", "fp32 bytes / encoded bytes pushed.", p.compression_ratio());
    gauge("gs_job_max_staleness", "Largest staleness observed.", p.max_staleness());
    gauge("gs_job_residual_norm", "Largest error-feedback residual norm.", p.residual_norm());
  }
  for (v1::JobState s : {v1::PENDING, v1::RUNNING, v1::COMPLETED, v1::FAILED, v1::CANCELLED}) {
    metrics_->GetGauge("gs_coordinator_jobs", "Jobs by state.", {{"state", v1::JobState_Name(s)}})
        ->Set(by_state[s]);
  }
  int healthy = 0, dead = 0, idle = 0;
  for (const auto& [id, w] : workers_) {
    w.dead ? ++dead : ++healthy;
    if (!w.dead && w.status.job_id().empty()) ++idle;
  }
  metrics_->GetGauge("gs_coordinator_workers", "Registered workers.", {{"health", "healthy"}})
      ->Set(healthy);
  metrics_->GetGauge("gs_coordinator_workers", "Registered workers.", {{"health", "dead"}})
      ->Set(dead);
  metrics_->GetGauge("gs_coordinator_idle_workers", "Healthy workers without a job.")->Set(idle);
  int shards_up = 0;
  for (const auto& s : shards_) shards_up += s.status.healthy();
  metrics_->GetGauge("gs_coordinator_shards", "Registered shards.", {{"health", "healthy"}})
      ->Set(shards_up);
  metrics_->GetGauge("gs_coordinator_shards", "Registered shards.", {{"health", "unhealthy"}})
      ->Set(static_cast<double>(shards_.size()) - shards_up);
}

}  // namespace gradstream::coordinator
