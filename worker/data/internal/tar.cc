// Tar headers are 512-byte blocks (POSIX.1-1988 ustar): name[100] at 0,
// size[12] (octal, or GNU base-256 when the top bit is set) at 124,
// chksum[8] at 148, typeflag at 156, magic "ustar" at 257, prefix[155] at
// 345. Member data follows, padded to 512 bytes; the archive ends with a
// zero block.
#include "worker/data/internal/tar.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gradstream::internal {
namespace {

constexpr size_t kBlock = 512;
// GNU tar pads an archive to its 10240-byte record; allow far more.
constexpr uint64_t kMaxPadding = uint64_t{1} << 20;

// NUL-terminated field of at most `n` bytes.
std::string Field(const std::string& h, size_t at, size_t n) {
  const size_t len = std::find(h.begin() + at, h.begin() + at + n, '\0') - (h.begin() + at);
  return h.substr(at, len);
}

// Octal (spaces/NULs around it allowed) or GNU base-256 number; false when
// the field holds anything else or overflows 63 bits.
bool ParseNumber(const std::string& h, size_t at, size_t n, uint64_t* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(h.data() + at);
  uint64_t v = 0;
  if (u[0] & 0x80) {
    if (u[0] != 0x80) return false;  // negative or too large
    for (size_t i = 1; i < n; ++i) {
      if (v >> 55) return false;
      v = (v << 8) | u[i];
    }
    *out = v;
    return true;
  }
  size_t i = 0;
  while (i < n && u[i] == ' ') ++i;
  bool digits = false;
  for (; i < n && u[i] >= '0' && u[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + (u[i] - '0');
    digits = true;
  }
  for (; i < n; ++i) {
    if (u[i] != ' ' && u[i] != '\0') return false;
  }
  *out = v;
  return digits;
}

bool ChecksumMatches(const std::string& h) {
  uint64_t want;
  if (!ParseNumber(h, 148, 8, &want)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    sum += (i >= 148 && i < 156) ? uint64_t{' '} : static_cast<unsigned char>(h[i]);
  }
  return sum == want;
}

absl::string_view BaseName(absl::string_view name) {
  const size_t slash = name.rfind('/');
  return slash == absl::string_view::npos ? name : name.substr(slash + 1);
}

}  // namespace

absl::StatusOr<std::map<std::string, TarMember>> ReadTarMembers(
    ByteSource& src, absl::FunctionRef<bool(absl::string_view)> keep, uint64_t max_member_bytes) {
  std::map<std::string, TarMember> out;
  std::string long_name;  // from a GNU 'L' member, applies to the next one
  for (;;) {
    const uint64_t at = src.offset();
    std::string h;
    GS_RETURN_IF_ERROR(src.Read(kBlock, "a tar header", &h));
    if (std::all_of(h.begin(), h.end(), [](char c) { return c == '\0'; })) {
      // End of archive. Read the zero padding that follows to the end, which
      // also makes a gzip source check its CRC-32.
      GS_ASSIGN_OR_RETURN(const std::string rest, src.ReadAll(kMaxPadding));
      if (!std::all_of(rest.begin(), rest.end(), [](char c) { return c == '\0'; })) {
        return absl::InvalidArgumentError(absl::StrCat(
            src.path(), ": data after the end-of-archive block at offset ", at));
      }
      return out;
    }
    if (!ChecksumMatches(h)) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.path(), ": tar header at offset ", at,
                       " has a bad checksum (not a tar archive, or corrupt)"));
    }
    uint64_t size;
    if (!ParseNumber(h, 124, 12, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat(src.path(), ": tar header at offset ", at, " has an unreadable size"));
    }
    std::string name = Field(h, 0, 100);
    if (h.compare(257, 5, "ustar") == 0) {
      const std::string prefix = Field(h, 345, 155);
      if (!prefix.empty()) name = absl::StrCat(prefix, "/", name);
    }
    if (!long_name.empty()) name = std::exchange(long_name, "");
    const char type = h[156];
    const uint64_t padding = (kBlock - size % kBlock) % kBlock;
    const std::string what = absl::StrCat("tar member ", name);
    if (type == 'L') {  // GNU long name: the data is the next member's name
      if (size > 4096) {
        return absl::InvalidArgumentError(
            absl::StrCat(src.path(), ": tar long name of ", size, " bytes at offset ", at));
      }
      GS_RETURN_IF_ERROR(src.Read(size, what, &long_name));
      long_name.resize(std::find(long_name.begin(), long_name.end(), '\0') - long_name.begin());
      GS_RETURN_IF_ERROR(src.Skip(padding, what));
      continue;
    }
    const std::string base(BaseName(name));
    if ((type != '0' && type != '\0') || !keep(base)) {
      GS_RETURN_IF_ERROR(src.Skip(size + padding, what));
      continue;
    }
    if (size > max_member_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(src.path(), ": ", name, " is ", size,
                                                     " bytes, over the ", max_member_bytes,
                                                     "-byte limit"));
    }
    if (out.count(base)) {
      return absl::InvalidArgumentError(absl::StrCat(src.path(), ": ", base, " appears twice (",
                                                     out[base].name, ", ", name, ")"));
    }
    TarMember m{name, {}};
    GS_RETURN_IF_ERROR(src.Read(size, what, &m.data));
    GS_RETURN_IF_ERROR(src.Skip(padding, what));
    out.emplace(base, std::move(m));
  }
}

}  // namespace gradstream::internal
