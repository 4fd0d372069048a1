// One shard's Session stream. See shard_stream.h and [client streams].
#include "worker/client/internal/shard_stream.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/codec/half_rows.h"
#include "common/codec/wire.h"
#include "common/env/env.h"
#include "common/grpc_util.h"
#include "common/rpc/rpc.h"
#include "common/status.h"

namespace gradstream::client::internal {
namespace {

// Requests one pull is split into per shard, at most (see [overlapped
// pull]): with a second pull of the stream they stay under the shard's cap
// of parked pulls per stream (StreamPulls::kMaxWaiting, 16).
constexpr size_t kMaxPullRequests = 6;
// fp32 bytes per request at least when a pull with no push to follow is
// split: a request is answered in PullAnswers of about this size anyway.
constexpr uint64_t kMinBytesPerRequest = uint64_t{1} << 20;

absl::Status Annotate(const absl::Status& s, const std::string& prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace

ShardStream::ShardStream(uint32_t shard, std::string address,
                         std::vector<uint64_t> expected_chunks, const ClientOptions& options,
                         ChannelFactory* channels, StreamCounters* counters,
                         BufferPool* buffers)
    : shard_(shard),
      address_(std::move(address)),
      expected_chunks_(std::move(expected_chunks)),
      options_(options),
      channels_(channels),
      counters_(counters),
      buffers_(buffers) {}

ShardStream::~ShardStream() { Stop(); }

std::string ShardStream::Describe() const {
  return absl::StrCat("shard ", shard_, " (", address_, ")");
}

void ShardStream::Start() {
  writer_ =
      StartHelperThread(options_.env, absl::StrCat("gs-send-", shard_), [this] { WriterLoop(); });
}

void ShardStream::Transition(StreamEvent event) { phase_ = NextStreamPhase(phase_, event); }

absl::Status ShardStream::ClosedStatus() const {
  if (phase_ == StreamPhase::kFailed) return failed_;
  if (phase_ != StreamPhase::kOpen) {
    return absl::FailedPreconditionError(absl::StrCat(Describe(), ": stream closed"));
  }
  return absl::OkStatus();
}

absl::Status ShardStream::WaitReady(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return hellos_acked_ > 0 || phase_ == StreamPhase::kFailed || phase_ == StreamPhase::kClosed;
  };
  mu_.AwaitWithDeadline(absl::Condition(&settled), deadline);
  if (phase_ == StreamPhase::kFailed) return failed_;
  if (hellos_acked_ > 0) return absl::OkStatus();
  if (!last_error_.ok()) {
    // Keep the shard's own code (e.g. NotFound for an unknown job).
    return Annotate(last_error_, absl::StrCat(Describe(), " not ready by the deadline: "));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(Describe(), " did not answer Hello by the deadline"));
}

uint64_t ShardStream::Enqueue(Entry entry) {
  const uint64_t order = next_order_++;
  journal_.emplace(order, std::move(entry));
  send_queue_.push_back(order);
  return order;
}

void ShardStream::SendPush(std::unique_ptr<v1::WorkerMessage> message,
                           std::vector<std::shared_ptr<Completion>> done) {
  std::vector<std::unique_ptr<v1::WorkerMessage>> messages;
  messages.push_back(std::move(message));
  SendPushes(std::move(messages), std::move(done));
}

void ShardStream::SendPushes(std::vector<std::unique_ptr<v1::WorkerMessage>> messages,
                             std::vector<std::shared_ptr<Completion>> done) {
  std::vector<uint64_t> sizes;
  uint64_t bytes = 0;
  for (const auto& message : messages) {
    uint64_t size = 0;
    if (message->has_push()) {
      for (const v1::PushedChunk& c : message->push().chunks()) size += c.chunk().payload().size();
      for (const v1::PushedRows& r : message->push().rows()) size += r.values().size();
    } else {
      size = message->init().values().size();
    }
    sizes.push_back(size);
    bytes += size;
  }
  auto fail = [&done](const absl::Status& s) {
    for (const std::shared_ptr<Completion>& d : done) d->Done(s);
  };
  absl::MutexLock lock(&mu_);
  auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inflight_bytes_ == 0 ||
           inflight_bytes_ + bytes <= options_.max_inflight_bytes_per_shard ||
           phase_ != StreamPhase::kOpen;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&room), options_.rpc_deadline)) {
    fail(absl::ResourceExhaustedError(
        absl::StrCat(Describe(), ": ", inflight_bytes_, " bytes unacknowledged for ",
                     absl::FormatDuration(options_.rpc_deadline))));
    return;
  }
  if (absl::Status closed = ClosedStatus(); !closed.ok()) {
    fail(closed);
    return;
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    std::unique_ptr<v1::WorkerMessage>& message = messages[i];
    const uint64_t seq = next_seq_++;
    if (message->has_push()) {
      message->mutable_push()->set_seq(seq);
    } else {
      message->mutable_init()->set_seq(seq);
    }
    inflight_bytes_ += sizes[i];
    std::vector<std::shared_ptr<Completion>> dones;
    if (i + 1 == messages.size()) dones = std::move(done);
    seq_order_[seq] =
        Enqueue(Entry{Kind::kPush, std::move(message), std::move(dones), nullptr, sizes[i]});
  }
}

