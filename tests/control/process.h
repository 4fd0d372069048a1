// Child processes for multi-process tests: start a real binary, wait for it
// with a deadline, kill -9 it, read what it printed. Children get SIGKILL
// when the test process dies (PR_SET_PDEATHSIG), so a crashed test leaves
// nothing running.
#ifndef GRADSTREAM_TESTS_CONTROL_PROCESS_H_
#define GRADSTREAM_TESTS_CONTROL_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gradstream::testing {

// Not thread-safe.
class Process {
 public:
  // Starts `binary` with `args`; stdout and stderr go to `log_path`.
  // `env` entries ("NAME=value") are added to the inherited environment.
  static absl::StatusOr<std::unique_ptr<Process>> Start(const std::string& binary,
                                                        const std::vector<std::string>& args,
                                                        const std::string& log_path,
                                                        const std::vector<std::string>& env = {});
  // Kills (SIGKILL) and reaps the child if it still runs.
  ~Process();

  pid_t pid() const { return pid_; }
  // The command line it was started with (empty for an adopted child), so a
  // test can start the same program again.
  const std::string& binary() const { return binary_; }
  const std::vector<std::string>& args() const { return args_; }
  const std::vector<std::string>& env() const { return env_; }
  // Sends `signal` (default SIGKILL) and reaps the child.
  void Kill(int signal = 9);
  // The exit code (128 + signal if killed by a signal), or DeadlineExceeded.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // True while the child has not exited.
  bool Running();
  std::string Log() const;

  // Adopts an already forked child.
  Process(pid_t pid, std::string log) : pid_(pid), log_path_(std::move(log)) {}

 private:
  pid_t pid_;
  std::string log_path_;
  std::string binary_;
  std::vector<std::string> args_;
  std::vector<std::string> env_;
  std::optional<int> exit_code_;
};

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs `binary` to completion within `timeout` (killing it past that).
absl::StatusOr<CommandResult> RunCommand(const std::string& binary,
                                         const std::vector<std::string>& args,
                                         absl::Duration timeout,
                                         const std::vector<std::string>& env = {});

// Waits until `path` holds a port number written by `proc`; fails early if
// the process exits, and with DeadlineExceeded after `timeout`.
absl::StatusOr<int> WaitForPortFile(const std::string& path, Process& proc, absl::Duration timeout);

// A fresh directory under $TEST_TMPDIR or /tmp.
std::string MakeTempDir(const std::string& prefix);

std::string ReadFile(const std::string& path);

}  // namespace gradstream::testing

#endif  // GRADSTREAM_TESTS_CONTROL_PROCESS_H_
