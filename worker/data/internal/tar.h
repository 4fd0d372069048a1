// Reads selected members of a tar archive (POSIX ustar, GNU and pax, as GNU
// tar and Python's tarfile write them) from a ByteSource, so that
// cifar-10-binary.tar.gz loads without extracting it first.
#ifndef GRADSTREAM_WORKER_DATA_INTERNAL_TAR_H_
#define GRADSTREAM_WORKER_DATA_INTERNAL_TAR_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/data/internal/byte_source.h"

namespace gradstream::internal {

struct TarMember {
  std::string name;  // full name inside the archive
  std::string data;
};

// Regular-file members whose base name `keep` accepts, keyed by base name;
// other members are skipped without being kept in memory. A kept member
// larger than `max_member_bytes` is InvalidArgument before it is read.
// InvalidArgument (naming the archive and the offset) for a header with a
// bad checksum or size, a kept base name that appears twice, or an archive
// cut short; ByteSource's errors for a corrupt gzip stream.
[[nodiscard]] absl::StatusOr<std::map<std::string, TarMember>> ReadTarMembers(
    ByteSource& src, absl::FunctionRef<bool(absl::string_view base_name)> keep,
    uint64_t max_member_bytes);

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_DATA_INTERNAL_TAR_H_
