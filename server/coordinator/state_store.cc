// The state file as a durable record; see state_store.h.
#include "server/coordinator/state_store.h"

#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/env/record.h"
#include "zlib.h"

namespace gradstream::coordinator {

namespace {

constexpr RecordFormat kFormat{"coordinator state", "GSCOORDS", 1};

// See [legacy state file].
constexpr std::string_view kLegacyMagic = "GSCOORD1";
constexpr size_t kLegacyHeader = kLegacyMagic.size() + 8 + 4;

absl::StatusOr<std::string_view> LegacyPayload(const std::string& path, std::string_view data) {
  if (data.size() < kLegacyHeader) {
    return absl::DataLossError(absl::StrCat(path, ": truncated legacy state header"));
  }
  uint64_t len = 0;  // little-endian, like the host (x86-64, aarch64)
  uint32_t crc = 0;
  std::memcpy(&len, data.data() + kLegacyMagic.size(), 8);
  std::memcpy(&crc, data.data() + kLegacyMagic.size() + 8, 4);
  if (data.size() - kLegacyHeader != len) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated (", data.size() - kLegacyHeader, " of ", len, " bytes)"));
  }
  const std::string_view body = data.substr(kLegacyHeader);
  const uLong actual =
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  if (actual != crc) return absl::DataLossError(absl::StrCat(path, ": checksum mismatch"));
  return body;
}

}  // namespace

absl::StatusOr<gradstream::v1::CoordinatorState> StateStore::Load() const {
  absl::StatusOr<std::string> data = env_->ReadFile(path_);
  if (absl::IsNotFound(data.status())) {
    return absl::NotFoundError(absl::StrCat("no state file at ", path_));
  }
  if (!data.ok()) return data.status();
  const bool legacy = std::string_view(*data).substr(0, kLegacyMagic.size()) == kLegacyMagic;
  const absl::StatusOr<std::string_view> body =
      legacy ? LegacyPayload(path_, *data) : DecodeRecord(kFormat, path_, *data);
  if (!body.ok()) return body.status();
  gradstream::v1::CoordinatorState state;
  if (!state.ParseFromArray(body->data(), static_cast<int>(body->size()))) {
    return absl::DataLossError(absl::StrCat(path_, ": unparsable state"));
  }
  return state;
}

absl::Status StateStore::Save(const gradstream::v1::CoordinatorState& state) const {
  std::string body;
  if (!state.SerializeToString(&body)) return absl::InternalError("cannot serialize state");
  return env_->WriteFileAtomically(path_, EncodeRecord(kFormat, body));
}

}  // namespace gradstream::coordinator
