// The worker-side client of the parameter-server shards: push compressed
// gradients, pull parameters, advance clocks, for the worker binary and for
// anyone embedding gradstream in their own training loop.
//
// Shape (ps-lite's KVWorker): Push and Pull return at once with a handle;
// Wait(handle, timeout) blocks until the shards answered or the timeout
// passed. Protos stay inside; the API speaks plain structs and spans.
//
// Embedding it: the coordinator's Assignment gives the job id, this worker's
// id and incarnation, the job token and the shard map (ShardMapFromProto in
// common/job/shard_map_proto.h); one step of a training loop is then
//
//   ClientOptions o;
//   o.job_id = a.job_id(); o.worker_id = a.worker_id();
//   o.incarnation = a.incarnation(); o.job_token = a.job_token();
//   GS_ASSIGN_OR_RETURN(std::unique_ptr<PsClient> ps, PsClient::Connect(map, o));
//   if (rank == 0) GS_RETURN_IF_ERROR(ps->InitParams(initial, absl::Seconds(30)));
//   for (uint64_t clock = 0; clock < steps; ++clock) {
//     PullHandle pull = ps->Pull(clock, params);         // one span per tensor
//     GS_RETURN_IF_ERROR(PsClient::Wait(pull, absl::Minutes(1)));
//     ... forward/backward into grads[t] ...
//     std::vector<PushHandle> pushes;
//     for (uint32_t t = 0; t < grads.size(); ++t) pushes.push_back(ps->Push(t, grads[t], clock));
//     for (const PushHandle& h : pushes) GS_RETURN_IF_ERROR(PsClient::Wait(h, absl::Minutes(1)));
//     GS_RETURN_IF_ERROR(ps->AdvanceClock(clock + 1));
//   }
//   GS_RETURN_IF_ERROR(ps->Leave(absl::Seconds(30)));
//
// worker/trainer/trainer.cc is the full loop (pushes start as backward
// produces each layer's gradient, so encoding overlaps the rest of backward).
//
// NOTE: [overlapped pull] Ask for clock c+1's pull before waiting on clock c's
// pushes (Push..., Pull(clock + 1), AdvanceClock(clock + 1), then wait on all):
// a step then costs about max(push, pull). Each of a shard's pull requests (at
// most 6) goes out right after the last unacknowledged push of its chunks,
// never ahead of a clock advance, init or leave queued before it, so it reads
// this worker's clock-c pushes; a replayed pull goes after the whole journal.
// Sync mode: ask before the pushes, with PullDeferred while backward still
// runs ([early pull] in step_loop.h); never under SSP/async.
// (docs/design/overlapped-pull.md)
//
// NOTE: [fused messages] A Push message carries a bucket of chunks, and a
// pull's answer comes back in PullAnswers of several chunks: the cost of a
// step of many small tensors is per message, not per byte. With
// ClientOptions::bucket_bytes set, the chunks of every push of a clock
// gather in one open bucket, in push order (backward order in a training
// step), whatever their shard and codec (each chunk keeps its tensor's
// codec); once the bucket's encoded bytes reach the bound -- a smaller one
// for the clock's first bucket, so the first push leaves early -- it goes
// out as one Push per shard it holds chunks of. Flush() sends what is left
// (the step loop does at the end of each clock, and when its encode thread
// runs dry with a big bucket open: [encode thread] in step_loop.h); a push
// in the open bucket is not acknowledged before. The map's chunk-to-shard
// balance is unchanged: buckets only group what each shard gets. The sizes,
// and why: docs/design/fused-messages.md.
//
// NOTE: [client streams] One bidirectional Session stream per shard, each with
// its own writer thread and reader thread, so a slow shard never stalls the
// others. Pushes are acknowledged by seq, pulls answered by request_id. Until
// answered, every push, init and pull stays in the stream's journal; when a
// stream breaks, the client reconnects with exponential backoff, re-sends
// Hello with the same incarnation and replays the journal in its original
// order. The shard ignores a push it has already applied (same worker, clock,
// chunk), so a replayed push is applied exactly once.
#ifndef GRADSTREAM_WORKER_CLIENT_PS_CLIENT_H_
#define GRADSTREAM_WORKER_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/env/env.h"
#include "common/job/precision.h"
#include "common/job/shard_map.h"
#include "worker/client/channel_factory.h"

