// See script_runner.h and [script process].
#include "worker/trainer/script_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "agent.grpc.pb.h"
#include "glog/logging.h"
#include "grpcpp/grpcpp.h"

namespace gradstream {
namespace {

// How often the agent looks at its script (exited? still this worker's
// job?): what ending or stopping a job waits at most. Every wake-up costs
// CPU beside the script's.
constexpr absl::Duration kPollPeriod = absl::Milliseconds(100);

// The agent the script's package calls; what it learns is read by RunScript.
class Agent final : public v1::WorkerAgent::Service {
 public:
  Agent(uint64_t worker_id, uint64_t incarnation, const std::string& job_id,
        const ScriptHooks& hooks, const std::atomic<bool>* stop)
      : worker_id_(worker_id),
        incarnation_(incarnation),
        job_id_(job_id),
        hooks_(hooks),
        stop_(stop) {}

  grpc::Status Sync(grpc::ServerContext*, const v1::SyncRequest* req,
                    v1::SyncResponse* resp) override {
    if (!req->tensors().empty()) hooks_.declare(req->tensors());
    if (req->has_progress()) {
      runtime::Progress p = hooks_.board->Get();
      p.job_id = job_id_;
      runtime::MergeProgress(req->progress(), &p);
      hooks_.board->Set(p);
    }
    uint64_t stop_clock = 0;
    bool stopping = false;
    {
      absl::MutexLock l(&mu_);
      initialized_ = true;
      left_ = left_ || req->state() == v1::SCRIPT_LEFT;
      if (req->has_progress()) clock_ = std::max(clock_, req->progress().clock());
      if (stop_ != nullptr && stop_->load() && !stop_clock_.has_value()) stop_clock_ = clock_;
      stopping = stop_clock_.has_value();
      if (stopping) stop_clock = *stop_clock_;
    }
    v1::Assignment a = hooks_.latest();
    if (stopping && a.job_id() == job_id_) {
      // See [script stop]: leave after the clock the script is in, or at the
      // scale-down's clock if that comes first.
      if (!a.leave() || a.leave_clock() > stop_clock) a.set_leave_clock(stop_clock);
      a.set_leave(true);
    }
    *resp->mutable_assignment() = std::move(a);
    for (v1::MembershipEpoch& e : hooks_.epochs()) *resp->add_epochs() = std::move(e);
    resp->set_worker_id(worker_id_);
    resp->set_incarnation(incarnation_);
    return grpc::Status::OK;
  }

  bool initialized() const {
    absl::MutexLock l(&mu_);
    return initialized_;
  }
  bool left() const {
    absl::MutexLock l(&mu_);
    return left_;
  }

 private:
  const uint64_t worker_id_, incarnation_;
  const std::string job_id_;
  const ScriptHooks hooks_;
  const std::atomic<bool>* const stop_;  // see [script stop]; may be null
  mutable absl::Mutex mu_;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  bool left_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;  // the newest clock the script reported
  // The clock the script was handed to leave at once the worker stops.
  std::optional<uint64_t> stop_clock_ ABSL_GUARDED_BY(mu_);
};

// Relays the child's stderr to ours, keeping the last lines.
class StderrTail {
 public:
  StderrTail(int fd, int keep) : fd_(fd), keep_(keep), thread_([this] { Loop(); }) {}
  ~StderrTail() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::string Text() {
    absl::MutexLock l(&mu_);
    return absl::StrJoin(lines_, "\n");
  }

 private:
  void Loop() {
    FILE* f = fdopen(fd_, "r");
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
      std::string s(line, static_cast<size_t>(n));
      if (!s.empty() && s.back() == '\n') s.pop_back();
      fprintf(stderr, "[script] %s\n", s.c_str());
      absl::MutexLock l(&mu_);
      lines_.push_back(std::move(s));
      if (static_cast<int>(lines_.size()) > keep_) lines_.pop_front();
    }
    free(line);
    fclose(f);
  }
  const int fd_;
  const int keep_;
  absl::Mutex mu_;
  std::deque<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

std::vector<std::string> ChildEnv(const v1::Assignment& a, uint64_t worker_id,
                                  const std::string& agent, const ScriptOptions& o) {
  std::vector<std::string> env;
  const std::vector<std::string> ours = {"GRADSTREAM_AGENT", "GRADSTREAM_COORDINATOR",
                                         "GRADSTREAM_JOB_ID", "GRADSTREAM_WORKER_ID",
                                         "GRADSTREAM_RANK", "GRADSTREAM_WORLD_SIZE", "PYTHONPATH"};
  std::string pythonpath = o.python_path;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv(*e);
    const std::string key = kv.substr(0, kv.find('='));
    if (key == "PYTHONPATH" && kv.size() > key.size() + 1) {
      pythonpath = pythonpath.empty() ? kv.substr(key.size() + 1)
                                      : absl::StrCat(pythonpath, ":", kv.substr(key.size() + 1));
    }
    if (std::find(ours.begin(), ours.end(), key) != ours.end()) continue;
    if (o.tls.enabled() && key.rfind("GRADSTREAM_TLS_", 0) == 0) continue;
    env.push_back(kv);
  }
  env.push_back("GRADSTREAM_AGENT=" + agent);
  env.push_back("GRADSTREAM_COORDINATOR=" + o.coordinator);
  env.push_back("GRADSTREAM_JOB_ID=" + a.job_id());
  env.push_back(absl::StrCat("GRADSTREAM_WORKER_ID=", worker_id));
  env.push_back(absl::StrCat("GRADSTREAM_RANK=", a.rank()));
  env.push_back(absl::StrCat("GRADSTREAM_WORLD_SIZE=", a.world_size()));
  if (!pythonpath.empty()) env.push_back("PYTHONPATH=" + pythonpath);
  if (!o.tls.ca.empty()) env.push_back("GRADSTREAM_TLS_CA=" + o.tls.ca);
  if (!o.tls.cert.empty()) env.push_back("GRADSTREAM_TLS_CERT=" + o.tls.cert);
  if (!o.tls.key.empty()) env.push_back("GRADSTREAM_TLS_KEY=" + o.tls.key);
  return env;
}

bool StillOurs(const v1::Assignment& a, const std::string& job) {
  return runtime::StillOurs(runtime::AssignmentFromProto(a), job);
}

}  // namespace

