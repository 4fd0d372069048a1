// The coordinator's state machine; see coordinator.h and [membership epochs].
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job/job_spec.h"
#include "common/job/shard_map_proto.h"
#include "common/rpc/rpc.h"
#include "common/status.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

bool Terminal(v1::JobState s) {
  return s == v1::COMPLETED || s == v1::FAILED || s == v1::CANCELLED;
}

v1::JobMember* FindMember(v1::JobStatus& job, uint64_t worker_id) {
  for (auto& m : *job.mutable_members()) {
    if (m.worker_id() == worker_id) return &m;
  }
  return nullptr;
}

const v1::JobMember* FindMember(const v1::JobStatus& job, uint64_t worker_id) {
  for (const auto& m : job.members()) {
    if (m.worker_id() == worker_id) return &m;
  }
  return nullptr;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, ShardClient* shards)
    : options_(std::move(options)),
      shards_client_(shards),
      metrics_(options_.metrics ? options_.metrics : metrics::Registry::Default()) {
  if (!options_.state_file.empty()) {
    store_ = std::make_unique<StateStore>(options_.state_file,
                                          options_.env ? options_.env : Env::Default());
  }
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options,
                                                               ShardClient* shards) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), shards));
  absl::MutexLock lock(&c->mu_);
  if (absl::Status s = c->LoadLocked(); !s.ok()) return s;
  return c;
}

Coordinator::~Coordinator() {
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
}

void Coordinator::StartTicker() {
  ticker_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.tick_interval)) Tick();
  });
}

uint32_t Coordinator::heartbeat_interval_ms() const {
  const int64_t ms = absl::ToInt64Milliseconds(options_.heartbeat_timeout) / 5;
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 50, 2000));
}

// ---------------------------------------------------------------- persistence

absl::Status Coordinator::LoadLocked() {
  if (!store_) return absl::OkStatus();
  absl::StatusOr<v1::CoordinatorState> state = store_->Load();
  if (absl::IsNotFound(state.status())) return absl::OkStatus();
  if (!state.ok()) return state.status();
  const absl::Time now = Now();
  next_job_ = std::max<uint64_t>(1, state->next_job());
  next_worker_id_ = std::max<uint64_t>(1, state->next_worker_id());
  for (const auto& s : state->shards()) {
    Shard shard;
    shard.status = s;
    shard.status.set_healthy(false);  // until it answers a probe
    shards_.push_back(std::move(shard));
  }
  for (const auto& w : state->workers()) {
    Worker worker;
    worker.status = w;
    worker.dead = !w.healthy();
    // A restart is not the workers' fault: give them a full timeout to
    // reach the new process before declaring them dead.
    worker.last_heartbeat = now;
    workers_[w.worker_id()] = std::move(worker);
  }
  for (const auto& j : state->jobs()) {
    Job job;
    job.status = j;
    const size_t n = j.shard_map().shards_size();
    job.shard_created.assign(n, false);
    job.shard_acked.assign(n, 0);
    auto it = state->retired().find(j.job_id());
    if (it != state->retired().end()) job.retired = it->second;
    auto token = state->job_tokens().find(j.job_id());
    if (token != state->job_tokens().end()) job.token = token->second;
    if (Terminal(j.state())) job.dropped = true;
    jobs_[j.job_id()] = std::move(job);
  }
  LOG(INFO) << "coordinator: restored " << jobs_.size() << " jobs, " << workers_.size()
            << " workers, " << shards_.size() << " shards from " << store_->path();
  return absl::OkStatus();
}

