// Unit tests of the coordinator's state machine, driven through its
// coordinator.proto API with a recording shard client and a manual clock.
// Multi-process tests live in tests/control/.
#include "server/coordinator/coordinator.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "common/env/env.h"
#include "common/env/testing/fake_clock_env.h"
#include "gtest/gtest.h"
#include "server/coordinator/rpc/coordinator_api.h"
#include "server/coordinator/rpc/shard_convert.h"
#include "server/coordinator/rpc/state_store.h"

namespace gradstream::coordinator {
namespace {

namespace v1 = gradstream::v1;

// Records what the coordinator tells the shards, as the gRPC client sends
// it; answers OK.
class RecordingShards final : public ShardClient {
 public:
  absl::StatusOr<ShardJobCreated> CreateJob(const std::string& address,
                                            const ShardJob& job) override {
    absl::MutexLock lock(&mu_);
    if (down) return absl::UnavailableError("down");
    creates.push_back({address, CreateJobToProto(job)});
    return ShardJobCreated();
  }
  absl::Status UpdateMembership(const std::string& address, const std::string& job_id,
                                const MembershipEpoch& epoch) override {
    absl::MutexLock lock(&mu_);
    if (down) return absl::UnavailableError("down");
    updates.push_back({address, UpdateToProto(job_id, epoch)});
    return absl::OkStatus();
  }
  absl::Status DropJob(const std::string& address, const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    drops.push_back(job_id);
    return absl::OkStatus();
  }
  absl::StatusOr<ShardJobStats> GetStats(const std::string&, const std::string& job_id) override {
    absl::MutexLock lock(&mu_);
    if (down) return absl::UnavailableError("down");
    if (job_id.empty()) return absl::InvalidArgumentError("no job");
    ShardJobStats r;
    r.min_clock = min_clock;
    r.min_version = rounds;
    r.max_version = rounds;
    r.pull_link = pull_link;
    return r;
  }

  absl::Mutex mu_;
  bool down = false;
  uint64_t min_clock = 0;
  uint64_t rounds = 0;  // sync rounds applied (see [shard progress])
  std::optional<LinkDecision> pull_link;
  std::vector<std::pair<std::string, v1::CreateJobRequest>> creates;
  std::vector<std::pair<std::string, v1::MembershipUpdate>> updates;
  std::vector<std::string> drops;
};

// The core with its API, as gs_coordinator runs them.
class OpenedCoordinator : public CoordinatorApi {
 public:
  explicit OpenedCoordinator(std::unique_ptr<Coordinator> core)
      : CoordinatorApi(core.get()), core_(std::move(core)) {}
  void Tick() { core_->Tick(); }
  void StartTicker() { core_->StartTicker(); }

 private:
  std::unique_ptr<Coordinator> core_;
};

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_file_ = "/tmp/coordinator_test_state." + std::to_string(::getpid());
    RemoveState();
    Open();
  }
  void TearDown() override {
    c_.reset();
    RemoveState();
  }
  void RemoveState() {
    for (const char* suffix : {"", "-wal", "-shm", ".migrated", ".lock"}) {
      std::remove((state_file_ + suffix).c_str());
    }
  }

  void Open() {
    c_.reset();
    CoordinatorOptions o;
    o.keep_finished = keep_finished_;
    o.keep_finished_for = keep_finished_for_;
    o.heartbeat_timeout = absl::Seconds(10);
    o.start_grace = absl::Seconds(2);
    o.probe_interval = absl::ZeroDuration();
    o.env = &clock_;
    o.metrics = &metrics_;
    auto c = OpenCoordinator(o, &shards_, state_file_, store_options_);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = std::make_unique<OpenedCoordinator>(*std::move(c));
  }

  void AddShards(int n) {
    for (int i = 0; i < n; ++i) {
      v1::RegisterShardRequest r;
      r.set_address("127.0.0.1:" + std::to_string(9000 + i));
      ASSERT_TRUE(c_->RegisterShard(r).ok());
    }
  }

  std::pair<uint64_t, uint64_t> AddWorker() {
    v1::RegisterWorkerRequest r;
    r.set_name("w");
    auto resp = c_->RegisterWorker(r);
    EXPECT_TRUE(resp.ok());
    return {resp->worker_id(), resp->incarnation()};
  }

  v1::Assignment Beat(std::pair<uint64_t, uint64_t> w, uint64_t clock,
                      v1::WorkerState state = v1::TRAINING, const std::string& job = "") {
    v1::WorkerProgress p;
    p.set_clock(clock);
    p.set_bytes_pushed(100);
    p.set_fp32_bytes_pushed(1600);
    return Report(w, p, state, job);
  }

  // A heartbeat of `w` in `state` for `job` (job_ when empty).
  v1::HeartbeatRequest Request(std::pair<uint64_t, uint64_t> w, v1::WorkerState state,
                               const std::string& job = "") {
    v1::HeartbeatRequest r;
    r.set_worker_id(w.first);
    r.set_incarnation(w.second);
    r.set_job_id(job.empty() ? job_ : job);
    r.set_state(state);
    return r;
  }

