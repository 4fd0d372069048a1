#include "tests/training/cluster.h"

#include <signal.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "common/job/job_state.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"

namespace gradstream::testing {
namespace {

constexpr absl::Duration kStartTimeout = absl::Seconds(30);
constexpr absl::Duration kRpcTimeout = absl::Seconds(5);

void SetDeadline(grpc::ClientContext* ctx, const rpc::RpcConfig& config) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + kRpcTimeout));
  rpc::AttachToken(ctx, config.auth_token);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const ClusterBinaries& bin,
                                                                  const ClusterOptions& options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster);
  c->bin_ = bin;
  c->options_ = options;
  c->dir_ = MakeTempDir("gs-cluster");
  for (int i = 0; i < options.shards; ++i) {
    const std::string port_file = absl::StrCat(c->dir_, "/shard", i, ".port");
    std::vector<std::string> args = {"--port=0", "--port_file=" + port_file,
                                     absl::StrCat("--shard_index=", i),
                                     absl::StrCat("--checkpoint_dir=", c->dir_, "/ckpt", i)};
    args.insert(args.end(), options.common_args.begin(), options.common_args.end());
    GS_ASSIGN_OR_RETURN(
        auto p, Process::Start(bin.shard, args, absl::StrCat(c->dir_, "/shard", i, ".log")));
    GS_ASSIGN_OR_RETURN(int port, WaitForPortFile(port_file, *p, kStartTimeout));
    c->shard_addresses_.push_back(absl::StrCat("127.0.0.1:", port));
    c->shards_.push_back(std::move(p));
  }
  GS_RETURN_IF_ERROR(c->StartCoordinator(0));
  for (int i = 0; i < options.workers; ++i) GS_RETURN_IF_ERROR(c->AddWorker().status());
  GS_RETURN_IF_ERROR(c->WaitForWorkers(options.workers, kStartTimeout));
  return c;
}

absl::Status LocalCluster::StartCoordinator(int port) {
  const std::string port_file = absl::StrCat(dir_, "/coordinator", coordinator_starts_, ".port");
  std::vector<std::string> args = {
      absl::StrCat("--port=", port), "--port_file=" + port_file,
      "--state_file=" + dir_ + "/coordinator.state",
      "--shards=" + absl::StrJoin(shard_addresses_, ","),
      "--heartbeat_timeout=" + absl::FormatDuration(options_.heartbeat_timeout)};
  args.insert(args.end(), options_.coordinator_args.begin(), options_.coordinator_args.end());
  args.insert(args.end(), options_.common_args.begin(), options_.common_args.end());
  GS_ASSIGN_OR_RETURN(coordinator_, Process::Start(bin_.coordinator, args,
                                                   absl::StrCat(dir_, "/coordinator",
                                                                coordinator_starts_, ".log")));
  ++coordinator_starts_;
  GS_ASSIGN_OR_RETURN(coordinator_port_, WaitForPortFile(port_file, *coordinator_, kStartTimeout));
  coordinator_address_ = absl::StrCat("127.0.0.1:", coordinator_port_);
  coordinator_stub_ =
      v1::Coordinator::NewStub(rpc::NewChannel(coordinator_address_, options_.client));
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartCoordinator() {
  coordinator_->Kill(9);
  // Same port, so workers and the CLI find it again where they left it.
  return StartCoordinator(coordinator_port_);
}

void LocalCluster::KillShard(int i) { shards_[i]->Kill(SIGKILL); }

std::string LocalCluster::ShardLogPath(int i) const {
  std::string latest = absl::StrCat(dir_, "/shard", i, ".log");
  for (int n = 1;; ++n) {
    const std::string next = absl::StrCat(dir_, "/shard", i, ".restart", n, ".log");
    if (::access(next.c_str(), F_OK) != 0) return latest;
    latest = next;
  }
}

absl::Status LocalCluster::RestartShard(int i) {
  Process& old = *shards_[i];
  old.Kill(SIGKILL);
  const std::string& address = shard_addresses_[i];
  const std::string port = address.substr(address.rfind(':') + 1);
  int n = 1;
  while (::access(absl::StrCat(dir_, "/shard", i, ".restart", n, ".log").c_str(), F_OK) == 0) ++n;
  const std::string port_file = absl::StrCat(dir_, "/shard", i, ".restart", n, ".port");
  std::vector<std::string> args = old.args();
  for (std::string& a : args) {
    if (absl::StartsWith(a, "--port=")) a = "--port=" + port;
    if (absl::StartsWith(a, "--port_file=")) a = "--port_file=" + port_file;
  }
  GS_ASSIGN_OR_RETURN(auto p, Process::Start(old.binary(), args,
                                             absl::StrCat(dir_, "/shard", i, ".restart", n, ".log"),
                                             old.env()));
  GS_ASSIGN_OR_RETURN(int bound, WaitForPortFile(port_file, *p, kStartTimeout));
  shards_[i] = std::move(p);
  if (absl::StrCat(bound) != port) {
    return absl::InternalError(absl::StrCat("shard ", i, " came back on port ", bound,
                                            " instead of ", port));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> LocalCluster::AddWorker() {
  const int i = static_cast<int>(workers_.size());
  std::vector<std::string> args = {"--coordinator=" + coordinator_address_, "--device=cpu",
                                   absl::StrCat("--name=test-worker-", i)};
  args.insert(args.end(), options_.worker_args.begin(), options_.worker_args.end());
  args.insert(args.end(), options_.common_args.begin(), options_.common_args.end());
  GS_ASSIGN_OR_RETURN(auto p,
                      Process::Start(bin_.worker, args, absl::StrCat(dir_, "/worker", i, ".log")));
  workers_.push_back(std::move(p));
  return i;
}

absl::Status LocalCluster::WaitForWorkers(int n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    grpc::ClientContext ctx;
    SetDeadline(&ctx, options_.client);
    v1::ClusterStatus cs;
    if (coordinator_stub_->GetCluster(&ctx, v1::GetClusterRequest(), &cs).ok()) {
      int healthy = 0;
      for (const auto& w : cs.workers()) healthy += w.healthy();
      if (healthy >= n) return absl::OkStatus();
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("fewer than ", n, " workers registered"));
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::StatusOr<std::string> LocalCluster::Submit(const v1::JobSpec& spec) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.client);
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  GS_RETURN_IF_ERROR(FromGrpcStatus(coordinator_stub_->SubmitJob(&ctx, req, &resp)));
  return resp.job_id();
}

absl::StatusOr<v1::JobStatus> LocalCluster::GetJob(const std::string& job, bool shard_map) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.client);
  v1::GetJobRequest req;
  req.set_job_id(job);
  req.set_include_shard_map(shard_map);
  v1::JobStatus resp;
  GS_RETURN_IF_ERROR(FromGrpcStatus(coordinator_stub_->GetJob(&ctx, req, &resp)));
  return resp;
}