void ShardStream::SendPull(uint64_t clock, std::shared_ptr<PullState> pull) {
  absl::MutexLock lock(&mu_);
  if (absl::Status closed = ClosedStatus(); !closed.ok()) {
    pull->Fail(shard_, closed);
    return;
  }
  std::vector<PullGroup> groups = GroupByPendingPush(*pull);
  pull->SplitPart(shard_, static_cast<int>(groups.size()));
  for (PullGroup& g : groups) {
    const uint64_t request_id = next_request_++;
    auto message = std::make_shared<v1::WorkerMessage>();
    v1::PullRequest* req = message->mutable_pull();
    req->set_request_id(request_id);
    req->set_clock(clock);
    req->set_timeout_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.pull_timeout)));
    for (uint64_t id : g.chunks) {
      const std::vector<uint64_t>& rows = pull->row_ids(id);
      if (rows.empty()) {
        req->add_chunk_ids(id);
      } else {
        v1::RowRequest* r = req->add_rows();  // a table partition: its rows only
        r->set_chunk_id(id);
        r->mutable_ids()->Add(rows.begin(), rows.end());
        r->set_fp16(pull->rows_fp16(id));
      }
    }
    AddHeldCopies(*pull, g.chunks, req);
    // Journal order after everything queued (a replay sends it after every
    // push it follows); its first send may come earlier (see [overlapped pull]).
    const uint64_t order = next_order_++;
    journal_.emplace(order, Entry{Kind::kPull, std::move(message), {}, pull});
    request_order_[request_id] = order;
    g.order = order;
  }
  QueueAfterPushes(groups);
}