namespace gradstream::client {

namespace internal {
class Completion;
class PullState;
}  // namespace internal

struct ReconnectOptions {
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
  double multiplier = 2.0;
  double jitter = 0.2;       // each sleep is scaled by a factor in [1 - jitter, 1 + jitter]
  int max_attempts = 0;      // consecutive failed attempts before a shard is given up; 0 = never
};

// Typed client options (LevelDB's Options), filled once from the job spec.
struct ClientOptions {
  std::string job_id;
  uint64_t worker_id = 0;
  uint64_t incarnation = 1;  // the shard refuses streams from an older incarnation
  uint64_t epoch = 0;        // membership epoch the worker knows of
  uint64_t seed = 1;         // keys stochastic rounding (EncodeKey::seed)
  // Bearer token of the job (the coordinator's Assignment.job_token), sent
  // on every Session stream; "" when the shards need none.
  std::string job_token;

  // Used for a tensor whose TensorInfo::codec is empty; the codec options and
  // error feedback always come from here.
  CodecPolicy codec;

  // Deadline of each unary step: the HelloAck of a (re)connection, waiting for
  // room in a full send queue.
  absl::Duration rpc_deadline = absl::Seconds(10);
  // Connect() fails unless every shard acknowledged Hello within this.
  absl::Duration connect_deadline = absl::Seconds(30);
  // Deadline of each Session stream. When it passes the stream is simply
  // reconnected (see [client streams]), so it bounds a call, not the job.
  absl::Duration stream_lifetime = absl::Hours(1);
  ReconnectOptions reconnect;
  // How long a shard may hold a pull that its consistency mode makes wait
  // before answering DeadlineExceeded; zero = the shard's default.
  absl::Duration pull_timeout = absl::ZeroDuration();
  // Encoded bytes a shard may have unacknowledged before Push blocks (for at
  // most rpc_deadline, then the push fails with ResourceExhausted).
  uint64_t max_inflight_bytes_per_shard = uint64_t{256} << 20;
  // Payload buffers of acknowledged pushes kept for the next push (saves page
  // faults and zero-fill per chunk); 0 disables the pool.
  uint64_t buffer_pool_bytes = uint64_t{256} << 20;
  // Threads that help the pushing thread encode the chunks of a push in
  // parallel; 0 = encode on the calling thread only (right for small hosts
  // and for callers that push several tensors from several threads).
  int encode_threads = 0;
  // Push buckets (see [fused messages]): the open bucket goes out once its
  // encoded bytes reach first_bucket_bytes (the clock's first bucket) or
  // bucket_bytes (the others). 0: a chunk goes out as soon as it is encoded,
  // and Flush() is never needed. At most kMaxBucketBytes.
  uint64_t first_bucket_bytes = 0;
  uint64_t bucket_bytes = 0;
  // How long a clock advance may wait for the next message to ride in before
  // it goes alone ([advance rides] in internal/shard_stream.cc); zero: never
  // waits.
  absl::Duration advance_hold = absl::Milliseconds(100);
  // Times the steps for the link choice ([link choice]); not owned.
  Env* env = Env::Default();
};

// A bucket may pass its bound by one chunk (1 MiB of fp32 at most), so a
// Push stays under the shard's 8 MiB message limit.
inline constexpr uint64_t kMaxBucketBytes = uint64_t{4} << 20;
// The bucket bounds of the step loop's drivers (the Python package and
// gs_worker's trainer), chosen by measurement: docs/design/fused-messages.md.
inline constexpr uint64_t kStepLoopBucketBytes = uint64_t{1} << 20;
// No smaller first bucket: it bought nothing measured and cost messages.
inline constexpr uint64_t kStepLoopFirstBucketBytes = kStepLoopBucketBytes;

// Cumulative counters since Connect().
struct ClientStats {
  uint64_t push_calls = 0;
  uint64_t chunks_pushed = 0;
  uint64_t push_messages = 0;      // Push messages (buckets) sent, replays not counted
  uint64_t bytes_pushed = 0;       // encoded payload bytes
  uint64_t fp32_bytes_pushed = 0;  // what the same chunks weigh as fp32
  uint64_t link_exact_pushes = 0;  // Push calls sent exact by the link choice
  uint64_t chunks_acked = 0;
  uint64_t duplicate_acks = 0;     // replays the shard had already applied
  uint64_t pull_calls = 0;
  uint64_t chunks_pulled = 0;
  uint64_t pull_messages = 0;      // PullAnswers received
  uint64_t bytes_pulled = 0;       // parameter bytes received (fp32 values or pull-codec deltas)
  uint64_t fp32_bytes_pulled = 0;  // what the same chunks weigh as fp32
  // Answers that arrived for a pull already abandoned (its waiter gave up or
  // it failed elsewhere): sent by a shard and thrown away here. Part of
  // bytes_pulled too.
  uint64_t bytes_pulled_discarded = 0;
  uint64_t reconnects = 0;         // connection attempts after the first
  uint64_t replayed = 0;           // messages re-sent after a reconnect
  std::optional<LinkDecision> push_link;  // the link choice's newest decision, if any
};

// One chunk that the caller encoded itself, e.g. on the GPU with
// common/codec/cuda_codec.h (see PsClient::PushEncoded).
struct EncodedChunkView {
  ChunkHeader header;
  absl::string_view payload;  // PayloadBytes(header.codec, header.num_elems) bytes
  float error_clocks = 0;     // the caller's error control (PushedChunk)
  bool raised = false;
  CodecType level = CodecType::kNone;  // when raised
};

// Handles are cheap to copy; an empty (default) handle waits as OK at once.
class PushHandle {
 public:
  PushHandle() = default;
  bool valid() const { return done_ != nullptr; }

