// The frame around every durable record (shard checkpoints, the coordinator's
// state file), so a torn, truncated or bit-rotted file is detected instead of
// half-loaded. Written to disk with Env::WriteFileAtomically().
//
// Layout, little-endian, 24-byte header then the payload:
//   magic[8]      names the record kind (RecordFormat::magic)
//   u32 version   the payload's format version (RecordFormat::version)
//   u64 length    payload bytes
//   u32 crc32c    of the payload (crc32c.h)
//   payload
//
// Usage:
//   constexpr RecordFormat kFormat{"coordinator state", "GSCOORDS", 1};
//   GS_RETURN_IF_ERROR(env->WriteFileAtomically(path, EncodeRecord(kFormat, bytes)));
//   ...
//   absl::StatusOr<std::string_view> payload = DecodeRecord(kFormat, path, file_bytes);
#ifndef GRADSTREAM_COMMON_ENV_RECORD_H_
#define GRADSTREAM_COMMON_ENV_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace gradstream {

struct RecordFormat {
  std::string_view kind;   // for messages: "checkpoint", "coordinator state"
  std::string_view magic;  // exactly kRecordMagicSize bytes, unique per kind
  uint32_t version = 1;    // bump when the payload's layout changes
};

inline constexpr size_t kRecordMagicSize = 8;
inline constexpr size_t kRecordHeaderSize = kRecordMagicSize + 4 + 8 + 4;

// Header + payload. CHECK-fails when format.magic is not kRecordMagicSize
// bytes (a programming error).
std::string EncodeRecord(const RecordFormat& format, std::string_view payload);

// The payload inside `data` (a view into it). DataLoss, naming `file`, when
// the header is short, the magic is not format's, the version is not
// format.version (a file this build cannot read is as unusable as a damaged
// one), the length disagrees with the size (truncated or appended), or the
// checksum does not match.
[[nodiscard]] absl::StatusOr<std::string_view> DecodeRecord(const RecordFormat& format,
                                                            std::string_view file,
                                                            std::string_view data);

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_RECORD_H_
