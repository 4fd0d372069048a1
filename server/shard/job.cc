#include "server/shard/job.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/codec/decoder.h"
#include "common/status.h"
#include "glog/logging.h"

namespace gradstream::shard {
namespace {

constexpr size_t kMaxRoundRecords = 4096;
// A pull of fewer fp32 bytes is served on one thread: handing chunks to
// helpers costs more than copying them.
constexpr uint64_t kParallelServeBytes = uint64_t{1} << 20;
// See [checkpoint failures].
constexpr absl::Duration kCheckpointRetry = absl::Seconds(1);
// The most row bytes one pull may ask for: a partition's rows are one
// PulledRows, so the answer must fit one message under the 8 MiB default
// receive limit (common/rpc/rpc.h) with room for its framing.
constexpr uint64_t kMaxPulledRowBytes = uint64_t{6} << 20;

// A table partition's open [row snapshot], read by WriteCheckpoint a block at
// a time with the partition locked per block; closed when destroyed.
class SnapshotBlocks final : public RowBlocks {
 public:
  explicit SnapshotBlocks(ChunkState* chunk) : chunk_(chunk) {}
  ~SnapshotBlocks() override {
    absl::MutexLock l(&chunk_->mu);
    chunk_->rows->EndSnapshot();
  }
  uint64_t rows() override {
    absl::MutexLock l(&chunk_->mu);
    return chunk_->rows->snapshot_rows();
  }
  // Fixed when the store is made: no lock.
  uint32_t dim() override { return chunk_->rows->spec().dim; }
  int num_slots() override { return chunk_->rows->num_slots(); }
  absl::Status Ids(uint64_t begin, uint64_t end, uint64_t* out) override {
    absl::MutexLock l(&chunk_->mu);
    return chunk_->rows->SnapshotIds(begin, end, out);
  }
  absl::Status Floats(int array, uint64_t begin, uint64_t end, float* out) override {
    absl::MutexLock l(&chunk_->mu);
    return chunk_->rows->SnapshotFloats(array, begin, end, out);
  }

 private:
  ChunkState* const chunk_;
};

}  // namespace

Job::Job(JobOptions options, Optimizer optimizer, Env* env, Executor* executor)
    : options_(std::move(options)),
      optimizer_(std::move(optimizer)),
      env_(env),
      executor_(executor),
      controller_(NewController(options_.consistency)),
      clock_window_(ClockWindow(options_.consistency, options_.max_pending_rounds)),
      pull_window_(PullWindow(options_.consistency, options_.max_pending_rounds)),
      membership_(options_.membership),
      // Without a directory nothing is written, so nothing is ever due.
      progress_(options_.consistency.mode,
                options_.checkpoint_dir.empty() ? 0 : options_.checkpoint_every),
      publisher_(options_.pull_codec == CodecType::kNone
                     ? nullptr
                     : std::make_unique<PullPublisher>(
                           options_.pull_codec,
                           /*once_per_clock=*/!controller_->rules().rounds,
                           options_.chunks, options_.pull_precision,
                           options_.pull_link, env_)),
      // Pushes and pulls share the job's warm-up.
      push_precision_(options_.pull_precision.warmup_clocks),
      staleness_hist_(kStalenessBuckets, 0),
      row_budget_(options_.max_row_bytes) {
  for (const ChunkSpec& spec : options_.chunks) {
    auto chunk = std::make_unique<ChunkState>(spec.chunk_id, spec.num_elems);
    {
      absl::MutexLock l(&chunk->mu);
      chunk->params.assign(spec.num_elems, 0.0f);
      chunk->opt = optimizer_.NewState(spec.num_elems);
      if (spec.table.has_value()) {
        // A partition's rows start from the table's initializer, so it has
        // its parameters from the start (no InitChunk).
        // Its optimizer state lives per row; `opt` keeps the step count.
        chunk->rows = std::make_unique<RowStore>(*spec.table, optimizer_, &row_budget_);
        chunk->opt = OptimizerState{};
        chunk->initialized.store(true);
      }
    }
    chunk_by_id_[spec.chunk_id] = chunk.get();
    chunks_.push_back(std::move(chunk));
  }
}

absl::StatusOr<Job::Opened> Job::Open(JobOptions options, Env* env, Executor* executor) {
  if (options.job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  if (options.chunks.empty()) return absl::InvalidArgumentError("job has no chunks");
  absl::flat_hash_map<uint64_t, bool> seen;
  for (ChunkSpec& c : options.chunks) {
    if (c.table.has_value()) {
      const TableSpec& t = *c.table;
      if (c.num_elems != 0 || t.dim == 0 || t.table_rows == 0 || t.partitions == 0 ||
          t.partition >= t.partitions || !std::isfinite(t.init_std) || t.init_std < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", c.chunk_id, " is a table partition with ", t.table_rows, " rows of ", t.dim,
            " floats, partition ", t.partition, " of ", t.partitions, ", init_std ", t.init_std,
            ", ", c.num_elems, " dense elements: rows, dim and partitions must be positive, the"
            " partition below the count, init_std finite and not negative, no dense elements"));
      }
      c.pull_fp32 = true;  // rows travel fp32 (docs/design/sparse-tables.md)
    } else if (c.num_elems == 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id, " has 0 elements"));
    }
    if (!seen.emplace(c.chunk_id, true).second) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id, " listed twice"));
    }
  }
  if (options.max_pending_rounds == 0) options.max_pending_rounds = 1;
  if (!IsKnownCodec(options.pull_codec)) return absl::InvalidArgumentError("unknown pull codec");
  GS_ASSIGN_OR_RETURN(Optimizer optimizer, Optimizer::Create(options.optimizer));
  std::shared_ptr<Job> job(new Job(std::move(options), std::move(optimizer), env, executor));
  Opened opened;
  opened.job = job;
  if (job->options_.checkpoint_dir.empty()) {
    GS_RETURN_IF_ERROR(job->Reconcile(false));
    return opened;
  }

  const std::string path =
      CheckpointPath(job->options_.checkpoint_dir, job->id(), job->options_.shard_index);
  absl::StatusOr<std::unique_ptr<SequentialFile>> file = env->NewSequentialFile(path);
  if (absl::IsNotFound(file.status())) {
    GS_RETURN_IF_ERROR(job->Reconcile(false));
    return opened;
  }
  if (!file.ok()) return file.status();
  absl::StatusOr<JobSnapshot> snap = ReadCheckpoint(file->get(), "checkpoint");
  if (absl::IsDataLoss(snap.status())) {
    return absl::DataLossError(absl::StrCat(path, ": ", snap.status().message()));
  }
  if (!snap.ok()) return snap.status();
  GS_RETURN_IF_ERROR(job->Restore(*snap));
  GS_RETURN_IF_ERROR(job->Reconcile(true));
  opened.restored = true;
  opened.restored_clock = snap->clock;
  LOG(INFO) << "job " << job->id() << " restored from " << path << " at clock " << snap->clock;
  return opened;
}

