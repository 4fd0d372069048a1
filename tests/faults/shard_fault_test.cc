// A shard killed (kill -9) in the middle of a sync job that checkpoints
// every kCheckpointEvery clocks, restarted on the same port with the same
// checkpoint directory:
//   * the coordinator re-installs the job, the shard restores its last
//     checkpoint (log: "restored from ... at clock C");
//   * updates lost = clock at the kill - C is at most one checkpoint
//     interval, and the restored shard's round records show exactly which
//     rounds it had to give up;
//   * the job's clock gets past the kill clock again and the job completes
//     every step.
#include <cstdio>
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_testing.h"

namespace gradstream::testing {
namespace {

constexpr uint32_t kCheckpointEvery = 50;
constexpr uint32_t kSteps = 500;
constexpr int kVictim = 0;  // shard index

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

TEST(Faults, ShardKilledMidJobRestoresLastCheckpoint) {
  ClusterOptions options;
  options.shards = 2;
  options.workers = 2;
  auto started = LocalCluster::Start(FaultBinaries(), options);
  ASSERT_TRUE(started.ok()) << started.status();
  LocalCluster& cluster = **started;
  SCOPED_TRACE("cluster logs in " + cluster.dir());

  v1::JobSpec spec = SmallSyncJob("shard-kill", 2, kSteps);
  spec.set_checkpoint_every(kCheckpointEvery);
  auto id = cluster.Submit(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const std::string job = *id;
  const std::string checkpoint =
      absl::StrCat(cluster.dir(), "/ckpt", kVictim, "/", job, ".shard", kVictim, ".ckpt");

  // Kill in the middle of the interval after the first checkpoint: that
  // checkpoint (written on the shard's executor right after the slowest
  // chunk crossed kCheckpointEvery, atomically: the file exists only once
  // complete) is the one to restore, and no later one can be half-written.
  const uint64_t window_begin = kCheckpointEvery + kCheckpointEvery / 4;
  const uint64_t window_end = kCheckpointEvery + kCheckpointEvery * 3 / 4;
  uint64_t kill_clock = 0, seen = 0;
  ASSERT_TRUE(Poll(
      absl::Seconds(60),
      [&] {
        auto s = cluster.ShardStats(kVictim, job);
        if (!s.ok()) return false;
        seen = s->min_version();
        if (seen < window_begin || !std::filesystem::exists(checkpoint)) return false;
        if (seen > window_end) return true;  // missed the window: fails below
        kill_clock = s->max_version();
        cluster.KillShard(kVictim);
        return true;
      },
      absl::Milliseconds(1)))
      << "the job never got past its first checkpoint";
  ASSERT_NE(kill_clock, 0u) << "the job ran from below clock " << window_begin << " to " << seen
                            << " between two polls";
  const absl::Time killed = absl::Now();

  ASSERT_TRUE(cluster.RestartShard(kVictim).ok());
  const absl::Duration down = absl::Now() - killed;

  // The coordinator finds the shard without the job and installs it again;
  // the shard restores from its checkpoint.
  uint64_t restored_clock = 0;
  const std::regex restored_re("job " + job + " restored from .* at clock ([0-9]+)");
  ASSERT_TRUE(Poll(absl::Seconds(20), [&] {
    std::smatch m;
    const std::string log = ReadFile(cluster.ShardLogPath(kVictim));
    if (!std::regex_search(log, m, restored_re)) return false;
    restored_clock = std::stoull(m[1]);
    return true;
  })) << "shard " << kVictim << " did not restore:\n"
      << ReadFile(cluster.ShardLogPath(kVictim));

  // Recovery: the job's clock (slowest member) gets past the kill clock.
  v1::JobStatus status;
  ASSERT_TRUE(Poll(absl::Seconds(30), [&] {
    auto s = cluster.GetJob(job);
    if (s.ok()) status = *s;
    return s.ok() && (status.progress().clock() > kill_clock + 1 || IsTerminal(status.state()));
  })) << "the job did not move past clock " << kill_clock << ": " << status.DebugString() << "\n"
      << ReadFile(cluster.ShardLogPath(kVictim));
  const absl::Duration recovery = absl::Now() - killed;
  ASSERT_EQ(status.state(), v1::RUNNING) << status.DebugString();

  // What the restored shard had to give up: rounds at or after the restored
  // clock that it closed with fewer contributors than the job's members.
  auto after = cluster.ShardStats(kVictim, job, /*rounds=*/true);
  ASSERT_TRUE(after.ok()) << after.status();
  std::map<uint64_t, int> incomplete;  // clock -> chunks
  for (const auto& r : after->rounds()) {
    if (r.clock() >= restored_clock && r.contributors_size() < 2) ++incomplete[r.clock()];
  }
  const uint64_t lost = kill_clock - restored_clock;
  std::printf("shard kill: killed at clock %llu, restored checkpoint at clock %llu: %llu updates"
              " lost (bound %u = checkpoint interval); %zu rounds closed incomplete after the"
              " restore; shard down %.2f s, job past the kill clock %.2f s after the kill\n",
              static_cast<unsigned long long>(kill_clock),
              static_cast<unsigned long long>(restored_clock),
              static_cast<unsigned long long>(lost), kCheckpointEvery, incomplete.size(),
              Seconds(down), Seconds(recovery));
  std::fflush(stdout);
  EXPECT_EQ(restored_clock / kCheckpointEvery, kill_clock / kCheckpointEvery)
      << "not the checkpoint of the interval the kill fell in";
  EXPECT_LE(restored_clock, kill_clock);
  EXPECT_LE(lost, kCheckpointEvery);
  // Nothing but the lost clocks shows up as a round given up (plus at most
  // the round or two the shard applied between our last stats read and the
  // kill). Not every lost clock has to: a push the dead shard had not acked
  // yet is replayed by its worker and completes its round again (one CI run
  // on a loaded machine saw none given up at all).
  EXPECT_LE(incomplete.size(), lost + 2);
  for (const auto& [clock, chunks] : incomplete) {
    EXPECT_LT(clock, kill_clock + 2) << "a round after the kill lost a contributor";
  }

  auto done = cluster.WaitForJob(job, absl::Seconds(90));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_EQ(done->state(), v1::COMPLETED) << done->DebugString();
  EXPECT_EQ(done->progress().clock(), kSteps);
  EXPECT_EQ(done->epochs_size(), 1) << "membership changed: " << done->DebugString();
  ExpectEveryShardAt(cluster, options.shards, job, kSteps);
  StopAndClean(*std::move(started));
}

}  // namespace
}  // namespace gradstream::testing
