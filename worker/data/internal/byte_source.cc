// Plain or gzip file reads with statuses instead of exceptions. zlib's
// inflate runs in gzip mode (window bits 16 + 15): it parses the gzip header,
// inflates, and at the end of each member checks its CRC-32 and length, so a
// corrupt stream is caught even when it inflates to the right size.
#include "worker/data/internal/byte_source.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gradstream::internal {

struct ByteSource::Inflater {
  z_stream z{};
  bool member_ended = false;  // the current gzip member is complete
  ~Inflater() { inflateEnd(&z); }
};

namespace {
constexpr size_t kCompressedBuffer = size_t{1} << 16;
}  // namespace

absl::StatusOr<std::unique_ptr<ByteSource>> ByteSource::Open(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (!std::filesystem::is_regular_file(status)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": not a regular file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for reading"));
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  const bool gzip = in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  in.clear();
  in.seekg(0);
  std::unique_ptr<ByteSource> src(new ByteSource(path, std::move(in), gzip));
  if (gzip) {
    src->z_ = std::make_unique<Inflater>();
    if (inflateInit2(&src->z_->z, 16 + MAX_WBITS) != Z_OK) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot initialize zlib"));
    }
    src->zbuf_.resize(kCompressedBuffer);
  }
  return src;
}

ByteSource::ByteSource(std::string path, std::ifstream in, bool gzip)
    : path_(std::move(path)), in_(std::move(in)), gzip_(gzip) {}

ByteSource::~ByteSource() = default;

absl::Status ByteSource::Corrupt(absl::string_view why) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": corrupt gzip stream: ", why));
}

absl::StatusOr<bool> ByteSource::Refill() {
  in_.read(zbuf_.data(), static_cast<std::streamsize>(zbuf_.size()));
  if (in_.bad()) return absl::DataLossError(absl::StrCat(path_, ": read error"));
  z_->z.next_in = reinterpret_cast<Bytef*>(zbuf_.data());
  z_->z.avail_in = static_cast<uInt>(in_.gcount());
  return z_->z.avail_in > 0;
}

absl::StatusOr<size_t> ByteSource::InflateSome(char* dst, size_t n) {
  z_stream& z = z_->z;
  z.next_out = reinterpret_cast<Bytef*>(dst);
  z.avail_out = static_cast<uInt>(std::min<size_t>(n, kReadStep));
  const uInt want = z.avail_out;
  while (z.avail_out == want) {
    if (z_->member_ended) {
      // gzip allows several members back to back (`cat a.gz b.gz`).
      if (z.avail_in == 0) {
        GS_ASSIGN_OR_RETURN(const bool more, Refill());
        if (!more) return 0;
      }
      if (inflateReset(&z) != Z_OK) return Corrupt("cannot restart zlib");
      z_->member_ended = false;
    }
    if (z.avail_in == 0) {
      GS_ASSIGN_OR_RETURN(const bool more, Refill());
      if (!more) return Corrupt("the compressed data ends before the stream does (cut short)");
    }
    const int rc = inflate(&z, Z_NO_FLUSH);
    switch (rc) {
      case Z_STREAM_END:
        z_->member_ended = true;
        break;
      case Z_OK:
      case Z_BUF_ERROR:  // no progress without more input: refilled above
        break;
      case Z_MEM_ERROR:
        return absl::ResourceExhaustedError(absl::StrCat(path_, ": zlib is out of memory"));
      case Z_NEED_DICT:
        return Corrupt("it needs a preset dictionary");
      default:
        return Corrupt(z.msg != nullptr ? z.msg : "inflate failed");
    }
  }
  return want - z.avail_out;
}

absl::StatusOr<size_t> ByteSource::ReadSome(char* dst, size_t n) {
  if (gzip_) return InflateSome(dst, n);
  in_.read(dst, static_cast<std::streamsize>(n));
  if (in_.bad()) return absl::DataLossError(absl::StrCat(path_, ": read error"));
  return static_cast<size_t>(in_.gcount());
}

absl::Status ByteSource::Read(size_t n, absl::string_view what, std::string* out) {
  const size_t start = out->size();
  size_t got = 0;
  while (got < n) {
    const size_t step = std::min(n - got, kReadStep);
    out->resize(start + got + step);
    GS_ASSIGN_OR_RETURN(const size_t k, ReadSome(out->data() + start + got, step));
    if (k == 0) {
      out->resize(start + got);
      return absl::InvalidArgumentError(absl::StrCat(
          path_, ": truncated: ", what, " needs ", n, " bytes from offset ", offset_ - got,
          ", the ", gzip_ ? "decompressed " : "", "data ends at ", offset_));
    }
    got += k;
    offset_ += k;
  }
  out->resize(start + n);
  return absl::OkStatus();
}

absl::Status ByteSource::Skip(uint64_t n, absl::string_view what) {
  std::string scratch;
  while (n > 0) {
    const size_t step = static_cast<size_t>(std::min<uint64_t>(n, kReadStep));
    scratch.clear();
    GS_RETURN_IF_ERROR(Read(step, what, &scratch));
    n -= step;
  }
  return absl::OkStatus();
}

absl::Status ByteSource::ExpectEnd() {
  char c;
  GS_ASSIGN_OR_RETURN(const size_t k, ReadSome(&c, 1));
  if (k == 0) return absl::OkStatus();
  if (gzip_) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": trailing bytes after the ", offset_, " expected (decompressed)"));
  }
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path_, ec);
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", ec ? 0 : size - offset_,
                                                 " trailing bytes after the ", offset_,
                                                 " expected"));
}

absl::StatusOr<std::string> ByteSource::ReadAll(uint64_t max_bytes) {
  std::string out;
  for (;;) {
    const size_t have = out.size();
    out.resize(have + kReadStep);
    GS_ASSIGN_OR_RETURN(const size_t k, ReadSome(out.data() + have, kReadStep));
    out.resize(have + k);
    offset_ += k;
    if (k == 0) return out;
    if (out.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ": larger than the ", max_bytes, "-byte limit for this file"));
    }
  }
}

}  // namespace gradstream::internal
