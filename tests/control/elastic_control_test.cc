// Elastic membership end to end with real binaries on loopback: gs_shard x2,
// gs_coordinator, gs_worker xN and the gradstream CLI.
//   * a sync job scaled 2 -> 4 -> 1 while it runs finishes every step, and
//     every sync round's contributors are exactly the members of the epoch
//     its clock falls in (checked from the shards' round records);
//   * the same under bounded staleness (every step, staleness within bound);
//   * kill -9 of a worker during a sync job: the job goes on with the others
//     within heartbeat timeout + a round, and finishes. Before the kill, each
//     worker's /metrics (--metrics_port) reports its rank and progress.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps.grpc.pb.h"
#include "tests/control/control_testing.h"

namespace gradstream::testing {
namespace {

namespace v1 = gradstream::v1;

constexpr absl::Duration kJobDeadline = absl::Seconds(240);
constexpr char kHeartbeatTimeout[] = "3s";

template <typename Req, typename Resp, typename Stub, typename Method>
grpc::Status Unary(Stub* stub, Method method, const Req& req, Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return (stub->*method)(&ctx, req, resp);
}

// GET /metrics from 127.0.0.1:`port` ("" on failure).
std::string ScrapeMetrics(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

// The value of the sample line that starts with `series` (name plus
// labels), or NaN when there is none.
double SampleValue(const std::string& text, const std::string& series) {
  const std::string prefix = series + " ";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    const size_t begin = at + prefix.size();
    double v = 0;
    if (absl::SimpleAtod(text.substr(begin, text.find('\n', begin) - begin), &v)) return v;
  }
  return std::nan("");
}

// Polls every shard's round records in the background (the shards keep a
// bounded history) and keeps every (chunk, clock) -> record seen.
class RoundCollector {
 public:
  RoundCollector(std::vector<std::string> shards, std::string job)
      : shards_(std::move(shards)), job_(std::move(job)) {
    for (const auto& a : shards_) {
      stubs_.push_back(
          v1::ParameterServer::NewStub(grpc::CreateChannel(a, grpc::InsecureChannelCredentials())));
    }
    thread_ = std::thread([this] {
      while (!stop_) {
        Poll();
        absl::SleepFor(absl::Milliseconds(100));
      }
    });
  }
  ~RoundCollector() { Stop(); }

  void Stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
    Poll();
  }

  void Poll() {
    for (size_t i = 0; i < stubs_.size(); ++i) {
      v1::StatsRequest req;
      req.set_job_id(job_);
      req.set_include_rounds(true);
      v1::StatsResponse resp;
      if (!Unary(stubs_[i].get(), &v1::ParameterServer::Stub::GetStats, req, &resp).ok()) continue;
      absl::MutexLock lock(&mu_);
      stats_[i] = resp;
      for (const auto& r : resp.rounds()) rounds_[{r.chunk_id(), r.clock()}] = r;
    }
  }

  std::map<std::pair<uint64_t, uint64_t>, v1::RoundRecord> rounds() {
    absl::MutexLock lock(&mu_);
    return rounds_;
  }
  std::map<size_t, v1::StatsResponse> stats() {
    absl::MutexLock lock(&mu_);
    return stats_;
  }

