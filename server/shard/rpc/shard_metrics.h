// The shard's Prometheus series (gs_shard_*, labelled job="..."), served by
// gs_shard --metrics_port. Everything a Job already counts (JobStats) is
// mirrored into the registry at scrape time by a collector, so the push and
// pull paths pay nothing for it; the one thing the Job does not keep, the
// push handling latency, is measured by the RPC edge (shard_server.cc) into a
// per-job histogram owned here.
//
// This is RPC-edge code: the shard core (gs_shard_core, also built by the
// fuzz build) does not link gs_metrics.
#ifndef GRADSTREAM_SERVER_SHARD_RPC_SHARD_METRICS_H_
#define GRADSTREAM_SERVER_SHARD_RPC_SHARD_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/metrics.h"
#include "server/shard/job.h"
#include "server/shard/types.h"

namespace gradstream::shard {

// Bucket bounds (seconds) of gs_shard_push_seconds: 10us .. ~0.3s.
std::vector<double> PushLatencyBuckets();

// Sets job `job`'s series in `registry` from `stats`, and its
// gs_shard_push_seconds from `push_seconds` (nullptr = no push measured yet).
void ExportJobStats(const std::string& job, const JobStats& stats,
                    const metrics::Histogram* push_seconds, metrics::Registry* registry);
// Drops every gs_shard_* series of job `job`.
void RemoveJobSeries(const std::string& job, metrics::Registry* registry);

// Exports a shard's jobs to `registry` at every scrape: the constructor
// registers a collector, the destructor removes it (waiting for a scrape in
// progress). A job that is no longer listed loses its series at the next
// scrape. Thread-safe.
class ShardMetrics {
 public:
  // Lists the shard's jobs; called on the scraping thread.
  using JobLister = std::function<std::vector<std::shared_ptr<Job>>()>;

  // `registry` must outlive this object, and `list_jobs` must stay callable
  // until the destructor returns.
  ShardMetrics(metrics::Registry* registry, JobLister list_jobs);
  ~ShardMetrics();
  ShardMetrics(const ShardMetrics&) = delete;
  ShardMetrics& operator=(const ShardMetrics&) = delete;

  // The push latency histogram of `job`, created on first use. A stream
  // keeps the pointer, which stays valid after the job is dropped; a job
  // created again under the same id gets a fresh histogram.
  std::shared_ptr<metrics::Histogram> PushLatency(const std::shared_ptr<Job>& job)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Latency {
    std::weak_ptr<Job> job;  // which incarnation of the job id it measures
    std::shared_ptr<metrics::Histogram> seconds;
  };

  void Collect() ABSL_LOCKS_EXCLUDED(mu_);

  metrics::Registry* const registry_;
  const JobLister list_jobs_;
  uint64_t collector_id_ = 0;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Latency> push_latency_ ABSL_GUARDED_BY(mu_);
  // Jobs whose series the last Collect() set. Only Collect() touches it, and
  // the registry runs collectors one at a time.
  std::set<std::string> exported_;
};

}  // namespace gradstream::shard

#endif  // GRADSTREAM_SERVER_SHARD_RPC_SHARD_METRICS_H_
