// One shard's Session stream: a journal of un-answered messages, a writer
// thread that (re)connects and sends, and a reader thread per connection that
// matches acks by seq and pull answers by request_id. See [client streams] in
// ../ps_client.h; the stream's and each connection's phases are in
// stream_lifecycle.h ([client stream lifecycle]).
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_SHARD_STREAM_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_SHARD_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/buffer_pool.h"
#include "ps.grpc.pb.h"
#include "worker/client/channel_factory.h"
#include "worker/client/internal/pending.h"
#include "worker/client/internal/stream_lifecycle.h"
#include "worker/client/ps_client.h"

namespace gradstream::client::internal {

// Counters every stream of a client adds to.
struct StreamCounters {
  std::atomic<uint64_t> chunks_acked{0};
  std::atomic<uint64_t> pull_messages{0};
  std::atomic<uint64_t> duplicate_acks{0};
  std::atomic<uint64_t> chunks_pulled{0};
  std::atomic<uint64_t> bytes_pulled{0};
  std::atomic<uint64_t> fp32_bytes_pulled{0};
  std::atomic<uint64_t> bytes_pulled_discarded{0};
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> replayed{0};
};

// Thread-safe. Owned by the client; Stop() (or the destructor) joins its
// threads.
class ShardStream {
 public:
  // `expected_chunks` are the chunk ids the map puts on this shard; a HelloAck
  // listing others fails the stream with FailedPrecondition. Payloads of
  // acknowledged pushes go back to `buffers`. Pointers are not owned.
  ShardStream(uint32_t shard, std::string address, std::vector<uint64_t> expected_chunks,
              const ClientOptions& options, ChannelFactory* channels, StreamCounters* counters,
              BufferPool* buffers);
  ~ShardStream();

  void Start();
  // OK once a Hello was acknowledged; the permanent error if the stream gave
  // up; otherwise DeadlineExceeded (with the last connection error) at
  // `deadline`.
  absl::Status WaitReady(absl::Time deadline);

  // Queue a Push (a bucket) or an InitChunk; each of `done` gets exactly one
  // Done() (the ack's status, or the error that ended the stream): a Push's
  // has one per chunk, in the order of its chunks. `message` gets its seq
  // here.
  void SendPush(std::unique_ptr<v1::WorkerMessage> message,
                std::vector<std::shared_ptr<Completion>> done);
  // The pieces of one partition's rows (PushedRows.more, ps.proto), queued
  // together as consecutive Pushes: admitted as one push by the in-flight
  // bound (the shard answers none before the last), `done` on the last.
  void SendPushes(std::vector<std::unique_ptr<v1::WorkerMessage>> messages,
                  std::vector<std::shared_ptr<Completion>> done);
  // Asks for `pull`'s chunks of this shard, in one request per group of
  // chunks whose pushes are still pending (see [overlapped pull]); `pull`
  // gets one OnAnswer(last) per request, or a Fail.
  void SendPull(uint64_t clock, std::shared_ptr<PullState> pull);
  // Not answered by the shard; only the latest one is replayed. May ride in
  // the next message ([advance rides] in shard_stream.cc).
  absl::Status SendClock(uint64_t clock);

  // Waits until every push and init queued so far is acknowledged (pulls
  // are not waited for: their handles are).
  absl::Status Drain(absl::Time deadline);
  // Sends Leave, half-closes and waits for the shard to close the stream.
  absl::Status Leave(absl::Time deadline);
  // Cancels the stream and joins the threads; un-answered work completes
  // with Cancelled. Idempotent.
  void Stop();

 private:
  enum class Kind { kPush, kPull, kClock, kLeave };
  struct Entry {
    Kind kind;
    std::shared_ptr<v1::WorkerMessage> message;
    std::vector<std::shared_ptr<Completion>> done;  // kPush (pushes and inits)
    std::shared_ptr<PullState> pull;   // kPull
    uint64_t bytes = 0;                // counted against max_inflight_bytes
  };
  // State of one connection attempt, shared by its writer and reader
  // (guarded by mu_).
  struct Connection {
    ConnectionPhase phase = ConnectionPhase::kAwaitingHelloAck;
    absl::Status stream_error;  // StreamError sent by the shard
  };

