// The coordinator's core: locks, the RPCs' entry points and the tick; see
// coordinator.h.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

Coordinator::Coordinator(CoordinatorOptions options, ShardClient* shards, const JobModels* models,
                         std::unique_ptr<StateStorage> store)
    : options_(std::move(options)),
      shards_client_(shards),
      metrics_(options_.metrics ? options_.metrics : metrics::Registry::Default()),
      store_(std::move(store)),
      jobs_(
          store_.get(),
          [this](DurableState& state) {
            // JobLog writes only under mu_, and releases it for the write
            // only under write_mu_ (see [state writes off the lock]).
            mu_.AssertHeld();
            write_mu_.AssertHeld();
            WriteRestLocked(state);
          },
          &metrics_, &mu_, &workers_, options_.env, &dirty_),
      workers_(options_.heartbeat_timeout),
      views_(&jobs_.log(), &workers_, &fleet_, options_.env, options_.heartbeat_timeout),
      reconciler_(&options_, &jobs_, &workers_, &fleet_, &views_, models, &metrics_, &dirty_) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(
    CoordinatorOptions options, ShardClient* shards, const JobModels* models,
    std::unique_ptr<StateStorage> storage) {
  if (options.env == nullptr) options.env = Env::Default();
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(options), shards, models, std::move(storage)));
  absl::MutexLock write(&c->write_mu_);
  absl::MutexLock lock(&c->mu_);
  if (absl::Status s = c->LoadLocked(); !s.ok()) return s;
  return c;
}

Coordinator::~Coordinator() {
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  if (ticker_.joinable()) ticker_.join();
}

void Coordinator::StartTicker() {
  ticker_ = options_.env->StartThread("gs-coord-tick", [this] {
    for (;;) {
      const absl::Time before = Now();
      {
        absl::MutexLock lock(&stop_mu_);
        if (options_.env->AwaitWithTimeout(&stop_mu_, absl::Condition(&stopping_),
                                           options_.tick_interval)) {
          return;
        }
      }
      ExcuseStall(Now() - before - options_.tick_interval);
      Tick();
    }
  });
}

void Coordinator::ExcuseStall(absl::Duration lost) {
  // NOTE: [coordinator stall] A wait of one tick that took a heartbeat
  // interval longer means the process did not run (a paused VM, SIGSTOP, a
  // swap storm): it heard nobody, and queued heartbeats timed out at their
  // senders. That time does not count as their silence, or a pause of a
  // heartbeat timeout would evict every worker at once on waking. See
  // docs/design/coordinator-stall.md.
  if (lost <= absl::Milliseconds(HeartbeatIntervalMs(options_))) return;
  LOG(WARNING) << "coordinator: did not run for " << lost
               << " (paused?); heartbeat deadlines move on by that much";
  absl::MutexLock lock(&mu_);
  workers_.Excuse(lost, Now());
}

// ---------------------------------------------------------------- persistence

absl::Status Coordinator::LoadLocked() {
  if (!store_) return absl::OkStatus();
  absl::StatusOr<DurableState> state = store_->Load();
  if (absl::IsNotFound(state.status())) return absl::OkStatus();
  if (!state.ok()) return state.status();
  workers_.Restore(*state, Now());
  jobs_.Restore(*state);
  fleet_.Restore(*state, jobs_.records());
  // A crash between the write that took a worker out of its job and the one
  // that released it leaves the worker pointing at a job that no longer
  // lists it (see [write durably, then apply]): release it.
  for (const auto& [id, w] : workers_.workers()) {
    const JobRecord* job = w.status.job_id.empty() ? nullptr : jobs_.Find(w.status.job_id);
    if (!w.status.job_id.empty() && (job == nullptr || FindMember(job->status, id) == nullptr)) {
      WorkerPool::Release(*workers_.Find(id));
    }
  }
  LOG(INFO) << "coordinator: restored " << jobs_.records().size() << " jobs, "
            << workers_.workers().size() << " workers, " << fleet_.shards().size()
            << " shards from " << store_->path();
  return absl::OkStatus();
}

void Coordinator::WriteRestLocked(DurableState& state) {
  fleet_.WriteTo(state);
  workers_.WriteTo(state);
  copied_registrations_ = registrations_;
}

