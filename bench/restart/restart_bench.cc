// restart_bench: how long a coordinator with a long history takes to be
// back in service after a restart (10,000 finished jobs and 200 live
// workers, under 2 s; results in README.md here).
//
//   restart_bench --dir=/tmp/rb [--finished=10000] [--running=10] [--per_job=20]
//
// 1. A real Coordinator (in this process, state in DIR/coordinator.db, a
//    shard client that answers at once) gets `running` jobs of `per_job`
//    workers each through its API: registrations, submits, ticks until
//    every job runs with a committed epoch.
// 2. `finished` finished jobs are added through the StateStore (one
//    transaction: fast), each a copy of a running job's record (spec,
//    epochs, history) marked COMPLETED.
// 3. The restart, timed: Coordinator::Open on the database; GetCluster
//    lists every worker; one Tick re-creates every running job on its
//    shards (a restarted coordinator assumes the shards may have lost
//    them, see coordinator_test StateSurvivesReopen); every worker's
//    heartbeat gets its job back; then one more tick, as every tick_interval
//    from then on. Prints one line per phase. (Before it, one restart and
//    tick that is not timed brings the copied records to what the
//    coordinator writes for a finished job.)
// The database is left in DIR, so the real binary can be timed on it too
// (restart.sh; README.md here).
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/metrics/metrics.h"
#include "server/coordinator/rpc/coordinator_api.h"
#include "server/coordinator/rpc/state_store.h"

ABSL_FLAG(std::string, dir, "/tmp/restart_bench", "Where the database goes (emptied first).");
ABSL_FLAG(int, finished, 10000, "Finished jobs in the history.");
ABSL_FLAG(int, running, 10, "Running jobs.");
ABSL_FLAG(int, per_job, 20, "Workers per running job.");

namespace {

namespace v1 = gradstream::v1;
namespace coordinator = gradstream::coordinator;
using coordinator::CoordinatorApi;
using coordinator::CoordinatorOptions;

// Answers every shard call at once; counts CreateJob calls.
class InstantShards final : public coordinator::ShardClient {
 public:
  absl::StatusOr<coordinator::ShardJobCreated> CreateJob(const std::string&,
                                                         const coordinator::ShardJob&) override {
    ++creates;
    return coordinator::ShardJobCreated();
  }
  absl::Status UpdateMembership(const std::string&, const std::string&,
                                const coordinator::MembershipEpoch&) override {
    return absl::OkStatus();
  }
  absl::Status DropJob(const std::string&, const std::string&) override {
    return absl::OkStatus();
  }
  absl::StatusOr<coordinator::ShardJobStats> GetStats(const std::string&,
                                                      const std::string&) override {
    return coordinator::ShardJobStats();
  }
  std::atomic<int> creates{0};
};

[[noreturn]] void Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "restart_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(1);
}