std::vector<ShardStream::PullGroup> ShardStream::GroupByPendingPush(
    const PullState& pull) const {
  const std::vector<uint64_t>& chunks = pull.chunks_of(shard_);
  absl::flat_hash_map<uint64_t, uint64_t> last_push;  // chunk id -> journal order, 0 = none
  for (uint64_t id : chunks) last_push[id] = 0;
  for (const auto& [order, e] : journal_) {
    if (e.kind != Kind::kPush || !e.message->has_push()) continue;
    for (const v1::PushedChunk& c : e.message->push().chunks()) {
      auto it = last_push.find(c.chunk_id());
      if (it != last_push.end()) it->second = order;  // the journal iterates in order
    }
    for (const v1::PushedRows& r : e.message->push().rows()) {
      auto it = last_push.find(r.chunk_id());
      if (it != last_push.end()) it->second = order;
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> pending;  // (order, chunk id)
  PullGroup settled;                                    // no push of theirs pending
  for (uint64_t id : chunks) {
    const uint64_t order = last_push[id];
    if (order == 0) {
      settled.chunks.push_back(id);
    } else {
      pending.emplace_back(order, id);
    }
  }
  std::vector<PullGroup> groups;
  if (pending.empty()) {
    // Nothing to follow. Still a few requests, each answered as soon as its
    // own chunks may be read: a sync-mode pull issued before the pushes of
    // its clock ([overlapped pull]) gets its first answers while later
    // chunks are still being pushed, and an ordinary one is served in
    // parallel. Small pulls stay one request.
    if (settled.chunks.empty()) return {std::move(settled)};  // one empty request, as before
    uint64_t bytes = 0;
    for (uint64_t id : settled.chunks) bytes += uint64_t{pull.chunk_elems(id)} * sizeof(float);
    const size_t n = static_cast<size_t>(std::clamp<uint64_t>(
        bytes / kMinBytesPerRequest, 1, std::min(kMaxPullRequests, settled.chunks.size())));
    for (size_t g = 0; g < n; ++g) {
      PullGroup& group = groups.emplace_back();
      const size_t begin = settled.chunks.size() * g / n;
      const size_t end = settled.chunks.size() * (g + 1) / n;
      group.chunks.assign(settled.chunks.begin() + begin, settled.chunks.begin() + end);
    }
    return groups;
  }
  if (!settled.chunks.empty()) groups.push_back(std::move(settled));
  // One request per push message the chunks follow (a bucket's chunks are
  // answerable together); past the cap, consecutive pushes share one.
  std::sort(pending.begin(), pending.end());
  std::vector<size_t> starts;  // index in `pending` where each push's chunks start
  for (size_t i = 0; i < pending.size(); ++i) {
    if (i == 0 || pending[i].first != pending[i - 1].first) starts.push_back(i);
  }
  const size_t n = std::min(starts.size(), kMaxPullRequests - groups.size());
  for (size_t g = 0; g < n; ++g) {
    PullGroup& group = groups.emplace_back();
    const size_t begin = starts[starts.size() * g / n];
    const size_t last = starts.size() * (g + 1) / n;
    const size_t end = last == starts.size() ? pending.size() : starts[last];
    for (size_t i = begin; i < end; ++i) group.chunks.push_back(pending[i].second);
    group.after_push = pending[end - 1].first;
  }
  return groups;
}

void ShardStream::QueueAfterPushes(const std::vector<PullGroup>& groups) {
  // Index of each queued order, and of the last queued message that is not
  // a push: a pull never goes ahead of a clock advance, init or leave.
  absl::flat_hash_map<uint64_t, int64_t> position;
  int64_t barrier = -1;
  for (size_t i = 0; i < send_queue_.size(); ++i) {
    auto it = journal_.find(send_queue_[i]);
    if (it == journal_.end()) continue;  // answered or superseded
    position[send_queue_[i]] = static_cast<int64_t>(i);
    if (it->second.kind != Kind::kPush || !it->second.message->has_push()) {
      barrier = static_cast<int64_t>(i);
    }
  }
  // after[i + 1]: the pulls to send right after send_queue_[i] (after[0]: first).
  std::vector<std::vector<uint64_t>> after(send_queue_.size() + 1);
  for (const PullGroup& g : groups) {
    int64_t at = barrier;
    if (auto it = position.find(g.after_push); it != position.end()) at = std::max(at, it->second);
    after[static_cast<size_t>(at + 1)].push_back(g.order);
  }
  std::deque<uint64_t> queue(after[0].begin(), after[0].end());
  for (size_t i = 0; i < send_queue_.size(); ++i) {
    queue.push_back(send_queue_[i]);
    queue.insert(queue.end(), after[i + 1].begin(), after[i + 1].end());
  }
  send_queue_.swap(queue);
}

// NOTE: [advance rides] A clock advance sent while nothing but pull requests
// waits to be written is held out of the send queue, for up to
// advance_hold, and rides in the next message written
// (WorkerMessage.advance) instead of a frame of its own: in a sync step that
// is the next clock's early pull request or first push, so the shard has one
// frame fewer to read, hand over and handle per worker and step. The shard
// handles it just before that message. So it may pass a queued pull request
// (one that the last push's ack let out, say), which carries no data: the
// shard then hears the clock before the pull, as a worker that asks after
// advancing has it. It never passes a push, init or leave queued before it;
// with one queued it goes in the queue behind them. The journal keeps the
// advance for replay either way. Why and the measurement:
// docs/design/step-loop.md, "The advance rides in the next message".
absl::Status ShardStream::SendClock(uint64_t clock) {
  absl::MutexLock lock(&mu_);
  GS_RETURN_IF_ERROR(ClosedStatus());
  // Only the latest advance matters; an older one still queued is skipped.
  if (clock_order_ != 0) journal_.erase(clock_order_);
  auto message = std::make_shared<v1::WorkerMessage>();
  message->mutable_clock()->set_clock(clock);
  Entry entry{Kind::kClock, std::move(message), {}, nullptr};
  auto pull_or_gone = [&](uint64_t order) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = journal_.find(order);
    return it == journal_.end() || it->second.kind == Kind::kPull;
  };
  if (std::all_of(send_queue_.begin(), send_queue_.end(), pull_or_gone) &&
      options_.advance_hold > absl::ZeroDuration()) {
    clock_order_ = next_order_++;
    journal_.emplace(clock_order_, std::move(entry));
    held_clock_ = clock_order_;
    held_until_ = absl::Now() + options_.advance_hold;
  } else {
    held_clock_ = 0;
    clock_order_ = Enqueue(std::move(entry));
  }
  return absl::OkStatus();
}

absl::Status ShardStream::Drain(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ == StreamPhase::kFailed || phase_ == StreamPhase::kStopping) return true;
    for (const auto& [order, e] : journal_) {
      if (e.kind == Kind::kPush) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&drained), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(Describe(), ": pushes still unacknowledged"));
  }
  return failed_;
}

