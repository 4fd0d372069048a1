// Port files: a daemon started with --port=0 (or --metrics_port=0) writes the
// port the kernel picked to a file, so the process that started it (a test,
// the demo script) can read it as soon as the file appears.
#ifndef GRADSTREAM_COMMON_PORT_FILE_H_
#define GRADSTREAM_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"

namespace gradstream {

// Writes "PORT\n" to `path` through a temp file and rename, so a reader never
// sees a partial number. Internal (naming the file) when it cannot.
[[nodiscard]] absl::Status WritePortFile(const std::string& path, int port);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_PORT_FILE_H_