absl::StatusOr<v1::JobStatus> LocalCluster::WaitForJob(const std::string& job,
                                                       absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<v1::JobStatus> s = GetJob(job);
    if (s.ok() && IsTerminal(s->state())) return s;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "job ", job, " did not finish in ", absl::FormatDuration(timeout), "; last: ",
          s.ok() ? s->DebugString() : s.status().ToString()));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::StatusOr<v1::JobStatus> LocalCluster::WaitForClock(const std::string& job, uint64_t clock,
                                                         absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<v1::JobStatus> s = GetJob(job);
    if (s.ok() && (s->progress().clock() >= clock || IsTerminal(s->state()))) return s;
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", job, " did not reach clock ", clock, " in ",
                       absl::FormatDuration(timeout), "\n", Describe(job)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

std::string LocalCluster::Describe(const std::string& job) {
  std::string out;
  absl::StatusOr<v1::JobStatus> s = GetJob(job);
  if (!s.ok()) {
    absl::StrAppend(&out, "job ", job, ": ", s.status().ToString(), "\n");
  } else {
    absl::StrAppend(&out, "job ", job, " ", v1::JobState_Name(s->state()), " clock ",
                    s->progress().clock(), " (fastest ", s->progress().max_clock(), ", stalled ",
                    s->progress().stalled_seconds(), " s), committed epoch ",
                    s->committed_epoch(), ", message '", s->message(), "'\n");
    for (const auto& e : s->epochs()) {
      absl::StrAppend(&out, "  epoch ", e.epoch(), " at clock ", e.effective_clock(), ": {",
                      absl::StrJoin(e.worker_ids(), ","), "} departed {",
                      absl::StrJoin(e.departed(), ","), "} (", e.reason(), ")\n");
    }
    for (const auto& m : s->members()) {
      absl::StrAppend(&out, "  member ", m.worker_id(), " incarnation ", m.incarnation(),
                      " joined at ", m.join_clock(),
                      m.leaving() ? absl::StrCat(", leaving at ", m.leave_clock()) : "",
                      ", reported clock ", m.clock(), "\n");
    }
  }
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.client);
  v1::ClusterStatus cs;
  if (grpc::Status st = coordinator_stub_->GetCluster(&ctx, v1::GetClusterRequest(), &cs);
      st.ok()) {
    for (const auto& w : cs.workers()) {
      absl::StrAppend(&out, "  worker ", w.worker_id(), " incarnation ", w.incarnation(), " ",
                      v1::WorkerState_Name(w.state()), " in '", w.job_id(), "' at clock ",
                      w.clock(), w.healthy() ? "" : " (unhealthy)", "\n");
    }
  } else {
    absl::StrAppend(&out, "  cluster: ", st.error_message(), "\n");
  }
  for (int i = 0; i < static_cast<int>(shard_addresses_.size()); ++i) {
    absl::StatusOr<v1::StatsResponse> st = ShardStats(i, job);
    if (!st.ok()) {
      absl::StrAppend(&out, "  shard ", i, ": ", st.status().ToString(), "\n");
      continue;
    }
    absl::StrAppend(&out, "  shard ", i, ": epoch ", st->epoch(), ", member clocks ",
                    st->min_clock(), "..", st->max_clock(), ", versions ", st->min_version(),
                    "..", st->max_version(), ", pulls served ", st->pulls_served(), "\n");
  }
  return out;
}

absl::StatusOr<v1::StatsResponse> LocalCluster::ShardStats(int shard, const std::string& job,
                                                           bool rounds) {
  auto stub = v1::ParameterServer::NewStub(
      rpc::NewChannel(shard_addresses_[shard], options_.client));
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.client);
  v1::StatsRequest req;
  req.set_job_id(job);
  req.set_include_rounds(rounds);
  v1::StatsResponse resp;
  GS_RETURN_IF_ERROR(FromGrpcStatus(stub->GetStats(&ctx, req, &resp)));
  return resp;
}

absl::Status LocalCluster::Scale(const std::string& job, uint32_t workers) {
  grpc::ClientContext ctx;
  SetDeadline(&ctx, options_.client);
  v1::ScaleJobRequest req;
  req.set_job_id(job);
  req.set_workers(workers);
  v1::ScaleJobResponse resp;
  return FromGrpcStatus(coordinator_stub_->ScaleJob(&ctx, req, &resp));
}

}  // namespace gradstream::testing
