// The RPC edge of the shard: the ParameterServer service and its Session
// streams. Messages become the plain structs of types.h in job_convert.h and
// session_handler.h; nothing past the edge sees a generated type.
#include "server/shard/rpc/shard_server.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <chrono>
#include <deque>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/executor.h"
#include "common/grpc_util.h"
#include "common/job/job_spec.h"
#include "common/job/precision_proto.h"
#include "common/rpc/rpc.h"
#include "common/rpc/worker_token.h"
#include "common/status.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "ps.grpc.pb.h"
#include "server/shard/job.h"
#include "server/shard/rpc/internal/session_lifecycle.h"
#include "server/shard/rpc/job_convert.h"
#include "server/shard/rpc/session_handler.h"
#include "server/shard/rpc/shard_metrics.h"
#include "server/shard/stream_pulls.h"

namespace gradstream::shard {
namespace {

namespace pb = ::gradstream::v1;
using internal::SessionEvent;
using internal::SessionPhase;

// Messages read ahead of the executor per stream (flow control).
constexpr size_t kMaxInbox = 8;

// The longest the deadline sweeper sleeps (see SweepLoop).
constexpr absl::Duration kSweepPeriod = absl::Milliseconds(100);

// Names each Session stream's pulls (PullArgs::stream).
std::atomic<uint64_t> next_stream_id{1};

// The service with Session on raw bytes: the reactor parses each message
// itself, so a frame that is not a WorkerMessage ends its stream with
// INVALID_ARGUMENT instead of looking like the worker's half-close (gRPC
// reports both as a failed read). See [malformed frames].
using ServiceBase = pb::ParameterServer::WithRawCallbackMethod_Session<
    pb::ParameterServer::WithCallbackMethod_CreateJob<
        pb::ParameterServer::WithCallbackMethod_UpdateMembership<
            pb::ParameterServer::WithCallbackMethod_DropJob<
                pb::ParameterServer::WithCallbackMethod_Checkpoint<
                    pb::ParameterServer::WithCallbackMethod_GetStats<
                        pb::ParameterServer::Service>>>>>>;

grpc::ByteBuffer Serialize(const pb::ServerMessage& msg) {
  grpc::ByteBuffer out;
  bool own = false;
  // Serializing a message we built fails only on a 2 GiB message.
  CHECK(grpc::SerializationTraits<pb::ServerMessage>::Serialize(msg, &out, &own).ok());
  return out;
}

class ShardService;

// One worker's Session stream. Messages are handled in order, one at a time,
// on the executor (a strand per stream); gRPC threads only queue them. The
// protocol itself is SessionHandler's (session_handler.h); this class moves
// messages and keeps the stream's lifetime: one SessionPhase, moved only by
// Transition() (see [session lifecycle] in internal/session_lifecycle.h).
// Thread-safe; owns itself until OnDone and while executor tasks or parked
// pulls hold a reference.
class SessionReactor final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                             private SessionHandler::Stream {
 public:
  // `metrics` (nullable) receives the push handling latency.
  static SessionReactor* Start(SessionHandler::JobLookup find_job, Executor* executor, Env* env,
                               absl::Duration default_pull_timeout, size_t pull_answer_bytes,
                               ShardMetrics* metrics) {
    auto s = std::shared_ptr<SessionReactor>(new SessionReactor(
        std::move(find_job), executor, env, default_pull_timeout, pull_answer_bytes, metrics));
    {
      absl::MutexLock l(&s->mu_);
      s->self_ = s;
    }
    s->StartRead(&s->read_buf_);
    return s.get();
  }

  // NOTE: [malformed frames] A frame that does not parse as a WorkerMessage
  // ends the stream: StreamError{INVALID_ARGUMENT}, and the stream's status
  // is INVALID_ARGUMENT too, never OK (other StreamErrors finish OK: the
  // worker already has the reason).
  void OnReadDone(bool ok) override {
    bool schedule = false;
    pb::WorkerMessage msg;
    const bool parsed =
        ok && grpc::SerializationTraits<pb::WorkerMessage>::Deserialize(&read_buf_, &msg).ok();
    read_buf_.Clear();
    if (ok && !parsed) {
      const std::string why = "a Session frame is not a valid WorkerMessage (ps.proto)";
      FailWith(absl::StatusCode::kInvalidArgument, why,
               grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, why));
      return;
    }
    {
      absl::MutexLock l(&mu_);
      if (!ok) {
        Transition(SessionEvent::kPeerHalfClosed);
        MaybeFinishLocked();
        return;
      }
      if (phase_ >= SessionPhase::kClosing) return;  // reads stop
      inbox_.push_back(std::move(msg));
      if (inbox_.size() < kMaxInbox) {
        StartRead(&read_buf_);
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
      Transition(SessionEvent::kWriteFailed);
      outbox_.clear();
    }
    if (!outbox_.empty()) StartWrite(&outbox_.front());
    MaybeFinishLocked();
  }

