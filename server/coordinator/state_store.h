// Durable storage of the coordinator's state in one file.
//
// Save() writes the whole state to "<path>.tmp", fsyncs it, renames it over
// <path> and fsyncs the directory, so after a crash (kill -9, power loss) the
// file holds either the previous or the new state, never a torn mix. The file
// is a small header (magic, length, CRC32) followed by the binary
// CoordinatorState, so a damaged file is detected rather than half-loaded.
#ifndef GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_
#define GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator.pb.h"

namespace gradstream::coordinator {

// Not thread-safe; the coordinator serializes calls.
class StateStore {
 public:
  explicit StateStore(std::string path) : path_(std::move(path)) {}

  // The saved state; NotFound when the file does not exist (first start),
  // DataLoss when it is damaged.
  absl::StatusOr<gradstream::v1::CoordinatorState> Load() const;

  // Atomically replaces the file. Internal / Unavailable on I/O errors.
  [[nodiscard]] absl::Status Save(const gradstream::v1::CoordinatorState& state) const;

  const std::string& path() const { return path_; }

 private:
  const std::string path_;
};

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_STATE_STORE_H_