absl::Status Coordinator::SaveLocked() {
  dirty_ = false;
  if (!store_) return absl::OkStatus();
  v1::CoordinatorState state;
  state.set_next_job(next_job_);
  state.set_next_worker_id(next_worker_id_);
  for (const auto& s : shards_) *state.add_shards() = s.status;
  for (const auto& [id, w] : workers_) {
    v1::WorkerStatus* ws = state.add_workers();
    *ws = w.status;
    ws->set_healthy(!w.dead);
  }
  for (auto& [id, job] : jobs_) {
    *job.status.mutable_progress() = ProgressLocked(job);
    *state.add_jobs() = job.status;
    (*state.mutable_retired())[id] = job.retired;
    if (!job.token.empty()) (*state.mutable_job_tokens())[id] = job.token;
  }
  const absl::Time start = absl::Now();
  absl::Status s = store_->Save(state);
  metrics_
      ->GetHistogram("gs_coordinator_state_save_seconds", "Time to persist the job table.",
                     metrics::ExponentialBuckets(0.0001, 4, 10))
      ->Observe(absl::ToDoubleSeconds(absl::Now() - start));
  if (!s.ok()) {
    LOG(ERROR) << "coordinator: cannot save state: " << s;
    dirty_ = true;
  }
  return s;
}

// ---------------------------------------------------------------- registration

absl::StatusOr<uint32_t> Coordinator::AddShardLocked(const std::string& address, bool healthy) {
  if (address.empty() || address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("address: want host:port, got '", address, "'"));
  }
  Shard* shard = nullptr;
  for (auto& s : shards_) {
    if (s.status.address() == address) shard = &s;
  }
  if (shard == nullptr) {
    shards_.emplace_back();
    shard = &shards_.back();
    shard->status.set_shard_id(static_cast<uint32_t>(shards_.size()));
    shard->status.set_address(address);
    LOG(INFO) << "coordinator: shard " << shards_.size() << " at " << address;
  }
  if (healthy) {
    shard->status.set_healthy(true);
    shard->status.set_last_seen_unix_ms(UnixMs(Now()));
    shard->status.clear_message();
    // A shard registering again may have restarted and lost its jobs:
    // install them again (it answers AlreadyExists if it still has them).
    for (auto& [id, job] : jobs_) {
      for (int i = 0; i < job.status.shard_map().shards_size(); ++i) {
        if (job.status.shard_map().shards(i) == address) job.shard_created[i] = false;
      }
    }
  }
  return shard->status.shard_id();
}

absl::StatusOr<v1::RegisterShardResponse> Coordinator::RegisterShard(
    const v1::RegisterShardRequest& request) {
  absl::MutexLock lock(&mu_);
  GS_ASSIGN_OR_RETURN(uint32_t id, AddShardLocked(request.address(), /*healthy=*/true));
  v1::RegisterShardResponse response;
  response.set_shard_id(id);
  GS_RETURN_IF_ERROR(SaveLocked());
  return response;
}

absl::Status Coordinator::AddConfiguredShards(const std::vector<std::string>& addresses) {
  absl::MutexLock lock(&mu_);
  for (const std::string& a : addresses) {
    if (absl::StatusOr<uint32_t> id = AddShardLocked(a, /*healthy=*/false); !id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--shards: ", id.status().message()));
    }
  }
  return SaveLocked();
}

