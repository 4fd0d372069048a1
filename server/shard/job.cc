#include "server/shard/job.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "glog/logging.h"

namespace gradstream::shard {
namespace {

constexpr size_t kMaxRoundRecords = 4096;

bool Contains(const std::vector<uint64_t>& v, uint64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

Job::Job(JobOptions options, Optimizer optimizer, Env* env, Executor* executor)
    : options_(std::move(options)),
      optimizer_(std::move(optimizer)),
      env_(env),
      executor_(executor),
      controller_(NewController(options_.consistency)),
      staleness_hist_(kStalenessBuckets, 0) {
  for (const ChunkSpec& spec : options_.chunks) {
    auto chunk = std::make_unique<ChunkState>(spec.chunk_id, spec.num_elems);
    {
      absl::MutexLock l(&chunk->mu);
      chunk->params.assign(spec.num_elems, 0.0f);
      chunk->opt = optimizer_.NewState(spec.num_elems);
    }
    chunk_by_id_[spec.chunk_id] = chunk.get();
    chunks_.push_back(std::move(chunk));
  }
  absl::MutexLock l(&members_mu_);
  epochs_.push_back(options_.membership);
}

absl::StatusOr<Job::Opened> Job::Open(JobOptions options, Env* env, Executor* executor) {
  if (options.job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  if (options.chunks.empty()) return absl::InvalidArgumentError("job has no chunks");
  absl::flat_hash_map<uint64_t, bool> seen;
  for (const ChunkSpec& c : options.chunks) {
    if (c.num_elems == 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id, " has 0 elements"));
    }
    if (!seen.emplace(c.chunk_id, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id, " listed twice"));
    }
  }
  if (options.max_pending_rounds == 0) options.max_pending_rounds = 1;
  GS_ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::Create(options.optimizer));
  std::shared_ptr<Job> job(new Job(std::move(options), std::move(optimizer), env, executor));
  Opened opened;
  opened.job = job;
  if (job->options_.checkpoint_dir.empty()) return opened;

  const std::string path =
      CheckpointPath(job->options_.checkpoint_dir, job->id(), job->options_.shard_index);
  absl::StatusOr<std::string> data = env->ReadFile(path);
  if (absl::IsNotFound(data.status())) return opened;
  if (!data.ok()) return data.status();
  absl::StatusOr<JobSnapshot> snap = DecodeCheckpoint(*data);
  if (!snap.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", snap.status().message()));
  }
  GS_RETURN_IF_ERROR(job->Restore(*snap));
  opened.restored = true;
  opened.restored_clock = snap->clock;
  LOG(INFO) << "job " << job->id() << " restored from " << path << " at clock " << snap->clock;
  return opened;
}

absl::Status Job::Restore(const JobSnapshot& snap) {
  auto mismatch = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint of job '", snap.job_id, "' does not match this job: ", what));
  };
  if (snap.job_id != options_.job_id) return mismatch("job id");
  if (snap.shard_index != options_.shard_index) return mismatch("shard index");
  if (snap.mode != options_.consistency.mode) return mismatch("consistency mode");
  if (snap.optimizer != options_.optimizer.type) return mismatch("optimizer type");
  if (snap.chunks.size() != chunks_.size()) return mismatch("chunk count");
  for (const ChunkSnapshot& c : snap.chunks) {
    ChunkState* chunk = FindChunk(c.chunk_id);
    if (chunk == nullptr || chunk->num_elems != c.num_elems) {
      return mismatch(absl::StrCat("chunk ", c.chunk_id));
    }
    if (c.opt.slots.size() != static_cast<size_t>(NumStateSlots(options_.optimizer.type))) {
      return mismatch("optimizer state slots");
    }
  }
  for (const ChunkSnapshot& c : snap.chunks) {
    ChunkState* chunk = FindChunk(c.chunk_id);
    absl::MutexLock l(&chunk->mu);
    chunk->params = c.params;
    chunk->opt = c.opt;
    chunk->applied.clear();
    for (const auto& [w, a] : c.applied) chunk->applied[w] = a;
    chunk->version.store(c.version);
    chunk->initialized.store(c.initialized);
  }
  absl::MutexLock l(&members_mu_);
  if (!snap.epochs.empty()) {
    MembershipEpoch requested = epochs_.back();
    epochs_ = snap.epochs;
    // A CreateJob that brings a newer epoch than the checkpoint's wins.
    if (requested.epoch > epochs_.back().epoch &&
        requested.effective_clock >= epochs_.back().effective_clock) {
      epochs_.push_back(std::move(requested));
    }
  }
  for (const auto& [w, c] : snap.worker_clocks) clocks_[w] = c;
  for (const auto& [w, i] : snap.incarnations) incarnations_[w] = i;
  last_checkpoint_clock_.store(snap.clock);
  return absl::OkStatus();
}

