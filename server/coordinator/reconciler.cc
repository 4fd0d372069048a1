// The reconcile loop; see reconciler.h and [membership epochs] in
// coordinator.h.
#include "server/coordinator/reconciler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
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

// NOTE: [claimed clocks] A heartbeat's clock is its worker's claim, and
// departures and membership plans are placed after it. The shards hold
// every member to its clock (pushes and pulls outside its window are
// refused), so no member is further ahead than the newest clock they or its
// join names by more than the job runs until the next report. A
// claim past that, by kClaimSlack clocks or a minute at the job's rate, is
// capped there: one member's lie cannot move a removal, or every later
// scaling, past the job's end. A capped claim does not feed the member's
// clock rate.
constexpr uint64_t kClaimSlack = 1000;
constexpr double kClaimSlackSeconds = 60;

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

Reconciler::Reconciler(const CoordinatorOptions* options, JobTable* jobs, WorkerPool* workers,
                       ShardFleet* fleet, const Views* views, const JobModels* models,
                       CoordinatorMetrics* metrics, bool* pool_changed)
    : options_(options),
      jobs_(jobs),
      workers_(workers),
      fleet_(fleet),
      views_(views),
      models_(models),
      metrics_(metrics),
      pool_changed_(pool_changed) {}

absl::Duration Reconciler::LeadTime() const {
  // The epoch goes to the shards on the next tick and a worker polls once
  // per heartbeat (see [membership plan]).
  return 2 * absl::Milliseconds(HeartbeatIntervalMs(*options_)) + 2 * options_->tick_interval +
         absl::Milliseconds(500);
}

void Reconciler::BeforeShardCalls() {
  ReapDeadWorkers();
  PruneFinished();
  for (const auto& [id, job] : jobs_->records()) {
    if (job.status.state == JobState::kPending) StartPending(job);
    CheckCompletion(job);
  }
}

void Reconciler::AfterShardCalls() {
  CommitEpochs();
  for (const auto& [id, job] : jobs_->records()) {
    CheckCompletion(job);
    // Scaling needs the clock the shards are at now (see [membership epochs]);
    // the new epoch is persisted at once and goes out with the next tick. A
    // script job not placed yet is on no shard: its clocks are all 0, and it
    // must take workers back even when every member was lost before rank 0
    // declared its tensors.
    const bool clocks_known =
        fleet_->Job(id).stats_fresh || job.status.shard_map.shards.empty();
    if (job.status.state == JobState::kRunning && clocks_known) {
      PlanMembership(job);
    }
    CheckBelowMin(job);
  }
}

// ---------------------------------------------------------------- reports

bool Reconciler::ReportWrites(const WorkerRecord& worker, const HeartbeatReport& request,
                              absl::Time now) const {
  // Mirrors the branches of Report that change the job table.
  const std::string& job_id = worker.status.job_id;
  const JobRecord* job = job_id.empty() ? nullptr : jobs_->Find(job_id);
  if (job == nullptr) return false;
  // Told of the end, or leaving it: amended, not written ([ended jobs]).
  if (IsTerminal(job->status.state)) return false;
  if (request.job_id != job_id) return false;
  if (request.state == WorkerState::kLeft || request.state == WorkerState::kError ||
      DoneEarly(*job, worker.status.worker_id, request.state)) {
    return true;
  }
  // Script jobs place their map from rank 0's declaration ([script jobs]).
  if (job->status.spec.model_type == "script" && job->status.shard_map.shards.empty()) {
    return true;
  }
  ProgressPoint point;  // see RecordProgress
  point.clock = Claimed(*job, worker.status.worker_id, request.progress).accuracy_clock;
  point.unix_ms = UnixMs(now);
  return ShouldRecordProgress(job->status, point);
}