absl::StatusOr<v1::RegisterWorkerResponse> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = Now();
  uint64_t id = request.worker_id();
  Worker* worker = nullptr;
  if (id != 0) {
    auto it = workers_.find(id);
    if (it != workers_.end()) worker = &it->second;
  }
  if (worker != nullptr && !worker->dead && worker->status.incarnation() == request.incarnation()) {
    // The same process again (the coordinator restarted): keep everything.
  } else if (worker != nullptr) {
    // A new process, or one we declared dead: a new incarnation.
    if (!worker->status.job_id().empty()) {
      if (Job* job = FindJobLocked(worker->status.job_id())) {
        Worker copy = *worker;
        DetachLocked(*job, *worker);
        if (!Terminal(job->status.state())) {
          const v1::MembershipEpoch* last =
              job->status.epochs().empty() ? nullptr : &job->status.epochs().rbegin()[0];
          bool in_last = false;
          if (last) {
            for (uint64_t w : last->worker_ids()) in_last |= (w == id);
          }
          if (in_last) {
            AddEpochLocked(*job, std::max(copy.progress.clock(), job->shard_min_clock),
                           absl::StrCat("worker ", id, " restarted"));
          }
        }
      }
    }
    worker->status.set_incarnation(std::max(worker->status.incarnation(), request.incarnation()) +
                                   1);
    worker->dead = false;
    worker->progress.Clear();
    worker->status.set_state(v1::IDLE);
    worker->status.set_job_id("");
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
  worker->status.set_last_heartbeat_unix_ms(UnixMs(now));
  v1::RegisterWorkerResponse response;
  response.set_worker_id(id);
  response.set_incarnation(worker->status.incarnation());
  response.set_heartbeat_interval_ms(heartbeat_interval_ms());
  response.set_heartbeat_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  GS_RETURN_IF_ERROR(SaveLocked());
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& request) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unknown worker ", request.worker_id(), ": call RegisterWorker"));
  }
  Worker& worker = it->second;
  if (worker.dead) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", request.worker_id(), " was removed after missing heartbeats: register again"));
  }
  if (worker.status.incarnation() != request.incarnation()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", request.worker_id(), " incarnation ", request.incarnation(),
                     " is stale (current ", worker.status.incarnation(), "): register again"));
  }
  const absl::Time now = Now();
  worker.last_heartbeat = now;
  worker.status.set_last_heartbeat_unix_ms(UnixMs(now));
  // A state reported for another job (the one it just finished, before it
  // heard of its new assignment) says nothing about the current one: a DONE
  // left over from job A must not complete job B.
  worker.status.set_state(request.job_id() == worker.status.job_id() ? request.state()
                                                                     : v1::IDLE);
  Job* job = worker.status.job_id().empty() ? nullptr : FindJobLocked(worker.status.job_id());
  if (job != nullptr && request.job_id() == worker.status.job_id()) {
    const uint64_t clock = request.progress().clock();
    if (worker.rate_time != absl::Time() && clock >= worker.rate_clock) {
      const double dt = absl::ToDoubleSeconds(now - worker.rate_time);
      if (dt > 0.05) {
        const double rate = static_cast<double>(clock - worker.rate_clock) / dt;
        worker.clock_rate = worker.clock_rate == 0 ? rate : 0.5 * worker.clock_rate + 0.5 * rate;
        worker.rate_time = now;
        worker.rate_clock = clock;
      }
    } else {
      worker.rate_time = now;
      worker.rate_clock = clock;
    }
    worker.progress = request.progress();
    worker.status.set_clock(clock);
    v1::JobMember* member = FindMember(job->status, worker.status.worker_id());
    if (request.state() == v1::LEFT || request.state() == v1::ERROR) {
      const bool leaving = member != nullptr && member->leaving();
      const uint64_t at = std::max(clock, job->shard_min_clock);
      if (request.state() == v1::ERROR) {
        job->status.set_worker_errors(job->status.worker_errors() + 1);
        job->status.set_message(
            absl::StrCat("worker ", worker.status.worker_id(), " failed: ", request.message()));
        LOG(WARNING) << "coordinator: " << job->status.message();
      }
      DetachLocked(*job, worker);
      if (!leaving && !Terminal(job->status.state())) {
        AddEpochLocked(*job, at,
                       absl::StrCat("worker ", request.worker_id(),
                                    request.state() == v1::LEFT ? " left" : " failed"));
      }
      dirty_ = true;
    }
  }
  v1::HeartbeatResponse response;
  *response.mutable_assignment() = AssignmentLocked(worker);
  if (job != nullptr && Terminal(job->status.state()) &&
      worker.status.job_id() == job->status.job_id()) {
    DetachLocked(*job, worker);  // the worker has now been told
    dirty_ = true;
  }
  metrics_->GetCounter("gs_coordinator_heartbeats_total", "Worker heartbeats received.")
      ->Increment();
  return response;
}

// ---------------------------------------------------------------- jobs

