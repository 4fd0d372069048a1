// libFuzzer target for the shard's Session protocol: arbitrary bytes become a
// sequence of serialized gradstream.v1.WorkerMessages on up to three streams
// of one job, fed through SessionHandler (the same proto <-> struct
// conversion and dispatch the gRPC reactor uses) into a real Job, in-process
// and single-threaded. Built by scripts/fuzz.sh with clang, ASan and UBSan.
//
// Input layout:
//   [mode:1][optimizer:1][staleness:1][flags:1]  then records
//   record: [target:1][len:2 little-endian][len bytes]
//   target % 4 in 0..2: the bytes are a WorkerMessage for stream (target % 4);
//   a stream closed by a StreamError (or by a "disconnect") reopens on its
//   next record, like a reconnecting worker. target % 4 == 3: a control
//   record [op][arg...]: membership change, clock tick + deadline sweep,
//   DropJob, disconnect.
// Bytes that do not parse as a WorkerMessage are skipped (gRPC would have
// cancelled the stream before the shard saw them).
//
// Properties checked beyond "no crash, no sanitizer report, no hang" (a hang
// is a libFuzzer -timeout finding; nothing here blocks or spawns threads):
//  1. every Push and Init that reaches the job is answered by exactly one Ack
//     with its seq, synchronously, and GetStats-style counters agree with
//     the acks (one Push message each; applied / duplicate / rejected per
//     part, a chunk or a table partition's rows, while every Push holds at
//     most one part). Pieces of rows (PushedRows.more) are the exception:
//     answered all alike, as one push, when their last arrives or something
//     refuses them, never when their stream ends first (no effect then);
//  2. rejected and duplicate pushes/inits have no effect at all (but for an
//     advance riding in one, which moves the clock whatever the push): replaying
//     the input without them yields the same messages on every stream and
//     the same final state (params, optimizer state, versions, applied
//     clocks, membership, clocks, incarnations). A refused bucket of several
//     chunks may have applied some (Job::Push(PushBucket)), so it is only
//     dropped when the whole-bucket checks refused it (no chunk counted as
//     applied or duplicate);
//  3. every pull that reaches the job is answered exactly once (parked ones
//     by the deadline sweep, DropJob or the final cancel), with either one
//     error or exactly the requested chunks, each num_elems floats, and
//     rows, ids x dim floats per table partition, the last message flagged;
//     sync answers only at version >= clock, bounded only when the slowest
//     clock is >= clock - s; DEADLINE_EXCEEDED only after the deadline;
//  4. parameters (served and final) stay finite while every accepted
//     gradient and initial value is moderate (|x| <= 1e6: larger finite
//     values may overflow fp32 through the optimizer by design);
//  5. a checkpoint of the final state restores to the same state.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec.h"
#include "common/codec/half_rows.h"
#include "common/codec/registry.h"
#include "common/codec/wire.h"
#include "common/env/testing/mem_env.h"
#include "common/executor.h"
#include "glog/logging.h"
#include "ps.pb.h"
#include "server/shard/checkpoint.h"
#include "server/shard/job.h"
#include "server/shard/rpc/session_handler.h"

namespace gradstream::shard {
namespace {

namespace pb = ::gradstream::v1;

constexpr int kStreams = 3;
constexpr float kModerate = 1e6f;
// PullAnswers of a few chunks: the chunks here are 20 and 64 bytes, so some
// answers hold one chunk and some two.
constexpr size_t kPullAnswerBytes = 64;
const char kJobId[] = "job";
const char kCheckpointDir[] = "/mem";
// Chunk ids and sizes of the fuzzed job: an odd size (2-bit and 1-bit tails)
// and a multiple of 8; then one partition of a row-sparse table.
constexpr uint64_t kTableChunk = 11;
constexpr uint32_t kTableDim = 3;
constexpr uint64_t kTableRows = 40;
const ChunkSpec kChunks[] = {{3, 5}, {8, 16}};
ChunkSpec TablePartition() {
  ChunkSpec c;
  c.chunk_id = kTableChunk;
  c.table = TableSpec{/*table=*/2, kTableRows, kTableDim, /*partition=*/0, /*partitions=*/1,
                      /*init_std=*/0.1f, /*seed=*/7};
  return c;
}

[[noreturn]] void Violated(const std::string& what) {
  std::fprintf(stderr, "property violated: %s\n", what.c_str());
  std::abort();
}
void Check(bool ok, const std::string& what) {
  if (!ok) Violated(what);
}

// Files in memory and a clock that moves only when a control record says so:
// the run is deterministic, so the replay can compare byte for byte.
class FuzzEnv final : public testing::MemEnv {
 public:
  absl::Time Now() override { return now_; }
  void Advance(absl::Duration d) { now_ += d; }