absl::Status Job::Restore(JobSnapshot& snap) {
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
    if (chunk->is_table() != c.table) return mismatch(absl::StrCat("chunk ", c.chunk_id, " kind"));
    // A table partition keeps its state per row (RowStore), a chunk here.
    const size_t slots = chunk->is_table() ? 0 : NumStateSlots(options_.optimizer.type);
    if (c.opt.slots.size() != slots) return mismatch("optimizer state slots");
  }
  for (ChunkSnapshot& c : snap.chunks) {
    ChunkState* chunk = FindChunk(c.chunk_id);
    absl::MutexLock l(&chunk->mu);
    if (chunk->is_table()) {
      absl::Status s = chunk->rows->Restore(std::move(c.row_ids), std::move(c.row_values),
                                            std::move(c.row_slots));
      if (!s.ok()) return mismatch(std::string(s.message()));
    }
    chunk->params = std::move(c.params);
    chunk->opt = std::move(c.opt);
    chunk->applied.clear();
    for (const auto& [w, a] : c.applied) chunk->applied[w] = a;
    chunk->version.store(c.version);
    chunk->initialized.store(c.initialized);
  }
  for (const PublishedCopy& p : snap.published) {
    // A job that since lost its pull codec serves fp32; one that gained it
    // starts publishing at its first pull.
    if (publisher_ != nullptr && !publisher_->Restore(p)) {
      return mismatch(absl::StrCat("published copy of chunk ", p.chunk_id));
    }
  }
  membership_.RestoreFrom(snap);
  membership_.AllowCatchUp();  // the members went on while this shard was down
  progress_.Written(snap.clock);
  return absl::OkStatus();
}

