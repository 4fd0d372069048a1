// The coordinator's RPCs and membership changes; see coordinator.h and
// [membership epochs]. Tick() and the shard calls are in
// coordinator_shards.cc, the status views in coordinator_views.cc.
#include "server/coordinator/coordinator.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>
#include <vector>
#include <iterator>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job/job_spec.h"
#include "common/job/job_state.h"
#include "common/job/shard_map_proto.h"
#include "common/rpc/rpc.h"
#include "common/status.h"
#include "server/coordinator/progress_history.h"
#include "glog/logging.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

namespace {

int64_t UnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

// Removes `worker` from `job`'s members, keeping what it pushed and trained
// in the job's retired counters and its accuracy if it is the newest.
void FoldOut(JobRecord& job, const WorkerRecord& worker) {
  const uint64_t id = worker.status.worker_id();
  const v1::WorkerProgress& progress = worker.progress;
  auto* members = job.status.mutable_members();
  for (int i = 0; i < members->size(); ++i) {
    if (members->Get(i).worker_id() != id) continue;
    job.retired.set_samples(job.retired.samples() +
                            WorkerPool::Samples(worker, job.status.spec(),
                                                members->Get(i).join_clock()));
    job.retired.set_bytes_pushed(job.retired.bytes_pushed() + progress.bytes_pushed());
    job.retired.set_fp32_bytes_pushed(job.retired.fp32_bytes_pushed() +
                                      progress.fp32_bytes_pushed());
    job.retired.set_bytes_pulled(job.retired.bytes_pulled() + progress.bytes_pulled());
    job.retired.set_fp32_bytes_pulled(job.retired.fp32_bytes_pulled() +
                                      progress.fp32_bytes_pulled());
    job.retired.set_bytes_pulled_discarded(job.retired.bytes_pulled_discarded() +
                                           progress.bytes_pulled_discarded());
    job.retired.set_max_staleness(std::max(job.retired.max_staleness(), progress.max_staleness()));
    members->DeleteSubrange(i, 1);
    break;
  }
  if (progress.accuracy_clock() > job.status.progress().accuracy_clock()) {
    job.status.mutable_progress()->set_accuracy(progress.accuracy());
    job.status.mutable_progress()->set_accuracy_clock(progress.accuracy_clock());
  }
}

absl::Status JobNotFound(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no job '", id, "' (see `gradstream list` for the known jobs)"));
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options, ShardClient* shards,
                         std::unique_ptr<StateStore> store)
    : options_(std::move(options)),
      shards_client_(shards),
      metrics_(options_.metrics ? options_.metrics : metrics::Registry::Default()),
      store_(std::move(store)),
      jobs_(store_.get(),
            [this](v1::CoordinatorState& state) {
              // JobLog writes only under mu_, and releases it for the write
              // only under write_mu_ (see [state writes off the lock]).
              mu_.AssertHeld();
              write_mu_.AssertHeld();
              WriteRestLocked(state);
            },
            &metrics_, &mu_),
      workers_(options_.heartbeat_timeout) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(CoordinatorOptions options,
                                                               ShardClient* shards) {
  if (options.env == nullptr) options.env = Env::Default();
  std::unique_ptr<StateStore> store;
  if (!options.state_file.empty()) {
    absl::StatusOr<std::unique_ptr<StateStore>> opened =
        StateStore::Open(options.state_file, options.store);
    if (!opened.ok()) return opened.status();
    store = *std::move(opened);
  }
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(options), shards, std::move(store)));
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
  absl::StatusOr<v1::CoordinatorState> state = store_->Load();
  if (absl::IsNotFound(state.status())) return absl::OkStatus();
  if (!state.ok()) return state.status();
  for (const auto& s : state->shards()) {
    Shard shard;
    shard.status = s;
    shard.status.set_healthy(false);  // until it answers a probe
    shards_.push_back(std::move(shard));
  }
  workers_.Restore(*state, Now());
  jobs_.Restore(*state);
  for (const auto& [id, job] : jobs_.records()) {
    JobShards& js = job_shards_[id];
    const size_t n = job.status.shard_map().shards_size();
    js.created.assign(n, false);
    js.acked.assign(n, 0);
    js.dropped = IsTerminal(job.status.state());
  }
  // A crash between the write that took a worker out of its job and the one
  // that released it leaves the worker pointing at a job that no longer
  // lists it (see [write durably, then apply]): release it.
  for (const auto& [id, w] : workers_.workers()) {
    const JobRecord* job = w.status.job_id().empty() ? nullptr : jobs_.Find(w.status.job_id());
    if (!w.status.job_id().empty() && (job == nullptr || FindMember(job->status, id) == nullptr)) {
      WorkerPool::Release(*workers_.Find(id));
    }
  }
  LOG(INFO) << "coordinator: restored " << jobs_.records().size() << " jobs, "
            << workers_.workers().size() << " workers, " << shards_.size() << " shards from "
            << store_->path();
  return absl::OkStatus();
}