ChunkState* Job::FindChunk(uint64_t id) const {
  auto it = chunk_by_id_.find(id);
  return it == chunk_by_id_.end() ? nullptr : it->second;
}

absl::StatusOr<Job::HelloInfo> Job::Hello(uint64_t worker, uint64_t incarnation) {
  HelloInfo info;
  {
    absl::MutexLock l(&members_mu_);
    auto [it, inserted] = incarnations_.emplace(worker, incarnation);
    if (!inserted) {
      if (incarnation < it->second) {
        return absl::FailedPreconditionError(absl::StrCat("stale incarnation ", incarnation,
                                                          " of worker ", worker, ": incarnation ",
                                                          it->second, " already joined"));
      }
      it->second = incarnation;
    }
    info.epoch = epochs_.back().epoch;
  }
  for (const auto& c : chunks_) info.chunk_ids.push_back(c->chunk_id);
  return info;
}

absl::Status Job::CheckIncarnation(uint64_t worker, uint64_t incarnation) const {
  absl::ReaderMutexLock l(&members_mu_);
  auto it = incarnations_.find(worker);
  if (it != incarnations_.end() && incarnation < it->second) {
    return absl::FailedPreconditionError(absl::StrCat("incarnation ", incarnation, " of worker ",
                                                      worker, " was replaced by incarnation ",
                                                      it->second));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Job::Push(const PushArgs& push) {
  ChunkState* chunk = FindChunk(push.chunk_id);
  if (chunk == nullptr) {
    pushes_rejected_.fetch_add(1);
    return absl::NotFoundError(
        absl::StrCat("chunk ", push.chunk_id, " is not on this shard for job ", id()));
  }
  absl::StatusOr<bool> dup;
  uint64_t before = 0, after = 0;
  {
    absl::MutexLock l(&chunk->mu);
    before = chunk->version.load();
    dup = controller_->Push(*chunk, push, *this);
    after = chunk->version.load();
  }
  if (!dup.ok()) {
    pushes_rejected_.fetch_add(1);
    return dup;
  }
  if (*dup) {
    pushes_duplicate_.fetch_add(1);
    return true;
  }
  pushes_applied_.fetch_add(1);
  bytes_in_.fetch_add(push.payload.size());
  fp32_bytes_in_.fetch_add(uint64_t{push.header.num_elems} * sizeof(float));
  if (after != before) {
    Wake();
    MaybeCheckpoint();
  }
  return false;
}

absl::StatusOr<bool> Job::Init(uint64_t chunk_id, std::string_view values) {
  ChunkState* chunk = FindChunk(chunk_id);
  if (chunk == nullptr) {
    return absl::NotFoundError(absl::StrCat("chunk ", chunk_id, " is not on this shard"));
  }
  if (values.size() != size_t{chunk->num_elems} * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("InitChunk for chunk ", chunk_id, " has ",
                                                   values.size(), " bytes, expected ",
                                                   size_t{chunk->num_elems} * sizeof(float)));
  }
  std::vector<float> v(chunk->num_elems);
  std::memcpy(v.data(), values.data(), values.size());
  for (float x : v) {
    if (!std::isfinite(x)) return absl::InvalidArgumentError("InitChunk holds NaN/Inf");
  }
  {
    absl::MutexLock l(&chunk->mu);
    if (chunk->initialized.load() || chunk->version.load() > 0) return true;
    chunk->params = std::move(v);
    chunk->initialized.store(true);
    controller_->Advance(*chunk, *this);
  }
  Wake();
  return false;
}

const MembershipEpoch* Job::EpochAtLocked(uint64_t clock) const {
  // Epochs are sorted by effective clock; the last one at or before `clock`
  // is in effect there.
  const MembershipEpoch* found = nullptr;
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock <= clock) found = &e;
  }
  return found;
}

std::vector<uint64_t> Job::MembersAt(uint64_t clock, uint64_t* epoch) const {
  absl::ReaderMutexLock l(&members_mu_);
  const MembershipEpoch* found = EpochAtLocked(clock);
  if (found == nullptr) {
    *epoch = 0;
    return {};
  }
  *epoch = found->epoch;
  return found->workers;
}