absl::StatusOr<v1::SubmitJobResponse> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  GS_ASSIGN_OR_RETURN(v1::JobSpec spec, NormalizeJobSpec(request.spec()));
  // Dry-run the split so chunking errors surface now, not when shards exist.
  GS_RETURN_IF_ERROR(BuildShardMap(spec, {"dry-run:0"}).status());
  absl::MutexLock lock(&mu_);
  const std::string id = absl::StrFormat("job-%06d", next_job_++);
  Job& job = jobs_[id];
  job.status.set_job_id(id);
  *job.status.mutable_spec() = spec;
  job.status.set_state(v1::PENDING);
  job.status.set_desired_workers(spec.workers());
  job.status.set_submitted_unix_ms(UnixMs(Now()));
  job.status.set_message("waiting for shards and workers");
  job.token = rpc::NewToken();
  absl::Status saved = SaveLocked();
  if (!saved.ok()) {
    jobs_.erase(id);
    return saved;
  }
  LOG(INFO) << "coordinator: job " << id << " submitted (" << spec.name() << ")";
  v1::SubmitJobResponse response;
  response.set_job_id(id);
  *response.mutable_spec() = spec;
  return response;
}

Coordinator::Job* Coordinator::FindJobLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : &it->second;
}

static absl::Status JobNotFound(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no job '", id, "' (see `gradstream list` for the known jobs)"));
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(const v1::GetJobRequest& request) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJobLocked(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  v1::JobStatus out = RenderJobLocked(*job, true);
  if (!request.include_shard_map()) out.clear_shard_map();
  return out;
}

v1::ListJobsResponse Coordinator::ListJobs() {
  absl::MutexLock lock(&mu_);
  v1::ListJobsResponse response;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    *response.add_jobs() = RenderJobLocked(it->second, false);
  }
  return response;
}

absl::StatusOr<v1::ScaleJobResponse> Coordinator::ScaleJob(const v1::ScaleJobRequest& request) {
  if (request.workers() == 0) {
    return absl::InvalidArgumentError(
        "workers: must be >= 1 (use `gradstream cancel` to stop a job)");
  }
  if (request.workers() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: ", request.workers(), " too many (max 4096)"));
  }
  absl::MutexLock lock(&mu_);
  Job* job = FindJobLocked(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  if (Terminal(job->status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ", v1::JobState_Name(job->status.state()),
                     ": only pending or running jobs can be scaled"));
  }
  job->status.set_desired_workers(request.workers());
  GS_RETURN_IF_ERROR(SaveLocked());
  LOG(INFO) << "coordinator: job " << request.job_id() << " scaled to " << request.workers();
  v1::ScaleJobResponse response;
  *response.mutable_job() = RenderJobLocked(*job, false);
  return response;
}

absl::StatusOr<v1::CancelJobResponse> Coordinator::CancelJob(const v1::CancelJobRequest& request) {
  absl::MutexLock lock(&mu_);
  Job* job = FindJobLocked(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  if (Terminal(job->status.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " already ended (",
                                                      v1::JobState_Name(job->status.state()), ")"));
  }
  FinishLocked(*job, v1::CANCELLED, "cancelled by user");
  GS_RETURN_IF_ERROR(SaveLocked());
  v1::CancelJobResponse response;
  *response.mutable_job() = RenderJobLocked(*job, false);
  return response;
}

v1::ClusterStatus Coordinator::GetCluster() {
  absl::MutexLock lock(&mu_);
  v1::ClusterStatus out;
  out.set_heartbeat_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  for (const auto& s : shards_) {
    v1::ShardStatus* status = out.add_shards();
    *status = s.status;
    uint32_t jobs = 0;
    for (const auto& [id, job] : jobs_) {
      if (Terminal(job.status.state())) continue;
      for (const auto& a : job.status.shard_map().shards()) jobs += (a == s.status.address());
    }
    status->set_jobs(jobs);
  }
  const absl::Time now = Now();
  for (const auto& [id, w] : workers_) {
    v1::WorkerStatus* status = out.add_workers();
    *status = w.status;
    status->set_healthy(!w.dead && now - w.last_heartbeat <= options_.heartbeat_timeout);
    if (Job* job = FindJobLocked(w.status.job_id())) {
      if (const v1::JobMember* m = FindMember(job->status, id)) status->set_rank(m->rank());
    }
  }
  return out;
}

// ---------------------------------------------------------------- views