void Coordinator::WriteRestLocked(v1::CoordinatorState& state) {
  for (const auto& s : shards_) *state.add_shards() = s.status;
  workers_.WriteTo(state);
  copied_registrations_ = registrations_;
}

absl::Status Coordinator::SaveLocked() {
  absl::Status s = jobs_.Checkpoint([this](const JobRecord& job) {
    mu_.AssertHeld();  // called from within Checkpoint, under mu_
    return ProgressLocked(job);
  });
  dirty_ = !s.ok();
  // No other write ran since this one's copy (write_mu_ is held).
  if (s.ok()) saved_registrations_ = std::max(saved_registrations_, copied_registrations_);
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
    for (const auto& [id, job] : jobs_.records()) {
      JobShards& js = job_shards_[id];
      for (int i = 0; i < job.status.shard_map().shards_size(); ++i) {
        if (job.status.shard_map().shards(i) == address) js.created[i] = false;
      }
    }
  }
  return shard->status.shard_id();
}

absl::StatusOr<v1::RegisterShardResponse> Coordinator::RegisterShard(
    const v1::RegisterShardRequest& request) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  GS_ASSIGN_OR_RETURN(uint32_t id, AddShardLocked(request.address(), /*healthy=*/true));
  v1::RegisterShardResponse response;
  response.set_shard_id(id);
  GS_RETURN_IF_ERROR(SaveLocked());
  return response;
}

absl::Status Coordinator::AddConfiguredShards(const std::vector<std::string>& addresses) {
  absl::MutexLock write(&write_mu_);
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
  // NOTE: [registration group commit] A registration is durable before it
  // is answered, but it need not be written by itself: registrations that
  // arrive while a write is on disk are added to the pool at once, and the
  // first of them to get write_mu_ writes them all; the others find their
  // registration already written. A storm of N registrations (a cluster
  // starting, every worker after a coordinator restart) was N whole-state
  // writes in a row (7.6 s for 1024 workers on a quiet machine, more than
  // 160 s on a loaded one; see bench/scale).
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
    WorkerRecord* known = workers_.Find(request.worker_id());
    if (LeavesJobLocked(request)) {
      const std::string job_id = known->status.job_id();
      if (const JobRecord* job = jobs_.Find(job_id)) {
        bool in_last = false;
        if (!job->status.epochs().empty()) {
          for (uint64_t w : job->status.epochs().rbegin()->worker_ids()) {
            in_last |= (w == request.worker_id());
          }
        }
        const uint64_t at =
            DepartureClock(known->progress.clock(), job_shards_[job_id].clocks.min_clock);
        GS_RETURN_IF_ERROR(DetachLocked(
            job_id, *known, at,
            in_last ? absl::StrCat("worker ", request.worker_id(), " restarted") : std::string()));
      }
    }
    done = RegisterLocked(request);
  }
  if (saved_registrations_ < done->sequence) GS_RETURN_IF_ERROR(SaveLocked());
  return done->response;
}

