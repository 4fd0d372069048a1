// The one training-step loop over a PsClient: what a worker does around its
// forward and backward, shared by the built-in trainer
// (worker/trainer/trainer.cc) and the C ABI the Python package calls
// (worker/capi/gradstream_c.cc), so the two cannot drift.
//
// NOTE: [step loop] One step of clock c: Push(t, grad, c) per tensor as
// backward produces it; EndClock(c, next) flushes the last bucket, asks for
// clock c+1's pull at once ([overlapped pull] in ps_client.h) or releases the
// one asked early ([early pull]), waits for clock c's push acks (not for the
// pull) and only then advances every shard's clock (the advance rides in the
// next message: [advance rides] in internal/shard_stream.cc), so nothing says
// c is finished before every shard has its clock-c pushes ([re-initialization]
// in server/shard/job.h relies on it); then WaitTensors.
// A pull is asked once, however long it takes; again only after DATA_LOSS (via
// `reinit`) or the shard's own DeadlineExceeded. (docs/design/step-loop.md)
//
// NOTE: [early pull] With `early_pull` (sync mode), clock c+1's pull is asked
// with deferred answers when the encode thread takes clock c's first
// gradient, so its requests reach each shard ahead of the pushes; nothing
// changes in the parameters before it is released. EndClock releases it
// once the clock's pushes are acknowledged: its answers apply as they
// arrive from then on, and the encode thread writes those kept during
// backward, first tensors first, while the next forward starts (their
// layers wait for them). The caller's StartPull of c+1 after an EndClock
// without `next` releases it on the caller's thread. Either asks anew when
// the targets differ. Not when clock c's pull had not landed
// whole, nor for a model with tables (its pulls may ask rows), nor when the
// caller will not pull c+1 (`will_pull`: a leave, the last step).
// (docs/design/overlapped-pull.md)
//
// NOTE: [encode thread] One thread per loop encodes the pushed gradients in
// push order (backward order, the order buckets fill in); PsClient's encode
// pool, when configured, spreads a large tensor's chunks further. The caller
// keeps each gradient alive and unchanged until the clock's EndClock (or
// WaitPushes) returns. The thread is woken once `encode_batch_elems` are
// queued, not per tensor: each wake-up is a context switch on the caller's
// core. What is queued when the clock ends is encoded by EndClock's caller
// itself when the thread is idle. Once the thread has drained its queue, the
// open bucket goes out if it holds `idle_flush_bytes`: a large tensor's
// chunks do not wait for the rest of backward. (docs/design/encode-thread.md)
//
// NOTE: [helper threads] The encode thread, each shard stream's sender and
// receiver (internal/shard_stream.cc) and the C ABI's reporter run as
// SCHED_BATCH (StartHelperThread in common/env/env.h): on a CPU the compute
// thread holds, a woken helper waits for that thread's slice or next block
// instead of preempting it. They still run at once on an idle CPU, and the
// step's own waits (acks, tensors) block the compute thread, which lets them
// in. (docs/design/step-loop.md, "Helper threads do not preempt the step")
#ifndef GRADSTREAM_WORKER_CLIENT_STEP_LOOP_H_
#define GRADSTREAM_WORKER_CLIENT_STEP_LOOP_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "worker/client/ps_client.h"

