// See flags.h.
#include "common/rpc/flags.h"

#include <string>

#include "absl/flags/flag.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process (env GRADSTREAM_TLS_CERT).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert (env GRADSTREAM_TLS_KEY).");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signs the peers; on a server it also requires client "
          "certificates (mutual TLS) (env GRADSTREAM_TLS_CA).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the cluster token for control-plane calls "
          "(env GRADSTREAM_AUTH_TOKEN_FILE); empty = unauthenticated.");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Seconds(10),
          "Ping a silent peer after this long.");
ABSL_FLAG(absl::Duration, keepalive_timeout, absl::Seconds(5),
          "Close a connection whose peer did not answer a ping within this.");

namespace gradstream::rpc {

absl::StatusOr<RpcConfig> RpcConfigFromFlags() {
  RpcSettings s;
  s.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  s.tls_key = absl::GetFlag(FLAGS_tls_key);
  s.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  s.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  s.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  s.keepalive_timeout = absl::GetFlag(FLAGS_keepalive_timeout);
  return BuildConfig(std::move(s));
}

}  // namespace gradstream::rpc