bool Coordinator::LeavesJobLocked(const v1::RegisterWorkerRequest& request) const {
  const WorkerRecord* known =
      request.worker_id() == 0 ? nullptr : workers_.Find(request.worker_id());
  return known != nullptr && !WorkerPool::SameProcess(*known, request) &&
         !known->status.job_id().empty();
}

Coordinator::Registered Coordinator::RegisterLocked(const v1::RegisterWorkerRequest& request) {
  WorkerRecord& worker = workers_.Register(request, Now());
  Registered r;
  r.response.set_worker_id(worker.status.worker_id());
  r.response.set_incarnation(worker.status.incarnation());
  r.response.set_heartbeat_interval_ms(heartbeat_interval_ms());
  r.response.set_heartbeat_timeout_ms(
      static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat_timeout)));
  r.sequence = ++registrations_;
  dirty_ = true;
  return r;
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::Heartbeat(const v1::HeartbeatRequest& request) {
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

bool Coordinator::HeartbeatWritesLocked(const v1::HeartbeatRequest& request,
                                        absl::Time now) const {
  // Mirrors the branches of HeartbeatLocked that change the job log.
  const WorkerRecord* worker = workers_.Find(request.worker_id());
  if (worker == nullptr || worker->dead ||
      worker->status.incarnation() != request.incarnation()) {
    return false;  // refused before anything changes
  }
  const std::string& job_id = worker->status.job_id();
  const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id);
  if (job == nullptr) return false;
  // Told of the end, or leaving it: amended, not written ([ended jobs]).
  if (IsTerminal(job->status.state())) return false;
  if (request.job_id() != job_id) return false;
  if (request.state() == v1::LEFT || request.state() == v1::ERROR ||
      ScriptDoneEarlyLocked(*job, worker->status.worker_id(), request.state())) {
    return true;
  }
  // Script jobs place their map from rank 0's declaration ([script jobs]).
  if (job->status.spec().model().type() == "script" &&
      job->status.shard_map().shards_size() == 0) {
    return true;
  }
  v1::ProgressPoint point;  // see RecordProgressLocked
  point.set_clock(request.progress().accuracy_clock());
  point.set_unix_ms(UnixMs(now));
  return ShouldRecordProgress(job->status, point);
}

absl::StatusOr<v1::HeartbeatResponse> Coordinator::HeartbeatLocked(
    const v1::HeartbeatRequest& request, absl::Time now) {
  GS_ASSIGN_OR_RETURN(WorkerRecord * worker, workers_.Beat(request, now));
  const uint64_t id = worker->status.worker_id();
  const std::string job_id = worker->status.job_id();
  const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id);
  if (job != nullptr && request.job_id() == job_id) {
    const v1::JobMember* joined = FindMember(job->status, id);
    WorkerPool::Report(*worker, request.progress(), now, joined ? joined->join_clock() : 0);
    RecordProgressLocked(*job, request.progress(), now);
    DeclareTensorsLocked(job_id, id, request);
    const bool done_early = ScriptDoneEarlyLocked(*job, id, request.state());
    if (request.state() == v1::LEFT || request.state() == v1::ERROR || done_early) {
      const v1::JobMember* member = FindMember(job->status, id);
      const bool leaving = member != nullptr && member->leaving();
      const bool failed = request.state() == v1::ERROR;
      const std::string failure = absl::StrCat("worker ", id, " failed: ", request.message());
      const uint64_t at =
          DepartureClock(request.progress().clock(), job_shards_[job_id].clocks.min_clock);
      GS_RETURN_IF_ERROR(DetachLocked(
          job_id, *worker, at,
          leaving && !failed
              ? std::string()
              : absl::StrCat("worker ", request.worker_id(),
                             failed ? " failed" : (done_early ? " finished" : " left")),
          [&](JobRecord& j) {
            // Its script is done: the job winds down, nobody replaces it,
            // nor grows it back, not even with this worker once it is idle
            // again (an elastic job below MAX took it back and ran its
            // script past the last step), nor waits for one ([elastic jobs]).
            if (done_early) {
              uint32_t others = 0;
              for (const auto& m : j.status.members()) {
                others += m.leaving() || m.worker_id() == id ? 0 : 1;
              }
              j.status.set_desired_workers(std::max(1u, others));
              j.status.set_min_workers(
                  std::min(j.status.min_workers(), j.status.desired_workers()));
            }
            if (!failed) return;
            j.status.set_worker_errors(j.status.worker_errors() + 1);
            j.status.set_message(failure);
          }));
      if (failed) LOG(WARNING) << "coordinator: " << failure;
      // A failing training script fails its job (see [script jobs]).
      if (failed && !job->status.spec().entrypoint().empty() && !IsTerminal(job->status.state())) {
        GS_RETURN_IF_ERROR(FinishLocked(job_id, v1::FAILED, failure));
      }
    }
  }
  v1::HeartbeatResponse response;
  *response.mutable_assignment() = AssignmentLocked(*worker);
  if (job != nullptr && IsTerminal(job->status.state()) && worker->status.job_id() == job_id) {
    // The worker has now been told; written with the next save (see
    // [ended jobs]).
    (void)DetachLocked(job_id, *worker, 0, "");
  }
  metrics_.HeartbeatReceived();
  return response;
}

