// Sequential, bounded reads of a dataset file as distributed: plain, or
// gzip-compressed (detected by the gzip magic 1f 8b, not by the name) and
// inflated on the fly with zlib.
#ifndef GRADSTREAM_WORKER_DATA_INTERNAL_BYTE_SOURCE_H_
#define GRADSTREAM_WORKER_DATA_INTERNAL_BYTE_SOURCE_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gradstream::internal {

// Every content error is InvalidArgument with a message that starts with the
// file's path and says what is wrong ("truncated", "corrupt gzip stream",
// "trailing bytes"); file-system errors are NotFound / FailedPrecondition /
// PermissionDenied / DataLoss, also naming the path.
//
// Memory: Read() grows its output only as bytes actually arrive (in steps of
// at most kReadStep), so a header that promises more than the file holds
// costs no more than the file itself; callers still bound what they ask for.
// Not thread-safe (one reader per file).
class ByteSource {
 public:
  static constexpr size_t kReadStep = size_t{1} << 20;

  // Opens `path`. NotFound when it does not exist, FailedPrecondition when it
  // is not a regular file, PermissionDenied when it cannot be opened.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ByteSource>> Open(const std::string& path);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  const std::string& path() const { return path_; }
  bool gzip() const { return gzip_; }
  // Bytes delivered so far (decompressed bytes for gzip).
  uint64_t offset() const { return offset_; }

  // Appends exactly `n` bytes to `out`. `what` names them for the error
  // ("the IDX3 header", "60000 images of 28x28"): InvalidArgument
  // "PATH: truncated: WHAT needs N bytes from offset O, the (decompressed)
  // data ends at E" when the data ends first; a corrupt or cut gzip stream is
  // reported as such.
  [[nodiscard]] absl::Status Read(size_t n, absl::string_view what, std::string* out);
  // Reads and drops `n` bytes (same errors as Read).
  [[nodiscard]] absl::Status Skip(uint64_t n, absl::string_view what);
  // OK when the data ends here. For gzip this also drives zlib to the end of
  // the stream, which checks its CRC-32 and length. InvalidArgument
  // "trailing bytes" otherwise.
  [[nodiscard]] absl::Status ExpectEnd();
  // The rest of the data, at most `max_bytes` (InvalidArgument beyond that).
  [[nodiscard]] absl::StatusOr<std::string> ReadAll(uint64_t max_bytes);

 private:
  struct Inflater;
  ByteSource(std::string path, std::ifstream in, bool gzip);

  // Up to `n` bytes into `dst`; 0 only at the end of the data.
  [[nodiscard]] absl::StatusOr<size_t> ReadSome(char* dst, size_t n);
  [[nodiscard]] absl::StatusOr<size_t> InflateSome(char* dst, size_t n);
  // Refills the compressed input buffer; false at end of file.
  [[nodiscard]] absl::StatusOr<bool> Refill();
  absl::Status Corrupt(absl::string_view why) const;

  const std::string path_;
  std::ifstream in_;
  const bool gzip_;
  uint64_t offset_ = 0;
  std::unique_ptr<Inflater> z_;  // gzip only
  std::vector<char> zbuf_;       // compressed input
};

// Big-endian uint32 at p (IDX headers are big-endian on every platform).
inline uint32_t LoadBigEndian32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace gradstream::internal

#endif  // GRADSTREAM_WORKER_DATA_INTERNAL_BYTE_SOURCE_H_
