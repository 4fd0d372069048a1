// The absl side of [log flags] (log_flags.h): this file must not include
// glog or gflags, whose `FLAGS_v` would clash with the one defined here.
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "common/log_flags.h"

ABSL_FLAG(std::optional<int>, v, std::nullopt,
          "glog verbosity: VLOG(n) logs for n <= v (default: $GLOG_v, else 0).");
ABSL_FLAG(std::optional<std::string>, vmodule, std::nullopt,
          "glog per-file verbosity, e.g. job=2,shard_server=1 (default: $GLOG_vmodule).");

namespace gradstream::log_flags_internal {

Verbosity VerbosityFromFlags() {
  Verbosity out;
  if (std::optional<int> v = absl::GetFlag(FLAGS_v)) {
    out.v_set = true;
    out.v = *v;
  }
  if (std::optional<std::string> m = absl::GetFlag(FLAGS_vmodule)) {
    out.vmodule_set = true;
    out.vmodule = *m;
  }
  return out;
}

}  // namespace gradstream::log_flags_internal