void Coordinator::RecordProgressLocked(const JobRecord& job, const v1::WorkerProgress& report,
                                       absl::Time now) {
  if (IsTerminal(job.status.state())) return;
  v1::ProgressPoint point;
  point.set_clock(report.accuracy_clock());
  point.set_unix_ms(UnixMs(now));
  if (!ShouldRecordProgress(job.status, point)) return;
  const v1::JobProgress p = ProgressLocked(job);
  point.set_accuracy(report.accuracy());
  point.set_loss(p.loss());
  point.set_samples_per_sec(p.samples_per_sec());
  point.set_bytes_pushed(p.bytes_pushed());
  point.set_fp32_bytes_pushed(p.fp32_bytes_pushed());
  // A failed write loses this point only; the next evaluation tries again.
  (void)jobs_.Update(job.status.job_id(),
                     [&](JobRecord& j) { AppendProgressPoint(point, &j.status); });
}

// ---------------------------------------------------------------- jobs

absl::StatusOr<v1::SubmitJobResponse> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  GS_ASSIGN_OR_RETURN(v1::JobSpec spec, NormalizeJobSpec(request.spec()));
  // Dry-run the split so chunking errors surface now, not when shards exist.
  if (!AwaitsDeclaration(spec)) GS_RETURN_IF_ERROR(BuildShardMap(spec, {"dry-run:0"}).status());
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  JobRecord record;
  *record.status.mutable_spec() = spec;
  record.status.set_state(v1::PENDING);
  record.status.set_desired_workers(spec.workers());
  record.status.set_min_workers(spec.workers_min());
  record.status.set_submitted_unix_ms(UnixMs(Now()));
  record.status.set_message("waiting for shards and workers");
  record.token = rpc::NewToken();
  GS_ASSIGN_OR_RETURN(const std::string id, jobs_.Create(std::move(record)));
  job_shards_[id];
  LOG(INFO) << "coordinator: job " << id << " submitted (" << spec.name() << ")";
  v1::SubmitJobResponse response;
  response.set_job_id(id);
  *response.mutable_spec() = spec;
  return response;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(const v1::GetJobRequest& request) {
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  v1::JobStatus out = RenderJobLocked(*job, true);
  if (!request.include_shard_map()) out.clear_shard_map();
  return out;
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& request) {
  constexpr uint32_t kDefaultPage = 100, kMaxPage = 1000;
  const uint32_t page = request.page_size() == 0 ? kDefaultPage
                                                 : std::min(request.page_size(), kMaxPage);
  const std::string& token = request.page_token();
  if (!token.empty() && !absl::StartsWith(token, "job-")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token: '", token, "' is not a job id (pass a previous page's next_page_token)"));
  }
  absl::MutexLock lock(&mu_);
  v1::ListJobsResponse response;
  const auto& records = jobs_.records();
  // The token is the last job of the previous page: this page starts below
  // it, so jobs deleted in between (see --keep_finished) shift nothing.
  auto it = token.empty() ? records.rbegin() : std::make_reverse_iterator(records.lower_bound(token));
  for (; it != records.rend() && static_cast<uint32_t>(response.jobs_size()) < page; ++it) {
    *response.add_jobs() = RenderJobLocked(it->second, false);
  }
  if (it != records.rend()) response.set_next_page_token(response.jobs().rbegin()->job_id());
  return response;
}

absl::StatusOr<v1::ScaleJobResponse> Coordinator::ScaleJob(const v1::ScaleJobRequest& request) {
  if (request.workers() == 0) {
    return absl::InvalidArgumentError(
        "workers: must be >= 1 (use `gradstream cancel` to stop a job)");
  }
  if (request.workers() > kMaxJobWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("workers: ", request.workers(), " too many (max ", kMaxJobWorkers, ")"));
  }
  if (request.workers_min() > request.workers()) {
    return absl::InvalidArgumentError(absl::StrCat("workers_min: ", request.workers_min(),
                                                   " is above workers ", request.workers(),
                                                   " (a range MIN:MAX wants 1 <= MIN <= MAX)"));
  }
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  if (IsTerminal(job->status.state())) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is ", v1::JobState_Name(job->status.state()),
                     ": only pending or running jobs can be scaled"));
  }
  const bool elastic = job->status.min_workers() > 0;
  if (request.workers_min() > 0 && !elastic) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", request.job_id(), " is not elastic (submitted with a worker count, ",
                     "not a range): scale it with --workers N"));
  }
  // On an elastic job N is the new MAX, and MIN follows it down; MIN:MAX
  // sets both (see [elastic jobs]).
  const uint32_t min = !elastic                 ? 0
                       : request.workers_min() ? request.workers_min()
                                               : std::min(job->status.min_workers(),
                                                          request.workers());
  GS_RETURN_IF_ERROR(jobs_.Update(request.job_id(), [&](JobRecord& j) {
    j.status.set_desired_workers(request.workers());
    j.status.set_min_workers(min);
  }));
  LOG(INFO) << "coordinator: job " << request.job_id() << " scaled to "
            << (elastic ? absl::StrCat(min, ":") : "") << request.workers();
  v1::ScaleJobResponse response;
  *response.mutable_job() = RenderJobLocked(*job, false);
  return response;
}