 private:
  const std::vector<std::string> shards_;
  const std::string job_;
  std::vector<std::unique_ptr<v1::ParameterServer::Stub>> stubs_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  absl::Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, v1::RoundRecord> rounds_ ABSL_GUARDED_BY(mu_);
  std::map<size_t, v1::StatsResponse> stats_ ABSL_GUARDED_BY(mu_);
};

class ElasticTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Stop the processes before their directory goes.
    StopAll();
    RemoveTestDir(dir_);
  }
  void StopAll() {
    workers_.clear();
    coord_.process.reset();
    shards_.clear();
  }
  void SetUp() override {
#ifndef GS_WORKER_BINARY
    GTEST_SKIP() << "gs_worker was not built";
#else
    if (!HaveShardBinary()) GTEST_SKIP() << "gs_shard was not built";
    dir_ = MakeTempDir("elastic_control_test");
    for (int i = 0; i < 2; ++i) {
      auto s = StartShard(dir_, i);
      ASSERT_TRUE(s.ok()) << s.status();
      shards_.push_back(*std::move(s));
    }
    ASSERT_TRUE(StartCoord(0).ok());
#endif
  }

  // The coordinator on `port` (0 = any), on the same state file each time.
  absl::Status StartCoord(int port) {
    auto c = StartCoordinator(
        dir_, dir_ + "/state",
        {"--shards=" + shards_[0].address() + "," + shards_[1].address(),
         std::string("--heartbeat_timeout=") + kHeartbeatTimeout, "--start_grace=60s"},
        port);
    if (!c.ok()) return c.status();
    coord_ = *std::move(c);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(coord_.address(), grpc::InsecureChannelCredentials()));
    return absl::OkStatus();
  }

  void StartWorkers(int n) {
#ifdef GS_WORKER_BINARY
    for (int i = 0; i < n; ++i) {
      const int k = static_cast<int>(workers_.size());
      auto w =
          Process::Start(GS_WORKER_BINARY,
                         {"--coordinator=" + coord_.address(), "--device=cpu",
                          absl::StrCat("--name=w", k), "--metrics_port=0",
                          absl::StrCat("--metrics_port_file=", dir_, "/worker", k, ".metrics")},
                         absl::StrCat(dir_, "/worker", k, ".log"));
      ASSERT_TRUE(w.ok()) << w.status();
      workers_.push_back(*std::move(w));
    }
    ASSERT_TRUE(WaitFor([&](const v1::ClusterStatus& c) {
      return c.workers_size() >= static_cast<int>(workers_.size());
    }));
#endif
  }

  v1::JobStatus Job(const std::string& id) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::JobStatus job;
    (void)Unary(stub_.get(), &v1::Coordinator::Stub::GetJob, req, &job);
    return job;
  }

  bool WaitFor(const std::function<bool(const v1::ClusterStatus&)>& done) {
    const absl::Time deadline = absl::Now() + kDeadline;
    while (absl::Now() < deadline) {
      v1::ClusterStatus c;
      if (Unary(stub_.get(), &v1::Coordinator::Stub::GetCluster, v1::GetClusterRequest(), &c)
              .ok() &&
          done(c)) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }

  // Polls the job until `done` holds; fails (with logs) at `timeout`.
  v1::JobStatus WaitJob(const std::string& id,
                        const std::function<bool(const v1::JobStatus&)>& done,
                        absl::Duration timeout = kJobDeadline) {
    const absl::Time deadline = absl::Now() + timeout;
    v1::JobStatus job;
    while (absl::Now() < deadline) {
      job = Job(id);
      if (done(job)) return job;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "timed out; job: " << job.DebugString() << "\ncoordinator log:\n"
                  << coord_.process->Log();
    return job;
  }

  std::string Submit(std::vector<std::string> flags) {
    flags.insert(flags.begin(), "submit");
    flags.push_back("--json");
    CommandResult r = Cli(coord_.address(), flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseJson<v1::SubmitJobResponse>(r.out).job_id();
  }

  void Scale(const std::string& id, int n) {
    CommandResult r = Cli(coord_.address(), {"scale", id, absl::StrCat("--workers=", n)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::vector<std::string> ShardAddresses() const {
    return {shards_[0].address(), shards_[1].address()};
  }

  // The epoch whose clock range holds `clock`.
  static const v1::MembershipEpoch* EpochAt(const v1::JobStatus& job, uint64_t clock) {
    const v1::MembershipEpoch* found = nullptr;
    for (const auto& e : job.epochs()) {
      if (e.effective_clock() <= clock) found = &e;
    }
    return found;
  }

  // Every recorded round counted exactly the members of the epoch its clock
  // falls in. One exception is inherent: a worker that dies in the middle of
  // clock c may have pushed some chunks of c, and the rounds of those chunks
  // may complete (with it) before the coordinator removes it; such a round is
  // applied under the previous epoch, which the shard records. The removal
  // takes effect at c, or at c - 1 when a shard had not yet heard the dead
  // worker's advance to c (each shard hears it on its own stream; seen once in
  // CI): so rounds at the removal's clock and the one after it.
  // Returns how many rounds were checked per epoch.
  std::map<uint64_t, int> CheckRounds(
      const v1::JobStatus& job,
      const std::map<std::pair<uint64_t, uint64_t>, v1::RoundRecord>& rounds) {
    std::map<uint64_t, int> per_epoch;
    int mismatches = 0;
    for (const auto& [key, r] : rounds) {
      const v1::MembershipEpoch* e = EpochAt(job, r.clock());
      if (e == nullptr) continue;
      if (r.epoch() + 1 == e->epoch() && r.clock() <= e->effective_clock() + 1 &&
          e->reason().find("missed heartbeats") != std::string::npos) {
        e = &job.epochs(static_cast<int>(r.epoch()) - 1);
      }
      std::set<uint64_t> want(e->worker_ids().begin(), e->worker_ids().end());
      std::set<uint64_t> got(r.contributors().begin(), r.contributors().end());
      // The second exception: a shard that heard of a join only after it
      // had closed rounds past the join clock closed them with the previous
      // epoch's members, which it records, and settled the joiners' pushes
      // for them ([late join] in server/shard/job.cc). Counted, not failed.
      if (want != got && r.epoch() + 1 == e->epoch() && e->epoch() >= 2) {
        const v1::MembershipEpoch& prev = job.epochs(static_cast<int>(e->epoch()) - 2);
        std::set<uint64_t> before(prev.worker_ids().begin(), prev.worker_ids().end());
        if (got == before && std::includes(want.begin(), want.end(), before.begin(),
                                           before.end())) {
          ++late_join_rounds_;
          want = before;
        }
      }
      if (want != got && mismatches++ < 10) {
        ADD_FAILURE() << "chunk " << r.chunk_id() << " clock " << r.clock() << " (epoch "
                      << e->epoch() << " from clock " << e->effective_clock() << ", shard says "
                      << r.epoch() << "): contributors {"
                      << absl::StrJoin(got, ",") << "}, members {" << absl::StrJoin(want, ",")
                      << "}";
      }
      ++per_epoch[e->epoch()];
    }
    EXPECT_EQ(mismatches, 0);
    if (late_join_rounds_ > 0) {
      std::cerr << late_join_rounds_ << " rounds closed before their shard heard of a join\n";
    }
    return per_epoch;
  }
  int late_join_rounds_ = 0;

  std::string dir_;
  std::vector<Server> shards_;
  Server coord_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::vector<std::unique_ptr<Process>> workers_;
};

constexpr uint32_t kSteps = 8000;

TEST_F(ElasticTest, SyncJobScaledTwoFourOneFinishesEveryStep) {
  StartWorkers(4);
  const std::string id = Submit(
      {"--name=elastic-sync", "--workers=2", absl::StrCat("--steps=", kSteps), "--hidden=64"});
  RoundCollector rounds(ShardAddresses(), id);
  WaitJob(id, [](const v1::JobStatus& j) { return j.progress().clock() >= 100; });
  Scale(id, 4);
  v1::JobStatus up = WaitJob(id, [](const v1::JobStatus& j) {
    return j.epochs_size() >= 2 && j.committed_epoch() >= 2 &&
           j.progress().clock() >= j.epochs(1).effective_clock() + 100;
  });
  ASSERT_GE(up.epochs_size(), 2);
  EXPECT_EQ(up.epochs(1).worker_ids_size(), 4);
  ASSERT_LT(up.progress().clock(), kSteps) << "the job finished before the scale-down";
  Scale(id, 1);
  v1::JobStatus done =
      WaitJob(id, [](const v1::JobStatus& j) { return j.state() >= v1::COMPLETED; });
  rounds.Stop();
  ASSERT_EQ(done.state(), v1::COMPLETED) << done.message();
  EXPECT_EQ(done.progress().clock(), kSteps);
  ASSERT_EQ(done.epochs_size(), 3) << done.DebugString();
  EXPECT_EQ(done.epochs(0).worker_ids_size(), 2);
  EXPECT_EQ(done.epochs(1).worker_ids_size(), 4);
  EXPECT_EQ(done.epochs(2).worker_ids_size(), 1);
  // The progress history covers the run, through every membership change,
  // and a finished job keeps its last throughput (see [progress history]).
  // A point comes with each heartbeat that brings a newer evaluation, so how
  // many depends on the run's seconds, not its clocks (9 to 11 here): it
  // must start before the scale-down and end at the last evaluation.
  ASSERT_GE(done.history_size(), 3) << done.DebugString();
  EXPECT_LT(done.history(0).clock(), done.epochs(2).effective_clock()) << done.DebugString();
  for (int i = 1; i < done.history_size(); ++i) {
    EXPECT_LT(done.history(i - 1).clock(), done.history(i).clock());
    EXPECT_LE(done.history(i - 1).bytes_pushed(), done.history(i).bytes_pushed());
  }
  EXPECT_GE(done.history(done.history_size() - 1).clock(), kSteps - 100);
  // A finished job shows its run average (see [run average]): every clock
  // trained at least one batch of 32 on each of at least one member.
  EXPECT_GE(done.progress().samples(), uint64_t{kSteps} * 32);
  EXPECT_LE(done.progress().samples(), uint64_t{kSteps} * 32 * 4);
  const double seconds = (done.finished_unix_ms() - done.started_unix_ms()) / 1000.0;
  ASSERT_GT(seconds, 0);
  EXPECT_NEAR(done.progress().samples_per_sec(), done.progress().samples() / seconds,
              1e-3 * done.progress().samples_per_sec());
  // Every chunk got exactly one update per clock (on both shards: an empty
  // map would check nothing).
  ASSERT_EQ(rounds.stats().size(), 2u) << "a shard never answered GetStats";
  for (const auto& [i, s] : rounds.stats()) {
    EXPECT_EQ(s.min_version(), kSteps) << "shard " << i;
    EXPECT_EQ(s.max_version(), kSteps) << "shard " << i;
  }
  std::map<uint64_t, int> checked = CheckRounds(done, rounds.rounds());
  for (uint64_t e = 1; e <= 3; ++e) EXPECT_GT(checked[e], 0) << "no rounds seen in epoch " << e;
}

TEST_F(ElasticTest, BoundedJobScaledTwoFourOneFinishesEveryStep) {
  StartWorkers(4);
  constexpr uint32_t kStaleness = 2;
  const std::string id =
      Submit({"--name=elastic-ssp", "--workers=2", absl::StrCat("--steps=", kSteps),
              "--consistency=bounded", absl::StrCat("--staleness=", kStaleness)});
  WaitJob(id, [](const v1::JobStatus& j) { return j.progress().clock() >= 100; });
  Scale(id, 4);
  v1::JobStatus up = WaitJob(id, [](const v1::JobStatus& j) {
    return j.epochs_size() >= 2 && j.committed_epoch() >= 2 &&
           j.progress().clock() >= j.epochs(1).effective_clock() + 100;
  });
  ASSERT_LT(up.progress().clock(), kSteps) << "the job finished before the scale-down";
  Scale(id, 1);
  v1::JobStatus done =
      WaitJob(id, [](const v1::JobStatus& j) { return j.state() >= v1::COMPLETED; });
  ASSERT_EQ(done.state(), v1::COMPLETED) << done.message();
  EXPECT_EQ(done.progress().clock(), kSteps);
  ASSERT_EQ(done.epochs_size(), 3);
  EXPECT_EQ(done.epochs(2).worker_ids_size(), 1);
  // The shards enforced the bound.
  for (const auto& address : ShardAddresses()) {
    auto ps = v1::ParameterServer::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    v1::StatsRequest req;
    req.set_job_id(id);
    v1::StatsResponse s;
    ASSERT_TRUE(Unary(ps.get(), &v1::ParameterServer::Stub::GetStats, req, &s).ok());
    EXPECT_LE(s.max_staleness(), kStaleness) << address;
  }
}

TEST_F(ElasticTest, KilledWorkerIsRemovedAndTheJobFinishes) {
  StartWorkers(2);
  const std::string id =
      Submit({"--name=kill9", "--workers=2", "--codec=ternary", "--min_compress_elems=1",
              absl::StrCat("--steps=", kSteps / 2)});
  RoundCollector rounds(ShardAddresses(), id);
  v1::JobStatus running = WaitJob(id, [](const v1::JobStatus& j) {
    return j.progress().clock() >= 200 && j.members_size() == 2;
  });
  // Kill the worker with rank 1.
  uint64_t victim_id = 0;
  for (const auto& m : running.members()) {
    if (m.rank() == 1) victim_id = m.worker_id();
  }
  v1::ClusterStatus cluster;
  ASSERT_TRUE(
      Unary(stub_.get(), &v1::Coordinator::Stub::GetCluster, v1::GetClusterRequest(), &cluster)
          .ok());
  std::string victim_name;
  for (const auto& w : cluster.workers()) {
    if (w.worker_id() == victim_id) victim_name = w.name();
  }
  ASSERT_FALSE(victim_name.empty());
  const int victim = std::stoi(victim_name.substr(1));
  // Each worker serves its own view of the job: identity, steps, traffic.
  std::set<std::string> ranks;
  for (int k = 0; k < 2; ++k) {
    auto port = WaitForPortFile(absl::StrCat(dir_, "/worker", k, ".metrics"), *workers_[k],
                                kDeadline);
    ASSERT_TRUE(port.ok()) << port.status();
    const std::string text = ScrapeMetrics(*port);
    const std::string job = absl::StrCat("{job=\"", id, "\"}");
    const std::string info = absl::StrCat("gs_worker_info{device=\"cpu\",job=\"", id, "\",rank=\"");
    const size_t at = text.find(info);
    ASSERT_NE(at, std::string::npos) << text;
    ranks.insert(text.substr(at + info.size(), 1));
    // The coordinator's clock is the slowest worker's, which both had passed.
    EXPECT_GE(SampleValue(text, "gs_worker_clock" + job), 200) << text;
    EXPECT_EQ(SampleValue(text, "gs_worker_world_size" + job), 2) << text;
    const double bytes = SampleValue(text, "gs_worker_push_bytes_total" + job);
    const double fp32 = SampleValue(text, "gs_worker_push_fp32_bytes_total" + job);
    EXPECT_GT(bytes, 0) << text;
    EXPECT_GT(fp32, bytes) << text;  // ternary by hand: every tensor, small ones too
    EXPECT_NEAR(SampleValue(text, "gs_worker_compression_ratio" + job), fp32 / bytes, 1e-6)
        << text;
    EXPECT_GT(SampleValue(text, "gs_worker_loss" + job), 0) << text;
    EXPECT_EQ(SampleValue(text, "gs_worker_reconnects_total" + job), 0) << text;
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"}));
  workers_[victim]->Kill(SIGKILL);
  const absl::Time killed = absl::Now();
  // Removed after the heartbeat timeout, and the job moves again.
  v1::JobStatus after = WaitJob(
      id,
      [](const v1::JobStatus& j) {
        return j.epochs_size() >= 2 && j.committed_epoch() >= 2 &&
               j.progress().clock() > j.epochs(1).effective_clock() + 10;
      },
      absl::Seconds(3) + absl::Seconds(30));
  ASSERT_GE(after.epochs_size(), 2);
  EXPECT_EQ(after.epochs(1).worker_ids_size(), 1);
  EXPECT_NE(after.epochs(1).reason().find("missed heartbeats"), std::string::npos);
  std::cerr << "job moved again " << absl::FormatDuration(absl::Now() - killed)
            << " after the kill\n";
  v1::JobStatus done =
      WaitJob(id, [](const v1::JobStatus& j) { return j.state() >= v1::COMPLETED; });
  rounds.Stop();
  ASSERT_EQ(done.state(), v1::COMPLETED) << done.message();
  EXPECT_EQ(done.progress().clock(), kSteps / 2);
  ASSERT_EQ(rounds.stats().size(), 2u) << "a shard never answered GetStats";
  for (const auto& [i, s] : rounds.stats()) EXPECT_EQ(s.min_version(), kSteps / 2);
  std::map<uint64_t, int> checked = CheckRounds(done, rounds.rounds());
  EXPECT_GT(checked[2], 0) << "no rounds seen after the removal";
}

TEST_F(ElasticTest, JobContinuesAcrossCoordinatorKill9) {
  StartWorkers(2);
  constexpr uint32_t kRestartSteps = 4000;
  const std::string id =
      Submit({"--name=restart", "--workers=2", absl::StrCat("--steps=", kRestartSteps)});
  v1::JobStatus before = WaitJob(id, [](const v1::JobStatus& j) {
    return j.progress().clock() >= 200 && j.members_size() == 2;
  });
  ASSERT_LT(before.progress().clock(), kRestartSteps - 500) << "too fast to restart mid-job";
  const int port = coord_.port;
  coord_.process->Kill(SIGKILL);
  // Workers keep training against the shards while the coordinator is gone;
  // it comes back on the same address with the same state file.
  ASSERT_TRUE(StartCoord(port).ok());
  v1::JobStatus done =
      WaitJob(id, [](const v1::JobStatus& j) { return j.state() >= v1::COMPLETED; });
  ASSERT_EQ(done.state(), v1::COMPLETED) << done.message();
  EXPECT_EQ(done.progress().clock(), kRestartSteps);
  // Nobody was removed or replaced: the workers re-attached with the
  // identity they had.
  EXPECT_EQ(done.epochs_size(), 1) << done.DebugString();
  v1::ClusterStatus cluster;
  ASSERT_TRUE(
      Unary(stub_.get(), &v1::Coordinator::Stub::GetCluster, v1::GetClusterRequest(), &cluster)
          .ok());
  ASSERT_EQ(cluster.workers_size(), 2);
  for (const auto& w : cluster.workers()) {
    EXPECT_EQ(w.incarnation(), 1u);
    EXPECT_TRUE(w.healthy());
  }
}

}  // namespace
}  // namespace gradstream::testing
