// gs_worker's Prometheus series (gs_worker_*, labelled job="..."), served by
// gs_worker --metrics_port. The trainer already publishes its progress to a
// ProgressBoard for the coordinator's heartbeats; a collector mirrors the
// same numbers into the registry at scrape time, so training pays nothing.
#ifndef GRADSTREAM_WORKER_TRAINER_WORKER_METRICS_H_
#define GRADSTREAM_WORKER_TRAINER_WORKER_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "common/metrics/metrics.h"
#include "worker/runtime/progress.h"

namespace gradstream {

// One scrape's view of the worker.
struct WorkerSample {
  uint64_t worker_id = 0;  // 0 before the coordinator assigned one
  std::string device;      // "cpu" / "gpu"
  runtime::Progress progress;  // progress.job_id "" = no job yet
};

// Sets the series of `sample.progress.job_id` in `registry` (nothing when
// it is empty).
void ExportWorkerSample(const WorkerSample& sample, metrics::Registry* registry);
// Drops every gs_worker_* series of job `job`.
void RemoveWorkerSeries(const std::string& job, metrics::Registry* registry);

// Exports `sample()` at every scrape of `registry`: the constructor registers
// a collector, the destructor removes it (waiting for a scrape in progress).
// When the worker moves to another job (or to none), the old job's series
// go. Thread-safe.
class WorkerMetrics {
 public:
  // `registry` must outlive this object; `sample` is called on the scraping
  // thread until the destructor returns.
  WorkerMetrics(metrics::Registry* registry, std::function<WorkerSample()> sample);
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

 private:
  void Collect();

  metrics::Registry* const registry_;
  const std::function<WorkerSample()> sample_;
  uint64_t collector_id_ = 0;
  // The job the last Collect() exported. Only Collect() touches it, and the
  // registry runs collectors one at a time.
  std::string exported_job_;
};

}  // namespace gradstream

#endif  // GRADSTREAM_WORKER_TRAINER_WORKER_METRICS_H_
