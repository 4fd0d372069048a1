// What a handle waits on: a countdown that keeps the first error (pushes,
// inits), and the state of one pull spread over several shards.
#ifndef GRADSTREAM_WORKER_CLIENT_INTERNAL_PENDING_H_
#define GRADSTREAM_WORKER_CLIENT_INTERNAL_PENDING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/env/env.h"
#include "worker/client/internal/published_copies.h"

namespace gradstream::client::internal {

// Counts outstanding answers; done when the count reaches zero or at the
// first error (which is kept). Thread-safe.
class Completion {
 public:
  explicit Completion(int pending) : pending_(pending) {}
  static std::shared_ptr<Completion> Failed(absl::Status status);

  // Adds `n` expected answers. Only before the count can reach zero.
  void Add(int n);
  // One answer arrived. The first non-OK status completes the whole thing.
  void Done(const absl::Status& status);
  // OK, the first error, or DeadlineExceeded after `timeout` on `env`'s
  // clock ([env time]).
  absl::Status Wait(absl::Duration timeout, Env* env = Env::Default());
  bool done() const;

 private:
  mutable absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_);
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// Where one chunk of a pull lands.
struct PullTarget {
  float* dst = nullptr;  // null: not requested
  uint32_t num_elems = 0;
  uint32_t tensor = 0;   // the tensor it is part of (see PullState::WaitTensors)
  // A table partition's rows (PsClient::PullRows): the ids asked for, and
  // where each lands: row i of the answer at dst + positions[i] * dim.
  std::vector<uint64_t> row_ids;
  std::vector<uint32_t> positions;
  uint32_t dim = 0;
  bool fp16 = false;  // rows asked for, and answered, in fp16 ([fp16 rows])
};

// One chunk of a received PullAnswer: fp32 `values`, or a published answer
// (pull codec). Views the message.
struct AnsweredChunk {
  uint64_t chunk_id = 0;
  std::string_view values;                     // little-endian fp32, unless published
  const PublishedAnswer* published = nullptr;  // see [pull codec]
};

// One pull request, shared by the shard streams that answer parts of it.
// Thread-safe: each shard's part has its own lock so two shards' readers copy
// in parallel; Abandon() takes every part lock, so once it returns no reader
// writes into the caller's buffers again. Lock order: defer_mu_, a part's
// lock, progress_mu_.
class PullState {
 public:
  // `targets` is indexed by chunk id; `shard_chunks[s]` lists what shard s
  // is asked for (empty = the shard is not involved).
  // `published` (not owned; may be null when no shard uses a pull codec)
  // keeps the copies published answers apply to.
  // A `deferred` pull keeps its answers until StopDeferring ([deferred answers]).
  PullState(std::vector<PullTarget> targets, std::vector<std::vector<uint64_t>> shard_chunks,
            PublishedCopies* published = nullptr, bool deferred = false);

  Completion& completion() { return *completion_; }
  // Waits until every asked-for chunk of each tensor in `tensors` (of every
  // tensor when empty) is in place, or the pull failed: OK, the pull's
  // error, or DeadlineExceeded when `timeout` passes first on `env`'s clock
  // -- the pull goes on (see [step loop] in ../step_loop.h). Runs released
  // kept answers meanwhile ([deferred answers]).
  absl::Status WaitTensors(absl::Span<const uint32_t> tensors, absl::Duration timeout,
                           Env* env = Env::Default());
  // Chunks in place so far: a pull that moves is not stalled.
  uint64_t chunks_done() const;
  // Whether the pull ended, with every answer or with an error.
  bool settled() const { return completion_->done(); }
  const std::vector<uint64_t>& chunks_of(uint32_t shard) const { return parts_[shard]->expected; }
  // The shard's part is asked for in `n` requests (see [overlapped pull]):
  // it completes at the `last` of the n-th one. Before any answer can
  // arrive; 1 by default.
  void SplitPart(uint32_t shard, int n);