 private:
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

struct Record {
  uint8_t target = 0;
  std::string bytes;
};

struct Input {
  JobOptions options;
  std::vector<Record> records;
};

Input ParseInput(const uint8_t* data, size_t size) {
  auto take = [&](size_t n) {
    std::string out(reinterpret_cast<const char*>(data), std::min(n, size));
    data += out.size();
    size -= out.size();
    return out;
  };
  const std::string cfg = take(4) + std::string(4, '\0');
  Input in;
  JobOptions& o = in.options;
  o.job_id = kJobId;
  o.consistency.mode = static_cast<ConsistencyMode>(uint8_t(cfg[0]) % 3);
  static constexpr OptimizerType kTypes[] = {OptimizerType::kSgd, OptimizerType::kMomentum,
                                             OptimizerType::kNesterov, OptimizerType::kAdaGrad,
                                             OptimizerType::kAdam};
  o.optimizer.type = kTypes[uint8_t(cfg[1]) % 5];
  o.optimizer.learning_rate = 0.1f;
  o.optimizer.weight_decay = (cfg[1] & 0x80) ? 1e-4f : 0.0f;
  o.consistency.staleness = uint8_t(cfg[2]) % 4;
  o.consistency.scale_stale_pushes = cfg[3] & 1;
  o.max_pending_rounds = 1 + ((uint8_t(cfg[3]) >> 1) & 3);
  o.chunks.assign(std::begin(kChunks), std::end(kChunks));
  o.chunks.push_back(TablePartition());
  // Room for 24 of the 40 rows with two state slots (Adam): the refusal of
  // rows past the budget is reachable.
  o.max_row_bytes = 24 * (kTableDim * 4 * 3 + RowStore::kIdAndIndexBytes);
  o.membership.epoch = 1;
  o.membership.workers = (cfg[3] & 8) ? std::vector<uint64_t>{1} : std::vector<uint64_t>{1, 2};
  o.checkpoint_dir = kCheckpointDir;  // checkpoint_every = 0: only when asked
  o.default_pull_timeout = absl::Seconds(5);
  while (size >= 3) {
    Record r;
    r.target = data[0];
    const size_t len = data[1] | (size_t{data[2]} << 8);
    data += 3;
    size -= 3;
    r.bytes = take(len);
    in.records.push_back(std::move(r));
  }
  return in;
}

// The largest |decoded value| a push can contribute (what fp32 overflow
// depends on), or of an InitChunk's values.
float Magnitude(const pb::EncodedChunk& c) {
  if (c.codec() == CodecToWire(CodecType::kNone)) {
    float m = 0;
    for (size_t i = 0; i + 4 <= c.payload().size(); i += 4) {
      float v;
      std::memcpy(&v, c.payload().data() + i, 4);
      m = std::max(m, std::fabs(v));
    }
    return m;
  }
  return std::max(std::fabs(c.scale()), std::fabs(c.scale2()));
}
float Magnitude(const std::string& fp32) {
  float m = 0;
  for (size_t i = 0; i + 4 <= fp32.size(); i += 4) {
    float v;
    std::memcpy(&v, fp32.data() + i, 4);
    m = std::max(m, std::fabs(v));
  }
  return m;
}

// A push's rows: fp32 values, or at most half's largest (65504) x scale.
float Magnitude(const pb::PushedRows& r) {
  return r.fp16() ? 65504.0f * std::fabs(r.scale()) : Magnitude(r.values());
}

bool AllFinite(const std::string& fp32) {
  for (size_t i = 0; i + 4 <= fp32.size(); i += 4) {
    float v;
    std::memcpy(&v, fp32.data() + i, 4);
    if (!std::isfinite(v)) return false;
  }
  return true;
}

// The state a checkpoint holds, with hash-map orders normalized so two runs
// (or a run and its restore) compare byte for byte.
std::string CanonicalState(const std::string& checkpoint) {
  absl::StatusOr<JobSnapshot> snap = DecodeCheckpoint(checkpoint);
  Check(snap.ok(), "the shard's own checkpoint does not decode");
  std::sort(snap->worker_clocks.begin(), snap->worker_clocks.end());
  std::sort(snap->incarnations.begin(), snap->incarnations.end());
  for (ChunkSnapshot& c : snap->chunks) {
    std::sort(c.applied.begin(), c.applied.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  return EncodeCheckpoint(*snap);
}

// One run of an input, possibly skipping some records.
class Run {
 public:
  Run(const Input& in, Executor* executor) : in_(in), executor_(executor) {
    absl::StatusOr<Job::Opened> opened = Job::Open(in.options, &env_, executor);
    Check(opened.ok(), "the fuzzed job does not open");
    job_ = opened->job;
    in_table_ = true;
  }

  // One emitted ServerMessage: which record caused it, on which stream.
  struct Event {
    size_t record;
    int stream;
    std::string bytes;
    bool operator==(const Event& o) const {
      return record == o.record && stream == o.stream && bytes == o.bytes;
    }
  };

  void Execute(const std::set<size_t>& skip) {
    for (size_t i = 0; i < in_.records.size(); ++i) {
      if (skip.count(i)) continue;
      current_ = i;
      const Record& r = in_.records[i];
      if (r.target % 4 == 3) {
        Control(r.bytes);
      } else {
        Message(r.target % 4, r.bytes);
      }
    }
    current_ = in_.records.size();
    for (std::vector<Held>& held : held_) {  // never answered: no effect
      for (const Held& h : held) no_effect_.insert(h.record);
      held.clear();
    }
    // Shard shutdown: whatever is still parked is answered now.
    job_->CancelPulls(absl::UnavailableError("shard shutting down"));
    for (size_t p = 0; p < pulls_.size(); ++p) {
      Check(pulls_[p].answers == 1, absl::StrCat("pull ", p, " answered ", pulls_[p].answers,
                                                 " times"));
    }
    const JobStats s = job_->Stats(false);
    Check(s.push_messages == push_acks_,
          absl::StrCat(s.push_messages, " Push messages counted, ", push_acks_, " acked"));
    Check(multi_part_pushes_ > 0 ||
              (s.pushes_applied == acks_applied_ && s.pushes_duplicate == acks_duplicate_ &&
               s.pushes_rejected == acks_rejected_),
          absl::StrCat("stats (", s.pushes_applied, "/", s.pushes_duplicate, "/",
                       s.pushes_rejected, ") disagree with the acks (", acks_applied_, "/",
                       acks_duplicate_, "/", acks_rejected_, ")"));
    if (std::getenv("GS_SESSION_FUZZER_VERBOSE") != nullptr) {  // to see what seeds reach
      std::fprintf(stderr,
                   "records %zu events %zu acks applied/dup/rejected %llu/%llu/%llu pulls %zu "
                   "(rows served %zu) "
                   "versions %llu..%llu moderate %d\n",
                   in_.records.size(), events_.size(), (unsigned long long)acks_applied_,
                   (unsigned long long)acks_duplicate_, (unsigned long long)acks_rejected_,
                   pulls_.size(), rows_served_, (unsigned long long)s.min_version,
                   (unsigned long long)s.max_version, moderate_);
    }
    absl::StatusOr<Job::CheckpointInfo> info = job_->Checkpoint();
    Check(info.ok(), "checkpoint to memory failed");
    absl::StatusOr<std::string> data = env_.ReadFile(info->path);
    Check(data.ok(), "checkpoint not written");
    final_state_ = CanonicalState(*data);
    if (moderate_) {
      absl::StatusOr<JobSnapshot> snap = DecodeCheckpoint(*data);
      for (const ChunkSnapshot& c : snap->chunks) {
        for (float v : c.params) Check(std::isfinite(v), "final parameters not finite");
      }
    }
    // A restarted shard restores exactly this state.
    absl::StatusOr<Job::Opened> restored = Job::Open(in_.options, &env_, executor_);
    Check(restored.ok() && restored->restored, "the checkpoint does not restore");
    info = restored->job->Checkpoint();
    Check(info.ok(), "checkpoint of the restored job failed");
    Check(CanonicalState(*env_.ReadFile(info->path)) == final_state_,
          "restored state differs from the checkpointed one");
    for (auto& h : handlers_) h.reset();  // before the streams they point at
  }

  const std::vector<Event>& events() const { return events_; }
  // A refused or duplicate push or init still moves its worker's clock when
  // it carries an advance, so such records are kept.
  std::set<size_t> no_effect() const {
    std::set<size_t> out;
    for (size_t r : no_effect_) {
      if (!advanced_.contains(r)) out.insert(r);
    }
    return out;
  }
  const std::string& final_state() const { return final_state_; }

 private:
  // What a pull asked for, to check its answer against.
  struct PullInfo {
    int stream;
    std::vector<uint64_t> chunk_ids;
    struct Rows {
      uint64_t chunk_id;
      size_t ids;  // how many asked for
      bool fp16;   // answered in fp16
    };
    std::vector<Rows> rows;
    uint64_t clock;
    absl::Time deadline;
    int answers = 0;
  };

  class FuzzStream final : public SessionHandler::Stream {
   public:
    FuzzStream(Run* run, int index) : run_(run), index_(index) {}
    void Send(pb::ServerMessage msg) override { run_->Emit(index_, msg); }
    void Fail(absl::StatusCode code, const std::string& message) override {
      Check(code != absl::StatusCode::kOk, "StreamError with code OK");
      pb::ServerMessage m;
      m.mutable_error()->set_code(static_cast<int32_t>(code));
      m.mutable_error()->set_message(message);
      run_->Emit(index_, m);
      closed_ = true;
    }
    absl::StatusOr<PullCallback> StartPull() override {
      const size_t id = run_->StartPull(index_);
      Run* run = run_;
      return PullCallback([run, id](PullResult r) { run->PullDone(id, std::move(r)); });
    }
    uint64_t stream_id() const override { return static_cast<uint64_t>(index_) + 1; }
    bool closed() const { return closed_; }

   private:
    Run* const run_;
    const int index_;
    bool closed_ = false;
  };

  void Emit(int stream, const pb::ServerMessage& m) {
    events_.push_back(Event{current_, stream, m.SerializeAsString()});
  }

  void Message(int s, const std::string& bytes) {
    pb::WorkerMessage msg;
    if (!msg.ParseFromString(bytes)) return;
    Dispatch(s, msg);
  }

  void Dispatch(int s, pb::WorkerMessage& msg) {
    if (live_[s] == nullptr || live_[s]->closed()) {
      // (Re)connect: a fresh stream and handler, as a new Session call gets.
      // Pieces the old stream held were never answered: they had no effect.
      for (const Held& h : held_[s]) no_effect_.insert(h.record);
      held_[s].clear();
      streams_.push_back(std::make_unique<FuzzStream>(this, s));
      live_[s] = streams_.back().get();
      handlers_[s] = std::make_unique<SessionHandler>(
          [this](const pb::Hello& hello) {
            return in_table_ && hello.job_id() == kJobId ? job_ : nullptr;
          },
          &env_, in_.options.default_pull_timeout, kPullAnswerBytes, live_[s]);
    }
    FuzzStream* stream = live_[s];
    current_message_ = &msg;
    const size_t first = events_.size();
    const JobStats before = job_->Stats(false);
    handlers_[s]->Handle(msg);
    current_message_ = nullptr;
    if (msg.advance() != 0) advanced_.insert(current_);

    if (msg.msg_case() != pb::WorkerMessage::kPush && msg.msg_case() != pb::WorkerMessage::kInit) {
      return;
    }
    if (stream->closed()) return;  // refused at the stream level: never reached the job
    const bool push = msg.msg_case() == pb::WorkerMessage::kPush;
    const uint64_t seq = push ? msg.push().seq() : msg.init().seq();
    // [row pieces]: pieces of rows are answered together, when their last
    // arrives or when the pieces are refused; their acks are the pieces'
    // records' events.
    const bool piece = push && msg.push().rows_size() == 1 && msg.push().rows(0).more() &&
                       msg.push().chunks_size() == 0;
    const bool continues = push && !held_[s].empty() && msg.push().chunks_size() == 0 &&
                           msg.push().rows_size() == 1 &&
                           msg.push().clock() == held_[s][0].clock &&
                           msg.push().rows(0).chunk_id() == held_[s][0].chunk_id;
    const pb::Ack* ack = nullptr;
    pb::Ack held_ack;
    int acks = 0;
    size_t held_acks = 0;
    for (size_t e = first; e < events_.size(); ++e) {
      if (events_[e].stream != s) continue;
      pb::ServerMessage m;
      Check(m.ParseFromString(events_[e].bytes), "unparsable ServerMessage");
      if (!m.has_ack()) continue;
      // Held pieces are answered first, in order (a hostile worker may
      // reuse a seq, so the order decides, not the seq alone).
      if (held_acks < held_[s].size() && m.ack().seq() == held_[s][held_acks].seq) {
        events_[e].record = held_[s][held_acks].record;
        Check(held_acks == 0 || (held_ack.code() == m.ack().code() &&
                                 held_ack.duplicate() == m.ack().duplicate()),
              "the pieces of one push answered differently");
        held_ack = m.ack();
        ++held_acks;
        continue;
      }
      ++acks;
      Check(m.ack().seq() == seq, "Ack with another seq");
      ack_store_ = m.ack();
      ack = &ack_store_;
    }
    Check(held_acks == 0 || held_acks == held_[s].size(), "some pieces of a push unanswered");
    if (held_acks > 0) {
      // The held pieces were answered: with this message's own ack when it
      // was their last piece (one push), or refused before it.
      const bool together = continues && acks == 1 && ack->code() == held_ack.code() &&
                            ack->duplicate() == held_ack.duplicate();
      if (!together) {
        Check(held_ack.code() != 0, "held pieces applied without their last piece");
        ++push_acks_;
        ++acks_rejected_;
      }
      for (const Held& h : held_[s]) {
        if (!together || held_ack.code() != 0 || held_ack.duplicate()) no_effect_.insert(h.record);
        if (together && held_ack.code() == 0 && !held_ack.duplicate() && !h.moderate) {
          moderate_ = false;
        }
      }
      held_[s].clear();
    }
    if (acks == 0 && piece) {  // held until its last piece
      const pb::PushedRows& r = msg.push().rows(0);
      held_[s].push_back(Held{current_, seq, msg.push().clock(), r.chunk_id(),
                              Magnitude(r) <= kModerate});
      return;
    }
    Check(acks == 1, absl::StrCat(acks, " acks for one push/init"));
    const bool ok = ack->code() == 0;
    Check(ok || !ack->message().empty(), "error Ack without a message");
    Check(ok || !ack->duplicate(), "an Ack both failed and duplicate");
    if (push) {
      const JobStats after = job_->Stats(false);
      ++push_acks_;
      const int parts = msg.push().chunks_size() + msg.push().rows_size();
      if (parts > 1) ++multi_part_pushes_;
      const bool some_took = after.pushes_applied + after.pushes_duplicate >
                             before.pushes_applied + before.pushes_duplicate;
      if (ack->duplicate() || (!ok && (parts <= 1 || !some_took))) {
        no_effect_.insert(current_);
      }
      if (!ok) {
        ++acks_rejected_;
      } else if (ack->duplicate()) {
        ++acks_duplicate_;
      } else {
        ++acks_applied_;
        for (const pb::PushedChunk& c : msg.push().chunks()) {
          if (!(Magnitude(c.chunk()) <= kModerate)) moderate_ = false;
        }
        for (const pb::PushedRows& r : msg.push().rows()) {
          if (!(Magnitude(r) <= kModerate)) moderate_ = false;
        }
      }
    } else if (!ok || ack->duplicate()) {
      no_effect_.insert(current_);
    }
    if (!push && ok && !ack->duplicate() && !(Magnitude(msg.init().values()) <= kModerate)) {
      moderate_ = false;
    }
  }

  void Control(const std::string& bytes) {
    const std::string b = bytes + std::string(3, '\0');
    const uint8_t op = b[0] % 4, arg = b[1], arg2 = b[2];
    switch (op) {
      case 0: {  // UpdateMembership, as the coordinator sends it
        if (!in_table_) return;
        MembershipEpoch e;
        e.epoch = ++epoch_;
        e.effective_clock = arg % 8;
        for (uint64_t w = 1; w <= 3; ++w) {
          if (arg2 & (1 << w)) e.workers.push_back(w);
        }
        (void)job_->UpdateMembership(std::move(e));  // may refuse a clock going back
        return;
      }
      case 1:  // time passes; the sweeper expires parked pulls
        env_.Advance(absl::Milliseconds(100) * (arg + 1));
        job_->ExpirePulls(env_.Now());
        return;
      case 2:  // DropJob, as ShardService does it
        if (!in_table_) return;
        in_table_ = false;
        job_->MarkDropped();
        job_->CancelPulls(absl::AbortedError("job was dropped"));
        return;
      case 3:  // the worker's connection breaks: its next record reconnects
        live_[arg % kStreams] = nullptr;
        return;
    }
  }

  size_t StartPull(int stream) {
    Check(current_message_ != nullptr && current_message_->has_pull(),
          "StartPull outside a PullRequest");
    const pb::PullRequest& p = current_message_->pull();
    PullInfo info;
    info.stream = stream;
    info.chunk_ids.assign(p.chunk_ids().begin(), p.chunk_ids().end());
    for (const pb::RowRequest& r : p.rows()) {
      info.rows.push_back({r.chunk_id(), static_cast<size_t>(r.ids_size()), r.fp16()});
    }
    if (info.chunk_ids.empty() && info.rows.empty()) {
      for (const ChunkSpec& c : kChunks) info.chunk_ids.push_back(c.chunk_id);
    }
    info.clock = p.clock();
    // The handler clamps a pull's timeout to the default.
    info.deadline = env_.Now() + (p.timeout_ms() > 0 ? std::min(absl::Milliseconds(p.timeout_ms()),
                                                                in_.options.default_pull_timeout)
                                                     : in_.options.default_pull_timeout);
    pulls_.push_back(std::move(info));
    return pulls_.size() - 1;
  }

  void PullDone(size_t id, PullResult r) {
    PullInfo& p = pulls_[id];
    ++p.answers;
    Check(p.answers == 1, "a pull answered twice");
    const uint64_t request_id = r.request_id;
    const absl::Status status = r.status;
    const std::vector<PulledChunk> chunks = r.chunks;
    const std::vector<PulledRows> rows = r.rows;
    const uint64_t min_clock = r.min_clock;
    const std::vector<pb::ServerMessage> msgs = PullResultToProto(std::move(r), kPullAnswerBytes);
    for (const pb::ServerMessage& m : msgs) Emit(p.stream, m);
    Check(!msgs.empty() && msgs.back().pull().last(), "pull answer without a last message");
    for (size_t i = 0; i + 1 < msgs.size(); ++i) {
      Check(!msgs[i].pull().last(), "last set before the final PullAnswer");
    }
    size_t answered = 0, answered_rows = 0;
    for (const pb::ServerMessage& m : msgs) {
      Check(m.pull().request_id() == request_id, "PullAnswer of another request");
      answered += m.pull().chunks_size();
      answered_rows += m.pull().rows_size();
      size_t bytes = 0;
      for (const pb::PulledChunk& c : m.pull().chunks()) bytes += c.values().size();
      Check(m.pull().chunks_size() <= 1 || bytes <= kPullAnswerBytes,
            "a PullAnswer of several chunks over the bound");
    }
    if (!status.ok()) {
      Check(msgs.size() == 1 && msgs[0].pull().code() == static_cast<int>(status.code()),
            "a failed pull must be one PullAnswer with the code");
      if (status.code() == absl::StatusCode::kDeadlineExceeded) {
        Check(env_.Now() >= p.deadline, "DEADLINE_EXCEEDED before the pull's deadline");
      }
      return;
    }
    Check(chunks.size() == p.chunk_ids.size() && answered == chunks.size(),
          "pull answered with another chunk count");
    Check(rows.size() == p.rows.size() && answered_rows == rows.size(),
          "pull answered with another count of row sets");
    const ConsistencyOptions& mode = in_.options.consistency;
    if (mode.mode == ConsistencyMode::kBounded) {
      Check(min_clock + mode.staleness >= p.clock, "staleness bound broken");
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      Check(chunks[i].chunk_id == p.chunk_ids[i], "pull answered with other chunks");
      uint32_t n = 0;
      for (const ChunkSpec& c : kChunks) {
        if (c.chunk_id == chunks[i].chunk_id) n = c.num_elems;
      }
      Check(chunks[i].values.size() == size_t{n} * 4, "pulled chunk of the wrong size");
      if (mode.mode == ConsistencyMode::kSync) {
        Check(chunks[i].version >= p.clock, "sync pull answered below its clock");
      }
      if (moderate_) Check(AllFinite(chunks[i].values), "served parameters not finite");
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      Check(rows[i].chunk_id == p.rows[i].chunk_id, "pull answered with rows of another partition");
      Check(rows[i].fp16 == p.rows[i].fp16, "rows answered in another precision than asked");
      const size_t n = p.rows[i].ids * kTableDim;
      Check(rows[i].values.size() == n * (rows[i].fp16 ? 2 : 4), "pulled rows of the wrong size");
      if (mode.mode == ConsistencyMode::kSync) {
        Check(rows[i].version >= p.clock, "sync pull of rows answered below its clock");
      }
      std::string fp32 = rows[i].values;
      if (rows[i].fp16) {
        fp32.resize(n * 4);
        Check(DecodeHalfRows(rows[i].values, rows[i].scale,
                             absl::MakeSpan(reinterpret_cast<float*>(fp32.data()), n))
                  .ok(),
              "pulled fp16 rows do not decode");
      }
      if (moderate_) Check(AllFinite(fp32), "served rows not finite");
    }
    rows_served_ += rows.size();
  }

  const Input& in_;
  Executor* const executor_;
  FuzzEnv env_;
  std::shared_ptr<Job> job_;
  bool in_table_ = false;
  uint64_t epoch_ = 1;
  size_t current_ = 0;
  const pb::WorkerMessage* current_message_ = nullptr;

  // Every stream ever opened (parked pulls' callbacks point at them), the
  // one open per index, and its handler.
  std::vector<std::unique_ptr<FuzzStream>> streams_;
  FuzzStream* live_[kStreams] = {};
  // Pieces of rows a stream's handler holds unanswered ([row pieces]).
  struct Held {
    size_t record;
    uint64_t seq, clock, chunk_id;
    bool moderate;
  };
  std::vector<Held> held_[kStreams];
  std::unique_ptr<SessionHandler> handlers_[kStreams];

  std::vector<Event> events_;
  std::vector<PullInfo> pulls_;
  pb::Ack ack_store_;
  std::set<size_t> no_effect_;
  std::set<size_t> advanced_;  // Pushes that carried an advance
  uint64_t acks_applied_ = 0, acks_duplicate_ = 0, acks_rejected_ = 0;
  uint64_t push_acks_ = 0;           // Acks of Push messages
  size_t rows_served_ = 0;           // row sets in successful pull answers
  uint64_t multi_part_pushes_ = 0;  // Pushes of more than one chunk or row set
  bool moderate_ = true;
  std::string final_state_;
};

// ---- seeds -----------------------------------------------------------------
// Valid sessions the mutator starts from (written when GS_SESSION_FUZZER_SEEDS
// names a directory): random bytes almost never spell a Hello for job "job".

void AddRecord(std::string* out, uint8_t target, const std::string& bytes) {
  out->push_back(static_cast<char>(target));
  out->push_back(static_cast<char>(bytes.size() & 0xff));
  out->push_back(static_cast<char>(bytes.size() >> 8));
  out->append(bytes);
}

std::string Msg(const pb::WorkerMessage& m) { return m.SerializeAsString(); }

std::string Seed(uint8_t mode, uint8_t opt, uint8_t flags, absl::string_view codec) {
  std::string s = {static_cast<char>(mode), static_cast<char>(opt), 1, static_cast<char>(flags)};
  for (uint64_t w = 1; w <= 2; ++w) {
    pb::WorkerMessage m;
    m.mutable_hello()->set_job_id(kJobId);
    m.mutable_hello()->set_worker_id(w);
    m.mutable_hello()->set_incarnation(1);
    m.mutable_hello()->set_protocol(pb::SESSION_PROTOCOL_ADVANCE);
    AddRecord(&s, w - 1, Msg(m));
  }
  uint64_t seq = 1;
  for (const ChunkSpec& c : kChunks) {
    pb::WorkerMessage m;
    m.mutable_init()->set_seq(seq++);
    m.mutable_init()->set_chunk_id(c.chunk_id);
    std::vector<float> v(c.num_elems, 0.25f);
    m.mutable_init()->set_values(
        std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    AddRecord(&s, 0, Msg(m));
  }
  for (uint64_t clock = 0; clock < 2; ++clock) {
    for (uint64_t w = 1; w <= 2; ++w) {
      // Clock 0: a Push per chunk and one of the table's rows; clock 1: one
      // bucket of every chunk and the rows.
      pb::WorkerMessage m;
      for (const ChunkSpec& c : kChunks) {
        std::vector<float> g(c.num_elems);
        for (uint32_t i = 0; i < c.num_elems; ++i) g[i] = (i % 3 == 0 ? -0.7f : 0.6f) * (w + clock);
        auto enc = MakeChunkEncoder(codec, {}, /*error_feedback=*/true, c.num_elems);
        CHECK(enc.ok());
        ChunkHeader h;
        std::string payload;
        CHECK((*enc)->Encode(g, EncodeKey{1, uint32_t(w), uint32_t(clock), 0, uint32_t(c.chunk_id)},
                             &h, &payload)
                  .ok());
        pb::Push* p = m.mutable_push();
        if (p->chunks_size() == 0) p->set_seq(seq++);
        p->set_clock(clock);
        pb::PushedChunk* pc = p->add_chunks();
        pc->set_chunk_id(c.chunk_id);
        ChunkToWire(h, std::move(payload), pc->mutable_chunk());
        if (clock == 0) {
          AddRecord(&s, w - 1, Msg(m));
          m.Clear();
        }
      }
      // Clock 0's rows in two pieces ([row pieces] in session_handler.cc).
      for (uint64_t id : {w, w + 5 + clock}) {
        const bool more = clock == 0 && id == w;
        pb::Push* p = m.mutable_push();
        if (p->chunks_size() == 0 && p->rows_size() == 0) p->set_seq(seq++);
        p->set_clock(clock);
        pb::PushedRows* rows = p->rows_size() > 0 ? p->mutable_rows(0) : p->add_rows();
        rows->set_chunk_id(kTableChunk);
        rows->set_more(more);
        rows->add_ids(id);
        for (uint32_t i = 0; i < kTableDim; ++i) {
          const float g = 0.1f * (i + 1) * (id % 2 ? 1 : -1);
          rows->mutable_values()->append(reinterpret_cast<const char*>(&g), 4);
        }
        if (more || id != w) {
          if (w == 2 && clock == 1) {  // [fp16 rows]
            const std::string fp32 = rows->values();
            const absl::Span<const float> x(reinterpret_cast<const float*>(fp32.data()),
                                            fp32.size() / 4);
            rows->set_fp16(true);
            rows->set_scale(HalfRowsScale(x));
            rows->clear_values();
            EncodeHalfRows(x, rows->scale(), rows->mutable_values());
          }
          AddRecord(&s, w - 1, Msg(m));
          m.Clear();
        }
      }
      // Clock 0's advance alone, clock 1's riding in the pull request.
      if (clock == 0) {
        pb::WorkerMessage adv;
        adv.mutable_clock()->set_clock(clock + 1);
        AddRecord(&s, w - 1, Msg(adv));
      }
      pb::WorkerMessage pull;
      if (clock == 1) pull.set_advance(clock + 1);
      pull.mutable_pull()->set_request_id(clock);
      pull.mutable_pull()->set_clock(clock + 1);
      pull.mutable_pull()->set_timeout_ms(200);
      if (clock == 1) {  // the dense chunks and some rows, one of them twice
        for (const ChunkSpec& c : kChunks) pull.mutable_pull()->add_chunk_ids(c.chunk_id);
        pb::RowRequest* r = pull.mutable_pull()->add_rows();
        r->set_chunk_id(kTableChunk);
        r->set_fp16(w == 2);  // [fp16 rows]
        for (uint64_t id : {uint64_t{1}, w + 5, uint64_t{30}, uint64_t{1}}) r->add_ids(id);
      }
      AddRecord(&s, w - 1, Msg(pull));
    }
  }
  AddRecord(&s, 3, std::string{1, 3});       // time passes: sweep
  AddRecord(&s, 3, std::string{0, 2, 0x2});  // membership: worker 1 only from clock 2
  pb::WorkerMessage leave;
  leave.mutable_leave();
  AddRecord(&s, 1, Msg(leave));
  return s;
}

void WriteSeeds(const char* dir) {
  int n = 0;
  for (uint8_t mode = 0; mode < 3; ++mode) {
    for (uint8_t opt = 0; opt < 5; ++opt) {
      for (int codec = 0; codec < kNumCodecTypes; ++codec) {  // every codec
        const std::string seed = Seed(mode, opt, /*flags=*/(opt & 1) ? 1 : 0,
                                      CodecTypeName(static_cast<CodecType>(codec)));
        const std::string path = absl::StrCat(dir, "/seed-", n++);
        FILE* f = std::fopen(path.c_str(), "wb");
        CHECK(f != nullptr) << path;
        std::fwrite(seed.data(), 1, seed.size(), f);
        std::fclose(f);
      }
    }
  }
}

Executor* SharedExecutor() {
  static Executor* executor = new Executor(1);  // idle: checkpoint_every is 0
  return executor;
}

}  // namespace
}  // namespace gradstream::shard

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  FLAGS_minloglevel = 2;  // Fail() logs a warning per refused stream: too chatty
  FLAGS_logtostderr = true;
  if (const char* dir = std::getenv("GS_SESSION_FUZZER_SEEDS"); dir != nullptr && *dir != 0) {
    gradstream::shard::WriteSeeds(dir);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradstream::shard;
  const Input in = ParseInput(data, size);
  Run first(in, SharedExecutor());
  first.Execute({});
  const std::set<size_t> no_effect = first.no_effect();
  if (no_effect.empty()) return 0;
  // Property 2: the same input without the refused and duplicate messages.
  Run second(in, SharedExecutor());
  second.Execute(no_effect);
  std::vector<Run::Event> expected;
  for (const Run::Event& e : first.events()) {
    if (!no_effect.count(e.record)) expected.push_back(e);
  }
  Check(second.events() == expected,
        "dropping refused/duplicate pushes and inits changed what the shard sent");
  Check(second.final_state() == first.final_state(),
        "dropping refused/duplicate pushes and inits changed the job's state");
  return 0;
}
