// The frame around every durable record (shard checkpoints, the coordinator's
// state file), so a torn, truncated or bit-rotted file is detected instead of
// half-loaded. Written to disk with Env::WriteFileAtomically(), whole
// (EncodeRecord) or streamed (RecordWriter).
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
#include "common/env/env.h"

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

// Writes one record into `file` in pieces, for a payload too large to hold
// at once (a checkpoint's table rows): the header goes first with its
// length and checksum zeroed, and Finish() writes them in place.
class RecordWriter {
 public:
  // CHECK-fails as EncodeRecord does. `file` must be empty and outlive this.
  RecordWriter(const RecordFormat& format, WritableFile* file);
  [[nodiscard]] absl::Status Append(std::string_view piece);
  // After the last Append; the file is not synced.
  [[nodiscard]] absl::Status Finish();
  // The record's size: header and payload so far.
  uint64_t bytes() const { return kRecordHeaderSize + length_; }

 private:
  const RecordFormat format_;
  WritableFile* const file_;
  bool started_ = false;
  uint64_t length_ = 0;
  uint32_t crc_ = 0;
};

// Reads one record's payload from `file` in pieces. Nothing read may be
// acted on before Finish() succeeds: the checksum covers the whole payload.
class RecordReader {
 public:
  // DataLoss (naming `name`) as DecodeRecord, for what the header and the
  // file's size show; `header` is the first kRecordHeaderSize bytes, already
  // read from `file`.
  [[nodiscard]] static absl::StatusOr<RecordReader> Open(const RecordFormat& format,
                                                         std::string_view name,
                                                         std::string_view header,
                                                         SequentialFile* file);
  // Payload bytes not read yet.
  uint64_t remaining() const { return remaining_; }
  // Exactly `n` bytes (n <= remaining()); DataLoss when the file ends first.
  [[nodiscard]] absl::Status Read(char* out, size_t n);
  // DataLoss when bytes follow the payload or the checksum does not match.
  [[nodiscard]] absl::Status Finish();

 private:
  RecordReader(const RecordFormat& format, std::string_view name, SequentialFile* file,
               uint64_t length, uint32_t crc)
      : format_(format), name_(name), file_(file), remaining_(length), stored_crc_(crc) {}

  RecordFormat format_;
  std::string name_;
  SequentialFile* file_;
  uint64_t remaining_;
  uint32_t stored_crc_;
  uint32_t crc_ = 0;
};

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_ENV_RECORD_H_