std::string FindPythonPackage(const std::string& exe) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::canonical(exe, ec).parent_path();
  if (ec) return "";
  // A build tree's build/python, an install's share/gradstream/python.
  for (const fs::path& p :
       {dir / ".." / ".." / "python", dir / ".." / "share" / "gradstream" / "python"}) {
    if (fs::exists(p / "gradstream" / "__init__.py", ec)) {
      return fs::weakly_canonical(p, ec).string();
    }
  }
  return "";
}

absl::StatusOr<TrainOutcome> RunScript(const v1::Assignment& start, uint64_t worker_id,
                                       uint64_t incarnation, const ScriptOptions& options,
                                       const ScriptHooks& hooks) {
  const std::string job = start.job_id();
  char tmpl[] = "/tmp/gs-agent-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp for the agent socket failed");
  const std::string dir = tmpl;  // mode 0700: only this user reaches the socket
  const std::string agent_addr = absl::StrCat("unix:", dir, "/agent.sock");
  Agent agent(worker_id, incarnation, job, hooks, options.stop);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(agent_addr, grpc::InsecureServerCredentials());
  builder.RegisterService(&agent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto cleanup_dir = [&] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  };
  if (server == nullptr) {
    cleanup_dir();
    return absl::InternalError(absl::StrCat("cannot serve the worker agent on ", agent_addr));
  }

  const std::string& cmd = start.spec().entrypoint();
  const std::string& workdir = start.spec().workdir();
  std::vector<std::string> env = ChildEnv(start, worker_id, agent_addr, options);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(err_pipe[1], 2);
    if (!workdir.empty() && chdir(workdir.c_str()) != 0) {
      static const char kMsg[] = "gradstream: cannot chdir to the job's workdir\n";
      (void)!write(2, kMsg, sizeof(kMsg) - 1);
      _exit(126);
    }
    execle("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr), envp.data());
    _exit(127);
  }
  close(err_pipe[1]);
  StderrTail tail(err_pipe[0], options.stderr_tail_lines);
  LOG(INFO) << "job " << job << ": started script (pid " << pid << "): " << cmd
            << (workdir.empty() ? "" : absl::StrCat(" in ", workdir));

  const absl::Time started = absl::Now();
  int status = 0;
  std::string stop_reason;
  absl::Time term_sent = absl::InfiniteFuture();
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    const absl::Time now = absl::Now();
    if (stop_reason.empty()) {
      if (!StillOurs(hooks.latest(), job)) {
        stop_reason = "the job ended or this worker was moved off it";
      } else if (!agent.initialized() && options.stop != nullptr && options.stop->load()) {
        stop_reason = "the worker is stopping";  // see [script stop]
      } else if (!agent.initialized() && now - started > options.init_deadline) {
        stop_reason = absl::StrCat("the script did not call gradstream's init within ",
                                   absl::FormatDuration(options.init_deadline));
      }
      if (!stop_reason.empty()) {
        LOG(INFO) << "job " << job << ": stopping the script: " << stop_reason;
        kill(-pid, SIGTERM);
        term_sent = now;
      }
    } else if (now - term_sent > options.stop_grace) {
      kill(-pid, SIGKILL);
      term_sent = absl::InfiniteFuture();
    }
    absl::SleepFor(kPollPeriod);
  }
  kill(-pid, SIGKILL);  // whatever the script left behind in its group
  tail.Join();
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  cleanup_dir();

  auto failure = [&](const std::string& what) {
    const std::string lines = tail.Text();
    return absl::FailedPreconditionError(
        lines.empty() ? what : absl::StrCat(what, "; last lines of its stderr:\n", lines));
  };
  const bool init = agent.initialized();
  if (!stop_reason.empty()) {
    const bool stopping = options.stop != nullptr && options.stop->load();
    if (!init && StillOurs(hooks.latest(), job) && !stopping) return failure(stop_reason);
    return TrainOutcome::kStopped;
  }
  if (WIFSIGNALED(status)) {
    return failure(absl::StrCat("entrypoint killed by signal ", WTERMSIG(status), " (",
                                strsignal(WTERMSIG(status)), ")"));
  }
  const int code = WEXITSTATUS(status);
  if (code != 0) return failure(absl::StrCat("entrypoint exited with code ", code));
  if (!init) {
    return failure("entrypoint exited with code 0 without calling gradstream's init (a script "
                   "job's command must train through the gradstream package)");
  }
  LOG(INFO) << "job " << job << ": script finished" << (agent.left() ? " (left)" : "");
  return agent.left() ? TrainOutcome::kLeft : TrainOutcome::kDone;
}

}  // namespace gradstream