absl::StatusOr<v1::CancelJobResponse> Coordinator::CancelJob(const v1::CancelJobRequest& request) {
  absl::MutexLock write(&write_mu_);
  absl::MutexLock lock(&mu_);
  const JobRecord* job = jobs_.Find(request.job_id());
  if (job == nullptr) return JobNotFound(request.job_id());
  if (IsTerminal(job->status.state())) {
    return absl::FailedPreconditionError(absl::StrCat("job ", request.job_id(), " already ended (",
                                                      v1::JobState_Name(job->status.state()), ")"));
  }
  GS_RETURN_IF_ERROR(FinishLocked(request.job_id(), v1::CANCELLED, "cancelled by user"));
  v1::CancelJobResponse response;
  *response.mutable_job() = RenderJobLocked(*job, false);
  return response;
}

// ---------------------------------------------------------------- membership

absl::Status Coordinator::DetachLocked(const std::string& job_id, WorkerRecord& worker,
                                       uint64_t clock, const std::string& epoch_reason,
                                       const std::function<void(JobRecord&)>& also) {
  const uint64_t id = worker.status.worker_id();
  const absl::Time now = Now();
  auto edit = [&](JobRecord& job) {
    if (also) also(job);
    FoldOut(job, worker);
    if (!epoch_reason.empty() && !IsTerminal(job.status.state())) {
      AppendEpoch(job, clock, epoch_reason, now);
      // Gone for good: no round waits for it, even one before a later
      // planned epoch's clock this one was pushed to (see [departed]).
      job.status.mutable_epochs()->rbegin()->add_departed(id);
    }
  };
  // NOTE: [ended jobs] A member of a job that ended leaves it as it hears of
  // the end: nothing is decided on that (no epoch, no state), so the record
  // is amended in memory and written with the next tick's save, not once per
  // member (a cancelled 512-worker job was 512 writes of the whole state in
  // a row; see bench/scale). A crash before that save restores the member in
  // the ended job, and its next heartbeat detaches it again. Nothing else
  // changes an ended job's record but the progress a save installs, so an
  // amendment needs no write_mu_: it cannot be lost under a write in flight
  // (see [state writes off the lock]).
  const JobRecord* current = jobs_.Find(job_id);
  const bool ended = current != nullptr && IsTerminal(current->status.state());
  GS_RETURN_IF_ERROR(ended ? jobs_.Amend(job_id, edit) : jobs_.Update(job_id, edit));
  WorkerPool::Release(worker);
  dirty_ = true;
  return absl::OkStatus();
}

