// The protocol logic of one worker's Session stream (ps.proto), apart from
// gRPC: Hello binds the stream to a job, each later WorkerMessage is converted
// to the plain structs of types.h and handed to the Job, and the answers are
// converted back to ServerMessages. shard_server.cc's reactor feeds it from
// the network; the protocol-message fuzzer (session_fuzzer.cc) feeds it
// directly, so both exercise the same conversion and dispatch code.
#ifndef GRADSTREAM_SERVER_SHARD_RPC_SESSION_HANDLER_H_
#define GRADSTREAM_SERVER_SHARD_RPC_SESSION_HANDLER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps.pb.h"
#include "common/env/env.h"
#include "server/shard/job.h"
#include "server/shard/stream_pulls.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Not thread-safe; owned by one stream, which calls Handle() for one message
// at a time, in arrival order.
class SessionHandler {
 public:
  // What the handler needs from its stream.
  class Stream {
   public:
    virtual ~Stream() = default;
    // Queues `msg` for the worker.
    virtual void Send(v1::ServerMessage msg) = 0;
    // Queues StreamError{code, message}; the stream handles no further
    // message and closes once it is written.
    virtual void Fail(absl::StatusCode code, const std::string& message) = 0;
    // A pull is about to reach the job: returns the callback that delivers
    // its result (see PullResultToProto), which keeps the stream open until
    // it ran. May run on any thread, before or after StartPull's caller
    // returns. An empty callback means the stream is gone: the pull is
    // dropped. ResourceExhausted when StreamPulls::kMaxWaiting pulls of
    // the stream are still unanswered ([pull schedule]): the handler answers
    // the pull with it.
    [[nodiscard]] virtual absl::StatusOr<PullCallback> StartPull() = 0;
    // Names the stream's pulls in the job (PullArgs::stream; nonzero), so
    // they end with it (Job::CancelStreamPulls).
    virtual uint64_t stream_id() const = 0;
  };
  // Admits the stream to a job: the job, or the status that refuses it
  // (NotFound, or Unauthenticated / PermissionDenied from the shard's token
  // check, see common/rpc/rpc.h [auth tokens] and [worker tokens] in
  // shard_server.cc, which binds the token to Hello's worker and
  // incarnation). nullptr = NotFound.
  using JobLookup =
      std::function<absl::StatusOr<std::shared_ptr<Job>>(const v1::Hello& hello)>;

  // `env` and `stream` must outlive the handler. Refusals of pulls are
  // converted with `pull_answer_bytes` (PullResultToProto).
  SessionHandler(JobLookup find_job, Env* env, absl::Duration default_pull_timeout,
                 size_t pull_answer_bytes, Stream* stream);
  // Gives back what the stream held of unfinished pieces ([row pieces]).
  ~SessionHandler();

  // Handles one message. Stream-level failures (no Hello first, second Hello,
  // unknown or dropped job, stale incarnation, empty message, a ClockAdvance
  // or a message's advance outside the worker's window, an advance in Hello,
  // anything after Leave) go to Stream::Fail; per-message failures are
  // answered with a code in the Ack or PullAnswer.
  // A pull's timeout_ms is clamped to `default_pull_timeout` (PullDeadline,
  // [pull schedule]).
  void Handle(v1::WorkerMessage& msg);

  // The worker that said Hello (0 before).
  uint64_t worker() const { return worker_; }
  // The job the stream is bound to (nullptr before Hello).
  const std::shared_ptr<Job>& job() const { return job_; }

 private:
  void HandleHello(const v1::Hello& hello);
  void HandlePush(const v1::Push& push);
  void HandleInit(const v1::InitChunk& init);
  void HandlePull(const v1::PullRequest& pull);
  // A ClockAdvance, alone or riding in a message; false when it failed the
  // stream.
  bool AdvanceClock(uint64_t clock);
  // [row pieces] in session_handler.cc.
  void AddPiece(const v1::Push& push);
  void RefusePieces(const std::string& why);
  // A push's row gradients as fp32: the message's, or decoded into
  // `decoded` when they travelled fp16; InvalidArgument for a bad encoding.
  static absl::StatusOr<absl::string_view> RowValues(const v1::PushedRows& r,
                                                     std::string* decoded);
  void Fail(absl::StatusCode code, const std::string& message);
  void SendAck(uint64_t seq, const absl::StatusOr<bool>& r);

  const JobLookup find_job_;
  Env* const env_;
  const absl::Duration default_pull_timeout_;
  const size_t pull_answer_bytes_;
  Stream* const stream_;

  std::shared_ptr<Job> job_;
  uint64_t worker_ = 0;
  uint64_t incarnation_ = 0;
  bool left_ = false;  // Leave was handled: nothing may follow
  // The pieces of a partition's rows held until the last arrives.
  struct RowPieces {
    uint64_t chunk_id;
    uint64_t clock;
    std::vector<uint64_t> seqs;  // answered when the last arrives
    std::vector<uint64_t> ids;
    std::string values;  // fp32
    bool fp16;           // travelled fp16
    uint64_t held;       // bytes reserved with Job::HoldPieces
  };
  std::optional<RowPieces> pieces_;
};

// The wire form of a pull's answer: PullAnswers of the chunks in order, each
// holding chunks up to `max_bytes` of values and deltas (a larger chunk
// alone), the last with `last` set; or a single PullAnswer with the non-OK
// code. See docs/design/fused-messages.md for the bound.
std::vector<v1::ServerMessage> PullResultToProto(PullResult result, size_t max_bytes);


}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_RPC_SESSION_HANDLER_H_
