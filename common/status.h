// Status helpers shared by every gradstream component.
//
// Abseil 20220623 (Debian 12) has no status_macros.h, so the two macros every
// codebase ends up writing live here. Conversion to and from grpc::Status
// lives in common/grpc_util.h so that code without gRPC (the codec library,
// fuzzers) does not pull it in.
#ifndef GRADSTREAM_COMMON_STATUS_H_
#define GRADSTREAM_COMMON_STATUS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GS_STATUS_CONCAT_INNER_(a, b) a##b
#define GS_STATUS_CONCAT_(a, b) GS_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define GS_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::absl::Status gs_status_ = (expr);          \
    if (!gs_status_.ok()) return gs_status_;     \
  } while (0)

// GS_ASSIGN_OR_RETURN(auto x, Foo()); -- returns Foo()'s status on error.
#define GS_ASSIGN_OR_RETURN(lhs, expr) \
  GS_ASSIGN_OR_RETURN_IMPL_(GS_STATUS_CONCAT_(gs_statusor_, __LINE__), lhs, expr)
#define GS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = std::move(tmp).value()

#endif  // GRADSTREAM_COMMON_STATUS_H_