  v1::Assignment Report(std::pair<uint64_t, uint64_t> w, const v1::WorkerProgress& progress,
                        v1::WorkerState state = v1::TRAINING, const std::string& job = "") {
    v1::HeartbeatRequest r = Request(w, state, job);
    *r.mutable_progress() = progress;
    auto resp = c_->Heartbeat(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->assignment() : v1::Assignment();
  }

  // Starts the submitted job_ on one shard with two new workers.
  std::pair<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, uint64_t>> StartWithTwoWorkers() {
    AddShards(1);
    auto w1 = AddWorker();
    auto w2 = AddWorker();
    c_->Tick();
    EXPECT_EQ(Job().state(), v1::RUNNING);
    return {w1, w2};
  }

  std::string Submit(uint32_t workers, uint32_t steps = 100) {
    v1::SubmitJobRequest r;
    r.mutable_spec()->set_workers(workers);
    r.mutable_spec()->set_steps(steps);
    auto resp = c_->SubmitJob(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp->job_id();
  }

  // Every job, through ListJobs' pages.
  size_t JobCount() {
    size_t n = 0;
    v1::ListJobsRequest r;
    do {
      absl::StatusOr<v1::ListJobsResponse> page = c_->ListJobs(r);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      n += page->jobs_size();
      r.set_page_token(page->next_page_token());
    } while (!r.page_token().empty());
    return n;
  }

  v1::JobStatus Job() {
    v1::GetJobRequest r;
    r.set_job_id(job_);
    return *c_->GetJob(r);
  }

  std::string state_file_;
  StateStoreOptions store_options_;  // for the next Open(): faults, size cap
  size_t keep_finished_ = 10000;     // for the next Open()
  absl::Duration keep_finished_for_ = absl::InfiniteDuration();
  // The coordinator's clock ([env time]): moved by hand.
  gradstream::testing::FakeClockEnv clock_{Env::Default(), absl::FromUnixSeconds(1700000000)};
  metrics::Registry metrics_;
  RecordingShards shards_;
  std::unique_ptr<OpenedCoordinator> c_;
  std::string job_;
};

TEST_F(CoordinatorTest, JobStartsWhenShardsAndWorkersExistAndEpochIsCommittedFirst) {
  job_ = Submit(2);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::PENDING);
  EXPECT_NE(Job().message().find("waiting for shards"), std::string::npos);
  AddShards(2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  v1::JobStatus job = Job();
  EXPECT_EQ(job.state(), v1::RUNNING);
  ASSERT_EQ(job.epochs_size(), 1);
  EXPECT_EQ(job.epochs(0).effective_clock(), 0u);
  EXPECT_EQ(job.epochs(0).worker_ids_size(), 2);
  EXPECT_EQ(job.committed_epoch(), 1u);  // both CreateJob calls succeeded in this tick
  ASSERT_EQ(shards_.creates.size(), 2u);
  size_t chunks = shards_.creates[0].second.chunks_size() + shards_.creates[1].second.chunks_size();
  EXPECT_GT(chunks, 0u);
  v1::Assignment a1 = Beat(w1, 0), a2 = Beat(w2, 0);
  EXPECT_EQ(a1.job_id(), job_);
  EXPECT_EQ(a1.rank(), 0u);
  EXPECT_EQ(a2.rank(), 1u);
  EXPECT_EQ(a1.world_size(), 2u);
  EXPECT_EQ(a1.shard_map().shards_size(), 2);
  EXPECT_EQ(a1.spec().steps(), 100u);
}

TEST_F(CoordinatorTest, UncommittedEpochIsNotRevealed) {
  AddShards(1);
  job_ = Submit(1);
  auto w = AddWorker();
  shards_.down = true;
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  EXPECT_EQ(Job().committed_epoch(), 0u);
  EXPECT_EQ(Beat(w, 0).job_id(), "");  // not until the shard has the job
  shards_.down = false;
  c_->Tick();
  EXPECT_EQ(Beat(w, 0).job_id(), job_);
}

TEST_F(CoordinatorTest, ScaleUpThenDownUsesFutureClockBoundaries) {
  AddShards(1);
  job_ = Submit(1);
  auto w1 = AddWorker();
  c_->Tick();
  Beat(w1, 10);
  auto w2 = AddWorker();
  auto w3 = AddWorker();
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(3);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  c_->Tick();  // fresh shard stats, then the epoch is planned and persisted
  c_->Tick();  // ... and sent to the shards
  v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 2);
  EXPECT_GT(job.epochs(1).effective_clock(), 10u);
  EXPECT_EQ(job.epochs(1).worker_ids_size(), 3);
  ASSERT_EQ(shards_.updates.size(), 1u);
  EXPECT_EQ(shards_.updates[0].second.membership().epoch(), 2u);
  v1::Assignment a3 = Beat(w3, 0);
  EXPECT_EQ(a3.join_clock(), job.epochs(1).effective_clock());
  EXPECT_EQ(a3.rank(), 2u);

  scale.set_workers(1);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  Beat(w1, 20);
  c_->Tick();
  c_->Tick();
  job = Job();
  ASSERT_EQ(job.epochs_size(), 3);
  EXPECT_EQ(job.epochs(2).worker_ids_size(), 1);
  EXPECT_EQ(job.epochs(2).worker_ids(0), w1.first);  // rank 0 stays
  const uint64_t leave_at = job.epochs(2).effective_clock();
  EXPECT_GT(leave_at, 20u);
  v1::Assignment a2 = Beat(w2, 20);
  EXPECT_TRUE(a2.leave());
  EXPECT_EQ(a2.leave_clock(), leave_at);
  EXPECT_FALSE(Beat(w1, 20).leave());
  // w2 finishes its clocks, leaves and returns to the pool.
  Beat(w2, leave_at, v1::LEFT);
  EXPECT_EQ(Beat(w2, 0, v1::IDLE, "").job_id(), "");
  EXPECT_EQ(Job().members_size(), 2);  // w1 and the still-leaving w3
}

// Outside SYNC a shard's chunk versions count pushes, not clocks: an async job
// whose shards have taken thousands of pushes at clock 20 is scaled down a
// few clocks ahead of 20, not past the push count (issue 15's scale planned
// ~6000 clocks ahead). faults_operator_test holds the time it takes end to
// end, which depends on the host's clock rate.
TEST_F(CoordinatorTest, AsyncScaleDownIsPlannedFromClocksNotPushCounts) {
  AddShards(1);
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_workers(2);
  submit.mutable_spec()->set_steps(10000);
  submit.mutable_spec()->mutable_consistency()->set_mode(v1::ASYNC);
  auto submitted = c_->SubmitJob(submit);
  ASSERT_TRUE(submitted.ok()) << submitted.status();
  job_ = submitted->job_id();
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  ASSERT_EQ(Job().state(), v1::RUNNING);
  shards_.min_clock = 20;
  shards_.rounds = 6000;  // versions: pushes of both members into each chunk
  Beat(w1, 20);
  Beat(w2, 21);
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(1);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  c_->Tick();
  c_->Tick();
  const v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 2);
  // The fastest clock, 21, plus the lead's fixed 10 clocks and its rate part
  // (no rate measured yet: the fake clock has not moved).
  EXPECT_EQ(job.epochs(1).effective_clock(), 31u);
  EXPECT_EQ(job.epochs(1).worker_ids_size(), 1);
}

// A scale-up requested so close to the end that its clock boundary would lie
// past the last step adds no epoch: nobody would ever join.
TEST_F(CoordinatorTest, NoEpochPastTheLastStep) {
  AddShards(1);
  job_ = Submit(1, /*steps=*/15);
  auto w1 = AddWorker();
  c_->Tick();
  Beat(w1, 10);
  AddWorker();
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(2);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  c_->Tick();
  c_->Tick();
  v1::JobStatus job = Job();
  EXPECT_EQ(job.epochs_size(), 1);
  EXPECT_EQ(job.members_size(), 1);
  EXPECT_NE(job.message().find("ends at clock 15"), std::string::npos) << job.message();
}

TEST_F(CoordinatorTest, DeadWorkerIsRemovedAtItsClock) {
  AddShards(1);
  job_ = Submit(2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 7);
  Beat(w2, 7);
  clock_.Advance(absl::Seconds(6));
  Beat(w1, 8);
  clock_.Advance(absl::Seconds(6));  // w2 silent for 12s > 10s
  Beat(w1, 8);
  c_->Tick();
  v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 2);
  EXPECT_EQ(job.epochs(1).effective_clock(), 7u);
  EXPECT_EQ(job.epochs(1).worker_ids_size(), 1);
  EXPECT_EQ(job.epochs(1).reason(), "worker " + std::to_string(w2.first) + " missed heartbeats");
  v1::HeartbeatRequest late;
  late.set_worker_id(w2.first);
  late.set_incarnation(w2.second);
  EXPECT_EQ(c_->Heartbeat(late).status().code(), absl::StatusCode::kFailedPrecondition);
  // Re-registering gives a new incarnation and a place in the pool.
  v1::RegisterWorkerRequest again;
  again.set_worker_id(w2.first);
  again.set_incarnation(w2.second);
  auto r = c_->RegisterWorker(again);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->worker_id(), w2.first);
  EXPECT_EQ(r->incarnation(), w2.second + 1);
}

// [coordinator stall]: the ticker's wait of one tick that ends 12 s late
// (the process did not run) costs no worker its place; silence while the
// coordinator runs still does.
TEST_F(CoordinatorTest, ACoordinatorThatDidNotRunBlamesNoWorkerForItsSilence) {
  job_ = Submit(2);
  const auto [w1, w2] = StartWithTwoWorkers();
  Beat(w1, 0);
  Beat(w2, 0);
  c_->StartTicker();
  auto next_tick = [&](absl::Duration d) {
    ASSERT_TRUE(clock_.AwaitWaiters(1, absl::Seconds(30)));  // the ticker waits
    clock_.Advance(d);
    ASSERT_TRUE(clock_.AwaitWaiters(1, absl::Seconds(30)));  // ... and ticked
  };
  next_tick(absl::Seconds(12));  // paused for 12 s > the 10 s timeout
  EXPECT_EQ(Job().epochs_size(), 1) << Job().DebugString();
  for (int i = 0; i < 105; ++i) {  // w2 silent for 10.5 s more, w1 beating
    if (i % 20 == 0) Beat(w1, 1);
    next_tick(absl::Milliseconds(100));
  }
  v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 2) << job.DebugString();
  EXPECT_EQ(job.epochs(1).reason(), "worker " + std::to_string(w2.first) + " missed heartbeats");
}

