// The worker pool with a manual clock: registration, incarnations,
// heartbeats and liveness.
#include "server/coordinator/worker_pool.h"

#include "gtest/gtest.h"

namespace gradstream::coordinator {
namespace {

namespace v1 = gradstream::v1;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

v1::RegisterWorkerRequest Hello(uint64_t id = 0, uint64_t incarnation = 0) {
  v1::RegisterWorkerRequest r;
  r.set_worker_id(id);
  r.set_incarnation(incarnation);
  r.set_name("w");
  return r;
}

v1::HeartbeatRequest Beat(const WorkerRecord& w, const std::string& job = "",
                          v1::WorkerState state = v1::TRAINING) {
  v1::HeartbeatRequest r;
  r.set_worker_id(w.status.worker_id());
  r.set_incarnation(w.status.incarnation());
  r.set_job_id(job);
  r.set_state(state);
  return r;
}

TEST(WorkerPool, NewWorkersGetFreshIdsAndTheFirstIncarnation) {
  WorkerPool pool(absl::Seconds(10));
  const WorkerRecord& a = pool.Register(Hello(), kT0);
  const WorkerRecord& b = pool.Register(Hello(), kT0);
  EXPECT_EQ(a.status.worker_id(), 1u);
  EXPECT_EQ(b.status.worker_id(), 2u);
  EXPECT_EQ(a.status.incarnation(), 1u);
  EXPECT_EQ(pool.Free(), (std::vector<uint64_t>{1, 2}));
}

TEST(WorkerPool, TheSameProcessKeepsItsIncarnationAnotherGetsTheNext) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  WorkerPool::Assign(w, "job-1");
  EXPECT_TRUE(WorkerPool::SameProcess(w, Hello(1, 1)));
  pool.Register(Hello(1, 1), kT0);  // the coordinator restarted
  EXPECT_EQ(w.status.incarnation(), 1u);
  EXPECT_EQ(w.status.job_id(), "job-1");
  EXPECT_FALSE(WorkerPool::SameProcess(w, Hello(1, 0)));
  pool.Register(Hello(1, 0), kT0);  // a new process
  EXPECT_EQ(w.status.incarnation(), 2u);
  EXPECT_EQ(w.status.job_id(), "");
  EXPECT_EQ(w.status.state(), v1::IDLE);
}

TEST(WorkerPool, HeartbeatsAreCheckedAndStateOfAnotherJobIsIdle) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  v1::HeartbeatRequest unknown;
  unknown.set_worker_id(99);
  EXPECT_EQ(pool.Beat(unknown, kT0).status().code(), absl::StatusCode::kNotFound);
  v1::HeartbeatRequest stale = Beat(w);
  stale.set_incarnation(7);
  EXPECT_EQ(pool.Beat(stale, kT0).status().code(), absl::StatusCode::kFailedPrecondition);
  WorkerPool::Assign(w, "job-2");
  ASSERT_TRUE(pool.Beat(Beat(w, "job-1", v1::DONE), kT0).ok());
  EXPECT_EQ(w.status.state(), v1::IDLE);  // a DONE for job-1 says nothing of job-2
  ASSERT_TRUE(pool.Beat(Beat(w, "job-2", v1::DONE), kT0).ok());
  EXPECT_EQ(w.status.state(), v1::DONE);
}

TEST(WorkerPool, SilentWorkersAreOverdueAndDeadOnesMustRegister) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& a = pool.Register(Hello(), kT0);
  WorkerRecord& b = pool.Register(Hello(), kT0);
  ASSERT_TRUE(pool.Beat(Beat(a), kT0 + absl::Seconds(8)).ok());
  const absl::Time later = kT0 + absl::Seconds(12);
  EXPECT_EQ(pool.Overdue(later), (std::vector<uint64_t>{b.status.worker_id()}));
  EXPECT_FALSE(pool.Healthy(b, later));
  WorkerPool::MarkDead(b);
  EXPECT_TRUE(pool.Overdue(later).empty());
  EXPECT_EQ(pool.Free(), (std::vector<uint64_t>{a.status.worker_id()}));
  EXPECT_EQ(pool.Beat(Beat(b), later).status().code(), absl::StatusCode::kFailedPrecondition);
  pool.Register(Hello(b.status.worker_id(), b.status.incarnation()), later);
  EXPECT_FALSE(b.dead);
  EXPECT_EQ(b.status.incarnation(), 2u);
}

TEST(WorkerPool, ReleaseForgetsTheJobsProgressAndRate) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& w = pool.Register(Hello(), kT0);
  WorkerPool::Assign(w, "job-1");
  v1::WorkerProgress p;
  p.set_clock(3);
  WorkerPool::Report(w, p, kT0);
  p.set_clock(13);
  WorkerPool::Report(w, p, kT0 + absl::Seconds(1));
  EXPECT_DOUBLE_EQ(w.clock_rate.rate, 10);
  EXPECT_EQ(w.status.clock(), 13u);
  WorkerPool::Release(w);
  EXPECT_EQ(w.status.job_id(), "");
  EXPECT_EQ(w.progress.clock(), 0u);
  EXPECT_EQ(w.clock_rate.rate, 0);
}

// See [joiner rate]: the jump to the join clock is no progress.
TEST(WorkerPool, AJoinersRateStartsAtItsJoinClock) {
  WorkerPool pool(absl::Seconds(10));
  WorkerRecord& joiner = pool.Register(Hello(), kT0);
  WorkerPool::Assign(joiner, "job-1");
  // A report of `clock` `s` seconds in, by a member that joined at 555.
  auto report_at = [&](uint64_t clock, int s) {
    v1::WorkerProgress progress;
    progress.set_clock(clock);
    WorkerPool::Report(joiner, progress, kT0 + absl::Seconds(s), /*join_clock=*/555);
    return joiner.clock_rate.PlanningRate();
  };
  EXPECT_EQ(report_at(0, 0), 0);
  EXPECT_EQ(report_at(555, 1), 0);  // it heard of its join clock: no step trained
  EXPECT_DOUBLE_EQ(report_at(575, 2), 20);
}

TEST(WorkerPool, RestoreGivesEveryWorkerAFullTimeout) {
  v1::CoordinatorState state;
  state.set_next_worker_id(5);
  v1::WorkerStatus* live = state.add_workers();
  live->set_worker_id(3);
  live->set_healthy(true);
  v1::WorkerStatus* dead = state.add_workers();
  dead->set_worker_id(4);
  dead->set_healthy(false);
  WorkerPool pool(absl::Seconds(10));
  pool.Restore(state, kT0);
  EXPECT_TRUE(pool.Healthy(*pool.Find(3), kT0 + absl::Seconds(10)));
  EXPECT_TRUE(pool.Find(4)->dead);
  EXPECT_EQ(pool.Register(Hello(), kT0).status.worker_id(), 5u);
  v1::CoordinatorState out;
  pool.WriteTo(out);
  EXPECT_EQ(out.next_worker_id(), 6u);
  EXPECT_EQ(out.workers_size(), 3);
}

}  // namespace
}  // namespace gradstream::coordinator