 private:
  friend class PsClient;
  explicit PushHandle(std::shared_ptr<internal::Completion> done) : done_(std::move(done)) {}
  std::shared_ptr<internal::Completion> done_;
};

// A pull: one request per shard, or for PullRows of many rows several
// (see kMaxRowAskBytes), waited on as one.
class PullHandle {
 public:
  PullHandle() = default;
  bool valid() const { return !parts_.empty(); }

 private:
  friend class PsClient;
  explicit PullHandle(std::shared_ptr<internal::PullState> state) {
    if (state != nullptr) parts_.push_back(std::move(state));
  }
  explicit PullHandle(std::vector<std::shared_ptr<internal::PullState>> parts)
      : parts_(std::move(parts)) {}
  std::vector<std::shared_ptr<internal::PullState>> parts_;
};

// Bytes of rows PullRows asks in one request: a shard answers at most 6 MiB
// of rows to one request (one answer message under the 8 MiB receive limit).
inline constexpr uint64_t kMaxRowAskBytes = uint64_t{4} << 20;
// Bytes of one partition's rows (values, and ids at 8 bytes each) in one
// push message, under the shard's 8 MiB limit; more travel in pieces.
inline constexpr uint64_t kMaxRowPushBytes = uint64_t{6} << 20;

// Thread-safe. Pushes of one tensor are encoded one at a time (its residuals
// are shared state); pushes of different tensors and all network I/O run
// concurrently, and the chunks of one push can be encoded in parallel
// (ClientOptions::encode_threads).
class PsClient {
 public:
  // Opens one Session stream per shard of `map` (used as given, never
  // recomputed) and returns once every shard acknowledged Hello.
  // InvalidArgument for a malformed map, NotFound for an unknown codec,
  // FailedPrecondition when a shard owns other chunks than the map says,
  // the shard's own status when it refuses the Hello (e.g. unknown job or
  // stale incarnation), DeadlineExceeded/Unavailable when a shard does not
  // answer within options.connect_deadline. `channels` is not owned and must
  // outlive the client; null = ChannelFactory::Default().
  static absl::StatusOr<std::unique_ptr<PsClient>> Connect(const ShardMap& map,
                                                           const ClientOptions& options,
                                                           ChannelFactory* channels = nullptr);

  // Stops every stream at once (no Leave); un-answered handles complete with
  // Cancelled.
  virtual ~PsClient() = default;
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Pushes the gradient of tensor `tensor` computed at clock `clock`: each
  // chunk is encoded on the calling thread with its own encoder (and
  // residual), then added to the open bucket (see [fused messages]) or, with
  // no buckets, queued on its shard's stream; `grad` may be reused as soon
  // as Push returns. The handle completes when every chunk is acknowledged
  // (a chunk in the open bucket only after it was sent); an error is the
  // first failing chunk's status with the shard's code and message
  // (InvalidArgument for a wrong tensor index or size, or for a gradient the
  // codec rejects).
  virtual PushHandle Push(uint32_t tensor, absl::Span<const float> grad, uint64_t clock) = 0;

