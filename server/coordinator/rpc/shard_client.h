// The gRPC ShardClient: the shards' control RPCs over ps.proto.
#ifndef GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CLIENT_H_
#define GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CLIENT_H_

#include <memory>

#include "absl/time/time.h"
#include "common/rpc/rpc.h"
#include "server/coordinator/shard_client.h"

namespace gradstream::coordinator {

// One cached channel per address and `deadline` per call; channels use
// `config`'s credentials and every call carries its cluster token.
std::unique_ptr<ShardClient> NewGrpcShardClient(absl::Duration deadline,
                                                const rpc::RpcConfig& config = {});

}  // namespace gradstream::coordinator

#endif  // GRADSTREAM_SERVER_COORDINATOR_RPC_SHARD_CLIENT_H_