absl::Status ShardStream::Leave(absl::Time deadline) {
  if (absl::Status s = Drain(deadline); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (phase_ == StreamPhase::kFailed) return failed_;
  if (phase_ == StreamPhase::kClosed) return absl::OkStatus();
  Transition(StreamEvent::kLeave);
  auto message = std::make_shared<v1::WorkerMessage>();
  message->mutable_leave();
  Enqueue(Entry{Kind::kLeave, std::move(message), {}, nullptr});
  auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return phase_ == StreamPhase::kClosed || phase_ == StreamPhase::kFailed;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&finished), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(Describe(), " did not close the stream after Leave"));
  }
  return failed_;
}

void ShardStream::Stop() {
  {
    absl::MutexLock lock(&mu_);
    Transition(StreamEvent::kStop);
    if (context_ != nullptr) context_->TryCancel();
  }
  if (writer_.joinable()) writer_.join();
  FailAll(absl::CancelledError(absl::StrCat(Describe(), ": client stopped")));
}

void ShardStream::FailAll(const absl::Status& status) {
  std::map<uint64_t, Entry> journal;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ != StreamPhase::kFailed) failed_ = status;
    Transition(StreamEvent::kFail);
    journal.swap(journal_);
    send_queue_.clear();
    seq_order_.clear();
    request_order_.clear();
    clock_order_ = 0;
    held_clock_ = 0;
    inflight_bytes_ = 0;
  }
  // Completions are called without mu_: a waiter may call back into us.
  for (auto& [order, e] : journal) {
    for (const std::shared_ptr<Completion>& d : e.done) d->Done(status);
    if (e.kind == Kind::kPull) e.pull->Fail(shard_, status);
  }
}

bool ShardStream::IsPermanent(const absl::Status& status, bool ready) const {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kAborted:
      return true;
    case absl::StatusCode::kNotFound:
      // Before the first Hello succeeded an unknown job is a configuration
      // error; afterwards it is a shard that restarted and has not been given
      // the job again yet.
      return !ready;
    default:
      return false;
  }
}

