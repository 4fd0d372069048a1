#include "server/shard/checkpoint_progress.h"

namespace gradstream::shard {

uint64_t CheckpointProgress::Clock(uint64_t min_chunk_version, uint64_t min_member_clock) const {
  return mode_ == ConsistencyMode::kSync ? min_chunk_version : min_member_clock;
}

bool CheckpointProgress::TrySchedule(uint64_t clock) {
  if (!periodic()) return false;
  if (clock / every_ <= last_.load() / every_) return false;
  return !scheduled_.exchange(true);
}

void CheckpointProgress::Written(uint64_t clock) {
  // Checkpoints may be written concurrently (periodic and on request): the
  // newest clock stays.
  uint64_t last = last_.load();
  while (clock > last && !last_.compare_exchange_weak(last, clock)) {
  }
}

}  // namespace gradstream::shard