  void OnCancel() override {
    absl::MutexLock l(&mu_);
    Transition(SessionEvent::kCancelled);
    MaybeFinishLocked();
  }

  void OnDone() override {
    std::shared_ptr<SessionReactor> me;
    std::shared_ptr<Job> parked_in;
    {
      absl::MutexLock l(&mu_);
      Transition(SessionEvent::kDone);
      me = std::move(self_);
      if (pulls_.waiting() > 0) parked_in = pull_job_.lock();
    }
    // Pulls still waiting end with the stream (see [parked pulls]): without
    // this they would hold it, and their memory, until their deadline.
    if (parked_in != nullptr) {
      const uint64_t id = id_;
      executor_->Submit([parked_in, id] {
        parked_in->CancelStreamPulls(id, absl::CancelledError("the Session stream ended"));
      });
    }
    // `me` may delete this when it goes (declared first).
  }

 private:
  SessionReactor(SessionHandler::JobLookup find_job, Executor* executor, Env* env,
                 absl::Duration default_pull_timeout, size_t pull_answer_bytes,
                 ShardMetrics* metrics)
      : executor_(executor),
        metrics_(metrics),
        id_(next_stream_id.fetch_add(1)),
        pull_answer_bytes_(pull_answer_bytes),
        handler_(std::move(find_job), env, default_pull_timeout, pull_answer_bytes, this) {}

  std::shared_ptr<SessionReactor> Self() {
    absl::MutexLock l(&mu_);
    return self_;
  }

  void Drain();
  // Handles `msg`, timing it into the job's push latency when it is a push.
  void Handle(pb::WorkerMessage& msg);
  void SendPullResult(PullResult result);

  // SessionHandler::Stream.
  void Send(pb::ServerMessage msg) override {
    absl::MutexLock l(&mu_);
    SendLocked(std::move(msg));
  }
  void SendLocked(pb::ServerMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ >= SessionPhase::kAborted) return;
    outbox_.push_back(Serialize(msg));
    // One write at a time: the front of the outbox is the one in flight.
    if (outbox_.size() == 1) StartWrite(&outbox_.front());
  }
  // Sends a StreamError and ends the stream after it is written.
  // The stream then finishes OK: the StreamError says why.
  void Fail(absl::StatusCode code, const std::string& message) override {
    FailWith(code, message, grpc::Status::OK);
  }
  void FailWith(absl::StatusCode code, const std::string& message, grpc::Status finish) {
    pb::ServerMessage m;
    StatusToWire(absl::Status(code, message), m.mutable_error());
    absl::MutexLock l(&mu_);
    if (phase_ >= SessionPhase::kClosing) return;  // already ending
    SendLocked(std::move(m));
    finish_status_ = std::move(finish);
    Transition(SessionEvent::kStreamError);
    MaybeFinishLocked();
  }
  absl::StatusOr<PullCallback> StartPull() override {
    std::shared_ptr<SessionReactor> self;
    {
      absl::MutexLock l(&mu_);
      self = self_;
      if (self == nullptr) return PullCallback();
      GS_RETURN_IF_ERROR(pulls_.Admit());  // see [pull schedule]
      pull_job_ = handler_.job();
    }
    return PullCallback([self](PullResult r) { self->SendPullResult(std::move(r)); });
  }
  uint64_t stream_id() const override { return id_; }

  void Transition(SessionEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    phase_ = internal::NextPhase(phase_, event);
  }

