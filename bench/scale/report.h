// What one point of the scale benchmark measured, and the three ways it is
// written out: a db_bench-style table, JSON, and a PNG through gnuplot.
#ifndef GRADSTREAM_BENCH_SCALE_REPORT_H_
#define GRADSTREAM_BENCH_SCALE_REPORT_H_

#include <sys/types.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gradstream::bench {

// One (workers, jobs) point. Latencies in milliseconds.
struct PointResult {
  int workers = 0;
  int jobs = 0;
  int workers_per_job = 0;
  int running_jobs = 0;  // RUNNING when the control window began
  double register_s = 0;  // until every simulated worker was registered
  // Control window (no pushers).
  double window_s = 0;
  double coord_cores = 0;  // CPU seconds per wall second
  double coord_rss_mb = 0;
  double hb_p50 = 0, hb_p99 = 0, hb_max = 0;
  uint64_t heartbeats = 0, heartbeat_errors = 0, reregistrations = 0;
  double submit_p50 = 0, submit_p99 = 0;
  int submits = 0, submits_not_started = 0;
  double scale_p50 = 0, scale_p99 = 0;
  int scales = 0, scale_timeouts = 0;
  double state_kb = 0;        // the state file at the end of the window
  double writes_per_s = 0;    // state file writes
  double write_ms_mean = 0;   // time per write (serialize + write + fsyncs)
  // Push window.
  int pushers = 0;
  double pushes_per_s = 0;  // tensor pushes acknowledged, all shards together
  double chunk_pushes_per_shard_s = 0;
  double push_p50 = 0, push_p99 = 0;
  uint64_t push_errors = 0;
  double shard_cores = 0;  // the shards' CPU together
  std::string error;       // the point did not run to the end
};

// CPU seconds (user + system) and resident set of a process, from /proc.
struct ProcSample {
  double cpu_s = 0;
  double rss_mb = 0;
};
absl::StatusOr<ProcSample> SampleProcess(pid_t pid);

void PrintHeader(std::FILE* out);
void PrintRow(std::FILE* out, const PointResult& p);
[[nodiscard]] absl::Status WriteJson(const std::string& path, const std::string& command,
                                     const std::vector<PointResult>& points);
// Writes `png` with gnuplot (a .dat and a .gp file next to it).
// Unavailable when gnuplot is not installed.
[[nodiscard]] absl::Status WritePng(const std::string& png, const std::vector<PointResult>& points);

}  // namespace gradstream::bench

#endif  // GRADSTREAM_BENCH_SCALE_REPORT_H_