v1::JobProgress Coordinator::ProgressLocked(const Job& job) const {
  const v1::JobProgress& saved = job.status.progress();
  v1::JobProgress p;
  uint64_t min_clock = UINT64_MAX, max_clock = 0;
  double loss = 0;
  int losses = 0;
  p.set_accuracy(saved.accuracy());
  p.set_accuracy_clock(saved.accuracy_clock());
  uint64_t bytes = job.retired.bytes_pushed(), fp32 = job.retired.fp32_bytes_pushed();
  uint64_t staleness = std::max(saved.max_staleness(), job.shard_max_staleness);
  for (const auto& m : job.status.members()) {
    auto it = workers_.find(m.worker_id());
    if (it == workers_.end()) continue;
    const v1::WorkerProgress& w = it->second.progress;
    bytes += w.bytes_pushed();
    fp32 += w.fp32_bytes_pushed();
    staleness = std::max(staleness, w.max_staleness());
    p.set_residual_norm(std::max(p.residual_norm(), w.residual_norm()));
    if (w.accuracy_clock() > p.accuracy_clock()) {
      p.set_accuracy(w.accuracy());
      p.set_accuracy_clock(w.accuracy_clock());
    }
    if (m.leaving() || (w.clock() == 0 && w.loss() == 0 && w.samples_per_sec() == 0)) continue;
    min_clock = std::min(min_clock, w.clock());
    max_clock = std::max(max_clock, w.clock());
    loss += w.loss();
    ++losses;
    p.set_samples_per_sec(p.samples_per_sec() + w.samples_per_sec());
  }
  if (losses > 0) {
    p.set_clock(std::max(min_clock, Terminal(job.status.state()) ? saved.clock() : 0));
    p.set_max_clock(max_clock);
    p.set_loss(static_cast<float>(loss / losses));
  } else {
    p.set_clock(saved.clock());
    p.set_max_clock(saved.max_clock());
    p.set_loss(saved.loss());
  }
  p.set_bytes_pushed(std::max(bytes, saved.bytes_pushed()));
  p.set_fp32_bytes_pushed(std::max(fp32, saved.fp32_bytes_pushed()));
  if (p.bytes_pushed() > 0) {
    p.set_compression_ratio(static_cast<double>(p.fp32_bytes_pushed()) / p.bytes_pushed());
  }
  p.set_max_staleness(staleness);
  return p;
}

v1::JobStatus Coordinator::RenderJobLocked(const Job& job, bool full) const {
  v1::JobStatus out = job.status;
  *out.mutable_progress() = ProgressLocked(job);
  // Leaving members still push until their leave clock: they count.
  uint32_t active = static_cast<uint32_t>(out.members_size());
  for (auto& m : *out.mutable_members()) {
    auto it = workers_.find(m.worker_id());
    if (it == workers_.end()) continue;
    m.set_clock(it->second.progress.clock());
    m.set_loss(it->second.progress.loss());
    m.set_samples_per_sec(it->second.progress.samples_per_sec());
    m.set_encode_path(it->second.progress.encode_path());
    m.set_encode_share(it->second.progress.encode_share());
  }
  // Members leave a finished job as they hear of its end; report the final
  // epoch's size instead.
  if (Terminal(job.status.state()) && !job.status.epochs().empty()) {
    active = job.status.epochs().rbegin()->worker_ids_size();
  }
  out.set_active_workers(active);
  if (!full) {
    out.clear_shard_map();
    out.clear_epochs();
  }
  return out;
}