// A SIGTERM'd worker leaves its job and says it is stopping (see [worker
// stop]): the job, still short of its two workers, must not take the exiting
// process back, as it does a worker that merely left.
TEST_F(CoordinatorTest, AStoppingWorkerIsNotTakenBackIntoTheJobItLeft) {
  AddShards(1);
  job_ = Submit(2, /*steps=*/1000);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 7);
  Beat(w2, 7);
  auto leave = [&](std::pair<uint64_t, uint64_t> w, bool stopping) {
    v1::HeartbeatRequest r = Request(w, v1::LEFT);
    r.mutable_progress()->set_clock(7);
    r.set_stopping(stopping);
    ASSERT_TRUE(c_->Heartbeat(r).ok());
    c_->Tick();
    c_->Tick();
  };
  leave(w2, /*stopping=*/false);
  v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 3) << job.DebugString();  // left, then taken back
  EXPECT_EQ(job.epochs(2).worker_ids_size(), 2);
  Beat(w2, 0, v1::IDLE, "");
  ASSERT_EQ(Beat(w2, 0, v1::IDLE, "").job_id(), job_);

  leave(w1, /*stopping=*/true);
  job = Job();
  ASSERT_EQ(job.epochs_size(), 4) << job.DebugString();
  EXPECT_EQ(job.epochs(3).reason(), "worker " + std::to_string(w1.first) + " left");
  EXPECT_EQ(job.epochs(3).worker_ids_size(), 1);
  Open();  // a restart remembers it
  c_->Tick();
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 4);
  v1::HeartbeatRequest last = Request(w1, v1::IDLE);
  last.clear_job_id();
  last.set_stopping(true);
  auto a = c_->Heartbeat(last);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->assignment().job_id(), "");
  EXPECT_EQ(Job().epochs_size(), 4);
}

// ---------------------------------------------------------------- elastic jobs

// A 2:3 job (see [elastic jobs]): starts at MIN without the grace, grows by
// itself, shrinks on a death, waits below MIN with a deadline that survives a
// restart, is back in range when a worker joins, and fails past the deadline.
TEST_F(CoordinatorTest, AnElasticJobFillsThePoolAndWaitsBelowMinWithADeadline) {
  AddShards(1);
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_workers_min(2);
  submit.mutable_spec()->set_workers(3);
  submit.mutable_spec()->set_steps(1000);
  submit.mutable_spec()->set_min_workers_timeout_s(60);
  job_ = c_->SubmitJob(submit)->job_id();
  auto w1 = AddWorker();
  clock_.Advance(absl::Seconds(5));  // past the start grace: 1 of min 2 still waits
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::PENDING);
  EXPECT_EQ(Job().message(), "waiting for workers: 1 idle of min 2 (range 2:3)");
  EXPECT_EQ(Job().size_reason(), Job().message());
  auto w2 = AddWorker();
  c_->Tick();
  ASSERT_EQ(Job().state(), v1::RUNNING);
  EXPECT_EQ(Job().epochs(0).worker_ids_size(), 2);
  EXPECT_EQ(Job().min_workers(), 2u);
  EXPECT_EQ(Job().size_reason(), "started with 2");
  Beat(w1, 10);
  Beat(w2, 10);
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 1);  // inside its range, nobody idle: nothing to do
  EXPECT_EQ(Job().message(), "");

  // A third worker appears: the job grows to MAX without a `scale`.
  auto w3 = AddWorker();
  c_->Tick();
  c_->Tick();
  ASSERT_EQ(Job().epochs_size(), 2);
  EXPECT_EQ(Job().epochs(1).worker_ids_size(), 3);
  EXPECT_EQ(Job().size_reason(), "grew: worker " + std::to_string(w3.first) + " idle");
  EXPECT_EQ(Job().active_workers(), 3u);

  // Two members die: the job shrinks and goes on below MIN, waiting.
  clock_.Advance(absl::Seconds(6));
  Beat(w1, 20);
  clock_.Advance(absl::Seconds(6));
  Beat(w1, 21);
  c_->Tick();
  v1::JobStatus job = Job();
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.members_size(), 1);
  EXPECT_NE(job.below_min_since_unix_ms(), 0);
  EXPECT_TRUE(absl::StartsWith(job.size_reason(), "waiting: below min, 1 of min 2 for 0s"))
      << job.size_reason();
  EXPECT_EQ(job.message(), "waiting: below min, 1 of min 2 active, none idle");
  EXPECT_NE(Job().epochs().rbegin()->reason().find("missed heartbeats"), std::string::npos);

  // The wait survives a coordinator restart.
  const int64_t since = job.below_min_since_unix_ms();
  Open();
  EXPECT_EQ(Job().below_min_since_unix_ms(), since);

  // A worker joins within the deadline: back at MIN, no longer waiting.
  clock_.Advance(absl::Seconds(30));
  Beat(w1, 30);
  auto w4 = AddWorker();
  c_->Tick();
  c_->Tick();
  job = Job();
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.members_size(), 2);
  EXPECT_EQ(job.below_min_since_unix_ms(), 0);
  EXPECT_EQ(job.message(), "");
  EXPECT_EQ(job.size_reason(), "grew: worker " + std::to_string(w4.first) + " idle");

  // Below MIN again (w4 dies), and nobody comes: at the deadline it fails.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Seconds(6));
    Beat(w1, 40 + i);
    c_->Tick();
  }
  ASSERT_EQ(Job().members_size(), 1);
  ASSERT_NE(Job().below_min_since_unix_ms(), 0);
  clock_.Advance(absl::Seconds(50));
  Beat(w1, 50);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);  // 56 s of 60
  clock_.Advance(absl::Seconds(9));
  Beat(w1, 51);
  c_->Tick();
  job = Job();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.message(),
            "below min workers for 1m: 1 of min 2 active and no idle worker joined "
            "(min_workers_timeout_s 60)");
}

TEST_F(CoordinatorTest, ScalingAnElasticJobSetsItsRange) {
  AddShards(1);
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_workers_min(2);
  submit.mutable_spec()->set_workers(4);
  job_ = c_->SubmitJob(submit)->job_id();
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(1);  // N: the new MAX, and MIN follows it down
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  EXPECT_EQ(Job().min_workers(), 1u);
  EXPECT_EQ(Job().desired_workers(), 1u);
  scale.set_workers(6);
  scale.set_workers_min(3);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  EXPECT_EQ(Job().min_workers(), 3u);
  EXPECT_EQ(Job().desired_workers(), 6u);
  scale.set_workers(6);  // MIN kept when it fits
  scale.set_workers_min(0);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  EXPECT_EQ(Job().min_workers(), 3u);
  scale.set_workers(2);
  scale.set_workers_min(5);
  EXPECT_EQ(c_->ScaleJob(scale).status().message(),
            "workers_min: 5 is above workers 2 (a range MIN:MAX wants 1 <= MIN <= MAX)");
  // A plain job takes no range.
  const std::string plain = Submit(2);
  scale.set_job_id(plain);
  scale.set_workers_min(1);
  EXPECT_EQ(c_->ScaleJob(scale).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, CompletesWhenEveryMemberReachesSteps) {
  AddShards(1);
  job_ = Submit(2, 50);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 50, v1::DONE);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  // At its last clock but not DONE (rank 0 still evaluates): not complete.
  Beat(w2, 50, v1::TRAINING);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  Beat(w2, 50, v1::DONE);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::COMPLETED);
  EXPECT_EQ(Job().progress().clock(), 50u);
  EXPECT_DOUBLE_EQ(Job().progress().compression_ratio(), 16.0);
  EXPECT_EQ(Beat(w1, 50, v1::DONE).job_state(), v1::COMPLETED);
}

