// The Coordinator gRPC service: a thin adapter from coordinator.proto to
// Coordinator, counting calls per method and status code.
#ifndef GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_
#define GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_

#include <memory>
#include <string>

#include "common/metrics/metrics.h"
#include "coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/coordinator_metrics.h"

namespace gradstream::coordinator {

// Thread-safe (the Coordinator is). `coordinator` and `metrics` must outlive
// it. With a non-empty `auth_token` every call must carry it (the cluster
// token of common/rpc/rpc.h [auth tokens]) or gets UNAUTHENTICATED.
std::unique_ptr<gradstream::v1::Coordinator::Service> NewCoordinatorService(
    Coordinator* coordinator, metrics::Registry* metrics, const std::string& auth_token = "");

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_
