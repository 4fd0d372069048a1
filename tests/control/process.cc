// See process.h.
#include "tests/control/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"

extern char** environ;

namespace gradstream::testing {

namespace {

// Polling interval of the waits below; each wait has its own deadline.
constexpr absl::Duration kPoll = absl::Milliseconds(5);

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args,
            const std::vector<std::string>& env, int out_fd, int err_fd) {
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  // Child.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(binary.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv(binary.c_str(), argv.data());
  std::fprintf(stderr, "exec %s: %s\n", binary.c_str(), std::strerror(errno));
  ::_exit(127);
}

int DecodeWait(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base && *base ? base : "/tmp", "/", prefix, ".XXXXXX");
  char* dir = ::mkdtemp(tmpl.data());
  return dir ? std::string(dir) : std::string();
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::string& log_path,
                                                        const std::vector<std::string>& env) {
  if (::access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("not executable: ", binary));
  }
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", log_path));
  pid_t pid = Spawn(binary, args, env, fd, fd);
  ::close(fd);
  if (pid < 0) return absl::InternalError("fork failed");
  auto p = std::make_unique<Process>(pid, log_path);
  p->binary_ = binary;
  p->args_ = args;
  p->env_ = env;
  return p;
}

Process::~Process() {
  if (!exit_code_) Kill(SIGKILL);
}

void Process::Kill(int signal) {
  if (exit_code_) return;
  ::kill(pid_, signal);
  // A SIGKILLed child is gone promptly; other signals get a grace period.
  if (!Wait(absl::Seconds(10)).ok()) {
    ::kill(pid_, SIGKILL);
    (void)Wait(absl::Seconds(10));
  }
}

bool Process::Running() {
  if (exit_code_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    exit_code_ = DecodeWait(status);
    return false;
  }
  return true;
}

absl::StatusOr<int> Process::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("pid ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPoll);
  }
  return *exit_code_;
}

std::string Process::Log() const { return ReadFile(log_path_); }

absl::StatusOr<CommandResult> RunCommand(const std::string& binary,
                                         const std::vector<std::string>& args,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& env) {
  static int counter = 0;
  const std::string dir = MakeTempDir("cmd");
  const std::string out_path = absl::StrCat(dir, "/out", counter);
  const std::string err_path = absl::StrCat(dir, "/err", counter++);
  int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  pid_t pid = Spawn(binary, args, env, out_fd, err_fd);
  ::close(out_fd);
  ::close(err_fd);
  Process proc(pid, err_path);
  absl::StatusOr<int> code = proc.Wait(timeout);
  CommandResult r;
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  if (!code.ok()) {
    return absl::DeadlineExceededError(absl::StrCat(
        binary, " did not finish in ", absl::FormatDuration(timeout), "; stderr: ", r.err));
  }
  r.exit_code = *code;
  return r;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, Process& proc,
                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int port = 0;
    std::string text(absl::StripAsciiWhitespace(ReadFile(path)));
    if (!text.empty() && absl::SimpleAtoi(text, &port) && port > 0) return port;
    if (!proc.Running()) {
      return absl::InternalError(
          absl::StrCat("process exited before writing ", path, ":\n", proc.Log()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("no port in ", path, " after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(kPoll);
  }
}

}  // namespace gradstream::testing