std::optional<uint64_t> Job::NextStaffedClock(uint64_t clock) const {
  absl::ReaderMutexLock l(&members_mu_);
  // The candidates are `clock` itself and each later effective clock.
  auto staffed_at = [&](uint64_t c) ABSL_SHARED_LOCKS_REQUIRED(members_mu_) {
    const MembershipEpoch* e = EpochAtLocked(c);
    return e != nullptr && !e->workers.empty();
  };
  if (staffed_at(clock)) return clock;
  for (const MembershipEpoch& e : epochs_) {
    if (e.effective_clock > clock && staffed_at(e.effective_clock)) return e.effective_clock;
  }
  return std::nullopt;
}

uint64_t Job::MemberClockLocked(uint64_t worker) const {
  // A member that never advanced its clock is at the effective clock of the
  // epoch it joined in.
  auto it = clocks_.find(worker);
  if (it != clocks_.end()) return it->second;
  uint64_t c = epochs_.back().effective_clock;
  for (size_t i = epochs_.size(); i-- > 0;) {
    if (!Contains(epochs_[i].workers, worker)) break;
    c = epochs_[i].effective_clock;
  }
  return c;
}

uint64_t Job::MinClockLocked() const {
  // The slowest member of the newest epoch.
  const MembershipEpoch& last = epochs_.back();
  if (last.workers.empty()) return last.effective_clock;
  uint64_t min = std::numeric_limits<uint64_t>::max();
  for (uint64_t w : last.workers) min = std::min(min, MemberClockLocked(w));
  return min;
}

uint64_t Job::MinClock() const {
  absl::ReaderMutexLock l(&members_mu_);
  return MinClockLocked();
}

uint64_t Job::ProgressClock() const {
  if (options_.consistency.mode == ConsistencyMode::kSync) {
    uint64_t min = std::numeric_limits<uint64_t>::max();
    for (const auto& c : chunks_) min = std::min(min, c->version.load());
    return min;
  }
  return MinClock();
}

bool Job::Ready(const PullArgs& pull) const {
  uint64_t min_version = std::numeric_limits<uint64_t>::max();
  for (uint64_t id : pull.chunk_ids) {
    const ChunkState* c = FindChunk(id);
    if (!c->initialized.load()) return false;
    min_version = std::min(min_version, c->version.load());
  }
  return controller_->PullReady(pull.clock, MinClock(), min_version);
}

void Job::Serve(const PullArgs& pull, const PullCallback& done) {
  PullResult result;
  result.request_id = pull.request_id;
  result.min_clock = MinClock();
  result.chunks.reserve(pull.chunk_ids.size());
  for (uint64_t id : pull.chunk_ids) {
    ChunkState* c = FindChunk(id);
    PulledChunk out;
    out.chunk_id = id;
    {
      absl::MutexLock l(&c->mu);
      out.values.assign(reinterpret_cast<const char*>(c->params.data()),
                        size_t{c->num_elems} * sizeof(float));
      out.version = c->version.load();
      c->read_version[pull.worker] = out.version;
    }
    result.chunks.push_back(std::move(out));
  }
  const uint64_t staleness = pull.clock > result.min_clock ? pull.clock - result.min_clock : 0;
  {
    absl::MutexLock l(&stats_mu_);
    staleness_hist_[std::min<uint64_t>(staleness, kStalenessBuckets - 1)] += 1;
    max_staleness_ = std::max(max_staleness_, staleness);
    staleness_sum_ += staleness;
  }
  pulls_served_.fetch_add(1);
  done(std::move(result));
}

void Job::Pull(PullArgs pull, PullCallback done) {
  if (pull.chunk_ids.empty()) {
    for (const auto& c : chunks_) pull.chunk_ids.push_back(c->chunk_id);
  }
  for (uint64_t id : pull.chunk_ids) {
    if (FindChunk(id) == nullptr) {
      PullResult r;
      r.request_id = pull.request_id;
      r.status = absl::NotFoundError(
          absl::StrCat("chunk ", id, " is not on this shard for job ", this->id()));
      done(std::move(r));
      return;
    }
  }
  absl::Status cancelled;
  {
    // Check and park under waiters_mu_: a state change that happens after the
    // check calls Wake(), which takes the same lock, so no wake-up is lost.
    absl::MutexLock l(&waiters_mu_);
    if (!Ready(pull)) {
      if (cancelled_.ok()) {
        parked_.push_back(Parked{std::move(pull), std::move(done)});
        return;
      }
      cancelled = cancelled_;
    }
  }
  if (!cancelled.ok()) {  // the job was dropped / the shard is stopping
    PullResult r;
    r.request_id = pull.request_id;
    r.status = std::move(cancelled);
    done(std::move(r));
    return;
  }
  Serve(pull, done);
}