namespace gradstream::client {

// The first bucket's worth of fp32 gradients (262144 elements): no more than
// the bucket holds encoded, so a batch waits for nothing a bucket would not.
inline constexpr size_t kEncodeBatchElems = kStepLoopFirstBucketBytes / sizeof(float);

struct StepLoopOptions {
  // How often a waiting pull looks at `check` and at its progress.
  absl::Duration wait_slice = absl::Milliseconds(500);
  // No chunk of the pull arrived for this long: DeadlineExceeded.
  absl::Duration stall_deadline = absl::Minutes(3);
  // Pushes of one clock are acknowledged within this (one deadline for all).
  absl::Duration push_wait = absl::Minutes(1);
  // DATA_LOSS answers cured by re-sending parameters, per pull: more means
  // a shard keeps losing them.
  int max_reinits = 3;
  // The encode thread is woken when this many elements are queued (or when
  // the clock ends while it is busy); once awake it drains the queue.
  // 0: woken per gradient. See [encode thread].
  size_t encode_batch_elems = kEncodeBatchElems;
  // When the encode thread has drained its queue, the open push bucket goes
  // out if it holds at least this many encoded bytes: backward's next
  // gradients are a batch away. See [encode thread].
  uint64_t idle_flush_bytes = kStepLoopBucketBytes / 4;
  // Sync mode only: ask the next clock's pull at the clock's first push
  // (see [early pull]). Under SSP or async a pull may be answered before
  // this worker's pushes arrive, so it must follow them.
  bool early_pull = false;
  // The clock of every time above: slices, stalls and push deadlines are on
  // env->Now() and wait through it ([env time] in common/env/env.h). Not
  // owned; outlives the loop. A test may pass a testing::FakeClockEnv.
  Env* env = Env::Default();
};

struct StepLoopHooks {
  // Called while a pull waits, every wait_slice: a non-OK status (Cancelled
  // when the job ended or the worker is stopping) ends the wait with it.
  // Null: always OK.
  std::function<absl::Status()> check;
  // DATA_LOSS: sends this worker's parameters as every chunk's InitChunk
  // (PsClient::InitParams; only chunks without parameters take them). It is
  // given the failed pull's targets, which hold the parameters last pulled
  // (a shard that lost its chunks wrote nothing into theirs). Null:
  // DATA_LOSS is returned.
  std::function<absl::Status(absl::Span<const absl::Span<float>> targets)> reinit;
  // Whether the caller will pull `clock` (false when it leaves the job at
  // `clock`, or `clock` is past its last step): the [early pull] of a clock
  // it will not pull is not asked. Called on the encode thread. Null: always.
  std::function<bool(uint64_t clock)> will_pull;
};

// Thread-safe: Push may be called from several threads at once (torch's
// autograd threads), and waits from any thread; EndClock, StartPull and
// AbandonPull are the training thread's. `client` is not owned and must
// outlive the loop. Owns the encode thread (see [encode thread]).
class StepLoop {
 public:
  StepLoop(PsClient* client, StepLoopOptions options, StepLoopHooks hooks);
  // Abandons the pull in flight (nothing is written into its targets after)
  // and stops the encode thread; gradients pushed and not yet encoded are
  // dropped unread.
  ~StepLoop();
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Hands tensor `tensor`'s gradient for clock `clock` to the encode thread
  // and returns (see [encode thread]): `grad` must stay valid and unchanged
  // until EndClock(clock) or WaitPushes returns. The encode's errors come
  // with the clock's acknowledgements (EndClock). FailedPrecondition when the
  // tensor was already pushed this clock, InvalidArgument for an index out
  // of range.
  [[nodiscard]] absl::Status Push(uint32_t tensor, absl::Span<const float> grad, uint64_t clock);
  // A push made elsewhere (PsClient::PushEncoded: the GPU path;
  // PsClient::PushRows: a table's rows) of tensor `tensor`, waited for as
  // Push's are.
  void AddPush(uint32_t tensor, PushHandle handle);

  // Ends clock `clock` (see [step loop]): waits until every gradient pushed
  // is encoded, pushes zeros for the tensors not pushed in it (no rows for
  // a table), sends the
  // last bucket, asks for the pull of clock + 1 into `next` (one span per
  // tensor, see PsClient::Pull) unless it is nullopt, waits (push_wait, one
  // deadline for all of it) until the clock's pushes are acknowledged and
  // advances every shard's clock. The pushes' or AdvanceClock's error.
  // `rows` are asked in that pull's requests (PsClient::PullWithRows); when
  // they are, *rows_pull is set to its handle (else left as it is). A pull
  // asked again (DATA_LOSS, see [step loop]) asks no rows: waits on the old
  // handle end with Cancelled.
  [[nodiscard]] absl::Status EndClock(uint64_t clock,
                                      std::optional<std::vector<absl::Span<float>>> next,
                                      std::vector<PsClient::RowsAsk> rows = {},
                                      PullHandle* rows_pull = nullptr);

  // Asks for the pull of `clock` into `targets` unless that pull is in
  // flight already (EndClock asked for it) or was asked early ([early pull]:
  // released now); any other pull is abandoned. `rows` and `rows_pull` as
  // for EndClock.
  void StartPull(uint64_t clock, std::vector<absl::Span<float>> targets,
                 std::vector<PsClient::RowsAsk> rows = {}, PullHandle* rows_pull = nullptr);
  // Waits until `tensors` (every tensor when empty) of the pull in flight
  // are in place (see [step loop]). OK; Cancelled or another error from
  // `check`; DeadlineExceeded after stall_deadline without a chunk;
  // FailedPrecondition when no pull was asked for; the pull's own error.
  [[nodiscard]] absl::Status WaitTensors(absl::Span<const uint32_t> tensors);
  // Whether `tensors` of the pull in flight are in place, without waiting
  // (it may write released answers of theirs, as WaitTensors does).
  bool TensorsReady(absl::Span<const uint32_t> tensors);
  // The clock of the pull in flight, if any.
  std::optional<uint64_t> pull_clock() const;
  // Gives up the pull in flight (nothing is written into its targets once
  // this returns).
  void AbandonPull();

