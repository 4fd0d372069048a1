// The Coordinator gRPC service: the token check and a count per method and
// status code around CoordinatorApi.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_SERVICE_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_SERVICE_H_

#include <memory>
#include <string>

#include "common/metrics/metrics.h"
#include "coordinator.grpc.pb.h"
#include "server/coordinator/coordinator_metrics.h"
#include "server/coordinator/rpc/coordinator_api.h"

namespace gradstream::coordinator {

// Thread-safe (the api is). `api` and `metrics` must outlive it. With a non-empty `auth_token`
// every call must carry it (the cluster token of common/rpc/rpc.h [auth tokens]) or gets
// UNAUTHENTICATED.
std::unique_ptr<gradstream::v1::Coordinator::Service> NewCoordinatorService(
    CoordinatorApi* api, metrics::Registry* metrics, const std::string& auth_token = "");

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_SERVICE_H_
