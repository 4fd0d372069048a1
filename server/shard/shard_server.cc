// The RPC edge of the shard: converts ps.proto messages to the plain structs
// of types.h and back. Nothing past this file sees a generated type.
#include "server/shard/shard_server.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc_util.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "ps.grpc.pb.h"
#include "server/shard/executor.h"
#include "server/shard/job.h"

namespace gradstream::shard {
namespace {

namespace pb = ::gradstream::v1;

// Bytes a message may carry beside a chunk's payload (headers, ids).
constexpr int kMessageOverhead = 1024;
// Messages read ahead of the executor per stream (flow control).
constexpr size_t kMaxInbox = 8;

absl::StatusOr<JobOptions> JobOptionsFromProto(const pb::CreateJobRequest& req,
                                               const ShardServerOptions& server) {
  JobOptions o;
  o.job_id = req.job_id();
  o.shard_index = req.shard_index();
  const pb::OptimizerSpec& spec = req.optimizer();
  absl::StatusOr<OptimizerType> type = OptimizerTypeFromName(spec.type());
  if (!type.ok()) return type.status();
  OptimizerOptions opt;
  opt.type = *type;
  opt.learning_rate = spec.learning_rate();
  opt.momentum = spec.momentum();
  opt.epsilon = spec.epsilon();
  opt.initial_accumulator = spec.initial_accumulator();
  opt.beta1 = spec.beta1();
  opt.beta2 = spec.beta2();
  opt.weight_decay = spec.weight_decay();
  o.optimizer = WithDefaults(opt, spec.epsilon() != 0.0f);
  switch (req.consistency().mode()) {
    case pb::SYNC:
      o.consistency.mode = ConsistencyMode::kSync;
      break;
    case pb::BOUNDED:
      o.consistency.mode = ConsistencyMode::kBounded;
      break;
    case pb::ASYNC:
      o.consistency.mode = ConsistencyMode::kAsync;
      break;
    default:
      return absl::InvalidArgumentError("unknown consistency mode");
  }
  o.consistency.staleness = req.consistency().staleness();
  o.consistency.scale_stale_pushes = req.consistency().scale_stale_pushes();
  const uint64_t max_elems =
      static_cast<uint64_t>(server.max_message_bytes - kMessageOverhead) / sizeof(float);
  for (const pb::ChunkInfo& c : req.chunks()) {
    if (c.num_elems() > max_elems) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c.chunk_id(), " has ", c.num_elems(),
                       " elements: an fp32 push would not fit the shard's ",
                       server.max_message_bytes, "-byte message limit"));
    }
    o.chunks.push_back(ChunkSpec{c.chunk_id(), c.num_elems()});
  }
  o.membership.epoch = req.membership().epoch();
  o.membership.effective_clock = req.membership().effective_clock();
  o.membership.workers.assign(req.membership().worker_ids().begin(),
                              req.membership().worker_ids().end());
  o.checkpoint_every = req.checkpoint_every();
  o.checkpoint_dir = server.checkpoint_dir;
  o.max_pending_rounds = server.max_pending_rounds;
  o.default_pull_timeout = server.default_pull_timeout;
  return o;
}

class ShardService;

// One worker's Session stream. Messages are handled in order, one at a time,
// on the executor (a strand per stream); gRPC threads only queue them.
// Thread-safe; owns itself until OnDone and while executor tasks or parked
// pulls hold a reference.
class SessionReactor final : public grpc::ServerBidiReactor<pb::WorkerMessage, pb::ServerMessage> {
 public:
  static SessionReactor* Start(ShardService* service, Executor* executor, Env* env) {
    auto s = std::shared_ptr<SessionReactor>(new SessionReactor(service, executor, env));
    {
      absl::MutexLock l(&s->mu_);
      s->self_ = s;
    }
    s->StartRead(&s->read_msg_);
    return s.get();
  }