  // Waits for every push made so far to be encoded, sent and acknowledged,
  // one deadline for all (DeadlineExceeded when it passes; the first push
  // error otherwise).
  [[nodiscard]] absl::Status WaitPushes(absl::Duration timeout);

  // Seconds the encode thread spent encoding and queueing pushes, since the
  // loop started (the trainer's encode share).
  double encode_seconds() const;
  // Times the encode thread was woken to find work, since the loop started.
  uint64_t encode_wakeups() const;
  // Seconds spent in EndClock and WaitTensors (waiting for the encode thread,
  // the shards' acknowledgements and pulls), since the loop started; and
  // their share of the wall time since then, at most 1: how much of a step
  // is the wire's and the shards' rather than the model's.
  double wait_seconds() const;
  double wait_share() const;

 private:
  struct Pull {
    uint64_t clock = 0;
    std::vector<absl::Span<float>> targets;
    PullHandle handle;
    int reinits = 0;
    uint64_t generation = 0;  // asked again this many times
  };
  // A gradient handed to the encode thread.
  struct Queued {
    uint32_t tensor = 0;
    absl::Span<const float> grad;
    uint64_t clock = 0;
  };
  // Adds the time from its construction to its destruction to wait_ns_.
  class WaitTimer {
   public:
    explicit WaitTimer(StepLoop* loop) : loop_(loop), start_(loop->options_.env->Now()) {}
    ~WaitTimer();
    WaitTimer(const WaitTimer&) = delete;
    WaitTimer& operator=(const WaitTimer&) = delete;

   private:
    StepLoop* const loop_;
    const absl::Time start_;
  };

  absl::Status WaitHandles(std::vector<PushHandle> handles, absl::Time deadline);
  // StartPull's work; returns the early pull it took over, still deferring,
  // for the caller to release.
  std::optional<PullHandle> TakePull(uint64_t clock, std::vector<absl::Span<float>> targets,
                                     std::vector<PsClient::RowsAsk> rows, PullHandle* rows_pull);
  // Asks clock + 1's pull, deferred, when [early pull] allows.
  void AskEarly(uint64_t clock);
  void EncodeLoop();
  // Encodes and pushes the queue until it is empty; the caller set encoding_,
  // which this clears.
  void EncodeQueued();
  // Encodes the queue here when the encode thread is idle, then waits until
  // every gradient pushed so far is encoded.
  absl::Status WaitEncoded(absl::Time deadline);

  PsClient* const client_;
  const StepLoopOptions options_;
  const StepLoopHooks hooks_;
  const uint32_t num_tensors_;
  // options_.early_pull, unless the model has tables: their pulls may ask
  // rows, so they are never asked early.
  const bool early_pull_;
  std::vector<float> zeros_;  // the largest tensor's worth, for unpushed tensors

  mutable absl::Mutex mu_;
  std::vector<bool> pushed_ ABSL_GUARDED_BY(mu_);       // this clock, by tensor
  std::vector<PushHandle> open_ ABSL_GUARDED_BY(mu_);  // pushes of the clock in progress
  std::optional<Pull> pull_ ABSL_GUARDED_BY(mu_);
  std::optional<Pull> early_ ABSL_GUARDED_BY(mu_);  // see [early pull]
  std::optional<uint64_t> unwanted_ ABSL_GUARDED_BY(mu_);  // a clock will_pull refused
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);      // not yet taken by the encode thread
  uint64_t queued_ ABSL_GUARDED_BY(mu_) = 0;           // gradients handed over, ever
  uint64_t encoded_ ABSL_GUARDED_BY(mu_) = 0;          // ... and encoded
  size_t queued_elems_ ABSL_GUARDED_BY(mu_) = 0;       // in queue_
  int flushers_ ABSL_GUARDED_BY(mu_) = 0;              // WaitEncoded calls waiting
  // The queue is a thread's: the encode thread's from its wake-up (releases
  // first) until it is empty, or WaitEncoded's caller's.
  bool encoding_ ABSL_GUARDED_BY(mu_) = false;
  // Kept answers of released early pulls, for the encode thread to write.
  std::vector<std::function<void()>> releases_ ABSL_GUARDED_BY(mu_);
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  double encode_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  const absl::Time started_;
  std::atomic<int64_t> wait_ns_{0};  // see wait_seconds()
  std::thread encoder_;  // last: started once the rest exists
};

}  // namespace gradstream::client

#endif  // GRADSTREAM_WORKER_CLIENT_STEP_LOOP_H_
