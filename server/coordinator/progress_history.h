// The progress history the coordinator keeps per job (JobStatus.history):
// one point per test-set evaluation of rank 0, what `gradstream plot` draws.
//
// NOTE: [progress history] A point is recorded when a heartbeat brings an
// evaluation newer than the last point, at most one per
// kMinProgressIntervalMs but always the final one; at kMaxProgressPoints
// every second point is dropped, so the whole run stays covered at a
// coarser resolution. See docs/design/coordinator-progress-history.md.
// Pure functions; the caller passes the time.
#ifndef GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_
#define GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_

#include <cstdint>

#include "server/coordinator/types.h"

namespace gradstream::coordinator {

inline constexpr int kMaxProgressPoints = 256;
inline constexpr int64_t kMinProgressIntervalMs = 250;

// True when `point` is newer than the last point of `history` (or the history
// is empty and the point holds an evaluation): the one that would be added.
bool IsNewProgressPoint(const JobStatus& job, const ProgressPoint& point);

// True when `point` (stamped point.unix_ms) should be recorded: it is new,
// and it is the job's final evaluation (clock == spec.steps) or at least
// kMinProgressIntervalMs after the last recorded point.
bool ShouldRecordProgress(const JobStatus& job, const ProgressPoint& point);

// Appends `point` to job.history per [progress history]; a point that is not
// new is ignored. `max_points` >= 2.
void AppendProgressPoint(const ProgressPoint& point, JobStatus* job,
                         int max_points = kMaxProgressPoints);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_
