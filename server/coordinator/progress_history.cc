// See progress_history.h and [progress history].
#include "server/coordinator/progress_history.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace gradstream::coordinator {

bool IsNewProgressPoint(const JobStatus& job, const ProgressPoint& point) {
  if (job.history.empty()) return point.clock > 0;
  return point.clock > job.history.back().clock;
}

bool ShouldRecordProgress(const JobStatus& job, const ProgressPoint& point) {
  if (!IsNewProgressPoint(job, point)) return false;
  if (job.history.empty() || point.clock >= job.spec.steps) return true;
  return point.unix_ms - job.history.back().unix_ms >= kMinProgressIntervalMs;
}

void AppendProgressPoint(const ProgressPoint& point, JobStatus* job, int max_points) {
  if (!IsNewProgressPoint(*job, point)) return;
  std::vector<ProgressPoint>& history = job->history;
  if (history.size() >= static_cast<size_t>(max_points)) {
    // Keep points 0, 2, 4, ...: the start stays, the spacing doubles.
    size_t kept = 0;
    for (size_t i = 0; i < history.size(); i += 2) std::swap(history[kept++], history[i]);
    history.resize(kept);
  }
  history.push_back(point);
}

}  // namespace gradstream::coordinator
