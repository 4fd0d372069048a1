// See record.h for the layout.
#include "common/env/record.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env/crc32c.h"
#include "glog/logging.h"

namespace gradstream {
namespace {

constexpr size_t kVersionAt = kRecordMagicSize;
constexpr size_t kLengthAt = kVersionAt + 4;
constexpr size_t kCrcAt = kLengthAt + 8;
static_assert(kCrcAt + 4 == kRecordHeaderSize);

void PutLE(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetLE(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

}  // namespace

std::string EncodeRecord(const RecordFormat& format, std::string_view payload) {
  CHECK_EQ(format.magic.size(), kRecordMagicSize) << "record magic of " << format.kind;
  std::string out;
  out.reserve(kRecordHeaderSize + payload.size());
  out.append(format.magic);
  PutLE(out, format.version, 4);
  PutLE(out, payload.size(), 8);
  PutLE(out, Crc32c(payload), 4);
  out.append(payload);
  return out;
}

absl::StatusOr<std::string_view> DecodeRecord(const RecordFormat& format, std::string_view file,
                                              std::string_view data) {
  // This Abseil's StrCat takes absl::string_view, not std::string_view.
  const absl::string_view kind(format.kind.data(), format.kind.size());
  auto loss = [&](auto&&... what) {
    return absl::DataLossError(
        absl::StrCat(absl::string_view(file.data(), file.size()), ": ", what...));
  };
  if (data.size() < kRecordHeaderSize) {
    return loss("truncated ", kind, " file: ", data.size(), " bytes, shorter than its ",
                kRecordHeaderSize, "-byte header");
  }
  if (data.substr(0, kRecordMagicSize) != format.magic) {
    return loss("bad magic: not a ", kind, " file, or a damaged one");
  }
  const uint64_t version = GetLE(data, kVersionAt, 4);
  if (version != format.version) {
    return loss(kind, " format version ", version, "; this build reads version ",
                format.version);
  }
  const uint64_t length = GetLE(data, kLengthAt, 8);
  const uint64_t have = data.size() - kRecordHeaderSize;
  if (length != have) {
    return loss(kind, " length mismatch: the header says ", length,
                " payload bytes, the file has ", have, " (truncated or appended)");
  }
  const std::string_view payload = data.substr(kRecordHeaderSize);
  const uint32_t stored = static_cast<uint32_t>(GetLE(data, kCrcAt, 4));
  if (const uint32_t actual = Crc32c(payload); actual != stored) {
    return loss(kind, " checksum mismatch: CRC32C stored ", stored, ", computed ", actual);
  }
  return payload;
}

}  // namespace gradstream