WorkerProgress Reconciler::Claimed(const JobRecord& job, uint64_t worker_id,
                                   const WorkerProgress& report) const {
  uint64_t base = 0;
  double rate = 0;
  if (const JobShards* js = fleet_->Find(job.status.job_id)) {
    base = js->clock_high;
    rate = js->clock_rate.PlanningRate();
  }
  // Not the epochs' clocks: a planned one lies ahead of every member.
  if (const JobMember* m = FindMember(job.status, worker_id)) base = std::max(base, m->join_clock);
  const double by_rate = std::min(1e15, std::max(0.0, rate) * kClaimSlackSeconds);
  const uint64_t slack = SaturatingAdd(SaturatingAdd(kClaimSlack, job.status.spec.staleness),
                                       static_cast<uint64_t>(std::ceil(by_rate)));
  const uint64_t cap = SaturatingAdd(base, slack);
  WorkerProgress out = report;
  out.clock = std::min(out.clock, cap);
  // An evaluation is of a clock the worker reached.
  out.accuracy_clock = std::min(out.accuracy_clock, std::max<uint64_t>(out.clock, 1));
  return out;
}

absl::Status Reconciler::Report(WorkerRecord& worker, const HeartbeatReport& request,
                                absl::Time now) {
  const uint64_t id = worker.status.worker_id;
  const std::string job_id = worker.status.job_id;
  const JobRecord* job = job_id.empty() ? nullptr : jobs_->Find(job_id);
  if (job == nullptr || request.job_id != job_id) return absl::OkStatus();
  const JobMember* joined = FindMember(job->status, id);
  const WorkerProgress progress = Claimed(*job, id, request.progress);
  const bool capped = progress.clock < request.progress.clock;
  if (capped) {
    LOG_EVERY_N(WARNING, 100) << "coordinator: worker " << id << " claims clock "
                              << request.progress.clock << " in job " << job_id
                              << ", past what its shards make possible; taken as "
                              << progress.clock << " (see [claimed clocks])";
  }
  WorkerPool::Report(worker, progress, now, joined ? joined->join_clock : 0, capped);
  RecordProgress(*job, progress, now);
  Declare(job_id, id, request);
  const bool done_early = DoneEarly(*job, id, request.state);
  const bool failed = request.state == WorkerState::kError;
  if (request.state != WorkerState::kLeft && !failed && !done_early) return absl::OkStatus();
  const JobMember* member = FindMember(job->status, id);
  const bool leaving = member != nullptr && member->leaving;
  const std::string failure = absl::StrCat("worker ", id, " failed: ", request.message);
  const uint64_t at = DepartureClock(progress.clock, fleet_->Job(job_id).clocks.min_clock);
  GS_RETURN_IF_ERROR(jobs_->Detach(
      job_id, worker, at,
      leaving && !failed
          ? std::string()
          : absl::StrCat("worker ", id, failed ? " failed" : (done_early ? " finished" : " left")),
      [&](JobRecord& j) {
        // Its script is done: the job winds down, nobody replaces it, nor
        // grows it back, not even with this worker once it is idle again (an
        // elastic job below MAX took it back and ran its script past the last
        // step), nor waits for one ([elastic jobs]).
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
    GS_RETURN_IF_ERROR(Finish(job_id, JobState::kFailed, failure));
  }
  return absl::OkStatus();
}

absl::Status Reconciler::Restarted(WorkerRecord& worker) {
  const std::string job_id = worker.status.job_id;
  const JobRecord* job = jobs_->Find(job_id);
  if (job == nullptr) return absl::OkStatus();
  const uint64_t id = worker.status.worker_id;
  bool in_last = false;
  if (!job->status.epochs.empty()) {
    for (uint64_t w : job->status.epochs.back().worker_ids) in_last |= (w == id);
  }
  const uint64_t at = DepartureClock(worker.progress.clock, fleet_->Job(job_id).clocks.min_clock);
  return jobs_->Detach(job_id, worker, at,
                       in_last ? absl::StrCat("worker ", id, " restarted") : std::string());
}

void Reconciler::RecordProgress(const JobRecord& job, const WorkerProgress& report,
                                absl::Time now) {
  if (IsTerminal(job.status.state)) return;
  ProgressPoint point;
  point.clock = report.accuracy_clock;
  point.unix_ms = UnixMs(now);
  if (!ShouldRecordProgress(job.status, point)) return;
  const JobProgress p = views_->Progress(job);
  point.accuracy = report.accuracy;
  point.loss = p.loss.value_or(0);
  point.samples_per_sec = p.samples_per_sec.value_or(0);
  point.bytes_pushed = p.bytes_pushed.value_or(0);
  point.fp32_bytes_pushed = p.fp32_bytes_pushed.value_or(0);
  // A failed write loses this point only; the next evaluation tries again.
  (void)jobs_->AddProgressPoint(job.status.job_id, point);
}

absl::Status Reconciler::Finish(const std::string& job_id, JobState state,
                                const std::string& message) {
  const JobRecord* job = jobs_->Find(job_id);
  if (job == nullptr) return JobNotFound(job_id);
  GS_RETURN_IF_ERROR(jobs_->Finish(job_id, state, message, views_->Progress(*job)));
  fleet_->Job(job_id).dropped = !(state != JobState::kCompleted || options_->drop_finished_jobs);
  return absl::OkStatus();
}

// ---------------------------------------------------------------- tick phases

PlanInput Reconciler::PlanInputFor(const JobRecord& job) const {
  PlanInput in;
  in.desired_workers = job.status.desired_workers;
  in.min_workers = job.status.min_workers;
  for (const JobMember& m : job.status.members) {
    MemberClock mc{m.worker_id, m.leaving};
    if (const WorkerRecord* w = workers_->Find(m.worker_id)) {
      mc.clock = w->progress.clock;
      mc.clock_rate = w->clock_rate.PlanningRate();
    }
    in.members.push_back(mc);
  }
  in.free_workers = workers_->Free();
  if (const JobShards* js = fleet_->Find(job.status.job_id)) {
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

void Reconciler::PruneFinished() {
  const int64_t cutoff = options_->keep_finished_for == absl::InfiniteDuration()
                             ? INT64_MIN
                             : absl::ToUnixMillis(Now() - options_->keep_finished_for);
  // (finished at, id) of every finished job; most ticks stop after this scan.
  std::vector<std::pair<int64_t, std::string>> finished;
  bool expired = false;
  for (const auto& [id, job] : jobs_->records()) {
    if (!IsTerminal(job.status.state)) continue;
    finished.emplace_back(job.status.finished_unix_ms, id);
    expired |= job.status.finished_unix_ms < cutoff;
  }
  if (finished.size() <= options_->keep_finished && !expired) return;
  std::sort(finished.begin(), finished.end(), std::greater<>());  // newest first
  std::set<std::string> referred;
  for (const auto& [wid, w] : workers_->workers()) {
    if (!w.status.job_id.empty()) referred.insert(w.status.job_id);
  }
  constexpr size_t kMaxPerTick = 1000;  // one bounded transaction
  std::vector<std::string> victims;
  for (size_t i = 0; i < finished.size() && victims.size() < kMaxPerTick; ++i) {
    const auto& [at, id] = finished[i];
    if (i < options_->keep_finished && at >= cutoff) continue;
    // A job placed on shards waits until they dropped it (or need not).
    const JobShards* js = fleet_->Find(id);
    const bool on_shards =
        js != nullptr && !js->dropped && !jobs_->Find(id)->status.shard_map.shards.empty();
    if (referred.count(id) > 0 || on_shards) continue;
    victims.push_back(id);
  }
  if (victims.empty()) return;
  if (absl::Status s = jobs_->Remove(victims); !s.ok()) {
    LOG(WARNING) << "coordinator: cannot delete " << victims.size()
                 << " finished jobs (kept, retried next tick): " << s;
    return;
  }
  for (const std::string& id : victims) fleet_->Forget(id);
  LOG(INFO) << "coordinator: deleted " << victims.size() << " finished jobs (oldest "
            << victims.back() << ") beyond --keep_finished=" << options_->keep_finished
            << " / --keep_finished_for=" << absl::FormatDuration(options_->keep_finished_for);
}

void Reconciler::ReapDeadWorkers() {
  const absl::Time now = Now();
  for (uint64_t id : workers_->Overdue(now)) {
    WorkerRecord& worker = *workers_->Find(id);
    const std::string job_id = worker.status.job_id;
    if (const JobRecord* job = job_id.empty() ? nullptr : jobs_->Find(job_id)) {
      const JobMember* m = FindMember(job->status, id);
      // A leaving member that dies before its leave clock still holds up the
      // rounds before it: it departs too (see [departed]).
      const std::string reason =
          m == nullptr ? std::string()
                       : absl::StrCat("worker ", id,
                                      m->leaving ? " died while leaving" : " missed heartbeats");
      const uint64_t at =
          DepartureClock(worker.progress.clock, fleet_->Job(job_id).clocks.min_clock);
      // Not durable: the worker stays in its job and the next tick retries.
      if (!jobs_->Detach(job_id, worker, at, reason).ok()) continue;
    }
    WorkerPool::MarkDead(worker);
    *pool_changed_ = true;
    metrics_->WorkerRemoved();
    if (worker.status.stopping) {
      LOG(INFO) << "coordinator: worker " << id << " stopped";
    } else {
      LOG(WARNING) << "coordinator: worker " << id << " missed heartbeats for "
                   << options_->heartbeat_timeout;
    }
  }
}

void Reconciler::StartPending(const JobRecord& job) {
  const std::string id = job.status.job_id;  // `job` changes with every Update
  // A script job starts without a map: its script declares the tensors
  // once it runs (see [script jobs]).
  if (!Place(id) && !AwaitsDeclaration(job.status.spec)) return;
  JobShards& js = fleet_->Job(id);
  const absl::Time now = Now();
  if (js.ready_since == absl::InfiniteFuture()) js.ready_since = now;
  const MembershipPlan plan =
      PlanStart(job.status.desired_workers, workers_->Free(),
                now - js.ready_since >= options_->start_grace, job.status.min_workers);
  (void)jobs_->ApplyPlan(id, plan, /*start=*/true);
}

void Reconciler::PlanMembership(const JobRecord& job) {
  const std::string id = job.status.job_id;  // `job` changes with the Update
  const MembershipPlan plan = PlanScaling(PlanInputFor(job));
  // An elastic job back inside its range waits no more ([elastic jobs]).
  if (plan.action == MembershipPlan::Action::kNone && job.status.min_workers > 0 &&
      absl::StartsWith(job.status.message, "waiting")) {
    jobs_->SetMessage(id, "");
  }
  (void)jobs_->ApplyPlan(id, plan, /*start=*/false);
}

void Reconciler::CheckBelowMin(const JobRecord& job) {
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
      (void)jobs_->SetBelowMinSince(id, 0);
    }
    return;
  }
  if (since == 0) {
    (void)jobs_->SetBelowMinSince(id, UnixMs(now));
    return;
  }
  const absl::Duration timeout = absl::Seconds(job.status.spec.min_workers_timeout_s);
  if (now - absl::FromUnixMillis(since) < timeout) return;
  (void)Finish(
      id, JobState::kFailed,
      absl::StrCat("below min workers for ", absl::FormatDuration(timeout), ": ", active,
                   " of min ", min, " active and no idle worker joined (min_workers_timeout_s ",
                   job.status.spec.min_workers_timeout_s, ")"));
}

void Reconciler::CheckCompletion(const JobRecord& job) {
  if (job.status.state != JobState::kRunning) return;
  const std::string id = job.status.job_id;
  const uint32_t errors = job.status.worker_errors;
  if (errors >= std::max<uint32_t>(3, job.status.desired_workers) &&
      views_->Progress(job).clock == 0) {
    (void)Finish(
        id, JobState::kFailed,
        absl::StrCat(errors, " worker failures before any progress; last: ", job.status.message));
    return;
  }
  int active = 0;
  for (const JobMember& m : job.status.members) {
    if (m.leaving) continue;
    const WorkerRecord* w = workers_->Find(m.worker_id);
    if (w == nullptr) return;
    // DONE, not clock >= steps: every member still pulls the final parameters and
    // evaluates after its last clock, and the job's accuracy comes from that.
    if (w->status.state != WorkerState::kDone) return;
    ++active;
  }
  if (active > 0) {
    (void)Finish(id, JobState::kCompleted, "");
    return;
  }
  // NOTE: [gone at the end] Every member left after the last step (the last
  // one removed for missed heartbeats while it evaluated, say): no worker can
  // join past the end (the planner's EndsBefore), so the job would wait
  // forever. Its shards applied every step, so it is complete, with the last
  // accuracy a member reported (docs/design/coordinator-gone-at-the-end.md).
  const JobShards* js = fleet_->Find(id);
  const uint64_t steps = job.status.spec.steps;
  if (js == nullptr || !js->progress_known || steps == 0 || js->progress_clock < steps) return;
  const JobProgress progress = views_->Progress(job);
  (void)Finish(id, JobState::kCompleted,
               absl::StrCat("every member left after the last step; ",
                            progress.accuracy_clock > 0
                                ? absl::StrCat("accuracy from clock ", progress.accuracy_clock)
                                : std::string("no accuracy reported")));
}

void Reconciler::CommitEpochs() {
  for (const auto& [id, job] : jobs_->records()) {
    if (IsTerminal(job.status.state)) continue;
    if (fleet_->Job(id).acked.empty()) {
      // A script job before its declaration has no shard to acknowledge an
      // epoch: commit it, so that the workers start the script ([script jobs]).
      const uint64_t latest = job.status.epochs.size();
      if (AwaitsDeclaration(job.status.spec) && latest > job.status.committed_epoch) {
        (void)jobs_->Commit(id, latest);
      }
      continue;
    }
    const std::optional<uint64_t> acked = fleet_->Acknowledged(id);
    if (acked && *acked > job.status.committed_epoch) {
      // Not durable: it stays uncommitted and the next tick tries again.
      (void)jobs_->Commit(id, *acked);
    }
  }
}

// ---------------------------------------------------------------- script jobs

bool Reconciler::Place(const std::string& id) {
  const JobRecord* job = jobs_->Find(id);
  if (job == nullptr) return false;
  if (!job->status.shard_map.shards.empty()) return true;
  if (AwaitsDeclaration(job->status.spec)) return false;
  std::vector<std::string> healthy = fleet_->HealthyAddresses();
  const uint32_t want = job->status.spec.shards;
  if (healthy.empty() || healthy.size() < want) {
    jobs_->SetMessage(
        id, absl::StrCat("waiting for shards: ", healthy.size(), " healthy registered, job wants ",
                         want == 0 ? std::string("at least 1") : absl::StrCat(want)));
    return false;
  }
  if (want > 0) healthy.resize(want);
  absl::StatusOr<ShardMap> map = models_->Place(job->status.spec, healthy);
  if (!map.ok()) {
    (void)Finish(id, JobState::kFailed, absl::StrCat("shard map: ", map.status().message()));
    return false;
  }
  if (!jobs_->SetShardMap(id, *map).ok()) return false;
  fleet_->Placed(id, job->status.shard_map.shards.size());
  return true;
}

void Reconciler::Declare(const std::string& job_id, uint64_t worker_id,
                         const HeartbeatReport& request) {
  const JobRecord* job = jobs_->Find(job_id);
  if (job == nullptr || job->status.state != JobState::kRunning ||
      job->status.spec.model_type != "script" || !job->status.shard_map.shards.empty()) {
    return;
  }
  if (AwaitsDeclaration(job->status.spec)) {
    // Only rank 0 of the newest committed epoch declares.
    const uint64_t committed = job->status.committed_epoch;
    if (request.declared_tensors.empty() || committed == 0 ||
        committed > job->status.epochs.size()) {
      return;
    }
    const MembershipEpoch& epoch = job->status.epochs[committed - 1];
    if (epoch.worker_ids.empty() || epoch.worker_ids[0] != worker_id) return;
    absl::StatusOr<JobSpec> spec = models_->Declare(job->status.spec, request.declared_tensors);
    if (!spec.ok()) {
      (void)Finish(job_id, JobState::kFailed,
                   absl::StrCat("the script of worker ", worker_id,
                                " (rank 0) declared invalid tensors: ", spec.status().message()));
      return;
    }
    if (!jobs_->SetSpec(job_id, *spec).ok()) {
      return;  // the next heartbeat declares again
    }
    LOG(INFO) << "coordinator: job " << job_id << ": rank 0 (worker " << worker_id << ") declared "
              << spec->model_tensors << " tensors";
  }
  // Declared but not placed yet (e.g. no healthy shard a moment ago): every
  // heartbeat of a member tries again.
  (void)Place(job_id);
}

bool Reconciler::DoneEarly(const JobRecord& job, uint64_t worker_id, WorkerState state) const {
  if (state != WorkerState::kDone || job.status.spec.entrypoint.empty()) return false;
  for (const JobMember& m : job.status.members) {
    if (m.worker_id == worker_id || m.leaving) continue;
    const WorkerRecord* w = workers_->Find(m.worker_id);
    if (w != nullptr && w->status.state != WorkerState::kDone) return true;
  }
  return false;
}

}  // namespace gradstream::coordinator
