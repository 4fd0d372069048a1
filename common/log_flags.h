// Command-line parsing and logging set-up of every gradstream daemon
// (gs_shard, gs_coordinator, gs_worker): absl's flags, and glog's --v and
// --vmodule on the same command line.
//
// NOTE: [log flags] glog (Debian's 0.6, built with gflags) defines its
// verbosity as a gflags flag `FLAGS_v`; the daemons parse their command line
// with absl, which knows nothing of gflags, so `gs_shard --v=2` died with
// "Unknown command line flag 'v'", and declaring an absl flag `v` beside
// glog's header does not compile (both are `::FLAGS_v`). So absl owns the
// command line: log_flags_absl.cc, a translation unit that includes no glog
// header, defines absl flags named `v` and `vmodule`, and
// ParseFlagsAndInitLogging hands their values to glog. One meaning each:
// --v and --vmodule mean what glog documents; GLOG_v / GLOG_vmodule in the
// environment still apply when the flag is not given.
#ifndef GRADSTREAM_COMMON_LOG_FLAGS_H_
#define GRADSTREAM_COMMON_LOG_FLAGS_H_

#include <string>
#include <vector>

namespace gradstream {

// Parses argv with absl::ParseCommandLine (which exits with a message on an
// unknown or malformed flag, as before), initializes glog for argv[0] with
// logs to stderr, and applies --v / --vmodule. Call once, first thing in
// main(). Returns the positional arguments (argv[0] first).
std::vector<char*> ParseFlagsAndInitLogging(int argc, char** argv);

namespace log_flags_internal {
// The flags' values (log_flags_absl.cc); nullopt-like: `set` false when the
// flag was not given.
struct Verbosity {
  bool v_set = false;
  int v = 0;
  bool vmodule_set = false;
  std::string vmodule;  // "pattern=level,pattern=level"
};
Verbosity VerbosityFromFlags();
}  // namespace log_flags_internal

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_LOG_FLAGS_H_