absl::Status Coordinator::ApplyPlanLocked(const std::string& job_id, const MembershipPlan& plan,
                                          bool start) {
  using Action = MembershipPlan::Action;
  if (plan.action == Action::kNone) return absl::OkStatus();
  if (plan.action == Action::kWait) {
    SetMessageLocked(job_id, plan.message);
    return absl::OkStatus();
  }
  // Joiners are assigned before the write that lists them (see [write
  // durably, then apply]), and given back if it fails.
  std::vector<WorkerRecord*> joiners;
  for (uint64_t id : plan.join) {
    WorkerRecord* w = workers_.Find(id);
    CHECK(w != nullptr && w->status.job_id().empty()) << "planned a busy worker " << id;
    WorkerPool::Assign(*w, job_id);
    joiners.push_back(w);
  }
  const absl::Time now = Now();
  absl::Status s = jobs_.Update(job_id, [&](JobRecord& job) {
    for (const WorkerRecord* w : joiners) {
      v1::JobMember* m = job.status.add_members();
      m->set_worker_id(w->status.worker_id());
      m->set_incarnation(w->status.incarnation());
      m->set_join_clock(plan.clock);
    }
    for (auto& m : *job.status.mutable_members()) {
      if (std::find(plan.leave.begin(), plan.leave.end(), m.worker_id()) == plan.leave.end()) {
        continue;
      }
      m.set_leaving(true);
      m.set_leave_clock(plan.clock);
    }
    if (start) {
      job.status.set_state(v1::RUNNING);
      job.status.set_started_unix_ms(UnixMs(now));
    }
    job.status.clear_message();
    AppendEpoch(job, plan.clock, plan.reason, now);
  });
  if (!s.ok()) {
    for (WorkerRecord* w : joiners) WorkerPool::Assign(*w, "");
    return s;
  }
  if (!joiners.empty()) dirty_ = true;
  return absl::OkStatus();
}

void Coordinator::SetMessageLocked(const std::string& job_id, const std::string& message) {
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr || job->status.message() == message) return;
  // A message that did not make it to disk shows up again on the next tick.
  (void)jobs_.Update(job_id, [&](JobRecord& j) { j.status.set_message(message); });
}

absl::Status Coordinator::FinishLocked(const std::string& job_id, v1::JobState state,
                                       const std::string& message) {
  const JobRecord* job = jobs_.Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  const v1::JobProgress progress = ProgressLocked(*job);
  const absl::Time now = Now();
  GS_RETURN_IF_ERROR(jobs_.Update(job_id, [&](JobRecord& j) {
    *j.status.mutable_progress() = progress;
    j.status.set_state(state);
    j.status.set_message(message);
    j.status.set_finished_unix_ms(UnixMs(now));
  }));
  job_shards_[job_id].dropped = !(state != v1::COMPLETED || options_.drop_finished_jobs);
  LOG(INFO) << "coordinator: job " << job_id << " " << v1::JobState_Name(state)
            << (message.empty() ? "" : ": ") << message;
  return absl::OkStatus();
}

