// Durable storage of the coordinator's state in one file.
//
// Save() writes the whole state as one durable record (common/env/record.h:
// magic "GSCOORDS", version 1, length, CRC32C, then the binary
// CoordinatorState) through Env::WriteFileAtomically(), so after a crash
// (kill -9, power loss) the file holds either the previous or the new state,
// never a torn mix, and a damaged file is detected rather than half-loaded.
//
// NOTE: [legacy state file]
// A file written before the common record frame ("GSCOORD1", u64 length,
// u32 zlib CRC32, then the same CoordinatorState) still loads, so a
// coordinator upgraded in place keeps its jobs; its next Save() rewrites the
// file in the new frame.
#ifndef GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_
#define GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/env/env.h"
#include "coordinator.pb.h"

namespace gradstream::coordinator {

// Not thread-safe; the coordinator serializes calls.
class StateStore {
 public:
  // `env` (not owned) must outlive the store.
  explicit StateStore(std::string path, Env* env = Env::Default())
      : path_(std::move(path)), env_(env) {}

  // The saved state; NotFound when the file does not exist (first start),
  // DataLoss naming the file when it is truncated, damaged or not a state
  // file; another code from the Env when it cannot be read.
  absl::StatusOr<gradstream::v1::CoordinatorState> Load() const;

  // Atomically replaces the file (see [atomic file write]). On failure the
  // previous file is intact and no temp file is left; the Env's code comes
  // back (ResourceExhausted for a full disk, Internal for other I/O errors).
  [[nodiscard]] absl::Status Save(const gradstream::v1::CoordinatorState& state) const;

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  Env* const env_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_