absl::Status Job::Reconcile(bool restored) {
  if (!options_.epochs.empty()) {
    absl::Status s = membership_.ReplaceEpochs(options_.epochs);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("epochs: ", s.message()));
  }
  if (!options_.resume) return absl::OkStatus();
  // The members went on while this shard was down, with or without a
  // checkpoint: their next ClockAdvance may jump (see [clock windows]).
  membership_.AllowCatchUp();
  const bool sync = controller_->rules().rounds;
  int waiting = 0, tables = 0;
  for (const auto& c : chunks_) {
    absl::MutexLock l(&c->mu);
    if (c->is_table() && !restored) {
      // No worker holds a table's rows to send again: they restart from
      // the initializer (docs/design/sparse-tables.md).
      if (sync) c->version.store(options_.resume_clock);
      c->rows_lost.store(true);
      ++tables;
      continue;
    }
    if (c->initialized.load()) continue;
    if (!restored && sync) c->version.store(options_.resume_clock);
    ++waiting;
  }
  if (tables > 0) {
    LOG(WARNING) << "job " << id() << " resumes without a checkpoint: the rows of its " << tables
                 << " table partition(s) on this shard are lost and start again from the"
                 << " table's initializer";
  }
  if (waiting == 0) return absl::OkStatus();
  awaiting_init_.store(true);
  LOG(WARNING) << "job " << id() << " resumes "
               << (restored ? "from a checkpoint" : "without a checkpoint") << ": " << waiting
               << " chunk(s) have no parameters; the first worker to pull sends"
               << " its own (see [re-initialization]); sync rounds from clock "
               << options_.resume_clock;
  return absl::OkStatus();
}

ChunkState* Job::FindChunk(uint64_t id) const {
  auto it = chunk_by_id_.find(id);
  return it == chunk_by_id_.end() ? nullptr : it->second;
}

absl::StatusOr<Job::HelloInfo> Job::Hello(uint64_t worker, uint64_t incarnation) {
  HelloInfo info;
  GS_ASSIGN_OR_RETURN(info.epoch, membership_.Hello(worker, incarnation));
  for (const auto& c : chunks_) info.chunk_ids.push_back(c->chunk_id);
  return info;
}

bool Job::HoldPieces(uint64_t worker, uint64_t bytes) {
  absl::MutexLock l(&pieces_mu_);
  uint64_t& held = held_pieces_[worker];
  if (held + bytes > options_.max_held_piece_bytes) return false;
  held += bytes;
  return true;
}

void Job::ReleasePieces(uint64_t worker, uint64_t bytes) {
  absl::MutexLock l(&pieces_mu_);
  auto it = held_pieces_.find(worker);
  if (it == held_pieces_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) held_pieces_.erase(it);
}

absl::Status Job::CheckIncarnation(uint64_t worker, uint64_t incarnation) const {
  return membership_.CheckIncarnation(worker, incarnation);
}

absl::StatusOr<bool> Job::Push(const PushArgs& push) {
  return Push(PushBucket{push.worker, push.clock, {{push.chunk_id, push.header, push.payload}}});
}

