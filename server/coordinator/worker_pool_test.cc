// The worker pool with a manual clock: registration, incarnations,
// heartbeats and liveness.
#include "server/coordinator/worker_pool.h"

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

WorkerRegistration Hello(uint64_t id = 0, uint64_t incarnation = 0) {
  WorkerRegistration r;
  r.worker_id = id;
  r.incarnation = incarnation;
  r.name = "w";
  return r;
}

HeartbeatReport Beat(const WorkerRecord& w, const std::string& job = "",
                     WorkerState state = WorkerState::kTraining) {
  HeartbeatReport r;
  r.worker_id = w.status.worker_id;
  r.incarnation = w.status.incarnation;
  r.job_id = job;
  r.state = state;
  return r;
}

TEST(WorkerPool, NewWorkersGetFreshIdsAndTheFirstIncarnation) {
  WorkerPool pool(absl::Seconds(10));
  const WorkerRecord& a = pool.Register(Hello(), kT0);
  const WorkerRecord& b = pool.Register(Hello(), kT0);
  EXPECT_EQ(a.status.worker_id, 1u);
  EXPECT_EQ(b.status.worker_id, 2u);
  EXPECT_EQ(a.status.incarnation, 1u);
  EXPECT_EQ(pool.Free(), (std::vector<uint64_t>{1, 2}));
}

TEST(WorkerPool, TheSameProcessKeepsItsIncarnationAnotherGetsTheNext) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  WorkerPool::Assign(w, "job-1");
  EXPECT_TRUE(WorkerPool::SameProcess(w, Hello(1, 1)));
  pool.Register(Hello(1, 1), kT0);  // the coordinator restarted
  EXPECT_EQ(w.status.incarnation, 1u);
  EXPECT_EQ(w.status.job_id, "job-1");
  EXPECT_FALSE(WorkerPool::SameProcess(w, Hello(1, 0)));
  pool.Register(Hello(1, 0), kT0);  // a new process
  EXPECT_EQ(w.status.incarnation, 2u);
  EXPECT_EQ(w.status.job_id, "");
  EXPECT_EQ(w.status.state, WorkerState::kIdle);
}

TEST(WorkerPool, HeartbeatsAreCheckedAndStateOfAnotherJobIsIdle) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  HeartbeatReport unknown;
  unknown.worker_id = 99;
  EXPECT_EQ(pool.Beat(unknown, kT0).status().code(), absl::StatusCode::kNotFound);
  HeartbeatReport stale = Beat(w);
  stale.incarnation = 7;
  EXPECT_EQ(pool.Beat(stale, kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  WorkerPool::Assign(w, "job-2");
  ASSERT_TRUE(pool.Beat(Beat(w, "job-1", WorkerState::kDone), kT0).ok());
  EXPECT_EQ(w.status.state, WorkerState::kIdle);  // a DONE for job-1 says nothing of job-2
  ASSERT_TRUE(pool.Beat(Beat(w, "job-2", WorkerState::kDone), kT0).ok());
  EXPECT_EQ(w.status.state, WorkerState::kDone);
}

TEST(WorkerPool, SilentWorkersAreOverdueAndDeadOnesMustRegister) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& a = pool.Register(Hello(), kT0);
  WorkerRecord& b = pool.Register(Hello(), kT0);
  ASSERT_TRUE(pool.Beat(Beat(a), kT0 + absl::Seconds(8)).ok());
  const absl::Time later = kT0 + absl::Seconds(12);
  EXPECT_EQ(pool.Overdue(later), (std::vector<uint64_t>{b.status.worker_id}));
  EXPECT_FALSE(pool.Healthy(b, later));
  WorkerPool::MarkDead(b);
  EXPECT_TRUE(pool.Overdue(later).empty());
  EXPECT_EQ(pool.Free(), (std::vector<uint64_t>{a.status.worker_id}));
  EXPECT_EQ(pool.Beat(Beat(b), later).status().code(), absl::StatusCode::kFailedPrecondition);
  pool.Register(Hello(b.status.worker_id, b.status.incarnation), later);
  EXPECT_FALSE(b.dead);
  EXPECT_EQ(b.status.incarnation, 2u);
}

TEST(WorkerPool, ReleaseForgetsTheJobsProgressAndRate) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  WorkerPool::Assign(w, "job-1");
  WorkerProgress p;
  p.clock = 3;
  WorkerPool::Report(w, p, kT0);
  p.clock = 13;
  WorkerPool::Report(w, p, kT0 + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(w.clock_rate.rate, 10);
  EXPECT_EQ(w.status.clock, 13u);
  WorkerPool::Release(w);
  EXPECT_EQ(w.status.job_id, "");
  EXPECT_EQ(w.progress.clock, 0u);
  EXPECT_EQ(w.clock_rate.rate, 0);
}

// See [joiner rate]: the jump to the join clock is no progress.
TEST(WorkerPool, AJoinersRateStartsAtItsJoinClock) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& joiner = pool.Register(Hello(), kT0);
  WorkerPool::Assign(joiner, "job-1");
  // A report of `clock` `s` seconds in, by a member that joined at 555.
  auto report_at = [&](uint64_t clock, int s) {
    WorkerProgress progress;
    progress.clock = clock;
    WorkerPool::Report(joiner, progress, kT0 + absl::Seconds(s), /*join_clock=*/555);
    return joiner.clock_rate.PlanningRate();
  };
  EXPECT_EQ(report_at(0, 0), 0);
  EXPECT_EQ(report_at(555, 1), 0);  // it heard of its join clock: no step trained
  EXPECT_DOUBLE_EQ(report_at(575, 2), 20);
}

TEST(WorkerPool, RestoreGivesEveryWorkerAFullTimeout) {
  DurableState state;
  state.next_worker_id = 5;
  state.workers.push_back(WorkerStatus{.worker_id = 3, .healthy = true});
  state.workers.push_back(WorkerStatus{.worker_id = 4, .healthy = false});
  WorkerPool pool(absl::Seconds(10));
  pool.Restore(state, kT0);
  EXPECT_TRUE(pool.Healthy(*pool.Find(3), kT0 + absl::Seconds(10)));
  EXPECT_TRUE(pool.Find(4)->dead);
  EXPECT_EQ(pool.Register(Hello(), kT0).status.worker_id, 5u);
  DurableState out;
  pool.WriteTo(out);
  EXPECT_EQ(out.next_worker_id, 6u);
  EXPECT_EQ(out.workers.size(), 3u);
}

}  // namespace
}  // namespace gradstream::coordinator
