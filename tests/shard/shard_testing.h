// Test helpers for multi-process shard tests: start the real gs_shard binary
// on a free loopback port, and speak the Session protocol with the generated
// stubs (including deliberately malformed messages).
#ifndef GRADSTREAM_TESTS_SHARD_SHARD_TESTING_H_
#define GRADSTREAM_TESTS_SHARD_SHARD_TESTING_H_

#include <sys/types.h>

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "ps.grpc.pb.h"

namespace gradstream::testing {

namespace pb = ::gradstream::v1;

// A gs_shard child process. Not thread-safe.
class ShardProcess {
 public:
  // Starts GS_SHARD_BINARY with --port=0 --port_file=... plus `flags`, and
  // waits (inotify, with `timeout`) until the port file appears or the child
  // exits. The destructor kills the child (SIGKILL) and reaps it.
  static absl::StatusOr<std::unique_ptr<ShardProcess>> Start(
      const std::vector<std::string>& flags, absl::Duration timeout = absl::Seconds(20));
  ~ShardProcess();

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  pid_t pid() const { return pid_; }
  // A channel with no receive limit on the client side; waits until ready.
  std::shared_ptr<grpc::Channel> Connect(absl::Duration timeout = absl::Seconds(10)) const;
  std::unique_ptr<pb::ParameterServer::Stub> Stub() const;
  // Sends `sig`, reaps the child and returns its wait status (-1 when it
  // was already reaped).
  int Kill(int sig);

 private:
  ShardProcess() = default;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

// A fresh temporary directory, removed (recursively) by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Waits for a file to appear (created or renamed into place) using inotify on
// its directory, which the constructor creates. Not thread-safe.
class FileWaiter {
 public:
  explicit FileWaiter(std::string path);
  ~FileWaiter();
  // OK once the file exists; DeadlineExceeded after `timeout`.
  absl::Status Wait(absl::Duration timeout);

 private:
  std::string path_;
  int fd_ = -1;
};

// One Session stream, driven from the test thread. A reader thread queues
// what the server sends; every wait has a timeout. Not thread-safe.
// One chunk of a pull's answer as a test reads it: the chunk, with its
// PullAnswer's code, message and `last`. A failed pull is one of these with
// the code and no chunk.
class PulledChunkView {
 public:
  PulledChunkView(std::shared_ptr<const pb::PullAnswer> answer, int chunk, bool last)
      : answer_(std::move(answer)), chunk_(chunk), last_(last) {}
  int32_t code() const { return answer_->code(); }
  const std::string& message() const { return answer_->message(); }
  bool last() const { return last_; }
  uint64_t min_clock() const { return answer_->min_clock(); }
  uint64_t chunk_id() const { return chunk().chunk_id(); }
  uint64_t version() const { return chunk().version(); }
  const std::string& values() const { return chunk().values(); }

 private:
  const pb::PulledChunk& chunk() const {
    return chunk_ < 0 ? pb::PulledChunk::default_instance() : answer_->chunks(chunk_);
  }
  std::shared_ptr<const pb::PullAnswer> answer_;
  int chunk_;  // -1: none
  bool last_;
};

class SessionClient {
 public:
  // `token`: sent as the stream's bearer token (common/rpc/rpc.h) when set.
  explicit SessionClient(std::shared_ptr<grpc::Channel> channel,
                         absl::Duration rpc_deadline = absl::Seconds(60),
                         const std::string& token = "");
  ~SessionClient();

  bool Write(const pb::WorkerMessage& msg);
  // The next server message, or nullopt when the stream ended or `timeout`
  // passed.
  std::optional<pb::ServerMessage> Next(absl::Duration timeout = absl::Seconds(20));
  // Half-closes and returns the RPC status (waits for the server to finish).
  grpc::Status Finish();
  // Waits for the stream to end (after a StreamError) and returns its status.
  grpc::Status WaitClosed(absl::Duration timeout = absl::Seconds(20));

  // Hello; returns the HelloAck or the StreamError as a status.
  absl::StatusOr<pb::HelloAck> Hello(
      const std::string& job, uint64_t worker, uint64_t incarnation = 1, uint64_t epoch = 1,
      pb::SessionProtocol protocol = pb::SESSION_PROTOCOL_ADVANCE);
  // Sends one push / init and waits for its Ack (messages for other requests
  // are kept for later). Push sends a bucket of one chunk; PushMessage sends
  // `push` as it is, with `seq`.
  absl::StatusOr<pb::Ack> Push(uint64_t seq, uint64_t chunk, uint64_t clock,
                               const pb::EncodedChunk& encoded);
  absl::StatusOr<pb::Ack> PushMessage(uint64_t seq, pb::Push push);
  // Waits for the Ack of `seq` (sent earlier with Write).
  absl::StatusOr<pb::Ack> AwaitAck(uint64_t seq, absl::Duration timeout = absl::Seconds(20));
  absl::StatusOr<pb::Ack> Init(uint64_t seq, uint64_t chunk, const std::vector<float>& values);
  // Sends a pull and collects its chunks from its PullAnswers up to `last`.
  // A failed pull is a single entry with code != 0.
  absl::StatusOr<std::vector<PulledChunkView>> Pull(uint64_t request_id, uint64_t clock,
                                                  const std::vector<uint64_t>& chunks = {},
                                                  uint32_t timeout_ms = 0);
  bool SendPull(uint64_t request_id, uint64_t clock, const std::vector<uint64_t>& chunks = {},
                uint32_t timeout_ms = 0);
  absl::StatusOr<std::vector<PulledChunkView>> AwaitPull(uint64_t request_id,
                                                       absl::Duration timeout = absl::Seconds(20));
  bool Clock(uint64_t clock);

 private:
  // Waits for the first queued message matching `pred` (others stay queued).
  template <typename Pred>
  std::optional<pb::ServerMessage> Await(Pred pred, absl::Duration timeout);

  grpc::ClientContext ctx_;
  std::unique_ptr<pb::ParameterServer::Stub> stub_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::WorkerMessage, pb::ServerMessage>> stream_;
  std::thread reader_;
  absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<pb::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ = false;
  grpc::Status final_status_;
};

// Floats <-> little-endian bytes.
std::string FloatBytes(const std::vector<float>& v);
std::vector<float> BytesFloats(const std::string& s);
pb::EncodedChunk RawChunk(const std::vector<float>& g);

// A unary call with a deadline.
template <typename Req, typename Resp, typename Method>
grpc::Status Call(pb::ParameterServer::Stub* stub, Method method, const Req& req, Resp* resp,
                  absl::Duration timeout = absl::Seconds(20)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return (stub->*method)(&ctx, req, resp);
}

}  // namespace gradstream::testing

#endif  // GRADSTREAM_TESTS_SHARD_SHARD_TESTING_H_
