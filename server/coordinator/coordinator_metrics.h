// The coordinator's Prometheus series (gs_coordinator_*, and gs_job_*
// labelled job="..."), served by gs_coordinator --metrics_port. The
// coordinator's logic reports events and counts here and never names a
// series itself, as the shard does through server/shard/rpc/shard_metrics.h.
#ifndef GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
#define GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/metrics/metrics.h"
#include "server/coordinator/types.h"

namespace gradstream::coordinator {

// Counts over the whole cluster, set at the end of every tick.
struct ClusterCounts {
  std::map<JobState, int> jobs_by_state;
  int workers_healthy = 0;
  int workers_dead = 0;
  int workers_idle = 0;  // healthy and without a job
  int shards_healthy = 0;
  int shards_unhealthy = 0;
};

// Thread-safe (the registry is). `registry` must outlive this object.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(metrics::Registry* registry);
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // The state file was written (or failed to be) in `took`.
  void StateSaved(absl::Duration took);
  // A membership epoch was made durable.
  void EpochAdded();
  // A worker was removed after missing heartbeats.
  void WorkerRemoved();
  void HeartbeatReceived();
  // A coordinator RPC `method` answered with `code` (the gRPC edge).
  void RpcDone(const char* method, absl::StatusCode code);

  // Job `job`'s gs_job_* gauges: its aggregated progress, how many members
  // it has (leaving ones included), how many it wants, its newest epoch.
  void ExportJob(const std::string& job, const JobProgress& progress, uint32_t members,
                 uint32_t desired_workers, uint64_t epochs);
  void ExportCluster(const ClusterCounts& counts);

 private:
  metrics::Registry* const registry_;
  metrics::Histogram* const save_seconds_;
  metrics::Counter* const epochs_;
  metrics::Counter* const workers_removed_;
  metrics::Counter* const heartbeats_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_COORDINATOR_METRICS_H_
