// Control-plane scale benchmark (README.md here): a real gs_coordinator and
// real gs_shard processes on loopback, and ONE process simulating N workers
// (sim_fleet.h: each its own channel, registering, heartbeating at the
// coordinator's interval, taking assignments, leaving) while M jobs run with
// submissions, cancels and scalings going on. For every (N, M) point, a
// fresh cluster and two windows:
//   * control (--seconds): every --churn_ms the oldest running job is
//     cancelled and a new one submitted, or a running job is scaled by one
//     worker (alternately). Measured: the coordinator's CPU (/proc/PID/stat)
//     and RSS, heartbeat round trips, submit -> RUNNING (the coordinator's
//     own submitted/started stamps), scale -> the new epoch committed (polled
//     with GetJob), the state file's size and its writes/s (/metrics).
//   * push (--push_seconds): the churn stops and up to --max_pushers members
//     (the lowest ranks of each job) push a small MLP's gradients to the
//     shards through PsClient, as fast as the shards acknowledge.
// Writes a db_bench-style table to stdout, --json and --png (gnuplot).
//
//   nice scale_bench [--workers=16,64,256,1024] [--jobs=1,10,100] [--seconds=15]
//                    [--push_seconds=8] [--json=scale.json] [--png=scale.png]
#include <deque>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "bench/scale/report.h"
#include "bench/scale/sim_fleet.h"
#include "common/rpc/rpc.h"
#include "common/status.h"
#include "coordinator.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/control/process.h"

ABSL_FLAG(std::vector<std::string>, workers, std::vector<std::string>({"16", "64", "256", "1024"}),
          "simulated worker counts");
ABSL_FLAG(std::vector<std::string>, jobs, std::vector<std::string>({"1", "10", "100"}),
          "concurrent job counts");
ABSL_FLAG(int, shards, 2, "gs_shard processes");
ABSL_FLAG(int, seconds, 15, "control window per point");
ABSL_FLAG(int, push_seconds, 8, "push window per point (0 = none)");
ABSL_FLAG(int, churn_ms, 1000, "one cancel+submit or one scale this often");
ABSL_FLAG(int, max_pushers, 256, "simulated workers that push in the push window");
ABSL_FLAG(int, heartbeat_threads, 0,
          "threads the simulated workers' heartbeats share; 0 = one per worker, as separate "
          "processes would (a shared thread turns one slow answer into missed heartbeats)");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "the coordinator's --heartbeat_timeout (it asks for a heartbeat every fifth of it)");
ABSL_FLAG(std::vector<std::string>, hidden, std::vector<std::string>({"256"}),
          "the jobs' MLP hidden widths");
ABSL_FLAG(std::vector<std::string>, coordinator_args, {}, "extra gs_coordinator flags");
ABSL_FLAG(std::string, json, "", "write the results here");
ABSL_FLAG(std::string, png, "", "plot the results here (gnuplot)");
ABSL_FLAG(std::string, coordinator_binary, GS_COORDINATOR_BINARY, "gs_coordinator");
ABSL_FLAG(std::string, shard_binary, GS_SHARD_BINARY, "gs_shard");

namespace gradstream::bench {
namespace {

namespace v1 = gradstream::v1;
using testing::Process;

// Long: a coordinator under load must answer late rather than end the point.
constexpr absl::Duration kRpcDeadline = absl::Seconds(60);
constexpr absl::Duration kStartDeadline = absl::Seconds(30);

template <typename Method, typename Req, typename Resp>
absl::Status Call(v1::Coordinator::Stub* stub, Method method, const char* name, const Req& req,
                  Resp* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
  const grpc::Status s = (stub->*method)(&ctx, req, resp);
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(name, ": ", s.error_message()));
}

// The value of the unlabelled sample `series` in a /metrics scrape, or 0.
double Metric(int port, const std::string& series) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto res = client.Get("/metrics");
  if (!res || res->status != 200) return 0;
  const std::string& text = res->body;
  const std::string prefix = series + " ";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    const size_t end = text.find('\n', at);
    double v = 0;
    if (absl::SimpleAtod(text.substr(at + prefix.size(), end - at - prefix.size()), &v)) return v;
  }
  return 0;
}

