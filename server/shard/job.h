// One job's state on one shard, composed of one piece per kind of state:
//   chunks (chunk_state.h)            parameters, optimizer state, versions
//   Membership (membership.h)         epochs, worker clocks, incarnations
//   PullWaitList (pull_waitlist.h)    pulls parked until they may be answered
//   CheckpointProgress (checkpoint_progress.h)  the clock a checkpoint stands
//                                     for, and when the next one is due
// plus statistics. The consistency controller (consistency.h) decides how
// pushes turn into updates and when pulls may be answered; Job routes each
// call to the pieces and wakes parked pulls after every change that may make
// them ready.
//
// NOTE: [re-initialization] A shard restarted without a checkpoint of a
// running job gets it again with `resume`: sync chunks start at version
// `resume_clock` (the rounds up to the members are passed over, [lost rounds]);
// a pull of a chunk without parameters is answered DATA_LOSS at once, and the
// first InitChunk after that wins whatever the version, optimizer state from
// zero; until then SSP/async pushes to it are dropped as duplicates, sync
// pushes wait in their rounds. Epochs in the request replace a restored
// checkpoint's. (docs/design/re-initialization.md)
//
// Lock order: checkpoint_mu_ -> ChunkState::mu -> Membership, stats_mu_;
// PullWaitList -> Membership. No lock is held while a pull callback runs
// (see [parked pulls]).
#ifndef GRADSTREAM_SERVER_SHARD_JOB_H_
#define GRADSTREAM_SERVER_SHARD_JOB_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/executor.h"
#include "common/optim/optimizer.h"
#include "server/shard/checkpoint.h"
#include "server/shard/checkpoint_progress.h"
#include "server/shard/chunk_state.h"
#include "server/shard/consistency.h"
#include "common/env/env.h"
#include "server/shard/membership.h"
#include "server/shard/pull_publisher.h"
#include "server/shard/push_precision.h"
#include "server/shard/pull_waitlist.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Thread-safe.
class Job final : public JobContext, public std::enable_shared_from_this<Job> {
 public:
  struct Opened {
    std::shared_ptr<Job> job;
    bool restored = false;
    uint64_t restored_clock = 0;
  };
  // Validates `options` (InvalidArgument) and restores from the job's
  // checkpoint file when one exists: DataLoss for a corrupt file,
  // FailedPrecondition when it belongs to a different job layout.
  // `env` and `executor` must outlive the job.
  [[nodiscard]] static absl::StatusOr<Opened> Open(JobOptions options, Env* env,
                                                   Executor* executor);

  const std::string& id() const { return options_.job_id; }
  const JobOptions& options() const { return options_; }

  struct HelloInfo {
    uint64_t epoch = 0;
    std::vector<uint64_t> chunk_ids;
  };
  // FailedPrecondition for an incarnation older than the newest seen.
  [[nodiscard]] absl::StatusOr<HelloInfo> Hello(uint64_t worker, uint64_t incarnation);
  // FailedPrecondition once a newer incarnation of `worker` said Hello.
  [[nodiscard]] absl::Status CheckIncarnation(uint64_t worker, uint64_t incarnation) const;

