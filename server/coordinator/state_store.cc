// Atomic state file: temp + fsync + rename + directory fsync; see state_store.h.
#include "server/coordinator/state_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "zlib.h"

namespace gradstream::coordinator {

namespace {

constexpr char kMagic[8] = {'G', 'S', 'C', 'O', 'O', 'R', 'D', '1'};
constexpr size_t kHeader = sizeof(kMagic) + 8 + 4;

absl::Status ErrnoStatus(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void PutU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
void PutU32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLE(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

uint32_t Crc(const std::string& body) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
}

absl::Status WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::string DirOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

absl::StatusOr<gradstream::v1::CoordinatorState> StateStore::Load() const {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no state file at ", path_));
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  if (data.size() < kHeader || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(absl::StrCat(path_, ": not a coordinator state file"));
  }
  const uint64_t len = GetLE(data.data() + sizeof(kMagic), 8);
  const uint32_t crc = static_cast<uint32_t>(GetLE(data.data() + sizeof(kMagic) + 8, 4));
  if (data.size() != kHeader + len) {
    return absl::DataLossError(
        absl::StrCat(path_, ": truncated (", data.size() - kHeader, " of ", len, " bytes)"));
  }
  const std::string body = data.substr(kHeader);
  if (Crc(body) != crc) return absl::DataLossError(absl::StrCat(path_, ": checksum mismatch"));
  gradstream::v1::CoordinatorState state;
  if (!state.ParseFromString(body)) {
    return absl::DataLossError(absl::StrCat(path_, ": unparsable state"));
  }
  return state;
}

absl::Status StateStore::Save(const gradstream::v1::CoordinatorState& state) const {
  std::string body;
  if (!state.SerializeToString(&body)) return absl::InternalError("cannot serialize state");
  std::string data(kMagic, sizeof(kMagic));
  PutU64(data, body.size());
  PutU32(data, Crc(body));
  data += body;

  const std::string tmp = path_ + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(absl::StrCat("open ", tmp));
  absl::Status s = WriteAll(fd, data);
  if (s.ok() && ::fsync(fd) != 0) s = ErrnoStatus(absl::StrCat("fsync ", tmp));
  if (::close(fd) != 0 && s.ok()) s = ErrnoStatus(absl::StrCat("close ", tmp));
  if (!s.ok()) return s;
  if (::rename(tmp.c_str(), path_.c_str()) != 0) {
    return ErrnoStatus(absl::StrCat("rename ", tmp, " -> ", path_));
  }
  // The rename is durable only once the directory entry is.
  int dfd = ::open(DirOf(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace gradstream::coordinator
