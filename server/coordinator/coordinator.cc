// The coordinator's RPCs and membership changes; see coordinator.h and
// [membership epochs]. Tick() and the shard calls are in
// coordinator_shards.cc, the status views in coordinator_views.cc.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"
#include "server/coordinator/progress_history.h"

namespace gradstream::coordinator {

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, ShardClient* shards, const JobModels* models,
                         std::unique_ptr<StateStorage> store)
    : options_(std::move(options)),
      shards_client_(shards),
      models_(models),
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
      views_(&jobs_.log(), &workers_, &fleet_, options_.env, options_.heartbeat_timeout) {}

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
      {
        absl::MutexLock lock(&stop_mu_);
        if (options_.env->AwaitWithTimeout(&stop_mu_, absl::Condition(&stopping_),
                                           options_.tick_interval)) {
          return;
        }
      }
      Tick();
    }
  });
}

uint32_t Coordinator::heartbeat_interval_ms() const {
  const int64_t ms = absl::ToInt64Milliseconds(options_.heartbeat_timeout) / 5;
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 50, 2000));
}

absl::Duration Coordinator::LeadTime() const {
  // The epoch goes to the shards on the next tick and a worker polls once
  // per heartbeat (see [membership plan]).
  return 2 * absl::Milliseconds(heartbeat_interval_ms()) + 2 * options_.tick_interval +
         absl::Milliseconds(500);
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
            << workers_.workers().size() << " workers, " << fleet_.shards().size() << " shards from "
            << store_->path();
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
    WorkerRecord* known = workers_.Find(request.worker_id);
    if (LeavesJobLocked(request)) {
      const std::string job_id = known->status.job_id;
      if (const JobRecord* job = jobs_.Find(job_id)) {
        bool in_last = false;
        if (!job->status.epochs.empty()) {
          for (uint64_t w : job->status.epochs.back().worker_ids) {
            in_last |= (w == request.worker_id);
          }
        }
        const uint64_t at =
            DepartureClock(known->progress.clock, fleet_.Job(job_id).clocks.min_clock);
        GS_RETURN_IF_ERROR(jobs_.Detach(
            job_id, *known, at,
            in_last ? absl::StrCat("worker ", request.worker_id, " restarted") : std::string()));
      }
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
  r.response.heartbeat_interval_ms = heartbeat_interval_ms();
  r.response.heartbeat_timeout_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout));
  r.sequence = ++registrations_;
  dirty_ = true;
  return r;
}

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
  // Mirrors the branches of HeartbeatLocked that change the job log.
  const WorkerRecord* worker = workers_.Find(request.worker_id);
  if (worker == nullptr || worker->dead || worker->status.incarnation != request.incarnation) {
    return false;  // refused before anything changes
  }
  const std::string& job_id = worker->status.job_id;
  const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id);
  if (job == nullptr) return false;
  // Told of the end, or leaving it: amended, not written ([ended jobs]).
  if (IsTerminal(job->status.state)) return false;
  if (request.job_id != job_id) return false;
  if (request.state == WorkerState::kLeft || request.state == WorkerState::kError ||
      ScriptDoneEarlyLocked(*job, worker->status.worker_id, request.state)) {
    return true;
  }
  // Script jobs place their map from rank 0's declaration ([script jobs]).
  if (job->status.spec.model_type == "script" && job->status.shard_map.shards.empty()) {
    return true;
  }
  ProgressPoint point;  // see RecordProgressLocked
  point.clock = request.progress.accuracy_clock;
  point.unix_ms = UnixMs(now);
  return ShouldRecordProgress(job->status, point);
}