absl::Status Job::CheckBucket(const PushBucket& bucket,
                              std::vector<ChunkState*>* states) {
  if (bucket.chunks.empty() && bucket.rows.empty()) {
    return absl::InvalidArgumentError("a Push with no chunks");
  }
  states->reserve(bucket.chunks.size() + bucket.rows.size());
  absl::flat_hash_set<uint64_t> seen;
  auto find = [&](uint64_t chunk_id, bool rows) -> absl::StatusOr<ChunkState*> {
    ChunkState* chunk = FindChunk(chunk_id);
    if (chunk == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("chunk ", chunk_id, " is not on this shard for job ", id()));
    }
    if (!seen.insert(chunk_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", chunk_id, " is in the Push twice"));
    }
    if (chunk->is_table() != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", chunk_id,
                       rows ? " is not a table partition: push it whole"
                            : " is a table partition: push its rows"));
    }
    return chunk;
  };
  for (const PushBucket::Chunk& c : bucket.chunks) {
    GS_ASSIGN_OR_RETURN(ChunkState * chunk, find(c.chunk_id, false));
    states->push_back(chunk);
  }
  for (const PushBucket::Rows& r : bucket.rows) {
    GS_ASSIGN_OR_RETURN(ChunkState * chunk, find(r.chunk_id, true));
    absl::MutexLock l(&chunk->mu);
    if (absl::Status s = CheckRowGrads(*chunk->rows, r.grads); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table partition ", r.chunk_id, " in the Push: ", s.message()));
    }
    GS_RETURN_IF_ERROR(CheckRowBudget(*chunk, r.grads.ids));
    states->push_back(chunk);
  }
  // A bucket of one is validated where it is applied, before anything
  // changes; a larger one here, so that a bad chunk late in it cannot leave
  // the chunks before it applied. Weight 1 covers every controller's (at
  // most 1 in magnitude) for the overflow rule.
  if (bucket.chunks.size() > 1) {
    for (size_t i = 0; i < bucket.chunks.size(); ++i) {
      const PushBucket::Chunk& c = bucket.chunks[i];
      absl::StatusOr<ChunkDecoder> d =
          ChunkDecoder::Create(c.header, c.payload, (*states)[i]->num_elems, 1.0f);
      if (!d.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("chunk ", c.chunk_id, " (", i + 1, " of ",
                                                       bucket.chunks.size(), " in the Push): ",
                                                       d.status().message()));
      }
    }
  }
  if (controller_->rules().push_clock_window) {
    GS_RETURN_IF_ERROR(membership_.CheckClock(bucket.worker, bucket.clock, clock_window_, "push"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Job::Push(const PushBucket& bucket) {
  push_messages_.fetch_add(1);
  std::vector<ChunkState*> states;
  if (absl::Status s = CheckBucket(bucket, &states); !s.ok()) {
    pushes_rejected_.fetch_add(std::max<size_t>(1, bucket.chunks.size() + bucket.rows.size()));
    return s;
  }
  absl::Status first;
  bool all_duplicate = true;
  std::vector<ChunkState*> moved;
  const size_t dense = bucket.chunks.size();
  for (size_t i = 0; i < states.size(); ++i) {
    ChunkState* chunk = states[i];
    if (controller_->rules().drop_pushes_awaiting_init && awaiting_init_.load() &&
        !chunk->initialized.load()) {
      pushes_duplicate_.fetch_add(1);  // nothing to apply it to: see [re-initialization]
      continue;
    }
    PushArgs push{bucket.worker, chunk->chunk_id, bucket.clock, {}, {}};
    if (i < dense) {
      push.header = bucket.chunks[i].header;
      push.payload = bucket.chunks[i].payload;
    } else {
      push.rows = &bucket.rows[i - dense].grads;
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
      first.Update(dup.status());
      all_duplicate = false;
      continue;
    }
    if (*dup) {
      pushes_duplicate_.fetch_add(1);
      continue;
    }
    all_duplicate = false;
    pushes_applied_.fetch_add(1);
    if (push.rows != nullptr) {
      chunk->rows_pushed.fetch_add(push.rows->ids.size());
      bytes_in_.fetch_add(push.rows->values.size() / (push.rows->fp16 ? 2 : 1));
      fp32_bytes_in_.fetch_add(push.rows->values.size());
    } else {
      const PushBucket::Chunk& c = bucket.chunks[i];
      push_precision_.Record(c.chunk_id, bucket.worker, bucket.clock, c.header.codec,
                             c.error_clocks, c.raised, c.level, c.owed_raise);
      bytes_in_.fetch_add(c.payload.size());
      fp32_bytes_in_.fetch_add(uint64_t{c.header.num_elems} * sizeof(float));
    }
    if (after != before) moved.push_back(chunk);
  }
  // Once per bucket, not per chunk: parked pulls are looked at once.
  if (!moved.empty()) {
    PublishSoon(std::move(moved));
    Wake();
    MaybeCheckpoint();
  }
  if (!first.ok()) return first;
  return all_duplicate;
}

absl::StatusOr<bool> Job::Init(uint64_t chunk_id, std::string_view values) {
  ChunkState* chunk = FindChunk(chunk_id);
  if (chunk == nullptr) {
    return absl::NotFoundError(absl::StrCat("chunk ", chunk_id, " is not on this shard"));
  }
  if (chunk->is_table()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", chunk_id, " is a table partition: its rows start from the table's initializer"));
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
    if (chunk->initialized.load()) return true;
    // A resumed chunk takes the first worker's parameters at whatever
    // version it is (see [re-initialization]).
    if (chunk->version.load() > 0 && !awaiting_init_.load()) return true;
    chunk->params = std::move(v);
    chunk->initialized.store(true);
    controller_->Advance(*chunk, *this);
  }
  Wake();
  return false;
}

uint64_t Job::MinChunkVersion() const {
  uint64_t min = std::numeric_limits<uint64_t>::max();
  for (const auto& c : chunks_) min = std::min(min, c->version.load());
  return min;
}

uint64_t Job::ProgressClock() const {
  return progress_.Clock(MinChunkVersion(), membership_.MinClock());
}

bool Job::AdvanceChunks() {
  bool moved = false;
  for (const auto& c : chunks_) {
    absl::MutexLock l(&c->mu);
    moved |= controller_->Advance(*c, *this);
  }
  return moved;
}

void Job::PublishSoon(std::vector<ChunkState*> chunks) {
  if (publisher_ == nullptr || !controller_->rules().eager_publish) return;
  std::shared_ptr<Job> self = shared_from_this();
  executor_->Submit([self, chunks = std::move(chunks)] {
    for (ChunkState* chunk : chunks) {
      absl::MutexLock l(&chunk->mu);
      const uint64_t version = chunk->version.load();
      if (chunk->is_table()) continue;  // rows travel fp32
      self->publisher_->Publish(chunk->chunk_id, chunk->params, version, version);
    }
  });
}

bool Job::Ready(const PullArgs& pull) const {
  uint64_t min_version = std::numeric_limits<uint64_t>::max();
  for (uint64_t id : pull.chunk_ids) {
    const ChunkState* c = FindChunk(id);
    if (!c->initialized.load()) return false;
    min_version = std::min(min_version, c->version.load());
  }
  for (const PullArgs::Rows& r : pull.rows) {
    min_version = std::min(min_version, FindChunk(r.chunk_id)->version.load());
  }
  return controller_->PullReady(pull.clock, membership_.MinClock(), min_version);
}

void Job::Serve(const PullArgs& pull, const PullCallback& done) {
  PullResult result;
  result.request_id = pull.request_id;
  result.min_clock = membership_.MinClock();
  result.chunks.reserve(pull.chunk_ids.size());
  absl::flat_hash_map<uint64_t, const HeldCopy*> held;
  for (const HeldCopy& h : pull.held) held[h.chunk_id] = &h;
  std::atomic<uint64_t> bytes{0};
  uint64_t fp32_bytes = 0;
  result.chunks.resize(pull.chunk_ids.size());
  // Chunks are served in parallel (see [eager publish]): a pull that has to
  // publish encodes its chunks on several executor threads.
  auto serve_one = [&](size_t i) {
    const uint64_t id = pull.chunk_ids[i];
    ChunkState* c = FindChunk(id);
    PulledChunk& out = result.chunks[i];
    out.chunk_id = id;
    absl::MutexLock l(&c->mu);
    const uint64_t version = c->version.load();
    if (publisher_ != nullptr) {
      auto h = held.find(id);
      bytes += publisher_->Serve(id, c->params, version, pull.clock,
                                 h == held.end() ? nullptr : h->second, &out);
    } else {
      out.values.assign(reinterpret_cast<const char*>(c->params.data()),
                        size_t{c->num_elems} * sizeof(float));
      out.version = version;
      bytes += out.values.size();
    }
    // Staleness of the next push counts from the version the worker got.
    c->read_version[pull.worker] = out.version;
  };
  for (uint64_t id : pull.chunk_ids) fp32_bytes += size_t{FindChunk(id)->num_elems} * sizeof(float);
  const size_t helpers =
      fp32_bytes >= kParallelServeBytes ? executor_->num_threads() : size_t{0};
  executor_->ParallelFor(pull.chunk_ids.size(), helpers, serve_one);
  for (const PullArgs::Rows& r : pull.rows) {
    ChunkState* c = FindChunk(r.chunk_id);
    PulledRows& out = result.rows.emplace_back();
    out.chunk_id = r.chunk_id;
    absl::MutexLock l(&c->mu);
    ReadRows(r.ids, r.fp16, c->rows.get(), &out);
    out.version = c->version.load();
    c->read_version[pull.worker] = out.version;
    fp32_bytes += r.ids.size() * c->rows->spec().dim * sizeof(float);
    bytes += out.values.size();
    c->rows_pulled.fetch_add(r.ids.size());
  }
  bytes_out_.fetch_add(bytes.load());
  fp32_bytes_out_.fetch_add(fp32_bytes);
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
  if (pull.chunk_ids.empty() && pull.rows.empty()) {
    for (const auto& c : chunks_) {
      if (!c->is_table()) pull.chunk_ids.push_back(c->chunk_id);
    }
  }
  // Members only: a worker the coordinator is adding may ask before this
  // shard heard of its epoch. What others can park is bounded per stream
  // (StreamPulls::kMaxWaiting, the clamped timeout: [pull schedule]) and ends with
  // the stream.
  if (membership_.IsCurrentMember(pull.worker)) {
    if (absl::Status s = membership_.CheckClock(pull.worker, pull.clock, pull_window_, "pull");
        !s.ok()) {
      return PullWaitList::Fail(pull, done, std::move(s));
    }
  }
  if (absl::Status s = CheckPullRows(pull); !s.ok()) {
    return PullWaitList::Fail(pull, done, std::move(s));
  }
  for (uint64_t id : pull.chunk_ids) {
    const ChunkState* c = FindChunk(id);
    if (c == nullptr) {
      return PullWaitList::Fail(
          pull, done,
          absl::NotFoundError(
              absl::StrCat("chunk ", id, " is not on this shard for job ", this->id())));
    }
    if (c->is_table()) {
      return PullWaitList::Fail(
          pull, done,
          absl::InvalidArgumentError(
              absl::StrCat("chunk ", id, " is a table partition: pull its rows")));
    }
    if (awaiting_init_.load() && !c->initialized.load()) {
      return PullWaitList::Fail(
          pull, done,
          absl::DataLossError(absl::StrCat(
              "chunk ", id, " of job ", this->id(),
              " lost its parameters (the shard restarted without a checkpoint): send InitChunk"
              " with yours (see [re-initialization])")));
    }
  }
  std::optional<PendingPull> now = waiting_.ParkUnlessReady(
      PendingPull{std::move(pull), std::move(done)},
      [this](const PullArgs& p) { return Ready(p); });
  if (now.has_value()) ServeSoon(*std::move(now));
}

absl::Status Job::CheckRowBudget(const ChunkState& chunk, absl::Span<const uint64_t> ids) {
  const uint64_t max = row_budget_.max_bytes;
  if (max == 0) return absl::OkStatus();
  const RowStore& store = *chunk.rows;
  const uint64_t held = row_budget_.held();
  // Fits even if every id were new: no lookups (a lookup per id was 7% of a
  // shard's CPU on bench/tta's click-through family).
  if (held + ids.size() * store.row_bytes() <= max) return absl::OkStatus();
  uint64_t fresh = 0;
  for (uint64_t id : ids) fresh += store.Has(id) ? 0 : 1;
  const uint64_t more = fresh * store.row_bytes();
  if (held + more <= max) return absl::OkStatus();
  if (row_budget_.rows.load() + more <= max) {
    // The rows fit without what a checkpoint keeps: training goes first, the
    // checkpoint fails and is tried again (see [row snapshot]).
    row_budget_.rows_first.store(true);
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "job ", id(), ": ", fresh, " new rows of table ", store.spec().table, " (", more,
      " bytes with their optimizer state and index) would take this shard's table rows from ",
      row_budget_.rows.load(),
      " bytes past the ", options_.max_row_bytes,
      " it has for them (--max_param_bytes less the dense parameters): refused, nothing "
      "changed; run more shards, a smaller table or a larger --max_param_bytes"));
}

absl::Status Job::CheckPullRows(const PullArgs& pull) {
  uint64_t bytes = 0;
  for (const PullArgs::Rows& r : pull.rows) {
    ChunkState* c = FindChunk(r.chunk_id);
    if (c == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("chunk ", r.chunk_id, " is not on this shard for job ", id()));
    }
    if (!c->is_table()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", r.chunk_id, " is not a table partition: pull it whole"));
    }
    absl::MutexLock l(&c->mu);
    if (absl::Status s = c->rows->CheckIds(r.ids, /*unique=*/false); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table partition ", r.chunk_id, " in the pull: ", s.message()));
    }
    GS_RETURN_IF_ERROR(CheckRowBudget(*c, r.ids));
    bytes += r.ids.size() * uint64_t{c->rows->spec().dim} * sizeof(float);
  }
  if (bytes > kMaxPulledRowBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the pull asks for ", bytes,
                                                   " bytes of rows, more than one answer carries (",
                                                   kMaxPulledRowBytes, "): ask in parts"));
  }
  return absl::OkStatus();
}

