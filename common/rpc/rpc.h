// How every gradstream process talks gRPC: transport security (TLS, mutual
// TLS), bearer tokens, keepalive and message limits, in one place so that the
// shard, coordinator, worker and CLI cannot drift apart.
//
// NOTE: [auth tokens] Two kinds of token travel as `authorization: Bearer T`
// metadata. The *cluster token* (--auth_token_file) admits a process to the
// control plane: every coordinator RPC and the shards' unary calls need it
// when it is configured. The *job token* is minted by the coordinator for each
// job and handed to the job's shards (CreateJob); each worker it assigns
// gets a *worker token* derived from it for that worker and incarnation
// alone (Assignment; common/rpc/worker_token.h [worker tokens]). A shard
// admits a Session stream for job J only with J's token or the worker token
// of the Hello's worker and incarnation. So a worker of job A cannot push
// into or pull from job B, nor speak as another member of A, and
// nothing needs to be configured for that isolation to hold. The checks run
// in the handlers, once per call or stream (a Session is long-lived), not in
// a grpc::AuthMetadataProcessor: gRPC never invokes one on insecure
// credentials, and the embedded demo still runs insecure.
#ifndef GRADSTREAM_COMMON_RPC_RPC_H_
#define GRADSTREAM_COMMON_RPC_RPC_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/channel_arguments.h"

namespace gradstream::rpc {

// PEM files. A server needs cert + key; with `ca` it also requires and
// verifies client certificates (mutual TLS). A client needs `ca` to verify
// servers; with cert + key it presents them (for an mTLS server).
struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
};

// Everything a process needs to open or accept gRPC connections.
struct RpcConfig {
  TlsFiles tls;
  // The cluster token ([auth tokens]); empty = the control plane is open.
  std::string auth_token;
  // A connection whose peer has not answered an HTTP/2 PING within
  // keepalive_time + keepalive_timeout is closed: a frozen (SIGSTOPped) or
  // partitioned peer is noticed even on an idle stream.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // Receive/send limit per message; 1 MiB fp32 chunks fit with room.
  int max_message_bytes = 8 << 20;

  // Built from `tls` by LoadConfig; null = insecure (the default). The
  // server's are null too for a TLS client without a certificate of its own.
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials;
  std::shared_ptr<grpc::ServerCredentials> server_credentials;
};

// What a user sets, by flag or environment, before anything is loaded.
struct RpcSettings {
  std::string tls_cert, tls_key, tls_ca;
  std::string auth_token_file;
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
};

// A loaded config from `settings`; each empty path falls back to its
// environment variable (GRADSTREAM_TLS_CERT, GRADSTREAM_TLS_KEY,
// GRADSTREAM_TLS_CA, GRADSTREAM_AUTH_TOKEN_FILE) so a deployment sets them
// once for every process. Errors as LoadConfig.
absl::StatusOr<RpcConfig> BuildConfig(RpcSettings settings);

// Reads a token file (surrounding whitespace stripped). InvalidArgument when
// it is empty, NotFound when it cannot be read.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// Fills config->auth_token from `token_file` when set, and builds the
// credentials from config->tls: reads every PEM file now, so a typo fails at
// start-up with the path in the message instead of at the first handshake.
// InvalidArgument for an unreadable or non-PEM file, or cert without key.
absl::Status LoadConfig(const std::string& token_file, RpcConfig* config);

// Applies credentials, keepalive and message limits and adds the listening
// port. `what` names the process in the warning logged when it runs insecure.
// InvalidArgument when TLS is on but the config has no server certificate.
absl::Status ConfigureServer(const RpcConfig& config, const std::string& address,
                             const std::string& what, grpc::ServerBuilder* builder,
                             int* bound_port);

// A channel to `address` with the config's credentials, keepalive and
// message limits on top of `args`. Never null.
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const RpcConfig& config,
                                          grpc::ChannelArguments args = {});

// Adds `authorization: Bearer token` to an outgoing call (nothing if empty).
void AttachToken(grpc::ClientContext* context, absl::string_view token);

// The bearer token of an incoming call; empty when it carries none.
std::string PresentedToken(const grpc::ServerContextBase& context);

// Ok when `expected` is empty (no token configured) or equals `presented`
// (compared in constant time). Unauthenticated otherwise, with a message
// that says which token `what` needs and never echoes either token.
absl::Status CheckToken(absl::string_view expected, absl::string_view presented,
                        absl::string_view what);

// Constant-time equality of two tokens.
bool TokensEqual(absl::string_view a, absl::string_view b);

// 128 random bits as 32 hex characters, from the OS's entropy source.
std::string NewToken();

}  // namespace gradstream::rpc

#endif  // GRADSTREAM_COMMON_RPC_RPC_H_