  // Returns true for a duplicate. NotFound for an unknown chunk; other codes
  // as ConsistencyController::Push. Parameters are unchanged on error.
  [[nodiscard]] absl::StatusOr<bool> Push(const PushArgs& push);
  // A Push message (a bucket). The bucket is checked whole first -- no chunk, a chunk
  // twice (InvalidArgument), a chunk not on this shard (NotFound), every
  // chunk's header and payload by [chunk validation] (InvalidArgument
  // naming the chunk), a push clock outside the worker's window -- and a
  // bucket that fails changes nothing. Then each chunk is pushed as Push
  // does: true when every chunk was a duplicate, else the first chunk's
  // error (the others are still applied: pushes are idempotent per worker,
  // clock and chunk, so a replay of the bucket is safe).
  [[nodiscard]] absl::StatusOr<bool> Push(const PushBucket& bucket);
  // DropJob: streams still bound to the job end at their next message.
  void MarkDropped() { dropped_.store(true); }
  bool dropped() const { return dropped_.load(); }
  // Counts a Push the RPC edge refused before it reached the job.
  void CountRejected() {
    push_messages_.fetch_add(1);
    pushes_rejected_.fetch_add(1);
  }
  // Counts a ClockAdvance message (an advance riding in a Push is not one).
  void CountClockMessage() { clock_messages_.fetch_add(1); }
  // [row pieces]: reserves `bytes` of held pieces for `worker`'s streams;
  // false, nothing reserved, past options().max_held_piece_bytes.
  bool HoldPieces(uint64_t worker, uint64_t bytes);
  void ReleasePieces(uint64_t worker, uint64_t bytes);
  // First Init of a chunk sets its parameters; later ones are duplicates.
  // InvalidArgument for a size mismatch or non-finite values.
  [[nodiscard]] absl::StatusOr<bool> Init(uint64_t chunk_id, std::string_view values);
  // Answers now or parks the pull until it may be answered or its deadline
  // passes (DeadlineExceeded); NotFound for a chunk not on this shard,
  // OutOfRange for a clock beyond the worker's window ([clock windows]).
  // `done` runs exactly once, on some shard thread, with no shard lock held
  // (see [parked pulls]).
  void Pull(PullArgs pull, PullCallback done);
  // The worker finished clock-1. OutOfRange beyond the worker's window (see
  // [clock windows] in consistency.h), nothing changed.
  [[nodiscard]] absl::Status AdvanceClock(uint64_t worker, uint64_t clock);
  // The shard does not know where the members are (it restored a
  // checkpoint; Open calls it then): each member's next ClockAdvance may
  // jump past its window. See [clock windows].
  void AllowCatchUp() { membership_.AllowCatchUp(); }
  // Adds an epoch; returns the newest epoch. InvalidArgument when the
  // effective clock goes backwards; an epoch not newer than the newest is a
  // no-op.
  [[nodiscard]] absl::StatusOr<uint64_t> UpdateMembership(MembershipEpoch epoch);

  struct CheckpointInfo {
    uint64_t clock = 0;
    std::string path;
    uint64_t bytes = 0;
  };
  // Writes a checkpoint now (FailedPrecondition when there is no directory).
  [[nodiscard]] absl::StatusOr<CheckpointInfo> Checkpoint();

  JobStats Stats(bool include_rounds) const;
  // Bytes the rows of the job's tables take (values, optimizer state, ids,
  // index, and what an open checkpoint keeps).
  uint64_t row_bytes() const { return row_budget_.held(); }
  // Fails parked pulls whose deadline is at or before `now`; returns the
  // earliest deadline of those still parked (InfiniteFuture if none).
  absl::Time ExpirePulls(absl::Time now);
  // Fails every parked pull, and every later one that would park, with `why`
  // (job dropped, server stopping).
  void CancelPulls(const absl::Status& why);
  // Fails the parked pulls of Session stream `stream` (PullArgs::stream):
  // the stream ended, so must they (see [parked pulls]).
  void CancelStreamPulls(uint64_t stream, const absl::Status& why);

  // JobContext.
  const Optimizer& optimizer() const override { return optimizer_; }
  std::vector<uint64_t> MembersAt(uint64_t clock, uint64_t* epoch) const override {
    return membership_.MembersAt(clock, epoch);
  }
  std::optional<uint64_t> NextStaffedClock(uint64_t clock) const override {
    return membership_.NextStaffedClock(clock);
  }
  uint32_t max_pending_rounds() const override { return options_.max_pending_rounds; }
  uint64_t WorkerClock(uint64_t worker) const override {
    return membership_.WorkerClock(worker);
  }
  uint64_t MemberClock(uint64_t worker) const override { return membership_.MemberClock(worker); }
  bool LeftBefore(uint64_t worker, uint64_t clock) const override {
    return membership_.LeftBefore(worker, clock);
  }
  std::optional<uint64_t> NextEpochClock(uint64_t clock) const override {
    return membership_.NextEpochClock(clock);
  }
  void RecordRound(RoundInfo round) override;

 private:
  Job(JobOptions options, Optimizer optimizer, Env* env, Executor* executor);
  // Takes the rows out of `snap` (a table is not copied a second time).
  [[nodiscard]] absl::Status Restore(JobSnapshot& snap);
  // Takes the coordinator's epochs and, for a resumed job, prepares its
  // chunks for re-initialization (see [re-initialization]).
  [[nodiscard]] absl::Status Reconcile(bool restored);

