// A real gs_shard with --metrics_port=0 serves its jobs' gs_shard_* series
// over HTTP: after a known sequence of pushes and pulls, a scrape reports
// exactly those counts (push results, bytes, twobit's 16x ratio, pulls, the
// staleness the pulls had, member clocks), and a dropped job's series go.
#include <httplib.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

constexpr uint32_t kElems = 64;  // a multiple of 4: twobit packs 4 per byte
constexpr int kNotFound = 5;

pb::EncodedChunk TwoBit(uint32_t n) {
  pb::EncodedChunk c;
  c.set_codec(pb::CODEC_TWOBIT);
  c.set_num_elems(n);
  c.set_scale(0.5f);
  c.set_payload(std::string(n / 4, '\x55'));  // every code +1
  return c;
}

std::string Scrape(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  if (!res) return "scrape failed: " + httplib::to_string(res.error());
  if (res->status != 200) return absl::StrCat("scrape status ", res->status);
  return res->body;
}

bool Has(const std::string& text, const std::string& line) {
  return absl::StrContains(text, line + "\n");
}

TEST(ShardPrometheus, ScrapeReportsWhatTheJobDid) {
  TempDir dir;
  const std::string metrics_file = dir.path() + "/metrics.port";
  auto shard = ShardProcess::Start({"--metrics_port=0", "--metrics_port_file=" + metrics_file});
  ASSERT_TRUE(shard.ok()) << shard.status();
  // gs_shard writes the metrics port file before its gRPC port file.
  int metrics_port = 0;
  std::ifstream(metrics_file) >> metrics_port;
  ASSERT_GT(metrics_port, 0);

  pb::CreateJobRequest req;
  req.set_job_id("tb");
  req.mutable_optimizer()->set_type("sgd");
  req.mutable_optimizer()->set_learning_rate(0.1f);
  req.mutable_consistency()->set_mode(pb::SYNC);
  for (uint64_t id : {0, 1}) {
    pb::ChunkInfo* c = req.add_chunks();
    c->set_chunk_id(id);
    c->set_num_elems(kElems);
  }
  req.mutable_membership()->set_epoch(1);
  req.mutable_membership()->add_worker_ids(1);
  req.mutable_membership()->add_worker_ids(2);
  pb::CreateJobResponse resp;
  auto stub = (*shard)->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).ok());

  SessionClient w1((*shard)->Connect()), w2((*shard)->Connect());
  ASSERT_TRUE(w1.Hello("tb", 1).ok());
  ASSERT_TRUE(w2.Hello("tb", 2).ok());
  uint64_t seq = 0;
  for (uint64_t chunk : {0, 1}) {
    ASSERT_EQ(w1.Init(++seq, chunk, std::vector<float>(kElems, 1.0f))->code(), 0);
  }
  // Worker 2 pushes clock 0 and reads at clock 0 (staleness 0). Its pull is
  // answered after its pushes were handled (and timed): one stream, in order.
  for (uint64_t chunk : {0, 1}) {
    auto ack = w2.Push(++seq, chunk, 0, TwoBit(kElems));
    ASSERT_TRUE(ack.ok() && ack->code() == 0) << ack.status();
  }
  auto read0 = w2.Pull(++seq, 0);
  ASSERT_TRUE(read0.ok() && read0->back().code() == 0) << read0.status();
  // Worker 1 completes round 0, replays a push (duplicate), pushes a chunk
  // the shard does not own (rejected), finishes clock 0 and reads at clock 1
  // while worker 2 is still at clock 0 (staleness 1).
  for (uint64_t chunk : {0, 1}) {
    auto ack = w1.Push(++seq, chunk, 0, TwoBit(kElems));
    ASSERT_TRUE(ack.ok() && ack->code() == 0) << ack.status();
  }
  auto dup = w1.Push(++seq, 0, 0, TwoBit(kElems));
  ASSERT_TRUE(dup.ok() && dup->duplicate()) << dup.status();
  auto rejected = w1.Push(++seq, 99, 0, TwoBit(kElems));
  ASSERT_TRUE(rejected.ok() && rejected->code() == kNotFound) << rejected.status();
  ASSERT_TRUE(w1.Clock(1));
  auto read1 = w1.Pull(++seq, 1);
  ASSERT_TRUE(read1.ok() && read1->back().code() == 0) << read1.status();

  const std::string text = Scrape(metrics_port);
  EXPECT_TRUE(Has(text, "gs_shard_jobs 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"tb\",result=\"applied\"} 4")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"tb\",result=\"duplicate\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pushes_total{job=\"tb\",result=\"rejected\"} 1")) << text;
  EXPECT_TRUE(Has(text, absl::StrCat("gs_shard_push_bytes_total{job=\"tb\"} ", 4 * kElems / 4)))
      << text;
  EXPECT_TRUE(Has(text, absl::StrCat("gs_shard_push_fp32_bytes_total{job=\"tb\"} ",
                                     4 * kElems * sizeof(float))))
      << text;
  EXPECT_TRUE(Has(text, "gs_shard_compression_ratio{job=\"tb\"} 16")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pulls_total{job=\"tb\"} 2")) << text;
  // Every push message was timed, whatever its result.
  EXPECT_TRUE(Has(text, "# TYPE gs_shard_push_seconds histogram")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_push_seconds_count{job=\"tb\"} 6")) << text;
  EXPECT_TRUE(Has(text, "# TYPE gs_shard_pull_staleness histogram")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"tb\",le=\"0\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_bucket{job=\"tb\",le=\"1\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_sum{job=\"tb\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_pull_staleness_count{job=\"tb\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_max_staleness{job=\"tb\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_chunk_version_min{job=\"tb\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_chunk_version_max{job=\"tb\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_min_clock{job=\"tb\"} 0")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_clock_lag{job=\"tb\"} 1")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_active_members{job=\"tb\"} 2")) << text;
  EXPECT_TRUE(Has(text, "gs_shard_membership_epoch{job=\"tb\"} 1")) << text;

  pb::DropJobRequest drop;
  drop.set_job_id("tb");
  pb::DropJobResponse dropped;
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::DropJob, drop, &dropped).ok());
  const std::string after = Scrape(metrics_port);
  EXPECT_TRUE(Has(after, "gs_shard_jobs 0")) << after;
  EXPECT_FALSE(absl::StrContains(after, "job=\"tb\"")) << after;
}

TEST(ShardPrometheus, OffByDefault) {
  TempDir dir;
  const std::string metrics_file = dir.path() + "/metrics.port";
  auto shard = ShardProcess::Start({"--metrics_port_file=" + metrics_file});
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_FALSE(std::ifstream(metrics_file).good());
}

}  // namespace
}  // namespace gradstream::testing
