// The transport-security flags every gradstream daemon takes (gs_shard,
// gs_coordinator, gs_worker); the CLI takes the same names through its own
// parser. See rpc.h.
//
//   --tls_cert=PEM --tls_key=PEM   this process's certificate and key
//   --tls_ca=PEM                   CA that signs the peers (servers: require
//                                  client certificates, i.e. mutual TLS)
//   --auth_token_file=F            cluster token ([auth tokens])
//   --keepalive_time, --keepalive_timeout   frozen-peer detection
#ifndef GRADSTREAM_COMMON_RPC_FLAGS_H_
#define GRADSTREAM_COMMON_RPC_FLAGS_H_

#include "absl/status/statusor.h"
#include "common/rpc/rpc.h"

namespace gradstream::rpc {

// The config the flags (and their environment fallbacks) describe, loaded.
absl::StatusOr<RpcConfig> RpcConfigFromFlags();

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_FLAGS_H_
