// One chunk's state on a shard: parameters, optimizer state, version, the
// clocks already applied per worker (exactly-once) and open sync rounds.
#ifndef GRADSTREAM_SERVER_SHARD_CHUNK_STATE_H_
#define GRADSTREAM_SERVER_SHARD_CHUNK_STATE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/optim/optimizer.h"
#include "server/shard/row_store.h"

namespace gradstream::shard {

// The set of clocks of one worker already applied to one chunk: every clock
// below `below` plus the sparse `above`. Workers push clocks in order, so the
// set stays a single integer in the steady state. Not thread-safe.
//
// A gap below `above` is either a clock still to come (at most the few open
// sync rounds, or a replay after a reconnect) or one the worker skipped for
// good (it was removed and rejoined later, or the shard restored an older
// checkpoint). The latter never fills, so once `above` holds more than
// kMaxSparse clocks the oldest gap is taken as closed: otherwise every later
// clock of a rejoined worker would add an entry, in memory and in every
// checkpoint, for the rest of the job. kMaxSparse is far above any window in
// which a gap can still legitimately fill (max_pending_rounds, replays).
//
// NOTE: [applied floor] A worker's first applied clock starts the set at
// `floor`, the worker's clock as the shard knows it (or the clock itself
// when lower), never at a clock the worker merely claims: the window checks
// (see [clock windows] in consistency.h) keep claimed clocks near the
// worker's, and even one that got through would only land in `above`, so a
// later normal push is applied, not taken for a duplicate.
struct AppliedClocks {
  static constexpr size_t kMaxSparse = 64;

  uint64_t below = 0;
  std::set<uint64_t> above;
  bool started = false;  // `below` is meaningful once a first clock was added

  bool Contains(uint64_t c) const { return (started && c < below) || above.count(c) > 0; }
  // Takes every clock below `c` as settled: a worker that (re)joins at `c`
  // pushes nothing below it (see [late join] in job.cc).
  void SettleBelow(uint64_t c) {
    Start(c);
    if (c <= below) return;
    below = c;
    above.erase(above.begin(), above.lower_bound(c));
    Compact();
  }
  // Adds `c`; a first clock starts the set at min(c, floor) (see [applied
  // floor]): earlier clocks were never the worker's to push (it joined later
  // or the job started there).
  void Add(uint64_t c, uint64_t floor) {
    Start(std::min(c, floor));
    if (c < below) return;
    above.insert(c);
    if (above.size() > kMaxSparse) below = *above.begin();
    Compact();
  }
  void Add(uint64_t c) { Add(c, c); }
  // Adds every clock in [lo, hi) in O(log n): a run of clocks passed over at
  // once (see [lost rounds] in bsp_controller.cc). A gap it leaves below
  // `lo` is taken as closed when the run alone would exceed kMaxSparse.
  void AddRange(uint64_t lo, uint64_t hi) {
    if (lo >= hi) return;
    Start(lo);
    if (lo > below && hi - lo > kMaxSparse) below = lo;  // the gap never fills: closed
    if (lo <= below) {
      below = std::max(below, hi);
      above.erase(above.begin(), above.lower_bound(below));
    } else {
      for (uint64_t c = lo; c < hi; ++c) above.insert(c);  // at most kMaxSparse
      if (above.size() > kMaxSparse) below = *above.begin();
    }
    Compact();
  }

 private:
  void Start(uint64_t floor) {
    if (started) return;
    started = true;
    below = floor;
  }
  void Compact() {
    while (!above.empty() && *above.begin() <= below) {
      if (*above.begin() == below) ++below;
      above.erase(above.begin());
    }
  }
};

// Pushes of one clock being summed (sync mode).
struct SyncRound {
  std::vector<float> acc;
  double acc_bound = 0;  // >= every |acc[i]|: the sum of its pushes' largest |value|
  RowSum rows;  // a table partition's round
  std::vector<uint64_t> contributors;
  bool Has(uint64_t w) const {
    return std::find(contributors.begin(), contributors.end(), w) != contributors.end();
  }
};

// Thread-safe through `mu` (one lock per chunk: pushes to different chunks
// proceed in parallel). `version` and `initialized` are also readable
// without the lock, for pull readiness checks.
struct ChunkState {
  ChunkState(uint64_t id, uint32_t n) : chunk_id(id), num_elems(n) {}

  const uint64_t chunk_id;
  const uint32_t num_elems;

  absl::Mutex mu;
  std::vector<float> params ABSL_GUARDED_BY(mu);  // empty for a table partition
  // Set at construction for a table partition (docs/design/sparse-tables.md);
  // the rows it holds are guarded by mu.
  std::unique_ptr<RowStore> rows;
  OptimizerState opt ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<uint64_t, AppliedClocks> applied ABSL_GUARDED_BY(mu);
  std::map<uint64_t, SyncRound> rounds ABSL_GUARDED_BY(mu);  // clock -> open round
  std::vector<float> spare_acc ABSL_GUARDED_BY(mu);          // recycled round accumulator
  // Update count at each worker's last pull (staleness of its next push).
  absl::flat_hash_map<uint64_t, uint64_t> read_version ABSL_GUARDED_BY(mu);

  // Whether the chunk is a table partition (fixed at construction).
  bool is_table() const { return rows != nullptr; }

  // A table partition's rows summed over every push and pull.
  std::atomic<uint64_t> rows_pushed{0}, rows_pulled{0};
  // A table partition whose rows a restart without a checkpoint lost.
  std::atomic<bool> rows_lost{false};

  // Written under mu, read anywhere.
  std::atomic<uint64_t> version{0};  // updates applied (sync: clocks applied)
  std::atomic<bool> initialized{false};
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_CHUNK_STATE_H_