PlanInput Coordinator::PlanInputLocked(const JobRecord& job) const {
  PlanInput in;
  in.desired_workers = job.status.desired_workers();
  in.min_workers = job.status.min_workers();
  for (const auto& m : job.status.members()) {
    MemberClock mc{m.worker_id(), m.leaving()};
    if (const WorkerRecord* w = workers_.Find(m.worker_id())) {
      mc.clock = w->progress.clock();
      mc.clock_rate = w->clock_rate.PlanningRate();
    }
    in.members.push_back(mc);
  }
  in.free_workers = workers_.Free();
  if (auto it = job_shards_.find(job.status.job_id()); it != job_shards_.end()) {
    in.shards = it->second.clocks;
    in.job_clock_rate = it->second.clock_rate.PlanningRate();
  }
  const auto& consistency = job.status.spec().consistency();
  // Outside SYNC a chunk version counts pushes, not clocks (see [membership plan]).
  if (consistency.mode() != v1::SYNC) in.shards.max_version = 0;
  in.bounded = consistency.mode() == v1::BOUNDED;
  in.staleness = consistency.staleness();
  if (!job.status.epochs().empty()) {
    in.last_epoch_clock = job.status.epochs().rbegin()->effective_clock();
  }
  // A script decides when it is done ([script jobs]): no last step to plan around.
  in.steps = job.status.spec().entrypoint().empty() ? job.status.spec().steps() : UINT64_MAX;
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
    if (!IsTerminal(job.status.state())) continue;
    finished.emplace_back(job.status.finished_unix_ms(), id);
    expired |= job.status.finished_unix_ms() < cutoff;
  }
  if (finished.size() <= options_.keep_finished && !expired) return;
  std::sort(finished.begin(), finished.end(), std::greater<>());  // newest first
  std::set<std::string> referred;
  for (const auto& [wid, w] : workers_.workers()) {
    if (!w.status.job_id().empty()) referred.insert(w.status.job_id());
  }
  constexpr size_t kMaxPerTick = 1000;  // one bounded transaction
  std::vector<std::string> victims;
  for (size_t i = 0; i < finished.size() && victims.size() < kMaxPerTick; ++i) {
    const auto& [at, id] = finished[i];
    if (i < options_.keep_finished && at >= cutoff) continue;
    // A job placed on shards waits until they dropped it (or need not).
    auto js = job_shards_.find(id);
    const bool on_shards = js != job_shards_.end() && !js->second.dropped &&
                           jobs_.Find(id)->status.shard_map().shards_size() > 0;
    if (referred.count(id) > 0 || on_shards) continue;
    victims.push_back(id);
  }
  if (victims.empty()) return;
  if (absl::Status s = jobs_.Remove(victims); !s.ok()) {
    LOG(WARNING) << "coordinator: cannot delete " << victims.size()
                 << " finished jobs (kept, retried next tick): " << s;
    return;
  }
  for (const std::string& id : victims) job_shards_.erase(id);
  LOG(INFO) << "coordinator: deleted " << victims.size() << " finished jobs (oldest "
            << victims.back() << ") beyond --keep_finished=" << options_.keep_finished
            << " / --keep_finished_for=" << absl::FormatDuration(options_.keep_finished_for);
}

void Coordinator::ReapDeadWorkersLocked() {
  const absl::Time now = Now();
  for (uint64_t id : workers_.Overdue(now)) {
    WorkerRecord& worker = *workers_.Find(id);
    const std::string job_id = worker.status.job_id();
    if (const JobRecord* job = job_id.empty() ? nullptr : jobs_.Find(job_id)) {
      const v1::JobMember* m = FindMember(job->status, id);
      // A leaving member that dies before its leave clock still holds up the
      // rounds before it: it departs too (see [departed]).
      const std::string reason =
          m == nullptr ? std::string()
                       : absl::StrCat("worker ", id,
                                      m->leaving() ? " died while leaving" : " missed heartbeats");
      const uint64_t at =
          DepartureClock(worker.progress.clock(), job_shards_[job_id].clocks.min_clock);
      // Not durable: the worker stays in its job and the next tick retries.
      if (!DetachLocked(job_id, worker, at, reason).ok()) continue;
    }
    WorkerPool::MarkDead(worker);
    dirty_ = true;
    metrics_.WorkerRemoved();
    LOG(WARNING) << "coordinator: worker " << id << " missed heartbeats for "
                 << options_.heartbeat_timeout;
  }
}