std::vector<int> Ints(const std::vector<std::string>& in) {
  std::vector<int> out;
  for (const auto& s : in) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) out.push_back(v);
  }
  return out;
}

// The cluster of one point: shards, the coordinator, a control stub.
struct Cluster {
  std::string dir;
  std::vector<std::unique_ptr<Process>> shards;
  std::unique_ptr<Process> coordinator;
  std::string address;
  int metrics_port = 0;
  std::unique_ptr<v1::Coordinator::Stub> stub;
};

absl::StatusOr<Cluster> StartCluster() {
  Cluster c;
  c.dir = testing::MakeTempDir("gs-scale");
  std::vector<std::string> shard_addresses;
  for (int i = 0; i < absl::GetFlag(FLAGS_shards); ++i) {
    const std::string port_file = absl::StrCat(c.dir, "/shard", i, ".port");
    GS_ASSIGN_OR_RETURN(auto p, Process::Start(absl::GetFlag(FLAGS_shard_binary),
                                               {"--port=0", "--port_file=" + port_file,
                                                absl::StrCat("--shard_index=", i),
                                                "--max_jobs=4096"},
                                               absl::StrCat(c.dir, "/shard", i, ".log")));
    GS_ASSIGN_OR_RETURN(int port, testing::WaitForPortFile(port_file, *p, kStartDeadline));
    shard_addresses.push_back(absl::StrCat("127.0.0.1:", port));
    c.shards.push_back(std::move(p));
  }
  const std::string port_file = c.dir + "/coordinator.port";
  const std::string metrics_file = c.dir + "/metrics.port";
  std::vector<std::string> args = {
      "--port=0", "--port_file=" + port_file, "--state_file=" + c.dir + "/coordinator.state",
      "--shards=" + absl::StrJoin(shard_addresses, ","), "--metrics_port=0",
      "--metrics_port_file=" + metrics_file,
      "--heartbeat_timeout=" + absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_timeout))};
  for (const auto& a : absl::GetFlag(FLAGS_coordinator_args)) args.push_back(a);
  GS_ASSIGN_OR_RETURN(c.coordinator, Process::Start(absl::GetFlag(FLAGS_coordinator_binary), args,
                                                    c.dir + "/coordinator.log"));
  GS_ASSIGN_OR_RETURN(int port,
                      testing::WaitForPortFile(port_file, *c.coordinator, kStartDeadline));
  GS_ASSIGN_OR_RETURN(c.metrics_port,
                      testing::WaitForPortFile(metrics_file, *c.coordinator, kStartDeadline));
  c.address = absl::StrCat("127.0.0.1:", port);
  c.stub = v1::Coordinator::NewStub(rpc::NewChannel(c.address, rpc::RpcConfig{}));
  return c;
}

v1::JobSpec Spec(int workers, int k) {
  v1::JobSpec spec;
  spec.set_name(absl::StrCat("scale-", k));
  spec.mutable_model()->set_type("mlp");
  for (int h : Ints(absl::GetFlag(FLAGS_hidden))) spec.mutable_model()->add_hidden(h);
  spec.set_workers(workers);
  spec.set_steps(1000000000);  // runs until cancelled
  spec.set_eval_every(1000000000);
  // Members that never push must not hold anyone up.
  spec.mutable_consistency()->set_mode(v1::ASYNC);
  return spec;
}

// Every job the bench submitted that is RUNNING now.
absl::StatusOr<std::vector<v1::JobStatus>> Running(Cluster& c) {
  v1::ListJobsResponse list;
  GS_RETURN_IF_ERROR(Call(c.stub.get(), &v1::Coordinator::Stub::ListJobs, "ListJobs",
                          v1::ListJobsRequest(), &list));
  std::vector<v1::JobStatus> out;
  for (const auto& j : list.jobs()) {
    if (j.state() == v1::RUNNING) out.push_back(j);
  }
  return out;
}

