// Helpers shared by the fault tests that run a whole cluster
// (tests/training/cluster.h): the binaries, a small training job, and a
// poll-with-deadline loop. Every wait of these tests goes through Poll or a
// LocalCluster wait, so each has a deadline and none sleeps blindly.
#ifndef GRADSTREAM_TESTS_FAULTS_FAULT_TESTING_H_
#define GRADSTREAM_TESTS_FAULTS_FAULT_TESTING_H_

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/job/job_state.h"
#include "coordinator.pb.h"
#include "gtest/gtest.h"
#include "tests/training/cluster.h"

namespace gradstream::testing {

inline ClusterBinaries FaultBinaries() {
  return {GS_COORDINATOR_BINARY, GS_SHARD_BINARY, GS_WORKER_BINARY};
}

// MLP 20-32-10 on a small synthetic set (the convergence test's task, cut
// down): a few ms per clock on one CPU core, so a job of a few hundred clocks
// spans the faults below without making the test slow. Sync, fp32 pushes,
// SGD; evaluation only at the end.
inline v1::JobSpec SmallSyncJob(const std::string& name, uint32_t workers, uint32_t steps) {
  v1::JobSpec s;
  s.set_name(name);
  s.mutable_model()->set_type("mlp");
  s.mutable_model()->add_hidden(32);
  auto* syn = s.mutable_dataset()->mutable_synthetic();
  syn->set_classes(10);
  syn->set_clusters_per_class(3);
  syn->set_dims(20);
  syn->set_noise(1.0f);
  syn->set_seed(12345);
  syn->set_train_size(4000);
  syn->set_test_size(500);
  s.set_steps(steps);
  s.set_batch_size(16);
  s.mutable_optimizer()->set_type("sgd");
  s.mutable_optimizer()->set_learning_rate(0.05f);
  s.mutable_codec()->set_default_codec("none");
  s.set_workers(workers);
  s.set_seed(7);
  s.set_eval_every(steps);
  return s;
}

// Calls `done` every `every` until it returns true (true) or `timeout`
// passes (false).
inline bool Poll(absl::Duration timeout, const std::function<bool()>& done,
                 absl::Duration every = absl::Milliseconds(20)) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (done()) return true;
    if (absl::Now() > deadline) return false;
    absl::SleepFor(every);
  }
}

// Stops every process of `cluster`, then removes its directory unless the
// test failed (the logs then stay; SCOPED_TRACE names the directory).
inline void StopAndClean(std::unique_ptr<LocalCluster> cluster) {
  const std::string dir = cluster->dir();
  cluster.reset();
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

// Every shard applied exactly `steps` sync rounds to each of its chunks.
inline void ExpectEveryShardAt(LocalCluster& cluster, int shards, const std::string& job,
                               uint64_t steps) {
  for (int s = 0; s < shards; ++s) {
    auto stats = cluster.ShardStats(s, job);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->min_version(), steps) << "shard " << s;
    EXPECT_EQ(stats->max_version(), steps) << "shard " << s;
  }
}

}  // namespace gradstream::testing

#endif  // GRADSTREAM_TESTS_FAULTS_FAULT_TESTING_H_