// [gone at the end]: the last member, removed for missed heartbeats after
// the last step (evaluating on a starved host), leaves a job that no worker
// can join; its shards applied every step, so it completes. Short of the
// last step the same loss leaves it waiting for a worker.
TEST_F(CoordinatorTest, CompletesWhenTheLastMemberIsLostAfterTheLastStep) {
  AddShards(1);
  job_ = Submit(1, 50);
  auto w1 = AddWorker();
  c_->Tick();
  shards_.min_clock = shards_.rounds = 49;
  Beat(w1, 50, v1::TRAINING);  // at its last clock, evaluating
  c_->Tick();
  clock_.Advance(absl::Seconds(12));  // silent for 12s > 10s
  c_->Tick();
  c_->Tick();
  EXPECT_EQ(Job().members_size(), 0) << Job().DebugString();
  EXPECT_EQ(Job().state(), v1::RUNNING) << "the shards are a step short";
  shards_.min_clock = shards_.rounds = 50;
  c_->Tick();
  const v1::JobStatus done = Job();
  ASSERT_EQ(done.state(), v1::COMPLETED) << done.DebugString();
  EXPECT_NE(done.message().find("every member left after the last step"), std::string::npos)
      << done.message();
}

// Regression: a worker that finished job A keeps heartbeating "DONE, job A"
// until it hears of job B; that must not complete job B at once.
TEST_F(CoordinatorTest, DoneOfThePreviousJobDoesNotCompleteTheNextOne) {
  AddShards(1);
  job_ = Submit(1, 50);
  const std::string first = job_;
  auto w = AddWorker();
  c_->Tick();
  Beat(w, 50, v1::DONE);
  c_->Tick();
  ASSERT_EQ(Job().state(), v1::COMPLETED);
  EXPECT_EQ(Beat(w, 50, v1::DONE).job_state(), v1::COMPLETED);  // told: detached
  job_ = Submit(1, 50);
  c_->Tick();
  EXPECT_EQ(Beat(w, 50, v1::DONE, first).job_id(), job_);  // still reports job A
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  Beat(w, 10);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  Beat(w, 50, v1::DONE);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::COMPLETED);
}

// A database capped at a few pages fills up as a full disk does: the submit
// that does not fit fails and is not kept, every one before it is.
TEST_F(CoordinatorTest, FullDiskFailsTheCallAndLosesNoState) {
  store_options_.max_page_count = 16;
  Open();
  v1::SubmitJobRequest r;
  r.mutable_spec()->set_workers(1);
  r.mutable_spec()->set_steps(100);
  std::vector<std::string> kept;
  absl::Status full;
  for (int i = 0; i < 5000 && full.ok(); ++i) {
    absl::StatusOr<v1::SubmitJobResponse> resp = c_->SubmitJob(r);
    if (resp.ok()) kept.push_back(resp->job_id());
    full = resp.status();
  }
  ASSERT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_TRUE(absl::StrContains(full.message(), state_file_)) << full;
  ASSERT_FALSE(kept.empty());
  EXPECT_EQ(JobCount(), kept.size());  // the failed submit is not kept either
  store_options_ = {};
  Open();  // a restart loads every job saved before the disk filled up
  EXPECT_EQ(JobCount(), kept.size());
  job_ = kept.back();
  EXPECT_EQ(Job().job_id(), job_);
  EXPECT_GT(Submit(1), job_);
}

TEST_F(CoordinatorTest, DamagedStateFileFailsTheRestartWithDataLoss) {
  job_ = Submit(1);
  c_.reset();
  ASSERT_TRUE(Env::Default()->WriteFileAtomically(state_file_, std::string(8192, 'x')).ok());
  CoordinatorOptions o;
  o.metrics = &metrics_;
  const absl::Status s = OpenCoordinator(o, &shards_, state_file_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), state_file_)) << s;
}

// See [keep finished]: beyond the count, the oldest finished jobs go, with
// their epochs and history, on disk too; running ones stay.
TEST_F(CoordinatorTest, FinishedJobsBeyondTheKeepCountAreDeleted) {
  keep_finished_ = 2;
  Open();
  AddShards(1);
  job_ = Submit(1);
  auto w = AddWorker();
  c_->Tick();
  ASSERT_EQ(Job().state(), v1::RUNNING);
  const std::string running = job_;
  std::vector<std::string> finished;
  for (int i = 0; i < 4; ++i) {
    finished.push_back(Submit(1));
    v1::CancelJobRequest cancel;
    cancel.set_job_id(finished.back());
    ASSERT_TRUE(c_->CancelJob(cancel).ok());
    clock_.Advance(absl::Seconds(1));
    c_->Tick();  // drops it on its shard
  }
  c_->Tick();
  EXPECT_EQ(JobCount(), 3u);  // the running job and the two newest finished
  for (int i = 0; i < 4; ++i) {
    v1::GetJobRequest get;
    get.set_job_id(finished[i]);
    EXPECT_EQ(c_->GetJob(get).status().code(),
              i < 2 ? absl::StatusCode::kNotFound : absl::StatusCode::kOk)
        << finished[i];
  }
  EXPECT_EQ(Beat(w, 3).job_id(), running);
  c_.reset();
  {  // every row of the deleted jobs is gone (an orphan epoch is DataLoss)
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(state_file_);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<v1::CoordinatorState> state = (*store)->Load();
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->jobs_size(), 3);
    EXPECT_EQ(state->jobs(0).job_id(), running);
    EXPECT_EQ(state->jobs(0).epochs_size(), 1);
  }
  Open();
  EXPECT_EQ(JobCount(), 3u);
  EXPECT_GT(Submit(1), finished.back());  // ids are not reused
}

TEST_F(CoordinatorTest, FinishedJobsOlderThanTheKeepTimeAreDeleted) {
  keep_finished_for_ = absl::Hours(1);
  Open();
  job_ = Submit(1);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  const std::string young = Submit(1);
  clock_.Advance(absl::Minutes(59));
  c_->Tick();
  EXPECT_EQ(JobCount(), 2u);
  clock_.Advance(absl::Minutes(2));
  c_->Tick();
  EXPECT_EQ(JobCount(), 1u);  // the pending one stays
  job_ = young;
  EXPECT_EQ(Job().state(), v1::PENDING);
}

TEST_F(CoordinatorTest, ListJobsPagesNewestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Submit(1));
  v1::ListJobsRequest r;
  r.set_page_size(2);
  std::vector<std::string> seen;
  int pages = 0;
  do {
    absl::StatusOr<v1::ListJobsResponse> page = c_->ListJobs(r);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_LE(page->jobs_size(), 2);
    for (const auto& j : page->jobs()) seen.push_back(j.job_id());
    r.set_page_token(page->next_page_token());
    ++pages;
  } while (!r.page_token().empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, std::vector<std::string>(ids.rbegin(), ids.rend()));
  r.set_page_token("bogus");
  const absl::Status s = c_->ListJobs(r).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "page_token")) << s;
  EXPECT_EQ(c_->ListJobs(v1::ListJobsRequest()).value().jobs_size(), 5);  // default page: 100
}

