// What the workers report of their pushes' error control, per chunk: each
// worker's level and error as of its newest push, every flush, and each
// change of level as an event (see common/job/precision.h; the workers
// decide, the shard only keeps the record for stats and status).
#ifndef GRADSTREAM_SERVER_SHARD_PUSH_PRECISION_H_
#define GRADSTREAM_SERVER_SHARD_PUSH_PRECISION_H_

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"
#include "common/job/precision.h"

namespace gradstream::shard {

// Thread-safe.
class PushPrecisionBook {
 public:
  // `warmup_clocks`: the job's warm-up (PrecisionPolicy::warmup_clocks), 0
  // if none.
  explicit PushPrecisionBook(uint32_t warmup_clocks = 0) : warmup_clocks_(warmup_clocks) {}

  // One pushed chunk: its codec (header), the worker's report (`level`
  // counts only when `raised`; `owed_raise` > 0: raised for owed descent).
  void Record(uint64_t chunk_id, uint64_t worker, uint64_t clock, CodecType codec,
              float error_clocks, bool raised, CodecType level, float owed_raise = 0);
  // Over the workers: the highest level any is at, the largest error, the
  // flushes summed, the events by clock; nullopt before a compressed push.
  std::optional<PathPrecision> Report(uint64_t chunk_id) const;

 private:
  struct Worker {
    bool seen = false;
    CodecType level = CodecType::kNone;  // its pushes' level (the base unless raised)
    double ratio = 0;
    // Raised at its first push in a job with a warm-up: a controller starts
    // raised to warm up, until the job's warm-up ends or, joining after it,
    // for its first push; a step down by this clock ends the warm-up. One
    // first seen raised later (by a shard restored mid-job) was raised for
    // its error, and steps down 1000 clocks or more after.
    uint64_t warmup_ends_by = 0;
  };
  struct Chunk {
    CodecType base = CodecType::kNone;  // the codec of its unraised pushes
    absl::flat_hash_map<uint64_t, Worker> workers;
    uint64_t flushes = 0;
    std::deque<PrecisionEvent> events;
  };
  const uint32_t warmup_clocks_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Chunk> chunks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_PUSH_PRECISION_H_
