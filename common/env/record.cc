// See record.h for the layout.
#include "common/env/record.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/env/crc32c.h"
#include "common/status.h"
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

std::string Header(const RecordFormat& format, uint64_t length, uint32_t crc) {
  CHECK_EQ(format.magic.size(), kRecordMagicSize) << "record magic of " << format.kind;
  std::string out(format.magic);
  PutLE(out, format.version, 4);
  PutLE(out, length, 8);
  PutLE(out, crc, 4);
  return out;
}

// DataLoss naming `file`.
template <typename... What>
absl::Status Loss(std::string_view file, const What&... what) {
  return absl::DataLossError(
      absl::StrCat(absl::string_view(file.data(), file.size()), ": ", what...));
}

// This Abseil's StrCat takes absl::string_view, not std::string_view.
absl::string_view Kind(const RecordFormat& format) {
  return absl::string_view(format.kind.data(), format.kind.size());
}

// Checks the frame of a file of `size` bytes that starts with `header`
// (all of it, or the first kRecordHeaderSize bytes): its length, magic,
// version, and the payload length against the file's size. Returns the
// payload length.
absl::StatusOr<uint64_t> CheckFrame(const RecordFormat& format, std::string_view file,
                                    std::string_view header, uint64_t size) {
  if (header.size() < kRecordHeaderSize) {
    return Loss(file, "truncated ", Kind(format), " file: ", header.size(),
                " bytes, shorter than its ", kRecordHeaderSize, "-byte header");
  }
  if (header.substr(0, kRecordMagicSize) != format.magic) {
    return Loss(file, "bad magic: not a ", Kind(format), " file, or a damaged one");
  }
  const uint64_t version = GetLE(header, kVersionAt, 4);
  if (version != format.version) {
    return Loss(file, Kind(format), " format version ", version, "; this build reads version ",
                format.version);
  }
  const uint64_t length = GetLE(header, kLengthAt, 8);
  const uint64_t have = size - std::min<uint64_t>(size, kRecordHeaderSize);
  if (length != have) {
    return Loss(file, Kind(format), " length mismatch: the header says ", length,
                " payload bytes, the file has ", have, " (truncated or appended)");
  }
  return length;
}

absl::Status CheckCrc(const RecordFormat& format, std::string_view file, uint32_t stored,
                      uint32_t actual) {
  if (actual == stored) return absl::OkStatus();
  return Loss(file, Kind(format), " checksum mismatch: CRC32C stored ", stored, ", computed ",
              actual);
}

}  // namespace

std::string EncodeRecord(const RecordFormat& format, std::string_view payload) {
  std::string out = Header(format, payload.size(), Crc32c(payload));
  out.append(payload);
  return out;
}

absl::StatusOr<std::string_view> DecodeRecord(const RecordFormat& format, std::string_view file,
                                              std::string_view data) {
  absl::StatusOr<uint64_t> length = CheckFrame(format, file, data, data.size());
  if (!length.ok()) return length.status();
  const std::string_view payload = data.substr(kRecordHeaderSize);
  GS_RETURN_IF_ERROR(
      CheckCrc(format, file, static_cast<uint32_t>(GetLE(data, kCrcAt, 4)), Crc32c(payload)));
  return payload;
}

RecordWriter::RecordWriter(const RecordFormat& format, WritableFile* file)
    : format_(format), file_(file) {
  CHECK_EQ(format.magic.size(), kRecordMagicSize) << "record magic of " << format.kind;
}

absl::Status RecordWriter::Append(std::string_view piece) {
  if (!started_) {
    GS_RETURN_IF_ERROR(file_->Append(Header(format_, 0, 0)));
    started_ = true;
  }
  crc_ = Crc32c(piece, crc_);
  length_ += piece.size();
  return file_->Append(piece);
}

absl::Status RecordWriter::Finish() {
  if (!started_) GS_RETURN_IF_ERROR(Append({}));
  return file_->WriteAt(0, Header(format_, length_, crc_));
}

absl::StatusOr<RecordReader> RecordReader::Open(const RecordFormat& format, std::string_view name,
                                                std::string_view header, SequentialFile* file) {
  absl::StatusOr<uint64_t> size = file->Size();
  if (!size.ok()) return size.status();
  absl::StatusOr<uint64_t> length = CheckFrame(format, name, header, *size);
  if (!length.ok()) return length.status();
  return RecordReader(format, name, file, *length,
                      static_cast<uint32_t>(GetLE(header, kCrcAt, 4)));
}

absl::Status RecordReader::Read(char* out, size_t n) {
  CHECK_LE(n, remaining_);
  size_t got = 0;
  while (got < n) {
    absl::StatusOr<size_t> r = file_->Read(out + got, n - got);
    if (!r.ok()) return r.status();
    if (*r == 0) {
      return Loss(name_, Kind(format_), " file ended ", remaining_ - got,
                  " bytes before its payload's end (truncated while read)");
    }
    got += *r;
  }
  crc_ = Crc32c(std::string_view(out, n), crc_);
  remaining_ -= n;
  return absl::OkStatus();
}

absl::Status RecordReader::Finish() {
  CHECK_EQ(remaining_, 0u) << "RecordReader::Finish before the payload's end";
  char extra;
  absl::StatusOr<size_t> r = file_->Read(&extra, 1);
  if (!r.ok()) return r.status();
  if (*r != 0) {
    return Loss(name_, Kind(format_),
                " length mismatch: bytes follow the payload the header declares (appended)");
  }
  return CheckCrc(format_, name_, stored_crc_, crc_);
}

}  // namespace gradstream
