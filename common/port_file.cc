// See port_file.h.
#include "common/port_file.h"

#include "absl/strings/str_cat.h"

namespace gradstream {

absl::Status WritePortFile(const std::string& path, int port, Env* env) {
  if (absl::Status s = env->WriteFileAtomically(path, absl::StrCat(port, "\n")); !s.ok()) {
    return absl::InternalError(absl::StrCat("cannot write port file ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace gradstream