v1::Assignment Coordinator::AssignmentLocked(const Worker& worker) {
  v1::Assignment a;
  const Job* job = FindJobLocked(worker.status.job_id());
  if (job == nullptr) return a;
  if (Terminal(job->status.state())) {
    a.set_job_id(job->status.job_id());
    a.set_job_state(job->status.state());
    return a;
  }
  const uint64_t committed = job->status.committed_epoch();
  const auto& epochs = job->status.epochs();
  const uint64_t id = worker.status.worker_id();
  // The newest committed epoch that lists the worker.
  for (int64_t e = static_cast<int64_t>(std::min<uint64_t>(committed, epochs.size())) - 1; e >= 0;
       --e) {
    const v1::MembershipEpoch& epoch = epochs[e];
    auto pos = std::find(epoch.worker_ids().begin(), epoch.worker_ids().end(), id);
    if (pos == epoch.worker_ids().end()) continue;
    a.set_job_id(job->status.job_id());
    a.set_job_state(job->status.state());
    a.set_rank(static_cast<uint32_t>(pos - epoch.worker_ids().begin()));
    a.set_world_size(epoch.worker_ids_size());
    a.set_epoch(epoch.epoch());
    a.set_epoch_clock(epoch.effective_clock());
    if (const v1::JobMember* m = FindMember(job->status, id)) {
      a.set_join_clock(m->join_clock());
    }
    if (static_cast<uint64_t>(e + 1) < committed) {
      // A later committed epoch dropped it: leave when that epoch starts.
      a.set_leave(true);
      a.set_leave_clock(epochs[e + 1].effective_clock());
    }
    *a.mutable_spec() = job->status.spec();
    *a.mutable_shard_map() = job->status.shard_map();
    a.set_job_token(job->token);
    return a;
  }
  return a;  // joining, but its epoch is not committed yet
}

// ---------------------------------------------------------------- membership

void Coordinator::DetachLocked(Job& job, Worker& worker) {
  const uint64_t id = worker.status.worker_id();
  auto* members = job.status.mutable_members();
  for (int i = 0; i < members->size(); ++i) {
    if (members->Get(i).worker_id() != id) continue;
    job.retired.set_bytes_pushed(job.retired.bytes_pushed() + worker.progress.bytes_pushed());
    job.retired.set_fp32_bytes_pushed(job.retired.fp32_bytes_pushed() +
                                      worker.progress.fp32_bytes_pushed());
    job.retired.set_max_staleness(
        std::max(job.retired.max_staleness(), worker.progress.max_staleness()));
    members->DeleteSubrange(i, 1);
    break;
  }
  if (worker.progress.accuracy_clock() > job.status.progress().accuracy_clock()) {
    job.status.mutable_progress()->set_accuracy(worker.progress.accuracy());
    job.status.mutable_progress()->set_accuracy_clock(worker.progress.accuracy_clock());
  }
  worker.status.set_job_id("");
  worker.status.set_rank(0);
  worker.status.set_state(v1::IDLE);
  worker.progress.Clear();
  worker.rate_time = absl::Time();
  worker.clock_rate = 0;
  dirty_ = true;
}

void Coordinator::AddEpochLocked(Job& job, uint64_t effective_clock, const std::string& reason) {
  const auto& epochs = job.status.epochs();
  if (!epochs.empty()) {
    effective_clock = std::max(effective_clock, epochs.rbegin()->effective_clock());
  }
  v1::MembershipEpoch* e = job.status.add_epochs();
  e->set_epoch(static_cast<uint64_t>(job.status.epochs_size()));
  e->set_effective_clock(effective_clock);
  e->set_created_unix_ms(UnixMs(Now()));
  e->set_reason(reason);
  uint32_t rank = 0;
  for (auto& m : *job.status.mutable_members()) {
    if (m.leaving()) continue;
    e->add_worker_ids(m.worker_id());
    m.set_rank(rank++);
  }
  dirty_ = true;
  LOG(INFO) << "coordinator: job " << job.status.job_id() << " epoch " << e->epoch() << " at clock "
            << effective_clock << " with " << e->worker_ids_size() << " workers (" << reason << ")";
  metrics_->GetCounter("gs_coordinator_membership_changes_total", "Membership epochs created.")
      ->Increment();
}

uint64_t Coordinator::LeadClockLocked(const Job& job) const {
  // Where the job is now: the shards' slowest member (fresh this tick), the
  // fastest a bounded job lets anyone be, the sync rounds applied, and what
  // members last reported.
  const auto& consistency = job.status.spec().consistency();
  uint64_t base = std::max(job.shard_min_clock, job.shard_max_version);
  if (consistency.mode() == v1::BOUNDED) base = job.shard_min_clock + consistency.staleness() + 1;
  base = std::max(base, job.shard_max_version);
  double rate = job.clock_rate;
  for (const auto& m : job.status.members()) {
    auto it = workers_.find(m.worker_id());
    if (it == workers_.end()) continue;
    base = std::max(base, it->second.progress.clock());
    rate = std::max(rate, it->second.clock_rate);
  }
  // Members must hear of the change before they reach it: the epoch goes to
  // the shards on the next tick and a worker polls once per heartbeat.
  const double lead_seconds = 2 * heartbeat_interval_ms() / 1000.0 +
                              2 * absl::ToDoubleSeconds(options_.tick_interval) + 0.5;
  return base + 10 + static_cast<uint64_t>(std::ceil(rate * lead_seconds));
}

