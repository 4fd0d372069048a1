// The progress history the coordinator keeps per job (JobStatus.history):
// one point per test-set evaluation of rank 0, what `gradstream plot` draws.
//
// NOTE: [progress history] A job records a point whenever a heartbeat brings
// an evaluation newer than the last point (accuracy_clock advanced), written
// through the job log like every other change of a job record. The history
// is bounded whatever the job's length: when it holds kMaxProgressPoints,
// every second point of it is dropped (the first is kept) before the new one
// is appended, so the run is always covered end to end at a resolution that
// halves each time the bound is reached. Each point is a row written through
// the job log, so evaluations closer together than
// kMinProgressInterval (a job with a tiny eval_every) are not all recorded:
// the work a point costs is bounded by time, not by a number the job's
// submitter chose; the job's final evaluation is always recorded. Pure
// functions; the caller passes the time.
#ifndef GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_
#define GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_

#include <cstdint>

#include "coordinator.pb.h"

namespace gradstream::coordinator {

inline constexpr int kMaxProgressPoints = 256;
inline constexpr int64_t kMinProgressIntervalMs = 250;

// True when `point` is newer than the last point of `history` (or the history
// is empty and the point holds an evaluation): the one that would be added.
bool IsNewProgressPoint(const gradstream::v1::JobStatus& job,
                        const gradstream::v1::ProgressPoint& point);

// True when `point` (stamped point.unix_ms()) should be recorded: it is new,
// and it is the job's final evaluation (clock == spec.steps) or at least
// kMinProgressIntervalMs after the last recorded point.
bool ShouldRecordProgress(const gradstream::v1::JobStatus& job,
                          const gradstream::v1::ProgressPoint& point);

// Appends `point` to job.history per [progress history]; a point that is not
// new is ignored. `max_points` >= 2.
void AppendProgressPoint(const gradstream::v1::ProgressPoint& point,
                         gradstream::v1::JobStatus* job, int max_points = kMaxProgressPoints);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_PROGRESS_HISTORY_H_