// See [state db lock]: a second coordinator on the same file refuses to
// start, and the first one keeps working.
TEST_F(CoordinatorTest, ASecondCoordinatorOnTheSameFileRefusesToStart) {
  job_ = Submit(1);
  CoordinatorOptions o;
  o.metrics = &metrics_;
  StateStoreOptions store;
  store.lock_timeout = absl::Milliseconds(200);
  const absl::Status s = OpenCoordinator(o, &shards_, state_file_, store).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), state_file_)) << s;
  EXPECT_NE(Submit(1), job_);
  EXPECT_EQ(JobCount(), 2u);
}

TEST_F(CoordinatorTest, StateSurvivesReopen) {
  AddShards(1);
  job_ = Submit(1);
  auto w = AddWorker();
  c_->Tick();
  Beat(w, 5);
  const size_t creates = shards_.creates.size();
  Open();  // a restart
  v1::JobStatus job = Job();
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.epochs_size(), 1);
  EXPECT_EQ(job.committed_epoch(), 1u);
  // The worker keeps its identity and assignment.
  v1::RegisterWorkerRequest again;
  again.set_worker_id(w.first);
  again.set_incarnation(w.second);
  auto r = c_->RegisterWorker(again);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->incarnation(), w.second);
  EXPECT_EQ(Beat(w, 6).job_id(), job_);
  // Shards get the job again (they may have lost it too).
  c_->Tick();
  EXPECT_EQ(shards_.creates.size(), creates + 1);
  // New ids do not collide with old ones.
  EXPECT_GT(AddWorker().first, w.first);
  EXPECT_NE(Submit(1), job_);
}

// See [write durably, then apply]: an epoch the coordinator cannot write is
// neither kept nor sent, and a job it cannot write does not exist.
TEST_F(CoordinatorTest, NothingThatCannotBeWrittenIsKeptOrSent) {
  char tmpl[] = "/tmp/coordinator_test_dir.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  state_file_ = dir + "/state";
  std::atomic<bool> disk_away{false};
  store_options_.before_commit = [&]() -> absl::Status {
    if (disk_away) return absl::InternalError("the disk went away");
    return absl::OkStatus();
  };
  Open();
  AddShards(1);
  job_ = Submit(1);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 10);
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(2);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  // The disk goes away before the scale-up is planned.
  disk_away = true;
  c_->Tick();
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 1);
  EXPECT_EQ(Job().members_size(), 1);
  EXPECT_TRUE(shards_.updates.empty());
  EXPECT_EQ(Beat(w2, 0, v1::IDLE, "").job_id(), "");
  v1::SubmitJobRequest submit;
  submit.mutable_spec()->set_workers(1);
  EXPECT_FALSE(c_->SubmitJob(submit).ok());
  EXPECT_EQ(JobCount(), 1u);
  // The disk is back: the epoch is written, then sent.
  disk_away = false;
  c_->Tick();
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 2);
  EXPECT_EQ(shards_.updates.size(), 1u);
  EXPECT_EQ(Beat(w2, 0, v1::IDLE, "").job_id(), job_);
  c_.reset();
  RemoveState();
  ::rmdir(dir.c_str());
}

// A crash between the write that removed a member and the one that released
// its worker (see [write durably, then apply]) leaves no worker stuck.
TEST_F(CoordinatorTest, ARestoredWorkerThatItsJobDoesNotListIsFree) {
  v1::CoordinatorState state;
  state.set_next_job(2);
  state.set_next_worker_id(2);
  v1::JobStatus* job = state.add_jobs();
  job->set_job_id("job-000001");
  job->set_state(v1::RUNNING);
  v1::WorkerStatus* worker = state.add_workers();
  worker->set_worker_id(1);
  worker->set_incarnation(1);
  worker->set_healthy(true);
  worker->set_job_id("job-000001");
  c_.reset();
  {
    absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(state_file_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Save(state).ok());
  }
  Open();
  v1::ClusterStatus cluster = c_->GetCluster();
  ASSERT_EQ(cluster.workers_size(), 1);
  EXPECT_EQ(cluster.workers(0).job_id(), "");
  EXPECT_EQ(cluster.workers(0).state(), v1::IDLE);
}

TEST_F(CoordinatorTest, CancelTellsWorkersAndDropsOnShards) {
  AddShards(1);
  job_ = Submit(1);
  auto w = AddWorker();
  c_->Tick();
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  EXPECT_EQ(c_->CancelJob(cancel).status().code(), absl::StatusCode::kFailedPrecondition);
  c_->Tick();
  EXPECT_EQ(shards_.drops, std::vector<std::string>{job_});
  EXPECT_EQ(Beat(w, 3).job_state(), v1::CANCELLED);
  EXPECT_EQ(Beat(w, 0, v1::IDLE, "").job_id(), "");
}

