#include "server/shard/rpc/session_handler.h"

#include <cfloat>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/half_rows.h"
#include "common/codec/wire.h"
#include "common/grpc_util.h"
#include "common/job/row_partition.h"
#include "glog/logging.h"

namespace gradstream::shard {

namespace pb = ::gradstream::v1;

SessionHandler::SessionHandler(JobLookup find_job, Env* env, absl::Duration default_pull_timeout,
                               size_t pull_answer_bytes, Stream* stream)
    : find_job_(std::move(find_job)),
      env_(env),
      default_pull_timeout_(default_pull_timeout),
      pull_answer_bytes_(pull_answer_bytes),
      stream_(stream) {}

void SessionHandler::Fail(absl::StatusCode code, const std::string& message) {
  LOG(WARNING) << "session of worker " << worker_ << ": " << message;
  stream_->Fail(code, message);
}

void SessionHandler::SendAck(uint64_t seq, const absl::StatusOr<bool>& r) {
  pb::ServerMessage m;
  pb::Ack* ack = m.mutable_ack();
  ack->set_seq(seq);
  if (r.ok()) {
    ack->set_duplicate(*r);
  } else {
    StatusToWire(r.status(), ack);
  }
  stream_->Send(std::move(m));
}

void SessionHandler::Handle(pb::WorkerMessage& msg) {
  if (msg.msg_case() == pb::WorkerMessage::kHello) {
    if (msg.advance() != 0) {
      return Fail(absl::StatusCode::kInvalidArgument, "a Hello carries no clock advance");
    }
    return HandleHello(msg.hello());
  }
  if (msg.msg_case() == pb::WorkerMessage::MSG_NOT_SET) {
    return Fail(absl::StatusCode::kInvalidArgument, "empty WorkerMessage");
  }
  if (job_ == nullptr) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "the stream must open with Hello before pushes, pulls or clocks");
  }
  if (job_->dropped()) {
    return Fail(absl::StatusCode::kNotFound, absl::StrCat("job '", job_->id(), "' was dropped"));
  }
  if (absl::Status s = job_->CheckIncarnation(worker_, incarnation_); !s.ok()) {
    return Fail(s.code(), std::string(s.message()));
  }
  if (left_) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat("worker ", worker_, " sent a message after Leave"));
  }
  // The worker's clock moves before the message is looked at, as when the
  // advance travels alone just before it.
  if (msg.advance() != 0 && !AdvanceClock(msg.advance())) return;
  switch (msg.msg_case()) {
    case pb::WorkerMessage::kPush:
      return HandlePush(msg.push());
    case pb::WorkerMessage::kInit:
      return HandleInit(msg.init());
    case pb::WorkerMessage::kPull:
      return HandlePull(msg.pull());
    case pb::WorkerMessage::kClock:
      job_->CountClockMessage();
      AdvanceClock(msg.clock().clock());
      return;
    case pb::WorkerMessage::kLeave:
      LOG(INFO) << "worker " << worker_ << " leaves job " << job_->id();
      left_ = true;
      return;
    default:
      return;
  }
}

void SessionHandler::HandleHello(const pb::Hello& hello) {
  if (job_ != nullptr) return Fail(absl::StatusCode::kFailedPrecondition, "second Hello");
  absl::StatusOr<std::shared_ptr<Job>> admitted = find_job_(hello);
  if (!admitted.ok()) {
    return Fail(admitted.status().code(), std::string(admitted.status().message()));
  }
  std::shared_ptr<Job> job = *std::move(admitted);
  if (job == nullptr) {
    return Fail(absl::StatusCode::kNotFound, absl::StrCat("unknown job '", hello.job_id(), "'"));
  }
  if (hello.protocol() != pb::SESSION_PROTOCOL_ADVANCE) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat("worker ", hello.worker_id(), " speaks Session protocol ",
                             static_cast<int>(hello.protocol()), ", this shard ",
                             static_cast<int>(pb::SESSION_PROTOCOL_ADVANCE),
                             ": run workers and shards of the same gradstream version"));
  }
  absl::StatusOr<Job::HelloInfo> info = job->Hello(hello.worker_id(), hello.incarnation());
  if (!info.ok()) return Fail(info.status().code(), std::string(info.status().message()));
  job_ = std::move(job);
  worker_ = hello.worker_id();
  incarnation_ = hello.incarnation();
  pb::ServerMessage m;
  pb::HelloAck* ack = m.mutable_hello_ack();
  ack->set_shard_index(job_->options().shard_index);
  ack->set_epoch(info->epoch);
  for (uint64_t id : info->chunk_ids) ack->add_chunk_ids(id);
  stream_->Send(std::move(m));
}

