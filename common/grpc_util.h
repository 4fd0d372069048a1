// The one place where absl::Status meets its wire forms: grpc::Status, and
// the (int32 code, string message) pair the shard protocol carries in Ack,
// PullAnswer and StreamError. All share the canonical code numbering, so
// conversion is a cast plus the message.
#ifndef GRADSTREAM_COMMON_GRPC_UTIL_H_
#define GRADSTREAM_COMMON_GRPC_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace gradstream {

inline grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// Writes `s` into a message with set_code/set_message (Ack, PullAnswer,
// StreamError); OK is code 0 and an empty message.
template <typename WireMessage>
void StatusToWire(const absl::Status& s, WireMessage* m) {
  m->set_code(static_cast<int32_t>(s.code()));
  m->set_message(std::string(s.message()));
}

// The status a peer sent as (code, message). A code outside the canonical
// range (a newer or hostile peer) becomes kUnknown rather than a value no
// absl::StatusCode names.
inline absl::Status StatusFromWire(int32_t code, absl::string_view message) {
  if (code == 0) return absl::OkStatus();
  if (code < 0 || code > static_cast<int32_t>(absl::StatusCode::kUnauthenticated)) {
    return absl::UnknownError(std::string(message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_GRPC_UTIL_H_
