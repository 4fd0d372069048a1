// The durable job table; see [write durably, then apply] in job_log.h.
#include "server/coordinator/job_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/job/job_state.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

void AppendEpoch(JobRecord& job, uint64_t effective_clock, const std::string& reason,
                 absl::Time now) {
  const auto& epochs = job.status.epochs();
  if (!epochs.empty()) {
    effective_clock = std::max(effective_clock, epochs.rbegin()->effective_clock());
  }
  v1::MembershipEpoch* e = job.status.add_epochs();
  e->set_epoch(static_cast<uint64_t>(job.status.epochs_size()));
  e->set_effective_clock(effective_clock);
  e->set_created_unix_ms(absl::ToUnixMillis(now));
  e->set_reason(reason);
  uint32_t rank = 0;
  for (auto& m : *job.status.mutable_members()) {
    if (m.leaving()) continue;
    e->add_worker_ids(m.worker_id());
    m.set_rank(rank++);
  }
}

const v1::JobMember* FindMember(const v1::JobStatus& job, uint64_t worker_id) {
  for (const auto& m : job.members()) {
    if (m.worker_id() == worker_id) return &m;
  }
  return nullptr;
}

JobLog::JobLog(StateStore* store, WriteRest write_rest, CoordinatorMetrics* metrics,
               absl::Mutex* held)
    : store_(store), write_rest_(std::move(write_rest)), metrics_(metrics), held_(held) {}

void JobLog::Restore(v1::CoordinatorState& state) {
  records_.clear();
  next_job_ = std::max<uint64_t>(1, state.next_job());
  for (auto& j : *state.mutable_jobs()) {
    JobRecord& record = records_[j.job_id()];
    record.status = std::move(j);
    const std::string& id = record.status.job_id();
    auto retired = state.retired().find(id);
    if (retired != state.retired().end()) record.retired = retired->second;
    auto token = state.job_tokens().find(id);
    if (token != state.job_tokens().end()) record.token = token->second;
  }
}

absl::StatusOr<std::string> JobLog::Create(JobRecord record) {
  const std::string id = absl::StrFormat("job-%06d", next_job_);
  record.status.set_job_id(id);
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
  DCHECK_EQ(next.status.job_id(), id);
  if (absl::Status s = Write(nullptr, id, &next, next_job_); !s.ok()) return s;
  const int old_epochs = it->second.status.epochs_size();
  it->second = std::move(next);
  for (int e = old_epochs; e < it->second.status.epochs_size(); ++e) {
    const v1::MembershipEpoch& epoch = it->second.status.epochs(e);
    LOG(INFO) << "coordinator: job " << id << " epoch " << epoch.epoch() << " at clock "
              << epoch.effective_clock() << " with " << epoch.worker_ids_size() << " workers ("
              << epoch.reason() << ")";
    metrics_->EpochAdded();
  }
  return absl::OkStatus();
}

absl::Status JobLog::Amend(const std::string& id, Edit edit) {
  auto it = records_.find(id);
  if (it == records_.end()) return absl::NotFoundError(absl::StrCat("no job '", id, "'"));
  edit(it->second);
  amended_[id] = ++amend_seq_;
  DCHECK_EQ(it->second.status.job_id(), id);
  return absl::OkStatus();
}

absl::Status JobLog::Checkpoint(absl::FunctionRef<v1::JobProgress(const JobRecord&)> progress) {
  // Only the jobs whose counters moved are written (a finished job's stay).
  std::map<std::string, v1::JobProgress> fresh;
  for (const auto& [id, record] : records_) {
    if (IsTerminal(record.status.state()) && record.status.members().empty() &&
        amended_.count(id) == 0) {
      continue;
    }
    v1::JobProgress p = progress(record);
    if (p.SerializeAsString() != record.status.progress().SerializeAsString()) {
      fresh[id] = std::move(p);
    }
  }
  if (absl::Status s = Write(&fresh, "", nullptr, next_job_); !s.ok()) return s;
  for (auto& [id, p] : fresh) *records_[id].status.mutable_progress() = std::move(p);
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

absl::Status JobLog::Write(const std::map<std::string, v1::JobProgress>* progress,
                           const std::string& replace_id, const JobRecord* replace,
                           uint64_t next_job, const std::set<std::string>* drop) {
  if (store_ == nullptr) return absl::OkStatus();
  // Only the jobs this write changes: the StateStore leaves the others'
  // rows as they are.
  v1::CoordinatorState state;
  state.set_next_job(next_job);
  auto add = [&](const std::string& id, const JobRecord& record) {
    v1::JobStatus* status = state.add_jobs();
    *status = record.status;
    if (progress != nullptr) {
      if (auto p = progress->find(id); p != progress->end()) *status->mutable_progress() = p->second;
    }
    (*state.mutable_retired())[id] = record.retired;
    if (!record.token.empty()) (*state.mutable_job_tokens())[id] = record.token;
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