bool SessionHandler::AdvanceClock(uint64_t clock) {
  absl::Status s = job_->AdvanceClock(worker_, clock);
  if (!s.ok()) Fail(s.code(), std::string(s.message()));
  return s.ok();
}

void SessionHandler::HandlePush(const pb::Push& push) {
  const bool piece = push.rows_size() == 1 && push.rows(0).more();
  const bool last_piece = pieces_.has_value() && !piece && push.chunks_size() == 0 &&
                          push.rows_size() == 1 && push.clock() == pieces_->clock &&
                          push.rows(0).chunk_id() == pieces_->chunk_id;
  if (pieces_.has_value() && !last_piece &&
      !(piece && push.clock() == pieces_->clock && push.rows(0).chunk_id() == pieces_->chunk_id)) {
    RefusePieces(absl::StrCat("the next Push (seq ", push.seq(),
                              ") does not continue them: another clock, partition or chunk"));
  }
  for (const pb::PushedRows& r : push.rows()) {
    if (r.more() && !(piece && push.chunks_size() == 0)) {
      job_->CountRejected();
      return SendAck(push.seq(), absl::InvalidArgumentError(absl::StrCat(
                                     "rows of chunk ", r.chunk_id(),
                                     " continued (`more`) in a Push that holds more than them")));
    }
  }
  if (piece) return AddPiece(push);
  if (last_piece) {
    AddPiece(push);
    if (!pieces_.has_value()) return;  // refused: past the bound
    RowPieces pieces = *std::move(pieces_);
    pieces_.reset();
    job_->ReleasePieces(worker_, pieces.held);
    PushBucket bucket;
    bucket.worker = worker_;
    bucket.clock = pieces.clock;
    bucket.rows.push_back(PushBucket::Rows{
        pieces.chunk_id, RowGrads{absl::MakeConstSpan(pieces.ids), pieces.values, pieces.fp16}});
    const absl::StatusOr<bool> r = job_->Push(bucket);
    for (uint64_t seq : pieces.seqs) SendAck(seq, r);
    return;
  }
  // Payloads and scales are checked by the job, before any chunk is applied
  // (see [chunk validation] in common/codec/decoder.h).
  PushBucket bucket;
  bucket.worker = worker_;
  bucket.clock = push.clock();
  bucket.chunks.reserve(push.chunks_size());
  for (const pb::PushedChunk& c : push.chunks()) {
    absl::StatusOr<ChunkHeader> header = ChunkHeaderFromWire(c.chunk());
    if (!header.ok()) {
      job_->CountRejected();
      return SendAck(push.seq(),
                     absl::InvalidArgumentError(absl::StrCat(
                         "chunk ", c.chunk_id(), " of the Push: ", header.status().message())));
    }
    // An unknown level in a report is read as fp32: reports decide nothing.
    const CodecType level = c.level() >= 0 && c.level() < kNumCodecTypes
                                ? static_cast<CodecType>(c.level())
                                : CodecType::kNone;
    // Reports decide nothing; one that is not a figure is dropped.
    const float owed = c.owed_raise() > 0 && c.owed_raise() <= FLT_MAX ? c.owed_raise() : 0.0f;
    bucket.chunks.push_back(PushBucket::Chunk{c.chunk_id(), *header, c.chunk().payload(),
                                              c.error_clocks(), c.raised(), level, owed});
  }
  std::vector<std::string> decoded(push.rows_size());
  for (int i = 0; i < push.rows_size(); ++i) {
    const pb::PushedRows& r = push.rows(i);
    absl::StatusOr<absl::string_view> values = RowValues(r, &decoded[i]);
    if (!values.ok()) {
      job_->CountRejected();
      return SendAck(push.seq(), values.status());
    }
    bucket.rows.push_back(PushBucket::Rows{
        r.chunk_id(),
        RowGrads{absl::MakeConstSpan(r.ids().data(), r.ids_size()), *values, r.fp16()}});
  }
  SendAck(push.seq(), job_->Push(bucket));
}

