// Human-readable output of the CLI: aligned tables, job detail, the `watch`
// progress line, byte counts.
#ifndef GRADSTREAM_CLI_RENDER_H_
#define GRADSTREAM_CLI_RENDER_H_

#include <string>
#include <vector>

#include "coordinator.pb.h"

namespace gradstream::cli {

// Columns padded to their widest cell, two spaces apart; first row = header.
std::string Table(const std::vector<std::vector<std::string>>& rows);

// 1536 -> "1.5 KiB".
std::string HumanBytes(uint64_t bytes);

// "RUNNING", "COMPLETED", ...
std::string StateName(gradstream::v1::JobState state);

std::string RenderJobList(const gradstream::v1::ListJobsResponse& jobs);
// `now_unix_ms` dates the elapsed time of a job still running.
std::string RenderJob(const gradstream::v1::JobStatus& job, int64_t now_unix_ms);

// "1h02m", "3m07s", "12.4s": how long a job has been running, or ran.
std::string Elapsed(const gradstream::v1::JobStatus& job, int64_t now_unix_ms);
std::string RenderCluster(const gradstream::v1::ClusterStatus& cluster, int64_t now_unix_ms);

// One line of `watch`: bar, clock, loss, accuracy, samples/s, bytes pushed
// with compression ratio, max staleness, active workers, state. `width` is
// the bar's width in characters (0 = no bar).
std::string ProgressLine(const gradstream::v1::JobStatus& job, int width);

// `health --json`: {"address": ..., "status": ...} on one line, written by
// nlohmann::json (any byte of either string is escaped; bytes that are not
// UTF-8 become U+FFFD).
std::string HealthJson(const std::string& address, const std::string& status);

}  // namespace gradstream::cli

#endif  // GRADSTREAM_CLI_RENDER_H_
