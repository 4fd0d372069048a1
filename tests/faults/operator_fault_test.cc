// Operator sequences through the real binaries:
//   * a shard killed before its first checkpoint comes back without one, takes
//     a live worker's parameters and the job completes;
//   * a worker removed, then a shard restored from a checkpoint older than the
//     removal: the coordinator's epochs replace the restored ones;
//   * bounded staleness scaled 1 -> 2 -> 1 -> 2 with the same worker, and an
//     async scale-down: each change takes effect within a few seconds, the
//     rejoiner never pulls the shards' slowest clock back;
//   * SIGTERM makes a worker leave at once and exit 0; a worker killed after a
//     coordinator restart is removed within one heartbeat timeout.
// A replacement's join clock after a stall is in chaos_fault_test.
// Each test prints its figures on stdout (see docs/failures.md).
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "ps.grpc.pb.h"
#include "tests/faults/fault_testing.h"

namespace gradstream::testing {
namespace {

constexpr float kMinAccuracy = 0.75f;  // the small job reaches ~0.85 without faults

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// The newest epoch whose reason contains `what`, or nullptr.
const v1::MembershipEpoch* FindEpoch(const v1::JobStatus& job, const std::string& what) {
  const v1::MembershipEpoch* found = nullptr;
  for (const auto& e : job.epochs()) {
    if (absl::StrContains(e.reason(), what)) found = &e;
  }
  return found;
}

// Polls until the job has an epoch whose reason contains `what` and its
// clock reached that epoch's effective clock; returns the epoch.
absl::StatusOr<v1::MembershipEpoch> WaitForEpochInEffect(LocalCluster& cluster,
                                                         const std::string& job,
                                                         const std::string& what,
                                                         absl::Duration timeout) {
  v1::MembershipEpoch epoch;
  bool found = false;
  const bool ok = Poll(timeout, [&] {
    auto s = cluster.GetJob(job);
    if (!s.ok()) return false;
    const v1::MembershipEpoch* e = FindEpoch(*s, what);
    if (e == nullptr) return false;
    epoch = *e;
    found = true;
    return s->progress().clock() >= e->effective_clock() || IsTerminal(s->state());
  });
  if (!ok) {
    return absl::DeadlineExceededError(
        absl::StrCat("no epoch '", what, "' in effect", found ? " (planned, not reached)" : ""));
  }
  return epoch;
}

void ExpectCompleted(LocalCluster& cluster, const std::string& job, uint32_t steps,
                     v1::JobStatus* out = nullptr) {
  auto done = cluster.WaitForJob(job, absl::Seconds(120));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->DebugString();
  EXPECT_EQ(done->progress().clock(), steps);
  EXPECT_GE(done->progress().accuracy(), kMinAccuracy) << done->DebugString();
  EXPECT_EQ(done->worker_errors(), 0u) << done->DebugString();
  if (out != nullptr) *out = *done;
}

TEST(Operator, ShardKilledBeforeItsFirstCheckpointIsReinitialized) {
  ClusterOptions options;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());
  constexpr uint32_t kSteps = 600;
  auto id = cluster.Submit(SmallSyncJob("no-checkpoint", 2, kSteps));  // checkpoint_every 0
  ASSERT_TRUE(id.ok()) << id.status();
  auto at = cluster.WaitForClock(*id, 150, absl::Seconds(60));
  ASSERT_TRUE(at.ok()) << at.status();
  const absl::Time killed = absl::Now();
  cluster.KillShard(0);
  ASSERT_TRUE(cluster.RestartShard(0).ok());
  const uint64_t kill_clock = at->progress().clock();
  auto past = cluster.WaitForClock(*id, kill_clock + 50, absl::Seconds(60));
  ASSERT_TRUE(past.ok()) << past.status() << "\n" << ReadFile(cluster.ShardLogPath(0));
  const absl::Duration recovery = absl::Now() - killed;
  // The clock may have passed kill_clock + 50 before the kill took effect
  // (the workers run ahead of the progress the coordinator reports), so the
  // restarted shard's log line is polled for.
  EXPECT_TRUE(Poll(absl::Seconds(60), [&] {
    return absl::StrContains(ReadFile(cluster.ShardLogPath(0)), "resumes without a checkpoint");
  })) << ReadFile(cluster.ShardLogPath(0));
  v1::JobStatus done;
  ExpectCompleted(cluster, *id, kSteps, &done);
  std::printf("shard killed before any checkpoint at clock %llu: job 50 clocks past it %.2f s"
              " after the kill; final accuracy %.3f\n",
              static_cast<unsigned long long>(kill_clock), Seconds(recovery),
              done.progress().accuracy());
  std::fflush(stdout);
  StopAndClean(*std::move(started));
}

TEST(Operator, RestoreOlderThanAWorkerRemovalIsReconciled) {
  ClusterOptions options;
  options.workers = 3;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());
  constexpr uint32_t kSteps = 900;
  auto id = cluster.Submit(SmallSyncJob("old-restore", 3, kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(cluster.WaitForClock(*id, 100, absl::Seconds(60)).ok());
  // A checkpoint now, before the removal below.
  auto stub = v1::ParameterServer::NewStub(
      grpc::CreateChannel(cluster.shard_addresses()[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::CheckpointRequest req;
  req.set_job_id(*id);
  v1::CheckpointResponse ckpt;
  ASSERT_TRUE(stub->Checkpoint(&ctx, req, &ckpt).ok());
  cluster.worker(2).Kill();
  auto removal = WaitForEpochInEffect(cluster, *id, "missed heartbeats", absl::Seconds(30));
  ASSERT_TRUE(removal.ok()) << removal.status();
  ASSERT_TRUE(cluster.WaitForClock(*id, removal->effective_clock() + 20, absl::Seconds(30)).ok());
  const absl::Time killed = absl::Now();
  cluster.KillShard(0);
  ASSERT_TRUE(cluster.RestartShard(0).ok());
  auto past = cluster.WaitForClock(*id, removal->effective_clock() + 100, absl::Seconds(60));
  ASSERT_TRUE(past.ok()) << past.status() << "\n" << ReadFile(cluster.ShardLogPath(0));
  const absl::Duration recovery = absl::Now() - killed;
  v1::JobStatus done;
  ExpectCompleted(cluster, *id, kSteps, &done);
  std::printf("shard restored the checkpoint of clock %llu, older than the removal at clock %llu:"
              " job 100 clocks past the removal %.2f s after the shard kill; accuracy %.3f\n",
              static_cast<unsigned long long>(ckpt.clock()),
              static_cast<unsigned long long>(removal->effective_clock()), Seconds(recovery),
              done.progress().accuracy());
  std::fflush(stdout);
  StopAndClean(*std::move(started));
}

// Scales `job` to `workers` and returns how long until the epoch with
// `reason` was in effect (the job's clock reached it).
absl::StatusOr<absl::Duration> ScaleAndWait(LocalCluster& cluster, const std::string& job,
                                            uint32_t workers, const std::string& reason) {
  const absl::Time t0 = absl::Now();
  auto before = cluster.GetJob(job);
  const size_t epochs_before = before.ok() ? before->epochs_size() : 0;
  if (absl::Status s = cluster.Scale(job, workers); !s.ok()) return s;
  absl::StatusOr<v1::MembershipEpoch> e;
  const bool ok = Poll(absl::Seconds(30), [&] {
    auto s = cluster.GetJob(job);
    if (!s.ok() || static_cast<size_t>(s->epochs_size()) <= epochs_before) return false;
    const v1::MembershipEpoch& last = *s->epochs().rbegin();
    return absl::StrContains(last.reason(), reason) &&
           (s->progress().clock() >= last.effective_clock() || IsTerminal(s->state()));
  });
  if (!ok) {
    return absl::DeadlineExceededError(
        absl::StrCat("'", reason, "' not in effect\n", cluster.Describe(job)));
  }
  return absl::Now() - t0;
}

TEST(Operator, BoundedScaleUpDownUpWithARejoiningWorker) {
  ClusterOptions options;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());
  // Each change is planned about two heartbeats ahead (~2 s), and the last
  // must land before the end. 2 s is 2000-5000 clocks on the hosts seen (8000
  // steps ended before the third change on one); 30000 is 12-60 s of job.
  constexpr uint32_t kSteps = 30000;
  constexpr uint32_t kStaleness = 3;
  v1::JobSpec spec = SmallSyncJob("bounded-scale", 1, kSteps);
  spec.mutable_consistency()->set_mode(v1::BOUNDED);
  spec.mutable_consistency()->set_staleness(kStaleness);
  auto id = cluster.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(cluster.WaitForClock(*id, 200, absl::Seconds(60)).ok());
  absl::Duration worst;
  for (const auto& [n, reason] : std::vector<std::pair<uint32_t, std::string>>{
           {2, "scale up to 2"}, {1, "scale down to 1"}, {2, "scale up to 2"}}) {
    auto took = ScaleAndWait(cluster, *id, n, reason);
    ASSERT_TRUE(took.ok()) << took.status();
    worst = std::max(worst, *took);
    auto moved =
        cluster.WaitForClock(*id, cluster.GetJob(*id)->progress().clock() + 100, absl::Seconds(30));
    ASSERT_TRUE(moved.ok()) << "after '" << reason << "': " << moved.status();
  }
  v1::JobStatus done;
  ExpectCompleted(cluster, *id, kSteps, &done);
  EXPECT_LE(done.progress().max_staleness(), kStaleness);  // not thousands after the rejoin
  // A change is planned ~2 s ahead; a loaded 2-core host has taken 5 s. The
  // defect this holds off (a change never planned, or planned from a stale
  // clock) takes the 30 s the wait allows.
  EXPECT_LE(worst, absl::Seconds(10)) << "a scale took too long to take effect";
  std::printf("bounded (s=%u) scale 1->2->1->2, worker rejoining: slowest change in effect %.2f s"
              " after `scale`; max staleness %llu; accuracy %.3f\n",
              kStaleness, Seconds(worst),
              static_cast<unsigned long long>(done.progress().max_staleness()),
              done.progress().accuracy());
  std::fflush(stdout);
  StopAndClean(*std::move(started));
}

// In async mode a scale-down takes effect within seconds. The clock
// it is planned for lies about two seconds of clocks ahead ([membership plan]),
// so how many clocks depends on the host's speed: this test holds the time a
// user sees, and CoordinatorTest.AsyncScaleDownIsPlannedFromClocksNotPushCounts
// holds exactly which clock the plan starts from (not a push count). A bound
// in clocks here (kSteps / 2 past the ask) failed a CI run that planned 1529
// clocks ahead at ~800 clocks/s, in effect after 2.09 s as intended.
TEST(Operator, AsyncScaleDownTakesEffectWithinSeconds) {
  ClusterOptions options;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());
  constexpr uint32_t kSteps = 3000;
  v1::JobSpec spec = SmallSyncJob("async-scale", 2, kSteps);
  spec.mutable_consistency()->set_mode(v1::ASYNC);
  auto id = cluster.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(cluster.WaitForClock(*id, 300, absl::Seconds(60)).ok());
  const uint64_t asked_at = cluster.GetJob(*id)->progress().clock();
  auto took = ScaleAndWait(cluster, *id, 1, "scale down to 1");
  ASSERT_TRUE(took.ok()) << took.status();
  auto status = cluster.GetJob(*id);
  ASSERT_TRUE(status.ok());
  const uint64_t at = status->epochs().rbegin()->effective_clock();
  EXPECT_LE(*took, absl::Seconds(10)) << "the scale-down took too long to take effect";  // as above
  ExpectCompleted(cluster, *id, kSteps);
  std::printf("async scale-down asked at clock %llu: planned for clock %llu, in effect %.2f s"
              " later\n",
              static_cast<unsigned long long>(asked_at), static_cast<unsigned long long>(at),
              Seconds(*took));
  std::fflush(stdout);
  StopAndClean(*std::move(started));
}

TEST(Operator, SigtermLeavesAtOnceAndACoordinatorRestartKeepsTheTimeout) {
  ClusterOptions options;
  options.workers = 3;
  options.heartbeat_timeout = absl::Seconds(4);
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());
  constexpr uint32_t kSteps = 2000;
  auto id = cluster.Submit(SmallSyncJob("sigterm", 3, kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(cluster.WaitForClock(*id, 100, absl::Seconds(60)).ok());

  // SIGTERM: the worker finishes its clock, leaves and exits 0; the job goes
  // on with the others well before a heartbeat timeout.
  const absl::Time term = absl::Now();
  ASSERT_EQ(::kill(cluster.worker(2).pid(), SIGTERM), 0);
  auto code = cluster.worker(2).Wait(absl::Seconds(20));
  const absl::Duration exited = absl::Now() - term;
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << cluster.worker(2).Log();
  auto left = WaitForEpochInEffect(cluster, *id, "left", absl::Seconds(20));
  ASSERT_TRUE(left.ok()) << left.status();
  const absl::Duration removed = absl::Now() - term;
  EXPECT_LT(removed, options.heartbeat_timeout);

  // A coordinator restart, then a worker killed: removed within one
  // heartbeat timeout of the kill (plus ticks and our polling).
  ASSERT_TRUE(cluster.RestartCoordinator().ok());
  auto moving = cluster.GetJob(*id);
  ASSERT_TRUE(moving.ok());
  ASSERT_TRUE(
      cluster.WaitForClock(*id, moving->progress().clock() + 50, absl::Seconds(30)).ok());
  const absl::Time kill = absl::Now();
  cluster.worker(1).Kill();
  auto reaped = WaitForEpochInEffect(cluster, *id, "missed heartbeats", absl::Seconds(30));
  ASSERT_TRUE(reaped.ok()) << reaped.status();
  const absl::Duration stall = absl::Now() - kill;
  // Under two timeouts (the defect: a restart that restarts every timer late).
  EXPECT_LE(stall, options.heartbeat_timeout + absl::Seconds(3));

  // The killed worker's place is empty now; the job completes with one. The
  // stopped worker was never taken back (it said it was stopping).
  v1::JobStatus done;
  ExpectCompleted(cluster, *id, kSteps, &done);
  const std::set<uint64_t> stayed(left->worker_ids().begin(), left->worker_ids().end());
  for (const v1::MembershipEpoch& e : done.epochs()) {
    if (e.epoch() <= left->epoch()) continue;
    for (uint64_t w : e.worker_ids()) {
      EXPECT_TRUE(stayed.count(w) > 0) << "epoch " << e.epoch() << " (" << e.reason()
                                       << ") took worker " << w << " back";
    }
  }
  std::printf("SIGTERM: worker exited 0 after %.2f s, removed from the job %.2f s after the signal"
              " (heartbeat timeout %.0f s); after a coordinator restart a kill -9 stalled the job"
              " %.2f s\n",
              Seconds(exited), Seconds(removed), Seconds(options.heartbeat_timeout),
              Seconds(stall));
  std::fflush(stdout);
  StopAndClean(*std::move(started));
}

}  // namespace
}  // namespace gradstream::testing
