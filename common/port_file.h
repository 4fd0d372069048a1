// Port files: a daemon started with --port=0 (or --metrics_port=0) writes the
// port the kernel picked to a file, so the process that started it (a test,
// the demo script) can read it as soon as the file appears.
//
// The file stays plain text ("PORT\n"), not a framed record (common/env/
// record.h): tests (tests/control, tests/shard), worker/client/testing and
// scripts/demo.sh read it with `>> int` and `cat`, and a frame would break
// them. Written by the same atomic, fsynced write as the records, a port file
// is never seen half-written, so a checksum would guard nothing more.
#ifndef GRADSTREAM_COMMON_PORT_FILE_H_
#define GRADSTREAM_COMMON_PORT_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "common/env/env.h"

namespace gradstream {

// Writes "PORT\n" to `path` through env->WriteFileAtomically() (see [atomic
// file write]), so a reader never sees a partial number. Internal, naming
// the file and the cause, when it cannot (the directory must exist).
[[nodiscard]] absl::Status WritePortFile(const std::string& path, int port,
                                         Env* env = Env::Default());

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_PORT_FILE_H_