// NOTE: [row pieces] A partition's rows past one message arrive as
// consecutive Pushes (PushedRows.more in ps.proto). They are held here, not
// acknowledged, until the last: then the job sees one push, so its
// exactly-once rules (a clock's push of a partition applied once) and every
// consistency mode hold unchanged, and every piece is answered with that
// push's status. A broken stream drops what it held; the worker replays
// every unanswered piece on the next one. Held bytes are bounded by
// kMaxPushedRowsBytes.
void SessionHandler::AddPiece(const pb::Push& push) {
  const pb::PushedRows& r = push.rows(0);
  if (!pieces_.has_value()) pieces_ = RowPieces{r.chunk_id(), push.clock(), {}, {}, {}, false, 0};
  pieces_->seqs.push_back(push.seq());
  const uint64_t piece = r.values().size() * (r.fp16() ? 2 : 1) + sizeof(uint64_t) * r.ids_size();
  if (pieces_->held + piece > kMaxPushedRowsBytes) {
    return RefusePieces(absl::StrCat("they are past ", pieces_->held + piece,
                                     " bytes, more than a partition's rows of one clock may be (",
                                     kMaxPushedRowsBytes, ")"));
  }
  if (!job_->HoldPieces(worker_, piece)) {
    return RefusePieces(absl::StrCat("worker ", worker_, "'s streams hold pieces past ",
                                     job_->options().max_held_piece_bytes, " bytes"));
  }
  pieces_->held += piece;
  std::string decoded;
  absl::StatusOr<absl::string_view> values = RowValues(r, &decoded);
  if (!values.ok()) return RefusePieces(std::string(values.status().message()));
  pieces_->ids.insert(pieces_->ids.end(), r.ids().begin(), r.ids().end());
  pieces_->values.append(values->data(), values->size());
  pieces_->fp16 = r.fp16();
}

absl::StatusOr<absl::string_view> SessionHandler::RowValues(const pb::PushedRows& r,
                                                            std::string* decoded) {
  if (!r.fp16()) return absl::string_view(r.values());
  if (r.values().size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rows of chunk ", r.chunk_id(), ": ", r.values().size(), " bytes of fp16 values"));
  }
  decoded->resize(r.values().size() * 2);
  absl::Status s = DecodeHalfRows(
      r.values(), r.scale(),
      absl::MakeSpan(reinterpret_cast<float*>(decoded->data()), r.values().size() / 2));
  if (!s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows of chunk ", r.chunk_id(), ": ", s.message()));
  }
  return absl::string_view(*decoded);
}

void SessionHandler::RefusePieces(const std::string& why) {
  job_->CountRejected();
  const absl::Status refused = absl::InvalidArgumentError(
      absl::StrCat("the ", pieces_->seqs.size(), " piece(s) of chunk ", pieces_->chunk_id,
                   "'s rows of clock ", pieces_->clock, " were refused, nothing applied: ", why));
  LOG(WARNING) << "session of worker " << worker_ << ": " << refused.message();
  for (uint64_t seq : pieces_->seqs) SendAck(seq, refused);
  job_->ReleasePieces(worker_, pieces_->held);
  pieces_.reset();
}

