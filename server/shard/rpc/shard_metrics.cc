#include "server/shard/rpc/shard_metrics.h"

#include <algorithm>
#include <string>
#include <utility>

namespace gradstream::shard {
namespace {

// Every per-job family, so a dropped job's series can all be removed.
constexpr const char* kPushes = "gs_shard_pushes_total";
constexpr const char* kPushBytes = "gs_shard_push_bytes_total";
constexpr const char* kPushFp32Bytes = "gs_shard_push_fp32_bytes_total";
constexpr const char* kCompression = "gs_shard_compression_ratio";
constexpr const char* kPulls = "gs_shard_pulls_total";
constexpr const char* kPullBytes = "gs_shard_pull_bytes_total";
constexpr const char* kPullFp32Bytes = "gs_shard_pull_fp32_bytes_total";
constexpr const char* kPushSeconds = "gs_shard_push_seconds";
constexpr const char* kStaleness = "gs_shard_pull_staleness";
constexpr const char* kMaxStaleness = "gs_shard_max_staleness";
constexpr const char* kVersionMin = "gs_shard_chunk_version_min";
constexpr const char* kVersionMax = "gs_shard_chunk_version_max";
constexpr const char* kMinClock = "gs_shard_min_clock";
constexpr const char* kClockLag = "gs_shard_clock_lag";
constexpr const char* kMembers = "gs_shard_active_members";
constexpr const char* kEpoch = "gs_shard_membership_epoch";
constexpr const char* kCheckpointFailures = "gs_shard_checkpoint_failures_total";
constexpr const char* kPullErrorClocks = "gs_shard_pull_error_clocks";
constexpr const char* kPullErrorRelative = "gs_shard_pull_error_relative";
constexpr const char* kPullFlushes = "gs_shard_pull_flushes_total";
constexpr const char* kPullRaised = "gs_shard_pull_raised";
constexpr const char* kPushErrorClocks = "gs_shard_push_error_clocks";
constexpr const char* kTableRows = "gs_shard_table_rows";
constexpr const char* kTableBytes = "gs_shard_table_bytes";
constexpr const char* kTableRowsPushed = "gs_shard_table_rows_pushed_total";
constexpr const char* kTableRowsPulled = "gs_shard_table_rows_pulled_total";
constexpr const char* kTableRowsLost = "gs_shard_table_rows_lost";
constexpr const char* kJobFamilies[] = {
    kPushes,       kPushBytes,  kPushFp32Bytes, kCompression, kPulls,    kPushSeconds, kStaleness,
    kMaxStaleness, kVersionMin, kVersionMax,    kMinClock,    kClockLag, kMembers,     kEpoch,
    kPullBytes,    kPullFp32Bytes, kCheckpointFailures, kPullErrorClocks, kPullErrorRelative,
    kPullFlushes,  kPullRaised, kPushErrorClocks, kTableRows, kTableBytes, kTableRowsPushed,
    kTableRowsPulled, kTableRowsLost};

// Staleness 0..kStalenessBuckets-2 has its own bucket; the Job's last bucket
// (staleness >= kStalenessBuckets-1) is Prometheus' +Inf.
std::vector<double> StalenessBuckets() {
  return metrics::LinearBuckets(0, 1, kStalenessBuckets - 1);
}

}  // namespace

std::vector<double> PushLatencyBuckets() { return metrics::ExponentialBuckets(1e-5, 2, 16); }

void ExportJobStats(const std::string& job, const JobStats& s,
                    const metrics::Histogram* push_seconds, metrics::Registry* registry) {
  const metrics::Labels l = {{"job", job}};
  auto counter = [&](const char* name, const char* help, double v, const metrics::Labels& labels) {
    registry->GetCounter(name, help, labels)->Set(v);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    registry->GetGauge(name, help, l)->Set(v);
  };
  const char* pushes_help = "Pushes handled, by result (duplicate: already applied, ignored).";
  counter(kPushes, pushes_help, s.pushes_applied, {{"job", job}, {"result", "applied"}});
  counter(kPushes, pushes_help, s.pushes_duplicate, {{"job", job}, {"result", "duplicate"}});
  counter(kPushes, pushes_help, s.pushes_rejected, {{"job", job}, {"result", "rejected"}});
  counter(kPushBytes, "Encoded payload bytes of applied pushes.", s.bytes_in, l);
  counter(kPushFp32Bytes, "What the applied pushes would weigh as fp32.", s.fp32_bytes_in, l);
  gauge(kCompression, "fp32 bytes / encoded bytes of applied pushes (0 before the first).",
        s.bytes_in == 0 ? 0.0 : static_cast<double>(s.fp32_bytes_in) / s.bytes_in);
  counter(kPulls, "Pulls answered with parameters.", s.pulls_served, l);
  counter(kPullBytes, "Parameter bytes pulls carried (fp32 values, or pull-codec deltas).",
          s.bytes_out, l);
  counter(kPullFp32Bytes, "What the same pulls would weigh as fp32.", s.fp32_bytes_out, l);
  counter(kCheckpointFailures, "Periodic checkpoints that could not be written.",
          s.checkpoint_failures, l);
  for (const JobStats::ChunkPrecision& cp : s.precision) {
    const metrics::Labels lc = {{"job", job}, {"chunk", std::to_string(cp.chunk_id)}};
    if (cp.push) {
      registry->GetGauge(kPushErrorClocks,
                         "A compressed push's error as its workers report it: the largest "
                         "|residual| / |gradient| (see common/job/precision.h).",
                         lc)
          ->Set(cp.push->ratio);
    }
    if (!cp.pull) continue;
    const PathPrecision& pull = *cp.pull;
    registry->GetGauge(kPullErrorClocks,
                       "A compressed pull's error: |p - q| in clocks of update (see "
                       "common/job/precision.h).",
                       lc)
        ->Set(pull.ratio);
    registry->GetGauge(kPullErrorRelative, "A compressed pull's error |p - q| / |p|.", lc)
        ->Set(pull.relative);
    counter(kPullFlushes, "Exact publications the pull error bound asked for.", pull.flushes,
            lc);
    registry->GetGauge(kPullRaised, "1 while the chunk's pulls are raised above their codec.", lc)
        ->Set(pull.raised ? 1.0 : 0.0);
  }

  for (const JobStats::TableStats& t : s.tables) {  // docs/design/sparse-tables.md
    const metrics::Labels lc = {{"job", job}, {"chunk", std::to_string(t.chunk_id)}};
    registry->GetGauge(kTableRows, "Rows a table partition holds.", lc)->Set(t.rows.held);
    registry->GetGauge(kTableBytes, "Bytes of a table partition's rows and their optimizer state.",
                       lc)
        ->Set(t.rows.bytes);
    counter(kTableRowsPushed, "Rows of a table partition summed over its pushes.",
            t.rows.pushed, lc);
    counter(kTableRowsPulled, "Rows of a table partition summed over its pulls.", t.rows.pulled,
            lc);
    registry
        ->GetGauge(kTableRowsLost,
                   "1 when a restart without a checkpoint lost the partition's rows.", lc)
        ->Set(static_cast<double>(t.rows.lost));
  }

  metrics::Histogram* latency = registry->GetHistogram(
      kPushSeconds, "Time to handle one push (decode + accumulate/apply + ack), seconds.",
      PushLatencyBuckets(), l);
  if (push_seconds != nullptr) latency->Set(push_seconds->bucket_counts(), push_seconds->sum());

  metrics::Histogram* staleness = registry->GetHistogram(
      kStaleness, "Clocks a served pull read ahead of the slowest member.", StalenessBuckets(), l);
  std::vector<uint64_t> counts(staleness->bounds().size() + 1, 0);
  for (size_t i = 0; i < s.staleness_histogram.size(); ++i) {
    counts[std::min(i, counts.size() - 1)] += s.staleness_histogram[i];
  }
  staleness->Set(counts, static_cast<double>(s.staleness_sum));
  gauge(kMaxStaleness, "Largest staleness a served pull had.", s.max_staleness);

  gauge(kVersionMin, "Oldest chunk version (sync: clocks applied).", s.min_version);
  gauge(kVersionMax, "Newest chunk version.", s.max_version);
  gauge(kMinClock, "Clock of the slowest member of the newest epoch.", s.min_clock);
  gauge(kClockLag, "Fastest minus slowest member clock.",
        s.max_clock >= s.min_clock ? s.max_clock - s.min_clock : 0);
  gauge(kMembers, "Workers in the newest membership epoch.", s.members);
  gauge(kEpoch, "Newest membership epoch.", s.epoch);
}

void RemoveJobSeries(const std::string& job, metrics::Registry* registry) {
  for (const char* name : kJobFamilies) registry->RemoveMatching(name, "job", job);
}

ShardMetrics::ShardMetrics(metrics::Registry* registry, JobLister list_jobs)
    : registry_(registry), list_jobs_(std::move(list_jobs)) {
  collector_id_ = registry_->AddCollector([this] { Collect(); });
}

ShardMetrics::~ShardMetrics() { registry_->RemoveCollector(collector_id_); }

std::shared_ptr<metrics::Histogram> ShardMetrics::PushLatency(const std::shared_ptr<Job>& job) {
  absl::MutexLock l(&mu_);
  Latency& e = push_latency_[job->id()];
  if (e.seconds == nullptr || e.job.lock() != job) {
    e.job = job;
    e.seconds = std::make_shared<metrics::Histogram>(PushLatencyBuckets());
  }
  return e.seconds;
}

void ShardMetrics::Collect() {
  const std::vector<std::shared_ptr<Job>> jobs = list_jobs_();
  std::set<std::string> listed;
  for (const std::shared_ptr<Job>& job : jobs) {
    listed.insert(job->id());
    std::shared_ptr<metrics::Histogram> latency;
    {
      absl::MutexLock l(&mu_);
      auto it = push_latency_.find(job->id());
      if (it != push_latency_.end() && it->second.job.lock() == job) latency = it->second.seconds;
    }
    ExportJobStats(job->id(), job->Stats(/*include_rounds=*/false), latency.get(), registry_);
  }
  // Removed here rather than in DropJob: a scrape that listed the job just
  // before the drop would otherwise bring its series back.
  for (const std::string& id : exported_) {
    if (!listed.contains(id)) RemoveJobSeries(id, registry_);
  }
  exported_ = std::move(listed);
  {
    // A histogram goes with the last reference to its job (the job table's
    // and those of the streams bound to it).
    absl::MutexLock l(&mu_);
    absl::erase_if(push_latency_, [](const auto& kv) { return kv.second.job.expired(); });
  }
  registry_->GetGauge("gs_shard_jobs", "Jobs this shard holds.")->Set(jobs.size());
}

}  // namespace gradstream::shard