absl::Status Coordinator::SaveLocked() {
  absl::Status s = jobs_.Checkpoint([this](const JobRecord& job) {
    mu_.AssertHeld();  // called from within Checkpoint, under mu_
    return views_.Progress(job);
  });
  dirty_ = !s.ok();
  // No other write ran since this one's copy (write_mu_ is held).
  if (s.ok()) saved_registrations_ = std::max(saved_registrations_, copied_registrations_);
  return s;
}

// ---------------------------------------------------------------- registration

absl::StatusOr<uint32_t> Coordinator::RegisterShard(const std::string& address) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  GS_ASSIGN_OR_RETURN(uint32_t id,
                      fleet_.AddShard(address, /*healthy=*/true, Now(), jobs_.records()));
  GS_RETURN_IF_ERROR(SaveLocked());
  return id;
}

absl::Status Coordinator::AddConfiguredShards(const std::vector<std::string>& addresses) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  for (const std::string& a : addresses) {
    if (absl::StatusOr<uint32_t> id = fleet_.AddShard(a, /*healthy=*/false, Now(), jobs_.records());
        !id.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--shards: ", id.status().message()));
    }
  }
  return SaveLocked();
}

absl::StatusOr<RegisteredWorker> Coordinator::RegisterWorker(const WorkerRegistration& request) {
  // NOTE: [registration group commit] A registration is durable before it
  // is answered, but registrations that arrive while a write is on disk are
  // added to the pool at once and written together by the first of them to
  // get write_mu_. See docs/design/coordinator-registration-group-commit.md.
  std::optional<Registered> done;
  {
    absl::MutexLock lock(&mu_);
    if (!LeavesJobLocked(request)) done = RegisterLocked(request);
  }
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  if (!done) {
    // A new process of a worker in a job: the old one's place in its job
    // ends where it stopped (a write of its own).
    if (LeavesJobLocked(request)) {
      GS_RETURN_IF_ERROR(reconciler_.Restarted(*workers_.Find(request.worker_id)));
    }
    done = RegisterLocked(request);
  }
  if (saved_registrations_ < done->sequence) GS_RETURN_IF_ERROR(SaveLocked());
  return done->response;
}

bool Coordinator::LeavesJobLocked(const WorkerRegistration& request) const {
  const WorkerRecord* known = request.worker_id == 0 ? nullptr : workers_.Find(request.worker_id);
  return known != nullptr && !WorkerPool::SameProcess(*known, request) &&
         !known->status.job_id.empty();
}

Coordinator::Registered Coordinator::RegisterLocked(const WorkerRegistration& request) {
  WorkerRecord& worker = workers_.Register(request, Now());
  Registered r;
  r.response.worker_id = worker.status.worker_id;
  r.response.incarnation = worker.status.incarnation;
  r.response.heartbeat_interval_ms = HeartbeatIntervalMs(options_);
  r.response.heartbeat_timeout_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  r.sequence = ++registrations_;
  dirty_ = true;
  return r;
}

// ---------------------------------------------------------------- heartbeats

absl::StatusOr<Assignment> Coordinator::Heartbeat(const HeartbeatReport& request) {
  {
    // Most heartbeats change nothing durable: they must not wait for a
    // write on disk (see [state writes off the lock]).
    absl::MutexLock lock(&mu_);
    const absl::Time now = Now();
    if (!HeartbeatWritesLocked(request, now)) return HeartbeatLocked(request, now);
  }
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  return HeartbeatLocked(request, Now());
}

bool Coordinator::HeartbeatWritesLocked(const HeartbeatReport& request, absl::Time now) const {
  const WorkerRecord* worker = workers_.Find(request.worker_id);
  if (worker == nullptr || worker->dead || worker->status.incarnation != request.incarnation) {
    return false;  // refused before anything changes
  }
  return reconciler_.ReportWrites(*worker, request, now);
}

absl::StatusOr<Assignment> Coordinator::HeartbeatLocked(const HeartbeatReport& request,
                                                        absl::Time now) {
  const WorkerRecord* known = workers_.Find(request.worker_id);
  const bool was_stopping = known != nullptr && known->status.stopping;
  GS_ASSIGN_OR_RETURN(WorkerRecord * worker, workers_.Beat(request, now));
  if (worker->status.stopping && !was_stopping) dirty_ = true;  // kept across a restart
  const std::string job_id = worker->status.job_id;
  GS_RETURN_IF_ERROR(reconciler_.Report(*worker, request, now));
  Assignment assignment = views_.AssignmentOf(*worker);
  const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id);
  if (job != nullptr && IsTerminal(job->status.state) && worker->status.job_id == job_id) {
    // The worker has now been told; written with the next save (see
    // [ended jobs] in job_table.h).
    (void)jobs_.Detach(job_id, *worker, 0, "");
  }
  metrics_.HeartbeatReceived();
  return assignment;
}