SessionHandler::~SessionHandler() {
  if (pieces_.has_value()) job_->ReleasePieces(worker_, pieces_->held);  // never answered
}

void SessionHandler::HandleInit(const pb::InitChunk& init) {
  SendAck(init.seq(), job_->Init(init.chunk_id(), init.values()));
}

void SessionHandler::HandlePull(const pb::PullRequest& pull) {
  PullArgs args;
  args.worker = worker_;
  args.request_id = pull.request_id();
  args.chunk_ids.assign(pull.chunk_ids().begin(), pull.chunk_ids().end());
  args.clock = pull.clock();
  for (const pb::HeldCopy& h : pull.held()) {
    args.held.push_back(HeldCopy{h.chunk_id(), h.version(), h.checksum()});
  }
  for (const pb::RowRequest& r : pull.rows()) {
    args.rows.push_back(PullArgs::Rows{r.chunk_id(), {r.ids().begin(), r.ids().end()}, r.fp16()});
  }
  args.stream = stream_->stream_id();
  // The shard's default is also the longest a pull may wait ([pull schedule]).
  args.deadline = PullDeadline(env_->Now(), pull.timeout_ms(), default_pull_timeout_);
  absl::StatusOr<PullCallback> done = stream_->StartPull();
  if (!done.ok()) {
    PullResult refused;
    refused.request_id = args.request_id;
    refused.status = done.status();
    for (pb::ServerMessage& m : PullResultToProto(std::move(refused), pull_answer_bytes_)) {
      stream_->Send(std::move(m));
    }
    return;
  }
  if (!*done) return;
  job_->Pull(std::move(args), *std::move(done));
}

std::vector<pb::ServerMessage> PullResultToProto(PullResult r, size_t max_bytes) {
  std::vector<pb::ServerMessage> out;
  auto answer = [&]() {
    pb::PullAnswer* a = out.emplace_back().mutable_pull();
    a->set_request_id(r.request_id);
    a->set_min_clock(r.min_clock);
    return a;
  };
  if (!r.status.ok() || (r.chunks.empty() && r.rows.empty())) {
    pb::PullAnswer* a = answer();
    a->set_last(true);
    StatusToWire(r.status, a);
    return out;
  }
  pb::PullAnswer* a = nullptr;
  size_t bytes = 0;  // in `a`
  for (PulledRows& rows : r.rows) {
    if (a == nullptr || (bytes > 0 && bytes + rows.values.size() > max_bytes)) {
      a = answer();
      bytes = 0;
    }
    bytes += rows.values.size();
    pb::PulledRows* pr = a->add_rows();
    pr->set_chunk_id(rows.chunk_id);
    pr->set_version(rows.version);
    pr->set_values(std::move(rows.values));
    if (rows.fp16) {
      pr->set_fp16(true);
      pr->set_scale(rows.scale);
    }
  }
  for (PulledChunk& c : r.chunks) {
    size_t size = c.values.size();
    for (const EncodedDelta& d : c.deltas) size += d.payload.size();
    if (a == nullptr || (bytes > 0 && bytes + size > max_bytes)) {
      a = answer();
      bytes = 0;
    }
    bytes += size;
    pb::PulledChunk* pc = a->add_chunks();
    pc->set_chunk_id(c.chunk_id);
    pc->set_version(c.version);
    pc->set_values(std::move(c.values));
    if (c.published) {
      pc->set_published(true);
      pc->set_checksum(c.checksum);
      for (EncodedDelta& d : c.deltas) {
        ChunkToWire(d.header, std::move(d.payload), pc->add_deltas());
      }
    }
  }
  a->set_last(true);
  return out;
}

}  // namespace gradstream::shard