  // Push for a gradient the caller has already encoded (a GPU worker encodes
  // on the device and copies only the codes to host): chunks[i] is the
  // tensor's i-th chunk in map order, encoded with the tensor's codec, the
  // key (seed, worker, clock, tensor, chunk id) and the error feedback Push
  // would use, so the shards receive what Push would have sent. The payloads
  // are copied before it returns; the client's own encoders (and residuals)
  // are not touched. The handle fails with InvalidArgument, and nothing is
  // sent, for a wrong tensor index or chunk count, or a chunk whose codec,
  // element count or payload size does not match the map (a guarded
  // tensor's chunk may also be exact: "none", a flush or a raised chunk).
  virtual PushHandle PushEncoded(uint32_t tensor, absl::Span<const EncodedChunkView> chunks,
                                 uint64_t clock) = 0;

  // Asks every shard for its chunks at reader clock `clock` (the shard
  // answers when its consistency mode allows; may be called before the
  // pushes of clock-1 are acknowledged, see [overlapped pull]) and writes
  // them into `out`:
  // one span per tensor, in map order, either empty (tensor skipped) or of
  // the tensor's size. The spans must stay valid until Wait() returns OK or
  // the pull failed, or the last copy of the handle is destroyed: dropping
  // it abandons the pull, and nothing is written after.
  virtual PullHandle Pull(uint64_t clock, std::vector<absl::Span<float>> out) = 0;

  // Pull, with every answer kept until Release(handle) ([deferred answers]
  // in internal/pending.h): nothing is written into `out` before it. For a
  // sync pull asked while backward still runs ([early pull] in
  // step_loop.h). The base class's fails with Unimplemented.
  virtual PullHandle PullDeferred(uint64_t clock, std::vector<absl::Span<float>> out);

  // Row-sparse tables (docs/design/sparse-tables.md). A table's span in
  // Pull and InitParams is empty; Push of a table is InvalidArgument.
  //
  // Asks for rows `ids` (repeats allowed) of table `tensor` at reader clock
  // `clock`, answered when the consistency mode allows, as Pull, and writes
  // row i into out[i * dim, (i + 1) * dim). `out` stays valid as for Pull.
  // Any number of rows: past kMaxRowAskBytes they are asked in parts, each
  // its own request, and the handle completes when every part has.
  // The handle fails with InvalidArgument, nothing asked, for a tensor that
  // is not a table, an id out of range or an `out` of another size.
  virtual PullHandle PullRows(uint32_t tensor, absl::Span<const uint64_t> ids, uint64_t clock,
                              absl::Span<float> out) = 0;
  // Pull, with the rows of `rows` asked in the same requests (no message of
  // their own; [row prefetch] in python/gradstream/parameter_server.py). A
  // table's rows are in place when WaitTensors on its index says so. Each
  // table at most once; each ask passes PullRows's checks, else the whole
  // pull fails with InvalidArgument. The pull holds every ask's `keep`
  // until it is dropped. The base class's is Unimplemented for any rows.
  struct RowsAsk {
    uint32_t tensor = 0;
    std::vector<uint64_t> ids;
    absl::Span<float> out;             // row i at out[i * dim, (i + 1) * dim)
    std::shared_ptr<const void> keep;  // what `out` lies in; may be null
  };
  virtual PullHandle PullWithRows(uint64_t clock, std::vector<absl::Span<float>> out,
                                  std::vector<RowsAsk> rows);
  // Pushes the gradients of rows `ids` of table `tensor` computed at clock
  // `clock`, row i in grads[i * dim, (i + 1) * dim); copied before it
  // returns. Once per table per clock, also with no ids: a sync round of a
  // partition closes when every member pushed it (the step loop pushes an
  // empty one for a table not pushed). InvalidArgument, nothing sent, for a
  // tensor that is not a table, an id out of range or twice, a wrong size,
  // or a partition's rows past kMaxPushedRowsBytes (common/job/row_partition.h).
  // A partition's rows past kMaxRowPushBytes travel in pieces, applied as one.
  virtual PushHandle PushRows(uint32_t tensor, absl::Span<const uint64_t> ids,
                              absl::Span<const float> grads, uint64_t clock) = 0;

