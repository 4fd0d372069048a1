// Reads a whole binary file for the dataset loaders.
#ifndef GRADSTREAM_WORKER_DATA_INTERNAL_READ_FILE_H_
#define GRADSTREAM_WORKER_DATA_INTERNAL_READ_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace gradstream::internal {

// The file's bytes. NotFound when `path` does not exist, FailedPrecondition
// when it is not a regular file, DataLoss when reading fails; messages carry
// the path.
[[nodiscard]] absl::StatusOr<std::string> ReadFileBytes(const std::string& path);

// Big-endian uint32 at p (IDX headers are big-endian on every platform).
inline uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_DATA_INTERNAL_READ_FILE_H_
