// How a coordinator runs: its timeouts, intervals and retention, its clock
// and its metrics registry. Filled once from gs_coordinator's flags.
#ifndef GRADSTREAM_SERVER_COORDINATOR_OPTIONS_H_
#define GRADSTREAM_SERVER_COORDINATOR_OPTIONS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"
#include "common/env/env.h"
#include "common/metrics/metrics.h"

namespace gradstream::coordinator {

struct CoordinatorOptions {
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A pending job starts once `workers` idle workers exist, or once it has
  // waited this long with at least one.
  absl::Duration start_grace = absl::Seconds(2);
  absl::Duration tick_interval = absl::Milliseconds(100);
  absl::Duration probe_interval = absl::Seconds(1);  // shard GetStats
  bool drop_finished_jobs = false;                   // DropJob on the shards when a job completes
  // NOTE: [keep finished] Finished jobs (COMPLETED, FAILED, CANCELLED) are
  // kept, newest finished first, up to `keep_finished` of them and for
  // `keep_finished_for` after they ended; beyond either, a tick deletes
  // them with their epochs and history (at most 1000 a tick, one write),
  // once no worker refers to them and their shards dropped them.
  size_t keep_finished = 10000;
  absl::Duration keep_finished_for = absl::Hours(24 * 30);
  // The clock of heartbeat timeouts, grace periods, the ticker and every
  // time the coordinator records ([env time] in common/env/env.h). Not
  // owned; nullptr = Env::Default(). Tests pass a testing::FakeClockEnv.
  Env* env = nullptr;
  metrics::Registry* metrics = nullptr;  // nullptr = Registry::Default()
};

// How often workers heartbeat: a fifth of the timeout, within 50 ms..2 s.
inline uint32_t HeartbeatIntervalMs(const CoordinatorOptions& options) {
  const int64_t ms = absl::ToInt64Milliseconds(options.heartbeat_timeout) / 5;
  return static_cast<uint32_t>(std::clamp<int64_t>(ms, 50, 2000));
}

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_OPTIONS_H_
