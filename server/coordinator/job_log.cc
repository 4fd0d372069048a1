// The durable job table; see [write durably, then apply] in job_log.h.
#include "server/coordinator/job_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

void AppendEpoch(JobRecord& job, uint64_t effective_clock, const std::string& reason,
                 absl::Time now) {
  std::vector<MembershipEpoch>& epochs = job.status.epochs;
  if (!epochs.empty()) effective_clock = std::max(effective_clock, epochs.back().effective_clock);
  MembershipEpoch e;
  e.epoch = epochs.size() + 1;
  e.effective_clock = effective_clock;
  e.created_unix_ms = absl::ToUnixMillis(now);
  e.reason = reason;
  uint32_t rank = 0;
  for (JobMember& m : job.status.members) {
    if (m.leaving) continue;
    e.worker_ids.push_back(m.worker_id);
    m.rank = rank++;
  }
  epochs.push_back(std::move(e));
}

const JobMember* FindMember(const JobStatus& job, uint64_t worker_id) {
  for (const JobMember& m : job.members) {
    if (m.worker_id == worker_id) return &m;
  }
  return nullptr;
}

JobLog::JobLog(StateStorage* store, WriteRest write_rest, CoordinatorMetrics* metrics,
               absl::Mutex* held)
    : store_(store), write_rest_(std::move(write_rest)), metrics_(metrics), held_(held) {}

void JobLog::Restore(DurableState& state) {
  records_.clear();
  next_job_ = std::max<uint64_t>(1, state.next_job);
  for (JobRecord& j : state.jobs) {
    const std::string id = j.status.job_id;
    records_[id] = std::move(j);
  }
}

absl::StatusOr<std::string> JobLog::Create(JobRecord record) {
  const std::string id = absl::StrFormat("job-%06d", next_job_);
  record.status.job_id = id;
  if (absl::Status s = Write(nullptr, id, &record, next_job_ + 1); !s.ok()) return s;
  ++next_job_;
  records_[id] = std::move(record);
  return id;
}

absl::Status JobLog::Update(const std::string& id, Edit edit) {
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  JobRecord next = it->second;
  edit(next);
  DCHECK_EQ(next.status.job_id, id);
  if (absl::Status s = Write(nullptr, id, &next, next_job_); !s.ok()) return s;
  const size_t old_epochs = it->second.status.epochs.size();
  it->second = std::move(next);
  for (size_t e = old_epochs; e < it->second.status.epochs.size(); ++e) {
    const MembershipEpoch& epoch = it->second.status.epochs[e];
    LOG(INFO) << "coordinator: job " << id << " epoch " << epoch.epoch << " at clock "
              << epoch.effective_clock << " with " << epoch.worker_ids.size() << " workers ("
              << epoch.reason << ")";
    metrics_->EpochAdded();
  }
  return absl::OkStatus();
}

absl::Status JobLog::Amend(const std::string& id, Edit edit) {
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  edit(it->second);
  amended_[id] = ++amend_seq_;
  DCHECK_EQ(it->second.status.job_id, id);
  return absl::OkStatus();
}

absl::Status JobLog::Checkpoint(absl::FunctionRef<JobProgress(const JobRecord&)> progress) {
  // Only the jobs whose counters moved are written (a finished job's stay).
  std::map<std::string, JobProgress> fresh;
  for (const auto& [id, record] : records_) {
    if (IsTerminal(record.status.state) && record.status.members.empty() &&
        amended_.count(id) == 0) {
      continue;
    }
    JobProgress p = progress(record);
    if (p != record.status.progress) fresh[id] = std::move(p);
  }
  if (absl::Status s = Write(&fresh, "", nullptr, next_job_); !s.ok()) return s;
  for (auto& [id, p] : fresh) records_[id].status.progress = std::move(p);
  return absl::OkStatus();
}

absl::Status JobLog::Remove(const std::vector<std::string>& ids) {
  const std::set<std::string> drop(ids.begin(), ids.end());
  if (absl::Status s = Write(nullptr, "", nullptr, next_job_, &drop); !s.ok()) return s;
  for (const std::string& id : drop) {
    records_.erase(id);
    amended_.erase(id);
  }
  return absl::OkStatus();
}

const JobRecord* JobLog::Find(const std::string& id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

absl::Status JobLog::Write(const std::map<std::string, JobProgress>* progress,
                           const std::string& replace_id, const JobRecord* replace,
                           uint64_t next_job, const std::set<std::string>* drop) {
  if (store_ == nullptr) return absl::OkStatus();
  // Only the jobs this write changes: the StateStore leaves the others'
  // rows as they are.
  DurableState state;
  state.next_job = next_job;
  auto add = [&](const std::string& id, const JobRecord& record) {
    state.jobs.push_back(record);
    if (progress != nullptr) {
      if (auto p = progress->find(id); p != progress->end()) {
        state.jobs.back().status.progress = p->second;
      }
    }
  };
  const std::map<std::string, uint64_t> amended = amended_;
  std::set<std::string> ids;
  for (const auto& [id, seq] : amended) ids.insert(id);
  if (replace != nullptr) ids.insert(replace_id);
  if (progress != nullptr) {
    for (const auto& [id, p] : *progress) ids.insert(id);
  }
  std::vector<std::string> removed;
  if (drop != nullptr) removed.assign(drop->begin(), drop->end());
  for (const std::string& id : ids) {
    if (drop != nullptr && drop->count(id) > 0) continue;
    if (replace != nullptr && id == replace_id) {
      add(id, *replace);  // a new job, or the new content of one
    } else if (auto it = records_.find(id); it != records_.end()) {
      add(id, it->second);
    }
  }
  write_rest_(state);
  // `state` is a copy: see [state writes off the lock].
  if (held_ != nullptr) held_->Unlock();
  const absl::Time start = absl::Now();
  absl::Status s = store_->Save(state, removed);
  const absl::Duration took = absl::Now() - start;
  if (held_ != nullptr) held_->Lock();
  metrics_->StateSaved(took);
  if (!s.ok()) {
    LOG(ERROR) << "coordinator: cannot save state: " << s;
    return s;
  }
  for (const auto& [id, seq] : amended) {
    if (auto it = amended_.find(id); it != amended_.end() && it->second == seq) amended_.erase(it);
  }
  return s;
}

}  // namespace gradstream::coordinator
