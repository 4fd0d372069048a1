// The worker pool; see worker_pool.h.
#include "server/coordinator/worker_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

void WorkerPool::Restore(const DurableState& state, absl::Time now) {
  workers_.clear();
  next_worker_id_ = std::max<uint64_t>(1, state.next_worker_id);
  for (const WorkerStatus& w : state.workers) {
    WorkerRecord& worker = workers_[w.worker_id];
    worker.status = w;
    worker.dead = !w.healthy;
    worker.last_heartbeat = now;
  }
}

void WorkerPool::WriteTo(DurableState& state) const {
  state.next_worker_id = next_worker_id_;
  for (const auto& [id, w] : workers_) {
    state.workers.push_back(w.status);
    state.workers.back().healthy = !w.dead;
  }
}

WorkerRecord* WorkerPool::Find(uint64_t id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerRecord* WorkerPool::Find(uint64_t id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerPool::SameProcess(const WorkerRecord& worker, const WorkerRegistration& request) {
  return !worker.dead && worker.status.incarnation == request.incarnation;
}

WorkerRecord& WorkerPool::Register(const WorkerRegistration& request, absl::Time now) {
  uint64_t id = request.worker_id;
  WorkerRecord* worker = id == 0 ? nullptr : Find(id);
  if (worker != nullptr && SameProcess(*worker, request)) {
    // The same process again (the coordinator restarted): keep everything.
  } else if (worker != nullptr) {
    // A new process, or one we declared dead: a new incarnation.
    worker->status.incarnation = std::max(worker->status.incarnation, request.incarnation) + 1;
    worker->dead = false;
    worker->status.stopping = false;
    Release(*worker);
  } else {
    if (id == 0) id = next_worker_id_++;
    next_worker_id_ = std::max(next_worker_id_, id + 1);
    worker = &workers_[id];
    worker->status.worker_id = id;
    worker->status.incarnation = request.worker_id == 0 ? 1 : request.incarnation + 1;
    worker->status.state = WorkerState::kIdle;
    LOG(INFO) << "coordinator: worker " << id << " (" << request.name << ") registered";
  }
  worker->status.name = request.name;
  worker->status.has_gpu = request.has_gpu;
  worker->last_heartbeat = now;
  worker->status.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  return *worker;
}

absl::StatusOr<WorkerRecord*> WorkerPool::Beat(const HeartbeatReport& request, absl::Time now) {
  WorkerRecord* worker = Find(request.worker_id);
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", request.worker_id, ": call RegisterWorker"));
  }
  if (worker->dead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id, " was removed after missing heartbeats: register again"));
  }
  if (worker->status.incarnation != request.incarnation) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id, " incarnation ", request.incarnation,
                     " is stale (current ", worker->status.incarnation, "): register again"));
  }
  worker->last_heartbeat = now;
  worker->status.last_heartbeat_unix_ms = absl::ToUnixMillis(now);
  worker->status.stopping |= request.stopping;
  // A state reported for another job (the one it just finished, before it
  // heard of its new assignment) says nothing about the current one: a DONE
  // left over from job A must not complete job B.
  worker->status.state =
      request.job_id == worker->status.job_id ? request.state : WorkerState::kIdle;
  return worker;
}

void WorkerPool::Report(WorkerRecord& worker, const WorkerProgress& progress, absl::Time now,
                        uint64_t join_clock, bool capped) {
  // NOTE: [joiner rate] A joiner's clock jumps to its join clock without a
  // step trained; a rate measured across that jump would push every plan
  // far ahead. Until a sample at or past the join clock is kept, the rate
  // starts over. See docs/design/coordinator-joiner-rate.md.
  if (capped) {
    worker.clock_rate.Reset();  // no rate across a cap
  } else if (worker.clock_rate.sample_clock < join_clock) {
    worker.clock_rate.Restart(now, progress.clock);
  } else {
    worker.clock_rate.Observe(now, progress.clock);
  }
  // The time since the last report trained at about the reported rate, if
  // the clock moved: a member waiting on the others reports its last rate.
  if (worker.last_report != absl::InfinitePast() && progress.clock > worker.progress.clock) {
    worker.reported_samples +=
        progress.samples_per_sec * absl::ToDoubleSeconds(now - worker.last_report);
  }
  worker.last_report = now;
  worker.progress = progress;
  worker.status.clock = progress.clock;
}

uint64_t WorkerPool::Samples(const WorkerRecord& worker, const JobSpec& spec,
                             uint64_t join_clock) {
  // A built-in job's batches are the spec's: exact.
  if (spec.entrypoint.empty()) {
    const uint64_t clock = worker.progress.clock;
    return clock > join_clock ? (clock - join_clock) * spec.batch_size : 0;
  }
  return static_cast<uint64_t>(worker.reported_samples);
}

std::vector<uint64_t> WorkerPool::Overdue(absl::Time now) const {
  std::vector<uint64_t> overdue;
  for (const auto& [id, w] : workers_) {
    if (!w.dead && now - w.last_heartbeat > heartbeat_timeout_) overdue.push_back(id);
  }
  return overdue;
}

void WorkerPool::Excuse(absl::Duration lost, absl::Time now) {
  for (auto& [id, w] : workers_) {
    if (!w.dead) w.last_heartbeat = std::min(now, w.last_heartbeat + lost);
  }
}

void WorkerPool::MarkDead(WorkerRecord& worker) {
  worker.dead = true;
  worker.status.healthy = false;
}

bool WorkerPool::Healthy(const WorkerRecord& worker, absl::Time now) const {
  return !worker.dead && now - worker.last_heartbeat <= heartbeat_timeout_;
}

std::vector<uint64_t> WorkerPool::Free() const {
  std::vector<uint64_t> free;
  for (const auto& [id, w] : workers_) {
    if (!w.dead && !w.status.stopping && w.status.job_id.empty()) free.push_back(id);
  }
  return free;
}

void WorkerPool::Assign(WorkerRecord& worker, const std::string& job_id) {
  worker.status.job_id = job_id;
}

void WorkerPool::Release(WorkerRecord& worker) {
  worker.status.job_id.clear();
  worker.status.rank = 0;
  worker.status.state = WorkerState::kIdle;
  worker.progress = WorkerProgress();
  worker.clock_rate.Reset();
  worker.reported_samples = 0;
  worker.last_report = absl::InfinitePast();
}

}  // namespace gradstream::coordinator