void ShardStream::WriterLoop() {
  absl::Duration backoff = options_.reconnect.initial_backoff;
  int failures = 0;
  std::mt19937_64 rng(options_.worker_id * 1000003 + shard_);
  while (true) {
    bool hello_acked = false;
    absl::Status status = RunConnection(&hello_acked);
    bool ready;
    {
      absl::MutexLock lock(&mu_);
      if (phase_ == StreamPhase::kStopping) break;
      if (phase_ == StreamPhase::kLeft) break;  // Leave went out; the shard closed the stream
      ready = hellos_acked_ > 0;
    }
    if (status.ok()) {
      status = absl::UnavailableError(absl::StrCat(Describe(), " closed the stream"));
    }
    if (IsPermanent(status, ready)) {
      FailAll(status);
      break;
    }
    if (hello_acked) {
      failures = 0;
      backoff = options_.reconnect.initial_backoff;
    }
    ++failures;
    if (options_.reconnect.max_attempts > 0 && failures >= options_.reconnect.max_attempts) {
      FailAll(Annotate(status, absl::StrCat("gave up after ", failures, " attempts: ")));
      break;
    }
    const double jitter = options_.reconnect.jitter;
    std::uniform_real_distribution<double> dist(1.0 - jitter, 1.0 + jitter);
    const absl::Duration sleep = backoff * dist(rng);
    backoff = std::min(backoff * options_.reconnect.multiplier, options_.reconnect.max_backoff);
    absl::MutexLock lock(&mu_);
    last_error_ = status;
    counters_->reconnects.fetch_add(1, std::memory_order_relaxed);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return phase_ == StreamPhase::kStopping;
    };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), sleep);
    if (stopping()) break;
  }
  absl::MutexLock lock(&mu_);
  Transition(StreamEvent::kWriterExited);
}

absl::Status ShardStream::RunConnection(bool* hello_acked) {
  std::shared_ptr<grpc::Channel> channel = channels_->NewChannel(address_);
  std::unique_ptr<v1::ParameterServer::Stub> stub = v1::ParameterServer::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.stream_lifetime));
  rpc::AttachToken(&ctx, options_.job_token);
  // Corked: creating the stream must not block on an unreachable shard; the
  // Hello below carries the metadata, and its ack has a deadline.
  ctx.set_initial_metadata_corked(true);
  Connection conn;
  {
    absl::MutexLock lock(&mu_);
    if (phase_ == StreamPhase::kStopping) return absl::CancelledError("stopping");
    context_ = &ctx;
  }
  auto stream = stub->Session(&ctx);
  // The reader writes Hello before it starts reading, so no other write can
  // overlap it: the writer below waits for the HelloAck first.
  std::thread reader = StartHelperThread(options_.env, absl::StrCat("gs-recv-", shard_),
                                         [&] { ReaderLoop(stream.get(), &conn); });

  absl::Status status;
  bool leave_sent = false;
  {
    absl::MutexLock lock(&mu_);
    auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return conn.phase != ConnectionPhase::kAwaitingHelloAck ||
             phase_ == StreamPhase::kStopping;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&answered), options_.rpc_deadline)) {
      status = absl::DeadlineExceededError(
          absl::StrCat(Describe(), " did not answer Hello within ",
                       absl::FormatDuration(options_.rpc_deadline)));
    } else if (conn.phase == ConnectionPhase::kReady && phase_ != StreamPhase::kStopping) {
      *hello_acked = true;
      // Replay everything un-answered, in its original order (see [client
      // streams]); a held advance goes in its place.
      send_queue_.clear();
      held_clock_ = 0;
      for (auto it = journal_.begin(); it != journal_.end();) {
        if (it->second.kind == Kind::kPull && it->second.pull->abandoned(shard_)) {
          request_order_.erase(it->second.message->pull().request_id());
          it = journal_.erase(it);
          continue;
        }
        send_queue_.push_back(it->first);
        ++it;
      }
      if (hellos_acked_ > 0) {
        counters_->replayed.fetch_add(send_queue_.size(), std::memory_order_relaxed);
      }
      ++hellos_acked_;
    }
  }
  while (*hello_acked && status.ok()) {
    Entry entry;
    {
      absl::MutexLock lock(&mu_);
      auto gone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return conn.phase == ConnectionPhase::kBroken || phase_ == StreamPhase::kStopping;
      };
      // A new hold wakes the writer too: its deadline ends the wait.
      const uint64_t held = held_clock_;
      auto can_send = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !send_queue_.empty() || gone() || held_clock_ != held;
      };
      mu_.AwaitWithDeadline(absl::Condition(&can_send),
                            held != 0 ? held_until_ : absl::Now() + options_.stream_lifetime);
      if (gone()) break;
      if (send_queue_.empty()) {
        if (held_clock_ == 0 || absl::Now() < held_until_) continue;
        // No message came within the hold: the advance goes alone.
        entry = journal_.at(held_clock_);
        held_clock_ = 0;
      } else {
        const uint64_t order = send_queue_.front();
        send_queue_.pop_front();
        auto it = journal_.find(order);
        if (it == journal_.end()) continue;  // answered or superseded meanwhile
        if (it->second.kind == Kind::kPull && it->second.pull->abandoned(shard_)) {
          // Given up before it went out: not asked at all.
          request_order_.erase(it->second.message->pull().request_id());
          journal_.erase(it);
          continue;
        }
        entry = it->second;
        if (held_clock_ != 0) {
          // Set under mu_, where the reader looks at journal messages. A
          // replay carries the (by then old) advance again, which the
          // shard ignores.
          entry.message->set_advance(journal_.at(held_clock_).message->clock().clock());
          held_clock_ = 0;
        }
      }
    }
    if (!stream->Write(*entry.message)) {
      status = absl::UnavailableError(absl::StrCat(Describe(), ": write failed"));
      break;
    }
    if (entry.kind == Kind::kLeave) {
      stream->WritesDone();
      leave_sent = true;
      absl::MutexLock lock(&mu_);
      Transition(StreamEvent::kLeaveWritten);
      break;
    }
  }
  if (!leave_sent) ctx.TryCancel();
  reader.join();  // after Leave: the shard closes the stream (Leave() bounds the wait)
  const grpc::Status finish = stream->Finish();
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
  if (!conn.stream_error.ok()) return conn.stream_error;
  if (!finish.ok() && finish.error_code() != grpc::StatusCode::CANCELLED) {
    return Annotate(FromGrpcStatus(finish), absl::StrCat(Describe(), ": "));
  }
  if (!status.ok()) return status;
  if (phase_ == StreamPhase::kStopping) return absl::CancelledError("stopping");
  if (leave_sent && finish.ok()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(Describe(), " ended the stream"));
}

