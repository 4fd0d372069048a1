// See progress_history.h and [progress history].
#include "server/coordinator/progress_history.h"

namespace gradstream::coordinator {

namespace v1 = gradstream::v1;

bool IsNewProgressPoint(const v1::JobStatus& job, const v1::ProgressPoint& point) {
  if (job.history().empty()) return point.clock() > 0;
  return point.clock() > job.history(job.history_size() - 1).clock();
}

bool ShouldRecordProgress(const v1::JobStatus& job, const v1::ProgressPoint& point) {
  if (!IsNewProgressPoint(job, point)) return false;
  if (job.history().empty() || point.clock() >= job.spec().steps()) return true;
  return point.unix_ms() - job.history(job.history_size() - 1).unix_ms() >= kMinProgressIntervalMs;
}

void AppendProgressPoint(const v1::ProgressPoint& point, v1::JobStatus* job, int max_points) {
  if (!IsNewProgressPoint(*job, point)) return;
  auto* history = job->mutable_history();
  if (history->size() >= max_points) {
    // Keep points 0, 2, 4, ...: the start stays, the spacing doubles.
    int kept = 0;
    for (int i = 0; i < history->size(); i += 2) history->SwapElements(kept++, i);
    history->DeleteSubrange(kept, history->size() - kept);
  }
  *history->Add() = point;
}

}  // namespace gradstream::coordinator
