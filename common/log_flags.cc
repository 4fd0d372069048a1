// See log_flags.h ([log flags]).
#include "common/log_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"

namespace gradstream {

std::vector<char*> ParseFlagsAndInitLogging(int argc, char** argv) {
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const log_flags_internal::Verbosity verbosity = log_flags_internal::VerbosityFromFlags();
  if (verbosity.v_set) FLAGS_v = verbosity.v;
  if (verbosity.vmodule_set) {
    for (absl::string_view entry : absl::StrSplit(verbosity.vmodule, ',', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(entry, '=');
      int level = 0;
      if (kv.first.empty() || !absl::SimpleAtoi(kv.second, &level)) {
        // As absl reports a malformed flag: a message and exit code 1.
        std::fprintf(stderr, "ERROR: --vmodule: '%s' is not pattern=level\n",
                     std::string(entry).c_str());
        std::exit(1);
      }
      google::SetVLOGLevel(std::string(kv.first).c_str(), level);
    }
  }
  return positional;
}

}  // namespace gradstream
