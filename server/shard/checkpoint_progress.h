// How far one job on one shard has come, as a checkpoint sees it, and when
// the next periodic checkpoint is due. The file format is checkpoint.h's;
// Job::Checkpoint writes it.
//
// NOTE: [checkpoint progress]
// A checkpoint stands for a clock: in sync mode the lowest chunk version
// (every round below it is applied everywhere on this shard), otherwise the
// slowest member's clock (see [member clocks] in membership.h). That clock is
// what CreateJob reports as `restored_clock`, and a periodic checkpoint is
// due each time it crosses a multiple of `checkpoint_every`. Clock() is the
// only place that chooses between the two, both for the live job and for a
// snapshot being written.
#ifndef GRADSTREAM_SERVER_SHARD_CHECKPOINT_PROGRESS_H_
#define GRADSTREAM_SERVER_SHARD_CHECKPOINT_PROGRESS_H_

#include <atomic>
#include <cstdint>

#include "server/shard/types.h"

namespace gradstream::shard {

// Thread-safe (atomics only).
class CheckpointProgress {
 public:
  // Periodic checkpoints every `every` clocks; 0 = none.
  CheckpointProgress(ConsistencyMode mode, uint32_t every) : mode_(mode), every_(every) {}

  CheckpointProgress(const CheckpointProgress&) = delete;
  CheckpointProgress& operator=(const CheckpointProgress&) = delete;

  // The clock a checkpoint taken now stands for (see [checkpoint progress]),
  // given the lowest chunk version and the slowest member's clock.
  uint64_t Clock(uint64_t min_chunk_version, uint64_t min_member_clock) const {
    return mode_ == ConsistencyMode::kSync ? min_chunk_version : min_member_clock;
  }

  // Whether periodic checkpoints are on.
  bool periodic() const { return every_ != 0; }
  // Returns true when a periodic checkpoint is due at `clock` and none is
  // already scheduled; the caller then writes one and calls EndScheduled().
  [[nodiscard]] bool TrySchedule(uint64_t clock) {
    if (!periodic()) return false;
    if (clock / every_ <= last_.load() / every_) return false;
    return !scheduled_.exchange(true);
  }
  void EndScheduled() { scheduled_.store(false); }

  // A checkpoint at `clock` was written (or restored from). The newest
  // clock stays: an older one does not make a checkpoint due again.
  void Written(uint64_t clock) {
    uint64_t last = last_.load();
    while (clock > last && !last_.compare_exchange_weak(last, clock)) {
    }
  }
  uint64_t last_written() const { return last_.load(); }

 private:
  const ConsistencyMode mode_;
  const uint32_t every_;
  std::atomic<uint64_t> last_{0};
  std::atomic<bool> scheduled_{false};
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_CHECKPOINT_PROGRESS_H_