double Ms(absl::Time since) { return absl::ToDoubleMilliseconds(absl::Now() - since); }

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const int running = absl::GetFlag(FLAGS_running), per_job = absl::GetFlag(FLAGS_per_job);
  const int finished = absl::GetFlag(FLAGS_finished);

  gradstream::metrics::Registry registry;
  const std::string state_file = dir + "/coordinator.db";
  CoordinatorOptions options;
  options.metrics = &registry;
  options.keep_finished = static_cast<size_t>(finished) + 1;
  options.keep_finished_for = absl::InfiniteDuration();
  InstantShards shards;

  // 1. The live part, through the API.
  std::vector<v1::RegisterWorkerResponse> workers;
  std::vector<std::string> jobs;
  {
    auto c = coordinator::OpenCoordinator(options, &shards, state_file);
    if (!c.ok()) Die("open", c.status());
    CoordinatorApi api(c->get());
    for (int s = 0; s < 4; ++s) {
      v1::RegisterShardRequest r;
      r.set_address(absl::StrFormat("127.0.0.1:%d", 9000 + s));
      if (auto resp = api.RegisterShard(r); !resp.ok()) Die("shard", resp.status());
    }
    for (int j = 0; j < running; ++j) {
      v1::SubmitJobRequest r;
      r.mutable_spec()->set_name(absl::StrFormat("live-%d", j));
      r.mutable_spec()->set_workers(per_job);
      r.mutable_spec()->set_steps(1000000);
      auto resp = api.SubmitJob(r);
      if (!resp.ok()) Die("submit", resp.status());
      jobs.push_back(resp->job_id());
    }
    for (int w = 0; w < running * per_job; ++w) {
      v1::RegisterWorkerRequest r;
      r.set_name(absl::StrFormat("w%d", w));
      auto resp = api.RegisterWorker(r);
      if (!resp.ok()) Die("register", resp.status());
      workers.push_back(*resp);
    }
    for (int i = 0; i < 5; ++i) (*c)->Tick();
    for (const auto& id : jobs) {
      v1::GetJobRequest r;
      r.set_job_id(id);
      auto job = api.GetJob(r);
      if (!job.ok() || job->state() != v1::RUNNING || job->committed_epoch() == 0) {
        Die("job " + id + " did not start", job.status());
      }
    }
  }

  // 2. The history, through the store: one transaction.
  const absl::Time fill = absl::Now();
  {
    auto store = coordinator::StateStore::Open(state_file);
    if (!store.ok()) Die("store", store.status());
    auto state = (*store)->Load();
    if (!state.ok()) Die("load", state.status());
    v1::JobStatus model = state->jobs(0);
    model.clear_members();
    model.set_state(v1::COMPLETED);
    for (int p = 0; p < 20; ++p) model.add_history()->set_clock(p * 1000);
    const uint64_t first = state->next_job();
    for (int i = 0; i < finished; ++i) {
      v1::JobStatus* job = state->add_jobs();
      *job = model;
      job->set_job_id(absl::StrFormat("job-%06d", first + i));
      job->set_finished_unix_ms(absl::ToUnixMillis(absl::Now()) - 1000 * (finished - i));
      (*state->mutable_retired())[job->job_id()].set_samples(1000 * i);
    }
    state->set_next_job(first + finished);
    if (absl::Status s = (*store)->Save(*state); !s.ok()) Die("save", s);
  }
  std::printf("history: %d finished jobs written in %.0f ms, database %.1f MB\n", finished,
              Ms(fill),
              std::filesystem::file_size(state_file) / (1024.0 * 1024.0));

  // One restart and tick that the measured one does not count: the copied
  // records' progress becomes what the coordinator computes for a finished
  // job, as it is for jobs that finished under a running coordinator.
  {
    auto c = coordinator::OpenCoordinator(options, &shards, state_file);
    if (!c.ok()) Die("warm-up open", c.status());
    (*c)->Tick();
  }

  // The store alone: reading every row, then building the state.
  {
    const absl::Time read = absl::Now();
    auto store = coordinator::StateStore::Open(state_file);
    if (!store.ok()) Die("store", store.status());
    const double opened = Ms(read);
    auto state = (*store)->Load();
    if (!state.ok()) Die("load", state.status());
    std::printf("store: rows read in %.0f ms, state built in %.0f ms\n", opened,
                Ms(read) - opened);
  }

  // 3. The restart.
  const absl::Time start = absl::Now();
  auto c = coordinator::OpenCoordinator(options, &shards, state_file);
  if (!c.ok()) Die("reopen", c.status());
  CoordinatorApi api(c->get());
  const double opened = Ms(start);
  const v1::ClusterStatus cluster = api.GetCluster();
  const double answered = Ms(start);
  if (cluster.workers_size() != running * per_job) {
    Die("cluster", absl::InternalError(absl::StrFormat("%d workers", cluster.workers_size())));
  }
  shards.creates = 0;
  (*c)->Tick();
  const int recreated = shards.creates;
  const double resumed = Ms(start);
  int back = 0;
  for (const auto& w : workers) {
    v1::HeartbeatRequest r;
    r.set_worker_id(w.worker_id());
    r.set_incarnation(w.incarnation());
    r.set_state(v1::TRAINING);
    auto resp = api.Heartbeat(r);
    if (resp.ok() && !resp->assignment().job_id().empty()) ++back;
  }
  const double beaten = Ms(start);
  const absl::Time again = absl::Now();
  (*c)->Tick();
  const double tick = Ms(again);
  std::printf("restart: open %.0f ms, cluster answered %.0f ms (%d workers), "
              "%d running jobs re-created on their shards %.0f ms (%d CreateJob), "
              "%d/%zu workers heard their job %.0f ms; a later tick %.0f ms\n",
              opened, answered, cluster.workers_size(), running, resumed, recreated, back,
              workers.size(), beaten, tick);
  const bool ok = back == static_cast<int>(workers.size()) && recreated >= running;
  if (!ok) std::printf("restart: FAILED (not every job or worker came back)\n");
  return ok ? 0 : 1;
}
