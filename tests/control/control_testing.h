// Helpers of the control-plane tests: start the real gs_coordinator and
// gs_shard binaries on loopback (port 0 + port file) and run the real
// `gradstream` CLI against them. Binary paths come from the build
// (GS_COORDINATOR_BINARY, GS_CLI_BINARY, GS_SHARD_BINARY).
#ifndef GRADSTREAM_TESTS_CONTROL_CONTROL_TESTING_H_
#define GRADSTREAM_TESTS_CONTROL_CONTROL_TESTING_H_

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/control/process.h"

namespace gradstream::testing {

// Every wait of these tests has this deadline unless said otherwise.
inline constexpr absl::Duration kDeadline = absl::Seconds(30);

struct Server {
  std::unique_ptr<Process> process;
  int port = 0;
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }
};

// Removes a test's directory unless the test failed (its logs then stay).
inline void RemoveTestDir(const std::string& dir) {
  if (!dir.empty() && !::testing::Test::HasFailure()) std::filesystem::remove_all(dir);
}

inline bool HaveShardBinary() {
#ifdef GS_SHARD_BINARY
  return true;
#else
  return false;
#endif
}

// gs_coordinator --port=0 --port_file=DIR/coordinator.port --state_file=STATE
// plus `flags`; log in DIR/coordinator.N.log.
// `port` 0 = any free port.
inline absl::StatusOr<Server> StartCoordinator(const std::string& dir, const std::string& state,
                                               std::vector<std::string> flags = {}, int port = 0) {
  static int n = 0;
  const std::string port_file = absl::StrCat(dir, "/coordinator.", n, ".port");
  flags.insert(flags.begin(), {absl::StrCat("--port=", port), "--port_file=" + port_file,
                               "--state_file=" + state});
  auto p =
      Process::Start(GS_COORDINATOR_BINARY, flags, absl::StrCat(dir, "/coordinator.", n++, ".log"));
  if (!p.ok()) return p.status();
  Server s;
  s.process = *std::move(p);
  auto bound = WaitForPortFile(port_file, *s.process, kDeadline);
  if (!bound.ok()) return bound.status();
  s.port = *bound;
  return s;
}

inline absl::StatusOr<Server> StartShard(const std::string& dir, int index) {
#ifdef GS_SHARD_BINARY
  const std::string port_file = absl::StrCat(dir, "/shard", index, ".port");
  const std::string ckpt = absl::StrCat(dir, "/shard", index, ".ckpt");
  ::mkdir(ckpt.c_str(), 0755);
  auto p = Process::Start(
      GS_SHARD_BINARY,
      {"--port=0", "--address=127.0.0.1", "--port_file=" + port_file, "--checkpoint_dir=" + ckpt,
       absl::StrCat("--shard_index=", index), "--executor_threads=2"},
      absl::StrCat(dir, "/shard", index, ".log"));
  if (!p.ok()) return p.status();
  Server s;
  s.process = *std::move(p);
  auto port = WaitForPortFile(port_file, *s.process, kDeadline);
  if (!port.ok()) return port.status();
  s.port = *port;
  return s;
#else
  return absl::UnimplementedError("gs_shard was not built");
#endif
}

// `gradstream --coordinator=ADDRESS ARGS...` with a deadline.
inline CommandResult Cli(const std::string& address, std::vector<std::string> args,
                         const std::vector<std::string>& env = {}) {
  if (!address.empty()) args.insert(args.begin(), "--coordinator=" + address);
  auto r = RunCommand(GS_CLI_BINARY, args, kDeadline, env);
  if (!r.ok()) return CommandResult{-1, "", std::string(r.status().message())};
  return *r;
}

// Parses the CLI's --json output into a message; an empty message on error
// (the test's own EXPECTs on fields then fail with the output shown).
template <typename T>
T ParseJson(const std::string& json, std::string* error = nullptr) {
  T msg;
  auto s = google::protobuf::util::JsonStringToMessage(json, &msg);
  if (!s.ok() && error != nullptr) *error = s.ToString() + " in: " + json;
  return msg;
}

}  // namespace gradstream::testing

#endif  // GRADSTREAM_TESTS_CONTROL_CONTROL_TESTING_H_
