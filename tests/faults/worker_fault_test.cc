// A worker that stops answering (SIGSTOP: the process is alive, its sockets
// open, but it neither heartbeats nor trains) during a sync job:
//   * the coordinator removes it within heartbeat timeout + slack, and the
//     job goes on with the others (the sync rounds re-normalize);
//   * after SIGCONT the old incarnation is refused (its heartbeat gets
//     FAILED_PRECONDITION), it registers again under the same worker id with
//     a higher incarnation, and, since the job is one worker short, it joins
//     the job again and trains;
//   * the job completes every step.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_testing.h"

namespace gradstream::testing {
namespace {

constexpr absl::Duration kHeartbeatTimeout = absl::Seconds(2);
// The coordinator tells workers to heartbeat every timeout / 5, and reaps
// silent ones on its tick (CoordinatorOptions::tick_interval).
constexpr absl::Duration kHeartbeatInterval = absl::Milliseconds(400);
constexpr absl::Duration kTick = absl::Milliseconds(100);
// Scheduling slack on a loaded 2-core machine: 3 CPU-bound workers and 2
// shards compete with the coordinator's ticker, plus our 20 ms polling.
constexpr absl::Duration kSlack = absl::Seconds(2);
constexpr uint32_t kSteps = 2400;

v1::ClusterStatus Cluster(LocalCluster& c) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ClusterStatus cs;
  (void)c.coordinator()->GetCluster(&ctx, v1::GetClusterRequest(), &cs);
  return cs;
}

const v1::WorkerStatus* FindWorker(const v1::ClusterStatus& cs, uint64_t id) {
  for (const auto& w : cs.workers()) {
    if (w.worker_id() == id) return &w;
  }
  return nullptr;
}

const v1::JobMember* FindMember(const v1::JobStatus& job, uint64_t id) {
  for (const auto& m : job.members()) {
    if (m.worker_id() == id) return &m;
  }
  return nullptr;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

TEST(Faults, SigstopWorkerIsRemovedAndRejoinsAsNewIncarnation) {
  ClusterOptions options;
  options.shards = 2;
  options.workers = 3;
  options.heartbeat_timeout = kHeartbeatTimeout;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());

  auto id = cluster.Submit(SmallSyncJob("sigstop", 3, kSteps));
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job = *id;
  v1::JobStatus status;
  auto job_now = [&] {
    auto s = cluster.GetJob(job);
    if (s.ok()) status = *s;
    return s.ok();
  };
  ASSERT_TRUE(Poll(absl::Seconds(60), [&] {
    return job_now() && status.members_size() == 3 && status.committed_epoch() >= 1 &&
           status.progress().clock() >= 30;
  })) << status.DebugString();

  // The victim: the member with rank 2 (rank 0 initializes and evaluates; any
  // member would do).
  uint64_t victim = 0;
  for (const auto& m : status.members()) {
    if (m.rank() == 2) victim = m.worker_id();
  }
  ASSERT_NE(victim, 0u) << status.DebugString();
  const v1::ClusterStatus before = Cluster(cluster);
  const v1::WorkerStatus* vw = FindWorker(before, victim);
  ASSERT_NE(vw, nullptr);
  const uint64_t old_incarnation = vw->incarnation();
  int index = -1;
  ASSERT_TRUE(absl::StartsWith(vw->name(), "test-worker-")) << vw->name();
  ASSERT_TRUE(absl::SimpleAtoi(vw->name().substr(12), &index)) << vw->name();
  Process& proc = cluster.worker(index);

  // --- SIGSTOP: removed after the heartbeat timeout.
  ASSERT_EQ(::kill(proc.pid(), SIGSTOP), 0);
  const absl::Time stopped = absl::Now();
  const std::string reason = absl::StrCat("worker ", victim, " missed heartbeats");
  int removal = -1;  // index of the epoch that removed it
  const absl::Duration detect_bound = kHeartbeatTimeout + kTick + kSlack;
  ASSERT_TRUE(Poll(detect_bound + absl::Seconds(20), [&] {
    if (!job_now()) return false;
    for (int e = 0; e < status.epochs_size(); ++e) {
      if (status.epochs(e).reason() == reason) removal = e;
    }
    return removal >= 0;
  })) << "never removed: " << status.DebugString();
  const absl::Duration detected = absl::Now() - stopped;
  std::printf("sigstop: detected in %.2f s (bound %.2f s = heartbeat timeout %.1f s + tick %.1f s"
              " + slack %.1f s)\n",
              Seconds(detected), Seconds(detect_bound), Seconds(kHeartbeatTimeout), Seconds(kTick),
              Seconds(kSlack));
  std::fflush(stdout);
  EXPECT_LE(detected, detect_bound);
  // Not before its last heartbeat was a full timeout old: the last one came
  // at most one interval before the stop (less a tick of margin).
  EXPECT_GE(detected, kHeartbeatTimeout - kHeartbeatInterval - kTick);
  const v1::MembershipEpoch removed = status.epochs(removal);
  EXPECT_EQ(removed.worker_ids_size(), 2) << removed.DebugString();
  EXPECT_EQ(FindMember(status, victim), nullptr);
  EXPECT_EQ(status.active_workers(), 2u);

  // The job goes on without it: the epoch reaches every shard and the
  // slowest remaining member gets well past the removal clock.
  ASSERT_TRUE(Poll(absl::Seconds(30), [&] {
    return job_now() && status.committed_epoch() >= removed.epoch() &&
           status.progress().clock() >= removed.effective_clock() + 30;
  })) << "no progress after the removal: " << status.DebugString();
  ASSERT_EQ(status.state(), v1::RUNNING) << "the job finished before the worker came back";
  EXPECT_EQ(status.epochs_size(), removal + 1) << "another worker was removed too: "
                                               << status.DebugString();

  // The old incarnation is dead to the coordinator: a heartbeat in its name
  // is refused, so the process must register again.
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::HeartbeatRequest hb;
    hb.set_worker_id(victim);
    hb.set_incarnation(old_incarnation);
    hb.set_job_id(job);
    hb.set_state(v1::TRAINING);
    v1::HeartbeatResponse resp;
    const grpc::Status s = cluster.coordinator()->Heartbeat(&ctx, hb, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  }

  // --- SIGCONT: refused, registers again as a new incarnation of the same id.
  ASSERT_EQ(::kill(proc.pid(), SIGCONT), 0);
  const absl::Time resumed = absl::Now();
  uint64_t new_incarnation = 0;
  // Its heartbeat thread's sleep ran out while stopped: it heartbeats at once,
  // is refused, and registers.
  const absl::Duration rejoin_bound = kHeartbeatInterval + kSlack;
  ASSERT_TRUE(Poll(rejoin_bound + absl::Seconds(20), [&] {
    const v1::ClusterStatus cs = Cluster(cluster);
    const v1::WorkerStatus* w = FindWorker(cs, victim);
    if (w == nullptr || w->incarnation() <= old_incarnation || !w->healthy()) return false;
    new_incarnation = w->incarnation();
    return true;
  })) << "worker " << victim << " did not register again:\n"
      << proc.Log();
  const absl::Duration rejoined = absl::Now() - resumed;
  EXPECT_EQ(Cluster(cluster).workers_size(), 3) << "re-registered under a new worker id";
  // What the process was told: the coordinator's FAILED_PRECONDITION text.
  EXPECT_TRUE(Poll(absl::Seconds(10), [&] {
    return absl::StrContains(proc.Log(), "was removed after missing heartbeats: register again");
  })) << proc.Log();

  // The job is one worker short, so the new incarnation joins it and trains.
  ASSERT_TRUE(Poll(absl::Seconds(60), [&] {
    if (!job_now()) return false;
    if (IsTerminal(status.state())) return true;
    const v1::JobMember* m = FindMember(status, victim);
    return m != nullptr && m->incarnation() == new_incarnation &&
           m->clock() >= m->join_clock() + 10;
  })) << "the new incarnation never trained: " << status.DebugString() << "\n"
      << proc.Log();
  ASSERT_EQ(status.state(), v1::RUNNING)
      << "the job finished before the new incarnation trained: " << status.DebugString();
  const absl::Duration training = absl::Now() - resumed;
  const v1::JobMember* back = FindMember(status, victim);
  std::printf("sigcont: worker %llu re-registered as incarnation %llu (was %llu) in %.2f s"
              " (bound %.2f s); training again from clock %llu, %.2f s after SIGCONT\n",
              static_cast<unsigned long long>(victim),
              static_cast<unsigned long long>(new_incarnation),
              static_cast<unsigned long long>(old_incarnation), Seconds(rejoined),
              Seconds(rejoin_bound), static_cast<unsigned long long>(back->join_clock()),
              Seconds(training));
  std::fflush(stdout);
  EXPECT_LE(rejoined, rejoin_bound);

  auto done = cluster.WaitForJob(job, absl::Seconds(90));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->DebugString();
  EXPECT_EQ(done->progress().clock(), kSteps);
  // The removal, then the new incarnation's return, and nothing else: the
  // old incarnation's failure (its pushes are refused) is not taken for the
  // new one's.
  ASSERT_EQ(done->epochs_size(), removal + 2) << done->DebugString();
  const v1::MembershipEpoch& last = *done->epochs().rbegin();
  EXPECT_EQ(last.reason(), "scale up to 3");
  EXPECT_EQ(last.worker_ids_size(), 3) << last.DebugString();
  EXPECT_NE(std::find(last.worker_ids().begin(), last.worker_ids().end(), victim),
            last.worker_ids().end());
  EXPECT_EQ(done->worker_errors(), 0u) << done->DebugString();
  ExpectEveryShardAt(cluster, options.shards, job, kSteps);
  StopAndClean(*std::move(started));
}

}  // namespace
}  // namespace gradstream::testing
