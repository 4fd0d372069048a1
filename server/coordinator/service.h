// The Coordinator gRPC service: a thin adapter from coordinator.proto to
// Coordinator, counting calls per method and status code.
#ifndef GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_
#define GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_

#include <memory>

#include "common/metrics/metrics.h"
#include "coordinator.grpc.pb.h"
#include "server/coordinator/coordinator.h"

namespace gradstream::coordinator {

// Thread-safe (the Coordinator is). `coordinator` and `metrics` must outlive it.
std::unique_ptr<gradstream::v1::Coordinator::Service> NewCoordinatorService(
    Coordinator* coordinator, metrics::Registry* metrics);

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_SERVICE_H_