void Job::ServeSoon(PendingPull pull) {
  uint64_t fp32_bytes = 0;
  for (uint64_t id : pull.args.chunk_ids) {
    fp32_bytes += size_t{FindChunk(id)->num_elems} * sizeof(float);
  }
  if (fp32_bytes < kParallelServeBytes) return Serve(pull.args, pull.done);
  // See [eager publish]: the thread that found the pull ready (a stream's
  // strand, mid-way through a worker's pushes) goes on with its next message.
  std::shared_ptr<Job> self = shared_from_this();
  executor_->Submit([self, p = std::move(pull)] { self->Serve(p.args, p.done); });
}

void Job::Wake() {
  for (PendingPull& p : waiting_.TakeReady([this](const PullArgs& a) { return Ready(a); })) {
    ServeSoon(std::move(p));
  }
}

absl::Time Job::ExpirePulls(absl::Time now) {
  return waiting_.Expire(now, [this](const PullArgs& a) {
    return absl::DeadlineExceededError(absl::StrCat(
        "pull ", a.request_id, " at clock ", a.clock,
        " not answerable before its deadline (slowest member clock ", membership_.MinClock(),
        ")"));
  });
}

void Job::CancelPulls(const absl::Status& why) { waiting_.Close(why); }

void Job::CancelStreamPulls(uint64_t stream, const absl::Status& why) {
  waiting_.CancelStream(stream, why);
}