void Coordinator::StartPendingJobLocked(const JobRecord& job) {
  const std::string id = job.status.job_id();  // `job` changes with every Update
  // A script job starts without a map: its script declares the tensors
  // once it runs (see [script jobs]).
  if (!PlaceJobLocked(id) && !AwaitsDeclaration(job.status.spec())) return;
  JobShards& js = job_shards_[id];
  const absl::Time now = Now();
  if (js.ready_since == absl::InfiniteFuture()) js.ready_since = now;
  const MembershipPlan plan =
      PlanStart(job.status.desired_workers(), workers_.Free(),
                now - js.ready_since >= options_.start_grace, job.status.min_workers());
  (void)ApplyPlanLocked(id, plan, /*start=*/true);
}

void Coordinator::PlanMembershipLocked(const JobRecord& job) {
  const std::string id = job.status.job_id();  // `job` changes with the Update
  const MembershipPlan plan = PlanScaling(PlanInputLocked(job));
  // An elastic job back inside its range waits no more ([elastic jobs]).
  if (plan.action == MembershipPlan::Action::kNone && job.status.min_workers() > 0 &&
      absl::StartsWith(job.status.message(), "waiting")) {
    SetMessageLocked(id, "");
  }
  (void)ApplyPlanLocked(id, plan, /*start=*/false);
}

void Coordinator::CheckBelowMinLocked(const JobRecord& job) {
  const uint32_t min = job.status.min_workers();
  if (job.status.state() != v1::RUNNING || min == 0) return;
  const std::string id = job.status.job_id();  // `job` changes with the Update
  uint32_t active = 0;
  for (const auto& m : job.status.members()) active += m.leaving() ? 0 : 1;
  const int64_t since = job.status.below_min_since_unix_ms();
  const absl::Time now = Now();
  // A failed write is tried again on the next tick.
  if (active >= min) {
    if (since != 0) {
      (void)jobs_.Update(id, [](JobRecord& j) { j.status.clear_below_min_since_unix_ms(); });
    }
    return;
  }
  if (since == 0) {
    (void)jobs_.Update(id, [&](JobRecord& j) { j.status.set_below_min_since_unix_ms(UnixMs(now)); });
    return;
  }
  const absl::Duration timeout = absl::Seconds(job.status.spec().min_workers_timeout_s());
  if (now - absl::FromUnixMillis(since) < timeout) return;
  (void)FinishLocked(id, v1::FAILED,
                     absl::StrCat("below min workers for ", absl::FormatDuration(timeout), ": ",
                                  active, " of min ", min,
                                  " active and no idle worker joined (min_workers_timeout_s ",
                                  job.status.spec().min_workers_timeout_s(), ")"));
}

void Coordinator::CheckCompletionLocked(const JobRecord& job) {
  if (job.status.state() != v1::RUNNING) return;
  const std::string id = job.status.job_id();
  const uint32_t errors = job.status.worker_errors();
  if (errors >= std::max<uint32_t>(3, job.status.desired_workers()) &&
      ProgressLocked(job).clock() == 0) {
    (void)FinishLocked(
        id, v1::FAILED,
        absl::StrCat(errors, " worker failures before any progress; last: ", job.status.message()));
    return;
  }
  int active = 0;
  for (const auto& m : job.status.members()) {
    if (m.leaving()) continue;
    const WorkerRecord* w = workers_.Find(m.worker_id());
    if (w == nullptr) return;
    // DONE, not clock >= steps: every member still pulls the final parameters and
    // evaluates after its last clock, and the job's accuracy comes from that.
    if (w->status.state() != v1::DONE) return;
    ++active;
  }
  if (active == 0) return;
  (void)FinishLocked(id, v1::COMPLETED, "");
}

}  // namespace gradstream::coordinator