absl::StatusOr<Assignment> Coordinator::HeartbeatLocked(const HeartbeatReport& request,
                                                        absl::Time now) {
  GS_ASSIGN_OR_RETURN(WorkerRecord * worker, workers_.Beat(request, now));
  const uint64_t id = worker->status.worker_id;
  const std::string job_id = worker->status.job_id;
  const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id);
  if (job != nullptr && request.job_id == job_id) {
    const JobMember* joined = FindMember(job->status, id);
    WorkerPool::Report(*worker, request.progress, now, joined ? joined->join_clock : 0);
    RecordProgressLocked(*job, request.progress, now);
    DeclareTensorsLocked(job_id, id, request);
    const bool done_early = ScriptDoneEarlyLocked(*job, id, request.state);
    const bool failed = request.state == WorkerState::kError;
    if (request.state == WorkerState::kLeft || failed || done_early) {
      const JobMember* member = FindMember(job->status, id);
      const bool leaving = member != nullptr && member->leaving;
      const std::string failure = absl::StrCat("worker ", id, " failed: ", request.message);
      const uint64_t at =
          DepartureClock(request.progress.clock, fleet_.Job(job_id).clocks.min_clock);
      GS_RETURN_IF_ERROR(jobs_.Detach(
          job_id, *worker, at,
          leaving && !failed
              ? std::string()
              : absl::StrCat("worker ", request.worker_id,
                             failed ? " failed" : (done_early ? " finished" : " left")),
          [&](JobRecord& j) {
            // Its script is done: the job winds down, nobody replaces it,
            // nor grows it back, not even with this worker once it is idle
            // again (an elastic job below MAX took it back and ran its
            // script past the last step), nor waits for one ([elastic jobs]).
            if (done_early) {
              uint32_t others = 0;
              for (const JobMember& m : j.status.members) {
                others += m.leaving || m.worker_id == id ? 0 : 1;
              }
              j.status.desired_workers = std::max(1u, others);
              j.status.min_workers = std::min(j.status.min_workers, j.status.desired_workers);
            }
            if (!failed) return;
            ++j.status.worker_errors;
            j.status.message = failure;
          }));
      if (failed) LOG(WARNING) << "coordinator: " << failure;
      // A failing training script fails its job (see [script jobs]).
      if (failed && !job->status.spec.entrypoint.empty() && !IsTerminal(job->status.state)) {
        GS_RETURN_IF_ERROR(FinishLocked(job_id, JobState::kFailed, failure));
      }
    }
  }
  Assignment assignment = views_.AssignmentOf(*worker);
  if (job != nullptr && IsTerminal(job->status.state) && worker->status.job_id == job_id) {
    // The worker has now been told; written with the next save (see
    // [ended jobs]).
    (void)jobs_.Detach(job_id, *worker, 0, "");
  }
  metrics_.HeartbeatReceived();
  return assignment;
}

void Coordinator::RecordProgressLocked(const JobRecord& job, const WorkerProgress& report,
                                       absl::Time now) {
  if (IsTerminal(job.status.state)) return;
  ProgressPoint point;
  point.clock = report.accuracy_clock;
  point.unix_ms = UnixMs(now);
  if (!ShouldRecordProgress(job.status, point)) return;
  const JobProgress p = views_.Progress(job);
  point.accuracy = report.accuracy;
  point.loss = p.loss.value_or(0);
  point.samples_per_sec = p.samples_per_sec.value_or(0);
  point.bytes_pushed = p.bytes_pushed.value_or(0);
  point.fp32_bytes_pushed = p.fp32_bytes_pushed.value_or(0);
  // A failed write loses this point only; the next evaluation tries again.
  (void)jobs_.AddProgressPoint(job.status.job_id, point);
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
  auto it = token.empty() ? records.rbegin() : std::make_reverse_iterator(records.lower_bound(token));
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
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " already ended (",
                                                      JobStateName(job->status.state), ")"));
  }
  GS_RETURN_IF_ERROR(FinishLocked(job_id, JobState::kCancelled, "cancelled by user"));
  return views_.Render(*job, false);
}

ClusterStatus Coordinator::GetCluster() {
  absl::MutexLock lock(&mu_);
  return views_.Cluster();
}

// ---------------------------------------------------------------- membership

absl::Status Coordinator::FinishLocked(const std::string& job_id, JobState state,
                                       const std::string& message) {
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  GS_RETURN_IF_ERROR(jobs_.Finish(job_id, state, message, views_.Progress(*job)));
  fleet_.Job(job_id).dropped = !(state != JobState::kCompleted || options_.drop_finished_jobs);
  return absl::OkStatus();
}

