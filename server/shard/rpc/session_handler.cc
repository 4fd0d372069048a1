#include "server/shard/rpc/session_handler.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec/wire.h"
#include "common/grpc_util.h"
#include "glog/logging.h"

namespace gradstream::shard {

namespace pb = ::gradstream::v1;

SessionHandler::SessionHandler(JobLookup find_job, Env* env, absl::Duration default_pull_timeout,
                               Stream* stream)
    : find_job_(std::move(find_job)),
      env_(env),
      default_pull_timeout_(default_pull_timeout),
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
  if (msg.msg_case() == pb::WorkerMessage::kHello) return HandleHello(msg.hello());
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
  switch (msg.msg_case()) {
    case pb::WorkerMessage::kPush:
      return HandlePush(*msg.mutable_push());
    case pb::WorkerMessage::kInit:
      return HandleInit(msg.init());
    case pb::WorkerMessage::kPull:
      return HandlePull(msg.pull());
    case pb::WorkerMessage::kClock:
      if (absl::Status s = job_->AdvanceClock(worker_, msg.clock().clock()); !s.ok()) {
        return Fail(s.code(), std::string(s.message()));
      }
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

void SessionHandler::HandlePush(pb::Push& push) {
  // Payload and scales are checked where they are decoded (see [chunk
  // validation] in common/codec/decoder.h).
  absl::StatusOr<ChunkHeader> header = ChunkHeaderFromWire(push.chunk());
  if (!header.ok()) {
    job_->CountRejected();
    return SendAck(push.seq(), header.status());
  }
  PushArgs args;
  args.worker = worker_;
  args.chunk_id = push.chunk_id();
  args.clock = push.clock();
  args.header = *header;
  args.payload = push.chunk().payload();
  SendAck(push.seq(), job_->Push(args));
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
  args.stream = stream_->stream_id();
  // The shard's default is also the longest a pull may wait ([pull schedule]).
  args.deadline = PullDeadline(env_->Now(), pull.timeout_ms(), default_pull_timeout_);
  absl::StatusOr<PullCallback> done = stream_->StartPull();
  if (!done.ok()) {
    PullResult refused;
    refused.request_id = args.request_id;
    refused.status = done.status();
    for (pb::ServerMessage& m : PullResultToProto(std::move(refused))) stream_->Send(std::move(m));
    return;
  }
  if (!*done) return;
  job_->Pull(std::move(args), *std::move(done));
}

std::vector<pb::ServerMessage> PullResultToProto(PullResult r) {
  std::vector<pb::ServerMessage> out;
  if (!r.status.ok() || r.chunks.empty()) {
    pb::ServerMessage& m = out.emplace_back();
    pb::PullChunk* pc = m.mutable_pull();
    pc->set_request_id(r.request_id);
    pc->set_last(true);
    StatusToWire(r.status, pc);
    pc->set_min_clock(r.min_clock);
    return out;
  }
  out.reserve(r.chunks.size());
  for (size_t i = 0; i < r.chunks.size(); ++i) {
    pb::ServerMessage& m = out.emplace_back();
    pb::PullChunk* pc = m.mutable_pull();
    pc->set_request_id(r.request_id);
    pc->set_chunk_id(r.chunks[i].chunk_id);
    pc->set_version(r.chunks[i].version);
    pc->set_values(std::move(r.chunks[i].values));
    if (r.chunks[i].published) {
      pc->set_published(true);
      pc->set_checksum(r.chunks[i].checksum);
      for (EncodedDelta& d : r.chunks[i].deltas) {
        ChunkToWire(d.header, std::move(d.payload), pc->add_deltas());
      }
    }
    pc->set_last(i + 1 == r.chunks.size());
    pc->set_min_clock(r.min_clock);
  }
  return out;
}

}  // namespace gradstream::shard
