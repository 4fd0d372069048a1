// See rpc.h.
#include "common/rpc/rpc.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "grpcpp/create_channel.h"

namespace gradstream::rpc {
namespace {

constexpr char kAuthHeader[] = "authorization";
constexpr char kBearer[] = "Bearer ";

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": cannot read '", path, "'"));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string pem = ss.str();
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": '", path, "' is not a PEM file"));
  }
  return pem;
}

struct Pems {
  std::string cert, key, ca;
};

absl::StatusOr<Pems> LoadPems(const TlsFiles& tls) {
  if (tls.cert.empty() != tls.key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: pass both or neither");
  }
  Pems p;
  if (!tls.cert.empty()) {
    auto cert = ReadPem(tls.cert, "tls_cert");
    if (!cert.ok()) return cert.status();
    auto key = ReadPem(tls.key, "tls_key");
    if (!key.ok()) return key.status();
    p.cert = *std::move(cert);
    p.key = *std::move(key);
  }
  if (!tls.ca.empty()) {
    auto ca = ReadPem(tls.ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    p.ca = *std::move(ca);
  }
  return p;
}

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(ss.str()));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  }
  return token;
}

absl::Status LoadConfig(const std::string& token_file, RpcConfig* config) {
  if (!token_file.empty()) {
    auto token = ReadTokenFile(token_file);
    if (!token.ok()) return token.status();
    config->auth_token = *std::move(token);
  }
  config->channel_credentials = nullptr;
  config->server_credentials = nullptr;
  if (!config->tls.enabled()) return absl::OkStatus();
  auto pems = LoadPems(config->tls);
  if (!pems.ok()) return pems.status();
  grpc::SslCredentialsOptions client;
  client.pem_root_certs = pems->ca;
  client.pem_private_key = pems->key;
  client.pem_cert_chain = pems->cert;
  config->channel_credentials = grpc::SslCredentials(client);
  if (!pems->cert.empty()) {
    grpc::SslServerCredentialsOptions server(
        pems->ca.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                         : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    server.pem_root_certs = pems->ca;
    server.pem_key_cert_pairs.push_back({pems->key, pems->cert});
    config->server_credentials = grpc::SslServerCredentials(server);
  }
  if (config->channel_credentials == nullptr ||
      (!pems->cert.empty() && config->server_credentials == nullptr)) {
    return absl::InvalidArgumentError("gRPC refused the TLS files");
  }
  return absl::OkStatus();
}

absl::StatusOr<RpcConfig> BuildConfig(RpcSettings settings) {
  auto env = [](std::string* value, const char* name) {
    const char* v = std::getenv(name);
    if (value->empty() && v != nullptr) *value = v;
  };
  env(&settings.tls_cert, "GRADSTREAM_TLS_CERT");
  env(&settings.tls_key, "GRADSTREAM_TLS_KEY");
  env(&settings.tls_ca, "GRADSTREAM_TLS_CA");
  env(&settings.auth_token_file, "GRADSTREAM_AUTH_TOKEN_FILE");
  if (settings.keepalive_time <= absl::ZeroDuration() ||
      settings.keepalive_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--keepalive_time and --keepalive_timeout must be > 0");
  }
  RpcConfig config;
  config.tls = {settings.tls_cert, settings.tls_key, settings.tls_ca};
  config.keepalive_time = settings.keepalive_time;
  config.keepalive_timeout = settings.keepalive_timeout;
  if (absl::Status s = LoadConfig(settings.auth_token_file, &config); !s.ok()) return s;
  return config;
}

absl::Status ConfigureServer(const RpcConfig& config, const std::string& address,
                             const std::string& what, grpc::ServerBuilder* builder,
                             int* bound_port) {
  std::shared_ptr<grpc::ServerCredentials> creds = config.server_credentials;
  if (creds == nullptr) {
    if (config.tls.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a TLS server needs --tls_cert and --tls_key"));
    }
    creds = grpc::InsecureServerCredentials();
  }
  if (!config.tls.enabled()) {
    LOG(WARNING) << what << ": INSECURE: plaintext gRPC on " << address
                 << " (pass --tls_cert/--tls_key, and --tls_ca for mutual TLS)";
  } else {
    LOG(INFO) << what << ": TLS on " << address
              << (config.tls.ca.empty() ? "" : " (client certificates required)");
  }
  if (config.auth_token.empty()) {
    LOG(WARNING) << what << ": no --auth_token_file: control-plane calls are not authenticated";
  }
  builder->AddListeningPort(address, creds, bound_port);
  builder->SetMaxReceiveMessageSize(config.max_message_bytes);
  builder->SetMaxSendMessageSize(config.max_message_bytes);
  // Ping idle clients too, and let clients ping as often as they are
  // configured to (the default policy would answer their keepalive pings
  // with GOAWAY "too_many_pings").
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                              static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time)));
  builder->AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_timeout)));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time) / 2));
  return absl::OkStatus();
}

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address, const RpcConfig& config,
                                          grpc::ChannelArguments args) {
  args.SetMaxReceiveMessageSize(config.max_message_bytes);
  args.SetMaxSendMessageSize(config.max_message_bytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(config.keepalive_timeout)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel(
      address,
      config.channel_credentials ? config.channel_credentials : grpc::InsecureChannelCredentials(),
      args);
}

void AttachToken(grpc::ClientContext* context, absl::string_view token) {
  if (token.empty()) return;
  context->AddMetadata(kAuthHeader, absl::StrCat(kBearer, token));
}

std::string PresentedToken(const grpc::ServerContextBase& context) {
  const auto& md = context.client_metadata();
  auto it = md.find(kAuthHeader);
  if (it == md.end()) return "";
  absl::string_view v(it->second.data(), it->second.size());
  if (!absl::StartsWith(v, kBearer)) return "";
  return std::string(v.substr(sizeof(kBearer) - 1));
}

bool TokensEqual(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::Status CheckToken(absl::string_view expected, absl::string_view presented,
                        absl::string_view what) {
  if (expected.empty()) return absl::OkStatus();
  if (presented.empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, " needs credentials: no bearer token in the call's metadata"));
  }
  if (!TokensEqual(expected, presented)) {
    return absl::UnauthenticatedError(absl::StrCat(what, ": the bearer token is not valid"));
  }
  return absl::OkStatus();
}

std::string NewToken() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  CHECK_GE(fd, 0) << "cannot open /dev/urandom";
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::read(fd, bytes + got, sizeof(bytes) - got);
    CHECK_GT(n, 0) << "cannot read /dev/urandom";
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace gradstream::rpc
