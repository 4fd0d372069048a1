// gs_worker's Prometheus export: the trainer's Progress becomes gs_worker_*
// series labelled with the job, and a job the worker left loses them.
#include "worker/trainer/worker_metrics.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace gradstream {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return absl::StrContains(text, line + "\n");
}

WorkerSample Sample(const std::string& job, uint32_t rank) {
  WorkerSample s;
  s.worker_id = 7;
  s.device = "cpu";
  s.progress.job_id = job;
  s.progress.rank = rank;
  s.progress.world_size = 2;
  s.progress.clock = 120;
  s.progress.loss = 0.5f;
  s.progress.accuracy = 0.75f;
  s.progress.accuracy_clock = 100;
  s.progress.samples_per_sec = 2048;
  s.progress.bytes_pushed = 1000;
  s.progress.fp32_bytes_pushed = 14000;
  s.progress.residual_norm = 0.25;
  s.progress.reconnects = 1;
  s.progress.encode_path = "device";
  s.progress.encode_share = 0.125f;
  return s;
}

TEST(ExportWorkerSample, MirrorsTheProgress) {
  metrics::Registry reg;
  ExportWorkerSample(Sample("job-1", 1), &reg);
  const std::string text = reg.Render();
  EXPECT_TRUE(Has(text, "gs_worker_info{device=\"cpu\",job=\"job-1\",rank=\"1\",worker=\"7\"} 1"))
      << text;
  EXPECT_TRUE(Has(text, "gs_worker_world_size{job=\"job-1\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_clock{job=\"job-1\"} 120")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_loss{job=\"job-1\"} 0.5")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_test_accuracy{job=\"job-1\"} 0.75")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_test_accuracy_clock{job=\"job-1\"} 100")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_samples_per_second{job=\"job-1\"} 2048")) << text;
  EXPECT_TRUE(Has(text, "# TYPE gs_worker_push_bytes_total counter")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_push_bytes_total{job=\"job-1\"} 1000")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_push_fp32_bytes_total{job=\"job-1\"} 14000")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_compression_ratio{job=\"job-1\"} 14")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_residual_norm{job=\"job-1\"} 0.25")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_reconnects_total{job=\"job-1\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_worker_encode_share{job=\"job-1\",path=\"device\"} 0.125")) << text;

  // A new rank replaces the info series rather than adding one.
  ExportWorkerSample(Sample("job-1", 0), &reg);
  const std::string after = reg.Render();
  EXPECT_TRUE(Has(after, "gs_worker_info{device=\"cpu\",job=\"job-1\",rank=\"0\",worker=\"7\"} 1"))
      << after;
  EXPECT_FALSE(absl::StrContains(after, "rank=\"1\"")) << after;
}

TEST(ExportWorkerSample, NoJobNoSeries) {
  metrics::Registry reg;
  ExportWorkerSample(WorkerSample{}, &reg);
  EXPECT_EQ(reg.Render(), "");
}

TEST(WorkerMetrics, ANewJobReplacesTheOldOnesSeries) {
  metrics::Registry reg;
  absl::Mutex mu;
  WorkerSample current = Sample("job-1", 0);
  WorkerMetrics exporter(&reg, [&] {
    absl::MutexLock l(&mu);
    return current;
  });
  EXPECT_TRUE(Has(reg.Render(), "gs_worker_clock{job=\"job-1\"} 120"));
  {
    // The worker starts its next job: the board is reset first.
    absl::MutexLock l(&mu);
    current.progress = runtime::Progress{};
  }
  std::string text = reg.Render();
  EXPECT_FALSE(absl::StrContains(text, "job=\"job-1\"")) << text;
  {
    absl::MutexLock l(&mu);
    current = Sample("job-2", 1);
  }
  text = reg.Render();
  EXPECT_TRUE(Has(text, "gs_worker_clock{job=\"job-2\"} 120")) << text;
  EXPECT_FALSE(absl::StrContains(text, "job=\"job-1\"")) << text;
}

}  // namespace
}  // namespace gradstream