uint64_t Coordinator::IdleJoinClockLocked(const Job& job) const {
  uint64_t at = std::max(job.shard_min_clock, job.shard_max_version);
  if (!job.status.epochs().empty()) {
    at = std::max(at, job.status.epochs().rbegin()->effective_clock());
  }
  return at;
}

void Coordinator::ReapDeadWorkersLocked() {
  const absl::Time now = Now();
  for (auto& [id, worker] : workers_) {
    if (worker.dead || now - worker.last_heartbeat <= options_.heartbeat_timeout) continue;
    worker.dead = true;
    worker.status.set_healthy(false);
    dirty_ = true;
    metrics_
        ->GetCounter("gs_coordinator_workers_removed_total",
                     "Workers removed after missing heartbeats.")
        ->Increment();
    LOG(WARNING) << "coordinator: worker " << id << " missed heartbeats for "
                 << options_.heartbeat_timeout;
    Job* job = FindJobLocked(worker.status.job_id());
    if (job == nullptr) continue;
    const v1::JobMember* m = FindMember(job->status, id);
    const bool was_active = m != nullptr && !m->leaving();
    const uint64_t at = std::max(worker.progress.clock(), job->shard_min_clock);
    DetachLocked(*job, worker);
    if (was_active && !Terminal(job->status.state())) {
      AddEpochLocked(*job, at, absl::StrCat("worker ", id, " missed heartbeats"));
    }
  }
}

void Coordinator::StartPendingJobLocked(Job& job) {
  const absl::Time now = Now();
  if (job.status.shard_map().shards_size() == 0) {
    std::vector<std::string> healthy;
    for (const auto& s : shards_) {
      if (s.status.healthy()) healthy.push_back(s.status.address());
    }
    const uint32_t want = job.status.spec().shards();
    if (healthy.empty() || healthy.size() < want) {
      job.status.set_message(
          absl::StrCat("waiting for shards: ", healthy.size(), " healthy registered, job wants ",
                       want == 0 ? std::string("at least 1") : absl::StrCat(want)));
      return;
    }
    if (want > 0) healthy.resize(want);
    absl::StatusOr<v1::ShardMap> map = BuildShardMap(job.status.spec(), healthy);
    if (!map.ok()) {
      FinishLocked(job, v1::FAILED, absl::StrCat("shard map: ", map.status().message()));
      return;
    }
    *job.status.mutable_shard_map() = *std::move(map);
    const size_t used = job.status.shard_map().shards_size();
    job.shard_created.assign(used, false);
    job.shard_acked.assign(used, 0);
    dirty_ = true;
  }
  if (job.ready_since == absl::InfiniteFuture()) job.ready_since = now;
  std::vector<Worker*> idle;
  for (auto& [id, w] : workers_) {
    if (!w.dead && w.status.job_id().empty()) idle.push_back(&w);
  }
  const uint32_t desired = job.status.desired_workers();
  if (idle.size() < desired && (idle.empty() || now - job.ready_since < options_.start_grace)) {
    job.status.set_message(
        absl::StrCat("waiting for workers: ", idle.size(), " idle of ", desired, " wanted"));
    return;
  }
  if (idle.size() > desired) idle.resize(desired);
  for (Worker* w : idle) {
    v1::JobMember* m = job.status.add_members();
    m->set_worker_id(w->status.worker_id());
    m->set_incarnation(w->status.incarnation());
    w->status.set_job_id(job.status.job_id());
  }
  job.status.set_state(v1::RUNNING);
  job.status.set_started_unix_ms(UnixMs(now));
  job.status.clear_message();
  AddEpochLocked(job, 0, "start");
}