PlanInput Coordinator::PlanInputLocked(const JobRecord& job) const {
  PlanInput in;
  in.desired_workers = job.status.desired_workers;
  in.min_workers = job.status.min_workers;
  for (const JobMember& m : job.status.members) {
    MemberClock mc{m.worker_id, m.leaving};
    if (const WorkerRecord* w = workers_.Find(m.worker_id)) {
      mc.clock = w->progress.clock;
      mc.clock_rate = w->clock_rate.PlanningRate();
    }
    in.members.push_back(mc);
  }
  in.free_workers = workers_.Free();
  if (const JobShards* js = fleet_.Find(job.status.job_id)) {
    in.shards = js->clocks;
    in.job_clock_rate = js->clock_rate.PlanningRate();
  }
  const JobSpec& spec = job.status.spec;
  // Outside SYNC a chunk version counts pushes, not clocks (see [membership plan]).
  if (spec.consistency != ConsistencyMode::kSync) in.shards.max_version = 0;
  in.bounded = spec.consistency == ConsistencyMode::kBounded;
  in.staleness = spec.staleness;
  if (!job.status.epochs.empty()) in.last_epoch_clock = job.status.epochs.back().effective_clock;
  // A script decides when it is done ([script jobs]): no last step to plan around.
  in.steps = spec.entrypoint.empty() ? spec.steps : UINT64_MAX;
  in.lead_time = LeadTime();
  return in;
}

// ---------------------------------------------------------------- tick phases

void Coordinator::PruneFinishedLocked() {
  const int64_t cutoff = options_.keep_finished_for == absl::InfiniteDuration()
                             ? INT64_MIN
                             : absl::ToUnixMillis(Now() - options_.keep_finished_for);
  // (finished at, id) of every finished job; most ticks stop after this scan.
  std::vector<std::pair<int64_t, std::string>> finished;
  bool expired = false;
  for (const auto& [id, job] : jobs_.records()) {
    if (!IsTerminal(job.status.state)) continue;
    finished.emplace_back(job.status.finished_unix_ms, id);
    expired |= job.status.finished_unix_ms < cutoff;
  }
  if (finished.size() <= options_.keep_finished && !expired) return;
  std::sort(finished.begin(), finished.end(), std::greater<>());  // newest first
  std::set<std::string> referred;
  for (const auto& [wid, w] : workers_.workers()) {
    if (!w.status.job_id.empty()) referred.insert(w.status.job_id);
  }
  constexpr size_t kMaxPerTick = 1000;  // one bounded transaction
  std::vector<std::string> victims;
  for (size_t i = 0; i < finished.size() && victims.size() < kMaxPerTick; ++i) {
    const auto& [at, id] = finished[i];
    if (i < options_.keep_finished && at >= cutoff) continue;
    // A job placed on shards waits until they dropped it (or need not).
    const JobShards* js = fleet_.Find(id);
    const bool on_shards = js != nullptr && !js->dropped &&
                           !jobs_.Find(id)->status.shard_map.shards.empty();
    if (referred.count(id) > 0 || on_shards) continue;
    victims.push_back(id);
  }
  if (victims.empty()) return;
  if (absl::Status s = jobs_.Remove(victims); !s.ok()) {
    LOG(WARNING) << "coordinator: cannot delete " << victims.size()
                 << " finished jobs (kept, retried next tick): " << s;
    return;
  }
  for (const std::string& id : victims) fleet_.Forget(id);
  LOG(INFO) << "coordinator: deleted " << victims.size() << " finished jobs (oldest "
            << victims.back() << ") beyond --keep_finished=" << options_.keep_finished
            << " / --keep_finished_for=" << absl::FormatDuration(options_.keep_finished_for);
}

void Coordinator::ReapDeadWorkersLocked() {
  const absl::Time now = Now();
  for (uint64_t id : workers_.Overdue(now)) {
    WorkerRecord& worker = *workers_.Find(id);
    const std::string job_id = worker.status.job_id;
    if (const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id)) {
      const JobMember* m = FindMember(job->status, id);
      // A leaving member that dies before its leave clock still holds up the
      // rounds before it: it departs too (see [departed]).
      const std::string reason =
          m == nullptr ? std::string()
                       : absl::StrCat("worker ", id,
                                      m->leaving ? " died while leaving" : " missed heartbeats");
      const uint64_t at =
          DepartureClock(worker.progress.clock, fleet_.Job(job_id).clocks.min_clock);
      // Not durable: the worker stays in its job and the next tick retries.
      if (!jobs_.Detach(job_id, worker, at, reason).ok()) continue;
    }
    WorkerPool::MarkDead(worker);
    dirty_ = true;
    metrics_.WorkerRemoved();
    LOG(WARNING) << "coordinator: worker " << id << " missed heartbeats for "
                 << options_.heartbeat_timeout;
  }
}

