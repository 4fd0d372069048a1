// In-process tests of the shard's Prometheus export: JobStats become the
// gs_shard_* series at scrape time, and a job that goes away loses them.
#include "server/shard/rpc/shard_metrics.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/executor.h"
#include "gtest/gtest.h"
#include "server/shard/job.h"

namespace gradstream::shard {
namespace {

bool Has(const std::string& text, const std::string& line) {
  return absl::StrContains(text, line + "\n");
}

TEST(ExportJobStats, MirrorsEveryStat) {
  JobStats s;
  s.pushes_applied = 6;
  s.pushes_duplicate = 2;
  s.pushes_rejected = 1;
  s.bytes_in = 100;
  s.fp32_bytes_in = 1600;
  s.pulls_served = 5;
  s.min_version = 3;
  s.max_version = 4;
  s.max_staleness = 20;
  s.staleness_histogram.assign(kStalenessBuckets, 0);
  s.staleness_histogram[0] = 3;
  s.staleness_histogram[2] = 1;
  s.staleness_histogram[kStalenessBuckets - 1] = 1;  // staleness >= 16
  s.staleness_sum = 22;
  s.min_clock = 7;
  s.max_clock = 9;
  s.members = 3;
  s.epoch = 2;
  s.tables.push_back(JobStats::TableStats{5, TableRowStats{40, 1280, 300, 700, 1}});
  metrics::Histogram latency(PushLatencyBuckets());
  latency.Observe(2e-5);
  latency.Observe(1.0);  // past the last bound

  metrics::Registry reg;
  ExportJobStats("j1", s, &latency, &reg);
  const std::string text = reg.Render();
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"j1\",result=\"applied\"} 6")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"j1\",result=\"duplicate\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"j1\",result=\"rejected\"} 1")) << text;
  EXPECT_TRUE(Has(text, "# TYPE gs_shard_pushes_total counter")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_bytes_total{job=\"j1\"} 100")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_fp32_bytes_total{job=\"j1\"} 1600")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_compression_ratio{job=\"j1\"} 16")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pulls_total{job=\"j1\"} 5")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_chunk_version_min{job=\"j1\"} 3")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_chunk_version_max{job=\"j1\"} 4")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_min_clock{job=\"j1\"} 7")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_clock_lag{job=\"j1\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_active_members{job=\"j1\"} 3")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_membership_epoch{job=\"j1\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_max_staleness{job=\"j1\"} 20")) << text;
  // Staleness: a real histogram with one bucket per clock up to 15.
  EXPECT_TRUE(Has(text, "# TYPE gs_shard_pull_staleness histogram")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"j1\",le=\"0\"} 3")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"j1\",le=\"1\"} 3")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"j1\",le=\"2\"} 4")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"j1\",le=\"15\"} 4")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"j1\",le=\"+Inf\"} 5")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_sum{job=\"j1\"} 22")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_count{job=\"j1\"} 5")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_bucket{job=\"j1\",le=\"2e-05\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_bucket{job=\"j1\",le=\"+Inf\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_count{job=\"j1\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_table_rows{chunk=\"5\",job=\"j1\"} 40")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_table_bytes{chunk=\"5\",job=\"j1\"} 1280")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_table_rows_pushed_total{chunk=\"5\",job=\"j1\"} 300")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_table_rows_pulled_total{chunk=\"5\",job=\"j1\"} 700")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_table_rows_lost{chunk=\"5\",job=\"j1\"} 1")) << text;

  RemoveJobSeries("j1", &reg);
  EXPECT_FALSE(absl::StrContains(reg.Render(), "job=\"j1\""));
}

TEST(ExportJobStats, NoPushesYetIsRatioZeroAndEmptyHistograms) {
  JobStats s;
  metrics::Registry reg;
  ExportJobStats("j", s, nullptr, &reg);
  const std::string text = reg.Render();
  EXPECT_TRUE(Has(text, "gs_shard_compression_ratio{job=\"j\"} 0")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_count{job=\"j\"} 0")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_count{job=\"j\"} 0")) << text;
}

// A live Job behind a ShardMetrics collector, as the shard server wires it.
class ShardMetricsTest : public ::testing::Test {
 protected:
  ShardMetricsTest() : executor_(1) {}

  std::shared_ptr<Job> AddJob(const std::string& id) {
    JobOptions o;
    o.job_id = id;
    o.optimizer.type = OptimizerType::kSgd;
    o.optimizer.learning_rate = 1.0f;
    o.consistency.mode = ConsistencyMode::kAsync;
    o.chunks = {ChunkSpec{0, 8}};
    o.membership = MembershipEpoch{1, 0, {10, 11}};
    auto opened = Job::Open(o, Env::Default(), &executor_);
    EXPECT_TRUE(opened.ok()) << opened.status();
    EXPECT_FALSE(*opened->job->Init(0, std::string(sizeof(float) * 8, '\0')));
    absl::MutexLock l(&mu_);
    jobs_.push_back(opened->job);
    return opened->job;
  }
  void RemoveJobs() {
    absl::MutexLock l(&mu_);
    jobs_.clear();
  }
  std::vector<std::shared_ptr<Job>> List() {
    absl::MutexLock l(&mu_);
    return jobs_;
  }

  Executor executor_;
  metrics::Registry registry_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
};

TEST_F(ShardMetricsTest, ScrapeMirrorsTheJobAndDropsItOnceGone) {
  auto metrics = std::make_unique<ShardMetrics>(&registry_, [this] { return List(); });
  std::shared_ptr<Job> job = AddJob("a");
  const std::string payload(sizeof(float) * 8, '\0');  // fp32 zeros
  PushArgs p;
  p.worker = 10;
  p.chunk_id = 0;
  p.header.codec = CodecType::kNone;
  p.header.num_elems = 8;
  p.payload = payload;
  for (uint64_t clock : {0, 1}) {
    p.clock = clock;
    ASSERT_TRUE(job->Push(p).ok());
  }
  ASSERT_TRUE(job->AdvanceClock(10, 2).ok());
  metrics->PushLatency(job)->Observe(0.001);

  std::string text = registry_.Render();
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"a\",result=\"applied\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_compression_ratio{job=\"a\"} 1")) << text;  // fp32 pushes
  EXPECT_TRUE(Has(text, "gs_shard_active_members{job=\"a\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_min_clock{job=\"a\"} 0")) << text;  // worker 11 is at 0
  EXPECT_TRUE(Has(text, "gs_shard_clock_lag{job=\"a\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_count{job=\"a\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_jobs 1")) << text;

  // A later scrape sees later pushes: nothing is cached between scrapes.
  p.clock = 2;
  ASSERT_TRUE(job->Push(p).ok());
  text = registry_.Render();
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"a\",result=\"applied\"} 3")) << text;

  // Dropped: the next scrape has none of its series.
  RemoveJobs();
  job.reset();
  text = registry_.Render();
  EXPECT_FALSE(absl::StrContains(text, "job=\"a\"")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_jobs 0")) << text;

  // A job created again under the same id starts with a fresh latency.
  std::shared_ptr<Job> again = AddJob("a");
  text = registry_.Render();
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_count{job=\"a\"} 0")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"a\",result=\"applied\"} 0")) << text;

  // Once the exporter is gone, scrapes no longer call it.
  metrics.reset();
  RemoveJobs();
  EXPECT_TRUE(absl::StrContains(registry_.Render(), "job=\"a\""));
}

}  // namespace
}  // namespace gradstream::shard