// Scales `job` by one worker (down when `down` and it has two or more) and
// waits for the new epoch to be committed. Returns the latency in ms, or
// DeadlineExceeded.
absl::StatusOr<double> ScaleOnce(Cluster& c, const std::string& job, bool down) {
  v1::GetJobRequest get;
  get.set_job_id(job);
  v1::JobStatus before;
  GS_RETURN_IF_ERROR(Call(c.stub.get(), &v1::Coordinator::Stub::GetJob, "GetJob", get, &before));
  v1::ScaleJobRequest scale;
  scale.set_job_id(job);
  const uint32_t d = before.desired_workers();
  scale.set_workers(down && d >= 2 ? d - 1 : d + 1);
  const absl::Time start = absl::Now();
  v1::ScaleJobResponse resp;
  GS_RETURN_IF_ERROR(
      Call(c.stub.get(), &v1::Coordinator::Stub::ScaleJob, "ScaleJob", scale, &resp));
  const absl::Time deadline = start + absl::Seconds(10);
  while (absl::Now() < deadline) {
    v1::JobStatus now;
    GS_RETURN_IF_ERROR(Call(c.stub.get(), &v1::Coordinator::Stub::GetJob, "GetJob", get, &now));
    if (now.committed_epoch() > static_cast<uint64_t>(before.epochs_size())) {
      return absl::ToDoubleMilliseconds(absl::Now() - start);
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("scale of ", job, " not committed in 10 s"));
}

absl::Status RunPoint(int workers, int jobs, PointResult& r) {
  r.workers = workers;
  r.jobs = jobs;
  r.workers_per_job = std::max(1, workers / (2 * jobs));
  GS_ASSIGN_OR_RETURN(Cluster c, StartCluster());
  const int threads = absl::GetFlag(FLAGS_heartbeat_threads);
  SimFleet fleet({c.address, workers, threads > 0 ? threads : workers});
  absl::Time t = absl::Now();
  GS_RETURN_IF_ERROR(fleet.Start(absl::Seconds(60) + absl::Milliseconds(100) * workers));
  r.register_s = absl::ToDoubleSeconds(absl::Now() - t);

  // M jobs; as many as the pool holds start, the rest wait in the queue.
  std::deque<std::string> live;
  int submitted = 0;
  auto submit = [&]() -> absl::StatusOr<std::string> {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = Spec(r.workers_per_job, submitted++);
    v1::SubmitJobResponse resp;
    GS_RETURN_IF_ERROR(
        Call(c.stub.get(), &v1::Coordinator::Stub::SubmitJob, "SubmitJob", req, &resp));
    live.push_back(resp.job_id());
    return resp.job_id();
  };
  for (int j = 0; j < jobs; ++j) GS_RETURN_IF_ERROR(submit().status());
  const int expected = std::min(jobs, workers / r.workers_per_job);
  t = absl::Now();
  std::vector<v1::JobStatus> running;
  do {
    absl::SleepFor(absl::Milliseconds(200));
    GS_ASSIGN_OR_RETURN(running, Running(c));
  } while (static_cast<int>(running.size()) < expected && absl::Now() - t < absl::Seconds(60));
  r.running_jobs = static_cast<int>(running.size());
  // Members hear of their epoch within a heartbeat or two.
  absl::SleepFor(absl::Milliseconds(2 * fleet.heartbeat_interval_ms() + 500));

  // ---- control window
  fleet.ResetWindow();
  GS_ASSIGN_OR_RETURN(ProcSample cpu0, SampleProcess(c.coordinator->pid()));
  const double writes0 = Metric(c.metrics_port, "gs_coordinator_state_save_seconds_count");
  const double write_s0 = Metric(c.metrics_port, "gs_coordinator_state_save_seconds_sum");
  const absl::Time start = absl::Now();
  const absl::Duration window = absl::Seconds(absl::GetFlag(FLAGS_seconds));
  const absl::Duration churn = absl::Milliseconds(absl::GetFlag(FLAGS_churn_ms));
  std::set<std::string> window_submits;
  Samples scale_ms;
  size_t scale_next = 0;
  for (int op = 0; absl::Now() - start + churn <= window; ++op) {
    const absl::Time slot = start + churn * op;
    if (absl::Now() < slot) absl::SleepFor(slot - absl::Now());
    GS_ASSIGN_OR_RETURN(running, Running(c));
    if (running.empty()) continue;
    if (op % 2 == 0) {
      // The oldest running job ends; a new one is queued.
      std::string oldest = running.back().job_id();  // ListJobs is newest first
      v1::CancelJobRequest cancel;
      cancel.set_job_id(oldest);
      v1::CancelJobResponse resp;
      GS_RETURN_IF_ERROR(
          Call(c.stub.get(), &v1::Coordinator::Stub::CancelJob, "CancelJob", cancel, &resp));
      live.erase(std::remove(live.begin(), live.end(), oldest), live.end());
      GS_ASSIGN_OR_RETURN(std::string id, submit());
      window_submits.insert(id);
    } else {
      const std::string job = running[scale_next++ % running.size()].job_id();
      absl::StatusOr<double> ms = ScaleOnce(c, job, (op / 2) % 2 == 0);
      ++r.scales;
      if (ms.ok()) {
        scale_ms.Add(*ms);
      } else if (absl::IsDeadlineExceeded(ms.status())) {
        ++r.scale_timeouts;
      } else {
        return ms.status();
      }
    }
  }
  const absl::Time end = absl::Now();
  r.window_s = absl::ToDoubleSeconds(end - start);
  GS_ASSIGN_OR_RETURN(ProcSample cpu1, SampleProcess(c.coordinator->pid()));
  r.coord_cores = (cpu1.cpu_s - cpu0.cpu_s) / r.window_s;
  r.coord_rss_mb = cpu1.rss_mb;
  const double writes = Metric(c.metrics_port, "gs_coordinator_state_save_seconds_count") - writes0;
  const double write_s = Metric(c.metrics_port, "gs_coordinator_state_save_seconds_sum") - write_s0;
  r.writes_per_s = writes / r.window_s;
  r.write_ms_mean = writes > 0 ? 1000 * write_s / writes : 0;
  r.state_kb = static_cast<double>(testing::ReadFile(c.dir + "/coordinator.state").size()) / 1024;
  r.hb_p50 = fleet.heartbeat_ms().Percentile(50);
  r.hb_p99 = fleet.heartbeat_ms().Percentile(99);
  r.hb_max = fleet.heartbeat_ms().Percentile(100);
  const FleetCounters fc = fleet.counters();
  r.heartbeats = fc.heartbeats;
  r.heartbeat_errors = fc.heartbeat_errors;
  r.reregistrations = fc.reregistrations;
  r.scale_p50 = scale_ms.Percentile(50);
  r.scale_p99 = scale_ms.Percentile(99);
  v1::ListJobsResponse list;
  GS_RETURN_IF_ERROR(Call(c.stub.get(), &v1::Coordinator::Stub::ListJobs, "ListJobs",
                          v1::ListJobsRequest(), &list));
  Samples submit_ms;
  for (const auto& j : list.jobs()) {
    if (window_submits.count(j.job_id()) == 0) continue;
    ++r.submits;
    if (j.started_unix_ms() == 0) {
      ++r.submits_not_started;
    } else {
      submit_ms.Add(static_cast<double>(j.started_unix_ms() - j.submitted_unix_ms()));
    }
  }
  r.submit_p50 = submit_ms.Percentile(50);
  r.submit_p99 = submit_ms.Percentile(99);

  // ---- push window
  const int push_seconds = absl::GetFlag(FLAGS_push_seconds);
  if (push_seconds <= 0) return absl::OkStatus();
  // The last churn may have replaced a job: let its members hear of it.
  absl::SleepFor(absl::Milliseconds(2 * fleet.heartbeat_interval_ms() + 500));
  GS_ASSIGN_OR_RETURN(running, Running(c));
  if (running.empty()) return absl::OkStatus();
  v1::GetJobRequest get;
  get.set_job_id(running.front().job_id());
  get.set_include_shard_map(true);
  v1::JobStatus with_map;
  GS_RETURN_IF_ERROR(Call(c.stub.get(), &v1::Coordinator::Stub::GetJob, "GetJob", get, &with_map));
  const double chunks_per_push = static_cast<double>(with_map.shard_map().chunks_size()) /
                                 std::max(1, with_map.shard_map().tensors_size());
  const int max_pushers = absl::GetFlag(FLAGS_max_pushers);
  r.pushers = fleet.StartPushers(
      max_pushers, std::max(1, max_pushers / static_cast<int>(running.size())));
  absl::SleepFor(absl::Seconds(2));  // connect, first pushes
  fleet.ResetWindow();
  double shard_cpu0 = 0, shard_cpu1 = 0;
  for (auto& s : c.shards) {
    GS_ASSIGN_OR_RETURN(ProcSample p, SampleProcess(s->pid()));
    shard_cpu0 += p.cpu_s;
  }
  t = absl::Now();
  absl::SleepFor(absl::Seconds(push_seconds));
  const double push_s = absl::ToDoubleSeconds(absl::Now() - t);
  const FleetCounters pc = fleet.counters();
  for (auto& s : c.shards) {
    GS_ASSIGN_OR_RETURN(ProcSample p, SampleProcess(s->pid()));
    shard_cpu1 += p.cpu_s;
  }
  r.pushes_per_s = static_cast<double>(pc.pushes) / push_s;
  r.chunk_pushes_per_shard_s = r.pushes_per_s * chunks_per_push / c.shards.size();
  r.push_p50 = fleet.push_ms().Percentile(50);
  r.push_p99 = fleet.push_ms().Percentile(99);
  r.push_errors = pc.push_errors;
  r.shard_cores = (shard_cpu1 - shard_cpu0) / push_s;
  fleet.StopPushers();
  return absl::OkStatus();
}

int Main(const std::string& command) {
  std::printf("scale_bench: %d shards, %d s control + %d s push window per point, "
              "coordinator --heartbeat_timeout=%s\n\n",
              absl::GetFlag(FLAGS_shards), absl::GetFlag(FLAGS_seconds),
              absl::GetFlag(FLAGS_push_seconds),
              absl::FormatDuration(absl::GetFlag(FLAGS_heartbeat_timeout)).c_str());
  PrintHeader(stdout);
  std::vector<PointResult> points;
  for (int w : Ints(absl::GetFlag(FLAGS_workers))) {
    for (int j : Ints(absl::GetFlag(FLAGS_jobs))) {
      PointResult r;
      if (absl::Status s = RunPoint(w, j, r); !s.ok()) r.error = std::string(s.message());
      PrintRow(stdout, r);
      points.push_back(r);
    }
  }
  int rc = 0;
  if (const std::string json = absl::GetFlag(FLAGS_json); !json.empty()) {
    if (absl::Status s = WriteJson(json, command, points); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      rc = 1;
    }
  }
  if (const std::string png = absl::GetFlag(FLAGS_png); !png.empty()) {
    if (absl::Status s = WritePng(png, points); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      rc = 1;
    }
  }
  for (const auto& p : points) rc |= p.error.empty() ? 0 : 1;
  return rc;
}

}  // namespace
}  // namespace gradstream::bench

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  return gradstream::bench::Main(absl::StrJoin(args, " "));
}