  // Calls Finish() once the phase's condition holds (see [session
  // lifecycle]); never while a write is in flight or a message is handled.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ >= SessionPhase::kFinished || !outbox_.empty() || draining_) return;
    switch (phase_) {
      case SessionPhase::kOpen:
        return;
      case SessionPhase::kHalfClosed:
        if (!inbox_.empty() || pulls_.waiting() > 0) return;
        break;
      case SessionPhase::kClosing:
      case SessionPhase::kAborted:
        break;
      case SessionPhase::kFinished:
      case SessionPhase::kDone:
        return;
    }
    const grpc::Status status = phase_ == SessionPhase::kAborted
                                    ? grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")
                                    : finish_status_;
    Transition(SessionEvent::kFinish);
    Finish(status);
  }

  Executor* const executor_;
  ShardMetrics* const metrics_;  // nullable
  const uint64_t id_;            // PullArgs::stream of this stream's pulls
  const size_t pull_answer_bytes_;
  // Used by the strand only (one Handle at a time): no lock.
  SessionHandler handler_;
  std::shared_ptr<metrics::Histogram> push_seconds_;  // the bound job's, once it pushed

  absl::Mutex mu_;
  std::shared_ptr<SessionReactor> self_ ABSL_GUARDED_BY(mu_);
  SessionPhase phase_ ABSL_GUARDED_BY(mu_) = SessionPhase::kOpen;
  // Flow control, apart from the phase: at most one read and one write are
  // outstanding and one Drain task scheduled.
  grpc::ByteBuffer read_buf_;  // target of the one outstanding read
  std::deque<pb::WorkerMessage> inbox_ ABSL_GUARDED_BY(mu_);  // read, not yet handled
  std::deque<grpc::ByteBuffer> outbox_ ABSL_GUARDED_BY(mu_);  // front: the write in flight
  bool draining_ ABSL_GUARDED_BY(mu_) = false;     // a Drain task is scheduled or running
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;  // no read outstanding: the inbox is full
  StreamPulls pulls_ ABSL_GUARDED_BY(mu_);  // handed to a job, not yet answered
  std::weak_ptr<Job> pull_job_ ABSL_GUARDED_BY(mu_);  // where they wait
  // What Finish reports after a StreamError (see [malformed frames]).
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

// The ParameterServer service. Thread-safe: the job table is guarded by mu_;
// unary handlers run on the executor and finish their reactor from there.
class ShardService final : public ServiceBase {
 public:
  ShardService(const ShardServerOptions& options, Executor* executor)
      : options_(options),
        executor_(executor),
        metrics_(options.metrics == nullptr
                     ? nullptr
                     : std::make_unique<ShardMetrics>(options.metrics,
                                                      [this] { return AllJobs(); })) {}

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

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Session(
      grpc::CallbackServerContext* ctx) override {
    // The token is read once: a Session is long-lived and its metadata fixed.
    return SessionReactor::Start(
        [this, token = rpc::PresentedToken(*ctx)](const pb::Hello& hello) {
          return AdmitSession(hello, token);
        },
        executor_, options_.env, options_.default_pull_timeout, options_.pull_answer_bytes,
        metrics_.get());
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
      absl::StatusOr<uint64_t> epoch =
          job->UpdateMembership(MembershipEpochFromProto(req->membership()));
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
      resp->set_bytes_out(s.bytes_out);
      resp->set_fp32_bytes_out(s.fp32_bytes_out);
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
      resp->set_max_clock(s.max_clock);
      resp->set_checkpoint_failures(s.checkpoint_failures);
      resp->set_checkpoint_error(s.checkpoint_error);
      resp->set_push_messages(s.push_messages);
      resp->set_clock_messages(s.clock_messages);
      for (const JobStats::TableStats& t : s.tables) {
        pb::TablePartitionStats* tp = resp->add_tables();
        tp->set_chunk_id(t.chunk_id);
        TableRowStatsToProto(t.rows, tp->mutable_rows());
      }
      for (const JobStats::ChunkPrecision& p : s.precision) {
        pb::ChunkPrecision* cp = resp->add_precision();
        cp->set_chunk_id(p.chunk_id);
        if (p.pull) PathPrecisionToProto(*p.pull, cp->mutable_pull());
        if (p.push) PathPrecisionToProto(*p.push, cp->mutable_push());
      }
      if (s.pull_link) LinkDecisionToProto(*s.pull_link, resp->mutable_pull_link());
      return absl::OkStatus();
    });
  }

  // NOTE: [auth tokens] (common/rpc/rpc.h). A Session for job J needs J's
  // token, or the worker token of Hello's (J, worker, incarnation) minted
  // from it (common/rpc/worker_token.h [worker tokens]), when J has one;
  // else the cluster token when one is configured. A token that opens
  // another job (its job token, or a worker token of it for the same worker
  // and incarnation) is PERMISSION_DENIED (it authenticates the caller, who
  // is just not a member of J); anything else, a member's worker token
  // presented with another worker id or incarnation included, is
  // UNAUTHENTICATED, and checked before the job is looked up, so an outsider
  // cannot probe which jobs exist.
  absl::StatusOr<std::shared_ptr<Job>> AdmitSession(const pb::Hello& hello,
                                                    const std::string& token) {
    const std::string& job_id = hello.job_id();
    absl::MutexLock l(&mu_);
    const std::string& cluster = options_.rpc.auth_token;
    auto it = jobs_.find(job_id);
    const Job* job = it == jobs_.end() ? nullptr : it->second.get();
    const std::string& expected =
        job != nullptr && !job->options().token.empty() ? job->options().token : cluster;
    auto opens = [&](const std::string& id, const Job& j) {
      const std::string& t = j.options().token;
      return !t.empty() && (rpc::TokensEqual(t, token) ||
                            rpc::IsWorkerToken(token, t, id, hello.worker_id(),
                                               hello.incarnation()));
    };
    bool opens_other = false;  // the token is some other job's
    for (const auto& [id, other] : jobs_) opens_other |= id != job_id && opens(id, *other);
    if (job == nullptr) {
      if (!cluster.empty() && !rpc::TokensEqual(cluster, token) && !opens_other) {
        return rpc::CheckToken(cluster, token, "a Session");
      }
      return absl::NotFoundError(absl::StrCat("unknown job '", job_id, "'"));
    }
    if (expected.empty() || rpc::TokensEqual(expected, token)) return it->second;
    if (opens(job_id, *job)) return it->second;
    if (opens_other) {
      return absl::PermissionDeniedError(
          absl::StrCat("job '", job_id, "': the token presented belongs to another job; a "
                       "worker may only push and pull in the job it was assigned"));
    }
    return rpc::CheckToken(expected, token,
                           absl::StrCat("job '", job_id, "' (or worker ", hello.worker_id(),
                                        "'s token for incarnation ", hello.incarnation(), ")"));
  }

 private:
  // Runs `fn` on the executor once the call carries the cluster token.
  template <typename Fn>
  grpc::ServerUnaryReactor* OnExecutor(grpc::CallbackServerContext* ctx, Fn fn) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    absl::Status auth = rpc::CheckToken(options_.rpc.auth_token, rpc::PresentedToken(*ctx),
                                        "the shard's control calls");
    if (!auth.ok()) {
      reactor->Finish(ToGrpcStatus(auth));
      return reactor;
    }
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
    GS_RETURN_IF_ERROR(CheckCapacityLocked(*options));
    options->max_row_bytes = RowBytesLeftLocked(*options);
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

  // What --max_param_bytes leaves for the rows of `add`'s tables: less every
  // job's dense parameters and the other jobs' rows (at least 1 byte: a
  // job's first new row is then refused, not unbounded).
  uint64_t RowBytesLeftLocked(const JobOptions& add) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint64_t used = 0;
    for (const ChunkSpec& c : add.chunks) used += uint64_t{c.num_elems} * sizeof(float);
    for (const auto& [id, job] : jobs_) {
      used += job->row_bytes();
      for (const ChunkSpec& c : job->options().chunks) {
        used += uint64_t{c.num_elems} * sizeof(float);
      }
    }
    return used >= options_.max_param_bytes ? 1 : options_.max_param_bytes - used;
  }

  // RESOURCE_EXHAUSTED when `add` would take the shard past its limits.
  absl::Status CheckCapacityLocked(const JobOptions& add) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    uint64_t chunks = add.chunks.size(), bytes = 0;
    for (const ChunkSpec& c : add.chunks) bytes += uint64_t{c.num_elems} * sizeof(float);
    for (const auto& [id, job] : jobs_) {
      chunks += job->options().chunks.size();
      for (const ChunkSpec& c : job->options().chunks) {
        bytes += uint64_t{c.num_elems} * sizeof(float);
      }
    }
    if (jobs_.size() + 1 > options_.max_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "shard holds ", jobs_.size(), " jobs, the limit (--max_jobs) is ", options_.max_jobs));
    }
    if (chunks > options_.max_chunks) {
      return absl::ResourceExhaustedError(
          absl::StrCat("job '", add.job_id, "' would bring the shard to ", chunks,
                       " chunks, over its limit of ", options_.max_chunks, " (--max_chunks)"));
    }
    if (bytes > options_.max_param_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "job '", add.job_id, "' would bring the shard to ", bytes,
          " bytes of parameters, over its limit of ", options_.max_param_bytes,
          " (--max_param_bytes)"));
    }
    return absl::OkStatus();
  }

  const ShardServerOptions options_;
  Executor* const executor_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  // Last member: its collector (which lists jobs_) is registered once the
  // rest exists and removed before the rest goes. nullptr = no metrics.
  const std::unique_ptr<ShardMetrics> metrics_;
};