  ChunkState* FindChunk(uint64_t id) const;
  uint64_t MinChunkVersion() const;
  // The live job's checkpoint clock (see [checkpoint progress]).
  uint64_t ProgressClock() const;
  // Lets the controller close what became ready on every chunk; returns true
  // when some version moved.
  bool AdvanceChunks();
  // Sync mode: publishes the new versions of `chunks` on an executor thread
  // (see [eager publish]); a no-op otherwise.
  void PublishSoon(std::vector<ChunkState*> chunks);
  // The whole-bucket checks of Push(PushBucket); the bucket's chunks in `states`.
  [[nodiscard]] absl::Status CheckBucket(const PushBucket& bucket,
                                         std::vector<ChunkState*>* states);
  bool Ready(const PullArgs& pull) const;
  // A pull's rows: table partitions of this job, ids of theirs, at most
  // kMaxPulledRowBytes in all (InvalidArgument, NotFound).
  [[nodiscard]] absl::Status CheckPullRows(const PullArgs& pull);
  // ResourceExhausted when creating the rows of `ids` that `chunk` (a
  // table partition, its lock held) lacks would take the job's rows past
  // options_.max_row_bytes, even once an open checkpoint gave back what it
  // keeps.
  [[nodiscard]] absl::Status CheckRowBudget(const ChunkState& chunk,
                                            absl::Span<const uint64_t> ids);
  void Serve(const PullArgs& pull, const PullCallback& done);
  // Serves a ready pull: at once when it is small, else on an executor
  // thread (see [eager publish]).
  void ServeSoon(PendingPull pull);
  // Serves every parked pull that became ready.
  void Wake();
  void MaybeCheckpoint();

  const JobOptions options_;
  const Optimizer optimizer_;
  Env* const env_;
  Executor* const executor_;
  const std::unique_ptr<ConsistencyController> controller_;
  const uint64_t clock_window_;  // see [clock windows]
  const uint64_t pull_window_;
  std::vector<std::unique_ptr<ChunkState>> chunks_;         // fixed after Open
  absl::flat_hash_map<uint64_t, ChunkState*> chunk_by_id_;  // fixed after Open

  Membership membership_;
  PullWaitList waiting_;
  CheckpointProgress progress_;
  // Null without a pull codec (pulls carry the fp32 parameters).
  const std::unique_ptr<PullPublisher> publisher_;
  PushPrecisionBook push_precision_;  // what workers report of their pushes' error

  mutable absl::Mutex stats_mu_;
  std::vector<uint64_t> staleness_hist_ ABSL_GUARDED_BY(stats_mu_);
  uint64_t max_staleness_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t staleness_sum_ ABSL_GUARDED_BY(stats_mu_) = 0;
  std::deque<RoundInfo> rounds_ ABSL_GUARDED_BY(stats_mu_);
  std::atomic<uint64_t> pushes_applied_{0}, pushes_duplicate_{0}, pushes_rejected_{0};
  std::atomic<uint64_t> bytes_in_{0}, fp32_bytes_in_{0}, pulls_served_{0};
  std::atomic<uint64_t> bytes_out_{0}, fp32_bytes_out_{0};
  std::atomic<uint64_t> push_messages_{0};
  std::atomic<uint64_t> clock_messages_{0};
  RowBudget row_budget_;  // of the tables' rows (RowStore), options_.max_row_bytes
  absl::Mutex pieces_mu_;
  absl::flat_hash_map<uint64_t, uint64_t> held_pieces_ ABSL_GUARDED_BY(pieces_mu_);  // by worker

  // NOTE: [checkpoint failures] A periodic checkpoint that cannot be written
  // (disk full, permission denied) is counted, kept as the job's checkpoint
  // error (GetStats, gs_shard_checkpoint_failures_total, `gradstream
  // status`), logged at most once per 10 s, and tried again no sooner than
  // kCheckpointRetry later: not once per push, which would fill the log and
  // the disk's queue while training goes on without checkpoints.
  std::atomic<uint64_t> checkpoint_failures_{0};
  std::string checkpoint_error_ ABSL_GUARDED_BY(stats_mu_);
  std::atomic<int64_t> checkpoint_retry_unix_ns_{0};

  absl::Mutex checkpoint_mu_;  // one writer at a time
  std::atomic<bool> dropped_{false};
  // Some chunk waits for a worker's parameters (see [re-initialization]).
  std::atomic<bool> awaiting_init_{false};
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_JOB_H_