  // Waits for a handle. OK, the handle's error, or DeadlineExceeded when
  // `timeout` passes first: the push or pull keeps going and can be waited
  // on again (a pull is asked once and answered once, however long it takes
  // on the wire; see [step loop] in step_loop.h). A pull that failed is
  // abandoned (nothing is written after); to give up on one that has not,
  // drop every copy of its handle. `timeout` is on `env`'s clock ([env
  // time] in common/env/env.h): the step loop's, so a test can fake it.
  [[nodiscard]] static absl::Status Wait(const PushHandle& handle, absl::Duration timeout,
                                         Env* env = Env::Default());
  [[nodiscard]] static absl::Status Wait(const PullHandle& handle, absl::Duration timeout,
                                         Env* env = Env::Default());
  // Waits only until the chunks of `tensors` (tensor indices in map order;
  // every tensor when empty) are in place, as Wait otherwise: a forward
  // that reads its first layers first need not wait for the rest.
  [[nodiscard]] static absl::Status WaitTensors(const PullHandle& handle,
                                                absl::Span<const uint32_t> tensors,
                                                absl::Duration timeout,
                                                Env* env = Env::Default());
  // How far a pull got: chunks in place, and whether it ended (answered in
  // full, or failed). A default handle is settled.
  struct PullProgress {
    uint64_t chunks_done = 0;
    bool settled = false;
  };
  static PullProgress Progress(const PullHandle& handle);
  // Writes what a PullDeferred got so far into its buffers, and the rest
  // as it arrives.
  static void Release(const PullHandle& handle);
  // Release, split: answers arriving from now on are written as they come,
  // and the returned function (run once, on any thread; it holds the pull)
  // writes those kept so far, first tensors first.
  static std::function<void()> StopDeferring(const PullHandle& handle);
  // Gives a pull up: once this returns nothing is written into its buffers,
  // and waits on it end with Cancelled.
  static void Abandon(const PullHandle& handle);

  // Sends every chunk's initial values (InitChunk; only the first init of a
  // chunk takes effect, so rank 0 calls it) and waits for all acks.
  // `values` holds one span per tensor of the tensor's size.
  [[nodiscard]] virtual absl::Status InitParams(absl::Span<const absl::Span<const float>> values,
                                                absl::Duration timeout) = 0;

  // Sends the open bucket (see [fused messages]) when it holds at least
  // `min_bytes` of encoded chunks; a no-op without one.
  virtual void Flush(uint64_t min_bytes) = 0;

  // Tells every shard this worker's clock is now `clock`. Queued behind the
  // pushes already made; Cancelled after Leave (the client is stopped), the
  // shard's error when a shard was given up.
  [[nodiscard]] virtual absl::Status AdvanceClock(uint64_t clock) = 0;

  // Waits until every push is acknowledged, sends Leave on every stream and
  // waits for the shards to close them (a shard closes only after answering
  // the pulls it holds). The client is unusable afterwards, whatever the
  // result. DeadlineExceeded when `timeout` passes first.
  [[nodiscard]] virtual absl::Status Leave(absl::Duration timeout) = 0;

  // Counters only: cheap enough to read every step.
  virtual ClientStats stats() const = 0;
  // L2 norm of every error-feedback residual: a pass over the whole model
  // (each tensor's lock held while its residuals are read), so a training
  // loop reads it at a low rate (the trainer: once per rate window).
  virtual double ResidualNorm() const = 0;
  virtual const ShardMap& shard_map() const = 0;

  // The published copies held (pull codec, see [pull codec] in
  // common/codec/published.h): version and CRC32C per chunk id, for chunks
  // whose last pull was answered with one.
  struct PublishedCopyInfo {
    uint64_t chunk_id = 0;
    uint64_t version = 0;
    uint32_t checksum = 0;
  };
  virtual std::vector<PublishedCopyInfo> published_copies() const { return {}; }

 protected:
  PsClient() = default;
  // For implementations: handles are built only here.
  static PushHandle MakePushHandle(std::shared_ptr<internal::Completion> done) {
    return PushHandle(std::move(done));
  }
  static PullHandle MakePullHandle(std::shared_ptr<internal::PullState> state) {
    return PullHandle(std::move(state));
  }
  static PullHandle MakePullHandle(std::vector<std::shared_ptr<internal::PullState>> parts) {
    return PullHandle(std::move(parts));
  }
};

}  // namespace gradstream::client

#endif  // GRADSTREAM_WORKER_CLIENT_PS_CLIENT_H_