void Coordinator::StartPendingJobLocked(const JobRecord& job) {
  const std::string id = job.status.job_id;  // `job` changes with every Update
  // A script job starts without a map: its script declares the tensors
  // once it runs (see [script jobs]).
  if (!PlaceJobLocked(id) && !AwaitsDeclaration(job.status.spec)) return;
  JobShards& js = fleet_.Job(id);
  const absl::Time now = Now();
  if (js.ready_since == absl::InfiniteFuture()) js.ready_since = now;
  const MembershipPlan plan =
      PlanStart(job.status.desired_workers, workers_.Free(),
                now - js.ready_since >= options_.start_grace, job.status.min_workers);
  (void)jobs_.ApplyPlan(id, plan, /*start=*/true);
}

void Coordinator::PlanMembershipLocked(const JobRecord& job) {
  const std::string id = job.status.job_id;  // `job` changes with the Update
  const MembershipPlan plan = PlanScaling(PlanInputLocked(job));
  // An elastic job back inside its range waits no more ([elastic jobs]).
  if (plan.action == MembershipPlan::Action::kNone && job.status.min_workers > 0 &&
      absl::StartsWith(job.status.message, "waiting")) {
    jobs_.SetMessage(id, "");
  }
  (void)jobs_.ApplyPlan(id, plan, /*start=*/false);
}

void Coordinator::CheckBelowMinLocked(const JobRecord& job) {
  const uint32_t min = job.status.min_workers;
  if (job.status.state != JobState::kRunning || min == 0) return;
  const std::string id = job.status.job_id;  // `job` changes with the Update
  uint32_t active = 0;
  for (const JobMember& m : job.status.members) active += m.leaving ? 0 : 1;
  const int64_t since = job.status.below_min_since_unix_ms;
  const absl::Time now = Now();
  // A failed write is tried again on the next tick.
  if (active >= min) {
    if (since != 0) {
      (void)jobs_.SetBelowMinSince(id, 0);
    }
    return;
  }
  if (since == 0) {
    (void)jobs_.SetBelowMinSince(id, UnixMs(now));
    return;
  }
  const absl::Duration timeout = absl::Seconds(job.status.spec.min_workers_timeout_s);
  if (now - absl::FromUnixMillis(since) < timeout) return;
  (void)FinishLocked(id, JobState::kFailed,
                     absl::StrCat("below min workers for ", absl::FormatDuration(timeout), ": ",
                                  active, " of min ", min,
                                  " active and no idle worker joined (min_workers_timeout_s ",
                                  job.status.spec.min_workers_timeout_s, ")"));
}

void Coordinator::CheckCompletionLocked(const JobRecord& job) {
  if (job.status.state != JobState::kRunning) return;
  const std::string id = job.status.job_id;
  const uint32_t errors = job.status.worker_errors;
  if (errors >= std::max<uint32_t>(3, job.status.desired_workers) &&
      views_.Progress(job).clock == 0) {
    (void)FinishLocked(
        id, JobState::kFailed,
        absl::StrCat(errors, " worker failures before any progress; last: ", job.status.message));
    return;
  }
  int active = 0;
  for (const JobMember& m : job.status.members) {
    if (m.leaving) continue;
    const WorkerRecord* w = workers_.Find(m.worker_id);
    if (w == nullptr) return;
    // DONE, not clock >= steps: every member still pulls the final parameters and
    // evaluates after its last clock, and the job's accuracy comes from that.
    if (w->status.state != WorkerState::kDone) return;
    ++active;
  }
  if (active == 0) return;
  (void)FinishLocked(id, JobState::kCompleted, "");
}

}  // namespace gradstream::coordinator
