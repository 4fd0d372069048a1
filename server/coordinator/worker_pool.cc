// The worker pool; see worker_pool.h.
#include "server/coordinator/worker_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

void WorkerPool::Restore(const v1::CoordinatorState& state, absl::Time now) {
  workers_.clear();
  next_worker_id_ = std::max<uint64_t>(1, state.next_worker_id());
  for (const auto& w : state.workers()) {
    WorkerRecord& worker = workers_[w.worker_id()];
    worker.status = w;
    worker.dead = !w.healthy();
    worker.last_heartbeat = now;
  }
}

void WorkerPool::WriteTo(v1::CoordinatorState& state) const {
  state.set_next_worker_id(next_worker_id_);
  for (const auto& [id, w] : workers_) {
    v1::WorkerStatus* ws = state.add_workers();
    *ws = w.status;
    ws->set_healthy(!w.dead);
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

bool WorkerPool::SameProcess(const WorkerRecord& worker, const v1::RegisterWorkerRequest& request) {
  return !worker.dead && worker.status.incarnation() == request.incarnation();
}

WorkerRecord& WorkerPool::Register(const v1::RegisterWorkerRequest& request, absl::Time now) {
  uint64_t id = request.worker_id();
  WorkerRecord* worker = id == 0 ? nullptr : Find(id);
  if (worker != nullptr && SameProcess(*worker, request)) {
    // The same process again (the coordinator restarted): keep everything.
  } else if (worker != nullptr) {
    // A new process, or one we declared dead: a new incarnation.
    worker->status.set_incarnation(std::max(worker->status.incarnation(), request.incarnation()) +
                                   1);
    worker->dead = false;
    Release(*worker);
  } else {
    if (id == 0) id = next_worker_id_++;
    next_worker_id_ = std::max(next_worker_id_, id + 1);
    worker = &workers_[id];
    worker->status.set_worker_id(id);
    worker->status.set_incarnation(request.worker_id() == 0 ? 1 : request.incarnation() + 1);
    worker->status.set_state(v1::IDLE);
    LOG(INFO) << "coordinator: worker " << id << " (" << request.name() << ") registered";
  }
  worker->status.set_name(request.name());
  worker->status.set_has_gpu(request.has_gpu());
  worker->last_heartbeat = now;
  worker->status.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  return *worker;
}

absl::StatusOr<WorkerRecord*> WorkerPool::Beat(const v1::HeartbeatRequest& request,
                                               absl::Time now) {
  WorkerRecord* worker = Find(request.worker_id());
  if (worker == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", request.worker_id(), ": call RegisterWorker"));
  }
  if (worker->dead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id(), " was removed after missing heartbeats: register again"));
  }
  if (worker->status.incarnation() != request.incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(), " incarnation ", request.incarnation(),
                     " is stale (current ", worker->status.incarnation(), "): register again"));
  }
  worker->last_heartbeat = now;
  worker->status.set_last_heartbeat_unix_ms(absl::ToUnixMillis(now));
  // A state reported for another job (the one it just finished, before it
  // heard of its new assignment) says nothing about the current one: a DONE
  // left over from job A must not complete job B.
  worker->status.set_state(request.job_id() == worker->status.job_id() ? request.state()
                                                                       : v1::IDLE);
  return worker;
}

void WorkerPool::Report(WorkerRecord& worker, const v1::WorkerProgress& progress, absl::Time now,
                        uint64_t join_clock) {
  // NOTE: [joiner rate] A joiner's clock jumps from where it stood (0, idle)
  // to its join clock without a step trained. A rate measured across that
  // jump reads hundreds of clocks per second, and every plan leads by what
  // the fastest rate covers: an elastic job whose joins followed each other
  // planned a join 1,300 clocks ahead of where it was (see [membership
  // plan]). So until a sample at or past the join clock is kept, the rate
  // starts over from the newest report.
  if (worker.clock_rate.sample_clock < join_clock) {
    worker.clock_rate.Restart(now, progress.clock());
  } else {
    worker.clock_rate.Observe(now, progress.clock());
  }
  // The time since the last report trained at about the reported rate, if
  // the clock moved: a member waiting on the others reports its last rate.
  if (worker.last_report != absl::InfinitePast() && progress.clock() > worker.progress.clock()) {
    worker.reported_samples +=
        progress.samples_per_sec() * absl::ToDoubleSeconds(now - worker.last_report);
  }
  worker.last_report = now;
  worker.progress = progress;
  worker.status.set_clock(progress.clock());
}

uint64_t WorkerPool::Samples(const WorkerRecord& worker, const v1::JobSpec& spec,
                             uint64_t join_clock) {
  // A built-in job's batches are the spec's: exact.
  if (spec.entrypoint().empty()) {
    const uint64_t clock = worker.progress.clock();
    return clock > join_clock ? (clock - join_clock) * spec.batch_size() : 0;
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

void WorkerPool::MarkDead(WorkerRecord& worker) {
  worker.dead = true;
  worker.status.set_healthy(false);
}

bool WorkerPool::Healthy(const WorkerRecord& worker, absl::Time now) const {
  return !worker.dead && now - worker.last_heartbeat <= heartbeat_timeout_;
}

std::vector<uint64_t> WorkerPool::Free() const {
  std::vector<uint64_t> free;
  for (const auto& [id, w] : workers_) {
    if (!w.dead && w.status.job_id().empty()) free.push_back(id);
  }
  return free;
}

void WorkerPool::Assign(WorkerRecord& worker, const std::string& job_id) {
  worker.status.set_job_id(job_id);
}

void WorkerPool::Release(WorkerRecord& worker) {
  worker.status.set_job_id("");
  worker.status.set_rank(0);
  worker.status.set_state(v1::IDLE);
  worker.progress.Clear();
  worker.clock_rate.Reset();
  worker.reported_samples = 0;
  worker.last_report = absl::InfinitePast();
}

}  // namespace gradstream::coordinator