void ShardStream::ReaderLoop(grpc::ClientReaderWriter<v1::WorkerMessage, v1::ServerMessage>* stream,
                             Connection* conn) {
  v1::WorkerMessage hello;
  v1::Hello* h = hello.mutable_hello();
  h->set_job_id(options_.job_id);
  h->set_worker_id(options_.worker_id);
  h->set_incarnation(options_.incarnation);
  h->set_epoch(options_.epoch);
  h->set_protocol(v1::SESSION_PROTOCOL_ADVANCE);
  if (stream->Write(hello)) {
    v1::ServerMessage m;
    while (stream->Read(&m)) Dispatch(m, conn);
  }
  absl::MutexLock lock(&mu_);
  Transition(conn, ConnectionEvent::kBroken);
}

void ShardStream::Dispatch(v1::ServerMessage& m, Connection* conn) {
  switch (m.msg_case()) {
    case v1::ServerMessage::kHelloAck: {
      const auto& ids = m.hello_ack().chunk_ids();
      std::vector<uint64_t> got(ids.begin(), ids.end());
      std::vector<uint64_t> want = expected_chunks_;
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      absl::MutexLock lock(&mu_);
      if (!got.empty() && got != want) {
        conn->stream_error = absl::FailedPreconditionError(
            absl::StrCat(Describe(), " owns ", got.size(), " chunks for job '", options_.job_id,
                         "' but the shard map gives it ", want.size(),
                         " (or other ones): wrong map or address"));
        Transition(conn, ConnectionEvent::kBroken);
        return;
      }
      Transition(conn, ConnectionEvent::kHelloAcked);
      return;
    }
    case v1::ServerMessage::kAck: {
      const v1::Ack& ack = m.ack();
      Entry entry;
      {
        absl::MutexLock lock(&mu_);
        auto it = seq_order_.find(ack.seq());
        if (it == seq_order_.end()) return;  // a replay answered twice
        auto je = journal_.find(it->second);
        seq_order_.erase(it);
        if (je == journal_.end()) return;
        entry = std::move(je->second);
        journal_.erase(je);
        inflight_bytes_ -= entry.bytes;
      }
      counters_->chunks_acked.fetch_add(entry.done.size(), std::memory_order_relaxed);
      if (ack.duplicate()) counters_->duplicate_acks.fetch_add(1, std::memory_order_relaxed);
      const absl::Status status =
          Annotate(StatusFromWire(ack.code(), ack.message()), absl::StrCat(Describe(), ": "));
      for (const std::shared_ptr<Completion>& d : entry.done) d->Done(status);
      // Sole owner (the writer let go of its copy): recycle the payloads.
      if (entry.message.use_count() == 1) {
        if (entry.message->has_push()) {
          for (v1::PushedChunk& c : *entry.message->mutable_push()->mutable_chunks()) {
            buffers_->Give(std::move(*c.mutable_chunk()->mutable_payload()));
          }
        } else if (entry.message->has_init()) {
          buffers_->Give(std::move(*entry.message->mutable_init()->mutable_values()));
        }
      }
      return;
    }
    case v1::ServerMessage::kPull: {
      const v1::PullAnswer& pa = m.pull();
      counters_->pull_messages.fetch_add(1, std::memory_order_relaxed);
      std::shared_ptr<PullState> pull;
      {
        absl::MutexLock lock(&mu_);
        auto it = request_order_.find(pa.request_id());
        auto je = it == request_order_.end() ? journal_.end() : journal_.find(it->second);
        if (je != journal_.end()) {
          pull = je->second.pull;
          if (pa.last() || pa.code() != 0) {
            journal_.erase(je);
            request_order_.erase(it);
          }
        }
      }
      if (pull == nullptr || pull->abandoned(shard_)) {
        // Sent by the shard for nobody: a pull its waiter gave up on. The
        // bytes crossed the network all the same, so they are counted.
        uint64_t bytes = 0;
        for (const v1::PulledChunk& c : pa.chunks()) {
          bytes += c.values().size();
          for (const v1::EncodedChunk& d : c.deltas()) bytes += d.payload().size();
        }
        for (const v1::PulledRows& r : pa.rows()) bytes += r.values().size();
        counters_->bytes_pulled.fetch_add(bytes, std::memory_order_relaxed);
        counters_->bytes_pulled_discarded.fetch_add(bytes, std::memory_order_relaxed);
        return;
      }
      if (pa.code() != 0) {
        pull->Fail(shard_, Annotate(StatusFromWire(pa.code(), pa.message()),
                                    absl::StrCat(Describe(), ": ")));
        return;
      }
      if (pull->deferring()) {
        // Its views must outlive the next Read into `m` ([deferred answers]).
        auto kept = std::make_shared<v1::ServerMessage>();
        kept->Swap(&m);
        OnAnswer(kept->pull(), *pull, kept);
        return;
      }
      OnAnswer(pa, *pull, nullptr);
      return;
    }
    case v1::ServerMessage::kError: {
      absl::MutexLock lock(&mu_);
      conn->stream_error = Annotate(StatusFromWire(m.error().code(), m.error().message()),
                                    absl::StrCat(Describe(), ": "));
      if (conn->stream_error.ok()) {
        conn->stream_error = absl::UnknownError("StreamError with code 0");
      }
      return;
    }
    default:
      return;
  }
}