void SessionReactor::Drain() {
  for (;;) {
    pb::WorkerMessage msg;
    {
      absl::MutexLock l(&mu_);
      if (inbox_.empty() || phase_ >= SessionPhase::kClosing) {
        draining_ = false;
        MaybeFinishLocked();
        return;
      }
      msg = std::move(inbox_.front());
      inbox_.pop_front();
      if (read_paused_ && phase_ == SessionPhase::kOpen) {
        read_paused_ = false;
        StartRead(&read_buf_);
      }
    }
    Handle(msg);
  }
}

void SessionReactor::Handle(pb::WorkerMessage& msg) {
  if (metrics_ == nullptr || msg.msg_case() != pb::WorkerMessage::kPush) {
    return handler_.Handle(msg);
  }
  // Two clock reads per push; the histogram is looked up once per stream.
  const auto start = std::chrono::steady_clock::now();
  handler_.Handle(msg);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (push_seconds_ == nullptr && handler_.job() != nullptr) {
    push_seconds_ = metrics_->PushLatency(handler_.job());
  }
  if (push_seconds_ != nullptr) push_seconds_->Observe(took.count());
}

void SessionReactor::SendPullResult(PullResult r) {
  // Converted outside the lock; queued under it so the chunks of one pull
  // stay together on the stream.
  std::vector<pb::ServerMessage> msgs = PullResultToProto(std::move(r), pull_answer_bytes_);
  absl::MutexLock l(&mu_);
  pulls_.Answered();
  for (pb::ServerMessage& m : msgs) SendLocked(std::move(m));
  MaybeFinishLocked();
}