void Coordinator::PlanMembershipLocked(Job& job) {
  std::vector<v1::JobMember*> active;
  for (auto& m : *job.status.mutable_members()) {
    if (!m.leaving()) active.push_back(&m);
  }
  const uint32_t desired = job.status.desired_workers();
  if (active.size() < desired) {
    std::vector<Worker*> idle;
    for (auto& [id, w] : workers_) {
      if (!w.dead && w.status.job_id().empty() && idle.size() + active.size() < desired) {
        idle.push_back(&w);
      }
    }
    if (idle.empty()) {
      job.status.set_message(absl::StrCat("waiting for workers: ", active.size(), " of ", desired,
                                          " active, none idle"));
      return;
    }
    // With members running, the change must lie ahead of all of them; with
    // none, nothing moves, and the newcomers start where the shards stopped
    // (see [unstaffed clocks] in server/shard/bsp_controller.cc).
    const uint64_t at = active.empty() ? IdleJoinClockLocked(job) : LeadClockLocked(job);
    if (EndsBeforeLocked(job, at)) return;
    for (Worker* w : idle) {
      v1::JobMember* m = job.status.add_members();
      m->set_worker_id(w->status.worker_id());
      m->set_incarnation(w->status.incarnation());
      m->set_join_clock(at);
      w->status.set_job_id(job.status.job_id());
    }
    job.status.clear_message();
    AddEpochLocked(job, at, absl::StrCat("scale up to ", active.size() + idle.size()));
  } else if (active.size() > desired) {
    const uint64_t at = LeadClockLocked(job);
    if (EndsBeforeLocked(job, at)) return;
    // The most recently joined leave first: rank 0 (init, evaluation) stays.
    for (size_t i = desired; i < active.size(); ++i) {
      active[i]->set_leaving(true);
      active[i]->set_leave_clock(at);
    }
    job.status.clear_message();
    AddEpochLocked(job, at, absl::StrCat("scale down to ", desired));
  }
}

bool Coordinator::EndsBeforeLocked(Job& job, uint64_t clock) {
  const uint64_t steps = job.status.spec().steps();
  if (clock < steps) return false;
  // An epoch that would start after the last step changes nothing but the
  // record (and would show workers that never joined).
  job.status.set_message(absl::StrCat("the job ends at clock ", steps,
                                      " before a membership change could take effect (clock ",
                                      clock, ")"));
  return true;
}

void Coordinator::CheckCompletionLocked(Job& job) {
  if (job.status.state() != v1::RUNNING) return;
  const uint32_t errors = job.status.worker_errors();
  if (errors >= std::max<uint32_t>(3, job.status.desired_workers()) &&
      ProgressLocked(job).clock() == 0) {
    FinishLocked(
        job, v1::FAILED,
        absl::StrCat(errors, " worker failures before any progress; last: ", job.status.message()));
    return;
  }
  int active = 0;
  for (const auto& m : job.status.members()) {
    if (m.leaving()) continue;
    auto it = workers_.find(m.worker_id());
    if (it == workers_.end()) return;
    const Worker& w = it->second;
    // DONE, not clock >= steps: rank 0 still pulls the final parameters and
    // evaluates after its last clock, and the job's accuracy comes from that.
    if (w.status.state() != v1::DONE) return;
    ++active;
  }
  if (active == 0) return;
  FinishLocked(job, v1::COMPLETED, "");
}

void Coordinator::FinishLocked(Job& job, v1::JobState state, const std::string& message) {
  *job.status.mutable_progress() = ProgressLocked(job);
  job.status.set_state(state);
  job.status.set_message(message);
  job.status.set_finished_unix_ms(UnixMs(Now()));
  job.dropped = !(state != v1::COMPLETED || options_.drop_finished_jobs);
  dirty_ = true;
  LOG(INFO) << "coordinator: job " << job.status.job_id() << " " << v1::JobState_Name(state)
            << (message.empty() ? "" : ": ") << message;
}

}  // namespace gradstream::coordinator
