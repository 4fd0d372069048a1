// The durable job table; see job_table.h.
#include "server/coordinator/job_table.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/progress_history.h"

namespace gradstream::coordinator {

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

// Removes `worker` from `job`'s members, keeping what it pushed and trained
// in the job's retired counters and its accuracy if it is the newest.
void FoldOut(JobRecord& job, const WorkerRecord& worker) {
  const uint64_t id = worker.status.worker_id;
  const WorkerProgress& progress = worker.progress;
  std::vector<JobMember>& members = job.status.members;
  for (auto m = members.begin(); m != members.end(); ++m) {
    if (m->worker_id != id) continue;
    JobProgress& r = job.retired;
    r.samples += WorkerPool::Samples(worker, job.status.spec, m->join_clock);
    r.bytes_pushed = r.bytes_pushed.value_or(0) + progress.bytes_pushed;
    r.fp32_bytes_pushed = r.fp32_bytes_pushed.value_or(0) + progress.fp32_bytes_pushed;
    r.bytes_pulled = r.bytes_pulled.value_or(0) + progress.bytes_pulled;
    r.fp32_bytes_pulled = r.fp32_bytes_pulled.value_or(0) + progress.fp32_bytes_pulled;
    r.bytes_pulled_discarded += progress.bytes_pulled_discarded;
    r.max_staleness = std::max(r.max_staleness, progress.max_staleness);
    members.erase(m);
    break;
  }
  if (progress.accuracy_clock > job.status.progress.accuracy_clock) {
    job.status.progress.accuracy = progress.accuracy;
    job.status.progress.accuracy_clock = progress.accuracy_clock;
  }
}

}  // namespace

absl::Status JobNotFound(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no job '", id, "' (see `gradstream list` for the known jobs)"));
}

JobTable::JobTable(StateStorage* store, JobLog::WriteRest write_rest, CoordinatorMetrics* metrics,
                   absl::Mutex* held, WorkerPool* workers, Env* env, bool* pool_changed)
    : log_(store, std::move(write_rest), metrics, held),
      workers_(workers),
      env_(env),
      pool_changed_(pool_changed) {}

absl::StatusOr<std::string> JobTable::Submit(const JobSpec& spec, const std::string& token) {
  JobRecord record;
  record.status.spec = spec;
  record.status.state = JobState::kPending;
  record.status.desired_workers = spec.workers;
  record.status.min_workers = spec.workers_min;
  record.status.submitted_unix_ms = UnixMs(Now());
  record.status.message = "waiting for shards and workers";
  record.token = token;
  return log_.Create(std::move(record));
}

absl::Status JobTable::Scale(const std::string& id, uint32_t workers, uint32_t min_workers) {
  return log_.Update(id, [&](JobRecord& j) {
    j.status.desired_workers = workers;
    j.status.min_workers = min_workers;
  });
}

absl::Status JobTable::Detach(const std::string& id, WorkerRecord& worker, uint64_t clock,
                              const std::string& epoch_reason,
                              const std::function<void(JobRecord&)>& also) {
  const uint64_t worker_id = worker.status.worker_id;
  const absl::Time now = Now();
  auto edit = [&](JobRecord& job) {
    if (also) also(job);
    FoldOut(job, worker);
    if (!epoch_reason.empty() && !IsTerminal(job.status.state)) {
      AppendEpoch(job, clock, epoch_reason, now);
      // Gone for good: no round waits for it, even one before a later
      // planned epoch's clock this one was pushed to (see [departed]).
      job.status.epochs.back().departed.push_back(worker_id);
    }
  };
  const JobRecord* current = log_.Find(id);
  const bool ended = current != nullptr && IsTerminal(current->status.state);
  GS_RETURN_IF_ERROR(ended ? log_.Amend(id, edit) : log_.Update(id, edit));
  WorkerPool::Release(worker);
  *pool_changed_ = true;
  return absl::OkStatus();
}

absl::Status JobTable::ApplyPlan(const std::string& id, const MembershipPlan& plan, bool start) {
  using Action = MembershipPlan::Action;
  if (plan.action == Action::kNone) return absl::OkStatus();
  if (plan.action == Action::kWait) {
    SetMessage(id, plan.message);
    return absl::OkStatus();
  }
  // Joiners are assigned before the write that lists them (see [write
  // durably, then apply]), and given back if it fails.
  std::vector<WorkerRecord*> joiners;
  for (uint64_t w : plan.join) {
    WorkerRecord* worker = workers_->Find(w);
    CHECK(worker != nullptr && worker->status.job_id.empty()) << "planned a busy worker " << w;
    WorkerPool::Assign(*worker, id);
    joiners.push_back(worker);
  }
  const absl::Time now = Now();
  absl::Status s = log_.Update(id, [&](JobRecord& job) {
    for (const WorkerRecord* w : joiners) {
      JobMember m;
      m.worker_id = w->status.worker_id;
      m.incarnation = w->status.incarnation;
      m.join_clock = plan.clock;
      job.status.members.push_back(std::move(m));
    }
    for (JobMember& m : job.status.members) {
      if (std::find(plan.leave.begin(), plan.leave.end(), m.worker_id) == plan.leave.end()) {
        continue;
      }
      m.leaving = true;
      m.leave_clock = plan.clock;
    }
    if (start) {
      job.status.state = JobState::kRunning;
      job.status.started_unix_ms = UnixMs(now);
    }
    job.status.message.clear();
    AppendEpoch(job, plan.clock, plan.reason, now);
  });
  if (!s.ok()) {
    for (WorkerRecord* w : joiners) WorkerPool::Assign(*w, "");
    return s;
  }
  if (!joiners.empty()) *pool_changed_ = true;
  return absl::OkStatus();
}

void JobTable::SetMessage(const std::string& id, const std::string& message) {
  const JobRecord* job = log_.Find(id);
  if (job == nullptr || job->status.message == message) return;
  (void)log_.Update(id, [&](JobRecord& j) { j.status.message = message; });
}

absl::Status JobTable::Finish(const std::string& id, JobState state, const std::string& message,
                              const JobProgress& progress) {
  if (log_.Find(id) == nullptr) return JobNotFound(id);
  const absl::Time now = Now();
  GS_RETURN_IF_ERROR(log_.Update(id, [&](JobRecord& j) {
    j.status.progress = progress;
    j.status.state = state;
    j.status.message = message;
    j.status.finished_unix_ms = UnixMs(now);
  }));
  LOG(INFO) << "coordinator: job " << id << " " << JobStateName(state)
            << (message.empty() ? "" : ": ") << message;
  return absl::OkStatus();
}

absl::Status JobTable::SetShardMap(const std::string& id, const ShardMap& map) {
  return log_.Update(id, [&](JobRecord& j) { j.status.shard_map = map; });
}

absl::Status JobTable::SetSpec(const std::string& id, const JobSpec& spec) {
  return log_.Update(id, [&](JobRecord& j) { j.status.spec = spec; });
}

absl::Status JobTable::AddProgressPoint(const std::string& id, const ProgressPoint& point) {
  return log_.Update(id, [&](JobRecord& j) { AppendProgressPoint(point, &j.status); });
}

absl::Status JobTable::Commit(const std::string& id, uint64_t epoch) {
  return log_.Update(id, [&](JobRecord& j) { j.status.committed_epoch = epoch; });
}

absl::Status JobTable::SetBelowMinSince(const std::string& id, int64_t unix_ms) {
  return log_.Update(id, [&](JobRecord& j) { j.status.below_min_since_unix_ms = unix_ms; });
}

}  // namespace gradstream::coordinator