class ShardServerImpl final : public ShardServer {
 public:
  explicit ShardServerImpl(ShardServerOptions options) : options_(std::move(options)) {
    if (options_.env == nullptr) options_.env = Env::Default();
    options_.rpc.max_message_bytes = options_.max_message_bytes;
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
    const std::string address = absl::StrCat(options_.address, ":", options_.port);
    GS_RETURN_IF_ERROR(rpc::ConfigureServer(options_.rpc, address,
                                            absl::StrCat("gs_shard ", options_.shard_index),
                                            &builder, &port_));
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", address,
          ": the port is in use or the address is not local (--port=0 picks a free port)"));
    }
    sweeper_ = options_.env->StartThread("gs-pull-sweep", [this] { SweepLoop(); });
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
  // Sleeps until the earliest deadline of the parked pulls, and at most
  // kSweepPeriod: a pull parked meanwhile fails at most that late. A fixed
  // short period woke every shard 100 times a second for pulls that are
  // nearly always answered (bench/tta/README.md, "The deadline sweeper").
  void SweepLoop() {
    absl::Time next = options_.env->Now();
    for (;;) {
      {
        absl::MutexLock l(&mu_);
        // On the Env's clock, as the pulls' deadlines are ([env time]).
        if (options_.env->AwaitWithDeadline(&mu_, absl::Condition(&stopping_), next)) return;
      }
      const absl::Time now = options_.env->Now();
      next = now + kSweepPeriod;
      for (auto& job : service_->AllJobs()) next = std::min(next, job->ExpirePulls(now));
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