void Job::Wake() {
  std::list<Parked> ready;
  {
    absl::MutexLock l(&waiters_mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto next = std::next(it);
      if (Ready(it->args)) ready.splice(ready.end(), parked_, it);
      it = next;
    }
  }
  for (Parked& p : ready) Serve(p.args, p.done);
}

void Job::ExpirePulls(absl::Time now) {
  std::list<Parked> expired;
  {
    absl::MutexLock l(&waiters_mu_);
    for (auto it = parked_.begin(); it != parked_.end();) {
      auto next = std::next(it);
      if (it->args.deadline <= now) expired.splice(expired.end(), parked_, it);
      it = next;
    }
  }
  for (Parked& p : expired) {
    PullResult r;
    r.request_id = p.args.request_id;
    r.status = absl::DeadlineExceededError(absl::StrCat(
        "pull ", p.args.request_id, " at clock ", p.args.clock,
        " not answerable before its deadline (slowest member clock ", MinClock(), ")"));
    p.done(std::move(r));
  }
}

void Job::CancelPulls(const absl::Status& why) {
  std::list<Parked> all;
  {
    absl::MutexLock l(&waiters_mu_);
    cancelled_ = why.ok() ? absl::CancelledError("pulls cancelled") : why;
    all.swap(parked_);
  }
  for (Parked& p : all) {
    PullResult r;
    r.request_id = p.args.request_id;
    r.status = why;
    p.done(std::move(r));
  }
}

void Job::AdvanceClock(uint64_t worker, uint64_t clock) {
  {
    absl::MutexLock l(&members_mu_);
    auto [it, inserted] = clocks_.emplace(worker, clock);
    if (!inserted) {
      if (clock <= it->second) return;
      it->second = clock;
    }
  }
  Wake();
  if (options_.consistency.mode != ConsistencyMode::kSync) {
    MaybeCheckpoint();
    return;
  }
  // Every member is past a round this shard has not closed: only after a
  // restore from a checkpoint older than what the members finished (see
  // [lost rounds]). Cheap to test, so a live shard pays nothing for it.
  const uint64_t from = ProgressClock();
  if (MinClock() <= from) return;
  bool moved = false;
  for (const auto& c : chunks_) {
    absl::MutexLock l(&c->mu);
    moved |= controller_->Advance(*c, *this);
  }
  if (!moved) return;
  LOG(WARNING) << "job " << id() << ": every member finished clocks from " << from
               << " on without their pushes reaching this shard (lost with an earlier run of it;"
               << " restored from an older checkpoint): rounds closed with what arrived, now at "
               << ProgressClock();
  Wake();
  MaybeCheckpoint();
}

uint64_t Job::WorkerClock(uint64_t worker) const {
  absl::ReaderMutexLock l(&members_mu_);
  auto it = clocks_.find(worker);
  return it == clocks_.end() ? 0 : it->second;
}

absl::StatusOr<uint64_t> Job::UpdateMembership(MembershipEpoch epoch) {
  {
    absl::MutexLock l(&members_mu_);
    const MembershipEpoch& last = epochs_.back();
    if (epoch.epoch <= last.epoch) return last.epoch;
    if (epoch.effective_clock < last.effective_clock) {
      return absl::InvalidArgumentError(
          absl::StrCat("epoch ", epoch.epoch, " takes effect at clock ", epoch.effective_clock,
                       ", before epoch ", last.epoch, " (clock ", last.effective_clock, ")"));
    }
    epochs_.push_back(std::move(epoch));
  }
  // Rounds waiting on a removed member may be complete now.
  bool moved = false;
  for (const auto& c : chunks_) {
    absl::MutexLock l(&c->mu);
    moved |= controller_->Advance(*c, *this);
  }
  Wake();
  if (moved) MaybeCheckpoint();
  absl::ReaderMutexLock l(&members_mu_);
  return epochs_.back().epoch;
}

