// Child-process shard for tests and benchmarks. See shard_process.h.
#include "worker/client/testing/shard_process.h"

#include "common/job/shard_map_proto.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_util.h"
#include "grpcpp/client_context.h"
#include "ps.grpc.pb.h"
#include "worker/client/channel_factory.h"

namespace gradstream::client::testing {

absl::StatusOr<std::unique_ptr<ShardProcess>> ShardProcess::Start(
    const std::string& binary, std::vector<std::string> extra_args, int port,
    absl::Duration deadline) {
  char tmpl[] = "/tmp/gs_shard_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
  }
  std::unique_ptr<ShardProcess> p(new ShardProcess(binary, std::move(extra_args), tmpl));
  absl::Status s = p->Launch(port, deadline);
  if (!s.ok()) return s;
  return p;
}

ShardProcess::~ShardProcess() {
  Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::Status ShardProcess::Pause() {
  if (pid_ <= 0) return absl::FailedPreconditionError("no shard runs");
  if (::kill(pid_, SIGSTOP) != 0) return absl::InternalError(std::strerror(errno));
  int status = 0;
  if (::waitpid(pid_, &status, WUNTRACED) != pid_ || !WIFSTOPPED(status)) {
    return absl::InternalError(absl::StrCat("the shard did not stop (status ", status, ")"));
  }
  return absl::OkStatus();
}

absl::Status ShardProcess::Resume() {
  if (pid_ <= 0) return absl::FailedPreconditionError("no shard runs");
  if (::kill(pid_, SIGCONT) != 0) return absl::InternalError(std::strerror(errno));
  return absl::OkStatus();
}

void ShardProcess::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

absl::StatusOr<int> ShardProcess::Stop(absl::Duration deadline) {
  if (pid_ <= 0) return absl::FailedPreconditionError("no shard process is running");
  ::kill(pid_, SIGTERM);
  const absl::Time end = absl::Now() + deadline;
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(pid_, &status, WNOHANG);
    if (got == pid_) break;
    if (got < 0) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("waitpid: ", std::strerror(errno)));
    }
    if (absl::Now() >= end) {
      Kill();
      return absl::DeadlineExceededError(absl::StrCat(
          binary_, " did not exit within ", absl::FormatDuration(deadline), " of SIGTERM"));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  pid_ = -1;
  if (WIFSIGNALED(status)) {
    return absl::InternalError(absl::StrCat(binary_, " died of signal ", WTERMSIG(status)));
  }
  return WEXITSTATUS(status);
}

absl::Status ShardProcess::Restart(absl::Duration deadline) {
  Kill();
  return Launch(port_, deadline);
}

absl::Status ShardProcess::Launch(int port, absl::Duration deadline) {
  const std::string port_file = dir_ + "/port";
  std::error_code ec;
  std::filesystem::remove(port_file, ec);
  std::vector<std::string> argv = {binary_, absl::StrCat("--port=", port),
                                   absl::StrCat("--port_file=", port_file)};
  argv.insert(argv.end(), args_.begin(), args_.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    // The shard dies with the test (or benchmark) even when that is killed.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execv(cargv[0], cargv.data());
    _exit(127);
  }
  pid_ = pid;
  // Poll for the port file: the child writes it once it is listening.
  const absl::Time end = absl::Now() + deadline;
  while (absl::Now() < end) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat(binary_, " exited early with status ", status));
    }
    std::ifstream in(port_file);
    int got = 0;
    if (in >> got && got > 0) {
      port_ = got;
      return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  Kill();
  return absl::DeadlineExceededError(absl::StrCat(binary_, " wrote no port file within ",
                                                  absl::FormatDuration(deadline)));
}

namespace {

std::unique_ptr<v1::ParameterServer::Stub> Stub(const std::string& address) {
  return v1::ParameterServer::NewStub(ChannelFactory::Default()->NewChannel(address));
}

void SetDeadline(grpc::ClientContext* ctx, absl::Duration d) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + d));
}

}  // namespace

absl::StatusOr<v1::CreateJobResponse> CreateJobOn(const ShardMap& map, uint32_t shard,
                                                  const JobSetup& setup, absl::Duration deadline) {
  v1::CreateJobRequest req;
  req.set_job_id(setup.job_id);
  *req.mutable_optimizer() = setup.optimizer;
  *req.mutable_consistency() = setup.consistency;
  for (const ChunkInfo& c : map.chunks) {
    if (c.shard != shard) continue;
    v1::ChunkInfo* p = req.add_chunks();
    *p = ChunkInfoToProto(c);
    p->set_pull_fp32(false);  // the job's pull codec applies to every chunk here
    if (p->has_rows()) p->mutable_rows()->set_seed(setup.seed);
  }
  v1::Membership* m = req.mutable_membership();
  m->set_epoch(setup.epoch);
  m->set_effective_clock(0);
  for (uint64_t w : setup.workers) m->add_worker_ids(w);
  req.set_checkpoint_every(setup.checkpoint_every);
  req.set_shard_index(shard);
  req.set_pull_codec(setup.pull_codec);
  req.set_resume(setup.resume);
  req.set_resume_clock(setup.resume_clock);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  v1::CreateJobResponse resp;
  absl::Status s = FromGrpcStatus(Stub(map.shards[shard])->CreateJob(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<std::vector<v1::CreateJobResponse>> CreateJob(const ShardMap& map,
                                                             const JobSetup& setup,
                                                             absl::Duration deadline) {
  std::vector<v1::CreateJobResponse> out;
  for (uint32_t s = 0; s < map.shards.size(); ++s) {
    auto r = CreateJobOn(map, s, setup, deadline);
    if (!r.ok()) return r.status();
    out.push_back(*r);
  }
  return out;
}

absl::StatusOr<v1::StatsResponse> GetStats(const std::string& address, const std::string& job_id,
                                           absl::Duration deadline, bool include_rounds) {
  v1::StatsRequest req;
  req.set_job_id(job_id);
  req.set_include_rounds(include_rounds);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  v1::StatsResponse resp;
  absl::Status s = FromGrpcStatus(Stub(address)->GetStats(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::Status DropJob(const std::string& address, const std::string& job_id,
                     absl::Duration deadline) {
  v1::DropJobRequest req;
  req.set_job_id(job_id);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  v1::DropJobResponse resp;
  return FromGrpcStatus(Stub(address)->DropJob(&ctx, req, &resp));
}

absl::StatusOr<v1::CheckpointResponse> Checkpoint(const std::string& address,
                                                  const std::string& job_id,
                                                  absl::Duration deadline) {
  v1::CheckpointRequest req;
  req.set_job_id(job_id);
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline);
  v1::CheckpointResponse resp;
  absl::Status s = FromGrpcStatus(Stub(address)->Checkpoint(&ctx, req, &resp));
  if (!s.ok()) return s;
  return resp;
}

}  // namespace gradstream::client::testing