TEST_F(CoordinatorTest, ErrorsNameTheProblem) {
  v1::GetJobRequest get;
  get.set_job_id("job-999");
  EXPECT_EQ(c_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
  v1::SubmitJobRequest bad;
  bad.mutable_spec()->mutable_optimizer()->set_type("adamx");
  auto r = c_->SubmitJob(bad);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  v1::ScaleJobRequest scale;
  scale.set_job_id("job-999");
  scale.set_workers(0);
  EXPECT_EQ(c_->ScaleJob(scale).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------- script jobs

std::string SubmitScript(CoordinatorApi& c, uint32_t workers, uint32_t workers_min = 0) {
  v1::SubmitJobRequest r;
  r.mutable_spec()->set_workers(workers);
  r.mutable_spec()->set_workers_min(workers_min);
  r.mutable_spec()->set_entrypoint("python3 train.py");
  auto resp = c.SubmitJob(r);
  EXPECT_TRUE(resp.ok()) << resp.status();
  return resp.ok() ? resp->job_id() : "";
}

void Declare(v1::HeartbeatRequest& r, int64_t out) {
  v1::DeclaredTensor* w = r.add_declared_tensors();
  w->set_name("fc.weight");
  w->add_shape(out);
  w->add_shape(4);
  v1::DeclaredTensor* b = r.add_declared_tensors();
  b->set_name("fc.bias");
  b->add_shape(out);
}

TEST_F(CoordinatorTest, ScriptJobStartsBeforeItsTensorsAndPlacesRank0sDeclaration) {
  AddShards(2);
  job_ = SubmitScript(*c_, 2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::RUNNING);
  EXPECT_EQ(Job().committed_epoch(), 1u);  // no shard to wait for: the scripts start
  EXPECT_TRUE(shards_.creates.empty());
  v1::Assignment a1 = Beat(w1, 0), a2 = Beat(w2, 0);
  EXPECT_EQ(a1.rank(), 0u);
  EXPECT_EQ(a2.rank(), 1u);
  EXPECT_EQ(a1.shard_map().shards_size(), 0);
  EXPECT_EQ(a1.spec().entrypoint(), "python3 train.py");

  auto beat_declaring = [&](std::pair<uint64_t, uint64_t> w, int64_t out) {
    v1::HeartbeatRequest r = Request(w, v1::TRAINING);
    Declare(r, out);
    auto resp = c_->Heartbeat(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->assignment() : v1::Assignment();
  };
  beat_declaring(w2, 5);  // rank 1's declaration is not the job's
  EXPECT_EQ(Job().spec().model().tensors_size(), 0);
  a1 = beat_declaring(w1, 3);
  EXPECT_EQ(Job().spec().model().tensors_size(), 2);
  EXPECT_EQ(Job().spec().model().tensors(0).shape(0), 3);
  EXPECT_EQ(a1.shard_map().shards_size(), 0);  // not before the shards have the job
  c_->Tick();
  ASSERT_EQ(shards_.creates.size(), 2u);  // 2 tensors, 2 chunks, one per shard
  EXPECT_EQ(shards_.creates[0].second.membership().worker_ids_size(), 2);
  a2 = Beat(w2, 0);
  EXPECT_GT(a2.shard_map().shards_size(), 0);
  EXPECT_EQ(a2.spec().model().tensors(0).shape(0), 3);  // rank 1 compares with this
}

// Both workers of a script job miss their heartbeats before rank 0 declared
// the tensors, so no shard has the job: when they register again, the job
// takes them back (it had stayed RUNNING with none until its deadline).
TEST_F(CoordinatorTest, AScriptJobThatLostEveryWorkerBeforeItsDeclarationTakesThemBack) {
  AddShards(2);
  job_ = SubmitScript(*c_, 2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  ASSERT_EQ(Job().state(), v1::RUNNING);
  Beat(w1, 0);
  Beat(w2, 0);
  clock_.Advance(absl::Seconds(12));  // both silent for 12s > 10s
  c_->Tick();
  v1::JobStatus job = Job();
  ASSERT_EQ(job.epochs_size(), 3) << job.DebugString();
  EXPECT_EQ(job.epochs(2).worker_ids_size(), 0);
  auto again = [&](std::pair<uint64_t, uint64_t> w) {
    v1::RegisterWorkerRequest r;
    r.set_worker_id(w.first);
    r.set_incarnation(w.second);
    auto resp = c_->RegisterWorker(r);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return std::make_pair(resp->worker_id(), resp->incarnation());
  };
  w1 = again(w1);
  w2 = again(w2);
  c_->Tick();
  c_->Tick();
  job = Job();
  ASSERT_EQ(job.state(), v1::RUNNING);
  ASSERT_EQ(job.epochs_size(), 4) << job.DebugString();
  EXPECT_EQ(job.epochs(3).worker_ids_size(), 2);
  EXPECT_EQ(job.epochs(3).effective_clock(), 0u);
  EXPECT_EQ(job.committed_epoch(), 4u);
  v1::Assignment a1 = Beat(w1, 0, v1::IDLE, ""), a2 = Beat(w2, 0, v1::IDLE, "");
  EXPECT_EQ(a1.job_id(), job_);
  EXPECT_EQ(a2.job_id(), job_);
  EXPECT_EQ(a1.rank() + a2.rank(), 1u);  // ranks 0 and 1: one of them declares
}

TEST_F(CoordinatorTest, FailingScriptFailsItsJobWithItsMessage) {
  AddShards(1);
  job_ = SubmitScript(*c_, 2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 0);
  v1::HeartbeatRequest r = Request(w2, v1::ERROR);
  r.set_message("entrypoint exited with code 3; last lines of its stderr:\nboom");
  ASSERT_TRUE(c_->Heartbeat(r).ok());
  EXPECT_EQ(Job().state(), v1::FAILED);
  EXPECT_TRUE(absl::StrContains(Job().message(), "exited with code 3")) << Job().message();
  EXPECT_TRUE(absl::StrContains(Job().message(), "boom"));
  EXPECT_EQ(Beat(w1, 1).job_state(), v1::FAILED);
}

TEST_F(CoordinatorTest, ScriptDoneBeforeTheOthersLeavesAndIsNotReplaced) {
  AddShards(1);
  job_ = SubmitScript(*c_, 2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  Beat(w1, 10);
  Beat(w2, 12, v1::DONE);
  EXPECT_EQ(Job().desired_workers(), 1u);
  ASSERT_EQ(Job().epochs_size(), 2);
  EXPECT_EQ(Job().epochs(1).worker_ids_size(), 1);
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 2);  // w2 is free, but nobody re-adds it
  Beat(w1, 12, v1::DONE);
  c_->Tick();
  EXPECT_EQ(Job().state(), v1::COMPLETED);
}

// An elastic script job below its MAX does not take back a member whose
// script finished once it is idle again: it would run the script past the
// last step (see [elastic jobs]).
TEST_F(CoordinatorTest, AnElasticScriptJobWindingDownTakesNobodyBack) {
  AddShards(1);
  job_ = SubmitScript(*c_, /*workers=*/4, /*workers_min=*/2);
  auto w1 = AddWorker();
  auto w2 = AddWorker();
  c_->Tick();
  ASSERT_EQ(Job().members_size(), 2);
  Beat(w1, 10);
  Beat(w2, 12, v1::DONE);
  EXPECT_EQ(Job().desired_workers(), 1u);
  EXPECT_EQ(Job().min_workers(), 1u);
  EXPECT_EQ(Beat(w2, 0, v1::IDLE, "").job_id(), "");  // idle again
  c_->Tick();
  c_->Tick();
  EXPECT_EQ(Job().epochs_size(), 2);  // not taken back
  EXPECT_EQ(Job().below_min_since_unix_ms(), 0);
}

v1::WorkerProgress Progress(uint64_t clock, float loss, float samples_per_sec) {
  v1::WorkerProgress p;
  p.set_clock(clock);
  p.set_loss(loss);
  p.set_samples_per_sec(samples_per_sec);
  return p;
}

// Issue 23 ([not measured]): before a member reports, the job's loss, rate
// and bytes are unset, not zeros; each appears with the first report of it.
TEST_F(CoordinatorTest, NothingReadsAsMeasuredBeforeTheFirstReport) {
  job_ = Submit(2);
  const auto [w1, w2] = StartWithTwoWorkers();
  Report(w1, v1::WorkerProgress());  // assigned, nothing trained yet
  v1::JobStatus job = Job();
  EXPECT_FALSE(job.progress().has_loss());
  EXPECT_FALSE(job.progress().has_samples_per_sec());
  EXPECT_FALSE(job.progress().has_bytes_pushed());
  EXPECT_FALSE(job.progress().has_bytes_pulled());
  EXPECT_FALSE(job.progress().has_compression_ratio());
  ASSERT_EQ(job.members_size(), 2);
  EXPECT_FALSE(job.members(0).has_loss());
  EXPECT_FALSE(job.members(0).has_samples_per_sec());
  c_->Tick();  // exports the gauges: no series for what is not measured
  EXPECT_TRUE(absl::StrContains(metrics_.Render(), "gs_job_clock{")) << metrics_.Render();
  EXPECT_FALSE(absl::StrContains(metrics_.Render(), "gs_job_loss{")) << metrics_.Render();
  EXPECT_FALSE(absl::StrContains(metrics_.Render(), "gs_job_samples_per_second{"));
  EXPECT_FALSE(absl::StrContains(metrics_.Render(), "gs_job_compression_ratio{"));
  // A loss, but no rate window closed yet and nothing pushed.
  Report(w1, Progress(3, 2.5f, 0));
  job = Job();
  EXPECT_FLOAT_EQ(job.progress().loss(), 2.5f);
  EXPECT_FALSE(job.progress().has_samples_per_sec());
  EXPECT_EQ(job.progress().bytes_pushed(), 0u);
  EXPECT_TRUE(job.progress().has_bytes_pushed());
  EXPECT_FALSE(job.progress().has_compression_ratio());
  EXPECT_TRUE(job.members(0).has_loss());
  EXPECT_FALSE(job.members(1).has_loss());
  v1::WorkerProgress p = Progress(5, 2.0f, 480);
  p.set_bytes_pushed(100);
  p.set_fp32_bytes_pushed(1600);
  Report(w2, p);
  job = Job();
  EXPECT_FLOAT_EQ(job.progress().samples_per_sec(), 480);
  EXPECT_FLOAT_EQ(job.progress().loss(), 2.25f);
  EXPECT_DOUBLE_EQ(job.progress().compression_ratio(), 16.0);
  EXPECT_FLOAT_EQ(job.members(1).samples_per_sec(), 480);
  c_->Tick();
  EXPECT_TRUE(absl::StrContains(metrics_.Render(), "gs_job_samples_per_second{job=\"" + job_ +
                                                       "\"} 480"))
      << metrics_.Render();
}

// [link choice]: what a member reports of its pushes' decision and of the
// share of its steps spent waiting, and what a shard answers of its pulls'
// decision, reach the job's view (gradstream status).
TEST_F(CoordinatorTest, TheLinkChoicesDecisionsAndTheWaitShareReachTheJobsView) {
  job_ = Submit(2);
  const auto [w1, w2] = StartWithTwoWorkers();
  v1::WorkerProgress p = Progress(44, 2.0f, 480);
  p.mutable_push_link()->set_clock(43);
  p.mutable_push_link()->set_exact(true);
  p.mutable_push_link()->set_exact_seconds(0.041);
  p.mutable_push_link()->set_codec_seconds(0.055);
  p.set_wait_share(0.625f);
  Report(w1, p);
  Report(w2, Progress(44, 2.0f, 480));
  {
    absl::MutexLock lock(&shards_.mu_);
    shards_.pull_link = LinkDecision{43, false, 0.09, 0.055};
  }
  c_->Tick();  // the shards' answers
  const v1::JobStatus job = Job();
  ASSERT_EQ(job.members_size(), 2);
  for (const auto& m : job.members()) {
    EXPECT_EQ(m.has_push_link(), m.worker_id() == w1.first) << m.DebugString();
  }
  const auto& m = job.members(job.members(0).worker_id() == w1.first ? 0 : 1);
  EXPECT_EQ(m.push_link().clock(), 43u);
  EXPECT_TRUE(m.push_link().exact());
  EXPECT_DOUBLE_EQ(m.push_link().codec_seconds(), 0.055);
  EXPECT_FLOAT_EQ(m.wait_share(), 0.625f);
  ASSERT_EQ(job.pull_links_size(), 1);
  EXPECT_EQ(job.pull_links(0).shard(), 0u);
  EXPECT_FALSE(job.pull_links(0).decision().exact());
  EXPECT_DOUBLE_EQ(job.pull_links(0).decision().exact_seconds(), 0.09);
}

// A member with valid credentials and hostile figures ([claimed clocks]):
// its shares, accuracy and rate are taken inside their domains, and a clock
// far past its shards' is capped, so its departure and the job's next
// scaling stay near the clocks the shards are at instead of past the end.
TEST_F(CoordinatorTest, AMembersHostileFiguresCannotGarbleItsJobNorStallItsScaling) {
  job_ = Submit(2, /*steps=*/100000);
  const auto [w1, w2] = StartWithTwoWorkers();
  {
    absl::MutexLock lock(&shards_.mu_);
    shards_.min_clock = 40;
    shards_.rounds = 40;
  }
  c_->Tick();  // the shards' clocks
  v1::WorkerProgress lie = Progress(uint64_t{1} << 60, NAN, INFINITY);
  lie.set_accuracy(85.0f);
  lie.set_accuracy_clock(uint64_t{1} << 60);
  lie.set_wait_share(7.0f);
  lie.set_encode_share(NAN);
  Report(w1, lie);
  Report(w2, Progress(41, 2.0f, 480));
  v1::JobStatus job = Job();
  ASSERT_EQ(job.members_size(), 2);
  const auto& liar = job.members(job.members(0).worker_id() == w1.first ? 0 : 1);
  EXPECT_LE(liar.clock(), 40u + 1000u) << liar.DebugString();
  EXPECT_GT(liar.clock(), 40u);
  EXPECT_FLOAT_EQ(liar.wait_share(), 1.0f);
  EXPECT_FLOAT_EQ(liar.encode_share(), 0.0f);
  EXPECT_FLOAT_EQ(liar.samples_per_sec(), 1e9f);
  EXPECT_FLOAT_EQ(job.progress().samples_per_sec(), 1e9f + 480);
  EXPECT_LE(job.progress().accuracy(), 1.0f);
  for (const auto& point : job.history()) EXPECT_LE(point.clock(), 40u + 1000u);

  // A third worker joins a little past the shards' clocks, not past the end.
  AddWorker();
  v1::ScaleJobRequest scale;
  scale.set_job_id(job_);
  scale.set_workers(3);
  ASSERT_TRUE(c_->ScaleJob(scale).ok());
  c_->Tick();
  c_->Tick();
  job = Job();
  ASSERT_EQ(job.epochs_size(), 2) << job.message();
  EXPECT_LE(job.epochs(1).effective_clock(), 40u + 1000u + 10u);

  // The liar fails: it is removed at its capped clock, not at 2^60.
  v1::HeartbeatRequest failed = Request(w1, v1::ERROR);
  *failed.mutable_progress() = lie;
  failed.set_message("gone");
  ASSERT_TRUE(c_->Heartbeat(failed).ok());
  job = Job();
  ASSERT_EQ(job.epochs_size(), 3);
  EXPECT_LE(job.epochs(2).effective_clock(), 40u + 1000u + 10u);
}

// Issue 23 ([run average]): a finished built-in job's throughput is its
// samples (clocks x batch per member) over its elapsed time, per job and
// per rank, also after its members left; not the members' last windows.
TEST_F(CoordinatorTest, AFinishedJobShowsItsRunAverage) {
  job_ = Submit(2, 50);  // batch 32
  const auto [w1, w2] = StartWithTwoWorkers();
  clock_.Advance(absl::Seconds(4));
  Report(w1, Progress(30, 1.0f, 900));
  Report(w2, Progress(30, 1.0f, 900));
  EXPECT_FLOAT_EQ(Job().progress().samples_per_sec(), 1800);  // running: the current rate
  clock_.Advance(absl::Seconds(6));
  Report(w1, Progress(50, 0.5f, 0), v1::DONE);  // the last window reads 0
  Report(w2, Progress(50, 0.5f, 0), v1::DONE);
  c_->Tick();
  v1::JobStatus done = Job();
  ASSERT_EQ(done.state(), v1::COMPLETED);
  EXPECT_EQ(done.progress().samples(), 2u * 50 * 32);
  EXPECT_FLOAT_EQ(done.progress().samples_per_sec(), 2 * 50 * 32 / 10.0);
  ASSERT_EQ(done.members_size(), 2);
  EXPECT_FLOAT_EQ(done.members(0).samples_per_sec(), 50 * 32 / 10.0);
  // Told of the end, the members leave the job; the average stays, and
  // survives a restart.
  Beat(w1, 50, v1::DONE);
  Beat(w2, 50, v1::DONE);
  EXPECT_EQ(Job().members_size(), 0);
  EXPECT_FLOAT_EQ(Job().progress().samples_per_sec(), 2 * 50 * 32 / 10.0);
  c_->Tick();
  Open();
  EXPECT_FLOAT_EQ(Job().progress().samples_per_sec(), 2 * 50 * 32 / 10.0);
}

// A script's batches are its own: its samples are the reported rates
// integrated over the heartbeats that saw its clock move (see [run average]).
TEST_F(CoordinatorTest, AFinishedScriptJobAveragesItsReportedRates) {
  job_ = SubmitScript(*c_, 2);
  const auto [w1, w2] = StartWithTwoWorkers();
  for (auto w : {w1, w2}) Report(w, Progress(1, 2.0f, 0));
  clock_.Advance(absl::Seconds(1));
  for (auto w : {w1, w2}) Report(w, Progress(5, 1.0f, 100));  // +100 each
  clock_.Advance(absl::Seconds(1));
  for (auto w : {w1, w2}) Report(w, Progress(5, 1.0f, 100));  // waiting: +0
  clock_.Advance(absl::Seconds(2));
  Report(w1, Progress(9, 1.0f, 50), v1::DONE);  // +100; done first, leaves
  EXPECT_EQ(Job().members_size(), 1);
  Report(w2, Progress(9, 1.0f, 50), v1::DONE);
  c_->Tick();
  v1::JobStatus done = Job();
  ASSERT_EQ(done.state(), v1::COMPLETED);
  EXPECT_EQ(done.progress().samples(), 400u);
  EXPECT_FLOAT_EQ(done.progress().samples_per_sec(), 400 / 4.0);
}

// The ETA comes from the shards' recent clock rate, and only while the
// clock moves.
TEST_F(CoordinatorTest, ARunningJobHasAnEtaFromItsClockRate) {
  job_ = Submit(2, 100);
  StartWithTwoWorkers();
  EXPECT_FALSE(Job().progress().has_eta_seconds());  // no rate yet
  clock_.Advance(absl::Seconds(1));
  shards_.min_clock = shards_.rounds = 10;
  c_->Tick();
  clock_.Advance(absl::Seconds(1));
  shards_.min_clock = shards_.rounds = 20;
  c_->Tick();
  EXPECT_EQ(Job().progress().clock(), 20u);
  EXPECT_DOUBLE_EQ(Job().progress().eta_seconds(), (100 - 20) / 10.0);
  clock_.Advance(absl::Seconds(5));  // the clock stands still: a stall, no ETA
  c_->Tick();
  EXPECT_GE(Job().progress().stalled_seconds(), 5);
  EXPECT_FALSE(Job().progress().has_eta_seconds());
}

TEST_F(CoordinatorTest, MembersOfACancelledJobLeaveItWithOneWriteNotOneEach) {
  AddShards(1);
  job_ = Submit(4);
  std::vector<std::pair<uint64_t, uint64_t>> w;
  for (int i = 0; i < 4; ++i) w.push_back(AddWorker());
  c_->Tick();
  for (const auto& x : w) ASSERT_EQ(Beat(x, 5).job_id(), job_);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(job_);
  ASSERT_TRUE(c_->CancelJob(cancel).ok());
  metrics::Histogram* saves = metrics_.GetHistogram("gs_coordinator_state_save_seconds", "", {});
  const uint64_t before = saves->count();
  for (const auto& x : w) EXPECT_EQ(Beat(x, 5).job_state(), v1::CANCELLED);
  EXPECT_EQ(saves->count(), before);  // see [ended jobs]
  EXPECT_EQ(Job().members_size(), 0);
  for (const auto& x : w) EXPECT_EQ(Beat(x, 0, v1::IDLE, "-").job_id(), "");  // free again
  c_->Tick();
  EXPECT_GT(saves->count(), before);  // the tick's save carries the amendments
  // What the state file says after a crash now: the job without members.
  Open();
  EXPECT_EQ(Job().members_size(), 0);
}

// Holds the next state write in its transaction (the middle of a durable
// write, as a slow fsync does) until Release().
class StallingWrite {
 public:
  absl::Status BeforeCommit() {
    if (armed_.exchange(false)) {
      stalled_.Notify();
      release_.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
    return absl::OkStatus();
  }
  void Arm() { armed_ = true; }
  bool WaitStalled() { return stalled_.WaitForNotificationWithTimeout(absl::Seconds(10)); }
  void Release() { release_.Notify(); }

 private:
  std::atomic<bool> armed_{false};
  absl::Notification stalled_, release_;
};

TEST_F(CoordinatorTest, HeartbeatsAndReadsDoNotWaitForAStateWriteOnDisk) {
  StallingWrite env;
  store_options_.before_commit = [&env] { return env.BeforeCommit(); };
  Open();
  AddShards(1);
  job_ = Submit(1);
  auto w = AddWorker();
  c_->Tick();
  ASSERT_EQ(Beat(w, 0).job_id(), job_);
  // A scale-up whose write stalls on disk, as a slow fsync does.
  env.Arm();
  auto scale = std::async(std::launch::async, [&] {
    v1::ScaleJobRequest r;
    r.set_job_id(job_);
    r.set_workers(2);
    return c_->ScaleJob(r).status();
  });
  ASSERT_TRUE(env.WaitStalled());
  // A heartbeat that changes nothing durable and a status read answer now,
  // and show the job as it was: the scale is not durable yet.
  auto beat = std::async(std::launch::async, [&] { return Beat(w, 3).job_id(); });
  auto read = std::async(std::launch::async, [&] { return Job().desired_workers(); });
  const bool beat_answered = beat.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  const bool read_answered = read.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  // Another write waits for the one on disk.
  auto second = std::async(std::launch::async, [&] { return AddWorker().first; });
  const bool second_waited =
      second.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout;
  env.Release();
  ASSERT_TRUE(beat_answered && read_answered) << "a heartbeat waited for the state write";
  EXPECT_EQ(beat.get(), job_);
  EXPECT_EQ(read.get(), 1u);
  EXPECT_TRUE(second_waited);
  EXPECT_TRUE(scale.get().ok());
  EXPECT_GT(second.get(), 0u);
  EXPECT_EQ(Job().desired_workers(), 2u);
  // What the heartbeat reported while the write was on disk is kept.
  EXPECT_EQ(Job().members(0).clock(), 3u);
  c_.reset();  // before `env`
}

TEST_F(CoordinatorTest, RegistrationsDuringAWriteShareTheNextWrite) {
  StallingWrite env;
  store_options_.before_commit = [&env] { return env.BeforeCommit(); };
  Open();
  env.Arm();
  auto first = std::async(std::launch::async, [&] { return AddWorker().first; });
  ASSERT_TRUE(env.WaitStalled());
  // Five more while the first one's write is on disk: in the pool at once.
  std::vector<std::future<uint64_t>> more;
  for (int i = 0; i < 5; ++i) {
    more.push_back(std::async(std::launch::async, [&] { return AddWorker().first; }));
  }
  bool pooled = false;
  for (absl::Time until = absl::Now() + absl::Seconds(5); !pooled && absl::Now() < until;) {
    pooled = c_->GetCluster().workers_size() == 6;
    if (!pooled) absl::SleepFor(absl::Milliseconds(10));
  }
  metrics::Histogram* saves = metrics_.GetHistogram("gs_coordinator_state_save_seconds", "", {});
  const uint64_t before = saves->count();  // the first write is not counted yet
  env.Release();
  std::set<uint64_t> ids = {first.get()};
  for (auto& f : more) ids.insert(f.get());
  ASSERT_TRUE(pooled) << "registrations waited for the write on disk";
  EXPECT_EQ(ids.size(), 6u);
  EXPECT_LE(saves->count(), before + 2);  // the first write and one for the five
  Open();  // every answered registration is on disk
  EXPECT_EQ(c_->GetCluster().workers_size(), 6);
  c_.reset();  // before `env`
}

}  // namespace
}  // namespace gradstream::coordinator
