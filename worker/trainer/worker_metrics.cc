#include "worker/trainer/worker_metrics.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gradstream {
namespace {

constexpr const char* kInfo = "gs_worker_info";
constexpr const char* kWorldSize = "gs_worker_world_size";
constexpr const char* kClock = "gs_worker_clock";
constexpr const char* kSamplesPerSecond = "gs_worker_samples_per_second";
constexpr const char* kLoss = "gs_worker_loss";
constexpr const char* kAccuracy = "gs_worker_test_accuracy";
constexpr const char* kAccuracyClock = "gs_worker_test_accuracy_clock";
constexpr const char* kPushBytes = "gs_worker_push_bytes_total";
constexpr const char* kPushFp32Bytes = "gs_worker_push_fp32_bytes_total";
constexpr const char* kCompression = "gs_worker_compression_ratio";
constexpr const char* kResidualNorm = "gs_worker_residual_norm";
constexpr const char* kReconnects = "gs_worker_reconnects_total";
constexpr const char* kEncodeShare = "gs_worker_encode_share";
constexpr const char* kWaitShare = "gs_worker_wait_share";
constexpr const char* kFamilies[] = {
    kInfo,          kWorldSize, kClock,         kSamplesPerSecond, kLoss,         kAccuracy,
    kAccuracyClock, kPushBytes, kPushFp32Bytes, kCompression,      kResidualNorm, kReconnects,
    kEncodeShare,   kWaitShare};

}  // namespace

void ExportWorkerSample(const WorkerSample& sample, metrics::Registry* registry) {
  const runtime::Progress& p = sample.progress;
  if (p.job_id.empty()) return;
  const metrics::Labels l = {{"job", p.job_id}};
  auto gauge = [&](const char* name, const char* help, double v) {
    registry->GetGauge(name, help, l)->Set(v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    registry->GetCounter(name, help, l)->Set(v);
  };
  // The rank (and the worker id, after a re-registration) change within a
  // job: only the current combination may stay.
  registry->RemoveMatching(kInfo, "job", p.job_id);
  registry
      ->GetGauge(kInfo, "Always 1: the worker's identity in the job it trains.",
                 {{"job", p.job_id},
                  {"worker", absl::StrCat(sample.worker_id)},
                  {"rank", absl::StrCat(p.rank)},
                  {"device", sample.device}})
      ->Set(1);
  gauge(kWorldSize, "Workers in the job at this worker's membership epoch.", p.world_size);
  gauge(kClock, "Steps (clocks) this worker completed.", p.clock);
  gauge(kSamplesPerSecond, "Training examples per second of this worker.", p.samples_per_sec);
  gauge(kLoss, "Moving average of the training loss.", p.loss);
  gauge(kAccuracy, "Latest test accuracy (rank 0 evaluates; 0 until it did).", p.accuracy);
  gauge(kAccuracyClock, "Clock of the latest test accuracy.", p.accuracy_clock);
  counter(kPushBytes, "Encoded gradient bytes pushed.", p.bytes_pushed);
  counter(kPushFp32Bytes, "What the pushed gradients weigh as fp32.", p.fp32_bytes_pushed);
  gauge(kCompression, "fp32 bytes / encoded bytes pushed (0 before the first push).",
        p.bytes_pushed == 0 ? 0.0 : static_cast<double>(p.fp32_bytes_pushed) / p.bytes_pushed);
  gauge(kResidualNorm, "L2 norm of all error-feedback residuals.", p.residual_norm);
  counter(kReconnects, "Reconnects to shards (after the first connection).", p.reconnects);
  gauge(kWaitShare,
        "Share of wall time since the step loop started spent waiting for encodes, "
        "acknowledgements and pulls.",
        p.wait_share);
  if (!p.encode_path.empty()) {
    registry
        ->GetGauge(kEncodeShare,
                   "Share of step time spent encoding and copying gradients or codes; path is "
                   "where gradients are encoded (host or device).",
                   {{"job", p.job_id}, {"path", p.encode_path}})
        ->Set(p.encode_share);
  }
}

void RemoveWorkerSeries(const std::string& job, metrics::Registry* registry) {
  for (const char* name : kFamilies) registry->RemoveMatching(name, "job", job);
}

WorkerMetrics::WorkerMetrics(metrics::Registry* registry, std::function<WorkerSample()> sample)
    : registry_(registry), sample_(std::move(sample)) {
  collector_id_ = registry_->AddCollector([this] { Collect(); });
}

WorkerMetrics::~WorkerMetrics() { registry_->RemoveCollector(collector_id_); }

void WorkerMetrics::Collect() {
  const WorkerSample sample = sample_();
  const std::string& job = sample.progress.job_id;
  if (!exported_job_.empty() && exported_job_ != job) RemoveWorkerSeries(exported_job_, registry_);
  ExportWorkerSample(sample, registry_);
  exported_job_ = job;
}

}  // namespace gradstream