  // One PullAnswer from `shard`: every chunk is checked first (a chunk not
  // part of the request, or fp32 values of the wrong size, fail the pull with
  // Internal and nothing is written), then put in place -- fp32 values
  // copied, a published answer applied to the chunk's published copy, which
  // is then copied (a failed apply fails the pull: DataLoss for a checksum
  // mismatch). On `last` the answer completes one of the shard's requests
  // (see SplitPart): the part is complete at its last request, Internal when
  // chunks are missing then.
  void OnAnswer(uint32_t shard, absl::Span<const AnsweredChunk> chunks, bool last);
  PublishedCopies* published() const { return published_; }
  // Elements of `chunk_id` as asked for (0 when not asked for).
  uint32_t chunk_elems(uint64_t chunk_id) const {
    return chunk_id < targets_.size() ? targets_[chunk_id].num_elems : 0;
  }
  // Where chunk `chunk_id` is written (null when not asked for).
  float* chunk_dst(uint64_t chunk_id) const {
    return chunk_id < targets_.size() ? targets_[chunk_id].dst : nullptr;
  }
  // The rows asked of table partition `chunk_id` (empty for a dense chunk).
  const std::vector<uint64_t>& row_ids(uint64_t chunk_id) const {
    return targets_[chunk_id].row_ids;
  }
  bool rows_fp16(uint64_t chunk_id) const { return targets_[chunk_id].fp16; }
  // Holds `keep` (what targets point into) as long as the pull exists.
  // Only before the pull is sent.
  void Keep(std::shared_ptr<const void> keep) {
    if (keep != nullptr) kept_.push_back(std::move(keep));
  }
  // NOTE: [deferred answers] A deferred pull writes nothing into its targets
  // (nor into the published copies) until it stops deferring: each answer,
  // checked and parsed on arrival, is kept as `apply`. So a sync pull asked
  // while backward still runs cannot change a parameter under it ([early
  // pull] in ../step_loop.h). Once it stops, answers apply as they arrive,
  // and the kept ones run in forward order (first chunk id), taken one at
  // a time by the thread StopDeferring's function runs on and by any
  // WaitTensors whose tensors are not in place yet. Each answer names its
  // own chunks, so a part completes once every chunk and every request's
  // last answer are in, in any order. Errors end the pull at once.
  //
  // Keeps `apply` (an answer of `shard` whose lowest chunk id is
  // `first_chunk`) and returns true while the pull defers; false once it
  // stopped (the caller applies the answer itself).
  bool Defer(uint32_t shard, uint64_t first_chunk, std::function<void(PullState&)> apply);
  bool deferring() const;
  // Stops deferring and returns what runs the answers kept so far (those
  // no waiter took); run it once, on any thread, while the state lives (a
  // part waits for them before it fails as short).
  std::function<void()> StopDeferring();

  // The shard answered with an error or its stream failed for good.
  void Fail(uint32_t shard, const absl::Status& status);
  // Stops all writes into the caller's buffers.
  void Abandon();
  bool abandoned(uint32_t shard) const;

 private:
  // Ends the pull with `status` (the first error wins).
  void End(const absl::Status& status);
  // `chunk_ids` are in place.
  void Arrived(absl::Span<const uint64_t> chunk_ids);

  struct Part {
    std::vector<uint64_t> expected;
    mutable absl::Mutex mu;
    absl::flat_hash_set<uint64_t> received ABSL_GUARDED_BY(mu);
    int open_requests ABSL_GUARDED_BY(mu) = 1;  // until finished
    int kept ABSL_GUARDED_BY(mu) = 0;           // deferred answers not yet run
    bool finished ABSL_GUARDED_BY(mu) = false;
    bool abandoned ABSL_GUARDED_BY(mu) = false;
  };
  // Checks that `chunk_id` was asked of `shard`; else fails the part.
  bool Expected(Part& part, uint32_t shard, uint64_t chunk_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.mu);
  // Completes `part` once every request's last answer is in: OK with every
  // chunk, Internal without them once no kept answer is left to run.
  void Settle(Part& part, uint32_t shard) ABSL_EXCLUSIVE_LOCKS_REQUIRED(part.mu);
  // Runs the next released kept answer; false when none is left.
  bool RunKept();
  struct Kept {
    uint64_t first_chunk = 0;
    uint32_t shard = 0;
    std::function<void(PullState&)> apply;
  };

  const std::vector<PullTarget> targets_;
  std::vector<std::shared_ptr<const void>> kept_;  // see Keep
  mutable absl::Mutex defer_mu_;
  bool deferring_ ABSL_GUARDED_BY(defer_mu_);
  std::vector<Kept> deferred_ ABSL_GUARDED_BY(defer_mu_);
  std::vector<Kept> released_ ABSL_GUARDED_BY(defer_mu_);  // first chunks first
  size_t next_released_ ABSL_GUARDED_BY(defer_mu_) = 0;     // the next one to run
  PublishedCopies* const published_;
  std::vector<std::unique_ptr<Part>> parts_;
  const std::shared_ptr<Completion> completion_;
  // Per-tensor readiness, for waits on some tensors (a forward that needs
  // its first layers first).
  mutable absl::Mutex progress_mu_;
  std::vector<uint32_t> tensor_pending_ ABSL_GUARDED_BY(progress_mu_);  // chunks not yet in place
  uint64_t chunks_done_ ABSL_GUARDED_BY(progress_mu_) = 0;
  absl::Status error_ ABSL_GUARDED_BY(progress_mu_);
};

}  // namespace gradstream::client::internal

#endif  // GRADSTREAM_WORKER_CLIENT_INTERNAL_PENDING_H_
