// The one place where absl::Status and grpc::Status meet. The two share the
// canonical code numbering, so conversion is a cast plus the message.
#ifndef GRADSTREAM_COMMON_GRPC_UTIL_H_
#define GRADSTREAM_COMMON_GRPC_UTIL_H_

#include <string>

#include "absl/status/status.h"
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

}  // namespace gradstream

#endif  // GRADSTREAM_COMMON_GRPC_UTIL_H_