  void OnReadDone(bool ok) override {
    bool schedule = false;
    {
      absl::MutexLock l(&mu_);
      if (!ok) {
        reads_done_ = true;
        MaybeFinishLocked();
        return;
      }
      if (closing_ || finished_) return;
      inbox_.push_back(std::move(read_msg_));
      read_msg_.Clear();
      if (inbox_.size() < kMaxInbox) {
        StartRead(&read_msg_);
      } else {
        read_paused_ = true;
      }
      if (!draining_) schedule = draining_ = true;
    }
    if (schedule) {
      std::shared_ptr<SessionReactor> self = Self();
      executor_->Submit([self] { self->Drain(); });
    }
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock l(&mu_);
    outbox_.pop_front();
    if (!ok) {
      write_failed_ = true;
      outbox_.clear();
    }
    if (!outbox_.empty()) {
      StartWrite(&outbox_.front());
    } else {
      writing_ = false;
    }
    MaybeFinishLocked();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    cancelled_ = true;
    MaybeFinishLocked();
  }

  void OnDone() override {
    std::shared_ptr<SessionReactor> me;
    absl::MutexLock l(&mu_);
    done_ = true;
    me = std::move(self_);
    // `me` may delete this after the lock is released (declared first).
  }

 private:
  SessionReactor(ShardService* service, Executor* executor, Env* env)
      : service_(service), executor_(executor), env_(env) {}

  std::shared_ptr<SessionReactor> Self() {
    absl::MutexLock l(&mu_);
    return self_;
  }

  void Drain();
  void Handle(pb::WorkerMessage& msg);
  void HandleHello(const pb::Hello& hello);
  void HandlePush(pb::Push& push);
  void HandleInit(const pb::InitChunk& init);
  void HandlePull(const pb::PullRequest& pull);
  void SendPullResult(PullResult result);

  void Send(pb::ServerMessage msg) {
    absl::MutexLock l(&mu_);
    SendLocked(std::move(msg));
  }
  void SendLocked(pb::ServerMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || cancelled_ || write_failed_) return;
    outbox_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      StartWrite(&outbox_.front());
    }
  }
  // Sends a StreamError and ends the stream after it is written.
  void Fail(absl::StatusCode code, const std::string& message) {
    LOG(WARNING) << "session of worker " << worker_ << ": " << message;
    pb::ServerMessage m;
    m.mutable_error()->set_code(static_cast<int32_t>(code));
    m.mutable_error()->set_message(message);
    absl::MutexLock l(&mu_);
    SendLocked(std::move(m));
    closing_ = true;
    MaybeFinishLocked();
  }
  void SendAck(uint64_t seq, const absl::StatusOr<bool>& r) {
    pb::ServerMessage m;
    pb::Ack* ack = m.mutable_ack();
    ack->set_seq(seq);
    if (r.ok()) {
      ack->set_duplicate(*r);
    } else {
      ack->set_code(static_cast<int32_t>(r.status().code()));
      ack->set_message(std::string(r.status().message()));
    }
    Send(std::move(m));
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    grpc::Status status = grpc::Status::OK;
    bool finish = false;
    if (cancelled_ || write_failed_) {
      finish = !draining_;
      status = grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled");
    } else if (closing_) {
      finish = !draining_ && outbox_.empty();
    } else {
      finish =
          reads_done_ && inbox_.empty() && !draining_ && outbox_.empty() && pending_pulls_ == 0;
    }
    if (finish) {
      finished_ = true;
      Finish(status);
    }
  }

  ShardService* const service_;
  Executor* const executor_;
  Env* const env_;

  // Used by the strand only (one Handle at a time): no lock.
  std::shared_ptr<Job> job_;
  uint64_t worker_ = 0;
  uint64_t incarnation_ = 0;

  absl::Mutex mu_;
  std::shared_ptr<SessionReactor> self_ ABSL_GUARDED_BY(mu_);
  pb::WorkerMessage read_msg_;  // target of the one outstanding read
  std::deque<pb::WorkerMessage> inbox_ ABSL_GUARDED_BY(mu_);
  std::deque<pb::ServerMessage> outbox_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  int pending_pulls_ ABSL_GUARDED_BY(mu_) = 0;
};

// The ParameterServer service. Thread-safe: the job table is guarded by mu_;
// unary handlers run on the executor and finish their reactor from there.
class ShardService final : public pb::ParameterServer::CallbackService {
 public:
  ShardService(const ShardServerOptions& options, Executor* executor)
      : options_(options), executor_(executor) {}

