// gs_coordinator with real gs_shard binaries on loopback: shard registration,
// jobs installed on the shards (CreateJob) and dropped on cancel (DropJob),
// shard health, the job table surviving kill -9 of the coordinator, and the
// coordinator's /metrics endpoint.
//
// Elastic membership with real workers (scale 2 -> 4 -> 1, kill -9 of a
// worker, a job continuing across a coordinator restart) needs the worker
// binary and is left to the integration tests that come with it.
#include <httplib.h>

#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps.grpc.pb.h"
#include "tests/control/control_testing.h"

namespace gradstream::testing {
namespace {

namespace v1 = gradstream::v1;

// Polls `done` until it returns true or kDeadline passes.
template <typename F>
bool Eventually(F done) {
  const absl::Time deadline = absl::Now() + kDeadline;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

grpc::Status ShardStats(const std::string& address, const std::string& job) {
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::StatsRequest req;
  req.set_job_id(job);
  v1::StatsResponse resp;
  return stub->GetStats(&ctx, req, &resp);
}

v1::JobStatus GetJobWithMap(const std::string& coordinator, const std::string& job) {
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(coordinator, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetJobRequest req;
  req.set_job_id(job);
  req.set_include_shard_map(true);
  v1::JobStatus out;
  grpc::Status s = stub->GetJob(&ctx, req, &out);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

template <typename T>
T CliJson(const std::string& address, std::vector<std::string> args) {
  args.push_back("--json");
  CommandResult r = Cli(address, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string error;
  T msg = ParseJson<T>(r.out, &error);
  EXPECT_TRUE(error.empty()) << error;
  return msg;
}

class CoordinatorControlTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Stop the processes before their directory goes.
    StopAll();
    RemoveTestDir(dir_);
  }
  void StopAll() {
    coord_.process.reset();
    shards_.clear();
  }
  void SetUp() override {
    if (!HaveShardBinary()) GTEST_SKIP() << "gs_shard was not built";
    dir_ = MakeTempDir("coordinator_control_test");
    for (int i = 0; i < 2; ++i) {
      auto s = StartShard(dir_, i);
      ASSERT_TRUE(s.ok()) << s.status();
      shards_.push_back(*std::move(s));
    }
    ASSERT_TRUE(StartCoord().ok());
  }

  absl::Status StartCoord() {
    auto c =
        StartCoordinator(dir_, dir_ + "/state",
                         {"--shards=" + shards_[0].address() + "," + shards_[1].address(),
                          "--metrics_port=0", "--metrics_port_file=" + dir_ + "/metrics.port"});
    if (!c.ok()) return c.status();
    coord_ = *std::move(c);
    return absl::OkStatus();
  }

  std::string dir_;
  std::vector<Server> shards_;
  Server coord_;
};

TEST_F(CoordinatorControlTest, JobIsInstalledOnShardsAndDroppedOnCancel) {
  auto a = CliJson<v1::SubmitJobResponse>(coord_.address(),
                                          {"submit", "--name=a", "--workers=2", "--hidden=64,32"});
  auto b = CliJson<v1::SubmitJobResponse>(coord_.address(), {"submit", "--name=b"});
  // CreateJob reached both shards for both jobs.
  for (const auto& shard : shards_) {
    EXPECT_TRUE(Eventually([&] { return ShardStats(shard.address(), a.job_id()).ok(); }))
        << shard.process->Log();
    EXPECT_TRUE(Eventually([&] { return ShardStats(shard.address(), b.job_id()).ok(); }));
  }
  // The map covers the model over both shards, balanced by bytes.
  v1::JobStatus job = GetJobWithMap(coord_.address(), a.job_id());
  ASSERT_EQ(job.shard_map().shards_size(), 2);
  EXPECT_EQ(job.shard_map().tensors_size(), 6);  // fc1..fc3, weight and bias
  EXPECT_EQ(job.shard_map().tensors(0).name(), "fc1.weight");
  EXPECT_EQ(job.shard_map().tensors(0).num_elems(), 20u * 64);
  // A job that names no codec pushes tensors this small fp32 ([small tensors exact]).
  EXPECT_EQ(job.shard_map().tensors(0).codec(), "none");
  uint64_t bytes[2] = {0, 0};
  for (const auto& c : job.shard_map().chunks()) bytes[c.shard()] += 4 * c.num_elems();
  EXPECT_GT(bytes[0], 0u);
  EXPECT_GT(bytes[1], 0u);
  EXPECT_EQ(job.state(), v1::PENDING);
  EXPECT_TRUE(absl::StrContains(job.message(), "waiting for workers")) << job.message();

  // Cancel: DropJob reaches the shards.
  ASSERT_EQ(Cli(coord_.address(), {"cancel", b.job_id()}).exit_code, 0);
  for (const auto& shard : shards_) {
    EXPECT_TRUE(Eventually([&] {
      return ShardStats(shard.address(), b.job_id()).error_code() == grpc::StatusCode::NOT_FOUND;
    }));
    EXPECT_TRUE(ShardStats(shard.address(), a.job_id()).ok());
  }
}

TEST_F(CoordinatorControlTest, ClusterShowsShardHealth) {
  auto healthy = [&](int want) {
    auto c = CliJson<v1::ClusterStatus>(coord_.address(), {"cluster"});
    int n = 0;
    for (const auto& s : c.shards()) n += s.healthy();
    return c.shards_size() == 2 && n == want;
  };
  EXPECT_TRUE(Eventually([&] { return healthy(2); }));
  CommandResult human = Cli(coord_.address(), {"cluster"});
  EXPECT_TRUE(absl::StrContains(human.out, shards_[0].address())) << human.out;
  shards_[1].process->Kill();
  EXPECT_TRUE(Eventually([&] { return healthy(1); }));
  human = Cli(coord_.address(), {"cluster"});
  EXPECT_TRUE(absl::StrContains(human.out, "DOWN")) << human.out;
}

TEST_F(CoordinatorControlTest, JobTableSurvivesKill9) {
  auto a =
      CliJson<v1::SubmitJobResponse>(coord_.address(), {"submit", "--name=keep", "--workers=2"});
  auto b = CliJson<v1::SubmitJobResponse>(coord_.address(), {"submit", "--name=gone"});
  ASSERT_EQ(Cli(coord_.address(), {"cancel", b.job_id()}).exit_code, 0);
  ASSERT_EQ(Cli(coord_.address(), {"scale", a.job_id(), "--workers=3"}).exit_code, 0);
  for (const auto& shard : shards_) {
    ASSERT_TRUE(Eventually([&] { return ShardStats(shard.address(), a.job_id()).ok(); }));
  }
  const v1::JobStatus before = GetJobWithMap(coord_.address(), a.job_id());

  coord_.process->Kill(SIGKILL);
  ASSERT_TRUE(StartCoord().ok());

  auto list = CliJson<v1::ListJobsResponse>(coord_.address(), {"list"});
  ASSERT_EQ(list.jobs_size(), 2);
  auto after = CliJson<v1::JobStatus>(coord_.address(), {"status", a.job_id()});
  EXPECT_EQ(after.spec().name(), "keep");
  EXPECT_EQ(after.desired_workers(), 3u);
  EXPECT_EQ(after.state(), v1::PENDING);
  EXPECT_EQ(CliJson<v1::JobStatus>(coord_.address(), {"status", b.job_id()}).state(),
            v1::CANCELLED);
  // The same shard map: nobody recomputes it.
  const v1::JobStatus with_map = GetJobWithMap(coord_.address(), a.job_id());
  EXPECT_EQ(with_map.shard_map().SerializeAsString(), before.shard_map().SerializeAsString());
  // Ids are not reused.
  auto c = CliJson<v1::SubmitJobResponse>(coord_.address(), {"submit"});
  EXPECT_EQ(c.job_id(), "job-000003");
  // The shards kept the job (the new coordinator's CreateJob is answered
  // AlreadyExists) and are healthy again.
  EXPECT_TRUE(Eventually([&] {
    auto cluster = CliJson<v1::ClusterStatus>(coord_.address(), {"cluster"});
    return cluster.shards_size() == 2 && cluster.shards(0).healthy() && cluster.shards(1).healthy();
  }));
  for (const auto& shard : shards_) EXPECT_TRUE(ShardStats(shard.address(), a.job_id()).ok());
}

TEST_F(CoordinatorControlTest, ServesPrometheusMetrics) {
  auto port = WaitForPortFile(dir_ + "/metrics.port", *coord_.process, kDeadline);
  ASSERT_TRUE(port.ok()) << port.status();
  CliJson<v1::SubmitJobResponse>(coord_.address(), {"submit"});
  httplib::Client client("127.0.0.1", *port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  EXPECT_TRUE(Eventually([&] {
    auto res = client.Get("/metrics");
    return res && res->status == 200 &&
           absl::StrContains(res->body, "gs_coordinator_jobs{state=\"PENDING\"} 1") &&
           absl::StrContains(res->body, "gs_coordinator_shards{health=\"healthy\"} 2") &&
           absl::StrContains(res->body,
                             "gs_coordinator_rpcs_total{code=\"OK\",method=\"SubmitJob\"} 1");
  }));
}

}  // namespace
}  // namespace gradstream::testing