// ---------------------------------------------------------------- jobs

absl::StatusOr<std::string> Coordinator::SubmitJob(const JobSpec& spec, const std::string& token) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  GS_ASSIGN_OR_RETURN(const std::string id, jobs_.Submit(spec, token));
  fleet_.Job(id);
  LOG(INFO) << "coordinator: job " << id << " submitted (" << spec.name << ")";
  return id;
}

absl::StatusOr<JobStatus> Coordinator::GetJob(const std::string& job_id, bool shard_map) {
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  JobStatus out = views_.Render(*job, true);
  if (!shard_map) out.shard_map = ShardMap();
  return out;
}

absl::StatusOr<std::vector<JobStatus>> Coordinator::ListJobs(uint32_t page_size,
                                                             const std::string& page_token,
                                                             std::string* next_page_token) {
  constexpr uint32_t kDefaultPage = 100, kMaxPage = 1000;
  const uint32_t page = page_size == 0 ? kDefaultPage : std::min(page_size, kMaxPage);
  const std::string& token = page_token;
  if (!token.empty() && !absl::StartsWith(token, "job-")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token: '", token, "' is not a job id (pass a previous page's next_page_token)"));
  }
  absl::MutexLock lock(&mu_);
  std::vector<JobStatus> jobs;
  next_page_token->clear();
  const auto& records = jobs_.records();
  // The token is the last job of the previous page: this page starts below
  // it, so jobs deleted in between (see --keep_finished) shift nothing.
  auto it =
      token.empty() ? records.rbegin() : std::make_reverse_iterator(records.lower_bound(token));
  for (; it != records.rend() && jobs.size() < page; ++it) {
    jobs.push_back(views_.Render(it->second, false));
  }
  if (it != records.rend()) *next_page_token = jobs.back().job_id;
  return jobs;
}

absl::StatusOr<JobStatus> Coordinator::ScaleJob(const std::string& job_id, uint32_t workers,
                                                uint32_t workers_min) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  if (IsTerminal(job->status.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", JobStateName(job->status.state),
                     ": only pending or running jobs can be scaled"));
  }
  const bool elastic = job->status.min_workers > 0;
  if (workers_min > 0 && !elastic) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is not elastic (submitted with a worker count, ",
                     "not a range): scale it with --workers N"));
  }
  // On an elastic job N is the new MAX, and MIN follows it down; MIN:MAX
  // sets both (see [elastic jobs]).
  const uint32_t min = !elastic      ? 0
                       : workers_min ? workers_min
                                     : std::min(job->status.min_workers, workers);
  GS_RETURN_IF_ERROR(jobs_.Scale(job_id, workers, min));
  LOG(INFO) << "coordinator: job " << job_id << " scaled to "
            << (elastic ? absl::StrCat(min, ":") : "") << workers;
  return views_.Render(*job, false);
}

absl::StatusOr<JobStatus> Coordinator::CancelJob(const std::string& job_id) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  if (IsTerminal(job->status.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (", JobStateName(job->status.state), ")"));
  }
  GS_RETURN_IF_ERROR(reconciler_.Finish(job_id, JobState::kCancelled, "cancelled by user"));
  return views_.Render(*job, false);
}

ClusterStatus Coordinator::GetCluster() {
  absl::MutexLock lock(&mu_);
  return views_.Cluster();
}

// ---------------------------------------------------------------- tick

void Coordinator::Tick() {
  absl::MutexLock tick_lock(&tick_mu_);
  std::vector<ShardCall> calls;
  {
    absl::MutexLock write(&write_mu_);
    absl::MutexLock lock(&mu_);
    reconciler_.BeforeShardCalls();
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
  reconciler_.AfterShardCalls();
  UpdateGaugesLocked();
  if (dirty_) (void)SaveLocked();
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
    if (!w.dead && !w.status.stopping && w.status.job_id.empty()) ++counts.workers_idle;
  }
  for (const ShardStatus& s : fleet_.shards()) {
    s.healthy ? ++counts.shards_healthy : ++counts.shards_unhealthy;
  }
  metrics_.ExportCluster(counts);
}

}  // namespace gradstream::coordinator