absl::Status Job::AdvanceClock(uint64_t worker, uint64_t clock) {
  GS_RETURN_IF_ERROR(membership_.CheckClock(worker, clock, clock_window_, "ClockAdvance"));
  if (!membership_.AdvanceClock(worker, clock)) return absl::OkStatus();
  Wake();
  if (!controller_->rules().close_lost_rounds) {
    MaybeCheckpoint();
    return absl::OkStatus();
  }
  // Every member is past a round this shard has not closed: only after a
  // restore from a checkpoint older than what the members finished (see
  // [lost rounds]). Cheap to test, so a live shard pays nothing for it.
  const uint64_t from = ProgressClock();
  if (membership_.MinClock() <= from) return absl::OkStatus();
  if (!AdvanceChunks()) return absl::OkStatus();
  LOG(WARNING) << "job " << id() << ": every member finished clocks from " << from
               << " on without their pushes reaching this shard (lost with an earlier run of it;"
               << " restored from an older checkpoint): rounds closed with what arrived, now at "
               << ProgressClock();
  Wake();
  MaybeCheckpoint();
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Job::UpdateMembership(MembershipEpoch epoch) {
  const uint64_t effective = epoch.effective_clock;
  const bool rounds = controller_->rules().rounds;
  uint64_t passed = 0;
  if (rounds) {
    for (const auto& c : chunks_) passed = std::max(passed, c->version.load());
  }
  Membership::Joined joined;
  GS_ASSIGN_OR_RETURN(const uint64_t newest,
                      membership_.Update(std::move(epoch), passed, &joined));
  // NOTE: [late join] Joiners start at joined.start (see [rejoin clock]).
  // When that lies past the epoch's clock, this shard had already closed the
  // rounds in between without them (the coordinator planned too short a
  // lead, or this shard heard of the epoch late): their pushes for those
  // clocks are settled (acknowledged as duplicates and dropped) instead of
  // refused, so the joiner is not failed for a round it could not join.
  if (rounds && !joined.workers.empty()) {
    for (const auto& c : chunks_) {
      absl::MutexLock l(&c->mu);
      for (uint64_t w : joined.workers) c->applied[w].SettleBelow(joined.start);
    }
  }
  if (joined.start > effective && !joined.workers.empty()) {
    LOG(WARNING) << "job " << id() << ": epoch " << newest << " adds " << joined.workers.size()
                 << " worker(s) at clock " << effective << ", which this shard already passed;"
                 << " they start at clock " << joined.start << " here (see [late join])";
  }
  // Rounds waiting on a removed member may be complete now.
  const bool moved = AdvanceChunks();
  Wake();
  if (moved) MaybeCheckpoint();
  return newest;
}

void Job::RecordRound(RoundInfo round) {
  absl::MutexLock l(&stats_mu_);
  rounds_.push_back(std::move(round));
  while (rounds_.size() > kMaxRoundRecords) rounds_.pop_front();
}

JobStats Job::Stats(bool include_rounds) const {
  JobStats s;
  s.pushes_applied = pushes_applied_.load();
  for (const auto& c : chunks_) {
    if (!c->is_table()) continue;
    absl::MutexLock l(&c->mu);
    s.tables.push_back(JobStats::TableStats{
        c->chunk_id, TableRowStats{c->rows->size(), c->rows->bytes(),
                                   c->rows_pushed.load(), c->rows_pulled.load(),
                                   c->rows_lost.load() ? uint64_t{1} : 0}});
  }
  s.push_messages = push_messages_.load();
  s.clock_messages = clock_messages_.load();
  s.pushes_duplicate = pushes_duplicate_.load();
  s.pushes_rejected = pushes_rejected_.load();
  s.bytes_in = bytes_in_.load();
  s.fp32_bytes_in = fp32_bytes_in_.load();
  s.pulls_served = pulls_served_.load();
  s.bytes_out = bytes_out_.load();
  s.fp32_bytes_out = fp32_bytes_out_.load();
  for (const auto& c : chunks_) {
    JobStats::ChunkPrecision p;
    p.chunk_id = c->chunk_id;
    if (publisher_ != nullptr) p.pull = publisher_->Precision(c->chunk_id);
    p.push = push_precision_.Report(c->chunk_id);
    if (p.pull || p.push) s.precision.push_back(std::move(p));
  }
  if (publisher_ != nullptr) s.pull_link = publisher_->LinkDecided();
  s.min_version = std::numeric_limits<uint64_t>::max();
  for (const auto& c : chunks_) {
    const uint64_t v = c->version.load();
    s.min_version = std::min(s.min_version, v);
    s.max_version = std::max(s.max_version, v);
  }
  const Membership::Summary m = membership_.Summarize();
  s.min_clock = m.min_clock;
  s.max_clock = m.max_clock;
  s.epoch = m.epoch;
  s.members = m.members;
  s.checkpoint_failures = checkpoint_failures_.load();
  absl::MutexLock l(&stats_mu_);
  s.checkpoint_error = checkpoint_error_;
  s.max_staleness = max_staleness_;
  s.staleness_histogram = staleness_hist_;
  s.staleness_sum = staleness_sum_;
  if (include_rounds) s.rounds.assign(rounds_.begin(), rounds_.end());
  return s;
}

void Job::MaybeCheckpoint() {
  if (!progress_.periodic()) return;
  if (absl::ToUnixNanos(env_->Now()) < checkpoint_retry_unix_ns_.load()) return;
  if (!progress_.TrySchedule(ProgressClock())) return;
  std::shared_ptr<Job> self = shared_from_this();
  executor_->Submit([self] {
    absl::StatusOr<CheckpointInfo> info = self->Checkpoint();
    if (info.ok()) {
      absl::MutexLock l(&self->stats_mu_);
      self->checkpoint_error_.clear();
    } else {
      // See [checkpoint failures].
      self->checkpoint_failures_.fetch_add(1);
      self->checkpoint_retry_unix_ns_.store(
          absl::ToUnixNanos(self->env_->Now() + kCheckpointRetry));
      {
        absl::MutexLock l(&self->stats_mu_);
        self->checkpoint_error_ = info.status().ToString();
      }
      LOG_EVERY_T(ERROR, 10) << "periodic checkpoint of " << self->id() << ": " << info.status()
                             << " (" << self->checkpoint_failures_.load()
                             << " failed so far; logged at most every 10 s)";
    }
    self->progress_.EndScheduled();
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
  const uint64_t min_clock = membership_.SaveTo(&snap);
  uint64_t min_version = std::numeric_limits<uint64_t>::max();
  // NOTE: [streamed table checkpoint]
  // A table's rows are not copied whole: each partition opens a [row
  // snapshot] (row_store.h) with its version and applied clocks, under its
  // lock, so they are one consistent cut as a copy would be; the rows are
  // then read a block at a time, the lock held per block, while pushes and
  // pulls go on (docs/design/sparse-tables.md).
  std::vector<std::unique_ptr<SnapshotBlocks>> tables;
  row_budget_.rows_first.store(false);
  auto save = [&](ChunkState& c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c.mu) {
    ChunkSnapshot cs;
    cs.chunk_id = c.chunk_id;
    cs.num_elems = c.num_elems;
    cs.version = c.version.load();
    cs.initialized = c.initialized.load();
    cs.params = c.params;
    cs.opt = c.opt;
    cs.applied.assign(c.applied.begin(), c.applied.end());
    cs.table = c.is_table();
    if (cs.table) {
      c.rows->BeginSnapshot();
      tables.push_back(std::make_unique<SnapshotBlocks>(&c));
      cs.rows = tables.back().get();
    }
    min_version = std::min(min_version, cs.version);
    snap.chunks.push_back(std::move(cs));
  };
  for (const auto& c : chunks_) {
    absl::MutexLock l(&c->mu);
    save(*c);
    if (publisher_ != nullptr) {
      if (std::optional<PublishedCopy> p = publisher_->Save(c->chunk_id)) {
        snap.published.push_back(*std::move(p));
      }
    }
  }
  snap.clock = progress_.Clock(min_version, min_clock);
  CheckpointInfo info;
  info.path = CheckpointPath(options_.checkpoint_dir, id(), options_.shard_index);
  info.clock = snap.clock;
  GS_RETURN_IF_ERROR(env_->CreateDirs(options_.checkpoint_dir));
  GS_RETURN_IF_ERROR(env_->WriteFileAtomically(info.path, [&](WritableFile* file) {
    absl::StatusOr<uint64_t> bytes = WriteCheckpoint(snap, file);
    tables.clear();  // the images are written: drop what they kept
    info.bytes = bytes.value_or(0);
    return bytes.status();
  }));
  progress_.Written(snap.clock);
  VLOG(1) << "checkpoint " << info.path << " clock " << info.clock << " bytes " << info.bytes;
  return info;
}

}  // namespace gradstream::shard
