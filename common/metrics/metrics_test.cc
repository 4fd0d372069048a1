// Tests of the Prometheus registry's text format and of a live HTTP scrape.
#include "common/metrics/metrics.h"

#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/metrics/metrics_server.h"
#include "gtest/gtest.h"

namespace gradstream::metrics {
namespace {

TEST(Registry, RendersCounterAndGaugeWithHelpAndType) {
  Registry reg;
  reg.GetCounter("gs_pushes_total", "Pushes applied.", {{"job", "j1"}})->Increment(3);
  reg.GetGauge("gs_workers", "Active workers.")->Set(2);
  EXPECT_EQ(reg.Render(),
            "# HELP gs_pushes_total Pushes applied.\n"
            "# TYPE gs_pushes_total counter\n"
            "gs_pushes_total{job=\"j1\"} 3\n"
            "# HELP gs_workers Active workers.\n"
            "# TYPE gs_workers gauge\n"
            "gs_workers 2\n");
}

TEST(Registry, SameNameAndLabelsIsTheSameChild) {
  Registry reg;
  Counter* a = reg.GetCounter("c_total", "h", {{"b", "2"}, {"a", "1"}});
  Counter* b = reg.GetCounter("c_total", "h", {{"a", "1"}, {"b", "2"}});
  EXPECT_EQ(a, b);
  a->Increment();
  b->Increment(0.5);
  EXPECT_DOUBLE_EQ(a->value(), 1.5);
  EXPECT_TRUE(absl::StrContains(reg.Render(), "c_total{a=\"1\",b=\"2\"} 1.5\n"));
}

TEST(Registry, CounterIgnoresNegativeIncrements) {
  Counter c;
  c.Increment(2);
  c.Increment(-5);
  EXPECT_EQ(c.value(), 2);
}

TEST(Registry, EscapesLabelValuesAndHelp) {
  Registry reg;
  reg.GetGauge("g", "line1\nback\\slash", {{"path", "a\"b\\c\nd"}})->Set(1);
  const std::string text = reg.Render();
  EXPECT_TRUE(absl::StrContains(text, "# HELP g line1\\nback\\\\slash\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "g{path=\"a\\\"b\\\\c\\nd\"} 1\n")) << text;
}

TEST(Registry, FormatsSpecialValues) {
  EXPECT_EQ(internal::FormatValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(internal::FormatValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(internal::FormatValue(0.0 / 0.0), "NaN");
  EXPECT_EQ(internal::FormatValue(42), "42");
  EXPECT_EQ(internal::FormatValue(0.25), "0.25");
}

TEST(Registry, ValidatesNames) {
  EXPECT_TRUE(internal::ValidMetricName("gs_a:b_1"));
  EXPECT_FALSE(internal::ValidMetricName("1abc"));
  EXPECT_FALSE(internal::ValidMetricName("a-b"));
  EXPECT_TRUE(internal::ValidLabelName("job"));
  EXPECT_FALSE(internal::ValidLabelName("__reserved"));
  EXPECT_FALSE(internal::ValidLabelName("a:b"));
}

TEST(Histogram, BucketsAreCumulativeAndLessOrEqual) {
  Registry reg;
  Histogram* h = reg.GetHistogram("lat_seconds", "Latency.", {0.5, 1, 10}, {{"op", "apply"}});
  for (double v : {0.25, 0.5, 0.75, 1.0, 5.0, 100.0}) h->Observe(v);
  EXPECT_EQ(h->count(), 6u);
  EXPECT_EQ(h->bucket_count(0), 2u);  // 0.25 and 0.5 (le is inclusive)
  EXPECT_EQ(h->bucket_count(3), 1u);  // 100 in +Inf
  EXPECT_EQ(reg.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{op=\"apply\",le=\"0.5\"} 2\n"
            "lat_seconds_bucket{op=\"apply\",le=\"1\"} 4\n"
            "lat_seconds_bucket{op=\"apply\",le=\"10\"} 5\n"
            "lat_seconds_bucket{op=\"apply\",le=\"+Inf\"} 6\n"
            "lat_seconds_sum{op=\"apply\"} 107.5\n"
            "lat_seconds_count{op=\"apply\"} 6\n");
}

TEST(Histogram, BucketHelpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0, 5, 3), (std::vector<double>{0, 5, 10}));
}

TEST(Histogram, ConcurrentObservationsAllCount) {
  Histogram h(LinearBuckets(0, 1, 8));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < 10000; ++i) h.Observe(i % 10);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_DOUBLE_EQ(h.sum(), 4 * 1000 * 45.0);
}

TEST(Registry, RemoveMatchingDropsOneJobsSeries) {
  Registry reg;
  reg.GetGauge("gs_job_clock", "c", {{"job", "a"}})->Set(1);
  reg.GetGauge("gs_job_clock", "c", {{"job", "b"}})->Set(2);
  reg.RemoveMatching("gs_job_clock", "job", "a");
  const std::string text = reg.Render();
  EXPECT_FALSE(absl::StrContains(text, "job=\"a\""));
  EXPECT_TRUE(absl::StrContains(text, "gs_job_clock{job=\"b\"} 2"));
}

TEST(Histogram, SetMirrorsADistributionKeptElsewhere) {
  Registry reg;
  Histogram* h = reg.GetHistogram("staleness", "Staleness.", {0, 1, 2}, {{"job", "j"}});
  h->Observe(7);  // replaced, not added to
  h->Set({3, 0, 1, 2}, 14);
  EXPECT_EQ(h->count(), 6u);
  EXPECT_EQ(h->bucket_counts(), (std::vector<uint64_t>{3, 0, 1, 2}));
  EXPECT_EQ(reg.Render(),
            "# HELP staleness Staleness.\n"
            "# TYPE staleness histogram\n"
            "staleness_bucket{job=\"j\",le=\"0\"} 3\n"
            "staleness_bucket{job=\"j\",le=\"1\"} 3\n"
            "staleness_bucket{job=\"j\",le=\"2\"} 4\n"
            "staleness_bucket{job=\"j\",le=\"+Inf\"} 6\n"
            "staleness_sum{job=\"j\"} 14\n"
            "staleness_count{job=\"j\"} 6\n");
}

TEST(Histogram, CopiesAnotherHistogramsBuckets) {
  Histogram source(ExponentialBuckets(0.001, 10, 3));
  for (double v : {0.0005, 0.002, 0.002, 5.0}) source.Observe(v);
  Histogram mirror(source.bounds());
  mirror.Set(source.bucket_counts(), source.sum());
  EXPECT_EQ(mirror.bucket_counts(), (std::vector<uint64_t>{1, 2, 0, 1}));
  EXPECT_EQ(mirror.count(), 4u);
  EXPECT_DOUBLE_EQ(mirror.sum(), 5.0045);
}

TEST(HistogramDeathTest, SetWithTheWrongBucketCountIsAProgrammerError) {
  Histogram h({1, 2});
  EXPECT_DEATH(h.Set({1, 2}, 3), "one count per bucket");
}

TEST(Registry, CounterSetMirrorsATotal) {
  Registry reg;
  Counter* c = reg.GetCounter("mirrored_total", "m");
  c->Set(41);
  c->Set(42);
  EXPECT_EQ(c->value(), 42);
  EXPECT_TRUE(absl::StrContains(reg.Render(), "mirrored_total 42\n"));
}

TEST(Registry, CollectorRunsBeforeEveryRender) {
  Registry reg;
  int runs = 0;
  std::atomic<uint64_t> source{5};  // what a component counts on its own
  const uint64_t id = reg.AddCollector([&] {
    ++runs;
    reg.GetCounter("mirror_total", "Mirrored.", {{"job", "j"}})->Set(source.load());
    // Collectors may drop series too (e.g. a job that went away).
    if (source.load() > 5) reg.RemoveMatching("gone", "job", "j");
  });
  reg.GetGauge("gone", "g", {{"job", "j"}})->Set(1);
  std::string text = reg.Render();
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(absl::StrContains(text, "mirror_total{job=\"j\"} 5\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "gone{job=\"j\"} 1\n")) << text;

  source = 9;
  text = reg.Render();
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(absl::StrContains(text, "mirror_total{job=\"j\"} 9\n")) << text;
  EXPECT_FALSE(absl::StrContains(text, "gone{")) << text;

  reg.RemoveCollector(id);
  source = 11;
  text = reg.Render();
  EXPECT_EQ(runs, 2);
  EXPECT_TRUE(absl::StrContains(text, "mirror_total{job=\"j\"} 9\n")) << text;
}

TEST(Registry, RemoveCollectorWaitsForARunInProgress) {
  Registry reg;
  absl::Notification entered, release;
  const uint64_t id = reg.AddCollector([&] {
    entered.Notify();
    release.WaitForNotification();
  });
  std::thread scrape([&] { (void)reg.Render(); });
  entered.WaitForNotification();
  std::atomic<bool> removed{false};
  std::thread remover([&] {
    reg.RemoveCollector(id);
    removed = true;
  });
  // The collector is still running: its captures must stay alive.
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(removed.load());
  release.Notify();
  remover.join();
  scrape.join();
  EXPECT_TRUE(removed.load());
}

TEST(MetricsServer, ServesMetricsOverHttp) {
  Registry reg;
  reg.GetCounter("gs_scrape_test_total", "A counter.")->Increment(7);
  auto server = MetricsServer::Start(&reg, 0, "127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);

  httplib::Client client("127.0.0.1", (*server)->port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(absl::StartsWith(res->get_header_value("Content-Type"), "text/plain; version=0.0.4"));
  EXPECT_TRUE(absl::StrContains(res->body, "gs_scrape_test_total 7\n")) << res->body;

  // Updates show up in the next scrape.
  reg.GetCounter("gs_scrape_test_total", "A counter.")->Increment();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_TRUE(absl::StrContains(res->body, "gs_scrape_test_total 8\n")) << res->body;

  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->body, "ok\n");
}

TEST(ServeMetrics, NegativePortIsOff) {
  Registry reg;
  auto server = ServeMetrics(&reg, -1, "");
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ(*server, nullptr);
}

TEST(ServeMetrics, WritesTheBoundPortToThePortFile) {
  Registry reg;
  char dir[] = "/tmp/metrics_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/metrics.port";
  auto server = ServeMetrics(&reg, 0, file, "127.0.0.1");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_NE(*server, nullptr);
  int port = 0;
  std::ifstream(file) >> port;
  EXPECT_EQ(port, (*server)->port());
  EXPECT_GT(port, 0);
  std::remove(file.c_str());
  ::rmdir(dir);

  auto unwritable = ServeMetrics(&reg, 0, "/nonexistent-dir/metrics.port", "127.0.0.1");
  EXPECT_EQ(unwritable.status().code(), absl::StatusCode::kInternal);
}

TEST(MetricsServer, BusyPortIsUnavailable) {
  Registry reg;
  auto first = MetricsServer::Start(&reg, 0, "127.0.0.1");
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start(&reg, (*first)->port(), "127.0.0.1");
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gradstream::metrics