void ShardStream::AddHeldCopies(const PullState& pull, const std::vector<uint64_t>& chunks,
                                v1::PullRequest* req) {
  if (pull.published() == nullptr) return;
  for (uint64_t id : chunks) {
    const std::optional<PublishedCopies::Held> held =
        pull.published()->held(id, pull.chunk_dst(id));
    if (!held.has_value()) continue;
    v1::HeldCopy* h = req->add_held();
    h->set_chunk_id(id);
    h->set_version(held->version);
    h->set_checksum(held->checksum);
  }
}

void ShardStream::OnAnswer(const v1::PullAnswer& answer, PullState& pull,
                           std::shared_ptr<const v1::ServerMessage> message) {
  // Everything the chunks view, kept together so that a deferred answer
  // can run later (see [deferred answers]).
  struct Parsed {
    std::shared_ptr<const v1::ServerMessage> message;
    std::vector<AnsweredChunk> chunks;
    std::vector<PublishedAnswer> published;
    std::vector<std::vector<float>> decoded;  // fp16 rows, as fp32
  };
  auto parsed = std::make_shared<Parsed>();
  parsed->message = std::move(message);
  std::vector<AnsweredChunk>& chunks = parsed->chunks;
  std::vector<PublishedAnswer>& published = parsed->published;
  std::vector<std::vector<float>>& decoded = parsed->decoded;
  chunks.resize(answer.chunks_size());
  published.resize(answer.chunks_size());
  decoded.resize(answer.rows_size());
  uint64_t bytes = 0, fp32_bytes = 0;
  for (int i = 0; i < answer.rows_size(); ++i) {  // table rows
    const v1::PulledRows& r = answer.rows(i);
    bytes += r.values().size();
    if (!r.fp16()) {
      chunks.push_back(AnsweredChunk{r.chunk_id(), r.values(), nullptr});
      fp32_bytes += r.values().size();
      continue;
    }
    decoded[i].resize(r.values().size() / 2);
    if (absl::Status s = DecodeHalfRows(r.values(), r.scale(), absl::MakeSpan(decoded[i]));
        !s.ok()) {
      pull.Fail(shard_, Annotate(s, absl::StrCat(Describe(), ": pulled rows: ")));
      return;
    }
    const std::string_view values(reinterpret_cast<const char*>(decoded[i].data()),
                                  decoded[i].size() * sizeof(float));
    chunks.push_back(AnsweredChunk{r.chunk_id(), values, nullptr});
    fp32_bytes += values.size();
  }
  for (int i = 0; i < answer.chunks_size(); ++i) {
    const v1::PulledChunk& pc = answer.chunks(i);
    AnsweredChunk& c = chunks[i];
    c.chunk_id = pc.chunk_id();
    bytes += pc.values().size();
    if (!pc.published()) {
      c.values = pc.values();
      fp32_bytes += pc.values().size();
      continue;
    }
    PublishedAnswer& p = published[i];
    p.version = pc.version();
    p.checksum = pc.checksum();
    p.snapshot = pc.values();
    for (const v1::EncodedChunk& d : pc.deltas()) {
      absl::StatusOr<ChunkHeader> header = ChunkHeaderFromWire(d);
      if (!header.ok()) {
        pull.Fail(shard_, Annotate(header.status(), absl::StrCat(Describe(), ": pulled delta: ")));
        return;
      }
      p.deltas.emplace_back(*header, d.payload());
      bytes += d.payload().size();
    }
    c.published = &p;
    fp32_bytes += uint64_t{pull.chunk_elems(pc.chunk_id())} * sizeof(float);
  }
  // Counted before OnAnswer, which may complete the handle: a caller that
  // waited must see its own bytes in stats().
  counters_->chunks_pulled.fetch_add(chunks.size(), std::memory_order_relaxed);
  counters_->bytes_pulled.fetch_add(bytes, std::memory_order_relaxed);
  counters_->fp32_bytes_pulled.fetch_add(fp32_bytes, std::memory_order_relaxed);
  const uint32_t shard = shard_;
  const bool last = answer.last();
  auto apply = [parsed, shard, last](PullState& p) { p.OnAnswer(shard, parsed->chunks, last); };
  if (parsed->message != nullptr) {  // kept alive for a deferring pull
    uint64_t first = UINT64_MAX;     // an answer with no chunk runs after those with some
    for (const AnsweredChunk& c : chunks) first = std::min(first, c.chunk_id);
    if (pull.Defer(shard, first, apply)) return;
  }
  pull.OnAnswer(shard, chunks, last);
}

}  // namespace gradstream::client::internal
