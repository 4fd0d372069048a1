// The coordinator's views; see views.h.
#include "server/coordinator/views.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/rpc/worker_token.h"

namespace gradstream::coordinator {

namespace {

// A running job whose shard clock stood still this long shows no
// throughput (see [shard progress]); the CLI prints "stalled" from there on.
constexpr absl::Duration kStallShown = absl::Seconds(2);

// A member that reported neither a clock, a loss nor a rate has measured
// nothing yet: its zeros are not measurements (see [not measured]).
bool HasMeasured(const WorkerProgress& w) {
  return w.clock != 0 || w.loss != 0 || w.samples_per_sec != 0;
}

// NOTE: [size reason] Why a job has the size it has, for `gradstream
// status` (JobStatus.size_reason): what a pending job waits for, how long a
// job below its MIN has waited (see [elastic jobs]), or else the newest
// epoch's reason, a departure read as a shrink ("shrank: worker 2 missed
// heartbeats").
std::string SizeReason(const JobStatus& job, uint32_t active, absl::Time now) {
  if (job.state == JobState::kPending) return job.message;
  if (IsTerminal(job.state)) return "";
  if (job.below_min_since_unix_ms != 0) {
    const int64_t waited =
        absl::ToInt64Seconds(now - absl::FromUnixMillis(job.below_min_since_unix_ms));
    const int64_t left = job.spec.min_workers_timeout_s - waited;
    return absl::StrCat("waiting: below min, ", active, " of min ", job.min_workers, " for ",
                        waited, "s (fails in ", std::max<int64_t>(left, 0),
                        "s unless a worker joins)");
  }
  if (job.epochs.empty()) return "";
  const MembershipEpoch& last = job.epochs.back();
  if (last.reason == "start") return absl::StrCat("started with ", last.worker_ids.size());
  if (absl::StartsWith(last.reason, "worker ")) return absl::StrCat("shrank: ", last.reason);
  return last.reason;
}

// The run's length in seconds once it ended (see [run average]); 0 for a
// job that never started or has not ended.
double RunSeconds(const JobStatus& job) {
  if (job.started_unix_ms <= 0 || job.finished_unix_ms <= job.started_unix_ms) return 0;
  return (job.finished_unix_ms - job.started_unix_ms) / 1000.0;
}

}  // namespace

Views::Views(const JobLog* jobs, const WorkerPool* workers, const ShardFleet* fleet, Env* env,
             absl::Duration heartbeat_timeout)
    : jobs_(jobs),
      workers_(workers),
      fleet_(fleet),
      env_(env),
      heartbeat_timeout_(heartbeat_timeout) {}

JobProgress Views::Progress(const JobRecord& job) const {
  const JobProgress& saved = job.status.progress;
  const JobSpec& spec = job.status.spec;
  JobProgress p;
  uint64_t min_clock = UINT64_MAX, max_clock = 0;
  double loss = 0;
  int losses = 0;
  float rate = 0;
  bool rated = false;    // a member reported a rate (see [not measured])
  bool all_done = true;  // every active member finished its last step
  p.accuracy = saved.accuracy;
  p.accuracy_clock = saved.accuracy_clock;
  const JobProgress& retired = job.retired;
  uint64_t bytes = retired.bytes_pushed.value_or(0);
  uint64_t fp32 = retired.fp32_bytes_pushed.value_or(0);
  uint64_t pulled = retired.bytes_pulled.value_or(0);
  uint64_t fp32_pulled = retired.fp32_bytes_pulled.value_or(0);
  uint64_t discarded = retired.bytes_pulled_discarded;
  uint64_t samples = retired.samples;
  bool reported = bytes > 0 || pulled > 0 || saved.bytes_pushed.has_value();
  uint64_t staleness = saved.max_staleness;
  const JobShards* js = fleet_->Find(job.status.job_id);
  if (js != nullptr) staleness = std::max(staleness, js->max_staleness);
  for (const JobMember& m : job.status.members) {
    const WorkerRecord* worker = workers_->Find(m.worker_id);
    if (worker == nullptr) continue;
    const WorkerProgress& w = worker->progress;
    bytes += w.bytes_pushed;
    fp32 += w.fp32_bytes_pushed;
    pulled += w.bytes_pulled;
    fp32_pulled += w.fp32_bytes_pulled;
    discarded += w.bytes_pulled_discarded;
    samples += WorkerPool::Samples(*worker, spec, m.join_clock);
    reported = reported || HasMeasured(w) || w.bytes_pushed > 0;
    staleness = std::max(staleness, w.max_staleness);
    p.residual_norm = std::max(p.residual_norm, w.residual_norm);
    if (w.accuracy_clock > p.accuracy_clock) {
      p.accuracy = w.accuracy;
      p.accuracy_clock = w.accuracy_clock;
    }
    if (!m.leaving && worker->status.state != WorkerState::kDone) all_done = false;
    if (m.leaving || !HasMeasured(w)) continue;
    min_clock = std::min(min_clock, w.clock);
    max_clock = std::max(max_clock, w.clock);
    loss += w.loss;
    ++losses;
    rate += w.samples_per_sec;
    rated = rated || w.samples_per_sec > 0;
  }
  if (rated) p.samples_per_sec = rate;
  const bool running = job.status.state == JobState::kRunning;
  if (js != nullptr) {
    // See [checkpoint failures] in server/shard/job.h.
    uint64_t failures = 0;
    for (uint64_t f : js->checkpoint_failures) failures += f;
    p.checkpoint_failures = failures;
    for (const std::string& e : js->checkpoint_errors) {
      if (!e.empty()) p.checkpoint_error = e;
    }
  }
  if (losses > 0) {
    p.loss = static_cast<float>(loss / losses);
  } else if (saved.loss) {
    p.loss = saved.loss;
  }
  if (running && js != nullptr && js->progress_known) {
    // The shards' clock, not the members' (see [shard progress]); once every
    // member is done the shards are too, whenever they were last asked.
    p.clock = all_done && losses > 0 ? std::max(min_clock, js->progress_clock) : js->progress_clock;
    p.max_clock = std::max(max_clock, js->clocks.max_clock);
    const absl::Duration still = Now() - js->progress_since;
    if (!all_done && still > absl::ZeroDuration()) {
      p.stalled_seconds = absl::ToDoubleSeconds(still);
      // The members' last rates are from before the stall: nothing moves.
      if (still >= kStallShown) p.samples_per_sec = 0;
    }
    // From the shards' recent clock rate; a script decides its own end.
    const double clocks_per_sec = js->clock_rate.rate;
    if (spec.entrypoint.empty() && clocks_per_sec > 0 && still < kStallShown &&
        p.clock < spec.steps) {
      p.eta_seconds = (spec.steps - p.clock) / clocks_per_sec;
    }
  } else if (losses > 0) {
    p.clock = std::max(min_clock, IsTerminal(job.status.state) ? saved.clock : 0);
    p.max_clock = max_clock;
  } else {
    p.clock = saved.clock;
    p.max_clock = saved.max_clock;
  }
  p.samples = std::max(samples, saved.samples);
  if (IsTerminal(job.status.state)) {
    // See [run average]; a job that trained nothing has no throughput.
    p.samples_per_sec.reset();
    if (p.samples > 0 && RunSeconds(job.status) > 0) {
      p.samples_per_sec = static_cast<float>(p.samples / RunSeconds(job.status));
    }
  }
  if (reported) {
    p.bytes_pushed = std::max(bytes, saved.bytes_pushed.value_or(0));
    p.fp32_bytes_pushed = std::max(fp32, saved.fp32_bytes_pushed.value_or(0));
    p.bytes_pulled = std::max(pulled, saved.bytes_pulled.value_or(0));
    p.fp32_bytes_pulled = std::max(fp32_pulled, saved.fp32_bytes_pulled.value_or(0));
  }
  if (p.bytes_pushed.value_or(0) > 0) {
    p.compression_ratio = static_cast<double>(p.fp32_bytes_pushed.value_or(0)) / *p.bytes_pushed;
  }
  p.bytes_pulled_discarded = std::max(discarded, saved.bytes_pulled_discarded);
  p.max_staleness = staleness;
  return p;
}

JobStatus Views::Render(const JobRecord& job, bool full) const {
  JobStatus out = job.status;
  if (!full) {
    out.shard_map = ShardMap();
    out.epochs.clear();
    out.history.clear();
  }
  out.progress = Progress(job);
  const bool ended = IsTerminal(job.status.state) && RunSeconds(job.status) > 0;
  // Leaving members still push until their leave clock: they count.
  uint32_t active = static_cast<uint32_t>(out.members.size());
  for (JobMember& m : out.members) {
    const WorkerRecord* w = workers_->Find(m.worker_id);
    if (w == nullptr) continue;
    m.clock = w->progress.clock;
    // See [not measured] and [run average].
    if (HasMeasured(w->progress)) m.loss = w->progress.loss;
    if (ended) {
      m.samples_per_sec = static_cast<float>(
          WorkerPool::Samples(*w, job.status.spec, m.join_clock) / RunSeconds(job.status));
    } else if (w->progress.samples_per_sec > 0) {
      m.samples_per_sec = w->progress.samples_per_sec;
    }
    m.encode_path = w->progress.encode_path;
    m.encode_share = w->progress.encode_share;
    m.push_link = w->progress.push_link;
    m.wait_share = w->progress.wait_share;
  }
  // Members leave a finished job as they hear of its end; report the final
  // epoch's size instead.
  if (IsTerminal(job.status.state) && !job.status.epochs.empty()) {
    active = job.status.epochs.back().worker_ids.size();
  }
  out.active_workers = active;
  out.size_reason = SizeReason(job.status, active, Now());
  out.precision = TensorPrecisions(job);
  out.tables = Tables(job);
  if (const JobShards* js = fleet_->Find(job.status.job_id)) {
    out.pull_links.assign(js->pull_links.begin(), js->pull_links.end());
  }
  return out;
}

std::vector<TableProgress> Views::Tables(const JobRecord& job) const {
  std::vector<TableProgress> out;
  const JobShards* js = fleet_->Find(job.status.job_id);
  if (js == nullptr) return out;
  const ShardMap& map = job.status.shard_map;
  std::map<uint32_t, size_t> slot;  // tensor -> index in out, in map order
  for (const auto& [chunk_id, t] : js->tables) {
    if (chunk_id >= map.chunks.size()) continue;
    const uint32_t tensor = map.chunks[chunk_id].tensor;
    auto [it, fresh] = slot.try_emplace(tensor, out.size());
    if (fresh) out.push_back(TableProgress{map.tensors[tensor].name, {}});
    out[it->second].rows += t;
  }
  return out;
}

std::vector<TensorPrecision> Views::TensorPrecisions(const JobRecord& job) const {
  std::vector<TensorPrecision> out;
  const JobShards* js = fleet_->Find(job.status.job_id);
  if (js == nullptr) return out;
  const ShardMap& map = job.status.shard_map;
  std::vector<int> slot(map.tensors.size(), -1);
  auto fold = [&](const std::map<uint64_t, PathPrecision>& chunks,
                  std::optional<PathPrecision> TensorPrecision::*path) {
    for (const auto& [chunk_id, p] : chunks) {
      if (chunk_id >= map.chunks.size()) continue;
      const uint32_t t = map.chunks[chunk_id].tensor;
      if (t >= map.tensors.size()) continue;
      if (slot[t] < 0) {
        slot[t] = static_cast<int>(out.size());
        out.push_back(TensorPrecision{map.tensors[t].name, std::nullopt, std::nullopt});
      }
      std::optional<PathPrecision>& into = out[slot[t]].*path;
      if (!into) {
        into = p;
        into->flushes = 0;
        into->events.clear();
      }
      MergePaths(p, &*into);
    }
  };
  fold(js->pull_precision, &TensorPrecision::pull);
  fold(js->push_precision, &TensorPrecision::push);
  std::sort(out.begin(), out.end(), [&](const TensorPrecision& a, const TensorPrecision& b) {
    return a.tensor < b.tensor;
  });
  return out;
}

Assignment Views::AssignmentOf(const WorkerRecord& worker) const {
  Assignment a;
  const JobRecord* job = jobs_->Find(worker.status.job_id);
  if (job == nullptr) return a;
  if (IsTerminal(job->status.state)) {
    a.job_id = job->status.job_id;
    a.job_state = job->status.state;
    return a;
  }
  const uint64_t committed = job->status.committed_epoch;
  const std::vector<MembershipEpoch>& epochs = job->status.epochs;
  const uint64_t id = worker.status.worker_id;
  // The newest committed epoch that lists the worker.
  for (int64_t e = static_cast<int64_t>(std::min<uint64_t>(committed, epochs.size())) - 1; e >= 0;
       --e) {
    const MembershipEpoch& epoch = epochs[e];
    auto pos = std::find(epoch.worker_ids.begin(), epoch.worker_ids.end(), id);
    if (pos == epoch.worker_ids.end()) continue;
    a.job_id = job->status.job_id;
    a.job_state = job->status.state;
    a.rank = static_cast<uint32_t>(pos - epoch.worker_ids.begin());
    a.world_size = epoch.worker_ids.size();
    a.epoch = epoch.epoch;
    a.epoch_clock = epoch.effective_clock;
    if (const JobMember* m = FindMember(job->status, id)) a.join_clock = m->join_clock;
    if (static_cast<uint64_t>(e + 1) < committed) {
      // A later committed epoch dropped it: leave when that epoch starts.
      a.leave = true;
      a.leave_clock = epochs[e + 1].effective_clock;
    }
    a.spec = job->status.spec;
    // A script job's map only once its shards have the job ([script jobs]).
    if (job->status.spec.model_type != "script" || fleet_->Installed(job->status.job_id)) {
      a.shard_map = job->status.shard_map;
    }
    // The worker's own token, never the job's: see [worker tokens].
    a.job_token = rpc::WorkerToken(job->token, job->status.job_id, id, worker.status.incarnation);
    return a;
  }
  return a;  // joining, but its epoch is not committed yet
}

ClusterStatus Views::Cluster() const {
  ClusterStatus out;
  out.heartbeat_timeout_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(heartbeat_timeout_));
  for (const ShardStatus& s : fleet_->shards()) {
    ShardStatus status = s;
    uint32_t jobs = 0;
    for (const auto& [id, job] : jobs_->records()) {
      if (IsTerminal(job.status.state)) continue;
      for (const std::string& a : job.status.shard_map.shards) jobs += (a == s.address);
    }
    status.jobs = jobs;
    out.shards.push_back(std::move(status));
  }
  const absl::Time now = Now();
  for (const auto& [id, w] : workers_->workers()) {
    WorkerStatus status = w.status;
    status.healthy = workers_->Healthy(w, now);
    if (const JobRecord* job = jobs_->Find(w.status.job_id)) {
      if (const JobMember* m = FindMember(job->status, id)) status.rank = m->rank;
    }
    out.workers.push_back(std::move(status));
  }
  return out;
}

}  // namespace gradstream::coordinator