  void WriterLoop();
  // One connection: connect, Hello, replay, send until it breaks. Returns the
  // error that ended it and whether Hello had been acknowledged.
  absl::Status RunConnection(bool* hello_acked);
  void ReaderLoop(grpc::ClientReaderWriter<v1::WorkerMessage, v1::ServerMessage>* stream,
                  Connection* conn);
  // May take `m`'s contents (an answer its pull defers).
  void Dispatch(v1::ServerMessage& m, Connection* conn);
  // One request of a pull (see [overlapped pull]).
  struct PullGroup {
    std::vector<uint64_t> chunks;
    uint64_t after_push = 0;  // journal order of the last pending push of `chunks`; 0 = none
    uint64_t order = 0;       // the request's own journal order
  };
  // Splits `pull`'s chunks of this shard into requests by the push message
  // they must follow: chunks without a pending push first, then one request
  // per push (consecutive pushes share one past kMaxPullRequests), in push
  // order. With no push pending, into requests of 1 MiB of fp32 or more.
  std::vector<PullGroup> GroupByPendingPush(const PullState& pull) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts each group's request into the send queue right after its push
  // (or first, when that was written), never ahead of a non-push message.
  void QueueAfterPushes(const std::vector<PullGroup>& groups) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Pull codec (see [pull codec]): names the copies of `chunks` held in a
  // request, and hands a published answer to its pull.
  void AddHeldCopies(const PullState& pull, const std::vector<uint64_t>& chunks,
                     v1::PullRequest* req);
  // Hands one PullAnswer's chunks to `pull`; `message` (holding `answer`)
  // is kept when the pull defers them, null when it does not.
  void OnAnswer(const v1::PullAnswer& answer, PullState& pull,
                std::shared_ptr<const v1::ServerMessage> message);
  void Transition(StreamEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Transition(Connection* conn, ConnectionEvent event) {
    conn->phase = NextConnectionPhase(conn->phase, event);
  }
  // The error new work gets: the stream's failure, or "stream closed" once
  // it is leaving or stopping; OK while open.
  absl::Status ClosedStatus() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t Enqueue(Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the stream for good: every journal entry completes with `status`.
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether retrying cannot help; `ready`: a Hello was acknowledged before.
  bool IsPermanent(const absl::Status& status, bool ready) const;
  std::string Describe() const;

  const uint32_t shard_;
  const std::string address_;
  const std::vector<uint64_t> expected_chunks_;
  const ClientOptions options_;
  ChannelFactory* const channels_;
  StreamCounters* const counters_;
  BufferPool* const buffers_;

  mutable absl::Mutex mu_;
  // Un-answered messages by send order (see [client streams]).
  std::map<uint64_t, Entry> journal_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> send_queue_ ABSL_GUARDED_BY(mu_);  // orders not yet written
  absl::flat_hash_map<uint64_t, uint64_t> seq_order_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, uint64_t> request_order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_request_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t clock_order_ ABSL_GUARDED_BY(mu_) = 0;  // latest clock advance, 0 = none
  // The advance held out of send_queue_ for the next message, 0 = none, and
  // until when ([advance rides]).
  uint64_t held_clock_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time held_until_ ABSL_GUARDED_BY(mu_);
  uint64_t inflight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  StreamPhase phase_ ABSL_GUARDED_BY(mu_) = StreamPhase::kOpen;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);      // why, in kFailed
  uint64_t hellos_acked_ ABSL_GUARDED_BY(mu_) = 0;  // over every connection
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);  // of the latest failed attempt
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::thread writer_;
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_SHARD_STREAM_H_
