// See port_file.h.
#include "common/port_file.h"

#include "absl/strings/str_cat.h"

namespace gradstream {

absl::Status WritePortFile(const std::string& path, int port, Env* env) {
  return env->WriteFileAtomically(path, absl::StrCat(port, "\n"));
}

}  // namespace gradstream