  std::shared_ptr<Job> FindJob(const std::string& id) {
    absl::MutexLock l(&mu_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : it->second;
  }

  std::vector<std::shared_ptr<Job>> AllJobs() {
    absl::MutexLock l(&mu_);
    std::vector<std::shared_ptr<Job>> out;
    for (auto& [id, job] : jobs_) out.push_back(job);
    return out;
  }

  const ShardServerOptions& options() const { return options_; }

  grpc::ServerBidiReactor<pb::WorkerMessage, pb::ServerMessage>* Session(
      grpc::CallbackServerContext* ctx) override {
    return SessionReactor::Start(this, executor_, options_.env);
  }

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx,
                                      const pb::CreateJobRequest* req,
                                      pb::CreateJobResponse* resp) override {
    return OnExecutor(ctx, [this, req, resp] { return DoCreateJob(*req, resp); });
  }

  grpc::ServerUnaryReactor* UpdateMembership(grpc::CallbackServerContext* ctx,
                                             const pb::MembershipUpdate* req,
                                             pb::MembershipAck* resp) override {
    return OnExecutor(ctx, [this, req, resp]() -> absl::Status {
      std::shared_ptr<Job> job = FindJob(req->job_id());
      if (job == nullptr) return UnknownJob(req->job_id());
      MembershipEpoch e;
      e.epoch = req->membership().epoch();
      e.effective_clock = req->membership().effective_clock();
      e.workers.assign(req->membership().worker_ids().begin(),
                       req->membership().worker_ids().end());
      absl::StatusOr<uint64_t> epoch = job->UpdateMembership(std::move(e));
      if (!epoch.ok()) return epoch.status();
      resp->set_epoch(*epoch);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* DropJob(grpc::CallbackServerContext* ctx, const pb::DropJobRequest* req,
                                    pb::DropJobResponse* resp) override {
    return OnExecutor(ctx, [this, req]() -> absl::Status {
      std::shared_ptr<Job> job;
      {
        absl::MutexLock l(&mu_);
        auto it = jobs_.find(req->job_id());
        if (it == jobs_.end()) return UnknownJob(req->job_id());
        job = std::move(it->second);
        jobs_.erase(it);
      }
      job->MarkDropped();
      job->CancelPulls(absl::AbortedError(absl::StrCat("job ", req->job_id(), " was dropped")));
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Checkpoint(grpc::CallbackServerContext* ctx,
                                       const pb::CheckpointRequest* req,
                                       pb::CheckpointResponse* resp) override {
    return OnExecutor(ctx, [this, req, resp]() -> absl::Status {
      std::shared_ptr<Job> job = FindJob(req->job_id());
      if (job == nullptr) return UnknownJob(req->job_id());
      absl::StatusOr<Job::CheckpointInfo> info = job->Checkpoint();
      if (!info.ok()) return info.status();
      resp->set_clock(info->clock);
      resp->set_path(info->path);
      resp->set_bytes(info->bytes);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* ctx, const pb::StatsRequest* req,
                                     pb::StatsResponse* resp) override {
    return OnExecutor(ctx, [this, req, resp]() -> absl::Status {
      std::shared_ptr<Job> job = FindJob(req->job_id());
      if (job == nullptr) return UnknownJob(req->job_id());
      const JobStats s = job->Stats(req->include_rounds());
      resp->set_pushes_applied(s.pushes_applied);
      resp->set_pushes_duplicate(s.pushes_duplicate);
      resp->set_pushes_rejected(s.pushes_rejected);
      resp->set_bytes_in(s.bytes_in);
      resp->set_fp32_bytes_in(s.fp32_bytes_in);
      resp->set_pulls_served(s.pulls_served);
      resp->set_min_version(s.min_version);
      resp->set_max_version(s.max_version);
      resp->set_max_staleness(s.max_staleness);
      for (uint64_t h : s.staleness_histogram) resp->add_staleness_histogram(h);
      for (const RoundInfo& r : s.rounds) {
        pb::RoundRecord* rec = resp->add_rounds();
        rec->set_chunk_id(r.chunk_id);
        rec->set_clock(r.clock);
        rec->set_epoch(r.epoch);
        for (uint64_t w : r.contributors) rec->add_contributors(w);
      }
      resp->set_min_clock(s.min_clock);
      resp->set_epoch(s.epoch);
      return absl::OkStatus();
    });
  }

 private:
  template <typename Fn>
  grpc::ServerUnaryReactor* OnExecutor(grpc::CallbackServerContext* ctx, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    executor_->Submit([reactor, fn = std::move(fn)] { reactor->Finish(ToGrpcStatus(fn())); });
    return reactor;
  }

  static absl::Status UnknownJob(const std::string& id) {
    return absl::NotFoundError(absl::StrCat("unknown job '", id, "'"));
  }

  absl::Status DoCreateJob(const pb::CreateJobRequest& req, pb::CreateJobResponse* resp) {
    absl::StatusOr<JobOptions> options = JobOptionsFromProto(req, options_);
    if (!options.ok()) return options.status();
    absl::MutexLock l(&mu_);  // held across the restore: one CreateJob per job at a time
    if (jobs_.contains(req.job_id())) {
      return absl::AlreadyExistsError(absl::StrCat("job '", req.job_id(), "' already exists"));
    }
    absl::StatusOr<Job::Opened> opened = Job::Open(*std::move(options), options_.env, executor_);
    if (!opened.ok()) {
      LOG(ERROR) << "CreateJob " << req.job_id() << ": " << opened.status();
      return opened.status();
    }
    resp->set_restored(opened->restored);
    resp->set_restored_clock(opened->restored_clock);
    jobs_[req.job_id()] = std::move(opened->job);
    LOG(INFO) << "job " << req.job_id() << " created with " << req.chunks_size() << " chunks"
              << (opened->restored ? " (restored)" : "");
    return absl::OkStatus();
  }

  const ShardServerOptions options_;
  Executor* const executor_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

void SessionReactor::Drain() {
  for (;;) {
    pb::WorkerMessage msg;
    {
      absl::MutexLock l(&mu_);
      if (inbox_.empty() || closing_ || cancelled_ || finished_) {
        draining_ = false;
        MaybeFinishLocked();
        return;
      }
      msg = std::move(inbox_.front());
      inbox_.pop_front();
      if (read_paused_ && !reads_done_) {
        read_paused_ = false;
        StartRead(&read_msg_);
      }
    }
    Handle(msg);
  }
}

void SessionReactor::Handle(pb::WorkerMessage& msg) {
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
  switch (msg.msg_case()) {
    case pb::WorkerMessage::kPush:
      return HandlePush(*msg.mutable_push());
    case pb::WorkerMessage::kInit:
      return HandleInit(msg.init());
    case pb::WorkerMessage::kPull:
      return HandlePull(msg.pull());
    case pb::WorkerMessage::kClock:
      return job_->AdvanceClock(worker_, msg.clock().clock());
    case pb::WorkerMessage::kLeave:
      LOG(INFO) << "worker " << worker_ << " leaves job " << job_->id();
      return;
    default:
      return;
  }
}

void SessionReactor::HandleHello(const pb::Hello& hello) {
  if (job_ != nullptr) return Fail(absl::StatusCode::kFailedPrecondition, "second Hello");
  std::shared_ptr<Job> job = service_->FindJob(hello.job_id());
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
  Send(std::move(m));
}

void SessionReactor::HandlePush(pb::Push& push) {
  const pb::EncodedChunk& chunk = push.chunk();
  if (chunk.codec() < pb::CODEC_NONE || chunk.codec() > pb::CODEC_ONEBIT) {
    job_->CountRejected();
    return SendAck(push.seq(), absl::InvalidArgumentError(absl::StrCat(
                                   "unknown codec ", static_cast<int>(chunk.codec()))));
  }
  PushArgs args;
  args.worker = worker_;
  args.chunk_id = push.chunk_id();
  args.clock = push.clock();
  args.header.codec = static_cast<CodecType>(chunk.codec());
  args.header.num_elems = chunk.num_elems();
  args.header.scale = chunk.scale();
  args.header.scale2 = chunk.scale2();
  args.payload = chunk.payload();
  SendAck(push.seq(), job_->Push(args));
}

void SessionReactor::HandleInit(const pb::InitChunk& init) {
  SendAck(init.seq(), job_->Init(init.chunk_id(), init.values()));
}

void SessionReactor::HandlePull(const pb::PullRequest& pull) {
  PullArgs args;
  args.worker = worker_;
  args.request_id = pull.request_id();
  args.chunk_ids.assign(pull.chunk_ids().begin(), pull.chunk_ids().end());
  args.clock = pull.clock();
  const absl::Duration timeout = pull.timeout_ms() > 0 ? absl::Milliseconds(pull.timeout_ms())
                                                       : service_->options().default_pull_timeout;
  args.deadline = env_->Now() + timeout;
  {
    absl::MutexLock l(&mu_);
    ++pending_pulls_;
  }
  std::shared_ptr<SessionReactor> self = Self();
  if (self == nullptr) return;
  job_->Pull(std::move(args), [self](PullResult r) { self->SendPullResult(std::move(r)); });
}

void SessionReactor::SendPullResult(PullResult r) {
  absl::MutexLock l(&mu_);
  --pending_pulls_;
  if (!r.status.ok() || r.chunks.empty()) {
    pb::ServerMessage m;
    pb::PullChunk* pc = m.mutable_pull();
    pc->set_request_id(r.request_id);
    pc->set_last(true);
    pc->set_code(static_cast<int32_t>(r.status.code()));
    pc->set_message(std::string(r.status.message()));
    pc->set_min_clock(r.min_clock);
    SendLocked(std::move(m));
  } else {
    for (size_t i = 0; i < r.chunks.size(); ++i) {
      pb::ServerMessage m;
      pb::PullChunk* pc = m.mutable_pull();
      pc->set_request_id(r.request_id);
      pc->set_chunk_id(r.chunks[i].chunk_id);
      pc->set_version(r.chunks[i].version);
      pc->set_values(std::move(r.chunks[i].values));
      pc->set_last(i + 1 == r.chunks.size());
      pc->set_min_clock(r.min_clock);
      SendLocked(std::move(m));
    }
  }
  MaybeFinishLocked();
}

class ShardServerImpl final : public ShardServer {
 public:
  explicit ShardServerImpl(ShardServerOptions options) : options_(std::move(options)) {
    if (options_.env == nullptr) options_.env = Env::Default();
    int threads = options_.executor_threads;
    if (threads <= 0) threads = std::max(2u, std::thread::hardware_concurrency());
    executor_ = std::make_unique<Executor>(threads);
    service_ = std::make_unique<ShardService>(options_, executor_.get());
  }

  ~ShardServerImpl() override {
    Shutdown();
    executor_.reset();  // runs what is queued while the service still exists
  }

  absl::Status Start() {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(options_.address, ":", options_.port),
                             grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.address, ":", options_.port));
    }
    sweeper_ = std::thread([this] { SweepLoop(); });
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Wait() override {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(&stopped_));
  }

  void Shutdown() override {
    {
      absl::MutexLock l(&mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    if (sweeper_.joinable()) sweeper_.join();
    for (auto& job : service_->AllJobs()) {
      job->CancelPulls(absl::UnavailableError("shard shutting down"));
    }
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    absl::MutexLock l(&mu_);
    stopped_ = true;
  }

 private:
  void SweepLoop() {
    for (;;) {
      {
        absl::MutexLock l(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(10))) return;
      }
      const absl::Time now = options_.env->Now();
      for (auto& job : service_->AllJobs()) job->ExpirePulls(now);
    }
  }

  ShardServerOptions options_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ShardService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::thread sweeper_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardServer>> ShardServer::Start(const ShardServerOptions& options) {
  auto server = std::make_unique<ShardServerImpl>(options);
  if (absl::Status s = server->Start(); !s.ok()) return s;
  return std::unique_ptr<ShardServer>(std::move(server));
}

}  // namespace gradstream::shard
