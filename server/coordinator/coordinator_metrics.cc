// The coordinator's series; see coordinator_metrics.h.
#include "server/coordinator/coordinator_metrics.h"

namespace gradstream::coordinator {

CoordinatorMetrics::CoordinatorMetrics(metrics::Registry* registry)
    : registry_(registry),
      save_seconds_(registry->GetHistogram("gs_coordinator_state_save_seconds",
                                           "Time to persist the job table.",
                                           metrics::ExponentialBuckets(0.0001, 4, 10))),
      epochs_(registry->GetCounter("gs_coordinator_membership_changes_total",
                                   "Membership epochs created.")),
      workers_removed_(registry->GetCounter("gs_coordinator_workers_removed_total",
                                            "Workers removed after missing heartbeats.")),
      heartbeats_(registry->GetCounter("gs_coordinator_heartbeats_total",
                                       "Worker heartbeats received.")) {}

void CoordinatorMetrics::StateSaved(absl::Duration took) {
  save_seconds_->Observe(absl::ToDoubleSeconds(took));
}

void CoordinatorMetrics::EpochAdded() { epochs_->Increment(); }

void CoordinatorMetrics::WorkerRemoved() { workers_removed_->Increment(); }

void CoordinatorMetrics::HeartbeatReceived() { heartbeats_->Increment(); }

void CoordinatorMetrics::RpcDone(const char* method, absl::StatusCode code) {
  registry_
      ->GetCounter("gs_coordinator_rpcs_total", "Coordinator RPCs by method and status.",
                   {{"method", method}, {"code", absl::StatusCodeToString(code)}})
      ->Increment();
}

void CoordinatorMetrics::ExportJob(const std::string& job, const JobProgress& p,
                                   uint32_t members, uint32_t desired_workers, uint64_t epochs) {
  const metrics::Labels l = {{"job", job}};
  auto gauge = [&](const char* name, const char* help, double v) {
    registry_->GetGauge(name, help, l)->Set(v);
  };
  gauge("gs_job_clock", "Slowest active worker's clock.", p.clock);
  gauge("gs_job_clock_lag", "Fastest minus slowest active worker's clock.",
        p.max_clock >= p.clock ? p.max_clock - p.clock : 0);
  gauge("gs_job_active_workers", "Workers pushing for the job (leaving ones included).", members);
  gauge("gs_job_desired_workers", "Desired workers of the job.", desired_workers);
  gauge("gs_job_epoch", "Newest membership epoch.", epochs);
  // What is not measured yet has no series rather than a 0 (see [not
  // measured] in proto/coordinator.proto).
  if (p.loss) gauge("gs_job_loss", "Mean training loss of the active workers.", *p.loss);
  gauge("gs_job_accuracy", "Latest test accuracy.", p.accuracy);
  if (p.samples_per_sec) {
    gauge("gs_job_samples_per_second",
          "Training throughput over all workers; once the job ended, the run's average.",
          *p.samples_per_sec);
  }
  if (p.bytes_pushed) {
    gauge("gs_job_bytes_pushed", "Encoded gradient bytes pushed.", *p.bytes_pushed);
  }
  if (p.compression_ratio) {
    gauge("gs_job_compression_ratio", "fp32 bytes / encoded bytes pushed.", *p.compression_ratio);
  }
  gauge("gs_job_max_staleness", "Largest staleness observed.", p.max_staleness);
  gauge("gs_job_residual_norm", "Largest error-feedback residual norm.", p.residual_norm);
}

void CoordinatorMetrics::ExportCluster(const ClusterCounts& counts) {
  for (JobState s : {JobState::kPending, JobState::kRunning, JobState::kCompleted,
                     JobState::kFailed, JobState::kCancelled}) {
    auto it = counts.jobs_by_state.find(s);
    registry_->GetGauge("gs_coordinator_jobs", "Jobs by state.", {{"state", JobStateName(s)}})
        ->Set(it == counts.jobs_by_state.end() ? 0 : it->second);
  }
  registry_->GetGauge("gs_coordinator_workers", "Registered workers.", {{"health", "healthy"}})
      ->Set(counts.workers_healthy);
  registry_->GetGauge("gs_coordinator_workers", "Registered workers.", {{"health", "dead"}})
      ->Set(counts.workers_dead);
  registry_->GetGauge("gs_coordinator_idle_workers", "Healthy workers without a job.")
      ->Set(counts.workers_idle);
  registry_->GetGauge("gs_coordinator_shards", "Registered shards.", {{"health", "healthy"}})
      ->Set(counts.shards_healthy);
  registry_->GetGauge("gs_coordinator_shards", "Registered shards.", {{"health", "unhealthy"}})
      ->Set(counts.shards_unhealthy);
}

}  // namespace gradstream::coordinator