void Job::RecordRound(RoundInfo round) {
  absl::MutexLock l(&stats_mu_);
  rounds_.push_back(std::move(round));
  while (rounds_.size() > kMaxRoundRecords) rounds_.pop_front();
}

JobStats Job::Stats(bool include_rounds) const {
  JobStats s;
  s.pushes_applied = pushes_applied_.load();
  s.pushes_duplicate = pushes_duplicate_.load();
  s.pushes_rejected = pushes_rejected_.load();
  s.bytes_in = bytes_in_.load();
  s.fp32_bytes_in = fp32_bytes_in_.load();
  s.pulls_served = pulls_served_.load();
  s.min_version = std::numeric_limits<uint64_t>::max();
  for (const auto& c : chunks_) {
    const uint64_t v = c->version.load();
    s.min_version = std::min(s.min_version, v);
    s.max_version = std::max(s.max_version, v);
  }
  {
    absl::ReaderMutexLock l(&members_mu_);
    const MembershipEpoch& last = epochs_.back();
    s.min_clock = MinClockLocked();
    s.max_clock = s.min_clock;
    for (uint64_t w : last.workers) s.max_clock = std::max(s.max_clock, MemberClockLocked(w));
    s.epoch = last.epoch;
    s.members = static_cast<uint32_t>(last.workers.size());
  }
  absl::MutexLock l(&stats_mu_);
  s.max_staleness = max_staleness_;
  s.staleness_histogram = staleness_hist_;
  s.staleness_sum = staleness_sum_;
  if (include_rounds) s.rounds.assign(rounds_.begin(), rounds_.end());
  return s;
}

void Job::MaybeCheckpoint() {
  const uint32_t every = options_.checkpoint_every;
  if (every == 0 || options_.checkpoint_dir.empty()) return;
  const uint64_t progress = ProgressClock();
  if (progress / every <= last_checkpoint_clock_.load() / every) return;
  if (checkpoint_scheduled_.exchange(true)) return;
  std::shared_ptr<Job> self = shared_from_this();
  executor_->Submit([self] {
    absl::StatusOr<CheckpointInfo> info = self->Checkpoint();
    if (!info.ok()) LOG(ERROR) << "periodic checkpoint of " << self->id() << ": " << info.status();
    self->checkpoint_scheduled_.store(false);
  });
}

absl::StatusOr<Job::CheckpointInfo> Job::Checkpoint() {
  if (options_.checkpoint_dir.empty()) {
    return absl::FailedPreconditionError("the shard runs without --checkpoint_dir");
  }
  absl::MutexLock writer(&checkpoint_mu_);
  JobSnapshot snap;
  snap.job_id = options_.job_id;
  snap.shard_index = options_.shard_index;
  snap.mode = options_.consistency.mode;
  snap.optimizer = options_.optimizer.type;
  {
    absl::ReaderMutexLock l(&members_mu_);
    snap.epochs = epochs_;
    snap.worker_clocks.assign(clocks_.begin(), clocks_.end());
    snap.incarnations.assign(incarnations_.begin(), incarnations_.end());
    snap.clock = MinClockLocked();
  }
  uint64_t min_version = std::numeric_limits<uint64_t>::max();
  for (const auto& c : chunks_) {
    ChunkSnapshot cs;
    absl::MutexLock l(&c->mu);
    cs.chunk_id = c->chunk_id;
    cs.num_elems = c->num_elems;
    cs.version = c->version.load();
    cs.initialized = c->initialized.load();
    cs.params = c->params;
    cs.opt = c->opt;
    cs.applied.assign(c->applied.begin(), c->applied.end());
    min_version = std::min(min_version, cs.version);
    snap.chunks.push_back(std::move(cs));
  }
  if (options_.consistency.mode == ConsistencyMode::kSync) snap.clock = min_version;
  const std::string data = EncodeCheckpoint(snap);
  CheckpointInfo info;
  info.path = CheckpointPath(options_.checkpoint_dir, id(), options_.shard_index);
  info.clock = snap.clock;
  info.bytes = data.size();
  GS_RETURN_IF_ERROR(env_->CreateDirs(options_.checkpoint_dir));
  GS_RETURN_IF_ERROR(env_->WriteFileAtomically(info.path, data));
  if (snap.clock > last_checkpoint_clock_.load()) last_checkpoint_clock_.store(snap.clock);
  VLOG(1) << "checkpoint " << info.path << " clock " << info.clock << " bytes " << info.bytes;
  return info;
}

}  // namespace gradstream::shard
